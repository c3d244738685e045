//! What an object costs a ResourceQuota: upstream's quota evaluators
//! (`pkg/quota/v1/evaluator/core`: `pods.go`, `services.go`, `persistent_volume_claims.go`, and
//! `k8s.io/apiserver/pkg/quota/v1/generic`'s object-count evaluator), over JSON objects.
//!
//! Each evaluator knows which quota resource names it tracks (`MatchingResources`), which quota
//! scopes an object falls in (`podMatchesScopeFunc`; other kinds match no scope), the usage one
//! object adds (`Usage`), and for pods the old rule that a quota on cpu or memory requires every
//! container to state it (`Constraints`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::amount::Amount;
use crate::resource::{ResourceAmounts, aggregate_containers};

/// Quota resource names and amounts, in name order (upstream `corev1.ResourceList`).
pub type ResourceList = BTreeMap<String, Amount>;

/// Reads a JSON map of quantities; malformed entries are skipped (validation refuses them).
pub fn resource_list(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, q)| Some((k.clone(), Amount::from_value(q)?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A resource list as JSON, in canonical quantity form.
pub fn to_value(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| (k.clone(), v.to_value()))
            .collect(),
    )
}

/// Upstream `quota.Add`: the sum of two lists, key by key.
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    out.add_amounts(b);
    out
}

/// Upstream `quota.Mask`: the entries of `list` named in `names`.
pub fn mask(list: &ResourceList, names: &BTreeSet<String>) -> ResourceList {
    list.iter()
        .filter(|(k, _)| names.contains(*k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Upstream `quota.Equals`: the same names with the same values.
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// The object-count resource name of a group and resource (`count/pods`,
/// `count/deployments.apps`), upstream `ObjectCountQuotaResourceNameFor`.
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The suffix of per-StorageClass PVC resource names
/// (`gold.storageclass.storage.k8s.io/requests.storage`).
pub const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// Resource names whose quota requires every container to state them (upstream's
/// `validationSet`, kept for backward compatibility).
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

const SERVICE_RESOURCES: &[&str] = &[
    "count/services",
    "services",
    "services.nodeports",
    "services.loadbalancers",
];

/// The legacy aliases of object-count names (upstream `legacyObjectCountAliases`).
fn legacy_alias(group: &str, resource: &str) -> Option<&'static str> {
    if !group.is_empty() {
        return None;
    }
    Some(match resource {
        "configmaps" => "configmaps",
        "resourcequotas" => "resourcequotas",
        "replicationcontrollers" => "replicationcontrollers",
        "secrets" => "secrets",
        _ => return None,
    })
}

/// A quota scope selector: `spec.scopes` entries become `Exists` selectors, followed by
/// `spec.scopeSelector.matchExpressions` (upstream `getScopeSelectorsFromQuota`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSelector {
    pub scope: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// Every scope selector of a quota.
pub fn scope_selectors(quota: &Value) -> Vec<ScopeSelector> {
    let mut out: Vec<ScopeSelector> = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| ScopeSelector {
            scope: s.to_string(),
            operator: "Exists".to_string(),
            values: Vec::new(),
        })
        .collect();
    for e in quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push(ScopeSelector {
            scope: str_at(e, "scopeName").to_string(),
            operator: str_at(e, "operator").to_string(),
            values: e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        });
    }
    out
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Which evaluator measures a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluator {
    /// Core pods: compute resources and the `pods` count of non-terminal pods.
    Pods,
    /// Core services: counts, node ports and load balancers.
    Services,
    /// Core persistent volume claims: counts and requested storage, also per StorageClass.
    PersistentVolumeClaims,
    /// Any other kind: `count/<resource>.<group>` (and the legacy alias of a few core kinds).
    ObjectCount { group: String, resource: String },
}

impl Evaluator {
    /// The evaluator of a group and resource (plural).
    pub fn for_resource(group: &str, resource: &str) -> Evaluator {
        match (group, resource) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::PersistentVolumeClaims,
            _ => Evaluator::ObjectCount {
                group: group.to_string(),
                resource: resource.to_string(),
            },
        }
    }

    /// The group and resource measured.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Evaluator::Pods => ("", "pods"),
            Evaluator::Services => ("", "services"),
            Evaluator::PersistentVolumeClaims => ("", "persistentvolumeclaims"),
            Evaluator::ObjectCount { group, resource } => (group, resource),
        }
    }

    /// Whether an update can change usage (services and claims); creates always can.
    pub fn handles_update(&self) -> bool {
        matches!(
            self,
            Evaluator::Services | Evaluator::PersistentVolumeClaims
        )
    }

    /// Whether the evaluator tracks the quota resource `name` (upstream `MatchingResources`).
    pub fn tracks(&self, name: &str) -> bool {
        match self {
            Evaluator::Pods => {
                POD_RESOURCES.contains(&name)
                    || name.starts_with("hugepages-")
                    || name.starts_with("requests.hugepages-")
                    || (name.starts_with("requests.") && !is_native(name))
            }
            Evaluator::Services => SERVICE_RESOURCES.contains(&name),
            Evaluator::PersistentVolumeClaims => {
                matches!(
                    name,
                    "persistentvolumeclaims" | "count/persistentvolumeclaims" | "requests.storage"
                ) || name
                    .split_once(STORAGE_CLASS_SUFFIX)
                    .is_some_and(|(class, r)| {
                        !class.is_empty()
                            && matches!(r, "requests.storage" | "persistentvolumeclaims")
                    })
            }
            Evaluator::ObjectCount { group, resource } => {
                name == object_count_name(group, resource)
                    || legacy_alias(group, resource) == Some(name)
            }
        }
    }

    /// The names among `names` this evaluator tracks.
    pub fn matching_resources<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Vec<String> {
        names
            .into_iter()
            .filter(|n| self.tracks(n))
            .cloned()
            .collect()
    }

    /// Whether `obj` falls in the scope `sel` selects. Only pods have scopes; every other kind
    /// matches none (upstream `MatchesNoScopeFunc`), so a scoped quota never covers it.
    pub fn matches_scope(&self, sel: &ScopeSelector, obj: &Value) -> bool {
        if *self != Evaluator::Pods {
            return false;
        }
        match sel.scope.as_str() {
            "Terminating" => is_terminating(obj),
            "NotTerminating" => !is_terminating(obj),
            "BestEffort" => is_best_effort(obj),
            "NotBestEffort" => !is_best_effort(obj),
            "PriorityClass" => {
                let class = obj
                    .pointer("/spec/priorityClassName")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty());
                match sel.operator.as_str() {
                    "Exists" => class.is_some(),
                    "DoesNotExist" => class.is_none(),
                    "In" => class.is_some_and(|c| sel.values.iter().any(|v| v == c)),
                    "NotIn" => class.is_none_or(|c| !sel.values.iter().any(|v| v == c)),
                    _ => false,
                }
            }
            "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(obj),
            _ => false,
        }
    }

    /// Whether `quota` covers `obj`: it limits something this evaluator tracks, and `obj` is in
    /// every one of its scopes (upstream `generic.Matches`). Reads `status.hard`.
    pub fn matches(&self, quota: &Value, obj: &Value) -> bool {
        let hard = resource_list(quota.pointer("/status/hard"));
        hard.keys().any(|k| self.tracks(k))
            && scope_selectors(quota)
                .iter()
                .all(|s| self.matches_scope(s, obj))
    }

    /// The usage one object adds. `now` (Unix seconds) decides whether a pod being deleted is
    /// past its grace period.
    pub fn usage(&self, obj: &Value, now: i64) -> ResourceList {
        let one = Amount::from_units(1);
        let mut out = ResourceList::new();
        match self {
            Evaluator::Pods => {
                out.insert("count/pods".into(), one);
                if pod_is_charged(obj, now) {
                    let requests = pod_requests(obj, true);
                    let limits = pod_limits(obj, true);
                    out = add(&out, &compute_usage(&requests, &limits));
                }
            }
            Evaluator::Services => {
                out.insert("count/services".into(), one);
                out.insert("services".into(), one);
                let ports = obj
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let n = |count: usize| Amount::from_units(i64::try_from(count).unwrap_or(i64::MAX));
                match obj.pointer("/spec/type").and_then(Value::as_str) {
                    Some("NodePort") => {
                        out.insert("services.nodeports".into(), n(ports.len()));
                    }
                    Some("LoadBalancer") => {
                        let allocate = obj
                            .pointer("/spec/allocateLoadBalancerNodePorts")
                            .and_then(Value::as_bool)
                            != Some(false);
                        let count = if allocate {
                            ports.len()
                        } else {
                            ports
                                .iter()
                                .filter(|p| {
                                    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0
                                })
                                .count()
                        };
                        out.insert("services.nodeports".into(), n(count));
                        out.insert("services.loadbalancers".into(), one);
                    }
                    _ => {}
                }
            }
            Evaluator::PersistentVolumeClaims => {
                out.insert("count/persistentvolumeclaims".into(), one);
                out.insert("persistentvolumeclaims".into(), one);
                let class = obj
                    .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
                    .and_then(Value::as_str)
                    .or_else(|| {
                        obj.pointer("/spec/storageClassName")
                            .and_then(Value::as_str)
                    })
                    .filter(|c| !c.is_empty());
                if let Some(class) = class {
                    out.insert(
                        format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
                        one,
                    );
                }
                let requested = obj
                    .pointer("/spec/resources/requests/storage")
                    .and_then(Amount::from_value);
                let allocated = obj
                    .pointer("/status/allocatedResources/storage")
                    .and_then(Amount::from_value);
                let storage = match (requested, allocated) {
                    (Some(r), Some(a)) => Some(r.max(a)),
                    (r, a) => r.or(a),
                };
                if let Some(storage) = storage {
                    out.insert("requests.storage".into(), storage);
                    if let Some(class) = class {
                        out.insert(
                            format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                            storage,
                        );
                    }
                }
            }
            Evaluator::ObjectCount { group, resource } => {
                out.insert(object_count_name(group, resource), one);
                if let Some(alias) = legacy_alias(group, resource) {
                    out.insert(alias.into(), one);
                }
            }
        }
        out
    }

    /// Upstream `podEvaluator.Constraints`: when a quota limits cpu or memory (requests or
    /// limits), every container and init container must state it. The error reads
    /// `must specify requests.cpu for: a,b; requests.memory for: a`.
    pub fn constraints(&self, required: &[String], obj: &Value) -> Result<(), String> {
        if *self != Evaluator::Pods {
            return Ok(());
        }
        let required: BTreeSet<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| MUST_SPECIFY.contains(r))
            .collect();
        if required.is_empty() {
            return Ok(());
        }
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for c in containers(obj, &["containers", "initContainers"]) {
            let usage = compute_usage(
                &resource_list(c.pointer("/resources/requests")),
                &resource_list(c.pointer("/resources/limits")),
            );
            for r in &required {
                if !usage.contains_key(*r) {
                    missing
                        .entry(r)
                        .or_default()
                        .insert(str_at(c, "name").to_string());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(r, names)| {
                format!(
                    "{r} for: {}",
                    names.iter().cloned().collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }
}

/// Upstream `helper.IsNativeResource`: no domain, or a `kubernetes.io/` one.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Upstream `podComputeUsageHelper`: the quota names a pod's (or container's) requests and
/// limits charge.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert("pods".into(), Amount::from_units(1));
    for (res, names) in [
        ("cpu", ["cpu", "requests.cpu"]),
        ("memory", ["memory", "requests.memory"]),
        (
            "ephemeral-storage",
            ["ephemeral-storage", "requests.ephemeral-storage"],
        ),
    ] {
        if let Some(q) = requests.get(res) {
            for n in names {
                out.insert(n.into(), *q);
            }
        }
        if let Some(q) = limits.get(res) {
            out.insert(format!("limits.{res}"), *q);
        }
    }
    for (res, q) in requests {
        if res.starts_with("hugepages-") {
            out.insert(res.clone(), *q);
            out.insert(format!("requests.{res}"), *q);
        }
        if !is_native(res) && !res.starts_with("requests.") {
            out.insert(format!("requests.{res}"), *q);
        }
    }
    out
}

/// The containers of the pod spec lists named, in order.
fn containers<'a>(pod: &'a Value, lists: &[&str]) -> Vec<&'a Value> {
    lists
        .iter()
        .flat_map(|l| {
            pod.pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .collect()
}

/// Upstream `QuotaV1Pod`: a pod is charged compute resources unless it has finished
/// (`Succeeded`/`Failed`) or is being deleted and its grace period has passed.
pub fn pod_is_charged(pod: &Value, now: i64) -> bool {
    if matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    if let (Some(deleted), Some(grace)) = (
        pod.pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(crate::table::parse_rfc3339),
        pod.pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64),
    ) && now > deleted.saturating_add(grace)
    {
        return false;
    }
    true
}

/// Quota's lists go through the shared container arithmetic with their exact amounts: a sum
/// takes the format of its first non-zero operand and a tie keeps the amount already there, as
/// upstream's `quota.Add` and `quota.Max` do.
impl ResourceAmounts for ResourceList {
    fn add_amounts(&mut self, other: &Self) {
        for (k, v) in other {
            let sum = self.get(k).copied().unwrap_or(Amount::ZERO) + *v;
            self.insert(k.clone(), sum);
        }
    }
    fn max_amounts(&mut self, other: &Self) {
        for (k, v) in other {
            let m = self.get(k).map_or(*v, |cur| cur.max(*v));
            self.insert(k.clone(), m);
        }
    }
}

/// One resource field (`requests` or `limits`) summed over a pod's containers by
/// `resource::aggregate_containers`, as the kubelet and scheduler sum them.
fn aggregate(pod: &Value, field: &str) -> ResourceList {
    let of = |c: &Value| resource_list(c.pointer(&format!("/resources/{field}")));
    aggregate_containers(
        containers(pod, &["containers"]).into_iter().map(of),
        containers(pod, &["initContainers"]).into_iter().map(|c| {
            let restartable = c.get("restartPolicy").and_then(Value::as_str) == Some("Always");
            (of(c), restartable)
        }),
    )
}

/// The requests of a pod (upstream `PodRequests`), with its RuntimeClass overhead when
/// `with_overhead`.
pub fn pod_requests(pod: &Value, with_overhead: bool) -> ResourceList {
    let reqs = aggregate(pod, "requests");
    if with_overhead {
        add(&reqs, &resource_list(pod.pointer("/spec/overhead")))
    } else {
        reqs
    }
}

/// The limits of a pod (upstream `PodLimits`); overhead is added only to resources that have
/// a limit.
pub fn pod_limits(pod: &Value, with_overhead: bool) -> ResourceList {
    let mut limits = aggregate(pod, "limits");
    if with_overhead {
        for (k, v) in resource_list(pod.pointer("/spec/overhead")) {
            if let Some(cur) = limits.get(&k).copied() {
                limits.insert(k, cur + v);
            }
        }
    }
    limits
}

/// Upstream `isTerminating`: `activeDeadlineSeconds` is set (and not negative).
fn is_terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|d| d >= 0)
}

/// Upstream `qos.GetPodQOS(pod) == BestEffort`: no container requests or limits cpu or memory.
pub fn is_best_effort(pod: &Value) -> bool {
    let sets_compute = |list: Option<&Value>| {
        resource_list(list)
            .iter()
            .any(|(k, v)| matches!(k.as_str(), "cpu" | "memory") && v.nanos() > 0)
    };
    let pod_level = sets_compute(pod.pointer("/spec/resources/requests"))
        || sets_compute(pod.pointer("/spec/resources/limits"));
    !pod_level
        && containers(pod, &["containers", "initContainers"])
            .iter()
            .all(|c| {
                !sets_compute(c.pointer("/resources/requests"))
                    && !sets_compute(c.pointer("/resources/limits"))
            })
}

/// Upstream `usesCrossNamespacePodAffinity`: a pod (anti-)affinity term names namespaces or a
/// namespace selector.
fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |t: &Value| {
        t.get("namespaces")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
            || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let Some(a) = pod.pointer(&format!("/spec/affinity/{kind}")) else {
            return false;
        };
        let required = a
            .get("requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(cross);
        let preferred = a
            .get("preferredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.get("podAffinityTerm"))
            .any(cross);
        required || preferred
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers}})
    }

    fn shown(list: &ResourceList) -> BTreeMap<String, String> {
        list.iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    }

    #[test]
    fn pod_usage_counts_requests_limits_and_the_pod() {
        let p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}
        ]));
        let u = shown(&Evaluator::Pods.usage(&p, 0));
        assert_eq!(u["pods"], "1");
        assert_eq!(u["count/pods"], "1");
        assert_eq!(u["requests.cpu"], "500m");
        assert_eq!(u["cpu"], "500m");
        assert_eq!(u["requests.memory"], "128Mi");
        assert_eq!(u["limits.cpu"], "500m");
        assert!(!u.contains_key("limits.memory"));
    }

    #[test]
    fn finished_pods_keep_only_their_object_count() {
        let mut p = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
        p["status"] = json!({"phase": "Succeeded"});
        let u = shown(&Evaluator::Pods.usage(&p, 0));
        assert_eq!(u.len(), 1);
        assert_eq!(u["count/pods"], "1");
    }

    #[test]
    fn pods_deleted_past_their_grace_period_are_not_charged() {
        let mut p = pod(json!([{"name": "a"}]));
        p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let at = crate::table::parse_rfc3339("2024-01-01T00:00:00Z").expect("time");
        assert!(pod_is_charged(&p, at + 30));
        assert!(!pod_is_charged(&p, at + 31));
    }

    #[test]
    fn init_containers_count_at_their_peak_and_sidecars_add_up() {
        let p = json!({"spec": {
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]
        }});
        // The init container runs beside the sidecar: 2 + 100m beats 500m + 100m.
        assert_eq!(shown(&pod_requests(&p, false))["cpu"], "2100m");
    }

    #[test]
    fn overhead_adds_to_requests_and_only_to_the_limits_a_pod_sets() {
        let p = json!({"spec": {
            "initContainers": [{"name": "init", "resources": {"requests": {"memory": "1Gi"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1"}}}],
            "overhead": {"cpu": "50m", "memory": "16Mi"}
        }});
        let requests = shown(&pod_requests(&p, true));
        assert_eq!(requests["cpu"], "300m");
        // The init container's peak beats the steady state; the overhead goes on top.
        assert_eq!(requests["memory"], "1040Mi");
        assert_eq!(shown(&pod_requests(&p, false))["memory"], "1Gi");
        let limits = shown(&pod_limits(&p, true));
        assert_eq!(limits["cpu"], "1050m");
        assert!(!limits.contains_key("memory"));
    }

    #[test]
    fn quota_on_cpu_requires_every_container_to_request_it() {
        let p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "1"}}},
            {"name": "b"},
            {"name": "c"}
        ]));
        let err = Evaluator::Pods
            .constraints(&["requests.cpu".into(), "pods".into()], &p)
            .expect_err("missing requests");
        assert_eq!(err, "must specify requests.cpu for: b,c");
        assert!(Evaluator::Pods.constraints(&["pods".into()], &p).is_ok());
    }

    #[test]
    fn scopes_select_pods_by_qos_deadline_and_priority_class() {
        let best = pod(json!([{"name": "a"}]));
        let mut burst = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
        burst["spec"]["activeDeadlineSeconds"] = json!(10);
        burst["spec"]["priorityClassName"] = json!("high");
        let sel = |scope: &str, op: &str, values: &[&str]| ScopeSelector {
            scope: scope.into(),
            operator: op.into(),
            values: values.iter().map(|s| s.to_string()).collect(),
        };
        let e = Evaluator::Pods;
        assert!(e.matches_scope(&sel("BestEffort", "Exists", &[]), &best));
        assert!(!e.matches_scope(&sel("BestEffort", "Exists", &[]), &burst));
        assert!(e.matches_scope(&sel("NotBestEffort", "Exists", &[]), &burst));
        assert!(e.matches_scope(&sel("Terminating", "Exists", &[]), &burst));
        assert!(e.matches_scope(&sel("NotTerminating", "Exists", &[]), &best));
        assert!(e.matches_scope(&sel("PriorityClass", "In", &["high"]), &burst));
        assert!(!e.matches_scope(&sel("PriorityClass", "In", &["high"]), &best));
        assert!(e.matches_scope(&sel("PriorityClass", "NotIn", &["high"]), &best));
        // Other kinds are in no scope.
        assert!(!Evaluator::Services.matches_scope(&sel("NotBestEffort", "Exists", &[]), &best));
    }

    #[test]
    fn services_charge_node_ports_and_load_balancers() {
        let svc = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}});
        let u = shown(&Evaluator::Services.usage(&svc, 0));
        assert_eq!(u["services"], "1");
        assert_eq!(u["services.nodeports"], "2");
        assert_eq!(u["services.loadbalancers"], "1");
        let cluster_ip = json!({"spec": {"ports": [{"port": 80}]}});
        assert!(
            !Evaluator::Services
                .usage(&cluster_ip, 0)
                .contains_key("services.nodeports")
        );
    }

    #[test]
    fn claims_charge_storage_to_their_class() {
        let pvc = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "5Gi"}}}});
        let u = shown(&Evaluator::PersistentVolumeClaims.usage(&pvc, 0));
        assert_eq!(u["requests.storage"], "5Gi");
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/requests.storage"],
            "5Gi"
        );
        assert_eq!(
            u["gold.storageclass.storage.k8s.io/persistentvolumeclaims"],
            "1"
        );
        assert!(
            Evaluator::PersistentVolumeClaims
                .tracks("gold.storageclass.storage.k8s.io/requests.storage")
        );
    }

    #[test]
    fn object_counts_use_count_names_and_legacy_aliases() {
        let e = Evaluator::for_resource("", "configmaps");
        let u = shown(&e.usage(&json!({}), 0));
        assert_eq!(u["count/configmaps"], "1");
        assert_eq!(u["configmaps"], "1");
        let d = Evaluator::for_resource("apps", "deployments");
        assert!(d.tracks("count/deployments.apps"));
        assert!(!d.tracks("count/deployments"));
    }
}
