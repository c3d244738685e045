//! A pod's registry credentials, read as the kubelet's `getPullSecretsForPod` reads them: every
//! Secret the pod's `imagePullSecrets` names (the ServiceAccount's were copied into the pod at
//! admission), from the pod's namespace, turned into a [`Keyring`] by core's rules. Secrets
//! that cannot be read are named, for the kubelet's `FailedToRetrieveImagePullSecret` warning.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use tandem_core::images::keyring::{Keyring, KeyringError};

/// Where a worker reads Secrets from: the API, or nothing in tests.
#[async_trait]
pub trait SecretSource: Send + Sync {
    /// The Secret, `Ok(None)` when it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error>;
}

/// Reads Secrets through the node's API client.
pub struct ApiSecrets(pub kube::Client);

#[async_trait]
impl SecretSource for ApiSecrets {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, kube::Error> {
        Api::<Secret>::namespaced(self.0.clone(), namespace)
            .get_opt(name)
            .await
    }
}

/// No Secrets at all: every pod pulls without credentials.
pub struct NoSecrets;

#[async_trait]
impl SecretSource for NoSecrets {
    async fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, kube::Error> {
        Ok(None)
    }
}

/// The keyring of a pod and the pull secrets that could not be read.
#[derive(Debug, Default)]
pub struct PodKeyring {
    pub keyring: Keyring,
    /// Secret names that are missing or could not be fetched, in the pod's order.
    pub missing: Vec<String>,
}

/// Reads the pod's pull secrets. A Secret whose docker config is malformed fails the whole
/// lookup, as upstream's `MakeDockerKeyring` does (the pull then fails with that message).
pub async fn pod_keyring(
    source: &dyn SecretSource,
    pod: &Pod,
) -> Result<PodKeyring, (String, KeyringError)> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let names = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_deref())
        .unwrap_or_default();
    let mut out = PodKeyring::default();
    for reference in names {
        let name = reference.name.as_str();
        if name.is_empty() {
            continue;
        }
        match source.secret(namespace, name).await {
            Ok(Some(secret)) => {
                let data: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                out.keyring
                    .add_secret_data(&data)
                    .map_err(|e| (name.to_string(), e))?;
            }
            Ok(None) => out.missing.push(name.to_string()),
            Err(e) => {
                tracing::debug!(secret = name, error = %e, "pull secret could not be read");
                out.missing.push(name.to_string());
            }
        }
    }
    Ok(out)
}
