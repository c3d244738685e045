//! The cluster zone: an in-memory index of Services, EndpointSlices and Namespaces, and the lookup
//! that answers one question from it, following the Kubernetes DNS specification (schema 1.1.0)
//! the way CoreDNS's `kubernetes` plugin does with kubeadm's Corefile (`pods insecure`,
//! `fallthrough in-addr.arpa ip6.arpa`, `ttl 30`). Pure: no I/O, no clock.
//!
//! Names answered under `<zone>`:
//! - `<svc>.<ns>.svc` — A/AAAA: the cluster IPs (ClusterIP, NodePort, LoadBalancer), or for a
//!   headless Service the addresses of its ready endpoints (all of them with
//!   `publishNotReadyAddresses`); CNAME to `spec.externalName` for ExternalName; SRV for every port.
//! - `<endpoint>.<svc>.<ns>.svc` — the endpoint's address; `<endpoint>` is its `hostname`, or its
//!   address with `.`/`:` turned into `-` (CoreDNS's `endpointHostname`).
//! - `_<port>._<proto>.<svc>.<ns>.svc` — SRV for a named port.
//! - `<a-b-c-d>.<ns>.pod` — the address spelt by the first label, for any namespace.
//! - `dns-version` — TXT `1.1.0`; the apex has SOA and NS; `ns.dns` has the `kube-dns` addresses.
//!
//! Reverse names (`in-addr.arpa`, `ip6.arpa`) answer PTR for cluster IPs and for the endpoints
//! of headless Services that have a hostname; every other reverse question is not the index's.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::ProtoError;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, PTR, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Record TTL when none is configured: kubeadm's Corefile says `ttl 30`.
pub const DEFAULT_TTL: u32 = 30;
/// The specification's schema version, served as TXT at `dns-version.<zone>`.
pub const SCHEMA_VERSION: &str = "1.1.0";
/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// How many in-zone CNAMEs (ExternalName Services naming other in-zone names) are followed.
const MAX_CNAME_CHAIN: usize = 8;
/// SOA timers, as CoreDNS writes them for its zones.
const SOA_REFRESH: i32 = 7200;
const SOA_RETRY: i32 = 1800;
const SOA_EXPIRE: i32 = 86400;

/// Why an index could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("invalid cluster domain {domain:?}")]
    InvalidDomain {
        domain: String,
        #[source]
        source: Option<ProtoError>,
    },
}

/// The answer to one question in the cluster zone (or a reverse name the index knows).
///
/// Negative answers (NXDOMAIN, and NOERROR with no answer records — NODATA) carry the zone's SOA
/// in `authorities`, so resolvers cache them for the SOA's minimum TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl Answer {
    /// NOERROR with records.
    fn records(answers: Vec<Record>) -> Answer {
        Answer {
            rcode: ResponseCode::NoError,
            answers,
            authorities: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

/// A port of a Service or an EndpointSlice; names and protocols lowercased.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Port {
    /// Empty for an unnamed port.
    name: String,
    /// `tcp`, `udp` or `sctp`.
    protocol: String,
    number: u16,
}

impl Port {
    fn new(name: Option<&String>, protocol: Option<&String>, number: Option<i32>) -> Option<Port> {
        let number = u16::try_from(number?).ok().filter(|n| *n != 0)?;
        Some(Port {
            name: name.map(|n| n.to_ascii_lowercase()).unwrap_or_default(),
            protocol: protocol.map_or_else(|| "tcp".to_string(), |p| p.to_ascii_lowercase()),
            number,
        })
    }

    /// Whether the port is the one named by `_<name>._<protocol>`; `None` matches every port.
    fn matches(&self, filter: Option<(&str, &str)>) -> bool {
        match filter {
            None => true,
            Some((name, protocol)) => {
                !self.name.is_empty() && self.name == name && self.protocol == protocol
            }
        }
    }
}

/// What a Service answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// ClusterIP, NodePort and LoadBalancer: the cluster IPs (empty until allocated).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the endpoints.
    Headless,
    /// A CNAME; `None` when `externalName` is not a domain name (an IP, say), which CoreDNS
    /// answers with NXDOMAIN.
    ExternalName(Option<Name>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ServiceEntry {
    kind: Kind,
    ports: Vec<Port>,
    publish_not_ready: bool,
}

impl ServiceEntry {
    fn from_service(service: &Service) -> ServiceEntry {
        let spec = service.spec.as_ref();
        let ports = spec
            .and_then(|s| s.ports.as_ref())
            .map(|ports| {
                ports
                    .iter()
                    .filter_map(|p| Port::new(p.name.as_ref(), p.protocol.as_ref(), Some(p.port)))
                    .collect()
            })
            .unwrap_or_default();
        let publish_not_ready = spec
            .and_then(|s| s.publish_not_ready_addresses)
            .unwrap_or(false);
        let kind = if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            let target = spec
                .and_then(|s| s.external_name.as_deref())
                .and_then(external_name_target);
            Kind::ExternalName(target)
        } else if spec.and_then(|s| s.cluster_ip.as_deref()) == Some("None") {
            Kind::Headless
        } else {
            let mut ips: Vec<IpAddr> = Vec::new();
            let listed = spec.and_then(|s| s.cluster_ips.as_ref());
            let single = spec.and_then(|s| s.cluster_ip.as_ref());
            for text in listed.into_iter().flatten().chain(single) {
                if let Ok(ip) = text.parse::<IpAddr>()
                    && !ips.contains(&ip)
                {
                    ips.push(ip);
                }
            }
            Kind::ClusterIp(ips)
        };
        ServiceEntry {
            kind,
            ports,
            publish_not_ready,
        }
    }
}

/// `spec.externalName` as a CNAME target: a domain name, not an address.
fn external_name_target(text: &str) -> Option<Name> {
    let text = text.trim_end_matches('.');
    if text.is_empty() || text.parse::<IpAddr>().is_ok() {
        return None;
    }
    Name::from_ascii(format!("{text}.")).ok()
}

/// One address of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EndpointAddress {
    ip: IpAddr,
    /// The endpoint's `hostname`, lowercased.
    hostname: Option<String>,
    /// The label the address answers under: the hostname, or the dashed address.
    label: String,
    ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceEntry {
    addresses: Vec<EndpointAddress>,
    ports: Vec<Port>,
}

impl SliceEntry {
    fn from_slice(slice: &EndpointSlice) -> SliceEntry {
        let mut addresses = Vec::new();
        for endpoint in &slice.endpoints {
            // Upstream's EndpointSlice API: a nil `ready` is to be read as ready.
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            let hostname = endpoint
                .hostname
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(str::to_ascii_lowercase);
            for text in &endpoint.addresses {
                // FQDN slices (deprecated) carry names, which CoreDNS ignores too.
                let Ok(ip) = text.parse::<IpAddr>() else {
                    continue;
                };
                let label = hostname.clone().unwrap_or_else(|| dashed(ip));
                addresses.push(EndpointAddress {
                    ip,
                    hostname: hostname.clone(),
                    label,
                    ready,
                });
            }
        }
        let ports = slice
            .ports
            .as_ref()
            .map(|ports| {
                ports
                    .iter()
                    .filter_map(|p| Port::new(p.name.as_ref(), p.protocol.as_ref(), p.port))
                    .collect()
            })
            .unwrap_or_default();
        SliceEntry { addresses, ports }
    }
}

/// A Service name in a namespace: the Service (once seen) and its EndpointSlices.
#[derive(Debug, Clone, Default)]
struct Slot {
    service: Option<ServiceEntry>,
    /// By EndpointSlice name, so answers come out in a stable order.
    slices: BTreeMap<String, SliceEntry>,
    /// The PTR records this Service contributes to [`Index::reverse`].
    reverse: Vec<(IpAddr, Name)>,
}

impl Slot {
    /// The endpoint addresses the Service answers with, in a stable order, each once.
    fn served(&self) -> Vec<(&EndpointAddress, &SliceEntry)> {
        let all = self.service.as_ref().is_some_and(|s| s.publish_not_ready);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for slice in self.slices.values() {
            for address in &slice.addresses {
                if (address.ready || all) && seen.insert((address.ip, address.label.as_str())) {
                    out.push((address, slice));
                }
            }
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.service.is_none() && self.slices.is_empty()
    }
}

#[derive(Debug, Clone, Default)]
struct NamespaceEntry {
    /// A Namespace object was seen.
    declared: bool,
    /// How many slots hold a Service.
    services: usize,
    slots: HashMap<String, Slot>,
}

impl NamespaceEntry {
    fn exists(&self) -> bool {
        self.declared || self.services > 0
    }
}

/// The cluster zone's data. Mutated by the API feed (`upsert_*`/`remove_*`, keyed by
/// namespace and name), read by [`Index::lookup`].
#[derive(Debug, Clone)]
pub struct Index {
    /// Lowercase, fully qualified.
    zone: Name,
    zone_labels: Vec<String>,
    /// `cluster.local`, no trailing dot.
    zone_text: String,
    ttl: u32,
    serial: u32,
    synced: bool,
    namespaces: HashMap<String, NamespaceEntry>,
    /// (namespace, EndpointSlice name) → the Service it belongs to.
    slice_owner: HashMap<(String, String), String>,
    reverse: HashMap<IpAddr, Vec<Name>>,
}

impl Index {
    /// An empty index for `cluster_domain` (`cluster.local`, a trailing dot allowed) whose records
    /// carry `ttl` seconds. It starts synced: a feed that fills it from the API clears that with
    /// [`Index::set_synced`] until its first lists are in.
    pub fn new(cluster_domain: &str, ttl: u32) -> Result<Index, IndexError> {
        let text = cluster_domain
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let invalid = |source| IndexError::InvalidDomain {
            domain: cluster_domain.to_string(),
            source,
        };
        if text.is_empty() {
            return Err(invalid(None));
        }
        let zone = Name::from_ascii(format!("{text}.")).map_err(|e| invalid(Some(e)))?;
        let zone_labels = zone
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        Ok(Index {
            zone,
            zone_labels,
            zone_text: text,
            ttl,
            serial: 1,
            synced: true,
            namespaces: HashMap::new(),
            slice_owner: HashMap::new(),
            reverse: HashMap::new(),
        })
    }

    /// The cluster zone, lowercase and fully qualified.
    pub fn zone(&self) -> &Name {
        &self.zone
    }

    /// The TTL of every record served.
    pub fn ttl(&self) -> u32 {
        self.ttl
    }

    /// Whether the data is complete. Until it is, names that match nothing are answered with
    /// SERVFAIL rather than NXDOMAIN, as CoreDNS does before its informers have synced, so
    /// resolvers do not cache a wrong negative answer.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    pub fn set_synced(&mut self, synced: bool) {
        self.synced = synced;
    }

    /// Adds or replaces a Service. One without a name or namespace is ignored.
    pub fn upsert_service(&mut self, service: &Service) {
        let (Some(ns), Some(name)) = (&service.metadata.namespace, &service.metadata.name) else {
            return;
        };
        let entry = ServiceEntry::from_service(service);
        let namespace = self.namespaces.entry(ns.clone()).or_default();
        let slot = namespace.slots.entry(name.clone()).or_default();
        if slot.service.as_ref() == Some(&entry) {
            return;
        }
        if slot.service.is_none() {
            namespace.services += 1;
        }
        slot.service = Some(entry);
        self.changed(ns, name);
    }

    /// Removes a Service; its EndpointSlices stay until they are removed themselves.
    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        let Some(ns) = self.namespaces.get_mut(namespace) else {
            return;
        };
        let Some(slot) = ns.slots.get_mut(name) else {
            return;
        };
        if slot.service.take().is_some() {
            ns.services -= 1;
            self.changed(namespace, name);
        }
    }

    /// Adds or replaces an EndpointSlice, filed under the Service named by its
    /// `kubernetes.io/service-name` label. One without that label is dropped.
    pub fn upsert_endpoint_slice(&mut self, slice: &EndpointSlice) {
        let (Some(ns), Some(name)) = (&slice.metadata.namespace, &slice.metadata.name) else {
            return;
        };
        let owner = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .filter(|s| !s.is_empty());
        let Some(owner) = owner else {
            self.remove_endpoint_slice(ns, name);
            return;
        };
        let key = (ns.clone(), name.clone());
        if self.slice_owner.get(&key).is_some_and(|o| o != owner) {
            self.remove_endpoint_slice(ns, name);
        }
        let entry = SliceEntry::from_slice(slice);
        let slot = self
            .namespaces
            .entry(ns.clone())
            .or_default()
            .slots
            .entry(owner.clone())
            .or_default();
        if slot.slices.get(name) == Some(&entry) {
            return;
        }
        slot.slices.insert(name.clone(), entry);
        self.slice_owner.insert(key, owner.clone());
        self.changed(ns, owner);
    }

    pub fn remove_endpoint_slice(&mut self, namespace: &str, name: &str) {
        let Some(owner) = self
            .slice_owner
            .remove(&(namespace.to_string(), name.to_string()))
        else {
            return;
        };
        if let Some(slot) = self
            .namespaces
            .get_mut(namespace)
            .and_then(|ns| ns.slots.get_mut(&owner))
        {
            slot.slices.remove(name);
        }
        self.changed(namespace, &owner);
    }

    /// Records that a Namespace exists: `<ns>.svc.<zone>` is then NODATA rather than NXDOMAIN
    /// even without Services, as in CoreDNS, which watches Namespaces for this.
    pub fn upsert_namespace(&mut self, name: &str) {
        let ns = self.namespaces.entry(name.to_string()).or_default();
        if !ns.declared {
            ns.declared = true;
            self.bump();
        }
    }

    pub fn remove_namespace(&mut self, name: &str) {
        let Entry::Occupied(mut entry) = self.namespaces.entry(name.to_string()) else {
            return;
        };
        if entry.get().declared {
            entry.get_mut().declared = false;
            if entry.get().slots.is_empty() {
                entry.remove();
            }
            self.bump();
        }
    }

    /// (namespace, name) of every Service held.
    pub fn service_keys(&self) -> Vec<(String, String)> {
        let mut keys = Vec::new();
        for (ns, entry) in &self.namespaces {
            for (name, slot) in &entry.slots {
                if slot.service.is_some() {
                    keys.push((ns.clone(), name.clone()));
                }
            }
        }
        keys
    }

    /// (namespace, name) of every EndpointSlice held.
    pub fn endpoint_slice_keys(&self) -> Vec<(String, String)> {
        self.slice_owner.keys().cloned().collect()
    }

    /// Names of the Namespaces recorded with [`Index::upsert_namespace`].
    pub fn namespace_keys(&self) -> Vec<String> {
        self.namespaces
            .iter()
            .filter(|(_, ns)| ns.declared)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn bump(&mut self) {
        self.serial = self.serial.wrapping_add(1).max(1);
    }

    /// After a change to the Service or EndpointSlices of `ns/name`: refreshes its PTR records
    /// and drops what is left empty.
    fn changed(&mut self, ns: &str, name: &str) {
        self.bump();
        let Some(namespace) = self.namespaces.get_mut(ns) else {
            return;
        };
        let Some(slot) = namespace.slots.get_mut(name) else {
            return;
        };
        let fresh = reverse_records(slot, name, ns, &self.zone_text);
        let stale = std::mem::replace(&mut slot.reverse, fresh.clone());
        if slot.is_empty() {
            namespace.slots.remove(name);
            if !namespace.declared && namespace.slots.is_empty() {
                self.namespaces.remove(ns);
            }
        }
        for (ip, target) in stale {
            if let Entry::Occupied(mut e) = self.reverse.entry(ip) {
                e.get_mut().retain(|n| n != &target);
                if e.get().is_empty() {
                    e.remove();
                }
            }
        }
        for (ip, target) in fresh {
            self.reverse.entry(ip).or_default().push(target);
        }
    }

    fn slot(&self, ns: &str, name: &str) -> Option<&Slot> {
        self.namespaces.get(ns)?.slots.get(name)
    }

    fn service(&self, ns: &str, name: &str) -> Option<(&ServiceEntry, &Slot)> {
        let slot = self.slot(ns, name)?;
        Some((slot.service.as_ref()?, slot))
    }

    /// Answers `qtype` for `name`, or `None` when the name is not the index's to answer: outside
    /// the cluster zone, or a reverse name without a PTR record here (kubeadm's
    /// `fallthrough in-addr.arpa ip6.arpa`). Names are matched case-insensitively; answer records
    /// are owned by `name` as asked.
    pub fn lookup(&self, name: &Name, qtype: RecordType) -> Option<Answer> {
        let labels: Vec<String> = name
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        if is_reverse(&labels) {
            return self.lookup_reverse(name, &labels, qtype);
        }
        let relative = self.relative(&labels)?;
        let mut answer = self.lookup_relative(name, relative, qtype, 0);
        if answer.rcode == ResponseCode::NXDomain && !self.synced {
            answer.rcode = ResponseCode::ServFail;
            answer.authorities.clear();
        }
        Some(answer)
    }

    /// The labels in front of the zone, if `labels` is in it.
    fn relative<'a>(&self, labels: &'a [String]) -> Option<&'a [String]> {
        let split = labels.len().checked_sub(self.zone_labels.len())?;
        (labels[split..] == self.zone_labels[..]).then_some(&labels[..split])
    }

    fn lookup_relative(
        &self,
        owner: &Name,
        relative: &[String],
        qtype: RecordType,
        depth: usize,
    ) -> Answer {
        let Some((last, rest)) = relative.split_last() else {
            return self.apex(owner, qtype);
        };
        match (last.as_str(), rest) {
            ("svc", _) => self.lookup_svc(owner, rest, qtype, depth),
            ("pod", _) => self.lookup_pod(owner, rest, qtype),
            ("dns-version", []) => match qtype {
                RecordType::TXT => Answer::records(vec![self.record(
                    owner,
                    RData::TXT(TXT::new(vec![SCHEMA_VERSION.to_string()])),
                )]),
                _ => self.nodata(),
            },
            ("dns", []) => self.nodata(),
            ("dns", [ns]) if ns == "ns" => {
                let records = self.dns_service_addresses(owner, qtype);
                if records.is_empty() {
                    self.nodata()
                } else {
                    Answer::records(records)
                }
            }
            _ => self.nxdomain(),
        }
    }

    fn apex(&self, owner: &Name, qtype: RecordType) -> Answer {
        match qtype {
            RecordType::SOA => Answer::records(vec![self.soa_for(owner)]),
            RecordType::NS => {
                let Ok(ns) = self.zone_name("ns.dns") else {
                    return self.nodata();
                };
                let mut answer =
                    Answer::records(vec![self.record(owner, RData::NS(NS(ns.clone())))]);
                answer.additionals = self.dns_service_addresses(&ns, RecordType::A);
                answer
                    .additionals
                    .extend(self.dns_service_addresses(&ns, RecordType::AAAA));
                answer
            }
            _ => self.nodata(),
        }
    }

    /// The cluster IPs of `kube-system/kube-dns` of the family `qtype` asks for.
    fn dns_service_addresses(&self, owner: &Name, qtype: RecordType) -> Vec<Record> {
        match self.service("kube-system", "kube-dns") {
            Some((
                ServiceEntry {
                    kind: Kind::ClusterIp(ips),
                    ..
                },
                _,
            )) => self.addresses(owner, ips.iter().copied(), qtype),
            _ => Vec::new(),
        }
    }

    /// `rest` is what precedes `svc.<zone>`, e.g. `[_http, _tcp, my-svc, ns]`.
    fn lookup_svc(&self, owner: &Name, rest: &[String], qtype: RecordType, depth: usize) -> Answer {
        match rest {
            [] => self.nodata(),
            [ns] => match self.namespaces.get(ns.as_str()) {
                Some(entry) if entry.exists() => self.nodata(),
                _ => self.nxdomain(),
            },
            [svc, ns] => self.service_answer(owner, ns, svc, qtype, depth),
            [sub, svc, ns] if sub.starts_with('_') => {
                // `_<proto>.<svc>...` exists (NODATA) when some SRV name lies beneath it.
                let protocol = &sub[1..];
                match self.service(ns, svc) {
                    Some((service, slot))
                        if !self
                            .srv_targets(service, slot, svc, ns, Some(("", protocol)), true)
                            .is_empty() =>
                    {
                        self.nodata()
                    }
                    _ => self.nxdomain(),
                }
            }
            [endpoint, svc, ns] => self.endpoint_answer(owner, ns, svc, endpoint, qtype),
            [port, protocol, svc, ns] => {
                let (Some(port), Some(protocol)) =
                    (port.strip_prefix('_'), protocol.strip_prefix('_'))
                else {
                    return self.nxdomain();
                };
                if port.is_empty() {
                    return self.nxdomain();
                }
                self.srv_answer(owner, ns, svc, Some((port, protocol)), qtype)
                    .unwrap_or_else(|| self.nxdomain())
            }
            _ => self.nxdomain(),
        }
    }

    fn service_answer(
        &self,
        owner: &Name,
        ns: &str,
        svc: &str,
        qtype: RecordType,
        depth: usize,
    ) -> Answer {
        let Some((service, slot)) = self.service(ns, svc) else {
            return self.nxdomain();
        };
        match &service.kind {
            Kind::ExternalName(None) => self.nxdomain(),
            Kind::ExternalName(Some(target)) => self.cname(owner, target, qtype, depth),
            Kind::ClusterIp(ips) => match qtype {
                RecordType::A | RecordType::AAAA => {
                    let records = self.addresses(owner, ips.iter().copied(), qtype);
                    if records.is_empty() {
                        self.nodata()
                    } else {
                        Answer::records(records)
                    }
                }
                RecordType::SRV => self
                    .srv_answer(owner, ns, svc, None, qtype)
                    .unwrap_or_else(|| self.nodata()),
                _ => self.nodata(),
            },
            Kind::Headless => {
                let served = slot.served();
                // CoreDNS: a headless Service without ready endpoints has no records at all.
                if served.is_empty() {
                    return self.nxdomain();
                }
                match qtype {
                    RecordType::A | RecordType::AAAA => {
                        let records =
                            self.addresses(owner, served.iter().map(|(a, _)| a.ip), qtype);
                        if records.is_empty() {
                            self.nodata()
                        } else {
                            Answer::records(records)
                        }
                    }
                    RecordType::SRV => self
                        .srv_answer(owner, ns, svc, None, qtype)
                        .unwrap_or_else(|| self.nodata()),
                    _ => self.nodata(),
                }
            }
        }
    }

    /// A CNAME to an ExternalName Service's target, followed while it stays in the zone.
    fn cname(&self, owner: &Name, target: &Name, qtype: RecordType, depth: usize) -> Answer {
        let cname = self.record(owner, RData::CNAME(CNAME(target.clone())));
        if qtype == RecordType::CNAME || depth >= MAX_CNAME_CHAIN {
            return Answer::records(vec![cname]);
        }
        let labels: Vec<String> = target
            .iter()
            .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
            .collect();
        let Some(relative) = self.relative(&labels) else {
            // Outside the zone: the client's resolver follows it.
            return Answer::records(vec![cname]);
        };
        let mut chased = self.lookup_relative(target, relative, qtype, depth + 1);
        chased.answers.insert(0, cname);
        chased
    }

    fn endpoint_answer(
        &self,
        owner: &Name,
        ns: &str,
        svc: &str,
        endpoint: &str,
        qtype: RecordType,
    ) -> Answer {
        let Some((service, slot)) = self.service(ns, svc) else {
            return self.nxdomain();
        };
        if matches!(service.kind, Kind::ExternalName(_)) {
            return self.nxdomain();
        }
        let matching: Vec<IpAddr> = slot
            .served()
            .iter()
            .filter(|(a, _)| a.label == endpoint)
            .map(|(a, _)| a.ip)
            .collect();
        if matching.is_empty() {
            return self.nxdomain();
        }
        let records = self.addresses(owner, matching.into_iter(), qtype);
        if records.is_empty() {
            self.nodata()
        } else {
            Answer::records(records)
        }
    }

    /// SRV records for the Service's ports matching `filter` (all ports when `None`), with the
    /// targets' addresses as additional records; `None` when there are none.
    fn srv_answer(
        &self,
        owner: &Name,
        ns: &str,
        svc: &str,
        filter: Option<(&str, &str)>,
        qtype: RecordType,
    ) -> Option<Answer> {
        let (service, slot) = self.service(ns, svc)?;
        let targets = self.srv_targets(service, slot, svc, ns, filter, false);
        if targets.is_empty() {
            return None;
        }
        if qtype != RecordType::SRV {
            return Some(self.nodata());
        }
        // CoreDNS's SRV weights: 100 shared by the records of a priority, at least 1 each.
        let weight = u16::try_from(100 / targets.len()).unwrap_or(0).max(1);
        let mut answers = Vec::with_capacity(targets.len());
        let mut additionals = Vec::new();
        let mut glued: HashSet<(Name, IpAddr)> = HashSet::new();
        for target in targets {
            answers.push(self.record(
                owner,
                RData::SRV(SRV::new(0, weight, target.port, target.name.clone())),
            ));
            for ip in target.ips {
                if glued.insert((target.name.clone(), ip)) {
                    additionals.push(self.address_record(&target.name, ip));
                }
            }
        }
        Some(Answer {
            rcode: ResponseCode::NoError,
            answers,
            authorities: Vec::new(),
            additionals,
        })
    }

    /// The targets of the SRV records of `svc`: the Service name with each Service port for a
    /// ClusterIP Service, each served endpoint with each EndpointSlice port for a headless one.
    /// `filter` is `(port name, protocol)`; with `any_name` only the protocol is compared (to
    /// tell whether `_<proto>.<svc>` exists).
    fn srv_targets(
        &self,
        service: &ServiceEntry,
        slot: &Slot,
        svc: &str,
        ns: &str,
        filter: Option<(&str, &str)>,
        any_name: bool,
    ) -> Vec<SrvTarget> {
        let matches = |port: &Port| match filter {
            Some((_, protocol)) if any_name => !port.name.is_empty() && port.protocol == protocol,
            _ => port.matches(filter),
        };
        let mut out: Vec<SrvTarget> = Vec::new();
        match &service.kind {
            Kind::ExternalName(_) => {}
            Kind::ClusterIp(ips) => {
                let Ok(name) = self.zone_name(&format!("{svc}.{ns}.svc")) else {
                    return out;
                };
                for port in service.ports.iter().filter(|p| matches(p)) {
                    if !out.iter().any(|t| t.port == port.number) {
                        out.push(SrvTarget {
                            name: name.clone(),
                            port: port.number,
                            ips: ips.clone(),
                        });
                    }
                }
            }
            Kind::Headless => {
                for (address, slice) in slot.served() {
                    let Ok(name) = self.zone_name(&format!("{}.{svc}.{ns}.svc", address.label))
                    else {
                        continue;
                    };
                    for port in slice.ports.iter().filter(|p| matches(p)) {
                        if let Some(t) = out
                            .iter_mut()
                            .find(|t| t.name == name && t.port == port.number)
                        {
                            if !t.ips.contains(&address.ip) {
                                t.ips.push(address.ip);
                            }
                        } else {
                            out.push(SrvTarget {
                                name: name.clone(),
                                port: port.number,
                                ips: vec![address.ip],
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// `rest` is what precedes `pod.<zone>`: `[a-b-c-d, ns]`. With `pods insecure` any
    /// well-formed dashed address answers, whatever the namespace.
    fn lookup_pod(&self, owner: &Name, rest: &[String], qtype: RecordType) -> Answer {
        match rest {
            [] | [_] => self.nodata(),
            [dashed, _ns] => match undash(dashed) {
                None => self.nxdomain(),
                Some(ip) => {
                    let records = self.addresses(owner, std::iter::once(ip), qtype);
                    if records.is_empty() {
                        self.nodata()
                    } else {
                        Answer::records(records)
                    }
                }
            },
            _ => self.nxdomain(),
        }
    }

    fn lookup_reverse(&self, owner: &Name, labels: &[String], qtype: RecordType) -> Option<Answer> {
        if qtype != RecordType::PTR {
            return None;
        }
        let targets = self.reverse.get(&reverse_ip(labels)?)?;
        let answers = targets
            .iter()
            .map(|t| self.record(owner, RData::PTR(PTR(t.clone()))))
            .collect();
        Some(Answer::records(answers))
    }

    /// `name` under the zone: `zone_name("ns.dns")` is `ns.dns.cluster.local.`.
    fn zone_name(&self, name: &str) -> Result<Name, ProtoError> {
        Name::from_ascii(format!("{name}.{}.", self.zone_text))
    }

    fn record(&self, owner: &Name, data: RData) -> Record {
        Record::from_rdata(owner.clone(), self.ttl, data)
    }

    fn address_record(&self, owner: &Name, ip: IpAddr) -> Record {
        match ip {
            IpAddr::V4(v4) => self.record(owner, RData::A(A::from(v4))),
            IpAddr::V6(v6) => self.record(owner, RData::AAAA(AAAA::from(v6))),
        }
    }

    /// A or AAAA records (as `qtype` asks; none for other types) for the addresses of that
    /// family, each once.
    fn addresses(
        &self,
        owner: &Name,
        ips: impl Iterator<Item = IpAddr>,
        qtype: RecordType,
    ) -> Vec<Record> {
        let mut seen = Vec::new();
        for ip in ips {
            let wanted = match ip {
                IpAddr::V4(_) => qtype == RecordType::A,
                IpAddr::V6(_) => qtype == RecordType::AAAA,
            };
            if wanted && !seen.contains(&ip) {
                seen.push(ip);
            }
        }
        seen.into_iter()
            .map(|ip| self.address_record(owner, ip))
            .collect()
    }

    /// The zone's SOA as CoreDNS writes it: `ns.dns.<zone>. hostmaster.<zone>.`, the minimum
    /// being the record TTL.
    fn soa_for(&self, owner: &Name) -> Record {
        let mname = self
            .zone_name("ns.dns")
            .unwrap_or_else(|_| self.zone.clone());
        let rname = self
            .zone_name("hostmaster")
            .unwrap_or_else(|_| self.zone.clone());
        let soa = SOA::new(
            mname,
            rname,
            self.serial,
            SOA_REFRESH,
            SOA_RETRY,
            SOA_EXPIRE,
            self.ttl,
        );
        self.record(owner, RData::SOA(soa))
    }

    /// NOERROR without records: the name exists, not with that type.
    fn nodata(&self) -> Answer {
        Answer {
            rcode: ResponseCode::NoError,
            answers: Vec::new(),
            authorities: vec![self.soa_for(&self.zone)],
            additionals: Vec::new(),
        }
    }

    fn nxdomain(&self) -> Answer {
        Answer {
            rcode: ResponseCode::NXDomain,
            answers: Vec::new(),
            authorities: vec![self.soa_for(&self.zone)],
            additionals: Vec::new(),
        }
    }
}

/// An SRV record to be: target name, port, and the target's addresses (for the additional
/// section).
struct SrvTarget {
    name: Name,
    port: u16,
    ips: Vec<IpAddr>,
}

/// The PTR records a Service contributes: its cluster IPs to its name, and for a headless
/// Service its served endpoints that have a hostname to `<hostname>.<svc>.<ns>.svc.<zone>`.
fn reverse_records(slot: &Slot, svc: &str, ns: &str, zone: &str) -> Vec<(IpAddr, Name)> {
    let mut out: Vec<(IpAddr, Name)> = Vec::new();
    let Some(service) = &slot.service else {
        return out;
    };
    match &service.kind {
        Kind::ClusterIp(ips) => {
            if let Ok(name) = Name::from_ascii(format!("{svc}.{ns}.svc.{zone}.")) {
                out.extend(ips.iter().map(|ip| (*ip, name.clone())));
            }
        }
        Kind::Headless => {
            for (address, _) in slot.served() {
                let Some(hostname) = &address.hostname else {
                    continue;
                };
                if let Ok(name) = Name::from_ascii(format!("{hostname}.{svc}.{ns}.svc.{zone}."))
                    && !out.contains(&(address.ip, name.clone()))
                {
                    out.push((address.ip, name));
                }
            }
        }
        Kind::ExternalName(_) => {}
    }
    out
}

fn is_reverse(labels: &[String]) -> bool {
    matches!(
        labels,
        [.., a, b] if b == "arpa" && (a == "in-addr" || a == "ip6")
    )
}

/// The address a full reverse name spells: four decimal octets before `in-addr.arpa`, or 32
/// nibbles before `ip6.arpa`, least significant first.
fn reverse_ip(labels: &[String]) -> Option<IpAddr> {
    let (rest, suffix) = labels.split_at(labels.len().checked_sub(2)?);
    if suffix[0] == "in-addr" {
        let [d, c, b, a] = rest else {
            return None;
        };
        let octet = |s: &String| {
            (s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u8>().ok())
                .flatten()
        };
        Some(IpAddr::V4(Ipv4Addr::new(
            octet(a)?,
            octet(b)?,
            octet(c)?,
            octet(d)?,
        )))
    } else {
        if rest.len() != 32 {
            return None;
        }
        let mut value: u128 = 0;
        for label in rest.iter().rev() {
            let &[digit] = label.as_bytes() else {
                return None;
            };
            let nibble = char::from(digit).to_digit(16)?;
            value = (value << 4) | u128::from(nibble);
        }
        Some(IpAddr::V6(Ipv6Addr::from(value)))
    }
}

/// `10.244.0.5` → `10-244-0-5`, `fd00::5` → `fd00--5`.
pub(crate) fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// The address spelt by a pod label, as CoreDNS reads it: three dashes and no `--` is IPv4,
/// anything else is tried as IPv6.
fn undash(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
