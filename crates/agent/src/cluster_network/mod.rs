//! The pod network between hosts: every host routes the other nodes' pod CIDRs, so a pod on one
//! host reaches a pod on another by its address, as flannel does for upstream clusters.
//!
//! Shape (the service proxy's): [`controller`] watches Nodes and feeds [`model`], which reads
//! each Node into a [`model::Peer`] (pod CIDR, tunnel address, VTEP MAC) without I/O;
//! [`rules`] turns the peers into what this host's kernel must hold (routes, VXLAN forwarding
//! and neighbour entries) and the difference from what is there; [`netlink`] is the one thin
//! file that talks to the kernel (rtnetlink).
//!
//! Backends, as flannel's (`--pod-network-backend`):
//! - `host-gw`: a route per peer's pod CIDR via the peer's address; every peer must be on this
//!   host's link (flannel's `host-gw`).
//! - `vxlan`: a kernel VXLAN device ([`device_name`], VNI [`DEFAULT_VNI`], UDP
//!   [`DEFAULT_PORT`], MTU of the underlay minus [`VXLAN_OVERHEAD`]); per peer a route
//!   `podCIDR via <podCIDR network address> dev tandem.<vni> onlink`, a permanent neighbour entry
//!   for that address with the peer's VTEP MAC, and a forwarding-database entry sending that MAC
//!   to the peer's address (flannel's `vxlan` backend, learning off).
//! - `auto` (default): direct routes to peers on this host's link, VXLAN to the others (flannel's
//!   `vxlan` with `DirectRouting`).
//!
//! VNI 4096 and port 4789 are what the Windows overlay network (win-overlay, flannel on Windows)
//! requires, so Windows hosts could join the same overlay; flannel's Linux default is VNI 1 on
//! the kernel's port 8472. Both are flags.
//!
//! What a host publishes on its own Node for the others (flannel's
//! `flannel.alpha.coreos.com/{backend-type,backend-data,public-ip}`): [`BACKEND_ANNOTATION`],
//! [`VTEP_MAC_ANNOTATION`], [`PUBLIC_IP_ANNOTATION`]. The tunnel address of a Node is its
//! public-ip annotation when present (an emulated node's InternalIP is its pods' bridge), else
//! its InternalIP.
//!
//! Peers on this same host (their tunnel address is one of this host's addresses) are left out:
//! their bridges are routed here already. IPv4 only.
//!
//! Cleanup: every route tandem adds carries the route protocol [`ROUTE_PROTOCOL`], so stopping
//! (or the next start after a killed run) deletes exactly those; the VXLAN device, and with it
//! its forwarding and neighbour entries, is deleted at stop.

pub mod controller;
pub mod model;
pub mod netlink;
pub mod rules;

pub use tandem_core::{
    POD_NETWORK_BACKEND_ANNOTATION as BACKEND_ANNOTATION,
    POD_NETWORK_PUBLIC_IP_ANNOTATION as PUBLIC_IP_ANNOTATION,
    POD_NETWORK_VTEP_MAC_ANNOTATION as VTEP_MAC_ANNOTATION,
};

/// The VXLAN network identifier by default (the Windows overlay's).
pub const DEFAULT_VNI: u32 = 4096;
/// The VXLAN UDP port by default (IANA's, the Windows overlay's).
pub const DEFAULT_PORT: u16 = 4789;
/// Bytes VXLAN adds to each packet over IPv4: outer IP 20, UDP 8, VXLAN 8, inner Ethernet 14.
pub const VXLAN_OVERHEAD: u32 = 50;
/// The `rtm_protocol` of every route tandem adds (`ip route show proto 84`), so they can be
/// found and removed after a crash.
pub const ROUTE_PROTOCOL: u8 = 84;

/// How pods' traffic reaches other hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// Direct routes via peers on the same link.
    HostGw,
    /// A VXLAN tunnel to every peer.
    Vxlan,
    /// Direct routes to peers on the same link, VXLAN to the others.
    Auto,
}

impl Backend {
    /// `host-gw`, `vxlan` or `auto`.
    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "host-gw" => Some(Backend::HostGw),
            "vxlan" => Some(Backend::Vxlan),
            "auto" => Some(Backend::Auto),
            _ => None,
        }
    }

    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::HostGw => "host-gw",
            Backend::Vxlan => "vxlan",
            Backend::Auto => "auto",
        }
    }

    /// Whether the host needs a VXLAN device.
    pub fn uses_vxlan(self) -> bool {
        !matches!(self, Backend::HostGw)
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of the VXLAN device for `vni` (`tandem.4096`, as flannel's `flannel.1`); one per
/// host (network namespace).
pub fn device_name(vni: u32) -> String {
    format!("tandem.{vni}")
}
