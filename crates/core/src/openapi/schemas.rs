//! The schema definitions behind every OpenAPI document: one JSON schema per upstream definition
//! name (`io.k8s.api.core.v1.Pod`), generated from `k8s-openapi`'s `schemars` implementations and
//! post-processed into the shape kube-openapi publishes in `/openapi/v3`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, autoscaling, batch, certificates,
    coordination, core, discovery, events, networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
use schemars::generate::SchemaSettings;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::patch::strategy;
use crate::registry::split_api_version;

/// Where OpenAPI v3 documents keep their schemas; every `$ref` in [`definitions`] starts with it.
pub const V3_REF_PREFIX: &str = "#/components/schemas/";

pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";
const GMSA: &str = "io.k8s.windows.v1.GMSACredentialSpec";

/// A kind whose schema comes from a `k8s-openapi` type: its apiVersion, kind, and a function adding
/// the type's schema (and everything it references) to a generator.
struct TypedKind {
    api_version: &'static str,
    kind: &'static str,
    add: fn(&mut SchemaGenerator) -> Schema,
    /// Whether `<Kind>List` is published too (true for every served resource).
    list: bool,
}

macro_rules! typed_kinds {
    ($($av:literal $kind:literal => $ty:ty, list: $list:literal;)*) => {
        &[$(TypedKind { api_version: $av, kind: $kind, add: |g| g.subschema_for::<$ty>(), list: $list }),*]
    };
}

/// Every kind with a typed schema: the served resources (see `registry/builtin.rs`) and the
/// kinds their subresources and errors speak (Status, Scale, Binding, Eviction, TokenRequest).
/// The create-only review kinds have no `<Kind>List`, as upstream publishes none.
const TYPED_KINDS: &[TypedKind] = typed_kinds! {
    "v1" "Namespace" => core::v1::Namespace, list: true;
    "v1" "Pod" => core::v1::Pod, list: true;
    "v1" "Node" => core::v1::Node, list: true;
    "v1" "Service" => core::v1::Service, list: true;
    "v1" "Endpoints" => core::v1::Endpoints, list: true;
    "v1" "ConfigMap" => core::v1::ConfigMap, list: true;
    "v1" "Secret" => core::v1::Secret, list: true;
    "v1" "ServiceAccount" => core::v1::ServiceAccount, list: true;
    "v1" "Event" => core::v1::Event, list: true;
    "v1" "ReplicationController" => core::v1::ReplicationController, list: true;
    "v1" "PersistentVolumeClaim" => core::v1::PersistentVolumeClaim, list: true;
    "v1" "PersistentVolume" => core::v1::PersistentVolume, list: true;
    "v1" "LimitRange" => core::v1::LimitRange, list: true;
    "v1" "ResourceQuota" => core::v1::ResourceQuota, list: true;
    "v1" "PodTemplate" => core::v1::PodTemplate, list: true;
    "apps/v1" "Deployment" => apps::v1::Deployment, list: true;
    "apps/v1" "ReplicaSet" => apps::v1::ReplicaSet, list: true;
    "apps/v1" "DaemonSet" => apps::v1::DaemonSet, list: true;
    "apps/v1" "StatefulSet" => apps::v1::StatefulSet, list: true;
    "apps/v1" "ControllerRevision" => apps::v1::ControllerRevision, list: true;
    "batch/v1" "Job" => batch::v1::Job, list: true;
    "batch/v1" "CronJob" => batch::v1::CronJob, list: true;
    "node.k8s.io/v1" "RuntimeClass" => node::v1::RuntimeClass, list: true;
    "coordination.k8s.io/v1" "Lease" => coordination::v1::Lease, list: true;
    "discovery.k8s.io/v1" "EndpointSlice" => discovery::v1::EndpointSlice, list: true;
    "events.k8s.io/v1" "Event" => events::v1::Event, list: true;
    "networking.k8s.io/v1" "Ingress" => networking::v1::Ingress, list: true;
    "networking.k8s.io/v1" "IngressClass" => networking::v1::IngressClass, list: true;
    "networking.k8s.io/v1" "NetworkPolicy" => networking::v1::NetworkPolicy, list: true;
    "policy/v1" "PodDisruptionBudget" => policy::v1::PodDisruptionBudget, list: true;
    "autoscaling/v2" "HorizontalPodAutoscaler" => autoscaling::v2::HorizontalPodAutoscaler, list: true;
    "autoscaling/v1" "HorizontalPodAutoscaler" => autoscaling::v1::HorizontalPodAutoscaler, list: true;
    "scheduling.k8s.io/v1" "PriorityClass" => scheduling::v1::PriorityClass, list: true;
    "storage.k8s.io/v1" "StorageClass" => storage::v1::StorageClass, list: true;
    "storage.k8s.io/v1" "CSIDriver" => storage::v1::CSIDriver, list: true;
    "storage.k8s.io/v1" "CSINode" => storage::v1::CSINode, list: true;
    "storage.k8s.io/v1" "VolumeAttachment" => storage::v1::VolumeAttachment, list: true;
    "storage.k8s.io/v1" "CSIStorageCapacity" => storage::v1::CSIStorageCapacity, list: true;
    "apiregistration.k8s.io/v1" "APIService" => apiregistration::v1::APIService, list: true;
    "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" => admissionregistration::v1::MutatingWebhookConfiguration, list: true;
    "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" => admissionregistration::v1::ValidatingAdmissionPolicy, list: true;
    "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicyBinding" => admissionregistration::v1::ValidatingAdmissionPolicyBinding, list: true;
    "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" => admissionregistration::v1::ValidatingWebhookConfiguration, list: true;
    "authentication.k8s.io/v1" "SelfSubjectReview" => authentication::v1::SelfSubjectReview, list: false;
    "authentication.k8s.io/v1" "TokenReview" => authentication::v1::TokenReview, list: false;
    "authorization.k8s.io/v1" "LocalSubjectAccessReview" => authorization::v1::LocalSubjectAccessReview, list: false;
    "authorization.k8s.io/v1" "SelfSubjectAccessReview" => authorization::v1::SelfSubjectAccessReview, list: false;
    "authorization.k8s.io/v1" "SelfSubjectRulesReview" => authorization::v1::SelfSubjectRulesReview, list: false;
    "authorization.k8s.io/v1" "SubjectAccessReview" => authorization::v1::SubjectAccessReview, list: false;
    "certificates.k8s.io/v1" "CertificateSigningRequest" => certificates::v1::CertificateSigningRequest, list: true;
    "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => rbac::v1::ClusterRoleBinding, list: true;
    "apiextensions.k8s.io/v1" "CustomResourceDefinition" => k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition, list: true;
    "rbac.authorization.k8s.io/v1" "ClusterRole" => rbac::v1::ClusterRole, list: true;
    "rbac.authorization.k8s.io/v1" "RoleBinding" => rbac::v1::RoleBinding, list: true;
    "rbac.authorization.k8s.io/v1" "Role" => rbac::v1::Role, list: true;
    "v1" "Status" => meta::Status, list: false;
    "v1" "Binding" => core::v1::Binding, list: false;
    "autoscaling/v1" "Scale" => autoscaling::v1::Scale, list: false;
    "policy/v1" "Eviction" => policy::v1::Eviction, list: false;
    "authentication.k8s.io/v1" "TokenRequest" => authentication::v1::TokenRequest, list: false;
};

/// The built definitions and the index from group-version-kind to definition name.
struct Catalog {
    definitions: BTreeMap<String, Value>,
    /// `(apiVersion, kind)` → definition name.
    by_kind: BTreeMap<(String, String), String>,
}

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(build)
}

/// Every schema definition the API server publishes, keyed by upstream definition name
/// (`io.k8s.api.core.v1.PodSpec`), built once on first use.
///
/// The set is closed: every `$ref` (always of the form `#/components/schemas/<name>`) names another
/// entry. It holds the served kinds and their `<Kind>List`s, everything they reference, `Status`,
/// `DeleteOptions`, `WatchEvent`, `Patch`, the subresource kinds (`autoscaling/v1` `Scale`,
/// `Binding`, `policy/v1` `Eviction`, `authentication.k8s.io/v1` `TokenRequest`) and the
/// hand-written `windows.k8s.io/v1`
/// `GMSACredentialSpec`. Shaped as kube-openapi publishes OpenAPI v3:
///
/// - top-level kinds carry `x-kubernetes-group-version-kind: [{group, version, kind}]`
///   (`DeleteOptions` and `WatchEvent` one entry per served group-version, as upstream);
/// - a `$ref` with a description beside it is written `{"allOf": [{"$ref": …}], "description": …}`;
/// - properties with a strategic-merge-patch strategy (from [`crate::patch::strategy::lookup`])
///   carry `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`;
/// - `metadata` is never `required` (k8s-openapi's types make it so; upstream does not).
pub fn definitions() -> &'static BTreeMap<String, Value> {
    &catalog().definitions
}

/// The definition name of the object an `apiVersion`/`kind` pair denotes: `("v1", "Pod")` →
/// `io.k8s.api.core.v1.Pod`, `("apps/v1", "DeploymentList")` → `io.k8s.api.apps.v1.DeploymentList`.
/// `None` for kinds not published.
pub fn root_definition(api_version: &str, kind: &str) -> Option<&'static str> {
    catalog()
        .by_kind
        .get(&(api_version.to_string(), kind.to_string()))
        .map(String::as_str)
}

/// The definition name a `$ref` points at, for refs into `#/components/schemas/`.
pub(crate) fn ref_target(reference: &str) -> Option<&str> {
    reference.strip_prefix(V3_REF_PREFIX)
}

/// `{"$ref": "#/components/schemas/<name>"}`.
pub(crate) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{V3_REF_PREFIX}{name}") })
}

fn gvk_value(api_version: &str, kind: &str) -> Value {
    let (group, version) = split_api_version(api_version);
    json!({ "group": group, "kind": kind, "version": version })
}

fn build() -> Catalog {
    let mut generator = SchemaSettings::openapi3()
        .with(|s| {
            // Normalisation is done below, by hand, so the output does not depend on which
            // transforms a schemars release applies.
            s.transforms.clear();
            s.meta_schema = None;
        })
        .into_generator();

    // (definition name, apiVersion, kind) of every top-level kind.
    let mut kinds: Vec<(String, String, String)> = Vec::new();
    let mut lists: Vec<(String, String, String)> = Vec::new();
    for typed in TYPED_KINDS {
        let reference = (typed.add)(&mut generator);
        let name = reference
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(ref_target)
            .expect("k8s-openapi resource types are named (non-inlined) schemas")
            .to_string();
        if typed.list {
            lists.push((
                name.clone(),
                typed.api_version.to_string(),
                typed.kind.to_string(),
            ));
        }
        kinds.push((name, typed.api_version.to_string(), typed.kind.to_string()));
    }
    generator.subschema_for::<meta::ListMeta>();
    generator.subschema_for::<meta::DeleteOptions>();
    generator.subschema_for::<RawExtension>();

    let mut definitions: BTreeMap<String, Value> =
        generator.take_definitions(false).into_iter().collect();
    definitions.insert(GMSA.to_string(), gmsa_credential_spec());
    kinds.push((
        GMSA.to_string(),
        "windows.k8s.io/v1".to_string(),
        "GMSACredentialSpec".to_string(),
    ));
    lists.push((
        GMSA.to_string(),
        "windows.k8s.io/v1".to_string(),
        "GMSACredentialSpec".to_string(),
    ));
    for (name, kind, schema) in metrics_definitions() {
        if kind != "ContainerMetrics" {
            kinds.push((name.clone(), METRICS_API.to_string(), kind.to_string()));
            lists.push((name.clone(), METRICS_API.to_string(), kind.to_string()));
        }
        definitions.insert(name, schema);
    }
    definitions.insert(PATCH.to_string(), patch_definition());
    definitions.insert(WATCH_EVENT.to_string(), watch_event_definition());

    for (item, api_version, kind) in &lists {
        let list_name = format!("{item}List");
        definitions.insert(list_name.clone(), list_definition(item, kind));
        kinds.push((list_name, api_version.clone(), format!("{kind}List")));
    }

    // DeleteOptions and WatchEvent are one schema for every group-version, as upstream.
    let mut group_versions: Vec<String> = vec!["v1".to_string()];
    for (_, api_version, _) in &kinds {
        if !group_versions.contains(api_version) {
            group_versions.push(api_version.clone());
        }
    }
    for api_version in &group_versions {
        kinds.push((
            DELETE_OPTIONS.to_string(),
            api_version.clone(),
            "DeleteOptions".to_string(),
        ));
        kinds.push((
            WATCH_EVENT.to_string(),
            api_version.clone(),
            "WatchEvent".to_string(),
        ));
    }

    for (name, schema) in definitions.iter_mut() {
        wrap_described_refs(schema);
        drop_required_metadata(schema);
        add_patch_extensions(name, schema);
    }

    let mut by_kind = BTreeMap::new();
    for (name, api_version, kind) in kinds {
        let schema = definitions
            .get_mut(&name)
            .expect("every published kind was just generated");
        let object = schema
            .as_object_mut()
            .expect("kind schemas are JSON objects");
        let gvks = object
            .entry("x-kubernetes-group-version-kind")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(gvks) = gvks {
            gvks.push(gvk_value(&api_version, &kind));
        }
        by_kind.insert((api_version, kind), name);
    }

    Catalog {
        definitions,
        by_kind,
    }
}

/// Rewrites every `{"$ref": r, <siblings>}` into `{"allOf": [{"$ref": r}], <siblings>}`, the form
/// kube-openapi publishes in v3 (a `$ref`'s siblings are ignored by OpenAPI 3.0 tools) and the one
/// `kubectl explain` (`explain/v2/templates/plaintext.tmpl`, "typeGuess"/"output") and
/// `strategicpatch.PatchMetaFromOpenAPIV3` walk.
fn wrap_described_refs(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for child in object.values_mut() {
                wrap_described_refs(child);
            }
            // A `$ref` key whose value is not a string is a property named `$ref` (in
            // JSONSchemaProps' `properties`), not a reference.
            if object.len() > 1
                && object.get("$ref").is_some_and(Value::is_string)
                && let Some(reference) = object.remove("$ref")
            {
                object.insert("allOf".to_string(), json!([{ "$ref": reference }]));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(wrap_described_refs),
        _ => {}
    }
}

/// k8s-openapi's types hold `metadata` unconditionally and so list it as required; upstream's
/// definitions never require it (`kubectl explain` would print `-required-`).
fn drop_required_metadata(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let references_meta = object
        .get("properties")
        .and_then(|p| p.get("metadata"))
        .is_some_and(|m| {
            let text = m.to_string();
            text.contains(OBJECT_META) || text.contains(LIST_META)
        });
    if !references_meta {
        return;
    }
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| r != "metadata");
        if required.is_empty() {
            object.remove("required");
        }
    }
}

/// Adds `x-kubernetes-patch-strategy`/`x-kubernetes-patch-merge-key` to each property that has a
/// strategic-merge-patch strategy.
fn add_patch_extensions(definition: &str, schema: &mut Value) {
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for (field, property) in properties.iter_mut() {
        let Some(found) = strategy::lookup(definition, field) else {
            continue;
        };
        let Some(property) = property.as_object_mut() else {
            continue;
        };
        if let Some(key) = found.merge_key {
            property.insert("x-kubernetes-patch-merge-key".to_string(), Value::from(key));
        }
        property.insert(
            "x-kubernetes-patch-strategy".to_string(),
            Value::from(found.strategy),
        );
    }
}

/// `apiVersion` and `kind`, as upstream's `TypeMeta` describes them.
pub(super) fn type_meta_properties() -> Map<String, Value> {
    let mut properties = Map::new();
    properties.insert(
        "apiVersion".to_string(),
        json!({
            "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
            "type": "string",
        }),
    );
    properties.insert(
        "kind".to_string(),
        json!({
            "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            "type": "string",
        }),
    );
    properties
}

/// The `metadata` property of a kind: an `ObjectMeta`, described as upstream's
/// `PartialObjectMetadata` describes it.
pub(super) fn object_metadata_property() -> Value {
    json!({
        "allOf": [schema_ref(OBJECT_META)],
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    })
}

/// The `metadata` property of a `<Kind>List`: a `ListMeta`, described as upstream's
/// `PartialObjectMetadataList` describes it.
pub(super) fn list_metadata_property() -> Value {
    json!({
        "allOf": [schema_ref(LIST_META)],
        "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
    })
}

/// `<Kind>List`, as upstream's generated list types: `items` required, `metadata` a `ListMeta`.
fn list_definition(item: &str, kind: &str) -> Value {
    let mut properties = type_meta_properties();
    properties.insert(
        "items".to_string(),
        json!({
            "description": format!("List of {kind} objects."),
            "type": "array",
            "items": schema_ref(item),
        }),
    );
    properties.insert("metadata".to_string(), list_metadata_property());
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "properties": properties,
        "required": ["items"],
    })
}

/// `io.k8s.apimachinery.pkg.apis.meta.v1.Patch`: the opaque request body of PATCH operations.
fn patch_definition() -> Value {
    json!({
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
        "type": "object",
    })
}

/// `io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent` (k8s-openapi's is generic and has no schema).
fn watch_event_definition() -> Value {
    json!({
        "description": "Event represents a single event to a watched resource.",
        "type": "object",
        "properties": {
            "object": {
                "allOf": [schema_ref(RAW_EXTENSION)],
                "description": "Object is:\n * If Type is Added or Modified: the new state of the object.\n * If Type is Deleted: the state of the object immediately before deletion.\n * If Type is Error: *Status is recommended; other types may make sense\n   depending on context.",
            },
            "type": { "type": "string" },
        },
        "required": ["type", "object"],
    })
}

const METRICS_API: &str = "metrics.k8s.io/v1beta1";
const METRICS_PREFIX: &str = "io.k8s.metrics.pkg.apis.metrics.v1beta1.";

/// `metrics.k8s.io/v1beta1` `NodeMetrics`, `PodMetrics` and their `ContainerMetrics`, named and
/// shaped as metrics-server publishes them.
fn metrics_definitions() -> Vec<(String, &'static str, Value)> {
    let usage = json!({
        "description": "The memory and CPU usage.",
        "type": "object",
        "additionalProperties": schema_ref("io.k8s.apimachinery.pkg.api.resource.Quantity"),
    });
    let timestamp = json!({
        "description": "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp].",
        "allOf": [schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.Time")],
    });
    let window = json!({"type": "string"});
    let object = |description: &str, extra: &[(&str, Value)]| {
        let mut properties = type_meta_properties();
        properties.insert("metadata".to_string(), object_metadata_property());
        properties.insert("timestamp".to_string(), timestamp.clone());
        properties.insert("window".to_string(), window.clone());
        for (name, schema) in extra {
            properties.insert(name.to_string(), schema.clone());
        }
        json!({"description": description, "type": "object", "properties": properties})
    };
    let container = format!("{METRICS_PREFIX}ContainerMetrics");
    vec![
        (
            format!("{METRICS_PREFIX}NodeMetrics"),
            "NodeMetrics",
            object(
                "NodeMetrics sets resource usage metrics of a node.",
                &[("usage", usage.clone())],
            ),
        ),
        (
            format!("{METRICS_PREFIX}PodMetrics"),
            "PodMetrics",
            object(
                "PodMetrics sets resource usage metrics of a pod.",
                &[(
                    "containers",
                    json!({
                        "description": "Metrics for all containers are collected within the same time window.",
                        "type": "array",
                        "items": schema_ref(&container),
                    }),
                )],
            ),
        ),
        (
            container,
            "ContainerMetrics",
            json!({
                "description": "ContainerMetrics sets resource usage metrics of a container.",
                "type": "object",
                "properties": {
                    "name": {"description": "Container name corresponding to the one from pod.spec.containers.", "type": "string"},
                    "usage": usage,
                },
                "required": ["name", "usage"],
            }),
        ),
    ]
}

/// `windows.k8s.io/v1` `GMSACredentialSpec`, as the upstream windows-gmsa CRD publishes it: a
/// cluster-scoped object whose `credspec` is the JSON credential spec handed to the container
/// runtime. The known members are described, and unknown ones are kept
/// (`x-kubernetes-preserve-unknown-fields`), since the spec's format belongs to Windows.
fn gmsa_credential_spec() -> Value {
    let string = json!({ "type": "string" });
    let mut properties = type_meta_properties();
    properties.insert("metadata".to_string(), object_metadata_property());
    properties.insert(
        "credspec".to_string(),
        json!({
            "description": "GMSA Credential Spec: the JSON credential spec document (as produced by New-CredentialSpec) that Windows container runtimes use to run containers as a group Managed Service Account.",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "ActiveDirectoryConfig": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "GroupManagedServiceAccounts": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": { "Name": string, "Scope": string },
                            },
                        },
                        "HostAccountConfig": {
                            "type": "object",
                            "properties": {
                                "PluginGUID": string,
                                "PluginInput": string,
                                "PortableCcgVersion": string,
                            },
                        },
                    },
                },
                "CmsPlugins": { "type": "array", "items": string },
                "DomainJoinConfig": {
                    "type": "object",
                    "properties": {
                        "DnsName": string,
                        "DnsTreeName": string,
                        "Guid": string,
                        "MachineAccountName": string,
                        "NetBiosName": string,
                        "Sid": string,
                    },
                },
            },
        }),
    );
    json!({
        "description": "GMSACredentialSpec holds a Windows group Managed Service Account credential spec that pods reference by name from securityContext.windowsOptions.gmsaCredentialSpecName.",
        "type": "object",
        "properties": properties,
    })
}

/// Every definition name `value` references through `$ref`.
pub(crate) fn collect_refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                if key == "$ref"
                    && let Some(target) = child.as_str()
                {
                    out.push(target);
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_refs(i, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    /// Checks that the registry and the schemas agree: the served kinds without a definition.
    fn unpublished_kinds(registry: &Registry) -> Vec<String> {
        registry
            .all()
            .iter()
            .filter(|t| root_definition(&t.api_version(), &t.kind).is_none())
            .map(|t| format!("{}/{}", t.api_version(), t.kind))
            .collect()
    }

    #[test]
    fn pod_definition_carries_group_version_kind() {
        let pod = &definitions()["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{ "group": "", "kind": "Pod", "version": "v1" }])
        );
        let deployment = &definitions()["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            deployment["x-kubernetes-group-version-kind"],
            json!([{ "group": "apps", "kind": "Deployment", "version": "v1" }])
        );
    }

    #[test]
    fn root_definition_maps_api_version_and_kind_to_upstream_names() {
        assert_eq!(root_definition("v1", "Pod"), Some("io.k8s.api.core.v1.Pod"));
        assert_eq!(
            root_definition("apps/v1", "Deployment"),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        assert_eq!(
            root_definition("apps/v1", "DeploymentList"),
            Some("io.k8s.api.apps.v1.DeploymentList")
        );
        assert_eq!(
            root_definition("events.k8s.io/v1", "Event"),
            Some("io.k8s.api.events.v1.Event")
        );
        assert_eq!(
            root_definition("windows.k8s.io/v1", "GMSACredentialSpec"),
            Some(GMSA)
        );
        assert_eq!(
            root_definition("autoscaling/v1", "Scale"),
            Some("io.k8s.api.autoscaling.v1.Scale")
        );
        assert_eq!(root_definition("v1", "Status"), Some(STATUS));
        assert_eq!(
            root_definition("apps/v1", "DeleteOptions"),
            Some(DELETE_OPTIONS)
        );
        assert_eq!(root_definition("v1", "Deployment"), None);
    }

    /// Every served kind has a definition, and a `<Kind>List` exactly when it can be listed
    /// (the create-only reviews have none upstream).
    #[test]
    fn every_registered_kind_and_list_has_a_definition() {
        let registry = Registry::builtin();
        assert_eq!(unpublished_kinds(&registry), Vec::<String>::new());
        for t in registry.all() {
            assert_eq!(
                root_definition(&t.api_version(), &t.list_kind()).is_some(),
                t.supports("list"),
                "{}",
                t.list_kind()
            );
        }
        assert_eq!(
            root_definition("rbac.authorization.k8s.io/v1", "ClusterRole"),
            Some("io.k8s.api.rbac.v1.ClusterRole")
        );
        assert_eq!(
            root_definition("authorization.k8s.io/v1", "SubjectAccessReview"),
            Some("io.k8s.api.authorization.v1.SubjectAccessReview")
        );
    }

    #[test]
    fn every_definition_ref_resolves() {
        let defs = definitions();
        for (name, schema) in defs {
            let mut refs = Vec::new();
            collect_refs(schema, &mut refs);
            for r in refs {
                let target =
                    ref_target(r).unwrap_or_else(|| panic!("{name}: ref {r} not into components"));
                assert!(defs.contains_key(target), "{name}: dangling ref {r}");
            }
        }
    }

    #[test]
    fn described_refs_are_wrapped_in_all_of() {
        let spec = &definitions()["io.k8s.api.core.v1.Pod"]["properties"]["spec"];
        assert!(spec.get("$ref").is_none());
        assert_eq!(
            spec["allOf"],
            json!([schema_ref("io.k8s.api.core.v1.PodSpec")])
        );
        assert!(spec["description"].as_str().is_some_and(|d| !d.is_empty()));
        // Plain refs (no siblings) stay plain.
        let items =
            &definitions()["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]["items"];
        assert_eq!(items, &schema_ref("io.k8s.api.core.v1.Container"));
    }

    #[test]
    fn metadata_is_not_required() {
        for name in ["io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodList", GMSA] {
            let required = definitions()[name]
                .get("required")
                .cloned()
                .unwrap_or(json!([]));
            assert!(
                !required
                    .as_array()
                    .expect("test invariant")
                    .contains(&json!("metadata")),
                "{name}"
            );
        }
        assert_eq!(
            definitions()["io.k8s.api.core.v1.PodList"]["required"],
            json!(["items"])
        );
    }

    #[test]
    fn gmsa_credspec_preserves_unknown_fields() {
        let credspec = &definitions()[GMSA]["properties"]["credspec"];
        assert_eq!(
            credspec["x-kubernetes-preserve-unknown-fields"],
            json!(true)
        );
        assert_eq!(credspec["type"], json!("object"));
    }

    #[test]
    fn patch_extensions_follow_strategy_lookup() {
        for (name, schema) in definitions() {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                continue;
            };
            for (field, property) in properties {
                let expected = strategy::lookup(name, field);
                assert_eq!(
                    property
                        .get("x-kubernetes-patch-strategy")
                        .and_then(Value::as_str),
                    expected.map(|s| s.strategy),
                    "{name}.{field}"
                );
                assert_eq!(
                    property
                        .get("x-kubernetes-patch-merge-key")
                        .and_then(Value::as_str),
                    expected.and_then(|s| s.merge_key),
                    "{name}.{field}"
                );
            }
        }
    }
}
