//! Windows HostProcess pods: upstream `validateWindowsHostProcessPod`
//! (`pkg/apis/core/validation/validation.go`), and the `--allow-privileged=false` cluster policy
//! from `ValidateSecurityContext`.
//!
//! A container is HostProcess when its `securityContext.windowsOptions.hostProcess` is true, or
//! unset while the pod's is true. Then:
//! - pod and container values, when both set, must agree (`Invalid` at the container's field);
//! - every container (init, regular, ephemeral) must be HostProcess (`Invalid` at `spec`);
//! - `hostNetwork` must be true (`Invalid` at `spec.hostNetwork`);
//! - when privileged pods are disallowed, the pod is `Forbidden` at `spec`.

use serde_json::{Value, json};

use crate::field::{FieldError, Path};
use crate::windows::pod_os::containers;

fn host_process_of(v: &Value) -> Option<bool> {
    v.get("securityContext")?
        .get("windowsOptions")?
        .get("hostProcess")?
        .as_bool()
}

/// Whether the pod spec runs HostProcess containers (any container explicitly or by
/// inheritance from the pod-level setting).
pub fn is_host_process_pod(spec: &Value) -> bool {
    let pod = host_process_of(spec);
    containers(spec, &Path::new("spec"))
        .iter()
        .any(|(_, c)| match host_process_of(c) {
            Some(v) => v,
            None => pod == Some(true),
        })
}

/// Upstream `validateWindowsHostProcessPod` for the pod spec at `path`.
/// `privileged_allowed` is the server's `--allow-privileged`.
pub fn validate(spec: &Value, path: &Path, privileged_allowed: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let pod = host_process_of(spec);
    let host_network = spec
        .get("hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut count = 0usize;
    let mut host_process_count = 0usize;
    for (cpath, c) in containers(spec, path) {
        count += 1;
        let container = host_process_of(c);
        if let (Some(p), Some(cv)) = (pod, container)
            && p != cv
        {
            errs.push(FieldError::invalid(
                cpath
                    .child("securityContext")
                    .child("windowsOptions")
                    .child("hostProcess"),
                &json!(cv),
                format!("pod hostProcess value must be identical if both are specified, was {p}"),
            ));
        }
        match container {
            Some(true) => host_process_count += 1,
            None if pod == Some(true) => host_process_count += 1,
            _ => {}
        }
    }
    if host_process_count > 0 {
        if host_process_count != count {
            errs.push(FieldError::invalid(
                path,
                &json!(""),
                "If pod contains any hostProcess containers then all containers must be HostProcess containers",
            ));
        }
        if !host_network {
            errs.push(FieldError::invalid(
                path.child("hostNetwork"),
                &json!(host_network),
                "hostNetwork must be true if pod contains any hostProcess containers",
            ));
        }
        if !privileged_allowed {
            errs.push(FieldError::forbidden(
                path,
                "hostProcess containers are disallowed by cluster policy",
            ));
        }
    }
    errs
}

/// Upstream `ValidateSecurityContext`'s cluster policy: with `--allow-privileged=false`, a
/// container with `privileged: true` is `Forbidden` "disallowed by cluster policy".
pub fn validate_privileged(spec: &Value, path: &Path, privileged_allowed: bool) -> Vec<FieldError> {
    if privileged_allowed {
        return Vec::new();
    }
    containers(spec, path)
        .into_iter()
        .filter(|(_, c)| {
            c.get("securityContext")
                .and_then(|s| s.get("privileged"))
                .and_then(Value::as_bool)
                == Some(true)
        })
        .map(|(cpath, _)| {
            FieldError::forbidden(
                cpath.child("securityContext").child("privileged"),
                "disallowed by cluster policy",
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hp(v: Option<bool>) -> Value {
        match v {
            Some(b) => json!({"windowsOptions": {"hostProcess": b}}),
            None => json!({}),
        }
    }

    fn spec(
        pod: Option<bool>,
        init: Option<Option<bool>>,
        main: Option<bool>,
        host_network: bool,
    ) -> Value {
        let mut s = json!({
            "os": {"name": "windows"},
            "hostNetwork": host_network,
            "securityContext": hp(pod),
            "containers": [{"name": "c", "image": "i", "securityContext": hp(main)}],
        });
        if let Some(i) = init {
            s["initContainers"] = json!([{"name": "init", "image": "i", "securityContext": hp(i)}]);
        }
        s
    }

    fn messages(spec: &Value, allowed: bool) -> Vec<String> {
        validate(spec, &Path::new("spec"), allowed)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const ALL: &str = "spec: Invalid value: \"\": If pod contains any hostProcess containers then all containers must be HostProcess containers";
    const NET: &str = "spec.hostNetwork: Invalid value: false: hostNetwork must be true if pod contains any hostProcess containers";

    /// (pod, init container (absent, or its value), main container, hostNetwork, expected errors)
    type Case = (
        Option<bool>,
        Option<Option<bool>>,
        Option<bool>,
        bool,
        Vec<&'static str>,
    );

    #[test]
    fn host_process_combinations_follow_upstream() {
        let cases: Vec<Case> = vec![
            // Nothing HostProcess: accepted whatever hostNetwork says.
            (None, None, None, false, vec![]),
            (Some(false), Some(None), Some(false), true, vec![]),
            // Pod-level true inherited by every container.
            (Some(true), Some(None), None, true, vec![]),
            // Every container explicitly true, pod unset.
            (None, Some(Some(true)), Some(true), true, vec![]),
            // Pod true, containers agree explicitly.
            (Some(true), None, Some(true), true, vec![]),
            // Missing hostNetwork.
            (Some(true), None, None, false, vec![NET]),
            // Mixed containers: one HostProcess, one not.
            (None, Some(None), Some(true), true, vec![ALL]),
            (None, Some(Some(false)), Some(true), true, vec![ALL]),
            // Pod and container disagree.
            (
                Some(true),
                None,
                Some(false),
                true,
                // The only container opts out, so no container is HostProcess.
                vec![
                    "spec.containers[0].securityContext.windowsOptions.hostProcess: Invalid value: false: pod hostProcess value must be identical if both are specified, was true",
                ],
            ),
            (
                Some(false),
                None,
                Some(true),
                true,
                vec![
                    "spec.containers[0].securityContext.windowsOptions.hostProcess: Invalid value: true: pod hostProcess value must be identical if both are specified, was false",
                ],
            ),
            // Everything wrong at once.
            (
                Some(true),
                Some(Some(false)),
                None,
                false,
                vec![
                    "spec.initContainers[0].securityContext.windowsOptions.hostProcess: Invalid value: false: pod hostProcess value must be identical if both are specified, was true",
                    ALL,
                    NET,
                ],
            ),
        ];
        for (pod, init, main, net, want) in cases {
            let s = spec(pod, init, main, net);
            assert_eq!(
                messages(&s, true),
                want,
                "pod={pod:?} init={init:?} main={main:?} hostNetwork={net}"
            );
        }
    }

    #[test]
    fn host_process_ephemeral_container_must_also_be_host_process() {
        let mut s = spec(None, None, Some(true), true);
        s["ephemeralContainers"] = json!([{"name": "debug", "image": "i"}]);
        assert_eq!(messages(&s, true), vec![ALL]);
    }

    #[test]
    fn host_process_pod_is_forbidden_when_privileged_is_disallowed() {
        let s = spec(Some(true), None, None, true);
        assert_eq!(
            messages(&s, false),
            vec!["spec: Forbidden: hostProcess containers are disallowed by cluster policy"]
        );
        // A pod without HostProcess containers is unaffected.
        assert_eq!(
            messages(&spec(None, None, None, false), false),
            Vec::<String>::new()
        );
        assert!(is_host_process_pod(&s));
        assert!(!is_host_process_pod(&spec(Some(false), None, None, true)));
    }

    #[test]
    fn privileged_container_is_forbidden_when_privileged_is_disallowed() {
        let s = json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}, {"name": "d", "securityContext": {"privileged": false}}]});
        let errs: Vec<String> = validate_privileged(&s, &Path::new("spec"), false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy"
            ]
        );
        assert!(validate_privileged(&s, &Path::new("spec"), true).is_empty());
    }

    #[test]
    fn host_process_validation_never_panics_on_odd_shapes() {
        for s in [
            json!(null),
            json!({"securityContext": {"windowsOptions": {"hostProcess": "yes"}}, "containers": [1, {"securityContext": {"windowsOptions": 1}}]}),
            json!({"hostNetwork": "true", "containers": {"x": 1}}),
        ] {
            let _ = validate(&s, &Path::new("spec"), false);
            let _ = validate_privileged(&s, &Path::new("spec"), false);
            let _ = is_host_process_pod(&s);
        }
    }
}
