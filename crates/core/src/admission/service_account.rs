//! The ServiceAccount admission plugin's mutation of new pods (upstream's
//! `plugin/pkg/admission/serviceaccount`): the pod runs as `default` unless it names an account,
//! and, unless the pod or its account opts out with `automountServiceAccountToken: false`, gets
//! the projected `kube-api-access-*` volume — a bound token (`token`, refreshed by the node), the
//! cluster CA (`ca.crt`, from the `kube-root-ca.crt` ConfigMap) and the pod's namespace
//! (`namespace`) — mounted read-only at `/var/run/secrets/kubernetes.io/serviceaccount` in every
//! container and init container that does not mount something there already.
//!
//! Mirror pods (static pods reported by a node) are left alone, as upstream leaves them.

use serde_json::{Value, json};

/// Where the token, CA and namespace appear in containers.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The projected volume's name prefix.
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// The token lifetime the volume asks for: upstream's one hour plus seven seconds, which tells
/// the API server the request comes from the projected volume.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// The ConfigMap holding the cluster CA in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// Mutates a pod being created. `account` is the ServiceAccount the pod will run as, when it
/// exists; `volume_name` is the generated `kube-api-access-xxxxx` name to use.
pub fn admit(pod: &mut Value, account: Option<&Value>, volume_name: &str) {
    if pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let named = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if !named {
        spec.insert("serviceAccountName".into(), json!("default"));
    }
    // Upstream `serviceaccount` admission: a pod that names no pull secrets gets its
    // account's, whatever the token automount says.
    let has_pull_secrets = spec
        .get("imagePullSecrets")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    if !has_pull_secrets
        && let Some(secrets) = account
            .and_then(|a| a.get("imagePullSecrets"))
            .and_then(Value::as_array)
            .filter(|s| !s.is_empty())
    {
        let names: Vec<Value> = secrets
            .iter()
            .filter_map(|s| s.get("name").and_then(Value::as_str))
            .map(|name| json!({ "name": name }))
            .collect();
        spec.insert("imagePullSecrets".into(), Value::Array(names));
    }
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .and_then(|a| a.get("automountServiceAccountToken"))
                .and_then(Value::as_bool)
        })
        .unwrap_or(true);
    if !automount {
        return;
    }
    let mounts_path = |c: &Value| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|ms| {
                ms.iter().any(|m| {
                    m.get("mountPath")
                        .and_then(Value::as_str)
                        .is_some_and(|p| p.trim_end_matches('/') == MOUNT_PATH)
                })
            })
    };
    let has_volume = spec
        .get("volumes")
        .and_then(Value::as_array)
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                v.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.starts_with(VOLUME_PREFIX))
            })
        });
    if has_volume {
        return;
    }
    let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
    if let Some(vs) = volumes.as_array_mut() {
        vs.push(token_volume(volume_name));
    } else {
        *volumes = json!([token_volume(volume_name)]);
    }
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut() {
            if mounts_path(c) {
                continue;
            }
            let Some(obj) = c.as_object_mut() else {
                continue;
            };
            let mounts = obj.entry("volumeMounts").or_insert_with(|| json!([]));
            let mount = json!({"name": volume_name, "readOnly": true, "mountPath": MOUNT_PATH});
            match mounts.as_array_mut() {
                Some(ms) => ms.push(mount),
                None => *mounts = json!([mount]),
            }
        }
    }
}

/// The projected volume upstream adds.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}],
            "initContainers": [{"name": "i"}]
        }})
    }

    #[test]
    fn a_new_pod_gets_the_default_account_and_the_token_volume_everywhere() {
        let mut p = pod();
        admit(&mut p, None, "kube-api-access-abcde");
        assert_eq!(p["spec"]["serviceAccountName"], "default");
        assert_eq!(
            p["spec"]["volumes"][0],
            token_volume("kube-api-access-abcde")
        );
        for c in ["containers", "initContainers"] {
            for container in p["spec"][c].as_array().expect("list") {
                let mounts = container["volumeMounts"].as_array().expect("mounts");
                assert!(mounts.iter().any(|m| m["mountPath"] == MOUNT_PATH
                    && m["readOnly"] == true
                    && m["name"] == "kube-api-access-abcde"));
            }
        }
    }

    #[test]
    fn the_pod_or_its_account_may_opt_out_and_the_pod_wins() {
        let mut p = pod();
        p["spec"]["automountServiceAccountToken"] = json!(false);
        admit(&mut p, None, "kube-api-access-abcde");
        assert!(p["spec"].get("volumes").is_none());

        let account = json!({"automountServiceAccountToken": false});
        let mut p = pod();
        admit(&mut p, Some(&account), "kube-api-access-abcde");
        assert!(p["spec"].get("volumes").is_none());

        let mut p = pod();
        p["spec"]["automountServiceAccountToken"] = json!(true);
        admit(&mut p, Some(&account), "kube-api-access-abcde");
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn a_pod_without_pull_secrets_gets_its_accounts_even_without_a_token() {
        let account = json!({
            "automountServiceAccountToken": false,
            "imagePullSecrets": [{"name": "regcred"}, {"name": "other"}]
        });
        let mut p = pod();
        admit(&mut p, Some(&account), "kube-api-access-abcde");
        assert_eq!(
            p["spec"]["imagePullSecrets"],
            json!([{"name": "regcred"}, {"name": "other"}])
        );

        let mut own = pod();
        own["spec"]["imagePullSecrets"] = json!([{"name": "mine"}]);
        admit(&mut own, Some(&account), "kube-api-access-abcde");
        assert_eq!(own["spec"]["imagePullSecrets"], json!([{"name": "mine"}]));
    }

    #[test]
    fn an_existing_mount_at_the_path_and_mirror_pods_are_left_alone() {
        let mut p = pod();
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "own", "mountPath": MOUNT_PATH}]);
        admit(&mut p, None, "kube-api-access-abcde");
        let first = p["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0]["name"], "own");

        let mut m = pod();
        m["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        admit(&mut m, None, "kube-api-access-abcde");
        assert!(m["spec"].get("serviceAccountName").is_none());
    }
}
