//! What the proxy programs, worked out from Services and EndpointSlices without any I/O: one
//! [`ServicePort`] per port of every proxied Service, with the endpoints each kind of traffic
//! goes to. This is kube-proxy's `ServicePortInfo`/`EndpointsMap` and its endpoint
//! categorisation (`pkg/proxy/topology.go`, `CategorizeEndpoints`), without topology hints.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours), as upstream.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

/// A transport protocol the proxy forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Upstream's spelling (`TCP`, default when absent); `None` for anything else.
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// nftables' name (`meta l4proto tcp`).
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One endpoint of a service port, with the conditions of its EndpointSlice entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub node: Option<String>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// One port of a Service as the proxy forwards it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub namespace: String,
    pub name: String,
    /// The port's name (empty for the single unnamed port).
    pub port_name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub cluster_ips: Vec<Ipv4Addr>,
    /// `spec.externalIPs` and `status.loadBalancer.ingress[].ip`: reached as external traffic.
    pub external_ips: Vec<Ipv4Addr>,
    pub node_port: Option<u16>,
    /// `sessionAffinity: ClientIP` with its timeout in seconds.
    pub affinity_timeout: Option<u32>,
    pub internal_local: bool,
    pub external_local: bool,
    /// Every endpoint from the Service's EndpointSlices, sorted.
    pub endpoints: Vec<Endpoint>,
}

impl ServicePort {
    /// `namespace/name/proto/port`: stable while the port exists, used to name its chains.
    pub fn id(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.namespace,
            self.name,
            self.protocol.nft(),
            self.port
        )
    }

    /// `namespace/name:portName`, as kube-proxy names a service port in its logs.
    pub fn display_name(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }

    /// Endpoints for traffic that may go anywhere in the cluster: the ready ones, or — when none
    /// is ready — the serving ones that are terminating (kube-proxy's fallback, so connections
    /// keep working through a rolling update). `reachable` filters out endpoints the data plane
    /// cannot deliver to.
    pub fn cluster_endpoints(&self, reachable: &dyn Fn(&Endpoint) -> bool) -> Vec<&Endpoint> {
        usable(self.endpoints.iter().filter(|e| reachable(e)))
    }

    /// As [`ServicePort::cluster_endpoints`], for endpoints on `node` only.
    pub fn local_endpoints(
        &self,
        node: &str,
        reachable: &dyn Fn(&Endpoint) -> bool,
    ) -> Vec<&Endpoint> {
        usable(
            self.endpoints
                .iter()
                .filter(|e| e.node.as_deref() == Some(node) && reachable(e)),
        )
    }
}

fn usable<'a>(endpoints: impl Iterator<Item = &'a Endpoint> + Clone) -> Vec<&'a Endpoint> {
    let ready: Vec<&Endpoint> = endpoints.clone().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints.filter(|e| e.serving && e.terminating).collect()
}

/// The ports of `svc` the proxy forwards, with their endpoints from `slices` (the EndpointSlices
/// of the Service's namespace labelled with its name). Headless and ExternalName Services, and
/// Services without an IPv4 cluster IP, are not proxied and give nothing.
pub fn service_ports<'a>(
    svc: &Service,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> Vec<ServicePort> {
    let Some(spec) = svc.spec.as_ref() else {
        return Vec::new();
    };
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let mut cluster_ips: Vec<Ipv4Addr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .filter_map(|ip| ip.parse().ok())
        .collect();
    cluster_ips.sort();
    cluster_ips.dedup();
    if cluster_ips.is_empty() {
        return Vec::new();
    }
    let mut external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    if spec.type_.as_deref() == Some("LoadBalancer") {
        external_ips.extend(
            svc.status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.as_ref()?.parse::<Ipv4Addr>().ok()),
        );
    }
    external_ips.sort();
    external_ips.dedup();
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
    });
    let external_kind = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let slices: Vec<&EndpointSlice> = slices
        .into_iter()
        .filter(|s| s.address_type == "IPv4")
        .collect();
    let mut out = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            continue;
        };
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let port_name = p.name.clone().unwrap_or_default();
        let mut endpoints = BTreeSet::new();
        for slice in &slices {
            let Some(slice_port) = slice.ports.iter().flatten().find(|sp| {
                sp.name.clone().unwrap_or_default() == port_name
                    && Protocol::parse(sp.protocol.as_deref()) == Some(protocol)
            }) else {
                continue;
            };
            let Some(target) = slice_port.port.and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            for e in &slice.endpoints {
                // kube-proxy uses the first address of an endpoint.
                let Some(ip) = e.addresses.first().and_then(|a| a.parse().ok()) else {
                    continue;
                };
                let c = e.conditions.as_ref();
                let ready = c.and_then(|c| c.ready).unwrap_or(true);
                endpoints.insert(Endpoint {
                    ip,
                    port: target,
                    node: e.node_name.clone(),
                    ready,
                    serving: c.and_then(|c| c.serving).unwrap_or(ready),
                    terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                });
            }
        }
        out.push(ServicePort {
            namespace: namespace.clone(),
            name: name.clone(),
            port_name,
            protocol,
            port,
            cluster_ips: cluster_ips.clone(),
            external_ips: external_ips.clone(),
            node_port: p
                .node_port
                .filter(|_| external_kind)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n > 0),
            affinity_timeout,
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            external_local: external_kind
                && spec.external_traffic_policy.as_deref() == Some("Local"),
            endpoints: endpoints.into_iter().collect(),
        });
    }
    out
}

/// Services and EndpointSlices by namespace and name, with the service ports worked out
/// again only for the Services that changed.
#[derive(Debug, Default)]
pub struct ClusterState {
    services: BTreeMap<(String, String), Service>,
    /// EndpointSlices by (namespace, service name), then slice name.
    slices: BTreeMap<(String, String), BTreeMap<String, EndpointSlice>>,
    /// Service keys touched since the last [`ClusterState::take_changed`].
    changed: BTreeSet<(String, String)>,
}

fn key(namespace: Option<&String>, name: Option<&String>) -> (String, String) {
    (
        namespace.cloned().unwrap_or_default(),
        name.cloned().unwrap_or_default(),
    )
}

fn slice_service(slice: &EndpointSlice) -> Option<(String, String)> {
    let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some(key(slice.metadata.namespace.as_ref(), Some(service)))
}

impl ClusterState {
    pub fn apply_service(&mut self, svc: Service) {
        let k = key(svc.metadata.namespace.as_ref(), svc.metadata.name.as_ref());
        self.changed.insert(k.clone());
        self.services.insert(k, svc);
    }

    pub fn delete_service(&mut self, svc: &Service) {
        let k = key(svc.metadata.namespace.as_ref(), svc.metadata.name.as_ref());
        self.services.remove(&k);
        self.changed.insert(k);
    }

    pub fn apply_slice(&mut self, slice: EndpointSlice) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        // A slice can be relabelled to another Service: drop it from the old one first.
        self.remove_slice_named(slice.metadata.namespace.as_ref(), &name);
        if let Some(k) = slice_service(&slice) {
            self.changed.insert(k.clone());
            self.slices.entry(k).or_default().insert(name, slice);
        }
    }

    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        let name = slice.metadata.name.clone().unwrap_or_default();
        self.remove_slice_named(slice.metadata.namespace.as_ref(), &name);
    }

    fn remove_slice_named(&mut self, namespace: Option<&String>, name: &str) {
        let ns = namespace.cloned().unwrap_or_default();
        let mut emptied = None;
        for (k, slices) in self.slices.range_mut((ns.clone(), String::new())..) {
            if k.0 != ns {
                break;
            }
            if slices.remove(name).is_some() {
                self.changed.insert(k.clone());
                if slices.is_empty() {
                    emptied = Some(k.clone());
                }
                break;
            }
        }
        if let Some(k) = emptied {
            self.slices.remove(&k);
        }
    }

    /// Forgets everything (a watch is relisting); every known Service counts as changed.
    pub fn clear_services(&mut self) {
        let keys: Vec<_> = self.services.keys().cloned().collect();
        self.changed.extend(keys);
        self.services.clear();
    }

    /// As [`ClusterState::clear_services`], for EndpointSlices.
    pub fn clear_slices(&mut self) {
        let keys: Vec<_> = self.slices.keys().cloned().collect();
        self.changed.extend(keys);
        self.slices.clear();
    }

    /// The Services touched since the last call, with their ports now (empty when the Service
    /// is gone or not proxied).
    pub fn take_changed(&mut self) -> Vec<((String, String), Vec<ServicePort>)> {
        let changed = std::mem::take(&mut self.changed);
        changed
            .into_iter()
            .map(|k| {
                let ports = match self.services.get(&k) {
                    Some(svc) => service_ports(
                        svc,
                        self.slices.get(&k).into_iter().flat_map(|m| m.values()),
                    ),
                    None => Vec::new(),
                };
                (k, ports)
            })
            .collect()
    }

    /// Marks a Service as changed, so the next sync works it out again.
    pub fn touch(&mut self, key: (String, String)) {
        self.changed.insert(key);
    }

    /// Whether anything changed since the last [`ClusterState::take_changed`].
    pub fn has_changes(&self) -> bool {
        !self.changed.is_empty()
    }

    /// Every Service's ports now.
    pub fn all_ports(&self) -> Vec<((String, String), Vec<ServicePort>)> {
        self.services
            .iter()
            .map(|(k, svc)| {
                (
                    k.clone(),
                    service_ports(svc, self.slices.get(k).into_iter().flat_map(|m| m.values())),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec,
        }))
        .unwrap_or_default()
    }

    fn slice(name: &str, endpoints: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoints,
        }))
        .unwrap_or_else(|e| panic!("bad slice: {e}"))
    }

    fn web(extra: serde_json::Value) -> Service {
        let mut spec = json!({
            "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"],
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        svc(spec)
    }

    #[test]
    fn a_cluster_ip_port_gets_the_endpoints_of_its_named_slice_port() {
        let s = slice(
            "web-abc",
            json!([{"addresses": ["10.244.0.5"], "conditions": {"ready": true}, "nodeName": "n1"},
                   {"addresses": ["10.244.0.6"], "conditions": {"ready": false}, "nodeName": "n1"}]),
        );
        let ports = service_ports(&web(json!({})), [&s]);
        assert_eq!(ports.len(), 1);
        let p = &ports[0];
        assert_eq!(p.cluster_ips, vec![Ipv4Addr::new(10, 96, 0, 20)]);
        assert_eq!(p.port, 80);
        assert_eq!(p.endpoints.len(), 2);
        let ready: Vec<_> = p
            .cluster_endpoints(&|_| true)
            .iter()
            .map(|e| e.ip)
            .collect();
        assert_eq!(ready, vec![Ipv4Addr::new(10, 244, 0, 5)]);
        assert_eq!(p.endpoints[0].port, 8080);
    }

    #[test]
    fn terminating_serving_endpoints_are_used_only_when_none_is_ready() {
        let s = slice(
            "web-abc",
            json!([{"addresses": ["10.244.0.5"],
                    "conditions": {"ready": false, "serving": true, "terminating": true}},
                   {"addresses": ["10.244.0.6"],
                    "conditions": {"ready": false, "serving": false, "terminating": true}}]),
        );
        let ports = service_ports(&web(json!({})), [&s]);
        let eps: Vec<_> = ports[0]
            .cluster_endpoints(&|_| true)
            .iter()
            .map(|e| e.ip)
            .collect();
        assert_eq!(eps, vec![Ipv4Addr::new(10, 244, 0, 5)]);

        let s2 = slice(
            "web-def",
            json!([{"addresses": ["10.244.0.7"], "conditions": {"ready": true}}]),
        );
        let ports = service_ports(&web(json!({})), [&s, &s2]);
        let eps: Vec<_> = ports[0]
            .cluster_endpoints(&|_| true)
            .iter()
            .map(|e| e.ip)
            .collect();
        assert_eq!(eps, vec![Ipv4Addr::new(10, 244, 0, 7)]);
    }

    #[test]
    fn headless_and_external_name_services_are_not_proxied() {
        assert!(
            service_ports(
                &web(json!({"clusterIP": "None", "clusterIPs": ["None"]})),
                []
            )
            .is_empty()
        );
        assert!(
            service_ports(
                &svc(json!({"type": "ExternalName", "externalName": "example.com"})),
                []
            )
            .is_empty()
        );
    }

    #[test]
    fn load_balancer_ingress_and_node_port_are_external_entry_points() {
        let mut s = web(
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "ports": [{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
        );
        s.status =
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "127.0.0.11"}]}}))
                .ok();
        let ports = service_ports(&s, []);
        assert_eq!(ports[0].node_port, Some(30080));
        assert_eq!(ports[0].external_ips, vec![Ipv4Addr::new(127, 0, 0, 11)]);
        assert!(ports[0].external_local);
        // A ClusterIP Service never has a node port, whatever its spec says.
        let ports = service_ports(
            &web(json!({"ports": [{"name": "http", "port": 80, "nodePort": 30081}]})),
            [],
        );
        assert_eq!(ports[0].node_port, None);
    }

    #[test]
    fn client_ip_affinity_defaults_to_three_hours() {
        let ports = service_ports(&web(json!({"sessionAffinity": "ClientIP"})), []);
        assert_eq!(ports[0].affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT));
        let ports = service_ports(
            &web(json!({"sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}})),
            [],
        );
        assert_eq!(ports[0].affinity_timeout, Some(60));
    }

    #[test]
    fn local_endpoints_are_those_on_the_node() {
        let s = slice(
            "web-abc",
            json!([{"addresses": ["10.244.0.5"], "nodeName": "n1"},
                   {"addresses": ["10.244.1.5"], "nodeName": "n2"}]),
        );
        let ports = service_ports(&web(json!({"internalTrafficPolicy": "Local"})), [&s]);
        assert!(ports[0].internal_local);
        let local: Vec<_> = ports[0]
            .local_endpoints("n2", &|_| true)
            .iter()
            .map(|e| e.ip)
            .collect();
        assert_eq!(local, vec![Ipv4Addr::new(10, 244, 1, 5)]);
    }

    #[test]
    fn cluster_state_reports_the_services_a_slice_change_touches() {
        let mut st = ClusterState::default();
        st.apply_service(web(json!({})));
        assert_eq!(st.take_changed().len(), 1);
        assert!(!st.has_changes());
        st.apply_slice(slice("web-abc", json!([{"addresses": ["10.244.0.5"]}])));
        let changed = st.take_changed();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].1[0].endpoints.len(), 1);
        st.delete_slice(&slice("web-abc", json!([])));
        let changed = st.take_changed();
        assert_eq!(changed[0].1[0].endpoints.len(), 0);
        st.delete_service(&web(json!({})));
        let changed = st.take_changed();
        assert!(changed[0].1.is_empty());
    }
}
