//! ClusterIP and NodePort allocation for Services, done in the API server's Service storage as
//! upstream's `pkg/registry/core/service/storage` (with its ipallocator and portallocator) does:
//! a Service of type ClusterIP, NodePort or LoadBalancer without `spec.clusterIP` gets the next
//! free address of the service CIDR (default 10.96.0.0/12; .1 is the `kubernetes` Service and .10
//! is kept for cluster DNS), and every port of a NodePort or LoadBalancer Service without a
//! `nodePort` gets a free one from 30000–32767. Addresses or ports asked for explicitly that are
//! taken are refused with upstream's messages. What is in use is read from the watch cache; Service
//! writes hold `State::service_lock` until the cache reflects them, so two writes never see the
//! same free value. Across API servers, `service_claims` claims each choice in the store before
//! the Service is written.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;

use crate::state::State;

/// The service address range and node port range.
#[derive(Debug, Clone)]
pub struct ServiceRanges {
    pub cidr_base: Ipv4Addr,
    pub cidr_prefix: u8,
    pub node_port_min: u16,
    pub node_port_max: u16,
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges {
            cidr_base: Ipv4Addr::new(10, 96, 0, 0),
            cidr_prefix: 12,
            node_port_min: 30000,
            node_port_max: 32767,
        }
    }
}

/// A service CIDR that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid service CIDR {0:?}: it must be an IPv4 range from /8 to /28, such as 10.96.0.0/12"
)]
pub struct InvalidServiceCidr(pub String);

impl ServiceRanges {
    /// The ranges with the service addresses of `cidr` (`a.b.c.d/n`, upstream's
    /// `--service-cluster-ip-range`) and the default node ports.
    pub fn from_cidr(cidr: &str) -> Result<ServiceRanges, InvalidServiceCidr> {
        let bad = || InvalidServiceCidr(cidr.to_string());
        let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
        let base: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = bits.parse().map_err(|_| bad())?;
        if !(8..=28).contains(&prefix) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        Ok(ServiceRanges {
            cidr_base: Ipv4Addr::from(u32::from(base) & mask),
            cidr_prefix: prefix,
            ..ServiceRanges::default()
        })
    }

    /// `a.b.c.d/n`.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.cidr_base, self.cidr_prefix)
    }

    /// The `kubernetes` Service's address: the first of the range, as upstream.
    pub fn kubernetes_ip(&self) -> Ipv4Addr {
        self.nth(1)
    }

    /// The cluster DNS address: the tenth of the range, as kubeadm's default (10.96.0.10).
    pub fn dns_ip(&self) -> Ipv4Addr {
        self.nth(10)
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.cidr_prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.cidr_prefix))
        };
        (u32::from(ip) & mask) == (u32::from(self.cidr_base) & mask)
    }
    fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.cidr_prefix.min(30)))
    }
    /// The n-th address of the range.
    fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cidr_base).wrapping_add(n))
    }
}

/// What one stored Service holds: its cluster IP and node ports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Held {
    pub(crate) ip: Option<Ipv4Addr>,
    pub(crate) ports: Vec<u16>,
}

/// The allocations of every Service by key, with the revision each was read at: a Service
/// write parses only the Services that changed since the last one, not all of them (with 10,000
/// Services, parsing every one for each create made creating them quadratic).
#[derive(Debug, Default)]
pub struct UsedCache {
    by_key: std::collections::HashMap<String, (tandem_store::Revision, Held)>,
}

pub(crate) fn held(value: &Value) -> Held {
    let ip = value
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok());
    let ports = value
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            p.get("nodePort")
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok())
        })
        .collect();
    Held { ip, ports }
}

fn used(
    state: &State,
    rt: &ResourceType,
    skip_key: Option<&str>,
) -> (HashSet<Ipv4Addr>, HashSet<u16>) {
    let snap = state.cache.snapshot(rt, &rt.key_prefix(), |_| true);
    let mut cache = state
        .service_alloc_cache
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let mut next = std::collections::HashMap::with_capacity(snap.items.len());
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for o in &snap.items {
        let rev = o.rv;
        let entry = match cache.by_key.remove(&o.key) {
            Some((r, h)) if r == rev => h,
            _ => held(&o.value()),
        };
        if Some(o.key.as_str()) != skip_key {
            ips.extend(entry.ip);
            ports.extend(entry.ports.iter().copied());
        }
        next.insert(o.key.clone(), (rev, entry));
    }
    cache.by_key = next;
    (ips, ports)
}

/// Fills and checks `spec.clusterIP(s)` and node ports of a Service being created (`old = None`)
/// or updated. Returns field errors for addresses or ports that are taken or out of range.
pub fn allocate(
    state: &State,
    rt: &ResourceType,
    obj: &mut Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let ranges = &state.options.service_ranges;
    let key = crate::meta::name(obj).map(|n| rt.key(crate::meta::namespace(obj), n));
    let (mut ips, mut ports) = used(state, rt, key.as_deref());
    // What another API server claimed in the store and this one's cache does not show yet.
    // Once that happened, the other server is allocating too: scan from a random place, as
    // upstream's allocators do, rather than race it for the same next value again.
    let contended = {
        let avoid = state
            .service_alloc_avoid
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        ips.extend(avoid.0.iter().copied());
        ports.extend(avoid.1.iter().copied());
        !avoid.0.is_empty() || !avoid.1.is_empty()
    };
    let random = || uuid::Uuid::new_v4().as_u128();
    let kind = obj
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if kind == "ExternalName" {
        return errors;
    }
    let old_ip = old
        .and_then(|o| o.pointer("/spec/clusterIP"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let requested = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .map(str::to_string)
        .filter(|s| !s.is_empty());
    match requested.as_deref() {
        Some("None") => {}
        Some(ip) if old_ip.as_deref() == Some(ip) => {}
        Some(ip) => match ip.parse::<Ipv4Addr>() {
            Ok(addr) if !ranges.contains(addr) => errors.push(FieldError::invalid(
                "spec.clusterIPs",
                &json!([ip]),
                format!("failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}/{}", ranges.cidr_base, ranges.cidr_prefix),
            )),
            Ok(addr) if ips.contains(&addr) => errors.push(FieldError::invalid(
                "spec.clusterIPs",
                &json!([ip]),
                format!("failed to allocate IP {ip}: provided IP is already allocated"),
            )),
            Ok(_) | Err(_) => {}
        },
        None => {
            // Skip the network address, .1 (the kubernetes Service) and .10 (cluster DNS) unless
            // asked for explicitly, and the broadcast address.
            let mut chosen = None;
            let candidates = ranges.size().saturating_sub(3);
            let offset = if contended && candidates > 0 {
                u32::try_from(random() % u128::from(candidates)).unwrap_or(0)
            } else {
                0
            };
            for k in 0..candidates {
                let n = 2 + (offset + k) % candidates;
                let addr = ranges.nth(n);
                if n == 10 || ips.contains(&addr) {
                    continue;
                }
                chosen = Some(addr);
                break;
            }
            match chosen {
                Some(addr) => {
                    obj["spec"]["clusterIP"] = json!(addr.to_string());
                    obj["spec"]["clusterIPs"] = json!([addr.to_string()]);
                }
                None => errors.push(FieldError::new(tandem_core::field::ErrorKind::Invalid, "spec.clusterIPs", None, "failed to allocate a serviceIP: range is full")),
            }
        }
    }
    if let Some(ip) = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .map(str::to_string)
        && obj
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
    {
        obj["spec"]["clusterIPs"] = json!([ip]);
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        let old_ports: HashSet<u16> = old
            .map(|o| held(o).ports.into_iter().collect())
            .unwrap_or_default();
        let span = u32::from(ranges.node_port_max - ranges.node_port_min) + 1;
        let mut offset = if contended {
            u32::try_from(random() % u128::from(span)).unwrap_or(0)
        } else {
            0
        };
        if let Some(list) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for (i, p) in list.iter_mut().enumerate() {
                match p
                    .get("nodePort")
                    .and_then(Value::as_u64)
                    .filter(|n| *n != 0)
                {
                    Some(np) => {
                        let Ok(np) = u16::try_from(np) else { continue };
                        if old_ports.contains(&np) {
                            continue;
                        }
                        if ports.contains(&np) {
                            errors.push(FieldError::invalid(
                                format!("spec.ports[{i}].nodePort"),
                                &json!(np),
                                "provided port is already allocated",
                            ));
                        } else if np < ranges.node_port_min || np > ranges.node_port_max {
                            errors.push(FieldError::invalid(
                                format!("spec.ports[{i}].nodePort"),
                                &json!(np),
                                format!("provided port is not in the valid range. The range of valid ports is {}-{}", ranges.node_port_min, ranges.node_port_max),
                            ));
                        } else {
                            ports.insert(np);
                        }
                    }
                    None => {
                        // The first free port from `offset` on, wrapping once around the range.
                        let free = (0..span).map(|k| (offset + k) % span).find_map(|k| {
                            let port = u16::try_from(u32::from(ranges.node_port_min) + k).ok()?;
                            (!ports.contains(&port)).then_some((k, port))
                        });
                        let Some((k, port)) = free else {
                            errors.push(FieldError::new(
                                tandem_core::field::ErrorKind::Invalid,
                                format!("spec.ports[{i}].nodePort"),
                                None,
                                "failed to allocate a nodePort: range is full",
                            ));
                            continue;
                        };
                        offset = k;
                        p["nodePort"] = json!(port);
                        ports.insert(port);
                    }
                }
            }
        }
    }
    errors
}
