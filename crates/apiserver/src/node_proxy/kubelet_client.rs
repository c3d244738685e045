//! How the API server reaches node agents: kube-apiserver's kubelet client (`KubeletClientConfig`
//! and its transport, `pkg/kubelet/client/kubelet_client.go`) with kubeadm's settings.
//!
//! - TLS always, presenting a client certificate `CN=`[`KUBELET_CLIENT_CN`] that the cluster CA
//!   issues at every start: kube-apiserver's `--kubelet-client-certificate`/`--kubelet-client-key`.
//!   Node agents serve only this user (see `tandem_agent::server`).
//! - The agent's serving certificate is not verified: the agent signs its own, and upstream's
//!   transport does not verify the kubelet's either unless `--kubelet-certificate-authority` is
//!   given (without a CA, `transportConfig` sets `TLS.Insecure`, Go's `InsecureSkipVerify`).
//!   tandem has no such flag yet. The handshake's signatures are still checked, so
//!   the session is with the holder of the key the agent presented; what is not established is
//!   that this key belongs to the node. Traffic to a node is therefore as trustworthy as the
//!   network path to the node's address.
//! - HTTP/1.1 only in ALPN: SPDY and websocket upgrades need it.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tandem_netproxy::Forwarder;
use tandem_netproxy::tls::AnyServerCert;

use crate::pki::Pki;
use crate::server::StartError;

/// The user name of the API server's client certificate towards node agents: kubeadm's
/// `apiserver-kubelet-client.crt` subject. Must equal `tandem_agent::server::APISERVER_CLIENT_CN`
/// (the agent's tests check it).
pub const KUBELET_CLIENT_CN: &str = "kube-apiserver-kubelet-client";

/// How long the kubelet client certificate is valid. It is issued again at every start, so this
/// bounds only how long a server may run without a restart (kubeadm's certificates last a year
/// too).
pub const KUBELET_CLIENT_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The forwarder `node_proxy` uses towards node agents: TLS with a client certificate
/// `CN=kube-apiserver-kubelet-client` (no groups) issued now by the cluster CA, any serving
/// certificate accepted. Fails as the server's start fails: the certificate could not be issued
/// or read back, or rustls refused the configuration.
pub fn kubelet_client(pki: &Pki) -> Result<Forwarder, StartError> {
    let (cert_pem, key_pem) =
        pki.issue_client_cert(KUBELET_CLIENT_CN, &[], KUBELET_CLIENT_CERT_VALIDITY)?;
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
        .with_client_auth_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Forwarder::new().with_tls(Arc::new(config)))
}
