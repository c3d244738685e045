//! Ephemeral container validation: the rules of the `pods/ephemeralcontainers` subresource.
//!
//! Mirrors upstream `pkg/apis/core/validation/validation.go`: `validateEphemeralContainers`
//! (the container rules of a regular container, minus the fields an ephemeral container may
//! not set — ports, probes, lifecycle, resources, resize and restart policy, volume devices,
//! sub-paths —, a name unique across every container of the pod, a `targetContainerName`
//! naming a regular or init container), `ValidatePodEphemeralContainersUpdate` (existing
//! ephemeral containers may be neither removed nor changed; static pods take none) and the
//! `ValidatePodCreate` rule that a pod is never created with ephemeral containers.
//!
//! A pod on an (emulated) Windows node follows the same rules: upstream has no OS-specific
//! ephemeral container validation.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::json::{arr_at, bool_at, str_at};
use super::meta::validate_object_meta_update;
use super::pod::{ContainerKind, validate_container, validate_pod_spec, validate_volumes};
use crate::field::{ErrorKind, FieldError, Path};

/// Upstream's detail for a field outside `allowedEphemeralContainerFields`.
pub const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// The annotation a mirror (static) pod carries (`kubernetes.io/config.mirror`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The container fields an ephemeral container may not set (not in upstream's
/// `allowedEphemeralContainerFields`), in the order upstream's struct declares them.
const DISALLOWED: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Go's zero value test for a JSON field: absent, null, `false`, `""`, `0`, `[]` or an object
/// whose fields are all zero (`resources: {}` as kubectl debug sends it is unset).
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => !b,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(m)) => m.values().all(|v| is_zero(Some(v))),
    }
}

/// Upstream `validateEphemeralContainers` for the pod spec at `path` (`spec`): every ephemeral
/// container's own rules. Name presence and uniqueness are checked by
/// [`validate_pod_spec`] with the other containers.
pub fn validate_ephemeral_containers(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ephemeral = arr_at(spec, "ephemeralContainers");
    if ephemeral.is_empty() {
        return errs;
    }
    // Volume errors are reported by the pod spec validation; only the names matter here.
    let (_, volumes) = validate_volumes(arr_at(spec, "volumes"), &path.child("volumes"));
    let host_network = bool_at(spec, "hostNetwork").unwrap_or(false);
    let targets: HashSet<&str> = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|k| arr_at(spec, k))
        .filter_map(|c| str_at(c, "name"))
        .collect();
    for (i, c) in ephemeral.iter().enumerate() {
        let p = path.child("ephemeralContainers").index(i);
        // The common container rules, on the fields an ephemeral container may set; the others
        // are reported once, as not allowed.
        let mut common = c.clone();
        if let Some(m) = common.as_object_mut() {
            m.remove("targetContainerName");
            for key in DISALLOWED {
                m.remove(*key);
            }
        }
        validate_container(
            &common,
            &p,
            ContainerKind::Regular,
            &volumes,
            host_network,
            &mut errs,
        );
        if let Some(target) = str_at(c, "targetContainerName").filter(|t| !t.is_empty())
            && !targets.contains(target)
        {
            errs.push(FieldError::new(
                ErrorKind::NotFound,
                p.child("targetContainerName"),
                Some(json!(target).to_string()),
                "",
            ));
        }
        for key in DISALLOWED {
            if !is_zero(c.get(*key)) {
                errs.push(FieldError::forbidden(p.child(key), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, m) in arr_at(c, "volumeMounts").iter().enumerate() {
            for key in ["subPath", "subPathExpr"] {
                if !str_at(m, key).unwrap_or_default().is_empty() {
                    errs.push(FieldError::forbidden(
                        p.child("volumeMounts").index(j).child(key),
                        NOT_FOR_EPHEMERAL,
                    ));
                }
            }
        }
    }
    errs
}

/// Upstream `ValidatePodCreate`'s rule: ephemeral containers are only added through the
/// `ephemeralcontainers` subresource, never on create.
pub fn validate_pod_create(pod: &Value) -> Vec<FieldError> {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    if arr_at(spec, "ephemeralContainers").is_empty() {
        Vec::new()
    } else {
        vec![FieldError::forbidden(
            Path::new("spec").child("ephemeralContainers"),
            "cannot be set on create",
        )]
    }
}

/// Upstream `ValidatePodEphemeralContainersUpdate`: ObjectMeta update rules, the whole pod spec
/// (with the ephemeral container rules), then the subresource's own rule — existing ephemeral
/// containers (matched by name, as a patch may reorder them) may be neither removed nor
/// changed. Static (mirror) pods take no ephemeral containers at all.
pub fn validate_ephemeral_containers_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let is_mirror = old
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    if is_mirror {
        return vec![FieldError::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let null = Value::Null;
    let spec_path = Path::new("spec");
    let mut errs = validate_object_meta_update(new, old);
    let spec = new.get("spec").unwrap_or(&null);
    errs.extend(validate_pod_spec(spec, &spec_path));
    errs.extend(validate_ephemeral_containers(spec, &spec_path));
    let list_path = spec_path.child("ephemeralContainers");
    let new_list = arr_at(spec, "ephemeralContainers");
    let old_spec = old.get("spec").unwrap_or(&null);
    for o in arr_at(old_spec, "ephemeralContainers") {
        let name = str_at(o, "name").unwrap_or_default();
        match new_list
            .iter()
            .find(|n| str_at(n, "name").unwrap_or_default() == name)
        {
            None => errs.push(FieldError::forbidden(
                &list_path,
                format!(
                    "existing ephemeral containers {} may not be removed\n",
                    json!(name)
                ),
            )),
            Some(n) if n != o => errs.push(FieldError::forbidden(
                &list_path,
                format!(
                    "existing ephemeral containers {} may not be changed\n{}",
                    json!(name),
                    changed_fields(o, n)
                ),
            )),
            Some(_) => {}
        }
    }
    errs
}

/// A short account of which fields of a container differ (upstream prints a `cmp.Diff`).
fn changed_fields(old: &Value, new: &Value) -> String {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| o.get(*k) != n.get(*k))
        .map(|k| {
            let show =
                |v: Option<&Value>| v.map_or_else(|| "<unset>".to_string(), Value::to_string);
            format!("  {k}: {} -> {}", show(o.get(k)), show(n.get(k)))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A defaulted running pod with one container `app`.
    fn pod(ephemeral: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "5",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "containers": [{"name": "app", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                                "terminationMessagePolicy": "File"}],
                "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                "ephemeralContainers": ephemeral,
            }
        })
    }

    fn debugger(name: &str) -> Value {
        json!({"name": name, "image": "busybox", "imagePullPolicy": "IfNotPresent",
               "terminationMessagePolicy": "File", "targetContainerName": "app",
               "stdin": true, "tty": true, "resources": {}})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn adding_an_ephemeral_container_as_kubectl_debug_does_is_valid() {
        let old = pod(json!([]));
        let new = pod(json!([debugger("debugger-abc")]));
        assert_eq!(
            messages(&validate_ephemeral_containers_update(&new, &old)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn removing_an_existing_ephemeral_container_is_forbidden_with_upstreams_message() {
        let old = pod(json!([debugger("dbg")]));
        let new = pod(json!([]));
        assert_eq!(
            messages(&validate_ephemeral_containers_update(&new, &old)),
            vec![
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be removed\n"
            ]
        );
    }

    #[test]
    fn changing_an_existing_ephemeral_container_is_forbidden() {
        let old = pod(json!([debugger("dbg")]));
        let mut changed = debugger("dbg");
        changed["image"] = json!("alpine");
        let new = pod(json!([changed]));
        let errs = messages(&validate_ephemeral_containers_update(&new, &old));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"),
            "{errs:?}"
        );
        assert!(errs[0].contains("image"), "{errs:?}");
    }

    #[test]
    fn reordered_existing_ephemeral_containers_are_unchanged() {
        let old = pod(json!([debugger("a"), debugger("b")]));
        let new = pod(json!([debugger("b"), debugger("a"), debugger("c")]));
        assert!(validate_ephemeral_containers_update(&new, &old).is_empty());
    }

    #[test]
    fn ports_probes_lifecycle_and_resources_are_forbidden_for_ephemeral_containers() {
        let mut c = debugger("dbg");
        c["ports"] = json!([{"containerPort": 80, "protocol": "TCP"}]);
        c["readinessProbe"] = json!({"exec": {"command": ["true"]}});
        c["lifecycle"] = json!({"preStop": {"exec": {"command": ["true"]}}});
        c["resources"] = json!({"limits": {"cpu": "1"}});
        let errs = messages(&validate_ephemeral_containers_update(
            &pod(json!([c])),
            &pod(json!([])),
        ));
        assert_eq!(
            errs,
            vec![
                "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[0].lifecycle: Forbidden: cannot be set for an Ephemeral Container",
            ]
        );
    }

    #[test]
    fn an_ephemeral_container_named_like_a_container_is_a_duplicate() {
        let errs = messages(&validate_ephemeral_containers_update(
            &pod(json!([debugger("app")])),
            &pod(json!([])),
        ));
        assert_eq!(
            errs,
            vec!["spec.ephemeralContainers[0].name: Duplicate value: \"app\""]
        );
    }

    #[test]
    fn a_target_that_is_not_a_container_of_the_pod_is_not_found() {
        let mut c = debugger("dbg");
        c["targetContainerName"] = json!("nope");
        let errs = messages(&validate_ephemeral_containers_update(
            &pod(json!([c])),
            &pod(json!([])),
        ));
        assert_eq!(
            errs,
            vec!["spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\""]
        );
    }

    #[test]
    fn sub_path_mounts_are_forbidden_for_ephemeral_containers() {
        let mut c = debugger("dbg");
        c["volumeMounts"] = json!([{"name": "v", "mountPath": "/v", "subPath": "x"}]);
        let mut new = pod(json!([c]));
        new["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
        let mut old = pod(json!([]));
        old["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
        let errs = messages(&validate_ephemeral_containers_update(&new, &old));
        assert_eq!(
            errs,
            vec![
                "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container"
            ]
        );
    }

    #[test]
    fn static_pods_take_no_ephemeral_containers() {
        let mut old = pod(json!([]));
        old["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "x"});
        let mut new = pod(json!([debugger("dbg")]));
        new["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "x"});
        let errs = validate_ephemeral_containers_update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].cause_message(),
            "Forbidden: static pods do not support ephemeral containers"
        );
    }

    #[test]
    fn a_pod_is_not_created_with_ephemeral_containers() {
        assert_eq!(
            messages(&validate_pod_create(&pod(json!([debugger("dbg")])))),
            vec!["spec.ephemeralContainers: Forbidden: cannot be set on create"]
        );
        assert!(validate_pod_create(&pod(json!([]))).is_empty());
    }
}
