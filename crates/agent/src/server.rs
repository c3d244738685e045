//! The agent's streaming server, the kubelet's port 10250 counterpart: the API server forwards
//! `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward` here. Paths are the kubelet's:
//!
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with the `PodLogOptions` query;
//! - `/exec/{namespace}/{pod}/{container}?command=…&stdin=…&stdout=…&stderr=…&tty=…` (the kubelet's
//!   `input`/`output`/`error` spellings are accepted too);
//! - `/attach/{namespace}/{pod}/{container}` and `/portForward/{namespace}/{pod}`;
//! - `GET /healthz`, answering `ok`;
//! - `GET /metrics`, `/metrics/resource` and `/stats/summary`, the kubelet's metrics and stats
//!   ([`crate::stats`]), when the agent gives the server its [`StatsSource`].
//!
//! Logs are read from the runtime's log files. Exec, attach and port-forward ask the runtime for
//! a single-use URL of its own streaming server (CRI `Exec`/`Attach`/`PortForward`) and splice
//! the client's upgraded connection to it, so the SPDY or websocket protocol is spoken end to end
//! between the client and containerd. Errors before an upgrade are JSON `Status` objects.
//!
//! TLS only, and only for the API server, as a kubelet started with `--client-ca-file` and
//! webhook authorization serves kube-apiserver's `--kubelet-client-certificate`:
//!
//! - the serving certificate is self-signed by the agent at start for the node's name and
//!   addresses (the kubelet's `GenerateSelfSignedCertKey` when it has no `--tls-cert-file`);
//!   the API server does not verify it, as kube-apiserver without
//!   `--kubelet-certificate-authority` does not;
//! - a client certificate that chains to the cluster CA is required: a connection without one
//!   fails its handshake (stricter than the kubelet, which would answer 401 to an anonymous
//!   request);
//! - each request is authorized for the certificate's subject CN. The kubelet asks the API server
//!   (`SubjectAccessReview`) whether the user may `<verb> nodes/proxy` (`nodes/stats` under
//!   `/stats`, `nodes/metrics` under `/metrics`); here the policy is fixed: only
//!   [`APISERVER_CLIENT_CN`] is allowed, anyone else gets the kubelet's
//!   `Forbidden (user=…, verb=…, resource=nodes, subresource=…)` as a 403 `Status`, and the
//!   refusal is logged (`InstallAuthFilter` in `pkg/kubelet/server/server.go`, attributes from
//!   `GetRequestAttributes` in `pkg/kubelet/server/auth.go`).
//!
//! Without a cluster CA the agent does not start this server at all (see `agent.rs`): there is
//! no plain-HTTP mode.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;

use crate::logs::{self, LogOptions, form_pairs};
use crate::runtime::{ContainerInfo, ContainerState, Runtime, RuntimeError, StreamRequest};
use crate::stats::{self, StatsSource};

type Body = BoxBody<Bytes, std::io::Error>;

/// The subject common name of the client certificate the API server presents to node agents
/// (kubeadm's name for kube-apiserver's `--kubelet-client-certificate`): the only user the
/// streaming server serves. `tandem_apiserver::node_proxy` issues its certificate with this
/// name.
pub const APISERVER_CLIENT_CN: &str = "kube-apiserver-kubelet-client";

/// How long the self-signed serving certificate is valid: a year, as the kubelet's.
const SERVING_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why the streaming server's TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the cluster CA PEM holds no certificate")]
    NoCaCertificate,
    #[error("cannot read the cluster CA PEM")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("the cluster CA certificate is not usable")]
    Ca(#[source] rustls::Error),
    #[error("cannot build the client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("cannot generate the serving certificate")]
    ServingCertificate(#[from] rcgen::Error),
    #[error("invalid TLS configuration")]
    Config(#[source] rustls::Error),
}

/// The streaming server's TLS configuration: a serving certificate self-signed now for
/// `node_name` and `addresses` (the node's `Hostname` and `InternalIP`), client certificates
/// required and verified against `cluster_ca_pem` (one or more PEM certificates, the kubelet's
/// `--client-ca-file`), HTTP/1.1 only (SPDY and websocket upgrades need it).
pub fn tls_config(
    cluster_ca_pem: &str,
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(cluster_ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(TlsError::CaPem)?)
            .map_err(TlsError::Ca)?;
    }
    if roots.is_empty() {
        return Err(TlsError::NoCaCertificate);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()?;
    let (cert, key) = serving_certificate(node_name, addresses)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], PrivatePkcs8KeyDer::from(key).into())
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A serving certificate and its PKCS#8 key for the node, self-signed, valid from an hour ago
/// for [`SERVING_CERT_VALIDITY`].
fn serving_certificate(
    node_name: &str,
    addresses: &[IpAddr],
) -> Result<(CertificateDer<'static>, Vec<u8>), rcgen::Error> {
    let mut params = CertificateParams::new(vec![node_name.to_string()])?;
    params
        .subject_alt_names
        .extend(addresses.iter().map(|ip| SanType::IpAddress(*ip)));
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, node_name);
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + SERVING_CERT_VALIDITY;
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.der().clone(), key.serialize_der()))
}

/// Serves the streaming endpoints over TLS with `tls` (see [`tls_config`]) on `listener` until
/// the task is dropped.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    runtime: Arc<dyn Runtime>,
) {
    serve_with_stats(listener, tls, runtime, None).await
}

/// [`serve`], answering the metrics and stats endpoints from `stats` too.
pub async fn serve_with_stats(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    runtime: Arc<dyn Runtime>,
    stats: Option<Arc<StatsSource>>,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "streaming server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let runtime = runtime.clone();
        let stats = stats.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!(%peer, error = %e, "streaming server refused a TLS connection");
                    return;
                }
            };
            // The verifier required a certificate, so there is one; a subject without a CN is
            // nobody the policy allows.
            let user: Arc<str> = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|cert| common_name(cert))
                .unwrap_or_default()
                .into();
            let service = hyper::service::service_fn(move |req| {
                let (runtime, user, stats) = (runtime.clone(), user.clone(), stats.clone());
                async move {
                    let resp = match authorize(&req, &user, peer) {
                        Ok(()) => handle(req, runtime, stats).await,
                        Err(refusal) => refusal.into_response(),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "streaming connection ended");
            }
        });
    }
}

/// The subject common name of a DER certificate: the user name upstream's x509 authenticator
/// reads from a client certificate.
fn common_name(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// Whether `user` may make `req`. Only [`APISERVER_CLIENT_CN`] may use any path.
fn authorize<B>(req: &Request<B>, user: &str, peer: SocketAddr) -> Result<(), Failure> {
    if user == APISERVER_CLIENT_CN {
        return Ok(());
    }
    let message = format!(
        "Forbidden (user={user}, verb={}, resource=nodes, subresource={})",
        request_verb(req.method()),
        request_subresource(req.uri().path()),
    );
    tracing::info!(%peer, path = %req.uri().path(), "{message}");
    Err(Failure::new(StatusCode::FORBIDDEN, message))
}

/// The `nodes` subresource a path is authorized as, as the kubelet's `GetRequestAttributes`
/// subdivides its API: `stats` under `/stats`, `metrics` under `/metrics`, `proxy` elsewhere.
fn request_subresource(path: &str) -> &'static str {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else {
        "proxy"
    }
}

/// The authorization verb of an HTTP method, as the kubelet's `GetRequestAttributes` maps it
/// (empty for methods it does not name).
fn request_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// Binds the streaming server's listener (`port` 0 picks a free one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

async fn handle(
    req: Request<Incoming>,
    runtime: Arc<dyn Runtime>,
    stats: Option<Arc<StatsSource>>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let parts: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(logs::percent_decode)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let result = match parts.as_slice() {
        ["containerLogs", ns, pod, container] if req.method() == Method::GET => {
            container_logs(&runtime, ns, pod, container, &query).await
        }
        [kind @ ("exec" | "attach"), ns, pod, container] => {
            let kind = *kind;
            stream(req, &runtime, kind, ns, pod, container, &query).await
        }
        ["portForward", ns, pod] => port_forward(req, &runtime, ns, pod, &query).await,
        // The kubelet's health check, reached through the API server's `nodes/NAME/proxy/healthz`.
        ["healthz"] if req.method() == Method::GET => {
            let mut resp = Response::new(full(b"ok".to_vec()));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Ok(resp)
        }
        segments @ (["metrics"] | ["metrics", "resource"] | ["stats", "summary"])
            if req.method() == Method::GET =>
        {
            match (stats::Endpoint::at(segments), &stats) {
                (Some(endpoint), Some(stats)) => stats_response(&req, stats, endpoint).await,
                _ => Err(Failure::new(
                    StatusCode::NOT_FOUND,
                    "no stats endpoint here",
                )),
            }
        }
        _ => Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no streaming endpoint at {path}"),
        )),
    };
    result.unwrap_or_else(Failure::into_response)
}

/// The answer of a metrics or stats endpoint.
async fn stats_response<B>(
    req: &Request<B>,
    stats: &StatsSource,
    endpoint: stats::Endpoint,
) -> Result<Response<Body>, Failure> {
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (content_type, body) = stats
        .respond(endpoint, accept)
        .await
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, stats::error_chain(&e)))?;
    let mut resp = Response::new(full(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    Ok(resp)
}

/// An error answered as a `Status`.
struct Failure {
    code: StatusCode,
    message: String,
}

impl Failure {
    fn new(code: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, message)
    }

    fn from_runtime(e: RuntimeError) -> Failure {
        let code = match e {
            RuntimeError::NotFound(_) => StatusCode::NOT_FOUND,
            RuntimeError::Emulated(_) | RuntimeError::Unsupported(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure::new(code, e.to_string())
    }

    fn into_response(self) -> Response<Body> {
        let reason = match self.code {
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::BAD_REQUEST => "BadRequest",
            StatusCode::FORBIDDEN => "Forbidden",
            _ => "InternalError",
        };
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": reason,
            "code": self.code.as_u16(),
        });
        let mut resp = Response::new(full(status.to_string().into_bytes()));
        *resp.status_mut() = self.code;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        resp
    }
}

fn full(data: Vec<u8>) -> Body {
    Full::new(Bytes::from(data))
        .map_err(|never| match never {})
        .boxed()
}

/// The newest sandbox of the pod `namespace/name` on this node.
fn sandbox_of(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
) -> Result<crate::runtime::SandboxInfo, Failure> {
    runtime
        .list_sandboxes()
        .into_iter()
        .filter(|s| s.namespace == namespace && s.name == pod)
        .max_by_key(|s| (s.ready, s.created_at))
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                format!("pod \"{pod}\" does not exist on this node"),
            )
        })
}

/// The current (or, with `previous`, the one before it) instance of a container.
fn container_of(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
) -> Result<ContainerInfo, Failure> {
    let sandbox = sandbox_of(runtime, namespace, pod)?;
    let mut instances: Vec<ContainerInfo> = runtime
        .list_containers(&sandbox.id)
        .into_iter()
        .filter(|c| c.name == container)
        .collect();
    instances.sort_by_key(|c| c.attempt);
    if previous {
        let current = instances.pop();
        return match (current, instances.pop()) {
            (Some(_), Some(prev)) => Ok(prev),
            _ => Err(Failure::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod}\" not found"
            ))),
        };
    }
    instances.pop().ok_or_else(|| {
        Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
        ))
    })
}

async fn container_logs(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let opts =
        LogOptions::from_query(query, now).map_err(|e| Failure::bad_request(e.to_string()))?;
    let info = container_of(runtime, namespace, pod, container, opts.previous)?;
    let path = runtime.log_path(&info.id).map_err(Failure::from_runtime)?;
    if !path.exists() {
        return Err(Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" has no log yet"
        )));
    }
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    let id = info.id.clone();
    let rt = runtime.clone();
    let follow_running = move || {
        rt.container_status(&id)
            .is_ok_and(|c| !matches!(c.state, ContainerState::Exited { .. }))
    };
    tokio::spawn(async move {
        if let Err(e) = logs::stream_log(path, opts, tx, follow_running).await {
            tracing::debug!(error = %e, "log stream ended");
        }
    });
    let body = StreamBody::new(
        tokio_stream_from(rx).map(|chunk| Ok::<_, std::io::Error>(Frame::data(Bytes::from(chunk)))),
    );
    let mut resp = Response::new(BodyExt::boxed(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    Ok(resp)
}

/// An mpsc receiver as a stream.
fn tokio_stream_from(rx: mpsc::Receiver<Vec<u8>>) -> impl futures::Stream<Item = Vec<u8>> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

/// The stream options of an exec/attach query; both the API's (`stdin`, `stdout`, `stderr`) and
/// the kubelet's (`input`, `output`, `error`) names are understood.
fn stream_request(query: &str) -> StreamRequest {
    let mut req = StreamRequest::default();
    for (k, v) in form_pairs(query) {
        let on = v.is_empty() || v == "true" || v == "1";
        match k.as_str() {
            "command" => req.command.push(v),
            "stdin" | "input" => req.stdin = on,
            "stdout" | "output" => req.stdout = on,
            "stderr" | "error" => req.stderr = on,
            "tty" => req.tty = on,
            _ => {}
        }
    }
    if req.tty {
        // A terminal merges stderr into stdout; CRI refuses both at once.
        req.stderr = false;
    }
    req
}

fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE)
}

async fn stream(
    req: Request<Incoming>,
    runtime: &Arc<dyn Runtime>,
    kind: &str,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    if !is_upgrade(&req) {
        return Err(Failure::bad_request("Upgrade request required"));
    }
    let opts = stream_request(query);
    if !opts.stdin && !opts.stdout && !opts.stderr {
        return Err(Failure::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    if kind == "exec" && opts.command.is_empty() {
        return Err(Failure::bad_request(
            "you must specify at least one command",
        ));
    }
    let info = container_of(runtime, namespace, pod, container, false)?;
    if !matches!(info.state, ContainerState::Running) {
        return Err(Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is not running"
        )));
    }
    let url = if kind == "exec" {
        runtime.exec_url(&info.id, &opts).await
    } else {
        runtime.attach_url(&info.id, &opts).await
    }
    .map_err(Failure::from_runtime)?;
    // A real runtime's streaming server stops at `v4.channel.k8s.io`; a client that chose v5
    // is answered here and the runtime spoken to over SPDY. The emulated runtime's own server
    // speaks v5.
    if !runtime.emulated() && crate::streaming::chooses_v5(req.headers()) {
        let streams = crate::streaming::Streams {
            stdin: opts.stdin,
            stdout: opts.stdout,
            stderr: opts.stderr,
            tty: opts.tty,
        };
        let resp = crate::streaming::translate_v5(req, &url, streams).await;
        return Ok(resp.map(|b| b.map_err(|never| match never {}).boxed()));
    }
    forward(req, &url, query).await
}

async fn port_forward(
    req: Request<Incoming>,
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    if !is_upgrade(&req) {
        return Err(Failure::bad_request("Upgrade request required"));
    }
    let sandbox = sandbox_of(runtime, namespace, pod)?;
    // Websocket clients name their ports in the query (`port=80,443`, the kubelet's parameter),
    // read as the streaming server reads it; a query it refuses names no ports here and is
    // refused by the streaming server in its own words.
    let ports = crate::streaming::query_ports(query).unwrap_or_default();
    let url = runtime
        .port_forward_url(&sandbox.id, &ports)
        .await
        .map_err(Failure::from_runtime)?;
    forward(req, &url, query).await
}

/// Splices the client's request to the runtime's streaming URL, keeping the client's query
/// (websocket port-forward names its ports there).
async fn forward(
    req: Request<Incoming>,
    url: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    let target = if query.is_empty() || url.contains('?') {
        url.to_string()
    } else {
        format!("{url}?{query}")
    };
    tandem_netproxy::forward(req, &target)
        .await
        .map(|resp| resp.map(|b| b.map_err(std::io::Error::other).boxed()))
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error reaching the container runtime's streaming server: {e}"),
            )
        })
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
