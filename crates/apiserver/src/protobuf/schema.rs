//! The protobuf schema of every Kubernetes message, joined with the JSON names of its fields.
//!
//! Tags, wire types and message references come from the `k8s-pb` bindings (read by
//! `build.rs` into `MESSAGES`). JSON names come from tandem's OpenAPI definitions, which are the
//! upstream JSON names: a proto field `podIP` becomes the Rust field `pod_ip`, and only the
//! definition says it is `podIP` again. Fields of messages no definition describes fall back to
//! lowerCamelCase of the Rust name, with the few spellings that rule gets wrong for those
//! messages (`$ref`, `x-kubernetes-…`) written out.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

/// A field's element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    String,
    Int32,
    Int64,
    Bool,
    Bytes,
    Double,
    /// Index into [`MESSAGES`].
    Message(usize),
}

/// Singular, repeated, or a map from strings to the given value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Single,
    Repeated,
    Map(Ty),
}

pub(crate) struct FieldDef {
    pub tag: u32,
    /// The Rust field name of the binding (`pod_ip`, `type`).
    pub rust: &'static str,
    pub ty: Ty,
    pub shape: Shape,
}

pub(crate) struct MessageDef {
    /// The binding's module path, dotted: `api.core.v1`, `apimachinery.pkg.apis.meta.v1`.
    pub package: &'static str,
    /// The binding's struct name (`Pod`, `CsiDriver`: prost's spelling of `CSIDriver`).
    pub name: &'static str,
    pub fields: &'static [FieldDef],
}

include!(concat!(env!("OUT_DIR"), "/pb_schema.rs"));

/// Messages whose JSON form is not an object of their fields (upstream's custom marshallers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    None,
    /// `metav1.Time`: `{seconds, nanos}` ↔ `"2006-01-02T15:04:05Z"`.
    Time,
    /// `metav1.MicroTime`: as Time, with microseconds in JSON.
    MicroTime,
    /// `metav1.Duration`: nanoseconds ↔ Go's duration string (`"1h0m0s"`).
    Duration,
    /// `resource.Quantity`: `{string}` ↔ `"100m"`.
    Quantity,
    /// `intstr.IntOrString`: `{type, intVal, strVal}` ↔ `8080` or `"http"`.
    IntOrString,
    /// `runtime.RawExtension`, `metav1.FieldsV1`, apiextensions' `JSON`: raw JSON bytes ↔ any
    /// JSON value.
    RawJson,
    /// A named Go slice (`ExtraValue`): `{items: [...]}` ↔ `[...]`.
    Items,
    /// `JSONSchemaPropsOrArray`: a schema, or an array of schemas.
    SchemaOrArray,
    /// `JSONSchemaPropsOrBool`: a schema, or a boolean.
    SchemaOrBool,
    /// `JSONSchemaPropsOrStringArray`: a schema, or an array of strings.
    SchemaOrStringArray,
}

/// One field with its JSON name.
pub(crate) struct Field {
    pub def: &'static FieldDef,
    pub json: String,
    /// Whether a zero value (`0`, `false`, `""`) decoded from the wire is written to JSON.
    /// Go writes every non-pointer field on the wire, and `encoding/json` drops its zero when
    /// the field is `omitempty`; only the fields it always writes (the definition's
    /// `required`) and pointers whose zero means something ([`ZERO_MEANS_SOMETHING`]) keep it.
    pub keep_zero: bool,
    /// A Go struct embedded in its parent with `json:",inline"` (`Volume.volumeSource`,
    /// `Probe.handler`, `IngressRule.ingressRuleValue`): a field on the wire, but its fields
    /// sit in the parent's JSON object.
    pub inline: bool,
}

/// Optional pointer fields (`*int32`, `*bool`, `*string` in upstream's Go types) whose zero
/// value differs from leaving them unset, because the unset value defaults to something else
/// (`replicas` to 1, `automountServiceAccountToken` to true, `gracePeriodSeconds` to the
/// pod's) or because zero is a real setting (`runAsUser: 0`, `tolerationSeconds: 0`,
/// `storageClassName: ""`). Matched by JSON name in any message.
const ZERO_MEANS_SOMETHING: &[&str] = &[
    "replicas",
    "minReplicas",
    "revisionHistoryLimit",
    "progressDeadlineSeconds",
    "parallelism",
    "completions",
    "backoffLimit",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "activeDeadlineSeconds",
    "ttlSecondsAfterFinished",
    "successfulJobsHistoryLimit",
    "failedJobsHistoryLimit",
    "startingDeadlineSeconds",
    "terminationGracePeriodSeconds",
    "gracePeriodSeconds",
    "orphanDependents",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "shareProcessNamespace",
    "hostUsers",
    "setHostnameAsFQDN",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "defaultMode",
    "mode",
    "optional",
    "allocateLoadBalancerNodePorts",
    "priority",
    "tolerationSeconds",
    "leaseDurationSeconds",
    "leaseTransitions",
    "ready",
    "serving",
    "terminating",
    "immutable",
    "expirationSeconds",
    "suspend",
    "manualSelector",
    "storageClassName",
];

/// One message, ready for transcoding.
pub(crate) struct Message {
    pub def: &'static MessageDef,
    pub special: Special,
    /// In tag order.
    pub fields: Vec<Field>,
    /// Index into `fields` by tag ([`NO_FIELD`] for tags the message lacks): Kubernetes
    /// numbers fields from 1 without large gaps, so a table beats hashing on every field read.
    by_tag: Vec<u16>,
    /// Indices into `fields` of the fields that are not inlined, by a hash of their JSON name
    /// (open addressing, [`NO_FIELD`] for an empty slot; the length a power of two at least
    /// twice the fields'): the encoder looks an object's keys up here.
    by_json: Vec<u16>,
}

const NO_FIELD: u16 = u16::MAX;

impl Message {
    pub fn field_by_tag(&self, tag: u32) -> Option<&Field> {
        let i = *self.by_tag.get(usize::try_from(tag).ok()?)?;
        self.fields.get(usize::from(i))
    }

    /// The index in `fields` of the non-inlined field with this JSON name.
    pub fn field_index_by_json(&self, json: &str) -> Option<usize> {
        let mask = self.by_json.len().checked_sub(1)?;
        let mut slot = name_hash(json) & mask;
        loop {
            let i = usize::from(self.by_json[slot]);
            let field = self.fields.get(i)?;
            if field.json == json {
                return Some(i);
            }
            slot = (slot + 1) & mask;
        }
    }
}

/// FNV-1a of a field name: names are short, and this costs less than hashing them with
/// SipHash or comparing them along a binary search.
fn name_hash(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h as usize
}

/// The open-addressing table of [`Message::by_json`] for these fields.
fn json_table(fields: &[Field]) -> Vec<u16> {
    let mut table = vec![NO_FIELD; (fields.len() * 2).next_power_of_two().max(2)];
    let mask = table.len() - 1;
    for (i, field) in fields.iter().enumerate() {
        let Ok(index) = u16::try_from(i) else { break };
        if field.inline {
            continue;
        }
        let mut slot = name_hash(&field.json) & mask;
        while table[slot] != NO_FIELD {
            slot = (slot + 1) & mask;
        }
        table[slot] = index;
    }
    table
}

pub(crate) struct Schema {
    pub messages: Vec<Message>,
    by_package_name: HashMap<(String, String), usize>,
}

/// The schema, built once.
pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(build)
}

/// The upstream definition name of a binding message: `io.k8s.api.core.v1.Pod`,
/// `io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps` (compared
/// without case, as prost respells acronyms).
fn definition_name(def: &MessageDef) -> String {
    let package = match def.package.split_once('.') {
        Some((first, rest)) => format!("{}.{rest}", first.replace('_', "-")),
        None => def.package.replace('_', "-"),
    };
    format!("io.k8s.{package}.{}", def.name)
}

/// Letters and digits only, lower-cased: how a Rust field name and its JSON name meet.
fn normalize(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn fallback_json_name(message: &MessageDef, rust: &str) -> String {
    if let Some(rest) = rust.strip_prefix("x_kubernetes_") {
        return format!("x-kubernetes-{}", rest.replace('_', "-"));
    }
    if message.name == "JsonSchemaProps" && matches!(rust, "ref" | "schema") {
        return format!("${rust}");
    }
    if message.name == "CustomResourceValidation" && rust == "open_apiv3_schema" {
        return "openAPIV3Schema".to_string();
    }
    let mut out = String::with_capacity(rust.len());
    let mut upper = false;
    for c in rust.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn special(def: &MessageDef) -> Special {
    match (def.package, def.name) {
        ("apimachinery.pkg.apis.meta.v1", "Time") => Special::Time,
        ("apimachinery.pkg.apis.meta.v1", "MicroTime") => Special::MicroTime,
        ("apimachinery.pkg.apis.meta.v1", "Duration") => Special::Duration,
        ("apimachinery.pkg.apis.meta.v1", "FieldsV1") => Special::RawJson,
        ("apimachinery.pkg.api.resource", "Quantity") => Special::Quantity,
        ("apimachinery.pkg.util.intstr", "IntOrString") => Special::IntOrString,
        ("apimachinery.pkg.runtime", "RawExtension") => Special::RawJson,
        (_, "Json") if def.package.starts_with("apiextensions_apiserver") => Special::RawJson,
        (_, "JsonSchemaPropsOrArray") => Special::SchemaOrArray,
        (_, "JsonSchemaPropsOrBool") => Special::SchemaOrBool,
        (_, "JsonSchemaPropsOrStringArray") => Special::SchemaOrStringArray,
        _ => match def.fields {
            [only] if only.rust == "items" && only.shape == Shape::Repeated => Special::Items,
            _ => Special::None,
        },
    }
}

fn build() -> Schema {
    let definitions = tandem_core::openapi::definitions();
    let by_lower_name: HashMap<String, &Value> = definitions
        .iter()
        .map(|(name, schema)| (name.to_ascii_lowercase(), schema))
        .collect();
    let mut messages = Vec::with_capacity(MESSAGES.len());
    let mut by_package_name = HashMap::with_capacity(MESSAGES.len());
    for (i, def) in MESSAGES.iter().enumerate() {
        let definition = by_lower_name.get(&definition_name(def).to_ascii_lowercase());
        let required: Vec<&str> = definition
            .and_then(|d| d.get("required"))
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties: HashMap<String, &str> = definition
            .and_then(|d| d.get("properties"))
            .and_then(Value::as_object)
            .map(|props| props.keys().map(|k| (normalize(k), k.as_str())).collect())
            .unwrap_or_default();
        let mut fields: Vec<Field> = def
            .fields
            .iter()
            .map(|f| {
                let json = properties
                    .get(&normalize(f.rust))
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| fallback_json_name(def, f.rust));
                let keep_zero = required.contains(&json.as_str())
                    || ZERO_MEANS_SOMETHING.contains(&json.as_str());
                // A message field the definition has no property for is an inlined struct.
                let inline = !properties.is_empty()
                    && !properties.contains_key(&normalize(f.rust))
                    && f.shape == Shape::Single
                    && matches!(f.ty, Ty::Message(_));
                Field {
                    def: f,
                    json,
                    keep_zero,
                    inline,
                }
            })
            .collect();
        fields.sort_by_key(|f| f.def.tag);
        let max_tag = fields.iter().map(|f| f.def.tag as usize).max().unwrap_or(0);
        let mut by_tag = vec![NO_FIELD; max_tag + 1];
        for (i, f) in fields.iter().enumerate() {
            by_tag[f.def.tag as usize] = u16::try_from(i).unwrap_or(NO_FIELD);
        }
        let by_json = json_table(&fields);
        by_package_name.insert((def.package.to_string(), def.name.to_ascii_lowercase()), i);
        // A message whose only field is `items` is a named Go slice (`ExtraValue`, `Verbs`),
        // a plain array in JSON, unless its definition is an object with an `items` property
        // (`DownwardAPIProjection`).
        let special = match special(def) {
            Special::Items if properties.contains_key("items") => Special::None,
            other => other,
        };
        messages.push(Message {
            def,
            special,
            fields,
            by_tag,
            by_json,
        });
    }
    Schema {
        messages,
        by_package_name,
    }
}

/// Kinds of `meta.k8s.io` that clients send under any group-version (a `DeleteOptions` body
/// of `apps/v1`, say) and that every group answers with (`Status`).
const META_KINDS: &[&str] = &[
    "Status",
    "DeleteOptions",
    "ListOptions",
    "GetOptions",
    "CreateOptions",
    "UpdateOptions",
    "PatchOptions",
    "WatchEvent",
    "PartialObjectMetadata",
    "PartialObjectMetadataList",
    "APIGroup",
    "APIGroupList",
    "APIResourceList",
    "APIVersions",
];

impl Schema {
    /// The message of an object's `apiVersion` and `kind`, if Kubernetes defines one (custom
    /// resources and tandem's own kinds have none).
    pub fn message_for(&self, api_version: &str, kind: &str) -> Option<usize> {
        let (group, version) = tandem_core::registry::split_api_version(api_version);
        let package = if META_KINDS.contains(&kind) {
            "apimachinery.pkg.apis.meta.v1".to_string()
        } else {
            match group {
                "" => format!("api.core.{version}"),
                "apiextensions.k8s.io" => {
                    format!("apiextensions_apiserver.pkg.apis.apiextensions.{version}")
                }
                "apiregistration.k8s.io" => {
                    format!("kube_aggregator.pkg.apis.apiregistration.{version}")
                }
                "metrics.k8s.io" => format!("metrics.pkg.apis.metrics.{version}"),
                "meta.k8s.io" => format!("apimachinery.pkg.apis.meta.{version}"),
                "rbac.authorization.k8s.io" => format!("api.rbac.{version}"),
                other => {
                    let short = other.split('.').next().unwrap_or(other);
                    format!("api.{short}.{version}")
                }
            }
        };
        self.by_package_name
            .get(&(package, kind.to_ascii_lowercase()))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message<'a>(s: &'a Schema, api_version: &str, kind: &str) -> &'a Message {
        let i = s
            .message_for(api_version, kind)
            .unwrap_or_else(|| panic!("{api_version} {kind} has a message"));
        &s.messages[i]
    }

    fn json_of(m: &Message, rust: &str) -> String {
        m.fields
            .iter()
            .find(|f| f.def.rust == rust)
            .map(|f| f.json.clone())
            .unwrap_or_else(|| panic!("{} has {rust}", m.def.name))
    }

    #[test]
    fn json_names_follow_the_openapi_definitions() {
        let s = schema();
        let status = message(s, "v1", "PodStatus");
        assert_eq!(json_of(status, "pod_ip"), "podIP");
        assert_eq!(json_of(status, "host_ips"), "hostIPs");
        let spec = message(s, "v1", "PodSpec");
        assert_eq!(json_of(spec, "node_name"), "nodeName");
        let csi = message(s, "storage.k8s.io/v1", "CSIDriver");
        assert!(csi.def.name.eq_ignore_ascii_case("CSIDriver"));
        let props = message(s, "apiextensions.k8s.io/v1", "JSONSchemaProps");
        assert_eq!(json_of(props, "ref"), "$ref");
        assert_eq!(
            json_of(props, "x_kubernetes_preserve_unknown_fields"),
            "x-kubernetes-preserve-unknown-fields"
        );
    }

    #[test]
    fn meta_kinds_are_found_under_any_group_version() {
        let s = schema();
        assert_eq!(
            message(s, "apps/v1", "DeleteOptions").def.package,
            "apimachinery.pkg.apis.meta.v1"
        );
        assert_eq!(message(s, "v1", "Status").def.name, "Status");
        assert!(
            s.message_for("windows.k8s.io/v1", "GMSACredentialSpec")
                .is_none()
        );
        assert!(s.message_for("example.com/v1", "Widget").is_none());
    }

    #[test]
    fn custom_json_forms_are_recognised() {
        let s = schema();
        let quantity = message(s, "v1", "ResourceRequirements");
        let limits = quantity
            .fields
            .iter()
            .find(|f| f.json == "limits")
            .expect("limits");
        let Shape::Map(Ty::Message(q)) = limits.def.shape else {
            panic!("limits is a map of messages");
        };
        assert_eq!(s.messages[q].special, Special::Quantity);
        let review = message(s, "authentication.k8s.io/v1", "UserInfo");
        let extra = review
            .fields
            .iter()
            .find(|f| f.json == "extra")
            .expect("extra");
        let Shape::Map(Ty::Message(e)) = extra.def.shape else {
            panic!("extra is a map of messages");
        };
        assert_eq!(s.messages[e].special, Special::Items);
    }
}
