//! The HTTP of aggregation: one request forwarded to an aggregated server, as upstream's
//! `proxyHandler` does: refused with `503 service unavailable` while the APIService is not
//! `Available` or its Service has no ready endpoint; otherwise the method, path, query, body and
//! end-to-end headers go to a ready endpoint with the client's credentials and identity headers
//! replaced by the front proxy's, and the answer (a watch's stream included) comes back as it
//! is. An upgrade request is spliced both ways. A backend that cannot be reached is a 503 with
//! the error's text, as upstream's responder writes it.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};

use hyper::body::Incoming;

use super::Remote;
use super::model::is_stripped_header;
use crate::auth::UserInfo;
use crate::node_proxy::{ProxyBody, empty, stream_body};
use crate::state::State;

/// Forwards `req` (as hyper handed it over: body unread, upgrade pending) to `remote`'s server
/// on behalf of `user`.
pub(crate) async fn serve(
    state: &State,
    remote: &Remote,
    user: &UserInfo,
    mut req: Request<Incoming>,
) -> Response<ProxyBody> {
    if !remote.is_available() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "service unavailable\n");
    }
    let forwarder = match &remote.forwarder {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(apiservice = %remote.spec.name, error = %e, "no TLS client for the aggregated server");
            return text(StatusCode::SERVICE_UNAVAILABLE, "service unavailable\n");
        }
    };
    let spec = &remote.spec;
    let (host, port) = match crate::service_resolve::service_address(
        &state.registry,
        &state.cache,
        &spec.namespace,
        &spec.service,
        spec.port,
    ) {
        Ok(address) => address,
        Err(e) => {
            tracing::debug!(apiservice = %spec.name, error = %e, "aggregated server not resolved");
            return text(StatusCode::SERVICE_UNAVAILABLE, "service unavailable\n");
        }
    };
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    let url = format!("{}{path_and_query}", super::base_url(&host, port));
    let headers = req.headers_mut();
    let stripped: Vec<HeaderName> = headers
        .keys()
        .filter(|k| is_stripped_header(k.as_str()))
        .cloned()
        .collect();
    for name in stripped {
        headers.remove(name);
    }
    super::add_identity(headers, &user.name, &user.groups, &user.extra);
    match forwarder.forward(req, &url).await {
        Ok(resp) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => resp.map(|_| empty()),
        Ok(resp) => resp.map(stream_body),
        Err(e) => {
            tracing::debug!(apiservice = %spec.name, error = %e, "aggregated server not reached");
            text(StatusCode::SERVICE_UNAVAILABLE, &format!("{e}\n"))
        }
    }
}

fn text(code: StatusCode, body: &str) -> Response<ProxyBody> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp.headers_mut().insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    resp
}
