//! The projection family of volume plugins, the kubelet's `pkg/volume/{configmap,secret,
//! downwardapi,projected}`: each builds a payload of files (`MakePayload`/`CollectData`) that
//! the [`atomic_writer`] writes into the volume directory, and the
//! projected volume's `serviceAccountToken` source with its refresh period (the kubelet's token
//! manager).

use std::path::Path;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount,
    ServiceAccountTokenProjection, VolumeProjection,
};
use kube::api::{Api, PostParams};
use tandem_core::field::go_quote;

use super::atomic_writer::{self, FileProjection, Payload};
use super::error::{SetUpError, aggregate};
use super::{file_mode, make_dir};
use crate::env::{self, EnvContext, EnvError, Objects};

pub(super) fn write_volume(dir: &Path, payload: Payload) -> Result<(), SetUpError> {
    make_dir(dir, 0o755)?;
    atomic_writer::write(dir, &payload).map_err(SetUpError::Write)
}

pub(super) async fn fetch_config_map(
    objects: &mut Objects<'_>,
    name: &str,
    optional: bool,
) -> Result<ConfigMap, SetUpError> {
    match objects.config_map(name, optional).await {
        Ok(found) => Ok(found.unwrap_or_default()),
        Err(EnvError::ConfigMapNotFound { name }) => Err(SetUpError::ConfigMapNotFound(name)),
        Err(other) => Err(SetUpError::Field(other)),
    }
}

pub(super) async fn fetch_secret(
    objects: &mut Objects<'_>,
    name: &str,
    optional: bool,
) -> Result<Secret, SetUpError> {
    if name.is_empty() {
        return if optional {
            Ok(Secret::default())
        } else {
            Err(SetUpError::SecretNotFound(String::new()))
        };
    }
    match objects.secret(name, optional).await {
        Ok(found) => Ok(found.unwrap_or_default()),
        Err(EnvError::SecretNotFound { name }) => Err(SetUpError::SecretNotFound(name)),
        Err(other) => Err(SetUpError::Field(other)),
    }
}

/// Upstream `configmap.MakePayload`: every key of `data` and `binaryData` with `default_mode`,
/// or just `items` (`key` → `path`, with its own `mode`); a missing item key is an error unless
/// the source is optional.
pub(super) fn config_map_payload(
    items: Option<&[KeyToPath]>,
    config_map: &ConfigMap,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let text = config_map.data.as_ref();
    let binary = config_map.binary_data.as_ref();
    let lookup = |key: &str| -> Option<Vec<u8>> {
        text.and_then(|d| d.get(key))
            .map(|v| v.as_bytes().to_vec())
            .or_else(|| binary.and_then(|d| d.get(key)).map(|v| v.0.clone()))
    };
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            let text_files = text
                .into_iter()
                .flatten()
                .map(|(k, v)| (k, v.as_bytes().to_vec()));
            let binary_files = binary.into_iter().flatten().map(|(k, v)| (k, v.0.clone()));
            for (key, data) in text_files.chain(binary_files) {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data,
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(data) = lookup(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(SetUpError::MissingConfigMapKey(item.key.clone()));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data,
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// Upstream `secret.MakePayload`: like [`config_map_payload`] over the Secret's decoded `data`.
pub(super) fn secret_payload(
    items: Option<&[KeyToPath]>,
    secret: &Secret,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, SetUpError> {
    let data = secret.data.as_ref();
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, value) in data.into_iter().flatten() {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data: value.0.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(value) = data.and_then(|d| d.get(&item.key)) else {
                    if optional {
                        continue;
                    }
                    return Err(SetUpError::MissingSecretKey(item.key.clone()));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: value.0.clone(),
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

/// Upstream `downwardapi.CollectData`: one file per item, `fieldRef` limited to the metadata
/// paths (labels and annotations as sorted `key="value"` lines), `resourceFieldRef` against the
/// named container with limits defaulted to the node's allocatable. Failures of all items are
/// reported together.
pub(super) fn downward_api_payload(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    ctx: &EnvContext,
    default_mode: u32,
) -> Result<Payload, SetUpError> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for item in items {
        let value = if let Some(field) = &item.field_ref {
            env::metadata_field_value(pod, &field.field_path)
        } else if let Some(resource) = &item.resource_field_ref {
            let name = resource.container_name.as_deref().unwrap_or("");
            env::find_container(pod, name)
                .and_then(|c| env::container_resource_value(resource, c, &ctx.node_allocatable))
        } else {
            Ok(String::new())
        };
        match value {
            Ok(v) => {
                payload.insert(
                    atomic_writer::clean_path(&item.path),
                    FileProjection {
                        data: v.into_bytes(),
                        mode: file_mode(item.mode, default_mode),
                    },
                );
            }
            Err(e) => errors.push(SetUpError::Field(e)),
        }
    }
    aggregate(errors)?;
    Ok(payload)
}

/// Upstream `projected.collectData`: the sources' payloads merged in order (a later source
/// wins a path). A serviceAccountToken source is skipped with a warning when the API server
/// has no TokenRequest (`serviceaccounts/token`) endpoint.
pub(super) async fn projected_payload(
    objects: &mut Objects<'_>,
    sources: &[VolumeProjection],
    pod: &Pod,
    ctx: &EnvContext,
    default_mode: u32,
    warnings: &mut Vec<String>,
    volume: &str,
) -> Result<Payload, SetUpError> {
    let mut payload = Payload::new();
    let mut errors = Vec::new();
    for source in sources {
        let part = if let Some(cm) = &source.config_map {
            let optional = cm.optional.unwrap_or(false);
            match fetch_config_map(objects, &cm.name, optional).await {
                Ok(found) => {
                    config_map_payload(cm.items.as_deref(), &found, default_mode, optional)
                }
                Err(e) => Err(e),
            }
        } else if let Some(s) = &source.secret {
            let optional = s.optional.unwrap_or(false);
            match fetch_secret(objects, &s.name, optional).await {
                Ok(found) => secret_payload(s.items.as_deref(), &found, default_mode, optional),
                Err(e) => Err(e),
            }
        } else if let Some(d) = &source.downward_api {
            downward_api_payload(d.items.as_deref().unwrap_or(&[]), pod, ctx, default_mode)
        } else if let Some(token) = &source.service_account_token {
            // Upstream narrows the token file to 0600 when fsGroup will make it group-readable.
            let fs_group = pod
                .spec
                .as_ref()
                .and_then(|s| s.security_context.as_ref())
                .and_then(|s| s.fs_group)
                .is_some();
            let mode = if fs_group { 0o600 } else { default_mode };
            match service_account_token(objects.client(), pod, token).await {
                Ok(Some(t)) => Ok(Payload::from([(
                    token.path.clone(),
                    FileProjection {
                        data: t.into_bytes(),
                        mode,
                    },
                )])),
                Ok(None) => {
                    let msg = format!(
                        "volume {volume}: skipped the serviceAccountToken projection {}: the API server does not serve serviceaccounts/token",
                        go_quote(&token.path)
                    );
                    tracing::warn!("{msg}");
                    warnings.push(msg);
                    Ok(Payload::new())
                }
                Err(e) => Err(e),
            }
        } else if source.cluster_trust_bundle.is_some() {
            Err(SetUpError::Unsupported(
                "projected clusterTrustBundle".to_owned(),
            ))
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => payload.extend(p),
            Err(e) => errors.push(e),
        }
    }
    aggregate(errors)?;
    Ok(payload)
}

/// How often a pod's projected ServiceAccount tokens must be rewritten: 80 % of the shortest
/// requested lifetime (one hour when unset), as the kubelet's token manager refreshes them.
/// `None` when the pod projects no token.
pub fn token_refresh_period(pod: &Pod) -> Option<std::time::Duration> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes
        .iter()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| t.expiration_seconds.unwrap_or(3600).max(600))
        .min()
        .map(|secs| std::time::Duration::from_secs(secs as u64 * 8 / 10))
}

/// Requests a pod-bound token for the pod's service account (the kubelet's token manager
/// without its cache). `None` when the API server has no `serviceaccounts/token` route: a 404
/// without details (as opposed to a missing ServiceAccount, whose 404 names it) or a 405.
async fn service_account_token(
    client: &kube::Client,
    pod: &Pod,
    projection: &ServiceAccountTokenProjection,
) -> Result<Option<String>, SetUpError> {
    let namespace = env::pod_namespace(pod);
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: projection
                .audience
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
            expiration_seconds: projection.expiration_seconds,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
    match api
        .create_token_request(&account, &PostParams::default(), &request)
        .await
    {
        Ok(tr) => Ok(Some(tr.status.map(|s| s.token).unwrap_or_default())),
        Err(kube::Error::Api(status))
            if (status.code == 404 && status.details.is_none()) || status.code == 405 =>
        {
            Ok(None)
        }
        Err(e) => Err(SetUpError::Token(env::api_message(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn cm(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn config_map_payload_projects_all_keys_or_items() {
        let c = cm(&[("a", "1"), ("b", "2")], &[("bin", b"\x00\x01")]);
        let all = config_map_payload(None, &c, 0o640, false).expect("payload");
        assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b", "bin"]);
        assert!(all.values().all(|f| f.mode == 0o640));
        assert_eq!(all["bin"].data, vec![0, 1]);

        let items = [
            item("a", "conf/a.txt", Some(0o400)),
            item("bin", "b.bin", None),
        ];
        let some = config_map_payload(Some(&items), &c, 0o644, false).expect("payload");
        assert_eq!(some["conf/a.txt"].mode, 0o400);
        assert_eq!(some["conf/a.txt"].data, b"1");
        assert_eq!(some["b.bin"].mode, 0o644);
        assert_eq!(some.len(), 2);

        let missing = [item("zz", "zz", None)];
        assert_eq!(
            config_map_payload(Some(&missing), &c, 0o644, false)
                .expect_err("missing key")
                .to_string(),
            "configmap references non-existent config key: zz"
        );
        assert!(
            config_map_payload(Some(&missing), &c, 0o644, true)
                .expect("optional")
                .is_empty()
        );
        let s = Secret::default();
        assert_eq!(
            secret_payload(Some(&missing), &s, 0o644, false)
                .expect_err("missing key")
                .to_string(),
            "references non-existent secret key: zz"
        );
    }

    #[test]
    fn downward_api_payload_formats_maps_and_aggregates_errors() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "labels": {"tier": "fe", "app": "web"}},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"memory": "64Mi"}}}]}
        }))
        .expect("pod");
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "./name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400},
            {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "requests.memory", "divisor": "1Mi"}}
        ]))
        .expect("items");
        let payload =
            downward_api_payload(&items, &p, &EnvContext::default(), 0o644).expect("payload");
        assert_eq!(payload["labels"].data, b"app=\"web\"\ntier=\"fe\"");
        assert_eq!(payload["name"].data, b"web");
        assert_eq!(payload["name"].mode, 0o400);
        assert_eq!(payload["mem"].data, b"64");

        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}},
            {"path": "x", "resourceFieldRef": {"containerName": "gone", "resource": "limits.cpu"}}
        ]))
        .expect("items");
        assert_eq!(
            downward_api_payload(&bad, &p, &EnvContext::default(), 0o644)
                .expect_err("errors")
                .to_string(),
            "[unsupported fieldPath: spec.nodeName, container gone not found]"
        );
    }

    #[test]
    fn projected_tokens_are_refreshed_at_four_fifths_of_their_lifetime() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "volumes": [
                {"name": "a", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}},
                {"name": "b", "projected": {"sources": [{"serviceAccountToken": {"path": "t2", "expirationSeconds": 1000}}]}}
            ]}
        }))
        .expect("pod");
        assert_eq!(
            token_refresh_period(&pod),
            Some(std::time::Duration::from_secs(800))
        );
        let plain: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}
        }))
        .expect("pod");
        assert_eq!(token_refresh_period(&plain), None);
    }
}
