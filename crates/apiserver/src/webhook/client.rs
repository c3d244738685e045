//! The HTTP side of a webhook call: a POST of the review over HTTPS (HTTP/1.1), the server's
//! certificate checked against the webhook's `caBundle` (or the system's roots without one),
//! the whole call bounded by the webhook's `timeoutSeconds`. Each webhook keeps its idle
//! connections for the next call (upstream's clients keep a transport per `caBundle`), so a
//! call on loopback costs one request, not a TCP and TLS handshake.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Idle connections kept per webhook, at least as many as the calls one webhook sees at once
/// under load (a call that finds none idle pays a TCP and TLS handshake); beyond it the
/// extras close.
const MAX_IDLE: usize = 64;
/// Largest answer read from a webhook (upstream reads at most 3 MiB of response too).
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where one call goes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The URL as upstream's messages name it (`https://host:port/path?timeout=10s`).
    pub url: String,
    /// The address dialled (host name or IP) and its port.
    pub host: String,
    pub port: u16,
    /// The name the server's certificate must carry: the URL's host, or `NAME.NAMESPACE.svc`
    /// for a webhook reached through a Service.
    pub server_name: String,
    /// The request target: path and query.
    pub path_and_query: String,
}

/// Why a call did not produce an answer; the text follows `failed to call webhook: ` in
/// upstream's messages.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("Post {url:?}: context deadline exceeded")]
    Timeout { url: String },
    #[error("Post {url:?}: dial tcp {addr}: {source}")]
    Connect {
        url: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Post {url:?}: tls: {source}")]
    Tls {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Post {url:?}: {detail}")]
    Http { url: String, detail: String },
    #[error("the server responded with the status code {code} but did not return more information")]
    Status { code: u16 },
}

/// The certificates a server the API server calls (a webhook, an aggregated API server) must
/// chain to: the PEM certificates of `ca_bundle`, or the system's roots when it is empty. An
/// unreadable bundle, or one with no certificate, is an error.
pub(crate) fn trust_roots(ca_bundle: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        return Ok(roots);
    }
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("invalid caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("invalid caBundle: no certificate found".to_string());
    }
    Ok(roots)
}

/// A webhook's client: its TLS configuration and its idle connections.
pub(crate) struct Client {
    tls: TlsConnector,
    idle: Mutex<Vec<(String, SendRequest<Full<Bytes>>)>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// A client trusting the PEM certificates of `ca_bundle`, or the system's roots when it is
    /// empty. An unreadable bundle is an error (the webhook then fails by its policy).
    pub fn new(ca_bundle: &[u8]) -> Result<Client, String> {
        let roots = trust_roots(ca_bundle)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Client {
            tls: TlsConnector::from(Arc::new(config)),
            idle: Mutex::new(Vec::new()),
        })
    }

    /// POSTs `body` (JSON) to `target` and returns the answer's body; the whole call, dial
    /// included, within `timeout`.
    pub async fn post(
        &self,
        target: &Target,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        match tokio::time::timeout(timeout, self.call(target, body)).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Timeout {
                url: target.url.clone(),
            }),
        }
    }

    async fn call(&self, target: &Target, body: Bytes) -> Result<Bytes, CallError> {
        let key = format!("{}:{}/{}", target.host, target.port, target.server_name);
        let mut sender = match self.take_idle(&key) {
            Some(s) => s,
            None => self.connect(target).await?,
        };
        let request = Request::post(target.path_and_query.as_str())
            .header(
                http::header::HOST,
                format!("{}:{}", target.server_name, target.port),
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .body(Full::new(body))
            .map_err(|e| CallError::Http {
                url: target.url.clone(),
                detail: e.to_string(),
            })?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| CallError::Http {
                url: target.url.clone(),
                detail: e.to_string(),
            })?;
        let status = response.status();
        let limited = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE);
        let bytes = limited
            .collect()
            .await
            .map_err(|e| CallError::Http {
                url: target.url.clone(),
                detail: format!("reading the answer: {e}"),
            })?
            .to_bytes();
        self.put_idle(key, sender);
        if !status.is_success() {
            return Err(CallError::Status {
                code: status.as_u16(),
            });
        }
        Ok(bytes)
    }

    fn take_idle(&self, key: &str) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(pos) = idle.iter().position(|(k, _)| k == key) {
            let (_, sender) = idle.swap_remove(pos);
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, key: String, sender: SendRequest<Full<Bytes>>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((key, sender));
        }
    }

    async fn connect(&self, target: &Target) -> Result<SendRequest<Full<Bytes>>, CallError> {
        let addr = format!("{}:{}", target.host, target.port);
        let tcp = TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|source| CallError::Connect {
                url: target.url.clone(),
                addr: addr.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let name =
            ServerName::try_from(target.server_name.clone()).map_err(|e| CallError::Tls {
                url: target.url.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })?;
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|source| CallError::Tls {
                url: target.url.clone(),
                source,
            })?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| CallError::Http {
                url: target.url.clone(),
                detail: e.to_string(),
            })?;
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "webhook connection ended with an error");
            }
        });
        Ok(sender)
    }
}
