//! The pod network between hosts against the kernel (needs root; skipped without it): two
//! "hosts" are two network namespaces this test creates, joined by a veth pair (their underlay),
//! each with a dummy "pod" address in its own pod range. The rules' output is applied with the
//! real netlink code, and a TCP connection from one host's pod address to the other's proves the
//! path — through the VXLAN device, then through direct routes — and the cleanup leaves no route
//! or device. Traffic goes only to addresses inside these namespaces.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec};
use tandem_agent::cluster_network::model::Peer;
use tandem_agent::cluster_network::netlink::{self, VxlanSpec};
use tandem_agent::cluster_network::rules::{self, Desired, LocalHost};
use tandem_agent::cluster_network::{Backend, device_name};
use tandem_agent::podnet::Net;
use tandem_agent::podnet::netns::{self, NetNs, NsWorker};

const VNI: u32 = 4242;
const PORT: u16 = 4790;

struct Host {
    ns: Arc<NetNs>,
    handle: Handle,
    underlay: Ipv4Addr,
    pod_cidr: Net,
}

async fn handle_in(worker: &NsWorker, ns: &Arc<NetNs>) -> Handle {
    let (conn, handle, _) = worker.run_in(ns, rtnetlink::new_connection).await.unwrap();
    tokio::spawn(conn);
    handle
}

/// Two namespaces joined by `eth0`–`eth0`, addresses 192.0.2.1/24 and .2/24, and `lo` up
/// holding the "pod" address 10.250.N.1/32.
async fn two_hosts(worker: &NsWorker) -> (Host, Host) {
    let a = worker.create().await.unwrap();
    let b = worker.create().await.unwrap();
    let ha = handle_in(worker, &a).await;
    let hb = handle_in(worker, &b).await;
    let peer = LinkMessageBuilder::<LinkUnspec>::new()
        .name("eth0".to_string())
        .setns_by_fd(b.as_fd().as_raw_fd())
        .build();
    let veth = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
        .name("eth0".to_string())
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    ha.link().add(veth).execute().await.unwrap();
    let mut hosts = Vec::new();
    for (n, (ns, h)) in [(a, ha), (b, hb)].into_iter().enumerate() {
        let n = u8::try_from(n).unwrap() + 1;
        for name in ["lo", "eth0"] {
            let index = tandem_agent::podnet::links::index_of(&h, name)
                .await
                .unwrap()
                .unwrap();
            match name {
                "eth0" => h
                    .address()
                    .add(index, Ipv4Addr::new(192, 0, 2, n).into(), 24)
                    .execute()
                    .await
                    .unwrap(),
                // The "pod": its address on `lo` (no dummy links on every kernel).
                "lo" => h
                    .address()
                    .add(index, Ipv4Addr::new(10, 250, n, 1).into(), 32)
                    .execute()
                    .await
                    .unwrap(),
                _ => {}
            }
            h.link()
                .set(LinkUnspec::new_with_index(index).up().build())
                .execute()
                .await
                .unwrap();
        }
        hosts.push(Host {
            ns,
            handle: h,
            underlay: Ipv4Addr::new(192, 0, 2, n),
            pod_cidr: Net::parse(&format!("10.250.{n}.0/24")).unwrap(),
        });
    }
    let b = hosts.pop().unwrap();
    let a = hosts.pop().unwrap();
    (a, b)
}

/// Connects from `from`'s pod address to `to`'s pod address and reads what the listener there
/// writes (a listener opened in `to` answers once).
async fn pod_to_pod(worker: &NsWorker, from: &Host, to: &Host) -> std::io::Result<String> {
    // A port per call: the listener of a failed attempt lingers for its 5 s.
    static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(7070);
    let port = NEXT_PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let listen = SocketAddrV4::new(to.pod_cidr.gateway(), port);
    let listener = worker
        .run_in(&to.ns, move || std::net::TcpListener::bind(listen))
        .await?;
    // The listener waits at most 5 s (50 polls), so a failed connection leaves no thread behind.
    let server = std::thread::spawn(move || -> std::io::Result<SocketAddr> {
        listener.set_nonblocking(true)?;
        for _ in 0..50 {
            match listener.accept() {
                Ok((mut s, peer)) => {
                    s.set_nonblocking(false)?;
                    s.write_all(b"hello across hosts")?;
                    return Ok(peer);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("nobody connected"))
    });
    let source = SocketAddrV4::new(from.pod_cidr.gateway(), 0);
    let stream = worker
        .run_in(&from.ns, move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.bind(&SocketAddr::V4(source).into())?;
            s.connect_timeout(&SocketAddr::V4(listen).into(), Duration::from_secs(3))?;
            Ok(std::net::TcpStream::from(s))
        })
        .await;
    let mut stream = match stream {
        Ok(s) => s,
        Err(e) => return Err(e),
    };
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    let peer = server
        .join()
        .map_err(|_| std::io::Error::other("listener thread panicked"))??;
    // The connection arrives from the other pod's own address: no NAT on the way.
    assert_eq!(peer.ip(), std::net::IpAddr::V4(from.pod_cidr.gateway()));
    Ok(out)
}

fn local(host: &Host, name: &str) -> LocalHost {
    LocalHost {
        node_name: name.to_string(),
        pod_cidr: Some(host.pod_cidr),
        underlay: Net::parse(&format!("{}/24", host.underlay)).unwrap(),
        address: host.underlay,
        addresses: [host.underlay, host.pod_cidr.gateway()]
            .into_iter()
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_each_other_across_hosts_through_vxlan_and_direct_routes() {
    if !netns::can_manage_networks() {
        eprintln!("skipped: needs CAP_NET_ADMIN and CAP_SYS_ADMIN");
        return;
    }
    let worker = NsWorker::start(tokio::runtime::Handle::current()).unwrap();
    let (a, b) = two_hosts(&worker).await;
    // Before any route, a's pod cannot reach b's (no route: the connection fails at once).
    assert!(pod_to_pod(&worker, &a, &b).await.is_err());

    // VXLAN on both hosts, each programmed from the other's Node as the rules read it.
    let mut devices = Vec::new();
    for h in [&a, &b] {
        let u = netlink::underlay(&h.handle, h.underlay)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(u.name, "eth0");
        assert_eq!(u.net, Net::parse("192.0.2.0/24").unwrap());
        let spec = VxlanSpec {
            name: device_name(VNI),
            vni: VNI,
            port: PORT,
            underlay: u.index,
            local: h.underlay,
            mtu: u.mtu - 50,
            address: Some(h.pod_cidr.addr),
        };
        let (index, mac) = netlink::create_vxlan(&h.handle, &spec).await.unwrap();
        devices.push((u.index, index, mac));
    }
    let peer_of = |h: &Host, name: &str, mac| Peer {
        name: name.to_string(),
        pod_cidr: Some(h.pod_cidr),
        address: Some(h.underlay),
        vtep_mac: Some(mac),
        backend: Some(Backend::Vxlan),
    };
    let peers = [
        peer_of(&a, "a", devices[0].2),
        peer_of(&b, "b", devices[1].2),
    ];
    let mut applied = Vec::new();
    for (h, name, (underlay, vxlan, _)) in [(&a, "a", devices[0]), (&b, "b", devices[1])] {
        let want = rules::desired(&local(h, name), Backend::Vxlan, &peers);
        assert_eq!(want.routes.len(), 1, "{want:?}");
        let changes = rules::diff(&Desired::default(), &want);
        netlink::apply(&h.handle, underlay, Some(vxlan), &changes)
            .await
            .unwrap();
        // Applying again (a resync) changes nothing and fails nothing.
        netlink::apply(
            &h.handle,
            underlay,
            Some(vxlan),
            &rules::resync(&want, &want),
        )
        .await
        .unwrap();
        applied.push(want);
        assert_eq!(
            netlink::routed(&h.handle)
                .await
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![if name == "a" { b.pod_cidr } else { a.pod_cidr }]
        );
    }
    assert_eq!(
        pod_to_pod(&worker, &a, &b).await.unwrap(),
        "hello across hosts"
    );
    assert_eq!(
        pod_to_pod(&worker, &b, &a).await.unwrap(),
        "hello across hosts"
    );

    // Auto on the same link: the tunnel entries go, direct routes replace the tunnel's.
    for (i, (h, name)) in [(&a, "a"), (&b, "b")].into_iter().enumerate() {
        let want = rules::desired(&local(h, name), Backend::Auto, &peers);
        let changes = rules::diff(&applied[i], &want);
        assert_eq!(changes.del_fdb.len(), 1);
        assert!(changes.del_routes.is_empty(), "re-pointed in place");
        netlink::apply(&h.handle, devices[i].0, Some(devices[i].1), &changes)
            .await
            .unwrap();
    }
    assert_eq!(
        pod_to_pod(&worker, &a, &b).await.unwrap(),
        "hello across hosts"
    );
    assert_eq!(
        pod_to_pod(&worker, &b, &a).await.unwrap(),
        "hello across hosts"
    );

    // Stop: every route of tandem's and the device go.
    for h in [&a, &b] {
        assert_eq!(netlink::flush_routes(&h.handle).await.unwrap(), 1);
        netlink::delete_vxlan(&h.handle, &device_name(VNI))
            .await
            .unwrap();
        assert!(netlink::routed(&h.handle).await.unwrap().is_empty());
        assert!(
            tandem_agent::podnet::links::index_of(&h.handle, &device_name(VNI))
                .await
                .unwrap()
                .is_none()
        );
    }
    assert!(pod_to_pod(&worker, &a, &b).await.is_err());
}
