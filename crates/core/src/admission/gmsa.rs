//! Group Managed Service Accounts: what the `kubernetes-sigs/windows-gmsa` admission webhook
//! (`admission-webhook/webhook.go`, `kube_client.go`) does, built into the API server.
//!
//! On create (`mutateCreateRequest`, then `validateCreateRequest`): every `windowsOptions` that
//! names a `gmsaCredentialSpecName` without content gets `gmsaCredentialSpec` filled with the
//! JSON of that GMSACredentialSpec's `credspec`; content already present must match the named
//! spec. On update (`validateUpdateRequest`) the GMSA name and content may not change. The
//! webhook's codes and messages:
//!
//! | case | code | message |
//! |---|---|---|
//! | unknown name | 404 | `cred spec <name> does not exist` |
//! | spec without `credspec` | 417 | `cred spec <name> does not have a credspec key` |
//! | content ≠ named spec | 422 | `the GMSA cred spec contents for pod "<p>" does not match the contents of GMSA resource "<name>"` |
//! | content without name | 422 | `pod "<p>" has a GMSA cred spec set, but does not define the name of the corresponding resource` |
//! | changed on update | 403 | `cannot update an existing pod's GMSA settings (GMSA name and contents modified on container "<c>")` |
//!
//! The webhook walks the pod-level options and `spec.containers`; tandem also walks
//! `spec.initContainers` (a Windows init container naming a gMSA would otherwise silently run
//! without it). The webhook's service-account authorization check (`use` verb on the
//! GMSACredentialSpec) is not performed: tandem has no RBAC yet.

use serde_json::Value;

use super::AdmissionError;
use crate::field::go_quote;

/// The name of the upstream webhook, used when wording denials as upstream's API server does.
pub const WEBHOOK_NAME: &str = "admission-webhook.windows-gmsa.sigs.k8s.io";

/// The owner of one `windowsOptions`: the pod itself or one of its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    /// `pod` or `container` (upstream `gmsaResourceKind`).
    kind: &'static str,
    name: String,
    /// JSON pointer from the object root to the `windowsOptions`.
    pointer: String,
}

/// Every `windowsOptions` object in the pod: pod level, then init and regular containers.
fn owners(pod: &Value) -> Vec<Owner> {
    let mut out = Vec::new();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let pod_name = pod
        .get("metadata")
        .and_then(|m| {
            m.get("name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .or_else(|| m.get("generateName").and_then(Value::as_str))
        })
        .unwrap_or_default();
    if spec
        .get("securityContext")
        .and_then(|s| s.get("windowsOptions"))
        .is_some_and(Value::is_object)
    {
        out.push(Owner {
            kind: "pod",
            name: pod_name.to_string(),
            pointer: "/spec/securityContext/windowsOptions".into(),
        });
    }
    for key in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            if c.get("securityContext")
                .and_then(|s| s.get("windowsOptions"))
                .is_some_and(Value::is_object)
            {
                out.push(Owner {
                    kind: "container",
                    name: c
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    pointer: format!("/spec/{key}/{i}/securityContext/windowsOptions"),
                });
            }
        }
    }
    out
}

fn str_field<'a>(options: &'a Value, key: &str) -> Option<&'a str> {
    options.get(key).and_then(Value::as_str)
}

/// Upstream `retrieveCredSpecContents`: the `credspec` of the named GMSACredentialSpec as the
/// JSON string the webhook writes (Go `json.Marshal`: sorted keys, HTML-safe escapes).
pub fn credential_spec_contents(
    name: &str,
    spec: Option<&Value>,
) -> Result<String, AdmissionError> {
    let Some(spec) = spec else {
        return Err(AdmissionError::Denied {
            code: 404,
            message: format!("cred spec {name} does not exist"),
        });
    };
    match spec.get("credspec") {
        None | Some(Value::Null) => Err(AdmissionError::Denied {
            code: 417,
            message: format!("cred spec {name} does not have a credspec key"),
        }),
        Some(Value::String(s)) if s.is_empty() => Err(AdmissionError::Denied {
            code: 417,
            message: format!("cred spec {name} does not have a credspec key"),
        }),
        Some(v) => Ok(go_json(v)),
    }
}

/// Upstream `compareCredSpecContents`: equal strings, or equal JSON objects.
fn compare_contents(from_pod: &str, from_spec: &str) -> Result<bool, String> {
    if from_pod == from_spec {
        return Ok(true);
    }
    let a: serde_json::Map<String, Value> = serde_json::from_str(from_pod).map_err(|e| {
        format!(
            "unable to parse {} as a JSON object: {e}",
            go_quote(from_pod)
        )
    })?;
    let b: serde_json::Map<String, Value> = serde_json::from_str(from_spec).map_err(|e| {
        format!(
            "unable to parse CRD {} as a JSON object: {e}",
            go_quote(from_spec)
        )
    })?;
    Ok(a == b)
}

/// The webhook's mutating and validating passes on pod create. `lookup` returns the
/// GMSACredentialSpec (`windows.k8s.io/v1`) of a name.
pub fn admit_create(
    pod: &mut Value,
    lookup: impl Fn(&str) -> Option<Value>,
) -> Result<(), AdmissionError> {
    // Mutate: fill missing contents.
    for owner in owners(pod) {
        let Some(options) = pod.pointer(&owner.pointer) else {
            continue;
        };
        let (Some(name), None) = (
            str_field(options, "gmsaCredentialSpecName"),
            options.get("gmsaCredentialSpec").filter(|v| !v.is_null()),
        ) else {
            continue;
        };
        let name = name.to_string();
        let contents = credential_spec_contents(&name, lookup(&name).as_ref())?;
        if let Some(options) = pod
            .pointer_mut(&owner.pointer)
            .and_then(Value::as_object_mut)
        {
            options.insert("gmsaCredentialSpec".into(), Value::String(contents));
        }
    }
    // Validate: contents match their names; no contents without a name.
    for owner in owners(pod) {
        let Some(options) = pod.pointer(&owner.pointer) else {
            continue;
        };
        let contents = str_field(options, "gmsaCredentialSpec");
        match str_field(options, "gmsaCredentialSpecName") {
            Some(name) => {
                let Some(contents) = contents else {
                    continue;
                };
                let expected = credential_spec_contents(name, lookup(name).as_ref())?;
                let compared = compare_contents(contents, &expected);
                if !matches!(compared, Ok(true)) {
                    let mut message = format!(
                        "the GMSA cred spec contents for {} {} does not match the contents of GMSA resource {}",
                        owner.kind,
                        go_quote(&owner.name),
                        go_quote(name)
                    );
                    if let Err(e) = compared {
                        message.push_str(&format!(": {e}"));
                    }
                    return Err(AdmissionError::Denied { code: 422, message });
                }
            }
            None if contents.is_some() => {
                return Err(AdmissionError::Denied {
                    code: 422,
                    message: format!(
                        "{} {} has a GMSA cred spec set, but does not define the name of the corresponding resource",
                        owner.kind,
                        go_quote(&owner.name)
                    ),
                });
            }
            None => {}
        }
    }
    Ok(())
}

/// Upstream `validateUpdateRequest`: the GMSA name and contents of the pod and of each container
/// (matched by name) must equal the old pod's.
pub fn validate_update(new: &Value, old: &Value) -> Result<(), AdmissionError> {
    let old_owners = owners(old);
    let empty = Value::Object(serde_json::Map::new());
    for owner in owners(new) {
        let Some(options) = new.pointer(&owner.pointer) else {
            continue;
        };
        let old_options = old_owners
            .iter()
            .find(|o| o.kind == owner.kind && (o.kind == "pod" || o.name == owner.name))
            .and_then(|o| old.pointer(&o.pointer))
            .unwrap_or(&empty);
        let mut modified = Vec::new();
        if str_field(options, "gmsaCredentialSpecName")
            != str_field(old_options, "gmsaCredentialSpecName")
        {
            modified.push("name");
        }
        if str_field(options, "gmsaCredentialSpec") != str_field(old_options, "gmsaCredentialSpec")
        {
            modified.push("contents");
        }
        if !modified.is_empty() {
            return Err(AdmissionError::Denied {
                code: 403,
                message: format!(
                    "cannot update an existing pod's GMSA settings (GMSA {} modified on {} {})",
                    modified.join(" and "),
                    owner.kind,
                    go_quote(&owner.name)
                ),
            });
        }
    }
    Ok(())
}

/// Go's `json.Marshal` of a decoded JSON value: object keys sorted, `<`, `>`, `&`, U+2028 and
/// U+2029 escaped.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                if let Some(item) = map.get(k) {
                    write_go_json(item, out);
                }
            }
            out.push('}');
        }
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn billing_gmsa() -> Value {
        json!({
            "apiVersion": "windows.k8s.io/v1", "kind": "GMSACredentialSpec",
            "metadata": {"name": "billing-gmsa"},
            "credspec": {"ActiveDirectoryConfig": {"GroupManagedServiceAccounts": [{"Name": "billing-svc", "Scope": "CORP.EXAMPLE.COM"}]},
                         "CmsPlugins": ["ActiveDirectory"]}
        })
    }

    fn lookup(name: &str) -> Option<Value> {
        match name {
            "billing-gmsa" => Some(billing_gmsa()),
            "empty" => Some(json!({"metadata": {"name": "empty"}})),
            _ => None,
        }
    }

    fn expected() -> String {
        r#"{"ActiveDirectoryConfig":{"GroupManagedServiceAccounts":[{"Name":"billing-svc","Scope":"CORP.EXAMPLE.COM"}]},"CmsPlugins":["ActiveDirectory"]}"#.to_string()
    }

    fn pod(pod_opts: Option<Value>, container_opts: Option<Value>) -> Value {
        let mut p = json!({"metadata": {"name": "billing-worker"}, "spec": {"containers": [{"name": "worker", "image": "i"}]}});
        if let Some(o) = pod_opts {
            p["spec"]["securityContext"] = json!({"windowsOptions": o});
        }
        if let Some(o) = container_opts {
            p["spec"]["containers"][0]["securityContext"] = json!({"windowsOptions": o});
        }
        p
    }

    #[test]
    fn gmsa_contents_are_filled_at_pod_and_container_level() {
        let mut p = pod(
            Some(json!({"gmsaCredentialSpecName": "billing-gmsa"})),
            Some(json!({"gmsaCredentialSpecName": "billing-gmsa"})),
        );
        p["spec"]["initContainers"] = json!([{"name": "init", "securityContext": {"windowsOptions": {"gmsaCredentialSpecName": "billing-gmsa"}}}]);
        admit_create(&mut p, lookup).expect("admitted");
        assert_eq!(
            p["spec"]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"],
            json!(expected())
        );
        assert_eq!(
            p["spec"]["containers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"],
            json!(expected())
        );
        assert_eq!(
            p["spec"]["initContainers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"],
            json!(expected())
        );
    }

    #[test]
    fn gmsa_unknown_name_is_refused_with_404() {
        let mut p = pod(Some(json!({"gmsaCredentialSpecName": "nope"})), None);
        let err = admit_create(&mut p, lookup).expect_err("unknown");
        assert_eq!(
            err,
            AdmissionError::Denied {
                code: 404,
                message: "cred spec nope does not exist".into()
            }
        );
        assert_eq!(err.reason(), "NotFound");
        assert_eq!(
            err.status_message("pods", "billing-worker"),
            "admission webhook \"admission-webhook.windows-gmsa.sigs.k8s.io\" denied the request: cred spec nope does not exist"
        );
    }

    #[test]
    fn gmsa_spec_without_content_is_refused_with_417() {
        let mut p = pod(None, Some(json!({"gmsaCredentialSpecName": "empty"})));
        let err = admit_create(&mut p, lookup).expect_err("no content");
        assert_eq!(
            err,
            AdmissionError::Denied {
                code: 417,
                message: "cred spec empty does not have a credspec key".into()
            }
        );
    }

    #[test]
    fn gmsa_preset_matching_content_is_accepted_even_reformatted() {
        let reformatted = r#"{ "CmsPlugins": ["ActiveDirectory"], "ActiveDirectoryConfig": {"GroupManagedServiceAccounts": [{"Scope": "CORP.EXAMPLE.COM", "Name": "billing-svc"}]}}"#;
        let mut p = pod(
            None,
            Some(
                json!({"gmsaCredentialSpecName": "billing-gmsa", "gmsaCredentialSpec": reformatted}),
            ),
        );
        admit_create(&mut p, lookup).expect("matching contents");
        assert_eq!(
            p["spec"]["containers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"],
            json!(reformatted)
        );
    }

    #[test]
    fn gmsa_preset_mismatching_content_is_refused_with_422() {
        let mut p = pod(
            None,
            Some(
                json!({"gmsaCredentialSpecName": "billing-gmsa", "gmsaCredentialSpec": "{\"a\":1}"}),
            ),
        );
        let err = admit_create(&mut p, lookup).expect_err("mismatch");
        assert_eq!(
            err,
            AdmissionError::Denied {
                code: 422,
                message: "the GMSA cred spec contents for container \"worker\" does not match the contents of GMSA resource \"billing-gmsa\"".into()
            }
        );
        let mut p = pod(
            Some(
                json!({"gmsaCredentialSpecName": "billing-gmsa", "gmsaCredentialSpec": "not json"}),
            ),
            None,
        );
        match admit_create(&mut p, lookup) {
            Err(AdmissionError::Denied { code: 422, message }) => assert!(
                message.starts_with("the GMSA cred spec contents for pod \"billing-worker\" does not match the contents of GMSA resource \"billing-gmsa\": unable to parse \"not json\" as a JSON object"),
                "{message}"
            ),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn gmsa_content_without_name_is_refused_with_422() {
        let mut p = pod(Some(json!({"gmsaCredentialSpec": "{}"})), None);
        let err = admit_create(&mut p, lookup).expect_err("no name");
        assert_eq!(
            err,
            AdmissionError::Denied {
                code: 422,
                message: "pod \"billing-worker\" has a GMSA cred spec set, but does not define the name of the corresponding resource".into()
            }
        );
    }

    #[test]
    fn gmsa_pods_without_gmsa_are_untouched() {
        let mut p = pod(Some(json!({"runAsUserName": "ContainerUser"})), None);
        let before = p.clone();
        admit_create(&mut p, lookup).expect("admitted");
        assert_eq!(p, before);
    }

    #[test]
    fn gmsa_settings_cannot_change_on_update() {
        let mut old = pod(
            None,
            Some(json!({"gmsaCredentialSpecName": "billing-gmsa"})),
        );
        admit_create(&mut old, lookup).expect("admitted");
        assert_eq!(validate_update(&old, &old), Ok(()));

        let mut renamed = old.clone();
        renamed["spec"]["containers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpecName"] =
            json!("other");
        renamed["spec"]["containers"][0]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"] =
            json!("{}");
        let err = validate_update(&renamed, &old).expect_err("changed");
        assert_eq!(
            err,
            AdmissionError::Denied {
                code: 403,
                message: "cannot update an existing pod's GMSA settings (GMSA name and contents modified on container \"worker\")".into()
            }
        );
        let mut added = old.clone();
        added["spec"]["securityContext"] =
            json!({"windowsOptions": {"gmsaCredentialSpecName": "billing-gmsa"}});
        assert_eq!(
            validate_update(&added, &old).map_err(|e| e.to_string()),
            Err("cannot update an existing pod's GMSA settings (GMSA name modified on pod \"billing-worker\")".to_string())
        );
    }

    #[test]
    fn gmsa_contents_are_marshalled_like_go() {
        assert_eq!(
            go_json(&json!({"b": "<&>", "a": [1, true, null]})),
            r#"{"a":[1,true,null],"b":"\u003c\u0026\u003e"}"#
        );
    }

    #[test]
    fn gmsa_admission_never_panics_on_odd_shapes() {
        for mut p in [
            json!(null),
            json!({"spec": 1}),
            json!({"metadata": 1, "spec": {"securityContext": {"windowsOptions": {"gmsaCredentialSpecName": 5, "gmsaCredentialSpec": 7}}, "containers": [1, {"securityContext": {"windowsOptions": []}}]}}),
        ] {
            let _ = admit_create(&mut p, lookup);
            let _ = validate_update(&p, &json!(null));
        }
    }
}
