//! The netlink calls behind an emulated node's network: its bridge with the gateway address,
//! one veth pair per pod (host end on the bridge, `eth0` in the pod's namespace), the pod's
//! address and default route. What the CNI `bridge` plugin does for a real node's sandboxes
//! (`ip link add … type veth peer name eth0 netns …`, `ip addr add`, `ip route add default`),
//! made in-process through `rtnetlink` instead of one plugin process per pod.

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{
    InfoBridge, InfoData, InfoKind, InfoVeth, LinkAttribute, LinkMessage,
};
use rtnetlink::{
    Handle, LinkBridge, LinkBridgePort, LinkMessageBuilder, LinkUnspec, RouteMessageBuilder,
};

use super::netns::NetNs;

/// A netlink failure, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct LinkError {
    pub what: String,
    #[source]
    pub source: rtnetlink::Error,
}

fn failed(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> LinkError {
    let what = what.into();
    move |source| LinkError { what, source }
}

fn name_of(link: &LinkMessage) -> Option<&str> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.as_str()),
        _ => None,
    })
}

fn controller_of(link: &LinkMessage) -> Option<u32> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Controller(i) => Some(*i),
        _ => None,
    })
}

/// The index of the link called `name`, if there is one (one lookup by name, not a dump).
pub async fn index_of(handle: &Handle, name: &str) -> Result<Option<u32>, LinkError> {
    let found: Result<Vec<LinkMessage>, _> = handle
        .link()
        .get()
        .match_name(name.to_string())
        .execute()
        .try_collect()
        .await;
    match found {
        Ok(links) => Ok(links.first().map(|l| l.header.index)),
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(None), // ENODEV
        Err(e) => Err(failed(format!("cannot look up link {name}"))(e)),
    }
}

/// Deletes a link by index; a link already gone is not an error.
pub async fn delete(handle: &Handle, index: u32) -> Result<(), LinkError> {
    match handle.link().del(index).execute().await {
        Ok(()) => Ok(()),
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -19 => Ok(()), // ENODEV
        Err(e) => Err(failed(format!("cannot delete link {index}"))(e)),
    }
}

/// Creates (or adopts) the bridge `name` holding `gateway/prefix`, up, with `nf_call_iptables`
/// so that pod-to-pod traffic through a Service passes the proxy's conntrack. Bridges of earlier
/// runs (names starting with `stale_prefix`) that hold the same gateway address and have no
/// port are deleted first: left by a run that was killed, they would take the route to the pod
/// range. A bridge with ports is never touched. Returns the bridge's index.
pub async fn ensure_bridge(
    handle: &Handle,
    name: &str,
    gateway: Ipv4Addr,
    prefix: u8,
    stale_prefix: &str,
) -> Result<u32, LinkError> {
    let links: Vec<LinkMessage> = handle
        .link()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot list network links"))?;
    let addresses: Vec<_> = handle
        .address()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot list addresses"))?;
    let holders: Vec<u32> = addresses
        .iter()
        .filter(|a| {
            a.attributes
                .iter()
                .any(|at| matches!(at, AddressAttribute::Address(IpAddr::V4(ip)) if *ip == gateway))
        })
        .map(|a| a.header.index)
        .collect();
    for link in &links {
        let Some(link_name) = name_of(link) else {
            continue;
        };
        let index = link.header.index;
        let has_ports = links.iter().any(|l| controller_of(l) == Some(index));
        if link_name != name
            && link_name.starts_with(stale_prefix)
            && holders.contains(&index)
            && !has_ports
        {
            tracing::info!(
                bridge = link_name,
                "removing a stale bridge of an earlier run"
            );
            delete(handle, index).await?;
        }
    }
    let index = match index_of(handle, name).await? {
        Some(i) => i,
        None => {
            let msg = LinkBridge::new(name)
                .append_info_data(InfoBridge::NfCallIpTables(true))
                .build();
            handle
                .link()
                .add(msg)
                .execute()
                .await
                .map_err(failed(format!("cannot create bridge {name}")))?;
            index_of(handle, name).await?.ok_or_else(|| LinkError {
                what: format!("bridge {name} vanished after it was created"),
                source: rtnetlink::Error::RequestFailed,
            })?
        }
    };
    let has_gateway = handle
        .address()
        .get()
        .set_link_index_filter(index)
        .execute()
        .try_collect::<Vec<_>>()
        .await
        .map_err(failed("cannot list the bridge's addresses"))?
        .iter()
        .any(|a| {
            a.attributes
                .iter()
                .any(|at| matches!(at, AddressAttribute::Address(IpAddr::V4(ip)) if *ip == gateway))
        });
    if !has_gateway {
        handle
            .address()
            .add(index, IpAddr::V4(gateway), prefix)
            .execute()
            .await
            .map_err(failed(format!(
                "cannot put {gateway}/{prefix} on bridge {name}"
            )))?;
    }
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .map_err(failed(format!("cannot bring bridge {name} up")))?;
    Ok(index)
}

/// Creates the veth pair of one pod: `host_name` on the bridge (up, hairpin on so a pod can
/// reach itself through a Service) and `eth0` inside `ns`, in one request. A link of the same
/// name left by an earlier attempt is replaced. Returns the host end's index.
pub async fn add_pod_veth(
    handle: &Handle,
    host_name: &str,
    ns: &NetNs,
    bridge_index: u32,
) -> Result<u32, LinkError> {
    use std::os::fd::AsRawFd;
    let create = || {
        // In a new namespace `lo` is link 1: `eth0` is made link 2, so the pod side needs no
        // lookup. (It cannot be made up here: a veth opens only once its peer exists.)
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name("eth0".to_string())
            .index(POD_ETH0_INDEX)
            .setns_by_fd(ns.as_fd().as_raw_fd())
            .build();
        let msg = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
            .name(host_name.to_string())
            .controller(bridge_index)
            .up()
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        handle.link().add(msg).execute()
    };
    match create().await {
        Ok(()) => {}
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -17 => {
            // EEXIST: a veth of an interrupted attempt.
            if let Some(old) = index_of(handle, host_name).await? {
                delete(handle, old).await?;
            }
            create()
                .await
                .map_err(failed(format!("cannot create veth pair {host_name}")))?;
        }
        Err(e) => return Err(failed(format!("cannot create veth pair {host_name}"))(e)),
    }
    let index = index_of(handle, host_name)
        .await?
        .ok_or_else(|| LinkError {
            what: format!("veth {host_name} vanished after it was created"),
            source: rtnetlink::Error::RequestFailed,
        })?;
    handle
        .link()
        .set_port(LinkBridgePort::new(index).hairpin(true).build())
        .execute()
        .await
        .map_err(failed(format!("cannot set hairpin mode on {host_name}")))?;
    Ok(index)
}

/// The index of `eth0` in a pod's namespace (`lo` is 1).
pub const POD_ETH0_INDEX: u32 = 2;
const POD_LO_INDEX: u32 = 1;

/// Inside the pod's namespace (through a handle made there): `lo` and `eth0` (made by
/// [`add_pod_veth`]) up, the pod's address on `eth0`, the default route via the gateway. Returns `eth0`'s
/// MAC address.
pub async fn configure_pod_side(
    pod: &Handle,
    ip: Ipv4Addr,
    prefix: u8,
    gateway: Ipv4Addr,
) -> Result<Option<String>, LinkError> {
    let links: Vec<LinkMessage> = pod
        .link()
        .get()
        .match_index(POD_ETH0_INDEX)
        .execute()
        .try_collect()
        .await
        .map_err(failed("cannot find eth0 in the pod's namespace"))?;
    let eth0 = links.first().ok_or_else(|| LinkError {
        what: "eth0 is missing in the pod's namespace".into(),
        source: rtnetlink::Error::RequestFailed,
    })?;
    let mac = eth0.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(b) if b.len() == 6 => Some(
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
        ),
        _ => None,
    });
    let eth0 = eth0.header.index;
    pod.link()
        .set(LinkUnspec::new_with_index(POD_LO_INDEX).up().build())
        .execute()
        .await
        .map_err(failed("cannot bring lo up in the pod"))?;
    pod.address()
        .add(eth0, IpAddr::V4(ip), prefix)
        .execute()
        .await
        .map_err(failed(format!(
            "cannot put {ip}/{prefix} on the pod's eth0"
        )))?;
    pod.link()
        .set(LinkUnspec::new_with_index(eth0).up().build())
        .execute()
        .await
        .map_err(failed("cannot bring the pod's eth0 up"))?;
    let route = RouteMessageBuilder::<Ipv4Addr>::new()
        .gateway(gateway)
        .output_interface(eth0)
        .build();
    pod.route()
        .add(route)
        .execute()
        .await
        .map_err(failed(format!(
            "cannot add the pod's default route via {gateway}"
        )))?;
    Ok(mac)
}
