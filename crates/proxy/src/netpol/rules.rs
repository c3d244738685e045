//! The NetworkPolicy table as `nft -f` text, worked out without I/O.
//!
//! One `inet` table of its own, replaced whole in one transaction at every sync (the table is
//! added, deleted and built again in the same script, so there is never a moment without it):
//!
//! ```text
//! chain forward   hook forward, priority filter (0)
//!   ct state established,related accept        replies and related ICMP always pass
//!   ip saddr vmap @egress-pods                 jump to the sender's egress chain, if isolated
//!   ip daddr vmap @ingress-pods                jump to the receiver's ingress chain, if isolated
//! chain egress-<ip>    ip daddr @…-any return ; ip daddr . l4proto . dport @…-ports return ; drop
//! chain ingress-<ip>   ip saddr @…-any accept ; ip saddr . l4proto . dport @…-ports accept ; drop
//! ```
//!
//! Pods with the same verdict in a direction (the replicas of one workload) share one chain
//! and its sets, named after the first pod's address.
//!
//! The forward hook sees pod traffic after the service proxy's DNAT (which happens in
//! prerouting), so rules match real pod addresses and target ports, as upstream semantics
//! require; the pods' bridge has `nf_call_iptables` set, so traffic between two pods of the
//! node passes it too. Traffic between a pod and its own node (probes, the node's DNS server)
//! goes through the input and output hooks and is never filtered, as most CNIs behave. Peers
//! are nftables interval sets (`ipv4_addr`, and `ipv4_addr . inet_proto . inet_service` for
//! port rules; the model makes their entries disjoint, as the kernel requires): a chain's
//! length does not grow with the number of policies, only its sets do.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::model::{Allowed, PodRules, PortRange};
use super::ranges::IpRanges;

/// The map from a pod's address to its ingress chain.
pub const INGRESS_MAP: &str = "ingress-pods";
/// The map from a pod's address to its egress chain.
pub const EGRESS_MAP: &str = "egress-pods";

/// Ingress or egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
    /// The address field holding the peer.
    fn peer(self) -> &'static str {
        match self {
            Direction::Ingress => "ip saddr",
            Direction::Egress => "ip daddr",
        }
    }
    /// What allowed traffic does next: egress allowed still has to pass the receiver's
    /// ingress chain.
    fn pass(self) -> &'static str {
        match self {
            Direction::Ingress => "accept",
            Direction::Egress => "return",
        }
    }
}

fn range_text(out: &mut String, (a, b): (Ipv4Addr, Ipv4Addr)) {
    if a == b {
        let _ = write!(out, "{a}");
    } else {
        let _ = write!(out, "{a}-{b}");
    }
}

fn ports_text(out: &mut String, p: &PortRange) {
    if p.first == p.last {
        let _ = write!(out, "{} . {}", p.protocol.nft(), p.first);
    } else {
        let _ = write!(out, "{} . {}-{}", p.protocol.nft(), p.first, p.last);
    }
}

/// `{ a, b-c, … }` of a peer set.
fn elements(ranges: &IpRanges) -> String {
    let mut s = String::with_capacity(ranges.len() * 16 + 4);
    s.push_str("{ ");
    for (i, r) in ranges.ranges().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        range_text(&mut s, r);
    }
    s.push_str(" }");
    s
}

/// The chain (and its sets) shared by pods with the same verdict in one direction, named
/// after the first of them, and the map elements jumping to it. Nothing when every peer may
/// send everything (isolation without effect).
fn group_chain(s: &mut String, t: &str, d: Direction, a: &Allowed, pods: &[(Ipv4Addr, String)]) {
    let Some((first, who)) = pods.first() else {
        return;
    };
    if a.allows_everything() {
        return;
    }
    let chain = format!("{}-{first}", d.name());
    let _ = writeln!(s, "add chain {t} {chain}");
    if !a.any_port.is_empty() {
        let set = format!("{chain}-any");
        let _ = writeln!(
            s,
            "add set {t} {set} {{ type ipv4_addr ; flags interval ; elements = {} ; }}",
            elements(&a.any_port)
        );
        let _ = writeln!(s, "add rule {t} {chain} {} @{set} {}", d.peer(), d.pass());
    }
    if !a.ports.is_empty() {
        let set = format!("{chain}-ports");
        let mut e = String::from("{ ");
        let mut at_start = true;
        for (ports, peers) in &a.ports {
            for r in peers.ranges() {
                if !at_start {
                    e.push_str(", ");
                }
                at_start = false;
                range_text(&mut e, r);
                e.push_str(" . ");
                ports_text(&mut e, ports);
            }
        }
        e.push_str(" }");
        let _ = writeln!(
            s,
            "add set {t} {set} {{ type ipv4_addr . inet_proto . inet_service ; flags interval ; elements = {e} ; }}"
        );
        let _ = writeln!(
            s,
            "add rule {t} {chain} {} . meta l4proto . th dport @{set} {}",
            d.peer(),
            d.pass()
        );
    }
    let others = if pods.len() > 1 {
        format!(" +{}", pods.len() - 1)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "add rule {t} {chain} counter drop comment \"{who}{others}\""
    );
    let map = match d {
        Direction::Ingress => INGRESS_MAP,
        Direction::Egress => EGRESS_MAP,
    };
    let jumps: Vec<String> = pods
        .iter()
        .map(|(ip, _)| format!("{ip} : jump {chain}"))
        .collect();
    let _ = writeln!(s, "add element {t} {map} {{ {} }}", jumps.join(", "));
}

/// Pods grouped by identical verdict in one direction, in address order of each group's
/// first pod: one chain and one pair of sets per group (pods of one workload share them).
fn groups<'a>(
    pods: &'a BTreeMap<Ipv4Addr, PodRules>,
    pick: impl Fn(&'a PodRules) -> Option<&'a Allowed>,
) -> Vec<(&'a Allowed, Vec<(Ipv4Addr, String)>)> {
    let mut order: Vec<(&Allowed, Vec<(Ipv4Addr, String)>)> = Vec::new();
    let mut index: HashMap<&Allowed, usize> = HashMap::new();
    for (ip, rules) in pods {
        let Some(a) = pick(rules) else { continue };
        let who = format!("{}/{}", rules.namespace, rules.name);
        match index.get(a) {
            Some(&i) => order[i].1.push((*ip, who)),
            None => {
                index.insert(a, order.len());
                order.push((a, vec![(*ip, who)]));
            }
        }
    }
    order
}

/// The whole table `inet <table>` for these pods: one transaction that replaces any table of
/// that name.
pub fn full_script(table: &str, pods: &BTreeMap<Ipv4Addr, PodRules>) -> String {
    let t = format!("inet {table}");
    let mut s = String::new();
    let _ = writeln!(s, "add table {t}");
    let _ = writeln!(s, "delete table {t}");
    let _ = writeln!(s, "add table {t}");
    let _ = writeln!(
        s,
        "add chain {t} forward {{ type filter hook forward priority filter ; policy accept ; }}"
    );
    for map in [INGRESS_MAP, EGRESS_MAP] {
        let _ = writeln!(s, "add map {t} {map} {{ type ipv4_addr : verdict ; }}");
    }
    for (a, members) in groups(pods, |r| r.egress.as_ref()) {
        group_chain(&mut s, &t, Direction::Egress, a, &members);
    }
    for (a, members) in groups(pods, |r| r.ingress.as_ref()) {
        group_chain(&mut s, &t, Direction::Ingress, a, &members);
    }
    let _ = writeln!(
        s,
        "add rule {t} forward ct state established,related accept"
    );
    let _ = writeln!(s, "add rule {t} forward ip saddr vmap @{EGRESS_MAP}");
    let _ = writeln!(s, "add rule {t} forward ip daddr vmap @{INGRESS_MAP}");
    s
}

/// Deletes `inet <table>` if it exists.
pub fn delete_script(table: &str) -> String {
    format!("add table inet {table}\ndelete table inet {table}\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::model::Protocol;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    fn pod(ingress: Option<Allowed>, egress: Option<Allowed>) -> PodRules {
        PodRules {
            namespace: "app".into(),
            name: "web".into(),
            ingress,
            egress,
            policies: BTreeSet::new(),
        }
    }

    #[test]
    fn without_isolated_pods_the_table_has_only_the_forward_chain_and_empty_maps() {
        let script = full_script("tandem-netpol-x", &BTreeMap::new());
        assert_eq!(
            script,
            "add table inet tandem-netpol-x
delete table inet tandem-netpol-x
add table inet tandem-netpol-x
add chain inet tandem-netpol-x forward { type filter hook forward priority filter ; policy accept ; }
add map inet tandem-netpol-x ingress-pods { type ipv4_addr : verdict ; }
add map inet tandem-netpol-x egress-pods { type ipv4_addr : verdict ; }
add rule inet tandem-netpol-x forward ct state established,related accept
add rule inet tandem-netpol-x forward ip saddr vmap @egress-pods
add rule inet tandem-netpol-x forward ip daddr vmap @ingress-pods
"
        );
    }

    #[test]
    fn default_deny_gives_a_chain_that_only_drops() {
        let pods = [(ip("10.0.0.2"), pod(Some(Allowed::default()), None))].into();
        let script = full_script("t", &pods);
        let body: Vec<&str> = script
            .lines()
            .filter(|l| l.contains("ingress-10.0.0.2"))
            .collect();
        assert_eq!(
            body,
            [
                "add chain inet t ingress-10.0.0.2",
                "add rule inet t ingress-10.0.0.2 counter drop comment \"app/web\"",
                "add element inet t ingress-pods { 10.0.0.2 : jump ingress-10.0.0.2 }",
            ]
        );
        assert!(!script.contains("egress-10.0.0.2"));
    }

    #[test]
    fn peers_and_ports_become_interval_sets_matched_before_the_drop() {
        let mut allowed = Allowed {
            any_port: IpRanges::from_ips([ip("10.0.0.4"), ip("10.0.0.5"), ip("10.0.0.9")]),
            ports: BTreeMap::new(),
        };
        allowed.ports.insert(
            PortRange::one(Protocol::Tcp, 8080),
            IpRanges::cidr(crate::rules::Cidr {
                base: ip("172.16.0.0"),
                prefix: 16,
            }),
        );
        allowed.ports.insert(
            PortRange {
                protocol: Protocol::Udp,
                first: 5000,
                last: 5010,
            },
            IpRanges::single(ip("10.0.0.7")),
        );
        let pods = [(ip("10.0.0.2"), pod(Some(allowed.clone()), Some(allowed)))].into();
        let script = full_script("t", &pods);
        let lines: Vec<&str> = script.lines().collect();
        let expected = [
            "add chain inet t egress-10.0.0.2",
            "add set inet t egress-10.0.0.2-any { type ipv4_addr ; flags interval ; elements = { 10.0.0.4-10.0.0.5, 10.0.0.9 } ; }",
            "add rule inet t egress-10.0.0.2 ip daddr @egress-10.0.0.2-any return",
            "add set inet t egress-10.0.0.2-ports { type ipv4_addr . inet_proto . inet_service ; flags interval ; elements = { 172.16.0.0-172.16.255.255 . tcp . 8080, 10.0.0.7 . udp . 5000-5010 } ; }",
            "add rule inet t egress-10.0.0.2 ip daddr . meta l4proto . th dport @egress-10.0.0.2-ports return",
            "add rule inet t egress-10.0.0.2 counter drop comment \"app/web\"",
            "add element inet t egress-pods { 10.0.0.2 : jump egress-10.0.0.2 }",
            "add chain inet t ingress-10.0.0.2",
            "add set inet t ingress-10.0.0.2-any { type ipv4_addr ; flags interval ; elements = { 10.0.0.4-10.0.0.5, 10.0.0.9 } ; }",
            "add rule inet t ingress-10.0.0.2 ip saddr @ingress-10.0.0.2-any accept",
            "add set inet t ingress-10.0.0.2-ports { type ipv4_addr . inet_proto . inet_service ; flags interval ; elements = { 172.16.0.0-172.16.255.255 . tcp . 8080, 10.0.0.7 . udp . 5000-5010 } ; }",
            "add rule inet t ingress-10.0.0.2 ip saddr . meta l4proto . th dport @ingress-10.0.0.2-ports accept",
            "add rule inet t ingress-10.0.0.2 counter drop comment \"app/web\"",
            "add element inet t ingress-pods { 10.0.0.2 : jump ingress-10.0.0.2 }",
        ];
        assert_eq!(&lines[6..6 + expected.len()], expected);
        // The base chain's rules come last, after every chain they jump to exists.
        assert_eq!(
            &lines[lines.len() - 3..],
            [
                "add rule inet t forward ct state established,related accept",
                "add rule inet t forward ip saddr vmap @egress-pods",
                "add rule inet t forward ip daddr vmap @ingress-pods",
            ]
        );
    }

    #[test]
    fn pods_with_the_same_verdict_share_one_chain_named_after_the_first() {
        let deny = Some(Allowed::default());
        let mut other = pod(
            Some(Allowed {
                any_port: IpRanges::single(ip("10.0.0.9")),
                ports: BTreeMap::new(),
            }),
            None,
        );
        other.name = "db".into();
        let pods = [
            (ip("10.0.0.3"), pod(deny.clone(), None)),
            (ip("10.0.0.2"), pod(deny, None)),
            (ip("10.0.0.4"), other),
        ]
        .into();
        let script = full_script("t", &pods);
        let lines: Vec<&str> = script
            .lines()
            .filter(|l| l.contains("ingress-10"))
            .collect();
        assert_eq!(
            lines,
            [
                "add chain inet t ingress-10.0.0.2",
                "add rule inet t ingress-10.0.0.2 counter drop comment \"app/web +1\"",
                "add element inet t ingress-pods { 10.0.0.2 : jump ingress-10.0.0.2, 10.0.0.3 : jump ingress-10.0.0.2 }",
                "add chain inet t ingress-10.0.0.4",
                "add set inet t ingress-10.0.0.4-any { type ipv4_addr ; flags interval ; elements = { 10.0.0.9 } ; }",
                "add rule inet t ingress-10.0.0.4 ip saddr @ingress-10.0.0.4-any accept",
                "add rule inet t ingress-10.0.0.4 counter drop comment \"app/db\"",
                "add element inet t ingress-pods { 10.0.0.4 : jump ingress-10.0.0.4 }",
            ]
        );
    }

    #[test]
    fn a_direction_that_allows_everything_gets_no_chain() {
        let all = Allowed {
            any_port: IpRanges::all(),
            ports: BTreeMap::new(),
        };
        let pods = [(ip("10.0.0.2"), pod(Some(all), Some(Allowed::default())))].into();
        let script = full_script("t", &pods);
        assert!(!script.contains("ingress-10.0.0.2"));
        assert!(
            script.contains("add element inet t egress-pods { 10.0.0.2 : jump egress-10.0.0.2 }")
        );
    }

    #[test]
    fn delete_script_tolerates_a_missing_table() {
        assert_eq!(
            delete_script("t"),
            "add table inet t\ndelete table inet t\n"
        );
    }
}
