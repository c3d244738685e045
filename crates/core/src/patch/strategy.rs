//! Patch strategies and merge keys of list and map fields: the `patchStrategy`/`patchMergeKey`
//! struct tags of upstream's Go types, which strategic merge patch and the OpenAPI extensions
//! `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` both need.
//!
//! The table mirrors the struct tags in
//! `k8s.io/api/{core,apps,batch,autoscaling,policy,admissionregistration}/…/types.go`
//! and `k8s.io/apimachinery/pkg/apis/meta/v1/types.go` (Kubernetes 1.32/1.33). Fields that are
//! not listed have no tag: their lists are replaced atomically and their maps merged.

/// How a field merges in a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldStrategy {
    /// `merge`, `replace`, `retainKeys` or `merge,retainKeys`, as upstream writes it.
    pub strategy: &'static str,
    /// For lists of objects merged by key: the key field (`name`, `containerPort`, …).
    pub merge_key: Option<&'static str>,
}

impl FieldStrategy {
    /// Whether the list is merged (by key for objects, as a set for primitives) rather than
    /// replaced; `retainKeys` alone does not merge lists.
    pub fn merges(&self) -> bool {
        self.strategy.split(',').any(|s| s == "merge")
    }

    /// Whether the strategy includes `retainKeys` (upstream `extractRetainKeysPatchStrategy`).
    pub fn retains_keys(&self) -> bool {
        self.strategy.split(',').any(|s| s == "retainKeys")
    }
}

const MERGE: &str = "merge";
const MERGE_RETAIN: &str = "merge,retainKeys";
const RETAIN: &str = "retainKeys";

const CORE: &str = "io.k8s.api.core.v1.";
const APPS: &str = "io.k8s.api.apps.v1.";
const BATCH: &str = "io.k8s.api.batch.v1.";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// `(definition suffix after its group prefix, field, strategy, merge key)`, grouped by prefix.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

const CORE_ROWS: &[Row] = &[
    // PodSpec
    ("PodSpec", "volumes", MERGE_RETAIN, Some("name")),
    ("PodSpec", "initContainers", MERGE, Some("name")),
    ("PodSpec", "containers", MERGE, Some("name")),
    ("PodSpec", "ephemeralContainers", MERGE, Some("name")),
    ("PodSpec", "imagePullSecrets", MERGE, Some("name")),
    ("PodSpec", "hostAliases", MERGE, Some("ip")),
    (
        "PodSpec",
        "topologySpreadConstraints",
        MERGE,
        Some("topologyKey"),
    ),
    ("PodSpec", "schedulingGates", MERGE, Some("name")),
    ("PodSpec", "resourceClaims", MERGE_RETAIN, Some("name")),
    // Container and EphemeralContainer (which inlines EphemeralContainerCommon)
    ("Container", "ports", MERGE, Some("containerPort")),
    ("Container", "env", MERGE, Some("name")),
    ("Container", "volumeMounts", MERGE, Some("mountPath")),
    ("Container", "volumeDevices", MERGE, Some("devicePath")),
    ("EphemeralContainer", "ports", MERGE, Some("containerPort")),
    ("EphemeralContainer", "env", MERGE, Some("name")),
    (
        "EphemeralContainer",
        "volumeMounts",
        MERGE,
        Some("mountPath"),
    ),
    (
        "EphemeralContainer",
        "volumeDevices",
        MERGE,
        Some("devicePath"),
    ),
    // PodStatus
    ("PodStatus", "conditions", MERGE, Some("type")),
    ("PodStatus", "podIPs", MERGE, Some("ip")),
    ("PodStatus", "hostIPs", MERGE, Some("ip")),
    (
        "PodStatus",
        "resourceClaimStatuses",
        MERGE_RETAIN,
        Some("name"),
    ),
    // Node
    ("NodeSpec", "podCIDRs", MERGE, None),
    ("NodeStatus", "conditions", MERGE, Some("type")),
    ("NodeStatus", "addresses", MERGE, Some("type")),
    // Service
    ("ServiceSpec", "ports", MERGE, Some("port")),
    ("ServiceStatus", "conditions", MERGE, Some("type")),
    // ServiceAccount
    ("ServiceAccount", "secrets", MERGE, Some("name")),
    // Conditions of other core kinds
    (
        "ReplicationControllerStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    ("NamespaceStatus", "conditions", MERGE, Some("type")),
    (
        "PersistentVolumeClaimStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    ("ComponentStatus", "conditions", MERGE, Some("type")),
];

const APPS_ROWS: &[Row] = &[
    ("DeploymentSpec", "strategy", RETAIN, None),
    ("DeploymentStatus", "conditions", MERGE, Some("type")),
    ("ReplicaSetStatus", "conditions", MERGE, Some("type")),
    ("DaemonSetStatus", "conditions", MERGE, Some("type")),
    ("StatefulSetStatus", "conditions", MERGE, Some("type")),
];

const BATCH_ROWS: &[Row] = &[("JobStatus", "conditions", MERGE, Some("type"))];

const META_ROWS: &[Row] = &[
    ("ObjectMeta", "finalizers", MERGE, None),
    ("ObjectMeta", "ownerReferences", MERGE, Some("uid")),
];

/// Definitions outside the four groups above, by full name.
const OTHER_ROWS: &[Row] = &[
    // admissionregistration.k8s.io/v1: webhooks, match conditions and variables merge by name.
    (
        "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
        "webhooks",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
        "webhooks",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingWebhook",
        "matchConditions",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.admissionregistration.v1.MutatingWebhook",
        "matchConditions",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "matchConditions",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
        "variables",
        MERGE,
        Some("name"),
    ),
    (
        "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (
        "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
];

/// The strategy of `field` in the OpenAPI definition `definition` (e.g.
/// `("io.k8s.api.core.v1.PodSpec", "containers")`), or `None` when the field has no special strategy
/// (lists are then replaced atomically, maps merged).
///
/// Mirrors the struct tags upstream reads with `forkedjson.LookupPatchMetadata` (and publishes as
/// `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key`).
pub fn lookup(definition: &str, field: &str) -> Option<FieldStrategy> {
    let (rows, short) = if let Some(s) = definition.strip_prefix(CORE) {
        (CORE_ROWS, s)
    } else if let Some(s) = definition.strip_prefix(APPS) {
        (APPS_ROWS, s)
    } else if let Some(s) = definition.strip_prefix(BATCH) {
        (BATCH_ROWS, s)
    } else if let Some(s) = definition.strip_prefix(META) {
        (META_ROWS, s)
    } else {
        (OTHER_ROWS, definition)
    };
    rows.iter()
        .find(|(d, f, _, _)| *d == short && *f == field)
        .map(|&(_, _, strategy, merge_key)| FieldStrategy {
            strategy,
            merge_key,
        })
}

/// The keys server-side apply identifies the items of an associative list by
/// (`+listType=map` with `+listMapKey` in upstream's types), when they are more than the single
/// strategic-merge key: container ports are keyed by `containerPort` and `protocol`, service ports
/// by `port` and `protocol`. Other keyed lists use [`lookup`]'s merge key.
pub fn list_map_keys(definition: &str, field: &str) -> Option<&'static [&'static str]> {
    const PORT_PROTOCOL: &[&str] = &["port", "protocol"];
    const CONTAINER_PORT_PROTOCOL: &[&str] = &["containerPort", "protocol"];
    const TOPOLOGY: &[&str] = &["topologyKey", "whenUnsatisfiable"];
    let short = definition.strip_prefix(CORE)?;
    match (short, field) {
        ("ServiceSpec", "ports") => Some(PORT_PROTOCOL),
        ("Container" | "EphemeralContainer", "ports") => Some(CONTAINER_PORT_PROTOCOL),
        ("PodSpec", "topologySpreadConstraints") => Some(TOPOLOGY),
        _ => None,
    }
}

/// Whether a whole object of this definition is owned and replaced as one value by server-side
/// apply (`+structType=atomic` upstream), like a `LabelSelector`.
pub fn is_atomic_struct(definition: &str) -> bool {
    matches!(
        definition,
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"
            | "io.k8s.api.core.v1.NodeSelector"
            | "io.k8s.api.core.v1.ObjectReference"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_lookup_matches_upstream_tags() {
        type Case = (
            &'static str,
            &'static str,
            Option<(&'static str, Option<&'static str>)>,
        );
        let cases: &[Case] = &[
            (
                "io.k8s.api.core.v1.PodSpec",
                "containers",
                Some(("merge", Some("name"))),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "volumes",
                Some(("merge,retainKeys", Some("name"))),
            ),
            (
                "io.k8s.api.core.v1.PodSpec",
                "hostAliases",
                Some(("merge", Some("ip"))),
            ),
            ("io.k8s.api.core.v1.PodSpec", "tolerations", None),
            (
                "io.k8s.api.core.v1.Container",
                "ports",
                Some(("merge", Some("containerPort"))),
            ),
            ("io.k8s.api.core.v1.Container", "resizePolicy", None),
            ("io.k8s.api.core.v1.Container", "args", None),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "finalizers",
                Some(("merge", None)),
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "ownerReferences",
                Some(("merge", Some("uid"))),
            ),
            (
                "io.k8s.api.apps.v1.DeploymentSpec",
                "strategy",
                Some(("retainKeys", None)),
            ),
            ("io.k8s.api.core.v1.EndpointSubset", "addresses", None),
            (
                "io.k8s.api.policy.v1.PodDisruptionBudgetStatus",
                "conditions",
                Some(("merge", Some("type"))),
            ),
            ("nonsense", "", None),
        ];
        for (def, field, want) in cases {
            let got = lookup(def, field).map(|s| (s.strategy, s.merge_key));
            assert_eq!(got, *want, "{def}.{field}");
        }
    }

    #[test]
    fn strategy_flags_split_combined_strategies() {
        let volumes = lookup("io.k8s.api.core.v1.PodSpec", "volumes");
        assert!(volumes.is_some_and(|s| s.merges() && s.retains_keys()));
        let strategy = lookup("io.k8s.api.apps.v1.DeploymentSpec", "strategy");
        assert!(strategy.is_some_and(|s| !s.merges() && s.retains_keys()));
    }
}
