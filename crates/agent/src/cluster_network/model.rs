//! What the pod network needs to know of each Node, read without I/O: its pod CIDR, the address
//! its pods' traffic is sent to and, for VXLAN, its device's MAC (flannel's subnet lease, taken
//! from the Node object as flannel's `kube` subnet manager does).

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;

use super::{BACKEND_ANNOTATION, Backend, PUBLIC_IP_ANNOTATION, VTEP_MAC_ANNOTATION};
use crate::podnet::Net;

/// A MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Parses `aa:bb:cc:dd:ee:ff` (either case); `None` for anything else.
    pub fn parse(s: &str) -> Option<Mac> {
        let mut out = [0u8; 6];
        let mut parts = s.trim().split(':');
        for byte in &mut out {
            let part = parts.next()?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            *byte = u8::from_str_radix(part, 16).ok()?;
        }
        parts.next().is_none().then_some(Mac(out))
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// One Node as the pod network sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    /// `spec.podCIDR`, parsed; `None` until the controller manager assigns one (or unparsable).
    pub pod_cidr: Option<Net>,
    /// Where its pods' traffic goes: the public-ip annotation, else the first IPv4 InternalIP.
    pub address: Option<Ipv4Addr>,
    /// Its VXLAN device's MAC, when it runs one.
    pub vtep_mac: Option<Mac>,
    /// The backend it announces, when it runs the pod network.
    pub backend: Option<Backend>,
}

impl Peer {
    /// Reads a Node. Bad annotations or fields read as absent (the Node is then skipped by
    /// the rules, with the reason logged), never as an error.
    pub fn from_node(node: &Node) -> Option<Peer> {
        let name = node.metadata.name.clone()?;
        let annotations = node.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let pod_cidr = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(Net::parse);
        let internal_ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|addrs| {
                addrs
                    .iter()
                    .filter(|a| a.type_ == "InternalIP")
                    .find_map(|a| a.address.parse::<Ipv4Addr>().ok())
            });
        let address = annotation(PUBLIC_IP_ANNOTATION)
            .and_then(|s| s.trim().parse::<Ipv4Addr>().ok())
            .or(internal_ip);
        Some(Peer {
            name,
            pod_cidr,
            address,
            vtep_mac: annotation(VTEP_MAC_ANNOTATION).and_then(Mac::parse),
            backend: annotation(BACKEND_ANNOTATION).and_then(Backend::parse),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, cidr: Option<&str>, ip: Option<&str>, ann: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                annotations: Some(
                    ann.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(str::to_string),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: ip.map(|ip| {
                    vec![
                        NodeAddress {
                            type_: "Hostname".to_string(),
                            address: name.to_string(),
                        },
                        NodeAddress {
                            type_: "InternalIP".to_string(),
                            address: ip.to_string(),
                        },
                    ]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn mac_parses_and_prints_both_ways() {
        let table = [
            ("0a:1B:2c:3d:4e:5f", Some("0a:1b:2c:3d:4e:5f")),
            ("00:00:00:00:00:00", Some("00:00:00:00:00:00")),
            ("0a:1b:2c:3d:4e", None),
            ("0a:1b:2c:3d:4e:5f:60", None),
            ("0a:1b:2c:3d:4e:5", None),
            ("zz:1b:2c:3d:4e:5f", None),
            ("", None),
            ("+a:1b:2c:3d:4e:5f", None),
        ];
        for (input, want) in table {
            assert_eq!(
                Mac::parse(input).map(|m| m.to_string()).as_deref(),
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn node_reads_into_a_peer_with_the_public_ip_before_the_internal_ip() {
        let n = node(
            "a",
            Some("10.244.1.0/24"),
            Some("192.168.50.2"),
            &[
                (PUBLIC_IP_ANNOTATION, "192.168.50.9"),
                (VTEP_MAC_ANNOTATION, "02:00:00:00:00:01"),
                (BACKEND_ANNOTATION, "vxlan"),
            ],
        );
        let p = Peer::from_node(&n).expect("named");
        assert_eq!(p.pod_cidr, Net::parse("10.244.1.0/24"));
        assert_eq!(p.address, Some(Ipv4Addr::new(192, 168, 50, 9)));
        assert_eq!(p.vtep_mac, Mac::parse("02:00:00:00:00:01"));
        assert_eq!(p.backend, Some(Backend::Vxlan));
    }

    /// Pod CIDR, InternalIP, annotations, and the address expected.
    type Case<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
        Option<Ipv4Addr>,
    );

    #[test]
    fn bad_fields_read_as_absent() {
        let table: [Case<'_>; 4] = [
            (
                Some("nonsense"),
                Some("192.168.50.2"),
                &[],
                Some(Ipv4Addr::new(192, 168, 50, 2)),
            ),
            (None, None, &[(PUBLIC_IP_ANNOTATION, "not-an-ip")], None),
            (None, Some("fd00::1"), &[], None),
            (
                None,
                Some("192.168.50.2"),
                &[(PUBLIC_IP_ANNOTATION, "x")],
                Some(Ipv4Addr::new(192, 168, 50, 2)),
            ),
        ];
        for (cidr, ip, ann, want) in table {
            let mut ann = ann.to_vec();
            ann.push((VTEP_MAC_ANNOTATION, "garbage"));
            ann.push((BACKEND_ANNOTATION, "udp"));
            let p = Peer::from_node(&node("a", cidr, ip, &ann)).expect("named");
            assert_eq!(p.address, want);
            assert_eq!(p.vtep_mac, None);
            assert_eq!(p.backend, None);
            if cidr == Some("nonsense") {
                assert_eq!(p.pod_cidr, None);
            }
        }
    }
}
