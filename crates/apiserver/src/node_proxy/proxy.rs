//! The `proxy` subresources of pods, services and nodes: an HTTP request to
//! `/api/v1/namespaces/NS/pods/[SCHEME:]NAME[:PORT]/proxy/PATH` (or `services/…`, or
//! `/api/v1/nodes/NAME[:PORT]/proxy/PATH`) is forwarded to the backend, as upstream's
//! `ProxyREST.Connect` does (`pkg/registry/core/{pod,service,node}/rest/proxy.go`) with the
//! locations of `ResourceLocation` in each kind's strategy/storage:
//!
//! - a pod: its IP, and the port asked for, else the first declared container port (none: the
//!   scheme's default port); an address that is not a global unicast IP is refused
//!   (`address not allowed`);
//! - a service: a port of the service matched by name or number (the only port when none is
//!   asked for), then a ready endpoint of it from the service's EndpointSlices, chosen at random;
//!   none is a 503 `no endpoints available for service "NAME"`;
//! - a node: without a port (or with the agent's port) its agent, over the same authenticated
//!   TLS connection the API server uses for logs and exec; with another port, plain HTTP to the
//!   node's address.
//!
//! The method, body, query and headers pass through (hop-by-hop headers and the client's
//! `Authorization` removed); upgrades are spliced, as for exec. Upstream also rewrites links
//! inside HTML responses so they stay under the proxy path; tandem passes bodies unchanged.

use http::{Request, Response, header};
use hyper::body::Incoming;
use serde_json::Value;
use tandem_netproxy::Forwarder;

use super::{ProxyBody, agent_address, dial_error, escape_segment, stream_body};
use crate::error::{ApiError, ApiResult};
use crate::request::ResourceRequest;
use crate::state::State;

/// Which kind of object a proxy request goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    Pod,
    Service,
    Node,
}

/// A parsed `…/proxy[/PATH]` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest<'a> {
    pub through: Through,
    pub namespace: Option<&'a str>,
    /// `[SCHEME:]NAME[:PORT]` as it appears in the path.
    pub id: &'a str,
    /// The path after `proxy`, with its leading `/` (empty when none was given).
    pub path: &'a str,
}

impl<'a> ProxyRequest<'a> {
    /// The proxy request a parsed resource request is, if it is one.
    pub fn of(rr: &'a ResourceRequest) -> Option<ProxyRequest<'a>> {
        if !rr.group.is_empty() || rr.version != "v1" || rr.subresource.as_deref() != Some("proxy")
        {
            return None;
        }
        let through = match rr.resource.as_str() {
            "pods" => Through::Pod,
            "services" => Through::Service,
            "nodes" => Through::Node,
            _ => return None,
        };
        Some(ProxyRequest {
            through,
            namespace: rr.namespace.as_deref(),
            id: rr.name.as_deref()?,
            path: rr.proxy_path.as_deref().unwrap_or(""),
        })
    }
}

/// `[SCHEME:]NAME[:PORT]` split as upstream's `SplitSchemeNamePort`; `None` when malformed.
fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    if name.is_empty() || !matches!(scheme, "" | "http" | "https") {
        return None;
    }
    Some((scheme, name, port))
}

/// Whether `ip` is an address upstream lets a proxy reach (`IsGlobalUnicast` in Go: not
/// unspecified, loopback, multicast, link-local or broadcast).
fn global_unicast(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

fn host_port(ip: &str, port: &str) -> String {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    if port.is_empty() {
        host
    } else {
        format!("{host}:{port}")
    }
}

/// Where a proxy request goes: `scheme://host[:port]`, and whether the node agent's TLS
/// client must carry it.
struct Location {
    base: String,
    via_agent: bool,
}

/// Serves one proxy request. `req` must be the request as hyper handed it over (body unread,
/// upgrade pending).
pub async fn serve(
    state: &State,
    target: ProxyRequest<'_>,
    mut req: Request<Incoming>,
) -> ApiResult<Response<ProxyBody>> {
    let location = match target.through {
        Through::Pod => pod_location(state, &target).await?,
        Through::Service => service_location(state, &target).await?,
        Through::Node => node_location(state, &target).await?,
    };
    let path = if target.path.is_empty() {
        "/".to_string()
    } else {
        target
            .path
            .split('/')
            .map(escape_segment)
            .collect::<Vec<_>>()
            .join("/")
    };
    let url = match req.uri().query() {
        Some(q) if !q.is_empty() => format!("{}{path}?{q}", location.base),
        _ => format!("{}{path}", location.base),
    };
    req.headers_mut().remove(header::AUTHORIZATION);
    let forwarder = if location.via_agent || location.base.starts_with("https://") {
        state.kubelet_client.clone()
    } else {
        Forwarder::default()
    };
    let resp = forwarder
        .forward(req, &url)
        .await
        .map_err(|e| dial_error(&e))?;
    if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        return Ok(resp.map(|_| super::empty()));
    }
    Ok(resp.map(stream_body))
}

fn invalid(kind: &str, id: &str) -> ApiError {
    ApiError::bad_request(format!("invalid {kind} request {id:?}"))
}

async fn pod_location(state: &State, target: &ProxyRequest<'_>) -> ApiResult<Location> {
    let (scheme, name, mut port) =
        split_scheme_name_port(target.id).ok_or_else(|| invalid("pod", target.id))?;
    let rt = state.resource("", "v1", "pods")?;
    let pod = state.get(&rt, target.namespace, name).await?;
    let first_port;
    if port.is_empty() {
        first_port = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c.pointer("/ports/0/containerPort").and_then(Value::as_i64))
            .map(|p| p.to_string());
        port = first_port.as_deref().unwrap_or("");
    }
    let ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match ip.parse() {
        Ok(addr) if global_unicast(addr) => {}
        _ => return Err(ApiError::bad_request("address not allowed")),
    }
    let scheme = if scheme.is_empty() { "http" } else { scheme };
    Ok(Location {
        base: format!("{scheme}://{}", host_port(ip, port)),
        via_agent: false,
    })
}

async fn service_location(state: &State, target: &ProxyRequest<'_>) -> ApiResult<Location> {
    let (scheme, name, port_req) =
        split_scheme_name_port(target.id).ok_or_else(|| invalid("service", target.id))?;
    let ns = target.namespace.unwrap_or("default");
    let rt = state.resource("", "v1", "services")?;
    let svc = state.get(&rt, Some(ns), name).await?;
    let ports: Vec<&Value> = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let chosen = if port_req.is_empty() {
        (ports.len() == 1).then(|| ports[0])
    } else {
        ports.iter().copied().find(|p| {
            p.get("name").and_then(Value::as_str) == Some(port_req)
                || p.get("port")
                    .and_then(Value::as_i64)
                    .map(|n| n.to_string())
                    .as_deref()
                    == Some(port_req)
        })
    };
    let Some(svc_port) = chosen else {
        return Err(ApiError::service_unavailable(format!(
            "no service port {port_req:?} found for service {name:?}"
        )));
    };
    let port_name = svc_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let slices = state.resource("discovery.k8s.io", "v1", "endpointslices")?;
    let prefix = slices.namespace_prefix(Some(ns));
    let snapshot = state.cache.snapshot(&slices, &prefix, |o| {
        o.value()
            .pointer("/metadata/labels/kubernetes.io~1service-name")
            .and_then(Value::as_str)
            == Some(name)
    });
    let mut candidates: Vec<(String, i64)> = Vec::new();
    for slice in &snapshot.items {
        let slice = slice.value();
        let Some(port) = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_i64))
        else {
            continue;
        };
        for ep in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ready = ep
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            if let Some(ip) = ep.pointer("/addresses/0").and_then(Value::as_str) {
                candidates.push((ip.to_string(), port));
            }
        }
    }
    // Upstream picks at random; the clock's nanoseconds are random enough to spread requests.
    let pick = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(0);
    let Some((ip, port)) = candidates.get(pick % candidates.len().max(1)) else {
        return Err(ApiError::service_unavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    };
    match ip.parse() {
        Ok(addr) if global_unicast(addr) => {}
        _ => return Err(ApiError::bad_request("address not allowed")),
    }
    let scheme = if scheme.is_empty() { "http" } else { scheme };
    Ok(Location {
        base: format!("{scheme}://{}", host_port(ip, &port.to_string())),
        via_agent: false,
    })
}

async fn node_location(state: &State, target: &ProxyRequest<'_>) -> ApiResult<Location> {
    let (scheme, name, port) =
        split_scheme_name_port(target.id).ok_or_else(|| invalid("node", target.id))?;
    let agent = agent_address(state, name).await?;
    if port.is_empty() || port == agent.port.to_string() {
        return Ok(Location {
            base: agent.url("", "").trim_end_matches('/').to_string(),
            via_agent: true,
        });
    }
    // Another port of the node: plain HTTP to the address the agent is reached on.
    let scheme = if scheme.is_empty() { "http" } else { scheme };
    Ok(Location {
        base: format!("{scheme}://{}", host_port(&agent.host, port)),
        via_agent: false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn ids_split_into_scheme_name_and_port_as_upstream() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:80"), Some(("", "web", "80")));
        assert_eq!(
            split_scheme_name_port("https:web:443"),
            Some(("https", "web", "443"))
        );
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn only_global_unicast_addresses_are_proxied() {
        assert!(global_unicast("10.244.0.5".parse().unwrap()));
        assert!(!global_unicast("127.0.0.1".parse().unwrap()));
        assert!(!global_unicast("169.254.169.254".parse().unwrap()));
        assert!(!global_unicast("0.0.0.0".parse().unwrap()));
        assert!(!global_unicast("fe80::1".parse().unwrap()));
        assert!(global_unicast("fd00::5".parse().unwrap()));
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(host_port("fd00::5", "80"), "[fd00::5]:80");
        assert_eq!(host_port("10.0.0.1", ""), "10.0.0.1");
    }
}
