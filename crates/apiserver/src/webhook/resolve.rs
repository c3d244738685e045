//! Where a webhook call goes: its `url`, or its Service resolved through the Service's ready
//! endpoints (upstream's endpoint resolver, `--enable-aggregator-routing`; an ExternalName
//! Service names its host directly), with the server name `NAME.NAMESPACE.svc` the webhook's
//! certificate must carry either way. The `?timeout=` parameter upstream adds to every call is
//! added here too.

use std::time::Duration;

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
            let (host, port) =
                crate::service_resolve::service_address(registry, cache, namespace, name, *port)
                    .map_err(|e| e.to_string())?;
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
