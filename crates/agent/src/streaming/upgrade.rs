//! The HTTP side of the streaming server: a request's token picks its prepared session, and
//! the upgrade is negotiated as upstream does it: websocket subprotocols as x/net/websocket
//! under apimachinery's `wsstream` (the client's first supported choice wins), SPDY through
//! `X-Stream-Protocol-Version` (`httpstream.Handshake`) and the `Upgrade: SPDY/3.1` check of
//! `spdy.responseUpgrader`. Refusals are the plain-text errors upstream sends.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::channel::{self, ChannelProtocol, EXEC_PROTOCOLS, PORT_FORWARD_PROTOCOLS};
use super::portforward::{self, Target};
use super::request_cache::RequestCache;
use super::{ExecHandler, ExecRequest, Prepared, exec, websocket};

type Body = Full<Bytes>;

pub(super) fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(message.into())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Go's `http.NotFound`, which upstream answers unknown tokens with.
fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

pub(super) fn route(req: Request<Incoming>, cache: &RequestCache<Prepared>) -> Response<Body> {
    let path = req.uri().path().trim_start_matches('/');
    let Some((kind, token)) = path.split_once('/') else {
        return not_found();
    };
    let kind = kind.to_string();
    let Some(prepared) = cache.consume(token) else {
        return not_found();
    };
    match (kind.as_str(), prepared) {
        ("exec", Prepared::Exec { req: exec, handler }) => serve_exec(req, exec, handler),
        ("portforward", Prepared::PortForward(target)) => serve_port_forward(req, target),
        _ => not_found(),
    }
}

fn serve_exec(
    req: Request<Incoming>,
    exec: ExecRequest,
    handler: Arc<dyn ExecHandler>,
) -> Response<Body> {
    if websocket::is_websocket_request(req.headers()) {
        let offered = websocket::offered_protocols(req.headers());
        let Some(proto) = channel::negotiate(&offered, EXEC_PROTOCOLS) else {
            return protocol_refused(&offered, EXEC_PROTOCOLS);
        };
        return upgrade_websocket(req, proto.name, move |io| {
            exec::serve_websocket(io, proto, exec, handler)
        });
    }
    match spdy_handshake(req.headers(), exec::SPDY_PROTOCOLS) {
        Ok(protocol) => upgrade_spdy(req, protocol, move |io| {
            exec::serve_spdy(io, protocol, exec, handler)
        }),
        Err(refusal) => refusal.into_response(),
    }
}

fn serve_port_forward(req: Request<Incoming>, target: Target) -> Response<Body> {
    if websocket::is_websocket_request(req.headers()) {
        let offered = websocket::offered_protocols(req.headers());
        if offered.iter().any(|p| p == portforward::TUNNEL_PROTOCOL) {
            return upgrade_websocket(req, portforward::TUNNEL_PROTOCOL, move |io| {
                portforward::serve_tunnel(io, target)
            });
        }
        let Some(proto) = channel::negotiate(&offered, PORT_FORWARD_PROTOCOLS) else {
            return protocol_refused(&offered, PORT_FORWARD_PROTOCOLS);
        };
        let ports = match portforward::query_ports(req.uri().query().unwrap_or("")) {
            Ok(ports) => ports,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        return upgrade_websocket(req, proto.name, move |io| {
            portforward::serve_websocket(io, proto, ports, target)
        });
    }
    match spdy_handshake(req.headers(), &[portforward::SPDY_PROTOCOL]) {
        Ok(_) => upgrade_spdy(req, portforward::SPDY_PROTOCOL, move |io| {
            portforward::serve_spdy(io, target)
        }),
        Err(refusal) => refusal.into_response(),
    }
}

/// What x/net/websocket answers when no subprotocol matches.
fn protocol_refused(offered: &[String], supported: &[ChannelProtocol]) -> Response<Body> {
    let supported: Vec<&str> = supported.iter().map(|p| p.name).collect();
    text(
        StatusCode::FORBIDDEN,
        format!(
            "requested protocol(s) are not supported: [{}]; supports [{}]",
            offered.join(" "),
            supported.join(" ")
        ),
    )
}

/// Upgraded connections as the session code reads and writes them.
type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

/// Answers a websocket handshake (RFC 6455 §4.2.2) choosing `protocol` (empty for none), and
/// runs `serve` on the connection once upgraded.
pub(super) fn upgrade_websocket<F, Fut>(
    mut req: Request<Incoming>,
    protocol: &str,
    serve: F,
) -> Response<Body>
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if req.method() != Method::GET {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "websocket: method not allowed",
        );
    }
    let headers = req.headers();
    let version_ok = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|k| k.to_str().ok())
        .filter(|k| !k.trim().is_empty())
    else {
        return text(
            StatusCode::BAD_REQUEST,
            "websocket: missing Sec-WebSocket-Key",
        );
    };
    if !version_ok {
        let mut resp = text(StatusCode::BAD_REQUEST, "websocket: unsupported version");
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return resp;
    }
    let accept = websocket::accept_key(key);
    let mut resp = switching(HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        resp.headers_mut()
            .insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if !protocol.is_empty()
        && let Ok(protocol) = HeaderValue::from_str(protocol)
    {
        resp.headers_mut()
            .insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    spawn_upgraded(&mut req, serve);
    resp
}

/// Why a SPDY upgrade is refused, answered as upstream's plain-text errors.
struct Refusal {
    status: StatusCode,
    message: String,
    /// Listed in `X-Accepted-Stream-Protocol-Versions` when no protocol matched.
    accepted: &'static [&'static str],
}

impl Refusal {
    fn into_response(self) -> Response<Body> {
        let mut resp = text(self.status, self.message);
        for s in self.accepted {
            resp.headers_mut().append(
                "x-accepted-stream-protocol-versions",
                HeaderValue::from_static(s),
            );
        }
        resp
    }
}

/// Negotiates the SPDY streaming protocol (apimachinery `httpstream.Handshake`): the first of
/// the client's `X-Stream-Protocol-Version` values the server supports. Also checks the
/// upgrade headers (`spdy.responseUpgrader`).
fn spdy_handshake(
    headers: &HeaderMap,
    supported: &'static [&'static str],
) -> Result<&'static str, Refusal> {
    let offered: Vec<&str> = headers
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if offered.is_empty() {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "unable to upgrade: X-Stream-Protocol-Version is required".to_string(),
            accepted: &[],
        });
    }
    let Some(&chosen) = offered
        .iter()
        .find_map(|o| supported.iter().find(|s| *s == o))
    else {
        return Err(Refusal {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
                offered.join(" "),
                supported.join(" ")
            ),
            accepted: supported,
        });
    };
    let spdy_upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("spdy/3.1"));
    if !spdy_upgrade || !websocket::connection_names_upgrade(headers) {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "unable to upgrade: missing upgrade headers in request".to_string(),
            accepted: &[],
        });
    }
    Ok(chosen)
}

/// Answers a SPDY upgrade with the negotiated `protocol` and runs `serve` once upgraded.
fn upgrade_spdy<F, Fut>(
    mut req: Request<Incoming>,
    protocol: &'static str,
    serve: F,
) -> Response<Body>
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut resp = switching(HeaderValue::from_static("SPDY/3.1"));
    resp.headers_mut().insert(
        "x-stream-protocol-version",
        HeaderValue::from_static(protocol),
    );
    spawn_upgraded(&mut req, serve);
    resp
}

fn switching(upgrade: HeaderValue) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    resp.headers_mut().insert(header::UPGRADE, upgrade);
    resp
}

/// Runs `serve` on the connection once hyper has written the `101` and handed it over.
fn spawn_upgraded<F, Fut>(req: &mut Request<Incoming>, serve: F)
where
    F: FnOnce(Upgraded) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => serve(TokioIo::new(upgraded)).await,
            Err(e) => tracing::debug!(error = %e, "streaming upgrade failed"),
        }
    });
}
