//! The HTTPS listener: TLS with optional client certificates, authentication (client certificate
//! or bearer token; anonymous requests get 401), impersonation, authorization (see `auth`),
//! routing to discovery, OpenAPI, health and resource handlers, and response encoding.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use tandem_core::registry::Registry;
use tandem_store::Store;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::auth::UserInfo;
use crate::auth::authz::Attributes;
use crate::cache::Cache;
use crate::error::{ApiError, ApiResult};
use crate::node_proxy::{self, NodeRequest};
use crate::output::{self, Format};
use crate::pki::{Pki, PkiError, subject_identity};
use crate::request::{Query, Verb, parse_resource_path};
use crate::rest::{Ctx, MAX_BODY, Reply, decode_body};
use crate::state::State;
use crate::{discovery, watch};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How to start the API server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the PKI lives (`<data_dir>/pki`).
    pub data_dir: PathBuf,
    /// Address to listen on; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Where to write the admin kubeconfig, if anywhere.
    pub kubeconfig: Option<PathBuf>,
}

/// Failures starting the server.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot prepare certificates")]
    Pki(#[from] PkiError),
    #[error("invalid TLS material")]
    Tls(#[from] rustls::Error),
    #[error("invalid TLS client verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("cannot read PEM data")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot load the watch cache from the store")]
    Store(#[from] tandem_store::StoreError),
    #[error("cannot create the initial namespaces: {0}")]
    Bootstrap(ApiError),
}

/// A running API server.
pub struct ApiServer {
    pub state: Arc<State>,
    pub local_addr: SocketAddr,
    pub pki: Pki,
    acceptor: TlsAcceptor,
    accept_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Ok(tasks) = self.accept_tasks.get_mut() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}

impl ApiServer {
    /// Loads (or creates) the PKI, fills the watch cache, creates the initial namespaces and starts
    /// listening.
    pub async fn start(config: Config, store: Arc<dyn Store>) -> Result<ApiServer, StartError> {
        Self::start_with_options(config, store, crate::state::Options::default()).await
    }

    /// As [`ApiServer::start`], with behaviour switches (`--allow-privileged`, …).
    pub async fn start_with_options(
        config: Config,
        store: Arc<dyn Store>,
        options: crate::state::Options,
    ) -> Result<ApiServer, StartError> {
        // The `kubernetes` Service's address is a name of the server for pods (the default range's
        // 10.96.0.1 always is).
        let kubernetes_ip = options.service_ranges.kubernetes_ip().to_string();
        // So is the address it listens on, when that is a particular one (`tandem up
        // --multi-host` listens on its underlay bridge, where the hosts' agents join).
        let mut sans = vec![kubernetes_ip];
        if !config.bind.ip().is_unspecified() && !config.bind.ip().is_loopback() {
            sans.push(config.bind.ip().to_string());
        }
        let pki = Pki::load_or_create(&config.data_dir, &sans)?;
        let registry = if options.metrics_api {
            crate::crds::CustomResources::default()
        } else {
            crate::crds::CustomResources::with_builtin(
                Registry::builtin().without_group(crate::metrics_api::GROUP),
            )
        };
        let cache = Cache::start(store.clone(), &Registry::builtin()).await?;
        let issuer = crate::auth::sa_token::TokenIssuer::load_or_create(
            &pki.dir,
            crate::auth::sa_token::DEFAULT_ISSUER,
        )?;
        let auth = crate::auth::Auth {
            authn: crate::auth::authn::Authenticator::new(pki.tokens.clone(), Arc::new(issuer)),
            rbac: crate::auth::rbac::Rbac::default(),
        };
        let flow_control = Arc::new(crate::flowcontrol::FlowControl::new(
            options.flow_control.clone(),
            options
                .server_metrics
                .as_ref()
                .map(|m| m.api.flow_control().clone()),
        ));
        let front_proxy = crate::aggregator::FrontProxy::new(&pki)?;
        let (client_ca, requestheader_ca) = (
            front_proxy.client_ca_pem.clone(),
            front_proxy.ca_pem.clone(),
        );
        let state = Arc::new(State {
            flow_control,
            registry,
            store,
            cache,
            options,
            service_lock: tokio::sync::Mutex::new(()),
            service_alloc_avoid: Default::default(),
            webhooks: Default::default(),
            policies: Default::default(),
            service_alloc_cache: std::sync::Mutex::default(),
            auth,
            kubelet_client: crate::node_proxy::kubelet_client::kubelet_client(&pki)?,
            metrics: Default::default(),
            aggregator: crate::aggregator::Aggregator::new(front_proxy),
        });
        state.auth.rbac.watch(&state.cache, &state.registry.load());
        crate::crds::start(state.clone());
        crate::bootstrap::ensure_namespaces(&state)
            .await
            .map_err(StartError::Bootstrap)?;
        crate::bootstrap::ensure_rbac(&state)
            .await
            .map_err(StartError::Bootstrap)?;
        crate::bootstrap::ensure_priority_classes(&state)
            .await
            .map_err(StartError::Bootstrap)?;
        crate::bootstrap::ensure_api_services(&state)
            .await
            .map_err(StartError::Bootstrap)?;
        crate::aggregator::ensure_authentication_config_map(&state, &client_ca, &requestheader_ca)
            .await
            .map_err(StartError::Bootstrap)?;
        crate::aggregator::start(state.clone());

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()?;
        // The chain ends with the CA, so a node joining with a token can pin it (see
        // `tandem_agent::bootstrap`).
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(pki.serving_cert_pem.as_bytes())
                .chain(CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()))
                .collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes())?;
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)?;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(tls));

        let listener =
            TcpListener::bind(config.bind)
                .await
                .map_err(|source| StartError::Listen {
                    addr: config.bind,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.bind,
            source,
        })?;
        if let Some(path) = &config.kubeconfig {
            let host = if local_addr.ip().is_unspecified() {
                "127.0.0.1".to_string()
            } else {
                local_addr.ip().to_string()
            };
            pki.write_admin_kubeconfig(path, &format!("https://{host}:{}", local_addr.port()))?;
        }
        let mut tasks = vec![serve(listener, acceptor.clone(), state.clone())];
        if let Some(resolution) = state
            .options
            .metric_resolution
            .filter(|_| state.options.metrics_api)
        {
            tasks.push(tokio::spawn(crate::metrics_api::scrape::run(
                state.clone(),
                resolution,
            )));
        }
        Ok(ApiServer {
            state,
            local_addr,
            pki,
            acceptor,
            accept_tasks: std::sync::Mutex::new(tasks),
        })
    }
}

impl ApiServer {
    /// Graceful shutdown of the API's long-running requests: ends every open watch (and any
    /// started later) so each response stream ends with its final chunk, as kube-apiserver does
    /// on SIGTERM, waiting at most `grace` for them. Call before dropping the server; requests
    /// still in flight afterwards are cut when the process exits.
    pub async fn shutdown(&self, grace: std::time::Duration) {
        let open = self.state.cache.end_watches(grace).await;
        if open > 0 {
            tracing::warn!(open, "watches still open at shutdown");
        }
        // The tasks are gone; give the connections a moment to write the final chunks.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    /// Serves the API on `addr` as well (e.g. the pods' gateway address, so that the
    /// `kubernetes` Service can reach it), with the same certificate and authentication. The
    /// listener lives as long as the server.
    pub async fn listen_also(&self, addr: SocketAddr) -> Result<SocketAddr, StartError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Listen { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| StartError::Listen { addr, source })?;
        let task = serve(listener, self.acceptor.clone(), self.state.clone());
        if let Ok(mut tasks) = self.accept_tasks.lock() {
            tasks.push(task);
        }
        Ok(local)
    }
}

/// Accepts TLS connections on `listener` and serves the API on them until aborted.
fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<State>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                };
                let cert_identity = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| subject_identity(c))
                    .map(|(user, groups)| Arc::new(UserInfo::authenticated(&user, "", groups)));
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    let identity = cert_identity.clone();
                    async move { Ok::<_, Infallible>(handle(state, identity, req).await) }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // Request heads up to Go's `DefaultMaxHeaderBytes` (1 MiB), as kube-apiserver
                // takes them: a longer head gets 431 (414 for the URI alone) over HTTP/1.1. Over
                // HTTP/2 a header block past it ends the connection (h2's bound on CONTINUATION
                // frames), as hyper's default 16 KiB did for blocks past 80 KiB.
                builder.http1().max_buf_size(MAX_HEADER_BYTES + (64 << 10));
                builder
                    .http2()
                    .max_header_list_size(MAX_HEADER_BYTES as u32);
                if let Err(e) = builder
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
        }
    })
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn json_response(
    code: u16,
    body: Bytes,
    content_type: &str,
    warnings: &[String],
) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn error_response(e: &ApiError, warnings: &[String]) -> Response<Body> {
    let mut resp = json_response(
        e.code,
        Bytes::from(e.status_json()),
        "application/json",
        warnings,
    );
    // Upstream's `responsewriters.ErrorNegotiated` sends `Retry-After` for errors that carry
    // `details.retryAfterSeconds` (a 429 from the eviction subresource, for one).
    if let Some(secs) = e
        .details
        .as_ref()
        .and_then(|d| d.get("retryAfterSeconds"))
        .and_then(Value::as_i64)
        .filter(|s| *s > 0)
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// A JSON response body transcoded to protobuf. Kinds without a protobuf form, and the rare
/// object the transcoder refuses (logged), stay JSON: negotiation already refused clients
/// that cannot take JSON for such kinds.
fn protobuf_response(code: u16, v: &Value, warnings: &[String]) -> Response<Body> {
    match crate::protobuf::encode(v) {
        Some(Ok(bytes)) => json_response(
            code,
            Bytes::from(bytes),
            crate::protobuf::MEDIA_TYPE,
            warnings,
        ),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "cannot encode a response as protobuf; answering JSON");
            json_response(
                code,
                Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
                "application/json",
                warnings,
            )
        }
        None => json_response(
            code,
            Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
            "application/json",
            warnings,
        ),
    }
}

/// A dispatched answer (one object, or a JSON list) at `rt`, a custom resource whose CRD
/// converts with a webhook, converted to `rt`'s version; a conversion that fails is the
/// answer instead. Streams pass through (watches convert their own events).
async fn convert_by_webhook(
    state: &State,
    rt: &tandem_core::registry::ResourceType,
    result: crate::error::ApiResult<Dispatched>,
) -> crate::error::ApiResult<Dispatched> {
    match result? {
        Dispatched::Reply(Reply::Value(code, mut v), r) => {
            state.convert_answer(rt, &mut v).await?;
            Ok(Dispatched::Reply(Reply::Value(code, v), r))
        }
        Dispatched::Reply(Reply::Raw(code, bytes, "application/json"), r) => {
            let bytes = match serde_json::from_slice::<Value>(&bytes) {
                Ok(mut v) => {
                    let before = v.clone();
                    state.convert_answer(rt, &mut v).await?;
                    if v == before {
                        bytes
                    } else {
                        Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
                    }
                }
                Err(_) => bytes,
            };
            Ok(Dispatched::Reply(
                Reply::Raw(code, bytes, "application/json"),
                r,
            ))
        }
        other => Ok(other),
    }
}

/// Converts the objects of JSON watch event lines to another version of a custom resource.
fn convert_lines(chunk: &Bytes, api_version: &str, kind: &str) -> Bytes {
    let mut out = Vec::with_capacity(chunk.len());
    for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Value>(line) {
            Ok(mut event) => {
                tandem_core::conversion::convert_response(&mut event, api_version, kind);
                crate::crds::convert_none(&mut event, api_version, kind);
                out.extend(serde_json::to_vec(&event).unwrap_or_default());
            }
            Err(_) => out.extend_from_slice(line),
        }
        out.push(b'\n');
    }
    Bytes::from(out)
}

/// Turns a chunk of JSON watch event lines into protobuf watch frames.
fn protobuf_watch_frames(chunk: &[u8]) -> Bytes {
    let mut out = Vec::new();
    for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "unreadable watch event line");
                continue;
            }
        };
        match crate::protobuf::watch_frame(&event) {
            Some(Ok(frame)) => out.extend_from_slice(&frame),
            Some(Err(e)) => tracing::warn!(error = %e, "cannot encode a watch event as protobuf"),
            None => tracing::warn!("a watch event without a protobuf form was dropped"),
        }
    }
    Bytes::from(out)
}

fn value_response(code: u16, v: &Value) -> Response<Body> {
    json_response(
        code,
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
        "application/json",
        &[],
    )
}

/// The requester: the client certificate's user, else the bearer token's. `Err` carries why a
/// presented token was refused.
fn authenticate(
    state: &State,
    identity: Option<Arc<UserInfo>>,
    req: &Request<Incoming>,
) -> Result<Arc<UserInfo>, String> {
    if let Some(identity) = identity {
        return Ok(identity);
    }
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| "no credentials".to_string())?;
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "not a bearer token".to_string())?;
    state
        .auth
        .authn
        .authenticate_token(state, token)
        .map(Arc::new)
}

async fn handle(
    state: Arc<State>,
    identity: Option<Arc<UserInfo>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let started = std::time::Instant::now();
    let resp = route(state, identity, req, started).await;
    tracing::debug!(%method, %path, status = resp.status().as_u16(), elapsed_us = started.elapsed().as_micros() as u64, "request");
    resp
}

/// The largest request head the server reads (Go's `http.DefaultMaxHeaderBytes`).
const MAX_HEADER_BYTES: usize = 1 << 20;

/// How much of a refused request's body the server reads before answering (Go's server reads up
/// to 256 KiB of an unread body).
const UNREAD_BODY_LIMIT: usize = 256 << 10;

async fn route(
    state: Arc<State>,
    identity: Option<Arc<UserInfo>>,
    req: Request<Incoming>,
    started: std::time::Instant,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/livez" | "/readyz")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
    {
        if let Some(m) = &state.options.server_metrics {
            m.api.record_health_check(&path, 200, started.elapsed());
        }
        return json_response(
            200,
            Bytes::from_static(b"ok"),
            "text/plain; charset=utf-8",
            &[],
        );
    }
    let identity = match authenticate(&state, identity, &req) {
        Ok(user) => user,
        Err(why) => {
            tracing::debug!(%path, reason = %why, "request not authenticated");
            return refuse(req, &ApiError::unauthorized()).await;
        }
    };
    let identity = match crate::auth::impersonation::impersonate(&state, &identity, req.headers()) {
        Ok(Some(user)) => Arc::new(user),
        Ok(None) => identity,
        Err(e) => return refuse(req, &e).await,
    };
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let query = Query::parse(req.uri().query());
    let rr = parse_resource_path(req.method(), &path, &query);
    let attrs = match &rr {
        Some(rr) => authz_attributes(rr, &query),
        None => Attributes::non_resource(req.method(), &path),
    };
    // Flow control, after authentication and impersonation and before authorization, as
    // upstream's filter chain orders them; long-running requests hold no seat.
    if crate::flowcontrol::is_long_running(&attrs) {
        return route_admitted(
            state, identity, req, path, query, accept, rr, attrs, started,
        )
        .await;
    }
    let class = state.flow_control.classify(&identity, &attrs);
    let uids = state.flow_control.uids(&class).and_then(|(fs, pl)| {
        Some((
            HeaderValue::from_str(fs).ok()?,
            HeaderValue::from_str(pl).ok()?,
        ))
    });
    let mut resp = match state.flow_control.acquire(&class).await {
        Ok(_seat) => {
            route_admitted(
                state, identity, req, path, query, accept, rr, attrs, started,
            )
            .await
        }
        Err(why) => {
            tracing::debug!(%path, user = %identity.name, reason = ?why, "request refused by flow control");
            refuse(req, &why.to_api_error()).await
        }
    };
    if let Some((fs, pl)) = uids {
        let headers = resp.headers_mut();
        headers.insert(crate::flowcontrol::FLOW_SCHEMA_UID_HEADER, fs);
        headers.insert(crate::flowcontrol::PRIORITY_LEVEL_UID_HEADER, pl);
    }
    resp
}

/// The rest of [`route`] once flow control admitted the request: authorization, then the
/// non-resource paths and the resource handlers.
#[allow(clippy::too_many_arguments)]
async fn route_admitted(
    state: Arc<State>,
    identity: Arc<UserInfo>,
    req: Request<Incoming>,
    path: String,
    query: Query,
    accept: Option<String>,
    rr: Option<crate::request::ResourceRequest>,
    attrs: Attributes,
    started: std::time::Instant,
) -> Response<Body> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if let Err(e) = crate::auth::authz::check(&state, &identity, &attrs) {
        return refuse(req, &e).await;
    }
    // A group-version an APIService hands to another server goes there, discovery included.
    if let ["apis", group, version, ..] = segs.as_slice()
        && let Some(remote) = state.aggregator.remote(group, version)
    {
        return crate::aggregator::serve(&state, &remote, &identity, req).await;
    }
    if req.method() == Method::GET {
        let reg = &*state.registry.load();
        match segs.as_slice() {
            ["version"] => return value_response(200, &discovery::version()),
            ["metrics"] => return metrics_response(&state, accept.as_deref()),
            ["api"] => {
                if let Some(beta) = discovery::wants_aggregated(accept.as_deref()) {
                    return aggregated_response(&discovery::aggregated(reg, true, beta), beta);
                }
                let host = req
                    .headers()
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .unwrap_or("127.0.0.1")
                    .to_string();
                return value_response(200, &discovery::api_versions(&host));
            }
            ["apis"] => {
                let remotes = state.aggregator.discovery();
                if let Some(beta) = discovery::wants_aggregated(accept.as_deref()) {
                    let local = discovery::aggregated(reg, false, beta);
                    return aggregated_response(
                        &crate::aggregator::model::merge_aggregated(local, &remotes),
                        beta,
                    );
                }
                let local = discovery::api_group_list(reg);
                return value_response(
                    200,
                    &crate::aggregator::model::merge_group_list(local, &remotes),
                );
            }
            ["api", version] => return opt_response(discovery::resource_list(reg, "", version)),
            ["apis", group] => {
                return opt_response(crate::aggregator::model::merge_group(
                    discovery::api_group(reg, group),
                    group,
                    &state.aggregator.discovery(),
                ));
            }
            ["apis", group, version] => {
                return opt_response(discovery::resource_list(reg, group, version));
            }
            ["openapi", "v2"] => {
                return match crate::openapi_pb::negotiate(accept.as_deref()) {
                    Some(crate::openapi_pb::Format::Json) => {
                        value_response(200, state.registry.served().openapi_v2())
                    }
                    Some(crate::openapi_pb::Format::Protobuf) => openapi_v2_protobuf(&state),
                    None => error_response(
                        &ApiError::not_acceptable(format!(
                            "only application/json and {} are served for /openapi/v2",
                            crate::openapi_pb::PROTOBUF_MEDIA_TYPE
                        )),
                        &[],
                    ),
                };
            }
            // The pre-1.10 path client-go's discovery falls back to when `/openapi/v2` refuses.
            ["swagger-2.0.0.pb-v1"] => return openapi_v2_protobuf(&state),
            [".well-known", "openid-configuration"] => {
                return value_response(200, &state.auth.authn.issuer.openid_configuration());
            }
            ["openid", "v1", "jwks"] => {
                let body = serde_json::to_vec(&state.auth.authn.issuer.jwks()).unwrap_or_default();
                return json_response(200, Bytes::from(body), "application/jwk-set+json", &[]);
            }
            ["openapi", "v3"] => {
                return value_response(200, state.registry.served().openapi_v3_index());
            }
            ["openapi", "v3", rest @ ..] => {
                return match state.registry.served().openapi_v3(&rest.join("/")) {
                    Some(doc) => value_response(200, &doc),
                    None => error_response(&ApiError::no_route(), &[]),
                };
            }
            _ => {}
        }
    }
    let Some(rr) = rr else {
        return error_response(&ApiError::no_route(), &[]);
    };
    // Measured once per request (see `metrics`); a watch's kind names its registered watchers.
    let measure = state.options.server_metrics.as_ref().map(|m| {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        m.api.start(
            &rr,
            req.method(),
            content_type,
            query.get("dryRun"),
            started,
        )
    });
    let watched_kind = measure
        .as_ref()
        .filter(|m| m.is_watch())
        .and_then(|_| state.resource(&rr.group, &rr.version, &rr.resource).ok())
        .map(|rt| rt.kind.clone());
    let resp = serve_resource(state, identity, req, rr, query, accept).await;
    match measure {
        Some(m) => record_response(m, watched_kind, resp),
        None => resp,
    }
}

/// Records a measured request's response: at once, or for a watch's stream when the body is
/// dropped (the watch ends or its client goes away).
fn record_response(
    measure: crate::metrics::RequestMeasure,
    watched_kind: Option<String>,
    resp: Response<Body>,
) -> Response<Body> {
    let code = resp.status().as_u16();
    match watched_kind {
        Some(kind) if resp.status().is_success() => {
            let guard = measure.watching(&kind, code);
            resp.map(|body| {
                body.map_frame(move |frame| {
                    let _held = &guard;
                    frame
                })
                .boxed_unsync()
            })
        }
        _ => {
            measure.finish(code);
            resp
        }
    }
}

/// `/metrics`: the process's registry in the text format, or OpenMetrics when asked (404 on a
/// server built without metrics).
fn metrics_response(state: &State, accept: Option<&str>) -> Response<Body> {
    let Some(metrics) = &state.options.server_metrics else {
        return error_response(&ApiError::no_route(), &[]);
    };
    // `metrics.k8s.io` is served from the agents' scrapes, never stored (upstream aggregates
    // it from metrics-server): it has no stored objects to count.
    let counts = state.cache.object_counts();
    metrics.api.set_storage_objects(
        counts
            .into_iter()
            .filter(|(resource, _)| !resource.ends_with(".metrics.k8s.io")),
    );
    let format = crate::metrics::ExpositionFormat::negotiate(accept);
    match metrics.encode(format) {
        Ok(text) => json_response(200, Bytes::from(text), format.content_type(), &[]),
        Err(_) => error_response(&ApiError::internal("cannot encode the metrics"), &[]),
    }
}

/// Admission of a CONNECT (`pods/exec`, `pods/attach`, `pods/portforward`): the webhooks see
/// the options object (`PodExecOptions`, …) as both object and the request's options, as
/// upstream's connecter admits it; a refusal ends the request before it is upgraded.
async fn connect_admission(
    state: &State,
    identity: Arc<UserInfo>,
    rr: &crate::request::ResourceRequest,
    target: NodeRequest<'_>,
    options: Value,
    query: Query,
) -> Result<(), ApiError> {
    let rt = state.resource(&rr.group, &rr.version, &rr.resource)?;
    let sub = rr.subresource.clone().unwrap_or_default();
    let kind = options
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut ctx = crate::rest::Ctx::internal("");
    ctx.user = identity;
    ctx.query = query;
    let hooks = crate::rest::WebhookWrite {
        op: "CONNECT",
        rt: &rt,
        sub: &sub,
        kind: &kind,
        kind_group_version: Some(("", "v1")),
        ns: Some(target.namespace),
        name: target.pod,
        options: options.clone(),
    };
    let mut object = options.clone();
    state
        .webhooks_mutate(&mut ctx, &hooks, Some(&mut object), None)
        .await?;
    state
        .webhooks_validate(&mut ctx, &hooks, Some(&object), None)
        .await
}

/// A resource request, authenticated and authorized: node proxying, or the API handlers.
async fn serve_resource(
    state: Arc<State>,
    identity: Arc<UserInfo>,
    req: Request<Incoming>,
    rr: crate::request::ResourceRequest,
    query: Query,
    accept: Option<String>,
) -> Response<Body> {
    // Pod log/exec/attach/portforward go to the node agent with the request as it came: its body
    // unread and its upgrade pending, so they are routed before the body is collected.
    // The proxy subresources forward the request as it came, too.
    if let Some(target) = node_proxy::proxy::ProxyRequest::of(&rr) {
        return match node_proxy::proxy::serve(&state, target, req).await {
            Ok(resp) => resp,
            Err(e) => error_response(&e, &[]),
        };
    }
    if let Some(target) = NodeRequest::of(&rr) {
        if let Some(options) = node_proxy::connect_options(target.subresource, req.uri().query())
            && let Err(e) = connect_admission(&state, identity, &rr, target, options, query).await
        {
            return error_response(&e, &[]);
        }
        return match node_proxy::serve(&state, target, req).await {
            Ok(resp) => resp,
            Err(e) => error_response(&e, &[]),
        };
    }
    let Some(format) = output::negotiate(accept.as_deref()) else {
        return error_response(
            &ApiError::not_acceptable(format!(
                "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (got {:?})",
                accept.unwrap_or_default()
            )),
            &[],
        );
    };
    // Custom resources (and tandem's own kinds) have no protobuf form: JSON when the client
    // takes it, else 406, as upstream answers for custom resources.
    let format = match format {
        Format::Protobuf { json_fallback } => {
            match state.resource(&rr.group, &rr.version, &rr.resource) {
                Ok(rt)
                    if !crate::protobuf::has_message(&rt.api_version(), &rt.kind)
                        || tandem_core::conversion::converts(&rt) =>
                {
                    if !json_fallback {
                        return error_response(
                            &ApiError::not_acceptable(format!(
                                "only the following media types are accepted: application/json, application/yaml (got {:?})",
                                accept.unwrap_or_default()
                            )),
                            &[],
                        );
                    }
                    Format::Json
                }
                _ => format,
            }
        }
        other => other,
    };
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut ctx = Ctx {
        query,
        format,
        content_type,
        warnings: Vec::new(),
        user: identity,
        user_agent,
        applying: false,
        webhooks_done: false,
    };
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e, &[]),
    };
    let protobuf = matches!(ctx.format, Format::Protobuf { .. });
    // A custom resource served at several versions is answered at the requested one; so is a
    // built-in kind served at a version other than its storage version (`conversion`).
    let requested = state.resource(&rr.group, &rr.version, &rr.resource).ok();
    let custom = requested.as_ref().and_then(|rt| state.registry.custom(rt));
    let convert = requested
        .as_ref()
        .filter(|rt| {
            custom.as_ref().is_some_and(|c| c.multi_version)
                || tandem_core::conversion::converts(rt)
        })
        .map(|rt| (rt.api_version(), rt.kind.clone()));
    // A custom resource whose CRD converts with a webhook: answers are converted here, a
    // call away (LISTs and watches convert their items where they are built).
    let by_webhook = requested.filter(|_| {
        custom
            .as_ref()
            .is_some_and(|c| c.multi_version && c.conversion.is_webhook())
    });
    let result = dispatch(state.clone(), &mut ctx, rr, body).await;
    let result = match by_webhook {
        Some(rt) => convert_by_webhook(&state, &rt, result).await,
        None => result,
    };
    let result = match (&convert, result) {
        (Some((av, kind)), Ok(Dispatched::Reply(Reply::Value(code, mut v), rt))) => {
            tandem_core::conversion::convert_response(&mut v, av, kind);
            crate::crds::convert_none(&mut v, av, kind);
            Ok(Dispatched::Reply(Reply::Value(code, v), rt))
        }
        (
            Some((av, kind)),
            Ok(Dispatched::Reply(Reply::Raw(code, bytes, "application/json"), rt)),
        ) => {
            let bytes = match serde_json::from_slice::<Value>(&bytes) {
                Ok(mut v) => {
                    tandem_core::conversion::convert_response(&mut v, av, kind);
                    crate::crds::convert_none(&mut v, av, kind);
                    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
                }
                Err(_) => bytes,
            };
            Ok(Dispatched::Reply(
                Reply::Raw(code, bytes, "application/json"),
                rt,
            ))
        }
        (_, other) => other,
    };
    match result {
        Ok(Dispatched::Reply(Reply::Value(code, v), _)) if protobuf => {
            protobuf_response(code, &v, &ctx.warnings)
        }
        Ok(Dispatched::Reply(Reply::Raw(code, bytes, "application/json"), _)) if protobuf => {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => protobuf_response(code, &v, &ctx.warnings),
                Err(_) => json_response(code, bytes, "application/json", &ctx.warnings),
            }
        }
        Ok(Dispatched::Reply(Reply::Value(code, v), rt)) => {
            let custom = state.registry.custom(&rt);
            let (bytes, ct) = output::encode_object(
                &rt,
                custom.as_ref().map(|c| c.columns.as_slice()),
                &v,
                ctx.format,
                crate::output::IncludeObject::parse(ctx.query.get("includeObject")),
            );
            json_response(code, bytes, ct, &ctx.warnings)
        }
        Ok(Dispatched::Reply(Reply::Raw(code, bytes, ct), _)) => {
            json_response(code, bytes, ct, &ctx.warnings)
        }
        Ok(Dispatched::Stream(rx)) => {
            let stream = futures::stream::unfold(rx, move |mut rx| {
                let convert = convert.clone();
                async move {
                    rx.recv().await.map(|b| {
                        let b = match &convert {
                            Some((av, kind)) => convert_lines(&b, av, kind),
                            None => b,
                        };
                        let b = if protobuf {
                            protobuf_watch_frames(&b)
                        } else {
                            b
                        };
                        (Ok::<_, Infallible>(Frame::data(b)), rx)
                    })
                }
            });
            let mut resp = Response::new(StreamBody::new(stream.boxed()).boxed_unsync());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(if protobuf {
                    crate::protobuf::WATCH_MEDIA_TYPE
                } else {
                    "application/json"
                }),
            );
            resp.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            );
            resp
        }
        Err(e) if protobuf => protobuf_response(e.code, &e.status(), &ctx.warnings),
        Err(e) => error_response(&e, &ctx.warnings),
    }
}

/// How much more than [`MAX_BODY`] the server reads and discards of an over-large body before
/// answering 413, and for how long: a client that sends a few MiB too many then reads the
/// answer instead of a reset connection or stream (Go's server reads 256 KiB of an unread body;
/// an over-large object overshoots by more).
const OVERSIZED_BODY_DRAIN: usize = 16 << 20;
const OVERSIZED_BODY_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// The request body, at most [`MAX_BODY`] bytes; past that a `413 RequestEntityTooLarge`, sent
/// at once to an HTTP/1.1 client waiting for `100 Continue` (it then never sends the body) or
/// for a declared length past the drain bound, and otherwise after draining the rest.
async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let expects_continue = req.version() <= http::Version::HTTP_11
        && req
            .headers()
            .get(header::EXPECT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
    let too_large = || ApiError::too_large(MAX_BODY);
    if let Some(len) = declared
        && len > MAX_BODY as u64
    {
        if !expects_continue && len <= OVERSIZED_BODY_DRAIN as u64 {
            drain(req.into_body(), OVERSIZED_BODY_DRAIN).await;
        }
        return Err(too_large());
    }
    let mut body = req.into_body();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| ApiError::bad_request("cannot read request body"))?;
        if let Ok(data) = frame.into_data() {
            total += data.len();
            if total > MAX_BODY {
                drain(body, OVERSIZED_BODY_DRAIN.saturating_sub(total)).await;
                return Err(too_large());
            }
            chunks.push(data);
        }
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut all = Vec::with_capacity(total);
            for c in &chunks {
                all.extend_from_slice(c);
            }
            Bytes::from(all)
        }
    })
}

/// Reads and discards up to `budget` bytes of a body, for at most
/// [`OVERSIZED_BODY_DRAIN_TIME`].
async fn drain(mut body: Incoming, budget: usize) {
    let _ = tokio::time::timeout(OVERSIZED_BODY_DRAIN_TIME, async move {
        let mut read = 0usize;
        while read < budget {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len()),
                _ => break,
            }
        }
    })
    .await;
}

/// Reads the request body (up to a bound) before refusing, as Go's HTTP server does: an HTTP/2
/// response that ends while the client is still sending resets the stream, and curl then
/// reported the reset (exit 92) instead of the 401.
async fn refuse(req: Request<Incoming>, e: &ApiError) -> Response<Body> {
    let _ = Limited::new(req.into_body(), UNREAD_BODY_LIMIT)
        .collect()
        .await;
    error_response(e, &[])
}

/// The authorization attributes of a resource request. A list or watch whose field selector
/// names one object is authorized for that name, as upstream's RequestInfoFactory does (node
/// agents watch single Secrets and ConfigMaps this way).
fn authz_attributes(rr: &crate::request::ResourceRequest, query: &Query) -> Attributes {
    let mut attrs = Attributes::of_request(rr);
    if matches!(rr.verb, Verb::List | Verb::Watch)
        && let Some(fs) = query.get("fieldSelector")
    {
        let terms: Vec<&str> = fs.split(',').collect();
        if let [term] = terms.as_slice()
            && let Some(name) = term
                .strip_prefix("metadata.name==")
                .or_else(|| term.strip_prefix("metadata.name="))
        {
            attrs.name = name.to_string();
        }
    }
    attrs
}

fn aggregated_response(v: &Value, beta: bool) -> Response<Body> {
    let ct = if beta {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    };
    json_response(
        200,
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
        ct,
        &[],
    )
}

/// `/openapi/v2` as gnostic protobuf (see `openapi_pb`), encoded once per set of CRDs.
fn openapi_v2_protobuf(state: &State) -> Response<Body> {
    let served = state.registry.served();
    match served.openapi_v2_protobuf() {
        Ok(bytes) => {
            let ct = crate::openapi_pb::PROTOBUF_MEDIA_TYPE;
            let mut resp = json_response(200, Bytes::copy_from_slice(bytes), ct, &[]);
            resp.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept"));
            resp
        }
        Err(e) => error_response(&ApiError::internal(e), &[]),
    }
}

fn opt_response(v: Option<Value>) -> Response<Body> {
    match v {
        Some(v) => value_response(200, &v),
        None => error_response(&ApiError::no_route(), &[]),
    }
}

enum Dispatched {
    Reply(Reply, Arc<tandem_core::registry::ResourceType>),
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
}

async fn dispatch(
    state: Arc<State>,
    ctx: &mut Ctx,
    rr: crate::request::ResourceRequest,
    body: Bytes,
) -> ApiResult<Dispatched> {
    let rt = state.resource(&rr.group, &rr.version, &rr.resource)?;
    let ns = rr.namespace.as_deref();
    if ns.is_some() && !rt.namespaced {
        return Err(ApiError::no_route());
    }
    if ns.is_none() && rt.namespaced && !matches!(rr.verb, Verb::List | Verb::Watch) {
        return Err(ApiError::no_route());
    }
    if let Some(sub) = rr.subresource.as_deref()
        && !rt.has_subresource(sub)
    {
        return Err(ApiError::no_route());
    }
    let name = rr.name.as_deref();
    let sub = rr.subresource.as_deref();
    // Create-only kinds (the reviews) serve nothing else, as upstream's registries.
    if sub.is_none()
        && !rt.supports(
            crate::auth::authz::Attributes::of_request(&rr)
                .verb
                .as_str(),
        )
    {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({:?} {})",
            rr.verb, rr.resource
        )));
    }
    if rt.group == crate::metrics_api::GROUP {
        let reply = crate::metrics_api::serve(&state, ctx, &rt, &rr)?;
        return Ok(Dispatched::Reply(reply, rt));
    }
    let reply = match (rr.verb, name, sub) {
        (Verb::Watch, Some(n), None) => {
            // The legacy `/watch/<resource>/<name>` form: a watch restricted to one name.
            let fs = format!("metadata.name={n}");
            ctx.query = Query::parse(Some(&format!(
                "fieldSelector={}&resourceVersion={}",
                fs,
                ctx.query.get("resourceVersion").unwrap_or("")
            )));
            return Ok(Dispatched::Stream(
                watch::start(state.clone(), ctx, rt, rr.namespace.clone()).await?,
            ));
        }
        (Verb::Watch, None, None) => {
            return Ok(Dispatched::Stream(
                watch::start(state.clone(), ctx, rt, rr.namespace.clone()).await?,
            ));
        }
        (Verb::List, None, None) => state.list(ctx, &rt, ns).await?,
        (Verb::Get, Some(n), None | Some("status") | Some("ephemeralcontainers")) => {
            Reply::Value(200, state.get(&rt, ns, n).await?)
        }
        (Verb::Get, Some(n), Some("scale")) => {
            let obj = state.get(&rt, ns, n).await?;
            Reply::Value(200, state.scale_of(&rt, &obj))
        }
        (Verb::Create, None, None)
            if matches!(
                rt.group.as_str(),
                "authorization.k8s.io" | "authentication.k8s.io"
            ) =>
        {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            Reply::Value(
                201,
                crate::auth::reviews::create(&state, &ctx.user, &rt, ns, v)?,
            )
        }
        (Verb::Create, None, None) => {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            state.create(ctx, &rt, ns, v).await?
        }
        (Verb::Create, Some(n), Some("token"))
            if rt.group.is_empty() && rt.plural == "serviceaccounts" =>
        {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            let token =
                crate::auth::token_request::create(&state, &ctx.user, ns.unwrap_or_default(), n, v)
                    .await?;
            return Ok(Dispatched::Reply(
                Reply::Raw(
                    201,
                    Bytes::from(serde_json::to_vec(&token).unwrap_or_default()),
                    "application/json",
                ),
                rt,
            ));
        }
        (Verb::Create, Some(n), Some("binding")) => {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            state.bind(ctx, &rt, ns, n, v).await?
        }
        (Verb::Create, Some(n), Some("eviction")) => {
            crate::eviction::evict(&state, ctx, &rt, ns, n, &body).await?
        }
        (
            Verb::Update,
            Some(n),
            None
            | Some("status")
            | Some("finalize")
            | Some("approval")
            | Some("ephemeralcontainers"),
        ) => {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            state.update(ctx, &rt, ns, n, v, sub).await?
        }
        (Verb::Update, Some(n), Some("scale")) => {
            let v = decode_body(&body, ctx.content_type.as_deref())?;
            state.update_scale(ctx, &rt, ns, n, v).await?
        }
        (
            Verb::Patch,
            Some(n),
            None | Some("status") | Some("scale") | Some("approval") | Some("ephemeralcontainers"),
        ) => state.patch(ctx, &rt, ns, n, &body, sub).await?,
        (Verb::Delete, Some(n), None) => {
            let opts = if body.is_empty() {
                Value::Null
            } else {
                decode_body(&body, ctx.content_type.as_deref())?
            };
            state.delete(ctx, &rt, ns, n, &opts).await?
        }
        (Verb::DeleteCollection, None, None) => {
            let opts = if body.is_empty() {
                Value::Null
            } else {
                decode_body(&body, ctx.content_type.as_deref())?
            };
            state.delete_collection(ctx, &rt, ns, &opts).await?
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({:?} {})",
                rr.verb, rr.resource
            )));
        }
    };
    Ok(Dispatched::Reply(reply, rt))
}
