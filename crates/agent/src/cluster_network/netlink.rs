//! The one file of the pod network between hosts that talks to the kernel: the VXLAN device,
//! routes, neighbour and forwarding entries, through rtnetlink (what `ip link add … type
//! vxlan`, `ip route replace`, `ip neigh replace` and `bridge fdb replace` do). It applies
//! [`super::rules::Changes`] and reads back only what it needs to clean up.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol};
use rtnetlink::{Handle, LinkUnspec, LinkVxlan, RouteMessageBuilder};

use super::ROUTE_PROTOCOL;
use super::model::Mac;
use super::rules::{Changes, Fdb, Neighbour, Route, Via};
use crate::podnet::Net;
use crate::podnet::links::{LinkError, delete, index_of};

const ENOENT: i32 = -2;
const ESRCH: i32 = -3;
const ENODEV: i32 = -19;

fn failed(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> LinkError {
    let what = what.into();
    move |source| LinkError { what, source }
}

fn gone(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if [ENOENT, ESRCH, ENODEV].contains(&m.raw_code()))
}

/// Opens a netlink connection in this thread's network namespace (its task runs on tokio).
pub fn connect() -> Result<Handle, std::io::Error> {
    let (conn, handle, _) = rtnetlink::new_connection()?;
    tokio::spawn(conn);
    Ok(handle)
}

/// The interface that holds this host's tunnel address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    pub index: u32,
    pub name: String,
    /// The address and its prefix (the link's network).
    pub net: Net,
    pub address: Ipv4Addr,
    pub mtu: u32,
    /// Every IPv4 address on this host.
    pub all_addresses: BTreeSet<Ipv4Addr>,
}

/// Finds the interface holding `address`, its prefix and MTU, and every IPv4 address here.
pub async fn underlay(handle: &Handle, address: Ipv4Addr) -> Result<Option<Underlay>, LinkError> {
    let addresses: Vec<_> = handle
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot list addresses"))?;
    let mut all = BTreeSet::new();
    let mut found = None;
    for a in &addresses {
        for attr in &a.attributes {
            if let AddressAttribute::Address(IpAddr::V4(ip)) = attr {
                all.insert(*ip);
                if *ip == address {
                    found = Some((a.header.index, a.header.prefix_len));
                }
            }
        }
    }
    let Some((index, prefix)) = found else {
        return Ok(None);
    };
    let links: Vec<LinkMessage> = handle
        .link()
        .get()
        .match_index(index)
        .execute()
        .try_collect()
        .await
        .map_err(failed(format!("cannot read link {index}")))?;
    let attrs = links
        .first()
        .map(|l| l.attributes.as_slice())
        .unwrap_or(&[]);
    let mtu = attrs
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        })
        .unwrap_or(1500);
    let name = attrs
        .iter()
        .find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let net = Net::parse(&format!("{address}/{prefix}")).unwrap_or(Net {
        addr: address,
        prefix: 32,
    });
    Ok(Some(Underlay {
        index,
        name,
        net,
        address,
        mtu,
        all_addresses: all,
    }))
}

/// What the VXLAN device is made with.
#[derive(Debug, Clone)]
pub struct VxlanSpec {
    pub name: String,
    pub vni: u32,
    pub port: u16,
    pub underlay: u32,
    pub local: Ipv4Addr,
    pub mtu: u32,
    /// The address given to the device (this node's pod CIDR network address, /32), so the
    /// host's own traffic to remote pods leaves with an address of the pod range, as flannel.
    pub address: Option<Ipv4Addr>,
}

/// Creates the VXLAN device afresh (one of an earlier run is deleted first, and with it its
/// entries), up, learning off; returns its index and MAC.
pub async fn create_vxlan(handle: &Handle, spec: &VxlanSpec) -> Result<(u32, Mac), LinkError> {
    if let Some(old) = index_of(handle, &spec.name).await? {
        delete(handle, old).await?;
    }
    let msg = LinkVxlan::new(&spec.name, spec.vni)
        .dev(spec.underlay)
        .port(spec.port)
        .local(spec.local)
        .learning(false)
        .mtu(spec.mtu)
        .up()
        .build();
    handle
        .link()
        .add(msg)
        .execute()
        .await
        .map_err(failed(format!("cannot create VXLAN device {}", spec.name)))?;
    let links: Vec<LinkMessage> = handle
        .link()
        .get()
        .match_name(spec.name.clone())
        .execute()
        .try_collect()
        .await
        .map_err(failed(format!("cannot read VXLAN device {}", spec.name)))?;
    let link = links.first().ok_or_else(|| LinkError {
        what: format!("VXLAN device {} vanished after it was created", spec.name),
        source: rtnetlink::Error::RequestFailed,
    })?;
    let index = link.header.index;
    let mac = link
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(bytes) => <[u8; 6]>::try_from(bytes.as_slice()).ok(),
            _ => None,
        })
        .map(Mac)
        .ok_or_else(|| LinkError {
            what: format!("VXLAN device {} has no MAC address", spec.name),
            source: rtnetlink::Error::RequestFailed,
        })?;
    if let Some(addr) = spec.address {
        handle
            .address()
            .add(index, IpAddr::V4(addr), 32)
            .replace()
            .execute()
            .await
            .map_err(failed(format!("cannot address VXLAN device {}", spec.name)))?;
    }
    // `up()` in the creating request is not honoured by every kernel; set it again.
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(failed(format!(
            "cannot bring up VXLAN device {}",
            spec.name
        )))?;
    Ok((index, mac))
}

/// Deletes the VXLAN device `name` if it is there (its entries and routes go with it).
pub async fn delete_vxlan(handle: &Handle, name: &str) -> Result<(), LinkError> {
    if let Some(index) = index_of(handle, name).await? {
        delete(handle, index).await?;
    }
    Ok(())
}

fn route_message(route: &Route, underlay: u32, vxlan: Option<u32>) -> Option<RouteMessage> {
    let builder = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(route.dest.addr, route.dest.prefix)
        .protocol(RouteProtocol::from(ROUTE_PROTOCOL));
    Some(match route.via {
        Via::Direct(gw) => builder.gateway(gw).output_interface(underlay).build(),
        Via::Vxlan(gw) => builder
            .gateway(gw)
            .output_interface(vxlan?)
            .onlink()
            .build(),
    })
}

/// Deletes every route with tandem's protocol (of this or an earlier run); returns how many.
pub async fn flush_routes(handle: &Handle) -> Result<usize, LinkError> {
    let routes: Vec<RouteMessage> = handle
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot list routes"))?;
    let mut n = 0;
    for r in routes {
        if u8::from(r.header.protocol) != ROUTE_PROTOCOL {
            continue;
        }
        match handle.route().del(r).execute().await {
            Ok(()) => n += 1,
            Err(e) if gone(&e) => {}
            Err(e) => return Err(failed("cannot delete a route of tandem's")(e)),
        }
    }
    Ok(n)
}

/// The destinations of the routes with tandem's protocol now in the main table.
pub async fn routed(handle: &Handle) -> Result<BTreeSet<Net>, LinkError> {
    let routes: Vec<RouteMessage> = handle
        .route()
        .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot list routes"))?;
    Ok(routes
        .iter()
        .filter(|r| u8::from(r.header.protocol) == ROUTE_PROTOCOL)
        .filter_map(|r| {
            r.attributes.iter().find_map(|a| match a {
                RouteAttribute::Destination(RouteAddress::Inet(ip)) => Some(Net {
                    addr: *ip,
                    prefix: r.header.destination_prefix_length,
                }),
                _ => None,
            })
        })
        .collect())
}

fn neighbour_message(vxlan: u32, ip: Ipv4Addr) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Inet;
    m.header.ifindex = vxlan;
    m.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
    m
}

fn fdb_message(vxlan: u32, fdb: &Fdb) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Bridge;
    m.header.ifindex = vxlan;
    m.header.flags = NeighbourFlags::Own;
    m.header.state = NeighbourState::Permanent;
    m.attributes
        .push(NeighbourAttribute::LinkLayerAddress(fdb.mac.0.to_vec()));
    m.attributes
        .push(NeighbourAttribute::Destination(NeighbourAddress::Inet(
            fdb.remote,
        )));
    m
}

/// Applies `changes` in order. Entries already gone count as deleted; additions replace. The
/// first failure stops and is returned (the caller resynchronises).
pub async fn apply(
    handle: &Handle,
    underlay: u32,
    vxlan: Option<u32>,
    changes: &Changes,
) -> Result<(), LinkError> {
    for r in &changes.del_routes {
        let Some(msg) = route_message(r, underlay, vxlan) else {
            continue;
        };
        match handle.route().del(msg).execute().await {
            Ok(()) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(failed(format!("cannot delete the route to {}", r.dest))(e)),
        }
    }
    if let Some(vx) = vxlan {
        for n in &changes.del_neighbours {
            match handle
                .neighbours()
                .del(neighbour_message(vx, n.ip))
                .execute()
                .await
            {
                Ok(()) => {}
                Err(e) if gone(&e) => {}
                Err(e) => return Err(failed(format!("cannot delete neighbour {}", n.ip))(e)),
            }
        }
        for f in &changes.del_fdb {
            match handle.neighbours().del(fdb_message(vx, f)).execute().await {
                Ok(()) => {}
                Err(e) if gone(&e) => {}
                Err(e) => {
                    return Err(failed(format!("cannot delete forwarding entry {}", f.mac))(
                        e,
                    ));
                }
            }
        }
        for f in &changes.add_fdb {
            handle
                .neighbours()
                .add_bridge(vx, &f.mac.0)
                .destination(IpAddr::V4(f.remote))
                .flags(NeighbourFlags::Own)
                .state(NeighbourState::Permanent)
                .replace()
                .execute()
                .await
                .map_err(failed(format!(
                    "cannot add forwarding entry {} to {}",
                    f.mac, f.remote
                )))?;
        }
        for Neighbour { ip, mac } in &changes.add_neighbours {
            handle
                .neighbours()
                .add(vx, IpAddr::V4(*ip))
                .link_layer_address(&mac.0)
                .state(NeighbourState::Permanent)
                .replace()
                .execute()
                .await
                .map_err(failed(format!("cannot add neighbour {ip} at {mac}")))?;
        }
    }
    for r in &changes.add_routes {
        let Some(msg) = route_message(r, underlay, vxlan) else {
            continue;
        };
        handle
            .route()
            .add(msg)
            .replace()
            .execute()
            .await
            .map_err(failed(format!("cannot add the route to {}", r.dest)))?;
    }
    Ok(())
}
