//! Built-in kinds served at more than one version: which version is stored, and the conversion
//! between the stored form and the others, as upstream's scheme converts through its internal
//! version (`k8s.io/apimachinery/pkg/runtime.Scheme.Convert`).
//!
//! The API server stores an object at its kind's storage version ([`storage_version`]); a
//! request at another served version has its body converted to the storage version after
//! decoding ([`to_storage`]) and every answer converted back to the requested version
//! ([`convert_response`]). Today one kind needs it: `HorizontalPodAutoscaler`, stored at
//! `autoscaling/v2` and served at `autoscaling/v1` too ([`autoscaling`]).

pub mod autoscaling;

use serde_json::Value;

use crate::registry::ResourceType;

/// The version a built-in kind served at several versions is stored at, or `None` when the
/// kind is served at one version only (or is not built in).
pub fn storage_version(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("autoscaling", "HorizontalPodAutoscaler") => Some("v2"),
        _ => None,
    }
}

/// Whether requests at `rt` are converted: `rt` is a built-in kind served at a version other
/// than the one it is stored at.
pub fn converts(rt: &ResourceType) -> bool {
    storage_version(&rt.group, &rt.kind).is_some_and(|v| v != rt.version)
}

/// Whether `rt` is the storage version of its kind (true for every kind served at one
/// version). Clients that walk every served type (the garbage collector, the namespace
/// deleter) need only the storage version of a kind served at several.
pub fn is_storage_version(rt: &ResourceType) -> bool {
    !converts(rt)
}

/// Converts one object of a multi-version kind to `api_version`, whatever version it is in.
/// Objects of other kinds, and objects already at `api_version`, are left as they are.
pub fn convert_object(obj: &mut Value, api_version: &str) {
    let (Some(kind), Some(from)) = (
        obj.get("kind").and_then(Value::as_str).map(str::to_string),
        obj.get("apiVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
    ) else {
        return;
    };
    if from == api_version {
        return;
    }
    if kind == "HorizontalPodAutoscaler" {
        match (from.as_str(), api_version) {
            ("autoscaling/v2", "autoscaling/v1") => autoscaling::v2_to_v1(obj),
            ("autoscaling/v1", "autoscaling/v2") => autoscaling::v1_to_v2(obj),
            _ => {}
        }
    }
}

/// The decoded body of a request at `rt`, converted to the storage version when `rt` is
/// another served version of its kind.
pub fn to_storage(rt: &ResourceType, obj: &mut Value) {
    if let Some(storage) = storage_version(&rt.group, &rt.kind)
        && storage != rt.version
    {
        convert_object(obj, &format!("{}/{storage}", rt.group));
    }
}

/// Converts an answer (one object, a list's `items`, or a watch event's `object`) to
/// `api_version` for the objects of `kind`; everything else (Status, Tables) is unchanged.
pub fn convert_response(v: &mut Value, api_version: &str, kind: &str) {
    let convert = |o: &mut Value| {
        if o.get("kind").and_then(Value::as_str) == Some(kind) {
            convert_object(o, api_version);
        }
    };
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(convert);
    }
    if let Some(object) = v.get_mut("object") {
        convert(object);
    }
    convert(v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[test]
    fn only_the_v1_hpa_is_converted() {
        let r = Registry::builtin();
        let v1 = r
            .by_kind("autoscaling/v1", "HorizontalPodAutoscaler")
            .expect("v1 served");
        let v2 = r
            .by_kind("autoscaling/v2", "HorizontalPodAutoscaler")
            .expect("v2 served");
        assert!(converts(&v1) && !converts(&v2));
        assert!(is_storage_version(&v2) && !is_storage_version(&v1));
        let pods = r.by_plural("", "v1", "pods").expect("pods");
        assert!(!converts(&pods) && is_storage_version(&pods));
        assert_eq!(v1.key(Some("ns"), "a"), v2.key(Some("ns"), "a"));
    }

    #[test]
    fn list_items_and_watch_objects_are_converted_and_status_is_not() {
        let hpa = serde_json::json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "a"}, "spec": {"maxReplicas": 3, "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}});
        let mut list = serde_json::json!({"kind": "HorizontalPodAutoscalerList", "apiVersion": "autoscaling/v2", "items": [hpa.clone()]});
        convert_response(&mut list, "autoscaling/v1", "HorizontalPodAutoscaler");
        assert_eq!(list["items"][0]["apiVersion"], "autoscaling/v1");
        assert_eq!(
            list["items"][0]["spec"]["targetCPUUtilizationPercentage"],
            50
        );
        let mut event = serde_json::json!({"type": "ADDED", "object": hpa});
        convert_response(&mut event, "autoscaling/v1", "HorizontalPodAutoscaler");
        assert_eq!(event["object"]["apiVersion"], "autoscaling/v1");
        let mut status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "code": 404});
        let before = status.clone();
        convert_response(&mut status, "autoscaling/v1", "HorizontalPodAutoscaler");
        assert_eq!(status, before);
    }
}
