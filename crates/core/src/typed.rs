//! Typed decoding: every object passes through its k8s-openapi type on the way in, so a wrong type
//! (`replicas: "three"`) is refused like upstream's decoder refuses it, and unknown fields are found
//! (and dropped) as upstream's strict/ignore field validation does.

use k8s_openapi::api::{
    admissionregistration::v1 as admissionregistration, apps::v1 as apps,
    autoscaling::v1 as autoscaling_v1, autoscaling::v2 as autoscaling_v2, batch::v1 as batch,
    coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
    events::v1 as events, networking::v1 as networking, node::v1 as node, policy::v1 as policy,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::registry::ResourceType;

/// A body that does not decode into its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} in version \"{version}\" cannot be handled as a {kind}: {reason}")]
pub struct DecodeError {
    pub kind: String,
    pub version: String,
    pub reason: String,
}

/// The result of a typed round trip.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The object as its type serializes it: unknown fields removed, `apiVersion`/`kind` set.
    pub object: Value,
    /// Paths of fields the type does not know, upstream style (`spec.containers[0].imagePullPolicyX`).
    pub unknown_fields: Vec<String>,
}

fn round<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
    // The error names the field path, as upstream's decoder names the Go struct field.
    let typed: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path.is_empty() || path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// Decodes `value` through the k8s-openapi type of `rt` and back. Types tandem does not have a
/// Rust type for (e.g. `GMSACredentialSpec`) pass through unchanged.
pub fn roundtrip(rt: &ResourceType, mut input: Value) -> Result<Decoded, DecodeError> {
    if !input.is_object() {
        return Err(DecodeError {
            kind: rt.kind.clone(),
            version: rt.version.clone(),
            reason: "the body must be a JSON object".into(),
        });
    }
    // The k8s-openapi decoders insist on their own apiVersion and kind; the caller has already
    // checked what the body says against the URL, so state them here.
    if let Some(map) = input.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        map.insert("kind".into(), Value::String(rt.kind.clone()));
    }
    unwrap_base64(rt, &mut input);
    let value = &input;
    let result = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => round::<core::Namespace>(value),
        ("", "Pod") => round::<core::Pod>(value),
        ("", "Node") => round::<core::Node>(value),
        ("", "Service") => round::<core::Service>(value),
        ("", "Endpoints") => round::<core::Endpoints>(value),
        ("", "ConfigMap") => round::<core::ConfigMap>(value),
        ("", "Secret") => round::<core::Secret>(value),
        ("", "ServiceAccount") => round::<core::ServiceAccount>(value),
        ("", "Event") => round::<core::Event>(value),
        ("", "ReplicationController") => round::<core::ReplicationController>(value),
        ("", "PersistentVolumeClaim") => round::<core::PersistentVolumeClaim>(value),
        ("", "PersistentVolume") => round::<core::PersistentVolume>(value),
        ("", "LimitRange") => round::<core::LimitRange>(value),
        ("", "ResourceQuota") => round::<core::ResourceQuota>(value),
        ("", "PodTemplate") => round::<core::PodTemplate>(value),
        ("apps", "Deployment") => round::<apps::Deployment>(value),
        ("apps", "ReplicaSet") => round::<apps::ReplicaSet>(value),
        ("apps", "DaemonSet") => round::<apps::DaemonSet>(value),
        ("apps", "StatefulSet") => round::<apps::StatefulSet>(value),
        ("apps", "ControllerRevision") => round::<apps::ControllerRevision>(value),
        ("batch", "Job") => round::<batch::Job>(value),
        ("batch", "CronJob") => round::<batch::CronJob>(value),
        ("node.k8s.io", "RuntimeClass") => round::<node::RuntimeClass>(value),
        ("coordination.k8s.io", "Lease") => round::<coordination::Lease>(value),
        ("discovery.k8s.io", "EndpointSlice") => round::<discovery::EndpointSlice>(value),
        ("events.k8s.io", "Event") => round::<events::Event>(value),
        ("networking.k8s.io", "Ingress") => round::<networking::Ingress>(value),
        ("networking.k8s.io", "IngressClass") => round::<networking::IngressClass>(value),
        ("networking.k8s.io", "NetworkPolicy") => round::<networking::NetworkPolicy>(value),
        ("policy", "PodDisruptionBudget") => round::<policy::PodDisruptionBudget>(value),
        ("autoscaling", "HorizontalPodAutoscaler") if rt.version == "v1" => {
            round::<autoscaling_v1::HorizontalPodAutoscaler>(value)
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            round::<autoscaling_v2::HorizontalPodAutoscaler>(value)
        }
        ("scheduling.k8s.io", "PriorityClass") => round::<scheduling::PriorityClass>(value),
        ("storage.k8s.io", "StorageClass") => round::<storage::StorageClass>(value),
        ("storage.k8s.io", "CSIDriver") => round::<storage::CSIDriver>(value),
        ("storage.k8s.io", "CSINode") => round::<storage::CSINode>(value),
        ("storage.k8s.io", "VolumeAttachment") => round::<storage::VolumeAttachment>(value),
        ("storage.k8s.io", "CSIStorageCapacity") => round::<storage::CSIStorageCapacity>(value),
        ("apiregistration.k8s.io", "APIService") => round::<apiregistration::APIService>(value),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            round::<admissionregistration::ValidatingWebhookConfiguration>(value)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            round::<admissionregistration::MutatingWebhookConfiguration>(value)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            round::<admissionregistration::ValidatingAdmissionPolicy>(value)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            round::<admissionregistration::ValidatingAdmissionPolicyBinding>(value)
        }
        _ => Ok(value.clone()),
    };
    let mut object = result.map_err(|reason| DecodeError {
        kind: rt.kind.clone(),
        version: rt.version.clone(),
        reason,
    })?;
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(rt.api_version()));
        map.insert("kind".into(), Value::String(rt.kind.clone()));
    }
    let mut unknown_fields = Vec::new();
    find_unknown(value, &object, "", &mut unknown_fields);
    Ok(Decoded {
        object,
        unknown_fields,
    })
}

/// Upstream decodes `[]byte` fields with Go's standard base64 decoder, which skips line breaks
/// (`"aGVsbG8g\nd29ybGQ="` is accepted and stored unwrapped); k8s-openapi's decoder refuses them.
/// The byte fields of the types decoded here (Secret data, ConfigMap binaryData, the
/// `caBundle` of APIServices and of webhook client configurations) lose their `\r` and `\n`
/// first.
fn unwrap_base64(rt: &ResourceType, input: &mut Value) {
    fn unwrap(v: &mut Value) {
        if let Value::String(s) = v
            && s.contains(['\r', '\n'])
        {
            s.retain(|c| c != '\r' && c != '\n');
        }
    }
    let maps: &[&str] = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Secret") => &["/data"],
        ("", "ConfigMap") => &["/binaryData"],
        _ => &[],
    };
    for pointer in maps {
        if let Some(Value::Object(map)) = input.pointer_mut(pointer) {
            map.values_mut().for_each(unwrap);
        }
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("apiregistration.k8s.io", "APIService") => {
            if let Some(v) = input.pointer_mut("/spec/caBundle") {
                unwrap(v);
            }
        }
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => {
            if let Some(Value::Array(hooks)) = input.get_mut("webhooks") {
                for hook in hooks {
                    if let Some(v) = hook.pointer_mut("/clientConfig/caBundle") {
                        unwrap(v);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Collects the paths present (and not null) in `input` but absent in `typed`.
fn find_unknown(input: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(tv) => find_unknown(v, tv, &child, out),
                    None if v.is_null() => {}
                    None => out.push(child),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, tv)) in a.iter().zip(b.iter()).enumerate() {
                find_unknown(v, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_reported_with_paths_and_dropped() {
        let reg = Registry::builtin();
        let pods = reg.by_kind("v1", "Pod").expect("pods");
        let d = roundtrip(&pods, json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i","imagePullPolicyX":"Always"}],"bogus":1}})).expect("decodes");
        assert_eq!(
            d.unknown_fields,
            vec![
                "spec.bogus".to_string(),
                "spec.containers[0].imagePullPolicyX".to_string()
            ]
        );
        assert!(d.object["spec"].get("bogus").is_none());
    }

    #[test]
    fn wrong_field_type_is_a_decode_error_naming_the_kind() {
        let reg = Registry::builtin();
        let deploy = reg.by_kind("apps/v1", "Deployment").expect("deployments");
        let e = roundtrip(&deploy, json!({"spec":{"replicas":"three"}})).expect_err("must fail");
        assert!(e.to_string().starts_with("Deployment in version \"v1\" cannot be handled as a Deployment: spec.replicas: invalid type"), "{e}");
    }

    #[test]
    fn secret_data_with_line_breaks_decodes_as_upstream() {
        let reg = Registry::builtin();
        let secrets = reg.by_kind("v1", "Secret").expect("secrets");
        let d = roundtrip(
            &secrets,
            json!({"metadata":{"name":"s"},"data":{"k":"aGVsbG8g\nd29y\r\nbGQ="}}),
        )
        .expect("line breaks in base64 are skipped");
        assert_eq!(d.object["data"]["k"], json!("aGVsbG8gd29ybGQ="));
        let e = roundtrip(
            &secrets,
            json!({"metadata":{"name":"s"},"data":{"k":"not base64!"}}),
        )
        .expect_err("other symbols are still refused");
        assert!(e.reason.starts_with("data.k"), "{e}");
    }

    #[test]
    fn webhook_ca_bundles_with_line_breaks_decode_as_upstream() {
        let reg = Registry::builtin();
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            let rt = reg
                .by_kind("admissionregistration.k8s.io/v1", kind)
                .expect("served");
            let d = roundtrip(
                &rt,
                json!({"metadata": {"name": "w"}, "webhooks": [
                    {"name": "a.example.com", "sideEffects": "None",
                     "admissionReviewVersions": ["v1"],
                     "clientConfig": {"url": "https://a.example.com", "caBundle": "aGVsbG8g\nd29ybGQ="}}]}),
            )
            .expect("line breaks in the CA bundle are skipped");
            assert_eq!(
                d.object["webhooks"][0]["clientConfig"]["caBundle"],
                json!("aGVsbG8gd29ybGQ="),
                "{kind}"
            );
            assert!(d.unknown_fields.is_empty(), "{:?}", d.unknown_fields);
        }
    }
}
