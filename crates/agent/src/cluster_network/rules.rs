//! What this host's kernel must hold for the other hosts' pods, and the difference from what it
//! holds: pure functions of the peers ([`super::model::Peer`]) and this host
//! ([`LocalHost`]), tested as tables. This is flannel's `handleSubnetEvents` for its `host-gw`
//! and `vxlan` backends (`DirectRouting` for `auto`), as data.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use super::Backend;
use super::model::{Mac, Peer};
use crate::podnet::Net;

/// This host, as the rules need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalHost {
    /// This node's name (its own Node is not a peer).
    pub node_name: String,
    /// This node's pod CIDR, when known: a peer claiming an overlapping range is refused.
    pub pod_cidr: Option<Net>,
    /// The underlay: this host's tunnel address and its link's prefix (peers inside it are on
    /// the same link).
    pub underlay: Net,
    /// The underlay address itself (`underlay.addr` is the network's).
    pub address: Ipv4Addr,
    /// Every IPv4 address of this host: a peer reached at one of them runs on this host.
    pub addresses: BTreeSet<Ipv4Addr>,
}

/// How a route leaves this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Via {
    /// Through the underlay interface to the peer's address.
    Direct(Ipv4Addr),
    /// Through the VXLAN device, to the peer's pod CIDR network address (`onlink`), which the
    /// neighbour and forwarding entries map to the peer.
    Vxlan(Ipv4Addr),
}

/// A route to a peer's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub dest: Net,
    pub via: Via,
}

/// A permanent neighbour entry on the VXLAN device: the peer's gateway address is its VTEP MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Neighbour {
    pub ip: Ipv4Addr,
    pub mac: Mac,
}

/// A forwarding-database entry of the VXLAN device: frames to `mac` go to `remote`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fdb {
    pub mac: Mac,
    pub remote: Ipv4Addr,
}

/// Why a Node gets no route here.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    NoPodCidr,
    NoAddress,
    /// It runs on this host: its pods are routed through its bridge already.
    SameHost,
    /// Its pod CIDR overlaps this node's, or an earlier peer's.
    Overlap(String),
    /// `host-gw` and the peer is not on this host's link.
    NotOnLink,
    /// VXLAN is needed and the peer has published no VTEP MAC (not running the pod network,
    /// or `host-gw`).
    NoVtep,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NoPodCidr => f.write_str("no pod CIDR yet"),
            Skip::NoAddress => f.write_str("no IPv4 address to reach it at"),
            Skip::SameHost => f.write_str("runs on this host"),
            Skip::Overlap(other) => write!(f, "its pod CIDR overlaps {other}'s"),
            Skip::NotOnLink => f.write_str(
                "not on this host's link: host-gw needs every host on one link (use vxlan or auto)",
            ),
            Skip::NoVtep => f.write_str("it publishes no VXLAN device (yet)"),
        }
    }
}

/// Everything this host must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    pub routes: BTreeSet<Route>,
    pub neighbours: BTreeSet<Neighbour>,
    pub fdb: BTreeSet<Fdb>,
    /// Nodes left out, with the reason (in name order).
    pub skipped: Vec<(String, Skip)>,
}

fn overlaps(a: Net, b: Net) -> bool {
    a.contains(b.addr) || b.contains(a.addr)
}

/// What `local` must hold for `peers` (in any order; ties between overlapping peers go to the
/// first by name, so the answer does not depend on the order of a watch).
pub fn desired(local: &LocalHost, backend: Backend, peers: &[Peer]) -> Desired {
    let mut sorted: Vec<&Peer> = peers.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Desired::default();
    let mut taken: Vec<(Net, &str)> = Vec::new();
    if let Some(own) = local.pod_cidr {
        taken.push((own, local.node_name.as_str()));
    }
    for peer in sorted {
        if peer.name == local.node_name {
            continue;
        }
        let skip = |out: &mut Desired, why: Skip| out.skipped.push((peer.name.clone(), why));
        let Some(cidr) = peer.pod_cidr else {
            skip(&mut out, Skip::NoPodCidr);
            continue;
        };
        let Some(address) = peer.address else {
            skip(&mut out, Skip::NoAddress);
            continue;
        };
        if local.addresses.contains(&address) || address == local.address {
            skip(&mut out, Skip::SameHost);
            continue;
        }
        if let Some((_, owner)) = taken.iter().find(|(net, _)| overlaps(*net, cidr)) {
            skip(&mut out, Skip::Overlap((*owner).to_string()));
            continue;
        }
        let on_link = local.underlay.contains(address);
        let direct = match backend {
            Backend::HostGw if on_link => true,
            Backend::HostGw => {
                skip(&mut out, Skip::NotOnLink);
                continue;
            }
            Backend::Auto => on_link,
            Backend::Vxlan => false,
        };
        if direct {
            out.routes.insert(Route {
                dest: cidr,
                via: Via::Direct(address),
            });
        } else {
            let Some(mac) = peer.vtep_mac else {
                skip(&mut out, Skip::NoVtep);
                continue;
            };
            out.routes.insert(Route {
                dest: cidr,
                via: Via::Vxlan(cidr.addr),
            });
            out.neighbours.insert(Neighbour { ip: cidr.addr, mac });
            out.fdb.insert(Fdb {
                mac,
                remote: address,
            });
        }
        taken.push((cidr, peer.name.as_str()));
    }
    out
}

/// What to change to go from `applied` to `want`, in the order to apply it: deletions of
/// forwarding state first (so a moved MAC or address is never held twice), then additions.
/// Routes whose destination is only re-pointed are replaced in place, not deleted first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub del_routes: Vec<Route>,
    pub del_neighbours: Vec<Neighbour>,
    pub del_fdb: Vec<Fdb>,
    pub add_fdb: Vec<Fdb>,
    pub add_neighbours: Vec<Neighbour>,
    /// Added with replace: an existing route to the same destination is re-pointed.
    pub add_routes: Vec<Route>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.del_routes.is_empty()
            && self.del_neighbours.is_empty()
            && self.del_fdb.is_empty()
            && self.add_fdb.is_empty()
            && self.add_neighbours.is_empty()
            && self.add_routes.is_empty()
    }
}

/// The difference between what was applied and what is wanted.
pub fn diff(applied: &Desired, want: &Desired) -> Changes {
    let add_routes: Vec<Route> = want.routes.difference(&applied.routes).copied().collect();
    let readded: BTreeSet<Net> = add_routes.iter().map(|r| r.dest).collect();
    Changes {
        del_routes: applied
            .routes
            .difference(&want.routes)
            .filter(|r| !readded.contains(&r.dest))
            .copied()
            .collect(),
        del_neighbours: applied
            .neighbours
            .difference(&want.neighbours)
            .filter(|n| !want.neighbours.iter().any(|w| w.ip == n.ip))
            .copied()
            .collect(),
        del_fdb: applied.fdb.difference(&want.fdb).copied().collect(),
        add_fdb: want.fdb.difference(&applied.fdb).copied().collect(),
        add_neighbours: want
            .neighbours
            .difference(&applied.neighbours)
            .copied()
            .collect(),
        add_routes,
    }
}

/// What to do when what the kernel holds is not known for sure (after a failed request, and
/// periodically, since a link going down takes its routes): everything wanted is written
/// again (additions replace), and everything `applied` held that is not wanted is deleted
/// (deleting what is already gone is not an error).
pub fn resync(applied: &Desired, want: &Desired) -> Changes {
    let mut changes = diff(applied, want);
    changes.add_fdb = want.fdb.iter().copied().collect();
    changes.add_neighbours = want.neighbours.iter().copied().collect();
    changes.add_routes = want.routes.iter().copied().collect();
    let dests: BTreeSet<Net> = want.routes.iter().map(|r| r.dest).collect();
    changes.del_routes.retain(|r| !dests.contains(&r.dest));
    changes
}

/// Everything either holds (what may be installed after a request failed half-way).
pub fn union(a: &Desired, b: &Desired) -> Desired {
    Desired {
        routes: a.routes.union(&b.routes).copied().collect(),
        neighbours: a.neighbours.union(&b.neighbours).copied().collect(),
        fdb: a.fdb.union(&b.fdb).copied().collect(),
        skipped: b.skipped.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Net {
        Net::parse(s).expect("test CIDR")
    }

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().expect("test address")
    }

    fn mac(last: u8) -> Mac {
        Mac([2, 0, 0, 0, 0, last])
    }

    fn local() -> LocalHost {
        LocalHost {
            node_name: "a".to_string(),
            pod_cidr: Some(net("10.244.1.0/24")),
            underlay: net("192.168.50.0/24"),
            address: ip("192.168.50.2"),
            addresses: [ip("192.168.50.2"), ip("127.0.0.1"), ip("10.244.1.1")]
                .into_iter()
                .collect(),
        }
    }

    fn peer(name: &str, cidr: Option<&str>, addr: Option<&str>, vtep: Option<u8>) -> Peer {
        Peer {
            name: name.to_string(),
            pod_cidr: cidr.map(net),
            address: addr.map(ip),
            vtep_mac: vtep.map(mac),
            backend: vtep.map(|_| Backend::Vxlan),
        }
    }

    /// A backend, the routes it makes, how many peers it tunnels to, the peers it skips.
    type Case = (Backend, Vec<Route>, usize, Vec<(&'static str, Skip)>);

    /// One peer on the link, one beyond it, under every backend.
    #[test]
    fn backend_decides_direct_routes_or_vxlan_per_peer() {
        let peers = [
            peer("b", Some("10.244.2.0/24"), Some("192.168.50.3"), Some(3)),
            peer("c", Some("10.244.3.0/24"), Some("172.16.0.4"), Some(4)),
        ];
        let direct_b = Route {
            dest: net("10.244.2.0/24"),
            via: Via::Direct(ip("192.168.50.3")),
        };
        let tunnel_b = Route {
            dest: net("10.244.2.0/24"),
            via: Via::Vxlan(ip("10.244.2.0")),
        };
        let tunnel_c = Route {
            dest: net("10.244.3.0/24"),
            via: Via::Vxlan(ip("10.244.3.0")),
        };
        let table: [Case; 3] = [
            (
                Backend::HostGw,
                vec![direct_b],
                0,
                vec![("c", Skip::NotOnLink)],
            ),
            (Backend::Vxlan, vec![tunnel_b, tunnel_c], 2, vec![]),
            (Backend::Auto, vec![direct_b, tunnel_c], 1, vec![]),
        ];
        for (backend, routes, tunnels, skipped) in table {
            let d = desired(&local(), backend, &peers);
            assert_eq!(
                d.routes.into_iter().collect::<Vec<_>>(),
                routes,
                "{backend}"
            );
            assert_eq!(d.fdb.len(), tunnels, "{backend}");
            assert_eq!(d.neighbours.len(), tunnels, "{backend}");
            let skipped: Vec<(String, Skip)> = skipped
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect();
            assert_eq!(d.skipped, skipped, "{backend}");
        }
    }

    #[test]
    fn vxlan_peer_gets_route_neighbour_and_forwarding_entry() {
        let d = desired(
            &local(),
            Backend::Vxlan,
            &[peer(
                "c",
                Some("10.244.3.0/24"),
                Some("172.16.0.4"),
                Some(4),
            )],
        );
        assert_eq!(
            d.neighbours.into_iter().collect::<Vec<_>>(),
            vec![Neighbour {
                ip: ip("10.244.3.0"),
                mac: mac(4)
            }]
        );
        assert_eq!(
            d.fdb.into_iter().collect::<Vec<_>>(),
            vec![Fdb {
                mac: mac(4),
                remote: ip("172.16.0.4")
            }]
        );
    }

    #[test]
    fn peers_that_cannot_be_routed_are_skipped_with_a_reason() {
        let table = [
            (
                peer("a", Some("10.244.9.0/24"), Some("1.2.3.4"), Some(1)),
                None,
            ),
            (
                peer("b", None, Some("192.168.50.3"), Some(3)),
                Some(Skip::NoPodCidr),
            ),
            (
                peer("b", Some("10.244.2.0/24"), None, Some(3)),
                Some(Skip::NoAddress),
            ),
            (
                peer("b", Some("10.244.2.0/24"), Some("192.168.50.2"), Some(3)),
                Some(Skip::SameHost),
            ),
            (
                peer("b", Some("10.244.2.0/24"), Some("10.244.1.1"), Some(3)),
                Some(Skip::SameHost),
            ),
            (
                peer("b", Some("10.244.1.128/25"), Some("192.168.50.3"), Some(3)),
                Some(Skip::Overlap("a".to_string())),
            ),
            (
                peer("b", Some("10.0.0.0/8"), Some("192.168.50.3"), Some(3)),
                Some(Skip::Overlap("a".to_string())),
            ),
            (
                peer("b", Some("10.244.2.0/24"), Some("172.16.0.3"), None),
                Some(Skip::NoVtep),
            ),
        ];
        for (p, want) in table {
            let d = desired(&local(), Backend::Auto, std::slice::from_ref(&p));
            assert!(d.routes.is_empty(), "{p:?}");
            assert!(d.fdb.is_empty() && d.neighbours.is_empty(), "{p:?}");
            let want: Vec<(String, Skip)> = want.into_iter().map(|s| (p.name.clone(), s)).collect();
            assert_eq!(d.skipped, want, "{p:?}");
        }
    }

    #[test]
    fn overlapping_peers_resolve_by_name_whatever_the_order() {
        let x = peer("x", Some("10.244.5.0/24"), Some("192.168.50.5"), None);
        let y = peer("y", Some("10.244.5.0/24"), Some("192.168.50.6"), None);
        for peers in [[x.clone(), y.clone()], [y.clone(), x.clone()]] {
            let d = desired(&local(), Backend::Auto, &peers);
            assert_eq!(
                d.routes.into_iter().collect::<Vec<_>>(),
                vec![Route {
                    dest: net("10.244.5.0/24"),
                    via: Via::Direct(ip("192.168.50.5"))
                }]
            );
            assert_eq!(
                d.skipped,
                vec![("y".to_string(), Skip::Overlap("x".into()))]
            );
        }
    }

    #[test]
    fn diff_adds_removes_and_repoints() {
        let b = peer("b", Some("10.244.2.0/24"), Some("172.16.0.3"), Some(3));
        let c = peer("c", Some("10.244.3.0/24"), Some("172.16.0.4"), Some(4));
        let empty = Desired::default();
        let both = desired(&local(), Backend::Auto, &[b.clone(), c.clone()]);
        // Join: everything added, nothing deleted.
        let join = diff(&empty, &both);
        assert_eq!(join.add_routes.len(), 2);
        assert_eq!(join.add_fdb.len(), 2);
        assert_eq!(join.add_neighbours.len(), 2);
        assert!(join.del_routes.is_empty() && join.del_fdb.is_empty());
        // No change: nothing to do.
        assert!(diff(&both, &both).is_empty());
        // Leave: c's three entries go.
        let only_b = desired(&local(), Backend::Auto, std::slice::from_ref(&b));
        let leave = diff(&both, &only_b);
        assert_eq!(leave.del_routes.len(), 1);
        assert_eq!(
            leave.del_fdb,
            vec![Fdb {
                mac: mac(4),
                remote: ip("172.16.0.4")
            }]
        );
        assert_eq!(leave.del_neighbours.len(), 1);
        assert!(leave.add_routes.is_empty());
        // b moves onto the link: its route is replaced in place, not deleted first; its
        // tunnel entries go.
        let moved = peer("b", Some("10.244.2.0/24"), Some("192.168.50.3"), Some(3));
        let now = desired(&local(), Backend::Auto, &[moved, c.clone()]);
        let change = diff(&both, &now);
        assert!(change.del_routes.is_empty());
        assert_eq!(
            change.add_routes,
            vec![Route {
                dest: net("10.244.2.0/24"),
                via: Via::Direct(ip("192.168.50.3"))
            }]
        );
        assert_eq!(change.del_fdb.len(), 1);
        assert_eq!(change.del_neighbours.len(), 1);
        // c's host changes its address: the forwarding entry is swapped, the neighbour kept.
        let c2 = peer("c", Some("10.244.3.0/24"), Some("172.16.0.9"), Some(4));
        let after = desired(&local(), Backend::Auto, &[b, c2]);
        let change = diff(&both, &after);
        assert_eq!(
            change.del_fdb,
            vec![Fdb {
                mac: mac(4),
                remote: ip("172.16.0.4")
            }]
        );
        assert_eq!(
            change.add_fdb,
            vec![Fdb {
                mac: mac(4),
                remote: ip("172.16.0.9")
            }]
        );
        assert!(change.add_routes.is_empty() && change.del_routes.is_empty());
        assert!(change.add_neighbours.is_empty() && change.del_neighbours.is_empty());
    }

    #[test]
    fn resync_rewrites_everything_wanted_and_deletes_what_may_be_left() {
        let b = peer("b", Some("10.244.2.0/24"), Some("172.16.0.3"), Some(3));
        let c = peer("c", Some("10.244.3.0/24"), Some("172.16.0.4"), Some(4));
        let both = desired(&local(), Backend::Auto, &[b.clone(), c]);
        let only_b = desired(&local(), Backend::Auto, std::slice::from_ref(&b));
        // Nothing changed: everything is written again, nothing deleted.
        let same = resync(&both, &both);
        assert_eq!(same.add_routes.len(), 2);
        assert_eq!(same.add_fdb.len(), 2);
        assert!(same.del_routes.is_empty() && same.del_fdb.is_empty());
        // After a failure half-way through adding c, c's entries are deleted on the next round.
        let maybe = union(&only_b, &both);
        let next = resync(&maybe, &only_b);
        assert_eq!(next.del_routes.len(), 1);
        assert_eq!(next.del_fdb.len(), 1);
        assert_eq!(next.add_routes.len(), 1);
    }
}
