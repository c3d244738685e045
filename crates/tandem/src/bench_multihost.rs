//! `tandem bench multihost` (issue 33): the pod network between hosts, measured on the kernel's
//! own data path. Two simulated hosts (private network namespaces joined by a veth pair, the
//! underlay) each hold a pod address; the same pair of endpoints is measured over the plain
//! link (the same-host baseline: no routing, no encapsulation), over host-gw routes and through
//! the VXLAN tunnel, all programmed by the agent's own code (`cluster_network`). Then the time
//! from a peer's Node being known to its route, neighbour and forwarding entries being in
//! place (rules, diff and netlink; the watch delivery that precedes it is measured by `tandem
//! bench services`). Traffic stays inside the namespaces.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec};
use tandem_agent::cluster_network::model::Peer;
use tandem_agent::cluster_network::netlink::{self, VxlanSpec};
use tandem_agent::cluster_network::rules::{self, Desired, LocalHost};
use tandem_agent::cluster_network::{Backend, DEFAULT_PORT, DEFAULT_VNI, device_name};
use tandem_agent::podnet::Net;
use tandem_agent::podnet::netns::{NetNs, NsWorker};

/// Flags of `tandem bench multihost`.
#[derive(clap::Args, Debug)]
pub struct MultihostBench {
    /// One-byte request/response round trips per path (latency).
    #[arg(long, default_value_t = 5_000)]
    round_trips: usize,
    /// MiB sent one way per path (throughput).
    #[arg(long, default_value_t = 256)]
    megabytes: usize,
    /// Peers joined and removed (join → route in place).
    #[arg(long, default_value_t = 200)]
    joins: usize,
}

struct Host {
    ns: Arc<NetNs>,
    handle: Handle,
    underlay: Ipv4Addr,
    pod: Net,
}

async fn handle_in(worker: &NsWorker, ns: &Arc<NetNs>) -> anyhow::Result<Handle> {
    let (conn, handle, _) = worker
        .run_in(ns, rtnetlink::new_connection)
        .await
        .context("cannot open netlink in a namespace")?;
    tokio::spawn(conn);
    Ok(handle)
}

async fn two_hosts(worker: &NsWorker) -> anyhow::Result<(Host, Host)> {
    let a = worker.create().await.context("cannot create a namespace")?;
    let b = worker.create().await.context("cannot create a namespace")?;
    let ha = handle_in(worker, &a).await?;
    let hb = handle_in(worker, &b).await?;
    let peer = LinkMessageBuilder::<LinkUnspec>::new()
        .name("eth0".to_string())
        .setns_by_fd(b.as_fd().as_raw_fd())
        .build();
    let veth = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
        .name("eth0".to_string())
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    ha.link()
        .add(veth)
        .execute()
        .await
        .context("cannot create the underlay")?;
    let mut out = Vec::new();
    for (n, (ns, h)) in [(1u8, (a, ha)), (2u8, (b, hb))] {
        for name in ["lo", "eth0"] {
            let index = tandem_agent::podnet::links::index_of(&h, name)
                .await?
                .with_context(|| format!("no {name}"))?;
            let (addr, prefix) = if name == "lo" {
                (Ipv4Addr::new(10, 250, n, 1), 32)
            } else {
                (Ipv4Addr::new(192, 0, 2, n), 24)
            };
            h.address()
                .add(index, addr.into(), prefix)
                .execute()
                .await
                .with_context(|| format!("cannot address {name}"))?;
            h.link()
                .set(LinkUnspec::new_with_index(index).up().build())
                .execute()
                .await
                .with_context(|| format!("cannot bring {name} up"))?;
        }
        out.push(Host {
            ns,
            handle: h,
            underlay: Ipv4Addr::new(192, 0, 2, n),
            pod: Net::parse(&format!("10.250.{n}.0/24")).context("pod range")?,
        });
    }
    let b = out.pop().context("host b")?;
    let a = out.pop().context("host a")?;
    Ok((a, b))
}

fn local(h: &Host, name: &str) -> LocalHost {
    LocalHost {
        node_name: name.to_string(),
        pod_cidr: Some(h.pod),
        underlay: Net {
            addr: Ipv4Addr::new(192, 0, 2, 0),
            prefix: 24,
        },
        address: h.underlay,
        addresses: [h.underlay, h.pod.gateway()].into_iter().collect(),
    }
}

/// Latency (p50, p99 of `n` one-byte round trips) and throughput (MiB/s of `mib` MiB) from
/// `from` (bound to `src`) to a listener of `to` at `dst`.
async fn measure(
    worker: &NsWorker,
    from: &Host,
    to: &Host,
    src: Ipv4Addr,
    dst: SocketAddrV4,
    n: usize,
    mib: usize,
) -> anyhow::Result<(Duration, Duration, f64)> {
    let listener = worker
        .run_in(&to.ns, move || std::net::TcpListener::bind(dst))
        .await
        .context("cannot listen")?;
    let total = mib * 1024 * 1024;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut byte = [0u8; 1];
        for _ in 0..n {
            s.read_exact(&mut byte)?;
            s.write_all(&byte)?;
        }
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0;
        while got < total {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            got += k;
        }
        s.write_all(b"k")?;
        Ok(())
    });
    let mut s = worker
        .run_in(&from.ns, move || {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.bind(&SocketAddr::V4(SocketAddrV4::new(src, 0)).into())?;
            s.connect_timeout(&SocketAddr::V4(dst).into(), Duration::from_secs(3))?;
            Ok(std::net::TcpStream::from(s))
        })
        .await
        .with_context(|| format!("cannot connect to {dst}"))?;
    let (lat, mibs) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut samples = Vec::with_capacity(n);
        let mut byte = [7u8; 1];
        for _ in 0..n {
            let t = Instant::now();
            s.write_all(&byte)?;
            s.read_exact(&mut byte)?;
            samples.push(t.elapsed());
        }
        let chunk = vec![1u8; 1 << 16];
        let t = Instant::now();
        let mut sent = 0;
        while sent < total {
            let k = chunk.len().min(total - sent);
            s.write_all(&chunk[..k])?;
            sent += k;
        }
        s.read_exact(&mut byte)?;
        let secs = t.elapsed().as_secs_f64().max(1e-9);
        samples.sort();
        Ok((samples, (total as f64 / (1024.0 * 1024.0)) / secs))
    })
    .await
    .context("the client thread failed")??;
    server
        .join()
        .map_err(|_| anyhow::anyhow!("the listener thread panicked"))??;
    let at = |q: f64| {
        lat.get(((lat.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    Ok((at(0.5), at(0.99), mibs))
}

/// Runs the benchmark and prints its figures.
pub async fn run(b: MultihostBench) -> anyhow::Result<()> {
    if !tandem_agent::podnet::netns::can_manage_networks() {
        anyhow::bail!("tandem bench multihost makes network namespaces: run it as root");
    }
    let worker = NsWorker::start(tokio::runtime::Handle::current())?;
    let (a, b_host) = two_hosts(&worker).await?;
    let n = b.round_trips.max(1);
    let mib = b.megabytes.max(1);
    println!(
        "tandem bench multihost: two hosts (namespaces, veth underlay 192.0.2.0/24), {n} round trips and {mib} MiB per path"
    );
    println!(
        "  {:<44} {:>10} {:>10} {:>12}",
        "path", "p50 RTT", "p99 RTT", "throughput"
    );
    let row = |what: &str, (p50, p99, mibs): (Duration, Duration, f64)| {
        println!(
            "  {what:<44} {:>8}µs {:>8}µs {:>8.0} MiB/s",
            p50.as_micros(),
            p99.as_micros(),
            mibs
        );
    };
    let mut port = 9000;
    let mut next = || {
        port += 1;
        port
    };
    // Same-host baseline: the two ends of the link, no routing, no tunnel.
    row(
        "same link (no pod network: baseline)",
        measure(
            &worker,
            &a,
            &b_host,
            a.underlay,
            SocketAddrV4::new(b_host.underlay, next()),
            n,
            mib,
        )
        .await?,
    );
    // VXLAN devices on both hosts.
    let mut devices = Vec::new();
    for h in [&a, &b_host] {
        let u = netlink::underlay(&h.handle, h.underlay)
            .await?
            .context("no underlay")?;
        let spec = VxlanSpec {
            name: device_name(DEFAULT_VNI),
            vni: DEFAULT_VNI,
            port: DEFAULT_PORT,
            underlay: u.index,
            local: h.underlay,
            mtu: u.mtu.saturating_sub(50),
            address: Some(h.pod.addr),
        };
        let (index, mac) = netlink::create_vxlan(&h.handle, &spec).await?;
        devices.push((u.index, index, mac));
    }
    let peers = [
        Peer {
            name: "a".into(),
            pod_cidr: Some(a.pod),
            address: Some(a.underlay),
            vtep_mac: Some(devices[0].2),
            backend: Some(Backend::Vxlan),
        },
        Peer {
            name: "b".into(),
            pod_cidr: Some(b_host.pod),
            address: Some(b_host.underlay),
            vtep_mac: Some(devices[1].2),
            backend: Some(Backend::Vxlan),
        },
    ];
    let hosts = [(&a, "a", devices[0]), (&b_host, "b", devices[1])];
    let mut applied = [Desired::default(), Desired::default()];
    for (backend, label) in [
        (Backend::HostGw, "pod to pod, host-gw (direct routes)"),
        (
            Backend::Vxlan,
            "pod to pod, VXLAN tunnel (VNI 4096, UDP 4789)",
        ),
    ] {
        for (i, (h, name, (underlay, vx, _))) in hosts.iter().enumerate() {
            let want = rules::desired(&local(h, name), backend, &peers);
            netlink::apply(
                &h.handle,
                *underlay,
                Some(*vx),
                &rules::diff(&applied[i], &want),
            )
            .await?;
            applied[i] = want;
        }
        let dst = SocketAddrV4::new(b_host.pod.gateway(), next());
        row(
            label,
            measure(&worker, &a, &b_host, a.pod.gateway(), dst, n, mib).await?,
        );
    }
    // Join → route: a new peer's entries computed and applied on host a, then removed.
    let joins = b.joins.max(1);
    let mut samples = Vec::with_capacity(joins);
    let base = applied[0].clone();
    let mut with_peers = peers.to_vec();
    for j in 0..joins {
        let third = u8::try_from(j % 200).unwrap_or(0) + 10;
        with_peers.truncate(2);
        with_peers.push(Peer {
            name: format!("joiner-{j}"),
            pod_cidr: Net::parse(&format!("10.250.{third}.0/24")),
            address: Some(Ipv4Addr::new(172, 31, 0, third)),
            vtep_mac: Some(tandem_agent::cluster_network::model::Mac([
                2, 0, 0, 0, 1, third,
            ])),
            backend: Some(Backend::Vxlan),
        });
        let t = Instant::now();
        let want = rules::desired(&local(&a, "a"), Backend::Vxlan, &with_peers);
        netlink::apply(
            &a.handle,
            devices[0].0,
            Some(devices[0].1),
            &rules::diff(&base, &want),
        )
        .await?;
        samples.push(t.elapsed());
        netlink::apply(
            &a.handle,
            devices[0].0,
            Some(devices[0].1),
            &rules::diff(&want, &base),
        )
        .await?;
    }
    samples.sort();
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "  join → route, neighbour and FDB entry in place (rules + netlink, {joins} joins): p50 {:.2} ms, p99 {:.2} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3
    );
    println!(
        "  host cut off → its pods evicted: --node-monitor-grace-period (upstream 40 s) + --default-unreachable-toleration-seconds (upstream 300 s)"
    );
    for h in [&a, &b_host] {
        netlink::flush_routes(&h.handle).await?;
        netlink::delete_vxlan(&h.handle, &device_name(DEFAULT_VNI)).await?;
    }
    Ok(())
}
