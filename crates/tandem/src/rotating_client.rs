//! A node's API client whose client certificate can be replaced while it runs: the TLS
//! configuration asks a [`SwappableIdentity`] for the certificate at every handshake, so once
//! the agent's certificate is renewed (`tandem_agent::bootstrap::rotate` rewrites the node's
//! kubeconfig), every new connection presents the new one — as client-go's certificate manager
//! does for the kubelet. Connections already open keep the identity they started with until the
//! pool closes them.

use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::Context;
use kube::client::ConfigExt;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;

/// The client certificate of the latest kubeconfig.
#[derive(Debug)]
pub struct SwappableIdentity {
    current: RwLock<Arc<dyn ResolvesClientCert>>,
}

impl ResolvesClientCert for SwappableIdentity {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().ok()?.clone();
        current.resolve(root_hint_subjects, sigschemes)
    }

    fn has_certs(&self) -> bool {
        self.current.read().map(|c| c.has_certs()).unwrap_or(false)
    }
}

impl SwappableIdentity {
    /// Takes the client certificate of the kubeconfig at `path` from now on.
    pub async fn reload(&self, path: &Path) -> anyhow::Result<()> {
        let (_, tls) = load(path).await?;
        let mut current = self
            .current
            .write()
            .map_err(|_| anyhow::anyhow!("the identity lock is poisoned"))?;
        *current = tls.client_auth_cert_resolver.clone();
        Ok(())
    }
}

async fn load(path: &Path) -> anyhow::Result<(kube::Config, rustls::ClientConfig)> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("invalid kubeconfig")?;
    let tls = config
        .rustls_client_config()
        .context("cannot build the TLS configuration")?;
    Ok((config, tls))
}

/// A client for the kubeconfig at `path` (client-certificate credentials) whose certificate
/// follows [`SwappableIdentity::reload`].
pub async fn client(path: &Path) -> anyhow::Result<(kube::Client, Arc<SwappableIdentity>)> {
    let (config, mut tls) = load(path).await?;
    let identity = Arc::new(SwappableIdentity {
        current: RwLock::new(tls.client_auth_cert_resolver.clone()),
    });
    tls.client_auth_cert_resolver = identity.clone();
    Ok((
        crate::h2_client::client_with_tls(&config, tls, false),
        identity,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    /// Writes a kubeconfig for `user`, returning its certificate's DER.
    fn write(pki: &tandem_apiserver::pki::Pki, path: &Path, user: &str) -> Vec<u8> {
        let (cert, key) = pki
            .issue_client_cert(
                user,
                &["system:nodes"],
                std::time::Duration::from_secs(3600),
            )
            .expect("issue");
        let yaml = pki.client_kubeconfig("https://127.0.0.1:1", user, &cert, &key);
        std::fs::write(path, yaml).expect("write kubeconfig");
        CertificateDer::from_pem_slice(cert.as_bytes())
            .expect("pem")
            .to_vec()
    }

    fn presented(identity: &SwappableIdentity) -> Vec<u8> {
        let schemes = [rustls::SignatureScheme::ECDSA_NISTP256_SHA256];
        let key = identity.resolve(&[], &schemes).expect("a certificate");
        key.cert[0].to_vec()
    }

    #[tokio::test]
    async fn a_reloaded_kubeconfig_changes_the_certificate_new_handshakes_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = tandem_apiserver::pki::Pki::load_or_create(dir.path(), &[]).expect("pki");
        let path = dir.path().join("kubeconfig");
        let first = write(&pki, &path, "system:node:n1");
        let (_client, identity) = client(&path).await.expect("client");
        assert!(identity.has_certs());
        assert_eq!(presented(&identity), first);
        let second = write(&pki, &path, "system:node:n1");
        assert_ne!(first, second);
        identity.reload(&path).await.expect("reload");
        assert_eq!(presented(&identity), second);
        // A broken file leaves the identity as it was.
        std::fs::write(&path, "not a kubeconfig").expect("write");
        assert!(identity.reload(&path).await.is_err());
        assert_eq!(presented(&identity), second);
    }
}
