//! The nftables ruleset, as text for `nft -f`, worked out without I/O.
//!
//! The layout follows upstream kube-proxy's nftables mode (`pkg/proxy/nftables/proxier.go`): one
//! table of tandem's own; verdict maps from `address . protocol . port` (cluster IPs, external
//! and load-balancer IPs) and from `protocol . port` (node ports, on every local address) to a
//! chain per service port; filter chains that reject connections to a service port without
//! endpoints before they can hang; and a masquerade mark. Two departures, both for speed with
//! thousands of Services (measured: an anonymous verdict map per Service made loading 2,000
//! Services take 30 s, because the kernel looks sets up by walking a list, and a chain per
//! endpoint made every later `nft` run read 60,000 chains back):
//! - a service chain picks its endpoint with a cascade of `numgen random mod (n-k) == 0` rules
//!   that DNAT directly (iptables mode's `statistic` cascade), not a vmap to endpoint chains;
//! - hairpin traffic (a pod reaching itself through its Service) is found in `postrouting` by
//!   one set of `endpoint . endpoint` pairs instead of a rule in each endpoint chain.
//!
//! Each Service contributes a [`Contribution`] (its chains, affinity sets, map elements and
//! hairpin addresses); a sync writes the difference between a Service's old and new
//! contribution, so a change costs a few lines however many Services exist.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::model::{Endpoint, ServicePort};

/// The masquerade bit of the packet mark, as kube-proxy's `--masquerade-bit=14`.
pub const MASQUERADE_MARK: u32 = 0x4000;

/// An IPv4 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (ip, bits) = s.split_once('/')?;
        let base: Ipv4Addr = ip.parse().ok()?;
        let prefix: u8 = bits.parse().ok()?;
        (prefix <= 32).then_some(Cidr { base, prefix })
    }

    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    /// Whether `ip` is inside.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.base) & self.mask()
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let net = Ipv4Addr::from(u32::from(self.base) & self.mask());
        write!(f, "{net}/{}", self.prefix)
    }
}

/// What the ruleset needs to know about the node and the cluster.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The nftables table (family `ip`), owned by this proxy alone.
    pub table: String,
    /// This node's name, for `internalTrafficPolicy`/`externalTrafficPolicy: Local`.
    pub node_name: String,
    /// The cluster's pod range: traffic from outside it is masqueraded (kube-proxy's
    /// `--cluster-cidr`).
    pub cluster_cidr: Cidr,
    /// This node's pod range; the rest of `cluster_cidr` is refused (no route leads there).
    pub node_pod_cidr: Option<Cidr>,
    /// Pod ranges of other nodes whose pods this host reaches: emulated nodes whose pods are on
    /// this machine's network (bridges of their own), and the nodes of the pod network between
    /// hosts when this host runs it. Kept up to date from the Nodes.
    pub emulated_pod_cidrs: Vec<Cidr>,
    /// The Service range: a connection to an address in it that no Service port matches is
    /// refused rather than sent to the default route.
    pub service_cidr: Cidr,
    /// Set for the proxy of an emulated Windows node: see [`WindowsDataPlane`].
    pub windows: Option<WindowsDataPlane>,
}

/// How many endpoints of one Service a Windows node's proxy can reach (the reference
/// documents' "more than 64 backend pods … for a single Service" limitation of HNS load
/// balancers).
pub const WINDOWS_MAX_BACKENDS: usize = 64;

/// The first port of upstream's default NodePort range (`--service-node-port-range`).
pub const NODE_PORT_RANGE: (u16, u16) = (30000, 32767);

/// The data plane of an emulated Windows node, as kube-proxy's Windows (`kernelspace`, HNS)
/// proxier behaves, applied to the traffic of that node's pods only (packets entering from its
/// bridge, before the machine's own proxy sees them). Its limits, from the reference documents:
/// - only the first [`WINDOWS_MAX_BACKENDS`] endpoints of a Service are used;
/// - `sessionAffinity: ClientIP` holds, but `sessionAffinityConfig.clientIP.timeoutSeconds` is
///   not honoured (the default stickiness is used whatever is set);
/// - a NodePort is not reachable from the node itself: connections from the node's network to
///   its own address on a port of the NodePort range are dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowsDataPlane {
    /// The bridge the node's pods are on.
    pub interface: String,
    /// The node's own address (its InternalIP, the bridge's address).
    pub node_address: Ipv4Addr,
}

/// The maps a Service puts elements in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Map {
    /// `address . protocol . port : verdict`, to the service chains.
    ServiceIps,
    /// `protocol . port : verdict`, node ports on every local address.
    NodePorts,
    /// `address . protocol . port : verdict`, service ports without endpoints.
    NoEndpointServices,
    /// `protocol . port : verdict`, node ports without endpoints.
    NoEndpointNodePorts,
}

impl Map {
    pub fn name(self) -> &'static str {
        match self {
            Map::ServiceIps => "service-ips",
            Map::NodePorts => "service-nodeports",
            Map::NoEndpointServices => "no-endpoint-services",
            Map::NoEndpointNodePorts => "no-endpoint-nodeports",
        }
    }
}

/// Everything one Service puts in the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contribution {
    /// Chain name → its rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Session-affinity set name → its declaration.
    pub sets: BTreeMap<String, String>,
    /// (map, key) → verdict.
    pub elements: BTreeMap<(Map, String), String>,
    /// Endpoint addresses that hairpin traffic must be masqueraded for.
    pub hairpin: BTreeSet<Ipv4Addr>,
    /// The endpoints (address, port) some chain DNATs to: where the Service's traffic goes.
    pub targets: BTreeSet<(Ipv4Addr, u16)>,
}

impl Contribution {
    fn merge(&mut self, other: Contribution) {
        self.chains.extend(other.chains);
        self.sets.extend(other.sets);
        self.elements.extend(other.elements);
        self.hairpin.extend(other.hairpin);
        self.targets.extend(other.targets);
    }
}

/// How a service port's traffic of one kind ends when it has no endpoint to go to.
const REJECT: &str = "goto reject-chain";
const DROP: &str = "drop";

/// The contribution of a Service's ports. `reachable` says whether the data plane can deliver to
/// an endpoint (endpoints of emulated nodes are not on the network).
pub fn contribution(
    settings: &Settings,
    ports: &[ServicePort],
    reachable: &dyn Fn(&Endpoint) -> bool,
) -> Contribution {
    let mut out = Contribution::default();
    for p in ports {
        out.merge(port_contribution(settings, p, reachable));
    }
    out
}

fn port_contribution(
    settings: &Settings,
    p: &ServicePort,
    reachable: &dyn Fn(&Endpoint) -> bool,
) -> Contribution {
    let mut out = Contribution::default();
    let windows_view;
    let p = if settings.windows.is_some() {
        windows_view = ServicePort {
            affinity_timeout: p
                .affinity_timeout
                .map(|_| crate::model::DEFAULT_AFFINITY_TIMEOUT),
            ..p.clone()
        };
        &windows_view
    } else {
        p
    };
    let id = p.id();
    let proto = p.protocol.nft();
    let mut cluster = p.cluster_endpoints(reachable);
    let mut local = p.local_endpoints(&settings.node_name, reachable);
    if settings.windows.is_some() {
        cluster.truncate(WINDOWS_MAX_BACKENDS);
        local.truncate(WINDOWS_MAX_BACKENDS);
    }
    let internal = if p.internal_local { &local } else { &cluster };
    let external = if p.external_local { &local } else { &cluster };
    for e in cluster.iter().chain(local.iter()) {
        out.hairpin.insert(e.ip);
    }

    let svc_chain = format!("svc-{id}");
    if internal.is_empty() {
        // No endpoint at all: refuse at once. Only remote ones under a Local policy: drop, as
        // kube-proxy does (the traffic is not meant to leave the node).
        let verdict = if cluster.is_empty() { REJECT } else { DROP };
        for ip in &p.cluster_ips {
            out.elements.insert(
                (
                    Map::NoEndpointServices,
                    format!("{ip} . {proto} . {}", p.port),
                ),
                verdict.to_string(),
            );
        }
    } else {
        let mut rules = vec![format!(
            "ip saddr != {} jump mark-for-masquerade",
            settings.cluster_cidr
        )];
        rules.extend(pick_endpoint(p, internal, &mut out.sets));
        out.targets.extend(internal.iter().map(|e| (e.ip, e.port)));
        out.chains.insert(svc_chain.clone(), rules);
        for ip in &p.cluster_ips {
            out.elements.insert(
                (Map::ServiceIps, format!("{ip} . {proto} . {}", p.port)),
                format!("goto {svc_chain}"),
            );
        }
    }

    if p.node_port.is_none() && p.external_ips.is_empty() {
        return out;
    }
    let ext_chain = format!("ext-{id}");
    let verdict = if external.is_empty() {
        Some(if cluster.is_empty() { REJECT } else { DROP })
    } else {
        let mut rules = Vec::new();
        if p.external_local {
            // Pods and the node itself reaching an external address are cluster traffic, as
            // kube-proxy treats them; only traffic from outside keeps its source and stays local.
            if !internal.is_empty() {
                rules.push(format!(
                    "ip saddr {} goto {svc_chain}",
                    settings.cluster_cidr
                ));
                rules.push("fib saddr type local jump mark-for-masquerade".to_string());
                rules.push(format!("fib saddr type local goto {svc_chain}"));
            }
        } else {
            rules.push("jump mark-for-masquerade".to_string());
        }
        rules.extend(pick_endpoint(p, external, &mut out.sets));
        out.targets.extend(external.iter().map(|e| (e.ip, e.port)));
        out.chains.insert(ext_chain.clone(), rules);
        None
    };
    let target = |map_ok: Map, map_none: Map| match verdict {
        None => (map_ok, format!("goto {ext_chain}")),
        Some(v) => (map_none, v.to_string()),
    };
    for ip in &p.external_ips {
        let (map, v) = target(Map::ServiceIps, Map::NoEndpointServices);
        out.elements
            .insert((map, format!("{ip} . {proto} . {}", p.port)), v);
    }
    if let Some(np) = p.node_port {
        let (map, v) = target(Map::NodePorts, Map::NoEndpointNodePorts);
        out.elements.insert((map, format!("{proto} . {np}")), v);
    }
    out
}

/// The rules that DNAT to one of `endpoints` (not empty), at random, or to the endpoint a client
/// was sent to before when the port has ClientIP affinity (one dynamic set per endpoint, whose
/// entries expire after the affinity timeout, as kube-proxy's).
fn pick_endpoint(
    p: &ServicePort,
    endpoints: &[&Endpoint],
    sets: &mut BTreeMap<String, String>,
) -> Vec<String> {
    let proto = p.protocol.nft();
    let dnat = |e: &Endpoint| format!("meta l4proto {proto} dnat to {}:{}", e.ip, e.port);
    let mut rules = Vec::new();
    let affinity: Vec<Option<String>> = endpoints
        .iter()
        .map(|e| {
            p.affinity_timeout.map(|timeout| {
                let name = format!("aff-{}__{}/{}", p.id(), e.ip, e.port);
                sets.insert(
                    name.clone(),
                    format!(
                        "{{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; size 65536 ; }}"
                    ),
                );
                name
            })
        })
        .collect();
    for (e, set) in endpoints.iter().zip(&affinity) {
        if let Some(set) = set {
            rules.push(format!("ip saddr @{set} {}", dnat(e)));
        }
    }
    let n = endpoints.len();
    for (k, (e, set)) in endpoints.iter().zip(&affinity).enumerate() {
        let mut rule = String::new();
        if k + 1 < n {
            let _ = write!(rule, "numgen random mod {} == 0 ", n - k);
        }
        if let Some(set) = set {
            let _ = write!(rule, "update @{set} {{ ip saddr }} ");
        }
        rule.push_str(&dnat(e));
        rules.push(rule);
    }
    rules
}

/// The base chains of a node's own proxy: hooks and the chain each jumps to.
const LINUX_HOOKS: [(&str, &str, &str, &str, &str); 6] = [
    (
        "nat-prerouting",
        "prerouting",
        "nat",
        "-100",
        "jump services",
    ),
    ("nat-output", "output", "nat", "-100", "jump services"),
    (
        "nat-postrouting",
        "postrouting",
        "nat",
        "100",
        "jump masquerading",
    ),
    (
        "filter-input",
        "input",
        "filter",
        "-10",
        "ct state new jump endpoints-check",
    ),
    (
        "filter-forward",
        "forward",
        "filter",
        "-10",
        "ct state new jump endpoints-check",
    ),
    (
        "filter-output",
        "output",
        "filter",
        "-10",
        "ct state new jump endpoints-check",
    ),
];

/// A whole table's script and how many Services use each hairpin address in it (what later
/// partial syncs start from).
#[derive(Debug, Default)]
pub struct FullTable {
    pub script: String,
    pub hairpin: BTreeMap<Ipv4Addr, usize>,
}

/// The whole table: created from nothing (an old table of the same name is deleted in the same
/// transaction, so there is never a moment without rules), with every contribution.
pub fn full_script<'a>(
    settings: &Settings,
    contributions: impl IntoIterator<Item = &'a Contribution>,
) -> FullTable {
    let t = format!("ip {}", settings.table);
    let mut s = String::new();
    let _ = writeln!(s, "add table {t}");
    let _ = writeln!(s, "delete table {t}");
    let _ = writeln!(s, "add table {t}");
    for (map, key) in [
        (Map::ServiceIps, "ipv4_addr . inet_proto . inet_service"),
        (Map::NodePorts, "inet_proto . inet_service"),
        (
            Map::NoEndpointServices,
            "ipv4_addr . inet_proto . inet_service",
        ),
        (Map::NoEndpointNodePorts, "inet_proto . inet_service"),
    ] {
        let _ = writeln!(s, "add map {t} {} {{ type {key} : verdict ; }}", map.name());
    }
    let _ = writeln!(s, "add set {t} hairpin {{ type ipv4_addr . ipv4_addr ; }}");
    let chain = |s: &mut String, name: &str, rules: &[String]| {
        let _ = writeln!(s, "add chain {t} {name}");
        for r in rules {
            let _ = writeln!(s, "add rule {t} {name} {r}");
        }
    };
    chain(
        &mut s,
        "mark-for-masquerade",
        &[format!("meta mark set meta mark or {MASQUERADE_MARK:#x}")],
    );
    chain(
        &mut s,
        "masquerading",
        &[
            "ct status dnat ip saddr . ip daddr @hairpin masquerade fully-random".to_string(),
            format!("meta mark and {MASQUERADE_MARK:#x} == 0 return"),
            format!("meta mark set meta mark xor {MASQUERADE_MARK:#x}"),
            "masquerade fully-random".to_string(),
        ],
    );
    let mut services = Vec::new();
    if let Some(w) = &settings.windows {
        services.push(format!(
            "ip daddr {} th dport {}-{} drop",
            w.node_address, NODE_PORT_RANGE.0, NODE_PORT_RANGE.1
        ));
    }
    services.push("ip daddr . meta l4proto . th dport vmap @service-ips".to_string());
    services
        .push("fib daddr type local meta l4proto . th dport vmap @service-nodeports".to_string());
    chain(&mut s, "services", &services);
    chain(&mut s, "reject-chain", &["reject".to_string()]);
    let mut check = vec![
        "ip daddr . meta l4proto . th dport vmap @no-endpoint-services".to_string(),
        "fib daddr type local meta l4proto . th dport vmap @no-endpoint-nodeports".to_string(),
        // Nothing answers on a service address no port of a Service matched: refuse it rather
        // than let it follow the default route off the machine.
        format!("ip daddr {} reject", settings.service_cidr),
    ];
    if let Some(node) = settings.node_pod_cidr {
        // Pod addresses of nodes this host has no route to (pods of emulated nodes without a
        // network of their own, hosts outside the pod network): refuse them instead of sending
        // them to the default route.
        let reachable: Vec<String> = std::iter::once(node)
            .chain(settings.emulated_pod_cidrs.iter().copied())
            .map(|c| c.to_string())
            .collect();
        check.push(format!(
            "ip daddr {} ip daddr != {{ {} }} reject with icmp type host-unreachable",
            settings.cluster_cidr,
            reachable.join(", ")
        ));
    }
    chain(&mut s, "endpoints-check", &check);
    let hooks: Vec<(&str, &str, &str, &str, String)> = match &settings.windows {
        // The Windows node's proxy sees its own pods' traffic only, before the machine's.
        Some(w) => vec![
            (
                "nat-prerouting",
                "prerouting",
                "nat",
                "-110",
                format!("iifname \"{}\" jump services", w.interface),
            ),
            (
                "nat-postrouting",
                "postrouting",
                "nat",
                "100",
                "jump masquerading".to_string(),
            ),
        ],
        None => LINUX_HOOKS
            .iter()
            .map(|(a, b, c, d, e)| (*a, *b, *c, *d, e.to_string()))
            .collect(),
    };
    for (name, hook, kind, priority, jump) in hooks {
        let _ = writeln!(
            s,
            "add chain {t} {name} {{ type {kind} hook {hook} priority {priority} ; policy accept ; }}"
        );
        let _ = writeln!(s, "add rule {t} {name} {jump}");
    }
    let empty = Contribution::default();
    let mut hairpin = BTreeMap::new();
    let mut body = Script::default();
    for c in contributions {
        body.diff(&t, &empty, c, &mut hairpin);
    }
    s.push_str(&body.finish(&t, &BTreeMap::new(), &hairpin));
    FullTable { script: s, hairpin }
}

/// The lines of one transaction, by phase, so that across Services every chain exists before
/// it is referenced and is unreferenced before it is deleted.
#[derive(Debug, Default)]
pub struct Script {
    add_sets: Vec<String>,
    add_chains: Vec<String>,
    fill_chains: Vec<String>,
    delete_elements: Vec<String>,
    add_elements: Vec<String>,
    flush_removed: Vec<String>,
    delete_chains: Vec<String>,
    delete_sets: Vec<String>,
}

impl Script {
    /// Adds what turns `old` into `new` (one Service's contributions). `hairpin` counts how many
    /// Services use each hairpin address, across calls.
    pub fn diff(
        &mut self,
        t: &str,
        old: &Contribution,
        new: &Contribution,
        hairpin: &mut BTreeMap<Ipv4Addr, usize>,
    ) {
        for (name, decl) in &new.sets {
            if old.sets.get(name) != Some(decl) {
                if old.sets.contains_key(name) {
                    // A new timeout: rules using it are flushed below, then it is made again.
                    self.delete_sets.push(format!("delete set {t} {name}"));
                }
                self.add_sets.push(format!("add set {t} {name} {decl}"));
            }
        }
        for (name, rules) in &new.chains {
            match old.chains.get(name) {
                Some(old_rules) if old_rules == rules => continue,
                Some(_) => self.fill_chains.push(format!("flush chain {t} {name}")),
                None => self.add_chains.push(format!("add chain {t} {name}")),
            }
            for r in rules {
                self.fill_chains.push(format!("add rule {t} {name} {r}"));
            }
        }
        for ((map, key), verdict) in &old.elements {
            if new.elements.get(&(*map, key.clone())) != Some(verdict) {
                self.delete_elements
                    .push(format!("delete element {t} {} {{ {key} }}", map.name()));
            }
        }
        for ((map, key), verdict) in &new.elements {
            if old.elements.get(&(*map, key.clone())) != Some(verdict) {
                self.add_elements.push(format!(
                    "add element {t} {} {{ {key} : {verdict} }}",
                    map.name()
                ));
            }
        }
        for name in old.chains.keys().filter(|n| !new.chains.contains_key(*n)) {
            self.flush_removed.push(format!("flush chain {t} {name}"));
            self.delete_chains.push(format!("delete chain {t} {name}"));
        }
        for name in old.sets.keys().filter(|n| !new.sets.contains_key(*n)) {
            self.delete_sets.push(format!("delete set {t} {name}"));
        }
        for ip in old.hairpin.difference(&new.hairpin) {
            if let Some(n) = hairpin.get_mut(ip) {
                *n = n.saturating_sub(1);
            }
        }
        for ip in new.hairpin.difference(&old.hairpin) {
            *hairpin.entry(*ip).or_default() += 1;
        }
    }

    /// Whether the transaction would change nothing (besides hairpin counts).
    pub fn is_empty(&self) -> bool {
        self.add_sets.is_empty()
            && self.add_chains.is_empty()
            && self.fill_chains.is_empty()
            && self.delete_elements.is_empty()
            && self.add_elements.is_empty()
            && self.delete_chains.is_empty()
            && self.delete_sets.is_empty()
    }

    /// The transaction's text. Hairpin addresses whose count went from zero to more (compared
    /// with `before`) are added, those that fell to zero removed.
    pub fn finish(
        self,
        t: &str,
        before: &BTreeMap<Ipv4Addr, usize>,
        after: &BTreeMap<Ipv4Addr, usize>,
    ) -> String {
        let mut s = String::new();
        let mut lines = |v: Vec<String>| {
            for l in v {
                s.push_str(&l);
                s.push('\n');
            }
        };
        // Sets whose declaration changed are deleted only once nothing uses them; they are
        // re-added under the same name in a second pass below.
        let (recreated, deleted): (Vec<String>, Vec<String>) = self
            .delete_sets
            .into_iter()
            .partition(|d| self.add_sets.iter().any(|a| same_set(a, d)));
        let add_fresh: Vec<String> = self
            .add_sets
            .iter()
            .filter(|a| !recreated.iter().any(|d| same_set(a, d)))
            .cloned()
            .collect();
        let add_again: Vec<String> = self
            .add_sets
            .iter()
            .filter(|a| recreated.iter().any(|d| same_set(a, d)))
            .cloned()
            .collect();
        if !recreated.is_empty() {
            // Flush the chains that use the old sets first (they are refilled below).
            let flushes: Vec<String> = self
                .fill_chains
                .iter()
                .filter(|l| l.starts_with("flush chain "))
                .cloned()
                .collect();
            lines(flushes);
            lines(recreated);
            lines(add_again);
        }
        lines(add_fresh);
        lines(self.add_chains);
        lines(self.fill_chains);
        lines(self.delete_elements);
        let pair = |ip: &Ipv4Addr| format!("{ip} . {ip}");
        let count = |m: &BTreeMap<Ipv4Addr, usize>, ip: &Ipv4Addr| m.get(ip).copied().unwrap_or(0);
        let gone: Vec<String> = before
            .keys()
            .filter(|ip| count(before, ip) > 0 && count(after, ip) == 0)
            .map(pair)
            .collect();
        let came: Vec<String> = after
            .keys()
            .filter(|ip| count(after, ip) > 0 && count(before, ip) == 0)
            .map(pair)
            .collect();
        if !gone.is_empty() {
            lines(vec![format!(
                "delete element {t} hairpin {{ {} }}",
                gone.join(", ")
            )]);
        }
        lines(self.add_elements);
        if !came.is_empty() {
            lines(vec![format!(
                "add element {t} hairpin {{ {} }}",
                came.join(", ")
            )]);
        }
        lines(self.flush_removed);
        lines(self.delete_chains);
        lines(deleted);
        s
    }
}

fn set_name(line: &str) -> Option<&str> {
    line.split_whitespace().nth(4)
}

fn same_set(a: &str, b: &str) -> bool {
    set_name(a).is_some() && set_name(a) == set_name(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, ServicePort};

    fn settings() -> Settings {
        Settings {
            table: "tandem-test".into(),
            node_name: "linux-1".into(),
            cluster_cidr: Cidr::parse("10.244.0.0/16").unwrap_or(Cidr {
                base: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
            }),
            node_pod_cidr: Cidr::parse("10.244.0.0/24"),
            emulated_pod_cidrs: Vec::new(),
            windows: None,
            service_cidr: Cidr::parse("10.96.0.0/12").unwrap_or(Cidr {
                base: Ipv4Addr::UNSPECIFIED,
                prefix: 0,
            }),
        }
    }

    fn ep(ip: [u8; 4], node: &str, ready: bool) -> Endpoint {
        Endpoint {
            ip: Ipv4Addr::from(ip),
            port: 8080,
            node: Some(node.into()),
            ready,
            serving: ready,
            terminating: false,
        }
    }

    fn web(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            namespace: "default".into(),
            name: "web".into(),
            port_name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            cluster_ips: vec![Ipv4Addr::new(10, 96, 0, 20)],
            external_ips: vec![],
            node_port: None,
            affinity_timeout: None,
            internal_local: false,
            external_local: false,
            endpoints,
        }
    }

    #[test]
    fn a_service_port_spreads_over_its_ready_endpoints_with_a_numgen_cascade() {
        let p = web(vec![
            ep([10, 244, 0, 5], "linux-1", true),
            ep([10, 244, 0, 6], "linux-1", true),
            ep([10, 244, 0, 7], "linux-1", false),
        ]);
        let c = contribution(&settings(), &[p], &|_| true);
        let rules = &c.chains["svc-default/web/tcp/80"];
        assert_eq!(
            rules,
            &vec![
                "ip saddr != 10.244.0.0/16 jump mark-for-masquerade".to_string(),
                "numgen random mod 2 == 0 meta l4proto tcp dnat to 10.244.0.5:8080".to_string(),
                "meta l4proto tcp dnat to 10.244.0.6:8080".to_string(),
            ]
        );
        assert_eq!(
            c.elements[&(Map::ServiceIps, "10.96.0.20 . tcp . 80".to_string())],
            "goto svc-default/web/tcp/80"
        );
        assert_eq!(
            c.hairpin,
            BTreeSet::from([Ipv4Addr::new(10, 244, 0, 5), Ipv4Addr::new(10, 244, 0, 6)])
        );
        assert_eq!(
            c.targets,
            BTreeSet::from([
                (Ipv4Addr::new(10, 244, 0, 5), 8080),
                (Ipv4Addr::new(10, 244, 0, 6), 8080)
            ])
        );
    }

    #[test]
    fn a_service_port_without_endpoints_is_rejected_not_dnatted() {
        let c = contribution(&settings(), &[web(vec![])], &|_| true);
        assert!(c.chains.is_empty());
        assert_eq!(
            c.elements[&(Map::NoEndpointServices, "10.96.0.20 . tcp . 80".to_string())],
            REJECT
        );
    }

    #[test]
    fn unreachable_endpoints_get_no_traffic() {
        let p = web(vec![ep([10, 244, 1, 5], "windows-1", true)]);
        let c = contribution(&settings(), &[p], &|e| e.ip.octets()[2] == 0);
        assert!(c.chains.is_empty());
        assert!(c.targets.is_empty());
        assert!(
            c.elements
                .contains_key(&(Map::NoEndpointServices, "10.96.0.20 . tcp . 80".into()))
        );
    }

    #[test]
    fn internal_traffic_policy_local_drops_when_only_remote_endpoints_exist() {
        let mut p = web(vec![ep([10, 244, 1, 5], "linux-2", true)]);
        p.internal_local = true;
        let c = contribution(&settings(), &[p], &|_| true);
        assert_eq!(
            c.elements[&(Map::NoEndpointServices, "10.96.0.20 . tcp . 80".to_string())],
            DROP
        );
    }

    #[test]
    fn node_ports_and_external_ips_go_to_the_external_chain_which_masquerades() {
        let mut p = web(vec![ep([10, 244, 0, 5], "linux-1", true)]);
        p.node_port = Some(30080);
        p.external_ips = vec![Ipv4Addr::new(127, 0, 0, 11)];
        let c = contribution(&settings(), &[p], &|_| true);
        assert_eq!(
            c.elements[&(Map::NodePorts, "tcp . 30080".to_string())],
            "goto ext-default/web/tcp/80"
        );
        assert_eq!(
            c.elements[&(Map::ServiceIps, "127.0.0.11 . tcp . 80".to_string())],
            "goto ext-default/web/tcp/80"
        );
        assert_eq!(
            c.chains["ext-default/web/tcp/80"][0],
            "jump mark-for-masquerade"
        );
    }

    #[test]
    fn external_traffic_policy_local_keeps_outside_sources_on_local_endpoints() {
        let mut p = web(vec![
            ep([10, 244, 0, 5], "linux-1", true),
            ep([10, 244, 1, 5], "linux-2", true),
        ]);
        p.node_port = Some(30080);
        p.external_local = true;
        let c = contribution(&settings(), &[p], &|_| true);
        let ext = &c.chains["ext-default/web/tcp/80"];
        assert_eq!(ext[0], "ip saddr 10.244.0.0/16 goto svc-default/web/tcp/80");
        assert_eq!(
            ext.last().map(String::as_str),
            Some("meta l4proto tcp dnat to 10.244.0.5:8080")
        );
        assert!(!ext.iter().any(|r| r == "jump mark-for-masquerade"));
    }

    #[test]
    fn client_ip_affinity_remembers_the_endpoint_per_client() {
        let mut p = web(vec![
            ep([10, 244, 0, 5], "linux-1", true),
            ep([10, 244, 0, 6], "linux-1", true),
        ]);
        p.affinity_timeout = Some(60);
        let c = contribution(&settings(), &[p], &|_| true);
        let set = "aff-default/web/tcp/80__10.244.0.5/8080";
        assert!(c.sets[set].contains("timeout 60s"));
        let rules = &c.chains["svc-default/web/tcp/80"];
        assert!(rules.contains(&format!(
            "ip saddr @{set} meta l4proto tcp dnat to 10.244.0.5:8080"
        )));
        assert!(rules.contains(&format!(
            "numgen random mod 2 == 0 update @{set} {{ ip saddr }} meta l4proto tcp dnat to 10.244.0.5:8080"
        )));
    }

    #[test]
    fn a_diff_rewrites_only_the_changed_chain_and_deletes_before_adding() {
        let s = settings();
        let old = contribution(
            &s,
            &[web(vec![ep([10, 244, 0, 5], "linux-1", true)])],
            &|_| true,
        );
        let new = contribution(
            &s,
            &[web(vec![ep([10, 244, 0, 6], "linux-1", true)])],
            &|_| true,
        );
        let mut counts = BTreeMap::from([(Ipv4Addr::new(10, 244, 0, 5), 1)]);
        let before = counts.clone();
        let mut script = Script::default();
        script.diff("ip t", &old, &new, &mut counts);
        let text = script.finish("ip t", &before, &counts);
        assert_eq!(
            text,
            "flush chain ip t svc-default/web/tcp/80\n\
             add rule ip t svc-default/web/tcp/80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade\n\
             add rule ip t svc-default/web/tcp/80 meta l4proto tcp dnat to 10.244.0.6:8080\n\
             delete element ip t hairpin { 10.244.0.5 . 10.244.0.5 }\n\
             add element ip t hairpin { 10.244.0.6 . 10.244.0.6 }\n"
        );
    }

    #[test]
    fn removing_a_service_unmaps_it_before_deleting_its_chain() {
        let s = settings();
        let old = contribution(
            &s,
            &[web(vec![ep([10, 244, 0, 5], "linux-1", true)])],
            &|_| true,
        );
        let mut counts = BTreeMap::from([(Ipv4Addr::new(10, 244, 0, 5), 1)]);
        let before = counts.clone();
        let mut script = Script::default();
        script.diff("ip t", &old, &Contribution::default(), &mut counts);
        let text = script.finish("ip t", &before, &counts);
        let unmap = text
            .find("delete element ip t service-ips")
            .unwrap_or(usize::MAX);
        let delete = text
            .find("delete chain ip t svc-default/web/tcp/80")
            .unwrap_or(0);
        assert!(unmap < delete, "{text}");
    }

    #[test]
    fn the_full_script_replaces_the_table_in_one_transaction() {
        let s = settings();
        let c = contribution(
            &s,
            &[web(vec![ep([10, 244, 0, 5], "linux-1", true)])],
            &|_| true,
        );
        let text = full_script(&s, [&c]).script;
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            &lines[..3],
            [
                "add table ip tandem-test",
                "delete table ip tandem-test",
                "add table ip tandem-test"
            ]
        );
        assert!(text.contains("add element ip tandem-test service-ips { 10.96.0.20 . tcp . 80 : goto svc-default/web/tcp/80 }"));
        assert!(text.contains("ip daddr 10.96.0.0/12 reject"));
        assert!(text.contains("add element ip tandem-test hairpin { 10.244.0.5 . 10.244.0.5 }"));
    }

    fn windows_settings() -> Settings {
        Settings {
            node_name: "win-1".into(),
            node_pod_cidr: None,
            windows: Some(WindowsDataPlane {
                interface: "tdmewin".into(),
                node_address: Ipv4Addr::new(10, 244, 1, 1),
            }),
            ..settings()
        }
    }

    #[test]
    fn a_windows_node_reaches_only_64_backends_of_a_service() {
        let endpoints: Vec<Endpoint> = (0..70u8)
            .map(|i| ep([10, 244, 2, 10 + i], "linux-1", true))
            .collect();
        let windows = contribution(&windows_settings(), &[web(endpoints.clone())], &|_| true);
        assert_eq!(windows.targets.len(), WINDOWS_MAX_BACKENDS);
        assert!(
            !windows
                .targets
                .contains(&(Ipv4Addr::new(10, 244, 2, 79), 8080))
        );
        let linux = contribution(&settings(), &[web(endpoints)], &|_| true);
        assert_eq!(linux.targets.len(), 70);
    }

    #[test]
    fn a_windows_node_keeps_client_ip_affinity_but_not_its_timeout() {
        let mut p = web(vec![ep([10, 244, 2, 5], "linux-1", true)]);
        p.affinity_timeout = Some(60);
        let windows = contribution(&windows_settings(), &[p.clone()], &|_| true);
        let set = windows
            .sets
            .values()
            .next()
            .map(String::as_str)
            .unwrap_or("");
        assert!(set.contains("timeout 10800s"), "{set}");
        let linux = contribution(&settings(), &[p], &|_| true);
        let set = linux.sets.values().next().map(String::as_str).unwrap_or("");
        assert!(set.contains("timeout 60s"), "{set}");
    }

    #[test]
    fn a_windows_node_table_sees_only_its_pods_and_drops_node_ports_to_itself() {
        let text = full_script(&windows_settings(), []).script;
        assert!(
            text.contains(
                "add rule ip tandem-test nat-prerouting iifname \"tdmewin\" jump services"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "add rule ip tandem-test services ip daddr 10.244.1.1 th dport 30000-32767 drop"
            ),
            "{text}"
        );
        assert!(!text.contains("nat-output"), "{text}");
        assert!(!text.contains("filter-forward"), "{text}");
        let linux = full_script(&settings(), []).script;
        assert!(!linux.contains("iifname"));
        assert!(linux.contains("nat-output"));
    }

    #[test]
    fn a_full_table_counts_the_services_using_each_hairpin_address() {
        let a = contribution(
            &settings(),
            &[web(vec![ep([10, 244, 0, 5], "linux-1", true)])],
            &|_| true,
        );
        let mut other = web(vec![
            ep([10, 244, 0, 5], "linux-1", true),
            ep([10, 244, 0, 6], "linux-1", true),
        ]);
        other.name = "other".into();
        let b = contribution(&settings(), &[other], &|_| true);
        let table = full_script(&settings(), [&a, &b]);
        assert_eq!(
            table.hairpin,
            BTreeMap::from([
                (Ipv4Addr::new(10, 244, 0, 5), 2),
                (Ipv4Addr::new(10, 244, 0, 6), 1)
            ])
        );
        // Each address is added to the set once, however many Services use it.
        assert_eq!(
            table.script.matches("10.244.0.5 . 10.244.0.5").count(),
            1,
            "{}",
            table.script
        );
    }
}
