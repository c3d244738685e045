//! Forwards one HTTP/1.1 request to a backend (plain HTTP, or HTTPS with the caller's TLS client
//! configuration) and, when the backend switches protocols, splices the client's and the
//! backend's upgraded connections.
//!
//! This is the primitive behind the pod subresources that stream: the API server uses it towards
//! the node agent (`pods/log`, `pods/exec`, `pods/attach`, `pods/portforward`), the agent uses it
//! towards the container runtime's streaming server. It does what upstream's
//! `UpgradeAwareHandler` (`k8s.io/apimachinery/pkg/util/proxy/upgradeaware.go`) does for
//! kube-apiserver: the request goes out unchanged apart from its target and its hop-by-hop
//! headers; an answer other than `101 Switching Protocols` comes back as it is (status, headers,
//! streamed body), so a backend's error `Status` reaches the client; a `101` goes back to the
//! client with the backend's headers and the two connections are then copied into each other
//! byte for byte. The proxy never looks inside the upgraded stream, so every streaming protocol
//! (SPDY/3.1, websocket `v4`/`v5.channel.k8s.io`, websocket-tunnelled SPDY) passes unchanged, and
//! a backend that refuses one (containerd answers 403 to a websocket offer of `v5` only) is
//! refused to the client too, which is what lets kubectl fall back to SPDY.
//!
//! An `http://` target is reached over plain TCP (the agent towards containerd's streaming
//! server on loopback). An `https://` target needs a [`Forwarder::with_tls`]: the TLS client
//! configuration decides which server certificates are trusted and which client certificate is
//! presented (the API server towards node agents, see `tandem_apiserver::node_proxy`). The
//! upgraded stream is then spliced inside the TLS session, as upstream's upgrade-aware proxy
//! dials the kubelet with the kubelet client's TLS configuration.

pub mod tls;

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Incoming};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long [`forward`] waits for the TCP connection to the backend: Go's `net.Dialer` timeout
/// in `http.DefaultTransport`, which the kubelet client and the upgrade dialer inherit.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1, and the list Go's
/// `httputil.ReverseProxy` removes). `Connection` itself and the headers it names go too.
const HOP_BY_HOP: [&str; 8] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Why a request could not be forwarded. A backend that answers, even with an error status, is
/// not a failure: its response is returned.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The target is not an `http://` or `https://host[:port]/path?query` URL.
    #[error("invalid backend location {0:?}: expected http://host:port/path or https://…")]
    InvalidTarget(String),
    /// The target is `https://` but the forwarder has no TLS configuration
    /// ([`Forwarder::with_tls`]).
    #[error("backend location {0:?} needs TLS, which this forwarder is not configured for")]
    TlsNotConfigured(String),
    /// The TCP connection to the backend failed (refused, unreachable, name not resolved).
    #[error("dial tcp {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The TCP connection to the backend did not complete in time.
    #[error("dial tcp {addr}: i/o timeout after {timeout:?}")]
    ConnectTimeout { addr: String, timeout: Duration },
    /// The TLS handshake with an `https://` backend failed (the backend refused the client's
    /// certificate, or the client configuration refused the backend's).
    #[error("tls handshake with {addr}")]
    Tls {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP/1.1 connection to the backend could not be set up.
    #[error("HTTP/1.1 handshake with {addr} failed")]
    Handshake {
        addr: String,
        #[source]
        source: hyper::Error,
    },
    /// The request could not be sent, or the backend closed before answering.
    #[error("request to {addr} failed")]
    Request {
        addr: String,
        #[source]
        source: hyper::Error,
    },
    /// The backend answered `101` to a request that did not ask to upgrade.
    #[error("backend {addr} switched protocols for a request that did not ask to upgrade")]
    UnrequestedUpgrade { addr: String },
}

impl ProxyError {
    /// Whether the backend could not be reached at all (upstream's "error dialing backend"). A
    /// failed TLS handshake counts: Go's TLS dialer fails the dial itself.
    pub fn is_dial(&self) -> bool {
        matches!(
            self,
            ProxyError::Connect { .. } | ProxyError::ConnectTimeout { .. } | ProxyError::Tls { .. }
        )
    }
}

/// Forwards requests with a given connect timeout and, for `https://` targets, a TLS client
/// configuration. [`forward`] uses the defaults (plain HTTP only). Cloning is cheap.
#[derive(Clone)]
pub struct Forwarder {
    connect_timeout: Duration,
    tls: Option<TlsConnector>,
    keep_host: bool,
    server_name: Option<String>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls.is_some())
            .field("keep_host", &self.keep_host)
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl Default for Forwarder {
    fn default() -> Self {
        Forwarder {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls: None,
            keep_host: false,
            server_name: None,
        }
    }
}

/// Forwards `req` to `target` (`http://host:port/path?query`) with [`Forwarder::default`]; see
/// [`Forwarder::forward`].
pub async fn forward<B>(req: Request<B>, target: &str) -> Result<Response<Incoming>, ProxyError>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    Forwarder::default().forward(req, target).await
}

impl Forwarder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The same forwarder with another connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The same forwarder, passing the request's own `Host` header on (a reverse proxy in
    /// front of virtual hosts, such as the ingress controller); the target's authority is sent
    /// only when the request has no `Host`.
    pub fn keep_host(mut self) -> Self {
        self.keep_host = true;
        self
    }

    /// The same forwarder, able to reach `https://` targets with `config`: its verifier decides
    /// whether a backend's certificate is accepted and its client certificate, if any, is
    /// presented. Its ALPN list should offer only `http/1.1` (or nothing): the forwarded request
    /// is HTTP/1.1 whatever the backend negotiates. `http://` targets still go over plain TCP.
    pub fn with_tls(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.tls = Some(TlsConnector::from(config));
        self
    }

    /// The same forwarder, checking a TLS backend's certificate against `name` instead of the
    /// target's host: a Service's endpoint is dialled by address but its certificate names the
    /// Service (`NAME.NAMESPACE.svc`), as the API server's calls to aggregated servers expect.
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Sends `req` to `target`, an `http://` or `https://host[:port]/path?query` URL that
    /// replaces the request's own URI, over a new HTTP/1.1 connection (inside TLS for
    /// `https://`), and returns the backend's response.
    ///
    /// - The method, the body (streamed) and the end-to-end headers are kept; hop-by-hop headers
    ///   are dropped, except that an upgrade request (one whose `Connection` names `upgrade`, as
    ///   upstream's `httpstream.IsUpgradeRequest`) keeps `Connection: Upgrade` and `Upgrade`.
    ///   Every other header passes (`Sec-WebSocket-*`, `X-Stream-Protocol-Version`, and also
    ///   `Authorization`: a caller that must not pass credentials on removes them first).
    ///   `Host` becomes the target's authority (unless [`Forwarder::keep_host`]).
    /// - A response other than `101` is returned with its status, end-to-end headers and
    ///   streamed body; errors of the backend are responses, not `Err`.
    /// - A `101` is returned with the backend's headers untouched and an empty body; a task is
    ///   spawned that waits for both upgrades (the client's, which completes once the caller's
    ///   server has written this `101`, and the backend's) and copies bytes both ways with
    ///   `tokio::io::copy_bidirectional`. End of stream on one side is passed on as a
    ///   half-close of the other; the task ends when both directions are done or either fails,
    ///   and dropping it closes both connections. For the client side to upgrade, `req` must
    ///   be the request as the caller's hyper server handed it over (it carries hyper's
    ///   `OnUpgrade`), served with upgrades enabled.
    ///
    /// No request timeout is applied beyond the connect timeout: logs with `follow` and upgraded
    /// sessions legitimately last as long as the client wants.
    pub async fn forward<B>(
        &self,
        mut req: Request<B>,
        target: &str,
    ) -> Result<Response<Incoming>, ProxyError>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn StdError + Send + Sync>>,
    {
        let location = Location::parse(target)?;
        let upgrade = is_upgrade_request(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));

        let (parts, body) = req.into_parts();
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers, upgrade);
        if !(self.keep_host && headers.contains_key(header::HOST))
            && let Ok(host) = HeaderValue::from_str(location.authority.as_str())
        {
            headers.insert(header::HOST, host);
        }
        let mut outgoing = Request::new(body);
        *outgoing.method_mut() = parts.method;
        *outgoing.uri_mut() = Uri::from(location.path_and_query.clone());
        *outgoing.version_mut() = Version::HTTP_11;
        *outgoing.headers_mut() = headers;

        let stream = self.connect(&location).await?;
        let stream = self.secure(&location, stream).await?;
        let addr = location.addr();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|source| ProxyError::Handshake {
                addr: addr.clone(),
                source,
            })?;
        let conn_addr = addr.clone();
        tokio::spawn(async move {
            if let Err(error) = conn.with_upgrades().await {
                tracing::debug!(backend = %conn_addr, %error, "backend connection ended with an error");
            }
        });
        let mut resp =
            sender
                .send_request(outgoing)
                .await
                .map_err(|source| ProxyError::Request {
                    addr: addr.clone(),
                    source,
                })?;

        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            strip_hop_by_hop(resp.headers_mut(), false);
            return Ok(resp);
        }
        let Some(client_upgrade) = client_upgrade else {
            return Err(ProxyError::UnrequestedUpgrade { addr });
        };
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        tokio::spawn(splice(client_upgrade, backend_upgrade, addr));
        Ok(resp)
    }

    async fn connect(&self, location: &Location) -> Result<TcpStream, ProxyError> {
        let connecting = TcpStream::connect((location.host.as_str(), location.port));
        let stream = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                return Err(ProxyError::Connect {
                    addr: location.addr(),
                    source,
                });
            }
            Err(_) => {
                return Err(ProxyError::ConnectTimeout {
                    addr: location.addr(),
                    timeout: self.connect_timeout,
                });
            }
        };
        // Interactive sessions send small writes; do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// The connection the request goes over: `tcp` itself for `http://`, a TLS session on it
    /// for `https://`.
    async fn secure(
        &self,
        location: &Location,
        tcp: TcpStream,
    ) -> Result<Box<dyn Connection>, ProxyError> {
        if !location.tls {
            return Ok(Box::new(tcp));
        }
        let Some(connector) = &self.tls else {
            return Err(ProxyError::TlsNotConfigured(location.target.clone()));
        };
        let host = self.server_name.as_ref().unwrap_or(&location.host);
        let name = ServerName::try_from(host.clone())
            .map_err(|_| ProxyError::InvalidTarget(location.target.clone()))?;
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|source| ProxyError::Tls {
                addr: location.addr(),
                source,
            })?;
        Ok(Box::new(stream))
    }
}

/// A byte stream to a backend: plain TCP or TLS over it.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection for T {}

/// Whether a request asks to switch protocols: a `Connection` header naming `upgrade`, compared
/// case-insensitively, as upstream's `httpstream.IsUpgradeRequest`.
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("upgrade"))
}

/// Removes the hop-by-hop headers of a message: those in [`HOP_BY_HOP`], `Connection` and the
/// headers `Connection` names. With `keep_upgrade`, `Upgrade` stays and `Connection` is set to
/// `Upgrade`, so the next hop sees the same upgrade request.
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    headers.remove(header::CONNECTION);
    for name in named {
        if !(keep_upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        if !(keep_upgrade && name == "upgrade") {
            headers.remove(name);
        }
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    }
}

/// Copies bytes between the two upgraded connections until both directions have ended.
async fn splice(client: OnUpgrade, backend: OnUpgrade, addr: String) {
    let (client, backend) = match tokio::try_join!(client, backend) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::debug!(backend = %addr, %error, "upgrade did not complete");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut backend = TokioIo::new(backend);
    match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
        Ok((to_backend, to_client)) => {
            tracing::debug!(backend = %addr, to_backend, to_client, "upgraded connection closed");
        }
        Err(error) => {
            tracing::debug!(backend = %addr, %error, "upgraded connection ended with an error");
        }
    }
}

/// A parsed `http://` or `https://host:port/path?query` target.
#[derive(Debug)]
struct Location {
    /// The target as given, for messages.
    target: String,
    /// `https://`: the connection is a TLS session.
    tls: bool,
    authority: Authority,
    /// The host to connect to: an IPv6 literal without its brackets.
    host: String,
    port: u16,
    path_and_query: PathAndQuery,
}

impl Location {
    fn parse(target: &str) -> Result<Location, ProxyError> {
        let invalid = || ProxyError::InvalidTarget(target.to_string());
        let uri: Uri = target.parse().map_err(|_| invalid())?;
        let (tls, default_port) = match uri.scheme_str() {
            Some("http") => (false, 80),
            Some("https") => (true, 443),
            _ => return Err(invalid()),
        };
        let authority = uri.authority().cloned().ok_or_else(invalid)?;
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_string();
        if host.is_empty() {
            return Err(invalid());
        }
        let port = authority.port_u16().unwrap_or(default_port);
        let path_and_query = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Ok(Location {
            target: target.to_string(),
            tls,
            authority,
            host,
            port,
            path_and_query,
        })
    }

    /// `host:port` as it appears in messages (IPv6 literals bracketed).
    fn addr(&self) -> String {
        format!("{}:{}", self.authority.host(), self.port)
    }
}

#[cfg(test)]
mod tests;
