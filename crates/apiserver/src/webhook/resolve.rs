//! Where a webhook call goes: its `url`, or its Service resolved through the Service's ready
//! endpoints (upstream's endpoint resolver, `--enable-aggregator-routing`; an ExternalName
//! Service names its host directly), with the server name `NAME.NAMESPACE.svc` the webhook's
//! certificate must carry either way. The `?timeout=` parameter upstream adds to every call is
//! added here too.

use std::time::Duration;

use serde_json::Value;

use super::client::Target;
use super::config::Endpoint;
use crate::cache::Cache;
use crate::crds::CustomResources;

/// The target of a call to `endpoint`, or why there is none (the detail of upstream's
/// `failed calling webhook` message).
pub(crate) fn target(
    endpoint: &Endpoint,
    timeout: Duration,
    registry: &CustomResources,
    cache: &Cache,
) -> Result<Target, String> {
    let query = format!("timeout={}s", timeout.as_secs());
    match endpoint {
        Endpoint::Url(url) => url_target(url, &query),
        Endpoint::Service {
            namespace,
            name,
            port,
            path,
        } => {
            let server_name = format!("{name}.{namespace}.svc");
            let path = if path.is_empty() { "/" } else { path.as_str() };
            let path_and_query = format!("{path}?{query}");
            let url = format!("https://{server_name}:{port}{path_and_query}");
            let (host, port) = service_address(registry, cache, namespace, name, *port)?;
            Ok(Target {
                url,
                host,
                port,
                server_name,
                path_and_query,
            })
        }
    }
}

/// A `url` client config: `https://host[:port]/path`.
fn url_target(url: &str, query: &str) -> Result<Target, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "invalid webhook URL {url:?}: the scheme must be https"
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("invalid webhook URL {url:?}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let path = match uri.path() {
        "" => "/",
        p => p,
    };
    let path_and_query = match uri.query() {
        Some(q) if !q.is_empty() => format!("{path}?{q}&{query}"),
        _ => format!("{path}?{query}"),
    };
    let shown = url.trim_end_matches('/');
    Ok(Target {
        url: format!("{shown}?{query}"),
        server_name: host.clone(),
        host,
        port,
        path_and_query,
    })
}

/// The address of a ready endpoint behind port `port` of Service `namespace/name`.
fn service_address(
    registry: &CustomResources,
    cache: &Cache,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<(String, u16), String> {
    let services = registry
        .by_plural("", "v1", "services")
        .ok_or_else(|| "services are not served".to_string())?;
    let service = cache
        .get(&services, &services.key(Some(namespace), name))
        .and_then(|o| o.to_value())
        .ok_or_else(|| format!("service \"{name}\" not found"))?;
    if service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
        let host = service
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Ok((host.to_string(), port));
    }
    let service_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let slices_rt = registry
        .by_plural("discovery.k8s.io", "v1", "endpointslices")
        .ok_or_else(|| "endpointslices are not served".to_string())?;
    let slices = cache.snapshot(
        &slices_rt,
        &slices_rt.namespace_prefix(Some(namespace)),
        |o| {
            o.attrs(&slices_rt)
                .labels
                .get("kubernetes.io/service-name")
                .and_then(Value::as_str)
                == Some(name)
        },
    );
    let mut candidates = Vec::new();
    for slice in slices.items.iter().filter_map(|o| o.to_value()) {
        let Some(target_port) = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or_default() == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if endpoint
                .pointer("/conditions/ready")
                .and_then(Value::as_bool)
                == Some(false)
            {
                continue;
            }
            if let Some(address) = endpoint
                .get("addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(Value::as_str)
            {
                candidates.push((address.to_string(), target_port));
            }
        }
    }
    if candidates.is_empty() {
        return Err(format!("no endpoints available for service \"{name}\""));
    }
    // Spread calls over the endpoints as upstream's resolver picks one at random.
    let pick = usize::from(uuid::Uuid::new_v4().as_bytes()[0]) % candidates.len();
    Ok(candidates.swap_remove(pick))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_targets_carry_the_timeout_and_the_hosts_name() {
        let t = url_target("https://127.0.0.1:8443/validate", "timeout=10s").expect("valid");
        assert_eq!(t.host, "127.0.0.1");
        assert_eq!(t.port, 8443);
        assert_eq!(t.server_name, "127.0.0.1");
        assert_eq!(t.path_and_query, "/validate?timeout=10s");
        assert_eq!(t.url, "https://127.0.0.1:8443/validate?timeout=10s");
        let t = url_target("https://hooks.example.com", "timeout=5s").expect("valid");
        assert_eq!((t.port, t.path_and_query.as_str()), (443, "/?timeout=5s"));
        assert!(url_target("http://x/", "timeout=1s").is_err());
    }
}
