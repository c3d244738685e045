//! The pod OS field rules: upstream `validateOS`, `validateWindows` and `validateLinux`
//! (`pkg/apis/core/validation/validation.go`, called from `ValidatePodSpec` for pods and every
//! embedded pod template).
//!
//! - `spec.os.name` empty: `Required` at `spec.os.name` ("cannot be empty"); anything but
//!   `linux`/`windows`: `NotSupported` at `spec.os`.
//! - `windows`: every Linux-only field is `Forbidden` "cannot be set for a windows pod" at its own
//!   path ([`WINDOWS_FORBIDDEN_POD_FIELDS`], [`WINDOWS_FORBIDDEN_CONTAINER_FIELDS`]).
//! - `linux`: `windowsOptions` (pod or any container) is `Forbidden` "windows options cannot be
//!   set for a linux pod".
//!
//! `spec.os` cannot change on pod update: it is not among the fields upstream's
//! `ValidatePodUpdate` lets change, so the generic pod-update check
//! ([`crate::validation::pod::validate_pod_spec_update`]) refuses it.

use serde_json::{Value, json};

use super::{AdmissionOptions, host_process, windows_options};
use crate::field::{FieldError, Path};
use crate::windows::pod_os::containers;

/// The message upstream gives for a Linux-only field on a Windows pod.
pub const WINDOWS_FORBIDDEN: &str = "cannot be set for a windows pod";
/// The message upstream gives for `windowsOptions` on a Linux pod.
pub const LINUX_WINDOWS_OPTIONS_FORBIDDEN: &str = "windows options cannot be set for a linux pod";

/// How a Linux-only field counts as "set" (mirrors the Go field types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetWhen {
    /// A pointer or slice field: present and not null.
    Present,
    /// A plain `bool` in the internal type (`hostPID`, `hostIPC`): true.
    True,
    /// A slice upstream checks with `len(...) > 0` (`sysctls`).
    NonEmpty,
}

/// A Linux-only field: where it lives relative to the pod spec, and the path upstream reports.
struct PodField {
    /// Keys from the pod spec to the field.
    at: &'static [&'static str],
    set: SetWhen,
}

const POD_FIELDS: &[PodField] = &[
    PodField {
        at: &["securityContext", "appArmorProfile"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "seLinuxOptions"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["hostUsers"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["hostPID"],
        set: SetWhen::True,
    },
    PodField {
        at: &["hostIPC"],
        set: SetWhen::True,
    },
    PodField {
        at: &["securityContext", "seccompProfile"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "fsGroup"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "fsGroupChangePolicy"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "sysctls"],
        set: SetWhen::NonEmpty,
    },
    PodField {
        at: &["shareProcessNamespace"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "runAsUser"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "runAsGroup"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "supplementalGroups"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "supplementalGroupsPolicy"],
        set: SetWhen::Present,
    },
    PodField {
        at: &["securityContext", "seLinuxChangePolicy"],
        set: SetWhen::Present,
    },
];

/// The pod-level fields forbidden for Windows pods, as paths under the pod spec, in upstream's
/// order.
pub const WINDOWS_FORBIDDEN_POD_FIELDS: &[&str] = &[
    "securityContext.appArmorProfile",
    "securityContext.seLinuxOptions",
    "hostUsers",
    "hostPID",
    "hostIPC",
    "securityContext.seccompProfile",
    "securityContext.fsGroup",
    "securityContext.fsGroupChangePolicy",
    "securityContext.sysctls",
    "shareProcessNamespace",
    "securityContext.runAsUser",
    "securityContext.runAsGroup",
    "securityContext.supplementalGroups",
    "securityContext.supplementalGroupsPolicy",
    "securityContext.seLinuxChangePolicy",
];

/// The container `securityContext` fields forbidden for Windows pods (init, regular and
/// ephemeral containers), in upstream's order.
pub const WINDOWS_FORBIDDEN_CONTAINER_FIELDS: &[&str] = &[
    "appArmorProfile",
    "seLinuxOptions",
    "seccompProfile",
    "capabilities",
    "readOnlyRootFilesystem",
    "privileged",
    "allowPrivilegeEscalation",
    "procMount",
    "runAsUser",
    "runAsGroup",
];

fn at<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |cur, k| cur.get(*k))
}

fn is_set(v: Option<&Value>, set: SetWhen) -> bool {
    match (v, set) {
        (None | Some(Value::Null), _) => false,
        (Some(_), SetWhen::Present) => true,
        (Some(v), SetWhen::True) => v.as_bool() == Some(true),
        (Some(v), SetWhen::NonEmpty) => v.as_array().is_some_and(|a| !a.is_empty()),
    }
}

/// Upstream `validateOS` + `validateWindows` / `validateLinux` for the pod spec at `path`
/// (`spec`, `spec.template.spec`, `spec.jobTemplate.spec.template.spec`, `template.spec`).
/// A spec without `os` (or a non-object `os`) has nothing to check.
pub fn validate(spec: &Value, path: &Path) -> Vec<FieldError> {
    let Some(os) = spec.get("os").filter(|v| v.is_object()) else {
        return Vec::new();
    };
    let os_path = path.child("os");
    let name = os.get("name").and_then(Value::as_str).unwrap_or_default();
    match name {
        "" => vec![FieldError::required(
            os_path.child("name"),
            "cannot be empty",
        )],
        "windows" => validate_windows(spec, path),
        "linux" => validate_linux(spec, path),
        other => vec![FieldError::not_supported(
            &os_path,
            &json!(other),
            &["linux", "windows"],
        )],
    }
}

/// Upstream `validateWindows`: Linux-only pod and container fields are Forbidden.
pub fn validate_windows(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in POD_FIELDS {
        if is_set(at(spec, field.at), field.set) {
            let p = field.at.iter().fold(path.clone(), |p, k| p.child(k));
            errs.push(FieldError::forbidden(p, WINDOWS_FORBIDDEN));
        }
    }
    for (cpath, c) in containers(spec, path) {
        let Some(sc) = c.get("securityContext").filter(|v| v.is_object()) else {
            continue;
        };
        let scp = cpath.child("securityContext");
        for key in WINDOWS_FORBIDDEN_CONTAINER_FIELDS {
            if is_set(sc.get(*key), SetWhen::Present) {
                errs.push(FieldError::forbidden(scp.child(key), WINDOWS_FORBIDDEN));
            }
        }
    }
    errs
}

/// Upstream `validateLinux`: `windowsOptions` is Forbidden at pod and container level.
pub fn validate_linux(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if is_set(
        at(spec, &["securityContext", "windowsOptions"]),
        SetWhen::Present,
    ) {
        errs.push(FieldError::forbidden(
            path.child("securityContext").child("windowsOptions"),
            LINUX_WINDOWS_OPTIONS_FORBIDDEN,
        ));
    }
    for (cpath, c) in containers(spec, path) {
        if is_set(
            at(c, &["securityContext", "windowsOptions"]),
            SetWhen::Present,
        ) {
            errs.push(FieldError::forbidden(
                cpath.child("securityContext").child("windowsOptions"),
                LINUX_WINDOWS_OPTIONS_FORBIDDEN,
            ));
        }
    }
    errs
}

/// Every Windows-related pod spec rule upstream's `ValidatePodSpec` applies, in its order:
/// `windowsOptions` content ([`windows_options::validate_spec`], from the security context
/// checks), `privileged` under `--allow-privileged=false`, HostProcess
/// ([`host_process::validate`]), then the OS field rules ([`validate`]).
pub fn validate_all(spec: &Value, path: &Path, options: &AdmissionOptions) -> Vec<FieldError> {
    let mut errs = windows_options::validate_spec(spec, path);
    errs.extend(host_process::validate_privileged(
        spec,
        path,
        options.privileged_allowed,
    ));
    errs.extend(host_process::validate(
        spec,
        path,
        options.privileged_allowed,
    ));
    errs.extend(validate(spec, path));
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::field::ErrorKind;

    fn spec_path() -> Path {
        Path::new("spec")
    }

    fn set_at(v: &mut Value, dotted: &str, value: Value) {
        let keys: Vec<&str> = dotted.split('.').collect();
        let mut cur = v;
        for k in &keys[..keys.len() - 1] {
            let m = cur.as_object_mut().expect("test object");
            cur = m.entry(k.to_string()).or_insert_with(|| json!({}));
        }
        cur.as_object_mut()
            .expect("test object")
            .insert(keys[keys.len() - 1].to_string(), value);
    }

    fn value_for(field: &str) -> Value {
        match field {
            "hostPID" | "hostIPC" | "hostUsers" | "shareProcessNamespace" => json!(true),
            "securityContext.sysctls" => json!([{"name": "kernel.shm_rmid_forced", "value": "1"}]),
            "securityContext.supplementalGroups" => json!([1000]),
            f if f.ends_with("runAsUser")
                || f.ends_with("runAsGroup")
                || f.ends_with("fsGroup") =>
            {
                json!(1000)
            }
            f if f.ends_with("Policy") => json!("Strict"),
            _ => json!({"type": "RuntimeDefault"}),
        }
    }

    #[test]
    fn windows_pod_with_each_linux_only_pod_field_is_forbidden_at_its_path() {
        for field in WINDOWS_FORBIDDEN_POD_FIELDS {
            let mut spec =
                json!({"os": {"name": "windows"}, "containers": [{"name": "c", "image": "i"}]});
            set_at(&mut spec, field, value_for(field));
            let errs = validate(&spec, &spec_path());
            assert_eq!(errs.len(), 1, "{field}: {errs:?}");
            assert_eq!(
                errs[0].to_string(),
                format!("spec.{field}: Forbidden: cannot be set for a windows pod")
            );
        }
    }

    #[test]
    fn windows_pod_with_each_linux_only_container_field_is_forbidden_in_every_container_kind() {
        for kind in ["initContainers", "containers", "ephemeralContainers"] {
            for field in WINDOWS_FORBIDDEN_CONTAINER_FIELDS {
                let mut c = json!({"name": "c", "image": "i", "securityContext": {}});
                set_at(
                    &mut c,
                    &format!("securityContext.{field}"),
                    value_for(field),
                );
                let mut spec = json!({"os": {"name": "windows"}, "containers": [{"name": "main", "image": "i"}]});
                let list = spec
                    .as_object_mut()
                    .expect("object")
                    .entry(kind)
                    .or_insert_with(|| json!([]));
                list.as_array_mut().expect("array").push(c);
                let idx = if kind == "containers" { 1 } else { 0 };
                let errs = validate(&spec, &spec_path());
                assert_eq!(
                    errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    vec![format!(
                        "spec.{kind}[{idx}].securityContext.{field}: Forbidden: cannot be set for a windows pod"
                    )],
                );
            }
        }
    }

    #[test]
    fn windows_pod_false_host_namespaces_and_empty_sysctls_are_accepted() {
        let spec = json!({
            "os": {"name": "windows"},
            "hostPID": false, "hostIPC": false, "hostNetwork": false,
            "securityContext": {"sysctls": [], "runAsNonRoot": true, "windowsOptions": {"runAsUserName": "ContainerUser"}},
            "containers": [{"name": "c", "image": "i", "securityContext": {"runAsNonRoot": true, "windowsOptions": {}}}]
        });
        assert_eq!(validate(&spec, &spec_path()), vec![]);
    }

    #[test]
    fn windows_pod_explicit_false_pointer_fields_are_still_forbidden() {
        // Upstream checks pointers for nil: `privileged: false` is "set".
        let spec = json!({"os": {"name": "windows"}, "shareProcessNamespace": false,
            "containers": [{"name": "c", "securityContext": {"privileged": false}}]});
        let errs: Vec<String> = validate(&spec, &spec_path())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.shareProcessNamespace: Forbidden: cannot be set for a windows pod",
                "spec.containers[0].securityContext.privileged: Forbidden: cannot be set for a windows pod",
            ]
        );
    }

    #[test]
    fn linux_pod_with_windows_options_is_forbidden_at_pod_and_container_level() {
        let spec = json!({
            "os": {"name": "linux"},
            "securityContext": {"windowsOptions": {"runAsUserName": "u"}},
            "initContainers": [{"name": "i", "securityContext": {"windowsOptions": {}}}],
            "containers": [{"name": "c", "securityContext": {"windowsOptions": {"hostProcess": false}}}],
            "ephemeralContainers": [{"name": "e", "securityContext": {"windowsOptions": {}}}]
        });
        let errs: Vec<String> = validate(&spec, &spec_path())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            vec![
                "spec.securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod",
                "spec.initContainers[0].securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod",
                "spec.containers[0].securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod",
                "spec.ephemeralContainers[0].securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod",
            ]
        );
    }

    #[test]
    fn linux_pod_with_linux_fields_and_pod_without_os_are_accepted() {
        let linux = json!({"os": {"name": "linux"}, "hostPID": true,
            "securityContext": {"runAsUser": 1, "seLinuxOptions": {}},
            "containers": [{"name": "c", "securityContext": {"privileged": true}}]});
        assert_eq!(validate(&linux, &spec_path()), vec![]);
        let no_os = json!({"securityContext": {"windowsOptions": {}}, "hostPID": true});
        assert_eq!(validate(&no_os, &spec_path()), vec![]);
    }

    #[test]
    fn pod_os_name_empty_is_required_and_unknown_is_not_supported_at_spec_os() {
        let errs = validate(&json!({"os": {}}), &spec_path());
        assert_eq!(errs[0].kind, ErrorKind::Required);
        assert_eq!(
            errs[0].to_string(),
            "spec.os.name: Required value: cannot be empty"
        );
        let errs = validate(&json!({"os": {"name": "Windows"}}), &spec_path());
        assert_eq!(errs[0].kind, ErrorKind::NotSupported);
        assert_eq!(
            errs[0].to_string(),
            "spec.os: Unsupported value: \"Windows\": supported values: \"linux\", \"windows\""
        );
    }

    #[test]
    fn windows_rules_apply_to_templates_at_their_paths() {
        let spec = json!({"os": {"name": "windows"}, "hostIPC": true});
        let p = Path::new("spec")
            .child("jobTemplate")
            .child("spec")
            .child("template")
            .child("spec");
        assert_eq!(
            validate(&spec, &p)[0].to_string(),
            "spec.jobTemplate.spec.template.spec.hostIPC: Forbidden: cannot be set for a windows pod"
        );
    }

    #[test]
    fn pod_os_change_on_update_is_refused_by_the_generic_pod_update_check() {
        let old =
            json!({"spec": {"os": {"name": "linux"}, "containers": [{"name": "c", "image": "i"}]}});
        let mut new = old.clone();
        new["spec"]["os"]["name"] = json!("windows");
        let errs = crate::validation::pod::validate_pod_spec_update(&new, &old);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "spec");
        assert!(
            errs[0]
                .detail
                .starts_with("pod updates may not change fields other than"),
            "{}",
            errs[0].detail
        );
        assert!(!crate::validation::pod::POD_UPDATABLE_FIELDS.contains("spec.os"));
        // Adding spec.os to a pod that had none is a change too.
        let mut added = old.clone();
        added["spec"]["os"] = json!({"name": "linux"});
        let mut without = old.clone();
        if let Some(s) = without["spec"].as_object_mut() {
            s.remove("os");
        }
        assert_eq!(
            crate::validation::pod::validate_pod_spec_update(&added, &without).len(),
            1
        );
    }

    #[test]
    fn pod_os_validation_never_panics_on_odd_shapes() {
        for spec in [
            json!(null),
            json!([]),
            json!({"os": "windows"}),
            json!({"os": {"name": 1}}),
            json!({"os": {"name": "windows"}, "securityContext": 1, "containers": 5}),
            json!({"os": {"name": "windows"}, "containers": [1, null, {"securityContext": []}]}),
            json!({"os": {"name": "linux"}, "securityContext": "x", "initContainers": [{"securityContext": 3}]}),
        ] {
            let _ = validate(&spec, &spec_path());
            let _ = validate_all(&spec, &spec_path(), &AdmissionOptions::default());
        }
    }
}
