//! NetworkPolicies, Pods and Namespaces turned into what each pod of this node may send and
//! receive, without I/O.
//!
//! The semantics are upstream's `networking.k8s.io/v1` NetworkPolicy, as the API reference and
//! <https://kubernetes.io/docs/concepts/services-networking/network-policies/> state them and as
//! kube-network-policies (`pkg/networkpolicy`) evaluates them:
//! - a pod is isolated for ingress (egress) when a policy of its own namespace selects it and
//!   lists `Ingress` (`Egress`) in `policyTypes`; without `policyTypes`, `Ingress` always and
//!   `Egress` when the policy has egress rules;
//! - what an isolated pod may receive (send) is the union of the rules of every policy
//!   selecting it; a rule matches when one of its peers and one of its ports match, an empty or
//!   missing peer list or port list matching everything;
//! - a peer is a `podSelector` (pods of the policy's namespace), a `namespaceSelector` (every
//!   pod of the namespaces it selects), both (the pods selected in the namespaces selected), or
//!   an `ipBlock` (its `cidr` without its `except` ranges);
//! - a port is a protocol (TCP when not given) with a number, a range (`endPort`), a name
//!   (resolved against the destination pod's container ports of that protocol), or nothing
//!   (every port of the protocol);
//! - hostNetwork pods are never isolated, and are not pod peers (their address is the node's);
//!   pods that finished (Succeeded, Failed) hold no address any more.
//!
//! A selector or value the API should have refused makes its part match nothing (a policy with
//! an invalid `podSelector` selects no pod; an invalid peer or port allows nothing), so a bad
//! object never opens traffic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::rc::Rc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};
use tandem_core::selector::LabelSelector;

use super::ranges::IpRanges;
use crate::model::Protocol;
use crate::rules::Cidr;

/// The label upstream's API server puts on every Namespace, with its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Labels as the selectors read them.
pub type Labels = Map<String, Value>;

/// A container port a named port can resolve to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// What the policies need to know of a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// The pod's IPv4 address, once it has one.
    pub ip: Option<Ipv4Addr>,
    pub node: Option<String>,
    pub host_network: bool,
    /// Succeeded or Failed: its address may already belong to another pod.
    pub finished: bool,
    /// Named container ports.
    pub ports: Vec<NamedPort>,
}

impl PodInfo {
    /// The parts of `pod` the policies read.
    pub fn from_api(pod: &Pod) -> PodInfo {
        let spec = pod.spec.as_ref();
        let status = pod.status.as_ref();
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|s| s.parse::<Ipv4Addr>().ok())
            .or_else(|| {
                status
                    .and_then(|s| s.pod_ips.as_ref())
                    .into_iter()
                    .flatten()
                    .find_map(|p| p.ip.parse::<Ipv4Addr>().ok())
            });
        let finished = status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let ports = spec
            .into_iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone()?,
                    protocol: Protocol::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: labels(pod.metadata.labels.as_ref()),
            ip,
            node: spec.and_then(|s| s.node_name.clone()),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            finished,
            ports,
        }
    }

    /// The address traffic from or to this pod carries, when policies can see it: not for
    /// hostNetwork pods, finished pods or pods without an address yet.
    pub fn policy_ip(&self) -> Option<Ipv4Addr> {
        if self.host_network || self.finished {
            return None;
        }
        self.ip
    }

    /// The port number `name` (of `protocol`) stands for in this pod, as upstream resolves
    /// named ports against the destination pod's containers.
    pub fn resolve(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }
}

/// A Namespace's labels, with the `kubernetes.io/metadata.name` label upstream's API server
/// always sets (added here when an object lacks it, so `namespaceSelector`s on it work).
pub fn namespace_labels(ns: &Namespace) -> (String, Labels) {
    let name = ns.metadata.name.clone().unwrap_or_default();
    let mut labels = labels(ns.metadata.labels.as_ref());
    labels
        .entry(NAMESPACE_NAME_LABEL)
        .or_insert_with(|| Value::String(name.clone()));
    (name, labels)
}

fn labels(map: Option<&BTreeMap<String, String>>) -> Labels {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// A port of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortRef {
    /// Every port of the protocol (`port` not set).
    Any,
    /// `port` through `endPort` (the same when `endPort` is not set).
    Range(u16, u16),
    /// A named container port of the destination pod.
    Named(String),
    /// A value the API should have refused: matches nothing.
    Invalid,
}

/// One entry of a rule's `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub protocol: Protocol,
    pub port: PortRef,
}

/// One entry of a rule's `from`/`to`.
#[derive(Debug, Clone)]
pub enum Peer {
    /// Pods: of the namespaces `namespaces` selects, or of the policy's own when `None`.
    Pods {
        namespaces: Option<LabelSelector>,
        pods: LabelSelector,
    },
    /// `ipBlock`: the cidr without its except ranges.
    Block(IpRanges),
    /// A peer the API should have refused: matches nothing.
    Invalid,
}

/// One ingress or egress rule.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    /// `None`: every peer (the list was empty or missing).
    pub peers: Option<Vec<Peer>>,
    /// `None`: every port and protocol (the list was empty or missing).
    pub ports: Option<Vec<PortSpec>>,
}

/// A NetworkPolicy as the model reads it.
#[derive(Debug, Clone)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: LabelSelector,
    /// `Some` when the policy isolates for ingress: the rules allowing traffic in.
    pub ingress: Option<Vec<Rule>>,
    /// `Some` when the policy isolates for egress: the rules allowing traffic out.
    pub egress: Option<Vec<Rule>>,
}

fn selector(sel: Option<&ApiSelector>) -> LabelSelector {
    let Some(sel) = sel else {
        return LabelSelector::everything();
    };
    serde_json::to_value(sel)
        .ok()
        .and_then(|v| LabelSelector::from_json(&v).ok())
        .unwrap_or_else(LabelSelector::nothing)
}

fn peer(p: &NetworkPolicyPeer) -> Peer {
    if let Some(block) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Peer::Invalid;
        }
        let Some(cidr) = Cidr::parse(&block.cidr) else {
            return Peer::Invalid;
        };
        let mut ranges = IpRanges::cidr(cidr);
        for except in block.except.iter().flatten() {
            match Cidr::parse(except) {
                Some(c) => ranges.subtract(&IpRanges::cidr(c)),
                None => return Peer::Invalid,
            }
        }
        return Peer::Block(ranges);
    }
    match (&p.pod_selector, &p.namespace_selector) {
        (None, None) => Peer::Invalid,
        (pods, namespaces) => Peer::Pods {
            namespaces: namespaces.as_ref().map(|n| selector(Some(n))),
            pods: selector(pods.as_ref()),
        },
    }
}

fn port(p: &NetworkPolicyPort) -> PortSpec {
    let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
        return PortSpec {
            protocol: Protocol::Tcp,
            port: PortRef::Invalid,
        };
    };
    let number = |n: i32| u16::try_from(n).ok().filter(|n| *n > 0);
    let port = match (&p.port, p.end_port) {
        (None, None) => PortRef::Any,
        (None, Some(_)) => PortRef::Invalid,
        (Some(IntOrString::Int(first)), end) => match (number(*first), end.map(number)) {
            (Some(first), None) => PortRef::Range(first, first),
            (Some(first), Some(Some(last))) if last >= first => PortRef::Range(first, last),
            _ => PortRef::Invalid,
        },
        (Some(IntOrString::String(name)), None) if !name.is_empty() => PortRef::Named(name.clone()),
        (Some(IntOrString::String(_)), _) => PortRef::Invalid,
    };
    PortSpec { protocol, port }
}

fn rule(peers: Option<&Vec<NetworkPolicyPeer>>, ports: Option<&Vec<NetworkPolicyPort>>) -> Rule {
    Rule {
        peers: peers
            .filter(|p| !p.is_empty())
            .map(|p| p.iter().map(peer).collect()),
        ports: ports
            .filter(|p| !p.is_empty())
            .map(|p| p.iter().map(port).collect()),
    }
}

impl Policy {
    /// The model of `np`, with upstream's `policyTypes` defaulting.
    pub fn from_api(np: &NetworkPolicy) -> Policy {
        let spec = np.spec.clone().unwrap_or_default();
        let (ingress_type, egress_type) = match &spec.policy_types {
            Some(types) if !types.is_empty() => (
                types.iter().any(|t| t == "Ingress"),
                types.iter().any(|t| t == "Egress"),
            ),
            _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
        };
        let ingress = ingress_type.then(|| {
            spec.ingress
                .iter()
                .flatten()
                .map(|r| rule(r.from.as_ref(), r.ports.as_ref()))
                .collect()
        });
        let egress = egress_type.then(|| {
            spec.egress
                .iter()
                .flatten()
                .map(|r| rule(r.to.as_ref(), r.ports.as_ref()))
                .collect()
        });
        Policy {
            namespace: np.metadata.namespace.clone().unwrap_or_default(),
            name: np.metadata.name.clone().unwrap_or_default(),
            pod_selector: selector(spec.pod_selector.as_ref()),
            ingress,
            egress,
        }
    }

    /// Whether the policy selects `pod` (same namespace, `podSelector` matching).
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.namespace == self.namespace && self.pod_selector.matches(&pod.labels)
    }
}

/// Protocol and an inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    pub protocol: Protocol,
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// Every port of `protocol`.
    pub fn any(protocol: Protocol) -> PortRange {
        PortRange {
            protocol,
            first: 0,
            last: u16::MAX,
        }
    }

    pub fn one(protocol: Protocol, port: u16) -> PortRange {
        PortRange {
            protocol,
            first: port,
            last: port,
        }
    }
}

/// What an isolated pod may exchange in one direction: with the peers of `any_port`, every
/// kind of traffic; with those of `ports`, traffic to that protocol and port range. Anything
/// else is dropped; replies to allowed connections always pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Allowed {
    pub any_port: IpRanges,
    pub ports: BTreeMap<PortRange, IpRanges>,
}

impl Allowed {
    fn allow(&mut self, ports: Option<PortRange>, peers: &IpRanges) {
        if peers.is_empty() {
            return;
        }
        match ports {
            None => self.any_port.add(peers),
            Some(range) => self.ports.entry(range).or_default().add(peers),
        }
    }

    /// Drops port entries that `any_port` already covers, and cuts overlapping port ranges of
    /// one protocol into disjoint ones (each with the union of the peers of the ranges covering
    /// it; neighbours with the same peers merged again), so every `address . protocol . port`
    /// is in at most one entry: nftables refuses overlapping elements in an interval set of
    /// concatenations.
    fn tidy(&mut self) {
        let any = &self.any_port;
        if any.is_all() {
            self.ports.clear();
            return;
        }
        let mut out = BTreeMap::new();
        let mut emit = |range: PortRange, mut peers: IpRanges| {
            peers.subtract(any);
            if !peers.is_empty() {
                out.insert(range, peers);
            }
        };
        // Entries come sorted by protocol, then first port: clusters of overlapping ranges
        // are consecutive. Most entries overlap nothing and pass as they are.
        let entries: Vec<(PortRange, IpRanges)> =
            std::mem::take(&mut self.ports).into_iter().collect();
        let mut i = 0;
        while i < entries.len() {
            let (head, _) = &entries[i];
            let mut end = u32::from(head.last);
            let mut j = i + 1;
            while j < entries.len()
                && entries[j].0.protocol == head.protocol
                && u32::from(entries[j].0.first) <= end
            {
                end = end.max(u32::from(entries[j].0.last));
                j += 1;
            }
            let cluster = &entries[i..j];
            i = j;
            if let [(range, peers)] = cluster {
                emit(*range, peers.clone());
                continue;
            }
            let protocol = cluster[0].0.protocol;
            let mut cuts: Vec<u32> = cluster
                .iter()
                .flat_map(|(p, _)| [u32::from(p.first), u32::from(p.last) + 1])
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut open: Option<(u32, u32, IpRanges)> = None;
            let mut close = |seg: Option<(u32, u32, IpRanges)>| {
                if let Some((first, last, peers)) = seg {
                    let range = PortRange {
                        protocol,
                        first: u16::try_from(first).unwrap_or(u16::MAX),
                        last: u16::try_from(last).unwrap_or(u16::MAX),
                    };
                    emit(range, peers);
                }
            };
            for w in cuts.windows(2) {
                let (first, last) = (w[0], w[1] - 1);
                let mut raw = Vec::new();
                for (p, r) in cluster {
                    if u32::from(p.first) <= first && last <= u32::from(p.last) {
                        raw.extend(r.raw());
                    }
                }
                let peers = IpRanges::from_ranges(raw);
                match &mut open {
                    Some((_, end, same)) if *same == peers && *end + 1 == first => *end = last,
                    _ => close(open.replace((first, last, peers))),
                }
            }
            close(open);
        }
        self.ports = out;
    }

    /// Whether every peer may send (receive) everything: isolation with no effect.
    pub fn allows_everything(&self) -> bool {
        self.any_port.is_all()
    }
}

/// The policies' verdict on one pod of this node: `None` in a direction where it is not
/// isolated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRules {
    pub namespace: String,
    pub name: String,
    pub ingress: Option<Allowed>,
    pub egress: Option<Allowed>,
    /// The policies that select the pod, `namespace/name`, for messages.
    pub policies: BTreeSet<String>,
}

/// The objects the enforcement follows, kept up to date from the watches.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub policies: BTreeMap<(String, String), Policy>,
    pub pods: BTreeMap<(String, String), PodInfo>,
    /// Namespace name → labels (with `kubernetes.io/metadata.name`).
    pub namespaces: BTreeMap<String, Labels>,
}

/// A rule's peers resolved: every address they cover, and the pods among them (named ports
/// of egress rules resolve against each destination pod).
struct PeerSet<'a> {
    ranges: IpRanges,
    pods: Vec<&'a PodInfo>,
}

/// Resolves rules' peers during one [`ClusterState::pod_rules`]: the pods policies can see,
/// indexed by namespace, and the peers of every rule already resolved (policies repeat the
/// same selectors a lot).
struct Resolver<'a> {
    state: &'a ClusterState,
    by_namespace: BTreeMap<&'a str, Vec<(&'a PodInfo, Ipv4Addr)>>,
    memo: HashMap<String, Rc<PeerSet<'a>>>,
}

impl<'a> Resolver<'a> {
    fn new(state: &'a ClusterState) -> Resolver<'a> {
        let mut by_namespace: BTreeMap<&str, Vec<(&PodInfo, Ipv4Addr)>> = BTreeMap::new();
        for (pod, ip) in state.peers_pool() {
            by_namespace
                .entry(pod.namespace.as_str())
                .or_default()
                .push((pod, ip));
        }
        Resolver {
            state,
            by_namespace,
            memo: HashMap::new(),
        }
    }

    fn peers(&mut self, policy: &Policy, peers: Option<&Vec<Peer>>) -> Rc<PeerSet<'a>> {
        let key = format!("{}\u{0}{:?}", policy.namespace, peers);
        if let Some(found) = self.memo.get(&key) {
            return found.clone();
        }
        let set = Rc::new(self.resolve(policy, peers));
        self.memo.insert(key, set.clone());
        set
    }

    fn resolve(&self, policy: &Policy, peers: Option<&Vec<Peer>>) -> PeerSet<'a> {
        let Some(peers) = peers else {
            return PeerSet {
                ranges: IpRanges::all(),
                pods: self
                    .by_namespace
                    .values()
                    .flatten()
                    .map(|(p, _)| *p)
                    .collect(),
            };
        };
        let mut raw = Vec::new();
        let mut pods = Vec::new();
        let mut blocks = IpRanges::none();
        for peer in peers {
            match peer {
                Peer::Invalid => {}
                Peer::Block(r) => blocks.add(r),
                Peer::Pods {
                    namespaces,
                    pods: sel,
                } => {
                    let candidates: Vec<&Vec<(&PodInfo, Ipv4Addr)>> = match namespaces {
                        None => self
                            .by_namespace
                            .get(policy.namespace.as_str())
                            .into_iter()
                            .collect(),
                        Some(ns) => self
                            .by_namespace
                            .iter()
                            .filter(|(name, _)| self.state.namespace_matches(name, ns))
                            .map(|(_, pods)| pods)
                            .collect(),
                    };
                    let everything = sel.is_empty();
                    for (pod, ip) in candidates.into_iter().flatten() {
                        if everything || sel.matches(&pod.labels) {
                            raw.push((u32::from(*ip), u32::from(*ip)));
                            pods.push(*pod);
                        }
                    }
                }
            }
        }
        let mut ranges = IpRanges::from_ranges(raw);
        ranges.add(&blocks);
        PeerSet { ranges, pods }
    }
}

impl ClusterState {
    pub fn apply_policy(&mut self, np: &NetworkPolicy) {
        let p = Policy::from_api(np);
        self.policies
            .insert((p.namespace.clone(), p.name.clone()), p);
    }

    pub fn delete_policy(&mut self, np: &NetworkPolicy) {
        self.policies.remove(&key(&np.metadata));
    }

    pub fn apply_pod(&mut self, pod: &Pod) {
        let p = PodInfo::from_api(pod);
        self.pods.insert((p.namespace.clone(), p.name.clone()), p);
    }

    pub fn delete_pod(&mut self, pod: &Pod) {
        self.pods.remove(&key(&pod.metadata));
    }

    pub fn apply_namespace(&mut self, ns: &Namespace) {
        let (name, labels) = namespace_labels(ns);
        self.namespaces.insert(name, labels);
    }

    pub fn delete_namespace(&mut self, ns: &Namespace) {
        if let Some(name) = &ns.metadata.name {
            self.namespaces.remove(name);
        }
    }

    /// The pods policies can see (with an address, not hostNetwork, not finished).
    fn peers_pool(&self) -> impl Iterator<Item = (&PodInfo, Ipv4Addr)> {
        self.pods
            .values()
            .filter_map(|p| p.policy_ip().map(|ip| (p, ip)))
    }

    fn namespace_matches(&self, namespace: &str, sel: &LabelSelector) -> bool {
        if sel.is_empty() {
            return true;
        }
        match self.namespaces.get(namespace) {
            Some(labels) => sel.matches(labels),
            // Not listed (yet): only its name label is known.
            None => {
                let mut labels = Labels::new();
                labels.insert(
                    NAMESPACE_NAME_LABEL.to_string(),
                    Value::String(namespace.to_string()),
                );
                sel.matches(&labels)
            }
        }
    }

    /// The pods `policy` selects that `enforced` says are enforced here, with their address.
    fn selected<'a>(
        &'a self,
        policy: &'a Policy,
        enforced: &'a dyn Fn(&PodInfo) -> bool,
    ) -> impl Iterator<Item = (&'a PodInfo, Ipv4Addr)> + 'a {
        self.pods
            .range((policy.namespace.clone(), String::new())..)
            .take_while(move |((ns, _), _)| *ns == policy.namespace)
            .map(|(_, p)| p)
            .filter(move |p| policy.selects(p) && enforced(p))
            .filter_map(|p| p.policy_ip().map(|ip| (p, ip)))
    }

    /// Every isolated pod that `enforced` picks (normally: the pods of this node), by address,
    /// with what it may receive and send.
    pub fn pod_rules(&self, enforced: &dyn Fn(&PodInfo) -> bool) -> BTreeMap<Ipv4Addr, PodRules> {
        let mut out: BTreeMap<Ipv4Addr, PodRules> = BTreeMap::new();
        let mut resolver = Resolver::new(self);
        for policy in self.policies.values() {
            let targets: Vec<(&PodInfo, Ipv4Addr)> = self.selected(policy, enforced).collect();
            if targets.is_empty() {
                continue;
            }
            let id = format!("{}/{}", policy.namespace, policy.name);
            for (pod, ip) in &targets {
                let entry = out.entry(*ip).or_insert_with(|| PodRules {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    ..PodRules::default()
                });
                entry.policies.insert(id.clone());
                if policy.ingress.is_some() {
                    entry.ingress.get_or_insert_with(Allowed::default);
                }
                if policy.egress.is_some() {
                    entry.egress.get_or_insert_with(Allowed::default);
                }
            }
            for rule in policy.ingress.iter().flatten() {
                let peers = resolver.peers(policy, rule.peers.as_ref());
                for (pod, ip) in &targets {
                    let Some(allowed) = out.get_mut(ip).and_then(|r| r.ingress.as_mut()) else {
                        continue;
                    };
                    match &rule.ports {
                        None => allowed.allow(None, &peers.ranges),
                        Some(ports) => {
                            for spec in ports {
                                // Named ports resolve against the destination: this pod.
                                if let Some(range) = concrete(spec, Some(pod)) {
                                    allowed.allow(Some(range), &peers.ranges);
                                }
                            }
                        }
                    }
                }
            }
            for rule in policy.egress.iter().flatten() {
                let peers = resolver.peers(policy, rule.peers.as_ref());
                // What the rule allows does not depend on the sending pod: work it out once.
                let mut allowed = Allowed::default();
                match &rule.ports {
                    None => allowed.allow(None, &peers.ranges),
                    Some(ports) => {
                        for spec in ports {
                            if let PortRef::Named(name) = &spec.port {
                                // Named ports resolve against each destination pod; an
                                // ipBlock peer has no container ports to resolve them with.
                                let mut by_port: BTreeMap<u16, Vec<(u32, u32)>> = BTreeMap::new();
                                for peer in &peers.pods {
                                    if let (Some(number), Some(ip)) =
                                        (peer.resolve(name, spec.protocol), peer.policy_ip())
                                    {
                                        by_port
                                            .entry(number)
                                            .or_default()
                                            .push((u32::from(ip), u32::from(ip)));
                                    }
                                }
                                for (number, ips) in by_port {
                                    allowed.allow(
                                        Some(PortRange::one(spec.protocol, number)),
                                        &IpRanges::from_ranges(ips),
                                    );
                                }
                            } else if let Some(range) = concrete(spec, None) {
                                allowed.allow(Some(range), &peers.ranges);
                            }
                        }
                    }
                }
                for (_, ip) in &targets {
                    if let Some(mine) = out.get_mut(ip).and_then(|r| r.egress.as_mut()) {
                        mine.any_port.add(&allowed.any_port);
                        for (range, peers) in &allowed.ports {
                            mine.ports.entry(*range).or_default().add(peers);
                        }
                    }
                }
            }
        }
        for rules in out.values_mut() {
            for allowed in [rules.ingress.as_mut(), rules.egress.as_mut()]
                .into_iter()
                .flatten()
            {
                allowed.tidy();
            }
        }
        out
    }

    /// Per policy (`namespace/name`), the nodes not in `enforcing` that run pods it selects:
    /// where the policy is not enforced.
    pub fn unenforced(
        &self,
        enforcing: &dyn Fn(&str) -> bool,
    ) -> BTreeMap<(String, String), BTreeSet<String>> {
        let mut out = BTreeMap::new();
        for (key, policy) in &self.policies {
            let nodes: BTreeSet<String> = self
                .pods
                .range((policy.namespace.clone(), String::new())..)
                .take_while(|((ns, _), _)| *ns == policy.namespace)
                .map(|(_, p)| p)
                .filter(|p| !p.host_network && !p.finished && policy.selects(p))
                .filter_map(|p| p.node.clone())
                .filter(|n| !enforcing(n))
                .collect();
            if !nodes.is_empty() {
                out.insert(key.clone(), nodes);
            }
        }
        out
    }
}

/// The protocol and port range `spec` stands for; named ports are resolved against `pod`
/// (none: they resolve to nothing).
fn concrete(spec: &PortSpec, pod: Option<&PodInfo>) -> Option<PortRange> {
    match &spec.port {
        PortRef::Any => Some(PortRange::any(spec.protocol)),
        PortRef::Range(first, last) => Some(PortRange {
            protocol: spec.protocol,
            first: *first,
            last: *last,
        }),
        PortRef::Named(name) => pod
            .and_then(|p| p.resolve(name, spec.protocol))
            .map(|n| PortRange::one(spec.protocol, n)),
        PortRef::Invalid => None,
    }
}

fn key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
