//! The reverse proxy: answers HTTP and HTTPS (HTTP/1.1 and HTTP/2, TLS certificates by SNI from
//! [`crate::tls`]) with the current [`RoutingTable`], and forwards each routed request to one
//! ready endpoint with `tandem_netproxy`'s forwarder (HTTP/1.1 to the endpoint, upgrades such as
//! websockets spliced through).
//!
//! Answers follow ingress-nginx and Traefik as controllers: 404 when no rule and no default
//! backend takes the request; 503 when the rule's Service, port or ready endpoints are missing;
//! 502 when the endpoint refuses the connection, 504 when connecting times out. The backend sees
//! the client's `Host` and `X-Forwarded-For` (the client's address appended), `X-Forwarded-Proto`,
//! `X-Forwarded-Host`, `X-Forwarded-Port` and `X-Real-IP` set by the proxy.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tandem_netproxy::{Forwarder, ProxyError};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::routing::{Route, RoutingTable};
use crate::tls::{SniResolver, error_chain};

/// A response body: the backend's, streamed, or one of the proxy's own short answers.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// The routing table requests use now; the controller replaces it as objects change.
#[derive(Clone, Default)]
pub struct Routes(Arc<RwLock<Arc<RoutingTable>>>);

impl Routes {
    pub fn set(&self, table: RoutingTable) {
        let mut slot = self.0.write().unwrap_or_else(|p| p.into_inner());
        *slot = Arc::new(table);
    }

    pub fn current(&self) -> Arc<RoutingTable> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The TLS configuration of the HTTPS listener: certificates from `resolver`, ALPN `h2` and
/// `http/1.1`.
pub fn tls_server_config(resolver: SniResolver) -> Arc<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map(|b| {
        b.with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver.clone()))
    })
    .unwrap_or_else(|_| {
        // The ring provider supports the default versions; this branch is not reached.
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver))
    });
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Serves plain HTTP on `listener` until the task is aborted.
pub fn serve_http(
    listener: TcpListener,
    routes: Routes,
    forwarder: Forwarder,
) -> tokio::task::JoinHandle<()> {
    serve(listener, None, routes, forwarder)
}

/// Serves HTTPS on `listener` with `tls` until the task is aborted.
pub fn serve_https(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    routes: Routes,
    forwarder: Forwarder,
) -> tokio::task::JoinHandle<()> {
    serve(listener, Some(TlsAcceptor::from(tls)), routes, forwarder)
}

fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    routes: Routes,
    forwarder: Forwarder,
) -> tokio::task::JoinHandle<()> {
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: try again shortly.
                    tracing::warn!(error = %e, "ingress: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (tls, routes, forwarder) = (tls.clone(), routes.clone(), forwarder.clone());
            tokio::spawn(async move {
                let scheme = if tls.is_some() {
                    Scheme::Https
                } else {
                    Scheme::Http
                };
                let service = hyper::service::service_fn(move |req| {
                    let (routes, forwarder) = (routes.clone(), forwarder.clone());
                    async move {
                        Ok::<_, Infallible>(
                            handle(req, scheme, peer, local_port, &routes, &forwarder).await,
                        )
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let result = match tls {
                    None => {
                        builder
                            .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                            .await
                    }
                    Some(acceptor) => match acceptor.accept(tcp).await {
                        Ok(stream) => {
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                                .await
                        }
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "ingress: TLS handshake failed");
                            return;
                        }
                    },
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "ingress: connection ended with an error");
                }
            });
        }
    })
}

/// Answers one request: routes it and forwards it, or answers 404/502/503/504 itself.
pub async fn handle(
    mut req: Request<Incoming>,
    scheme: Scheme,
    peer: SocketAddr,
    local_port: u16,
    routes: &Routes,
    forwarder: &Forwarder,
) -> Response<ProxyBody> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let route = routes.current().route(&host, req.uri().path());
    let (backend, target) = match route {
        Route::NotFound => return text(StatusCode::NOT_FOUND, "404 page not found\n"),
        Route::Unavailable { reason } => {
            tracing::debug!(%host, path = req.uri().path(), %reason, "ingress: backend unavailable");
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "503 Service Temporarily Unavailable\n",
            );
        }
        Route::Forward { backend, target } => (backend, target),
    };
    set_forwarded_headers(req.headers_mut(), scheme, peer, &host, local_port);
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let url = format!("http://{target}{path_and_query}");
    match forwarder.forward(req, &url).await {
        Ok(resp) => resp.map(Either::Left),
        Err(e) => {
            tracing::warn!(%backend, %target, error = %error_chain(&e), "ingress: backend did not answer");
            match e {
                ProxyError::ConnectTimeout { .. } => {
                    text(StatusCode::GATEWAY_TIMEOUT, "504 Gateway Time-out\n")
                }
                _ => text(StatusCode::BAD_GATEWAY, "502 Bad Gateway\n"),
            }
        }
    }
}

/// The headers a backend behind an ingress controller expects: the client's `Host` (an HTTP/2
/// request carries it as its authority), `X-Forwarded-For` with the client's address appended
/// to what the client sent, and the proxy's own `X-Forwarded-Proto/-Host/-Port` and
/// `X-Real-IP`.
pub fn set_forwarded_headers(
    headers: &mut http::HeaderMap,
    scheme: Scheme,
    peer: SocketAddr,
    host: &str,
    local_port: u16,
) {
    let client = peer.ip().to_string();
    let forwarded_for = match headers
        .get(&X_FORWARDED_FOR)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty())
    {
        Some(before) => format!("{before}, {client}"),
        None => client.clone(),
    };
    let mut set = |name: HeaderName, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    };
    set(X_FORWARDED_FOR, &forwarded_for);
    set(X_FORWARDED_PROTO, scheme.as_str());
    set(X_FORWARDED_PORT, &local_port.to_string());
    set(X_REAL_IP, &client);
    if !host.is_empty() {
        set(X_FORWARDED_HOST, host);
    }
    if !host.is_empty()
        && !headers.contains_key(header::HOST)
        && let Ok(v) = HeaderValue::from_str(host)
    {
        headers.insert(header::HOST, v);
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut resp = Response::new(Either::Right(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_for(existing: Option<&str>, host: &str, scheme: Scheme) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(x) = existing {
            h.insert(X_FORWARDED_FOR, HeaderValue::from_str(x).expect("value"));
        }
        set_forwarded_headers(
            &mut h,
            scheme,
            "192.0.2.7:50000".parse().expect("addr"),
            host,
            443,
        );
        h
    }

    #[test]
    fn client_address_is_appended_to_x_forwarded_for() {
        let h = headers_for(Some("203.0.113.1"), "web.example.com", Scheme::Http);
        assert_eq!(h[&X_FORWARDED_FOR], "203.0.113.1, 192.0.2.7");
        let h = headers_for(None, "web.example.com", Scheme::Http);
        assert_eq!(h[&X_FORWARDED_FOR], "192.0.2.7");
        assert_eq!(h[&X_REAL_IP], "192.0.2.7");
    }

    #[test]
    fn proto_host_and_port_say_what_the_client_asked_for() {
        let h = headers_for(None, "web.example.com:8443", Scheme::Https);
        assert_eq!(h[&X_FORWARDED_PROTO], "https");
        assert_eq!(h[&X_FORWARDED_HOST], "web.example.com:8443");
        assert_eq!(h[&X_FORWARDED_PORT], "443");
        // HTTP/2 requests have no Host header: the backend gets the authority as Host.
        assert_eq!(h[header::HOST], "web.example.com:8443");
    }

    #[test]
    fn a_client_host_header_is_kept() {
        let mut h = http::HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("web.example.com"));
        set_forwarded_headers(
            &mut h,
            Scheme::Http,
            "[::1]:1".parse().expect("addr"),
            "web.example.com",
            80,
        );
        assert_eq!(h[header::HOST], "web.example.com");
        assert_eq!(h[&X_FORWARDED_FOR], "::1");
    }
}
