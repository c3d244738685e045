//! The runtime side of `kubectl exec` and `kubectl port-forward` for emulated pods: a
//! streaming server like the one containerd runs for CRI `Exec` and `PortForward`
//! (`pkg/kubelet/cri/streaming/server.go`, vendored by containerd). The runtime prepares a
//! session and hands out a single-use URL ([`StreamingServer::exec_url`],
//! [`StreamingServer::port_forward_url`]); the agent splices the client's upgraded connection
//! to it byte for byte, so the client speaks one of the streaming protocols with this server
//! end to end:
//!
//! - exec over websocket (`v5.channel.k8s.io`, `v4.channel.k8s.io`, their base64 and pre-v4
//!   variants) or SPDY/3.1 (`v4`…`v1`, `X-Stream-Protocol-Version`), in `exec.rs`;
//! - port forwarding over SPDY/3.1 (`portforward.k8s.io`), SPDY tunnelled in a websocket
//!   (`SPDY/3.1+portforward.k8s.io`), or websocket channels (`v4.channel.k8s.io` with `port`
//!   query parameters), in `portforward.rs`.
//!
//! The commands themselves and the pods' ports are the runtime's: [`ExecHandler`] and
//! [`PortForwardHandler`].
//!
//! For a runtime whose own streaming server stops at `v4.channel.k8s.io` (containerd 1.6), a
//! websocket client that chose `v5.channel.k8s.io` is answered by the agent itself, which speaks
//! SPDY to the runtime ([`translate_v5`], in `translator.rs`).
//!
//! URLs are `http://ADDR/exec/TOKEN` and `http://ADDR/portforward/TOKEN`. Tokens are random,
//! consumed by their first request, and expire after a minute unused; an unknown, used or
//! expired token gets `404`, as upstream. The server binds loopback and has no authentication:
//! the token is the only credential, as with containerd's streaming server.

mod base64;
mod channel;
mod exec;
mod portforward;
mod request_cache;
mod spdy;
mod spdy_session;
mod spdy_zlib;
mod translator;
mod upgrade;
mod websocket;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::runtime::StreamRequest;
use portforward::Target;
pub(crate) use portforward::query_ports;
use request_cache::RequestCache;
pub use translator::Streams;

/// Whether an exec or attach request is a websocket whose client chose `v5.channel.k8s.io`
/// among the protocols offered (the client's first supported choice wins, as upstream).
pub fn chooses_v5(headers: &http::HeaderMap) -> bool {
    websocket::is_websocket_request(headers)
        && channel::negotiate(
            &websocket::offered_protocols(headers),
            channel::EXEC_PROTOCOLS,
        )
        .is_some_and(|p| p.version == channel::Version::V5)
}

/// Answers a websocket exec or attach that chose `v5.channel.k8s.io` (see [`chooses_v5`]) by
/// translating it to SPDY toward the runtime's streaming `url`. The runtime's session is opened
/// first, so a refusal (an expired token, a stream it will not open) reaches the client as an
/// HTTP error rather than an upgraded connection that closes at once.
pub async fn translate_v5(
    req: http::Request<hyper::body::Incoming>,
    url: &str,
    streams: Streams,
) -> http::Response<http_body_util::Full<Bytes>> {
    let runtime = match translator::connect_runtime(url, streams).await {
        Ok(runtime) => runtime,
        Err(translator::TranslateError::Refused { status, body }) => {
            let status = http::StatusCode::from_u16(status)
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
            return upgrade::text(status, body);
        }
        Err(e) => return upgrade::text(http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let offered = websocket::offered_protocols(req.headers());
    let Some(proto) = channel::negotiate(&offered, channel::EXEC_PROTOCOLS) else {
        return upgrade::text(http::StatusCode::FORBIDDEN, "no supported protocol offered");
    };
    let name = proto.name;
    upgrade::upgrade_websocket(req, name, move |io| translator::serve(io, proto, runtime))
}

/// What an exec session runs and which of its streams the client asked for (CRI
/// `ExecRequest` without the container id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecRequest {
    pub command: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    /// Ignored with a terminal, which has one output.
    pub stderr: bool,
}

impl From<&StreamRequest> for ExecRequest {
    fn from(req: &StreamRequest) -> ExecRequest {
        ExecRequest {
            command: req.command.clone(),
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        }
    }
}

/// One exec session's command and its standard streams.
pub struct ExecIo {
    pub command: Vec<String>,
    /// A terminal was requested; the protocol then sends stderr on stdout.
    pub tty: bool,
    /// What the client types: `None` when it asked for no stdin; otherwise the channel ends
    /// when the client closes stdin (or disconnects).
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    /// Output that goes nowhere when the client did not ask for the stream. A send fails once
    /// the client is gone.
    pub stdout: mpsc::Sender<Bytes>,
    pub stderr: mpsc::Sender<Bytes>,
}

/// Runs one exec session's command; implemented by the emulated runtime.
#[async_trait]
pub trait ExecHandler: Send + Sync {
    /// Runs the command to completion and returns its exit code (0 for success; kubectl
    /// reports codes 1–255 as its own exit code). Dropping `io`'s senders, which returning
    /// does, ends the output streams. The future is dropped if the client disconnects first.
    async fn exec(&self, io: ExecIo) -> i32;
}

/// Opens the connections a port-forward session splices to: ports of one pod.
#[async_trait]
pub trait PortForwardHandler: Send + Sync {
    /// Connects to `port` of the pod. The error's text reaches the client after
    /// `error forwarding port N to pod P, uid : `.
    async fn connect(&self, port: u16) -> io::Result<tokio::net::TcpStream>;
}

/// A prepared session waiting for its client.
enum Prepared {
    Exec {
        req: ExecRequest,
        handler: Arc<dyn ExecHandler>,
    },
    PortForward(Target),
}

/// The streaming server. Serves until dropped; sessions already running finish on their own.
pub struct StreamingServer {
    addr: SocketAddr,
    cache: Arc<RequestCache<Prepared>>,
    accept: JoinHandle<()>,
}

impl StreamingServer {
    /// Binds `127.0.0.1` on a free port and serves in a task.
    pub async fn start() -> io::Result<StreamingServer> {
        StreamingServer::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Binds `addr` and serves in a task.
    pub async fn bind(addr: SocketAddr) -> io::Result<StreamingServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let cache = Arc::new(RequestCache::default());
        let accept = tokio::spawn(accept_loop(listener, cache.clone()));
        Ok(StreamingServer {
            addr,
            cache,
            accept,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Prepares an exec session and returns its single-use URL
    /// (`http://ADDR/exec/TOKEN`). The flags of `req` decide which streams the session has,
    /// whatever the client's own request says, as with CRI.
    pub fn exec_url(&self, req: ExecRequest, handler: Arc<dyn ExecHandler>) -> String {
        let token = self.cache.insert(Prepared::Exec { req, handler });
        format!("http://{}/exec/{token}", self.addr)
    }

    /// Prepares a port-forward session into one pod and returns its single-use URL
    /// (`http://ADDR/portforward/TOKEN`). `pod` names the pod in error messages (containerd
    /// uses the sandbox id).
    pub fn port_forward_url(&self, pod: &str, handler: Arc<dyn PortForwardHandler>) -> String {
        let token = self.cache.insert(Prepared::PortForward(Target {
            pod: pod.to_string(),
            handler,
        }));
        format!("http://{}/portforward/{token}", self.addr)
    }
}

impl Drop for StreamingServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, cache: Arc<RequestCache<Prepared>>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "runtime streaming server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Interactive sessions send small writes.
        let _ = stream.set_nodelay(true);
        let cache = cache.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = upgrade::route(req, &cache);
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "runtime streaming connection ended");
            }
        });
    }
}
