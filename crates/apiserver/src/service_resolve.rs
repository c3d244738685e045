//! Where a call to a Service goes when the API server itself makes it (admission webhooks,
//! aggregated API servers): a ready endpoint of the Service's EndpointSlices for the asked
//! port, as upstream's endpoint resolver does (`--enable-aggregator-routing`), or the host an
//! ExternalName Service names. Read from the watch cache; the failures are told apart because
//! the APIService availability check reports each with its own reason.

use serde_json::Value;

use crate::cache::Cache;
use crate::crds::CustomResources;

/// Why a Service has no address to call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error("services are not served")]
    NotServed,
    #[error("service \"{name}\" not found")]
    ServiceNotFound { name: String },
    #[error("no service port {port} found for service \"{name}\"")]
    NoPort { name: String, port: u16 },
    /// No ready endpoint carries the port (named `port_name` on the Service).
    #[error("no endpoints available for service \"{name}\"")]
    NoEndpoints { name: String, port_name: String },
}

/// The address of a ready endpoint behind port `port` of Service `namespace/name`, picked at
/// random among them.
pub(crate) fn service_address(
    registry: &CustomResources,
    cache: &Cache,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<(String, u16), ResolveError> {
    let mut candidates = service_addresses(registry, cache, namespace, name, port)?;
    // Spread calls over the endpoints as upstream's resolver picks one at random.
    let pick = usize::from(uuid::Uuid::new_v4().as_bytes()[0]) % candidates.len();
    Ok(candidates.swap_remove(pick))
}

/// Every ready address behind port `port` of Service `namespace/name` (never empty).
pub(crate) fn service_addresses(
    registry: &CustomResources,
    cache: &Cache,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<Vec<(String, u16)>, ResolveError> {
    let services = registry
        .by_plural("", "v1", "services")
        .ok_or(ResolveError::NotServed)?;
    let service = cache
        .get(&services, &services.key(Some(namespace), name))
        .and_then(|o| o.to_value())
        .ok_or_else(|| ResolveError::ServiceNotFound {
            name: name.to_string(),
        })?;
    if service.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
        let host = service
            .pointer("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Ok(vec![(host.to_string(), port)]);
    }
    let service_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| ResolveError::NoPort {
            name: name.to_string(),
            port,
        })?;
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let no_endpoints = || ResolveError::NoEndpoints {
        name: name.to_string(),
        port_name: port_name.to_string(),
    };
    let slices_rt = registry
        .by_plural("discovery.k8s.io", "v1", "endpointslices")
        .ok_or_else(no_endpoints)?;
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
        return Err(no_endpoints());
    }
    Ok(candidates)
}
