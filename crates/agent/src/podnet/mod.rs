//! Pod networks for emulated nodes: every emulated pod gets a real network namespace with an
//! address from its node's pod CIDR, reachable from the host and from real pods, and a
//! [`standin`] answering its containers' ports.
//!
//! Layout, as the CNI `bridge` plugin makes it for a real node: one Linux bridge per emulated
//! node (`tdme` + a hash of the node's name and pod CIDR) holding the CIDR's first address as
//! the pods' gateway, and per pod a veth pair, `tdmv…` on the bridge and `eth0` in the pod's
//! namespace with a default route via the gateway. The host routes between bridges, so pods of
//! emulated nodes, real pods and the host reach each other, and the service proxy's rules apply
//! to all of them.
//!
//! Cleanup: namespaces are held by descriptor only ([`netns`]), so the kernel removes them and
//! their veth pairs whenever tandem exits, `kill -9` included. The bridge is deleted by
//! [`EmulatedNetwork::shutdown`]; a bridge left by a killed run is adopted by the next run of the
//! same node, or removed by any run that needs its gateway address (it then has no ports).
//!
//! Without the privileges to do this (no CAP_NET_ADMIN/CAP_SYS_ADMIN), [`EmulatedNetwork::start`]
//! fails with [`PodNetError::NotPermitted`] and the node runs its pods unreachable, saying so.

pub mod links;
pub mod netns;
pub mod standin;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use netns::{NetNs, NsWorker};

/// Prefix of the bridges of emulated nodes.
pub const BRIDGE_PREFIX: &str = "tdme";
/// Prefix of the host ends of emulated pods' veth pairs.
pub const VETH_PREFIX: &str = "tdmv";

/// Why an emulated node's pods cannot be put on the network.
#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error(
        "pods of emulated nodes need CAP_NET_ADMIN and CAP_SYS_ADMIN (run tandem as root) to be reachable"
    )]
    NotPermitted,
    #[error("invalid pod CIDR {0:?}: an IPv4 CIDR with prefix at most /30 is needed")]
    Cidr(String),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Link(#[from] links::LinkError),
}

fn io_failed(what: impl Into<String>) -> impl FnOnce(io::Error) -> PodNetError {
    let what = what.into();
    move |source| PodNetError::Io { what, source }
}

/// An IPv4 network: address and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Net {
    /// Parses `10.244.1.0/24`.
    pub fn parse(s: &str) -> Option<Net> {
        let (a, p) = s.split_once('/')?;
        let addr: Ipv4Addr = a.parse().ok()?;
        let prefix: u8 = p.parse().ok()?;
        (prefix <= 32).then(|| Net {
            addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)),
            prefix,
        })
    }

    fn mask(prefix: u8) -> u32 {
        if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.addr)
    }

    /// The first host address (the bridge's, the pods' gateway).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr).wrapping_add(1))
    }
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What an emulated node's network is made from.
#[derive(Clone, Debug)]
pub struct NetworkSpec {
    pub node_name: String,
    /// The node's pod CIDR.
    pub pod_cidr: String,
    /// The cluster's pod range (`--cluster-cidr`); destinations outside it are "outside the pod
    /// network" for the Windows ICMP rule. `None`: the /16 around the pod CIDR.
    pub cluster_cidr: Option<String>,
    /// Whether the node is a Windows node (its pods follow the Windows data plane's rules).
    pub windows: bool,
}

/// One emulated node's network: its bridge and its pods' namespaces.
pub struct EmulatedNetwork {
    worker: NsWorker,
    host: rtnetlink::Handle,
    bridge: String,
    bridge_index: u32,
    pod_cidr: Net,
    cluster_cidr: Net,
    windows: bool,
    pods: Mutex<HashMap<String, Arc<PodNet>>>,
    /// How long each of the last [`SETUP_SAMPLES`] attachments took (namespace, veth pair,
    /// address and route), for benchmarks.
    setup: Mutex<std::collections::VecDeque<Duration>>,
}

/// How many attachment durations an [`EmulatedNetwork`] keeps.
pub const SETUP_SAMPLES: usize = 100_000;

impl std::fmt::Debug for EmulatedNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedNetwork")
            .field("bridge", &self.bridge)
            .field("pod_cidr", &self.pod_cidr)
            .finish_non_exhaustive()
    }
}

fn short_hash(parts: &[&str]) -> String {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    format!("{:010x}", h.finish() & 0xff_ffff_ffff)
}

/// The bridge name of an emulated node (at most 15 characters, stable across runs).
pub fn bridge_name(node_name: &str, pod_cidr: &str) -> String {
    format!("{BRIDGE_PREFIX}{}", short_hash(&[node_name, pod_cidr]))
}

impl EmulatedNetwork {
    /// Creates (or adopts) the node's bridge. Must run inside tokio's runtime.
    pub async fn start(spec: &NetworkSpec) -> Result<Arc<EmulatedNetwork>, PodNetError> {
        if !netns::can_manage_networks() {
            return Err(PodNetError::NotPermitted);
        }
        let pod_cidr = Net::parse(&spec.pod_cidr)
            .filter(|n| n.prefix <= 30)
            .ok_or_else(|| PodNetError::Cidr(spec.pod_cidr.clone()))?;
        let cluster_cidr = match &spec.cluster_cidr {
            Some(c) => Net::parse(c).ok_or_else(|| PodNetError::Cidr(c.clone()))?,
            None => Net {
                addr: Ipv4Addr::from(u32::from(pod_cidr.addr) & 0xffff_0000),
                prefix: 16.min(pod_cidr.prefix),
            },
        };
        let worker = NsWorker::start(tokio::runtime::Handle::current())
            .map_err(io_failed("cannot start the network namespace thread"))?;
        let (conn, host, _) =
            rtnetlink::new_connection().map_err(io_failed("cannot open a netlink socket"))?;
        tokio::spawn(conn);
        let bridge = bridge_name(&spec.node_name, &spec.pod_cidr);
        let bridge_index = links::ensure_bridge(
            &host,
            &bridge,
            pod_cidr.gateway(),
            pod_cidr.prefix,
            BRIDGE_PREFIX,
        )
        .await?;
        // Node ports answer on 127.0.0.1 for these pods too: the host's DNAT to a pod keeps the
        // loopback source, which may leave through this bridge only with route_localnet (on
        // tandem's own bridge only; the setting goes with it).
        let localnet = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
        if let Err(e) = std::fs::write(&localnet, "1") {
            tracing::warn!(error = %e, bridge, "cannot set route_localnet: node ports on 127.0.0.1 do not reach this node's pods");
        }
        // Routing between bridges, as the bridge plugin's `isGateway` turns it on.
        if let Err(e) = std::fs::write("/proc/sys/net/ipv4/ip_forward", "1") {
            tracing::warn!(error = %e, "cannot enable IPv4 forwarding: pods of different nodes cannot reach each other");
        }
        Ok(Arc::new(EmulatedNetwork {
            worker,
            host,
            bridge,
            bridge_index,
            pod_cidr,
            cluster_cidr,
            windows: spec.windows,
            pods: Mutex::new(HashMap::new()),
            setup: Mutex::new(std::collections::VecDeque::new()),
        }))
    }

    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// The pods' gateway, the bridge's address: the node's own address on its pod network.
    pub fn gateway(&self) -> Ipv4Addr {
        self.pod_cidr.gateway()
    }

    pub fn pod_cidr(&self) -> Net {
        self.pod_cidr
    }

    pub fn worker(&self) -> &NsWorker {
        &self.worker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PodNet>>> {
        match self.pods.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The network of a sandbox, if it has one.
    pub fn pod(&self, sandbox_id: &str) -> Option<Arc<PodNet>> {
        self.lock().get(sandbox_id).cloned()
    }

    /// How long the last attachments took (see [`SETUP_SAMPLES`]).
    pub fn setup_durations(&self) -> Vec<Duration> {
        match self.setup.lock() {
            Ok(g) => g.iter().copied().collect(),
            Err(p) => p.into_inner().iter().copied().collect(),
        }
    }

    /// How many pods are attached.
    pub fn pod_count(&self) -> usize {
        self.lock().len()
    }

    /// Gives a sandbox its namespace, veth pair and address `ip`. Idempotent per sandbox.
    pub async fn attach(&self, sandbox_id: &str, ip: Ipv4Addr) -> Result<Arc<PodNet>, PodNetError> {
        if let Some(p) = self.pod(sandbox_id) {
            return Ok(p);
        }
        if !self.pod_cidr.contains(ip) {
            return Err(PodNetError::Io {
                what: format!(
                    "pod address {ip} is outside the node's pod CIDR {}",
                    self.pod_cidr
                ),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        let started = std::time::Instant::now();
        let ns = self
            .worker
            .create()
            .await
            .map_err(io_failed("cannot create the pod's network namespace"))?;
        let t_ns = started.elapsed();
        let host_if = format!("{VETH_PREFIX}{}", short_hash(&[&self.bridge, sandbox_id]));
        let host_index = links::add_pod_veth(&self.host, &host_if, &ns, self.bridge_index).await?;
        let t_veth = started.elapsed();
        let configured = async {
            let (conn, pod_handle, _) = self
                .worker
                .run_in(&ns, rtnetlink::new_connection)
                .await
                .map_err(io_failed("cannot open a netlink socket in the pod"))?;
            let task = tokio::spawn(conn);
            let mac = links::configure_pod_side(
                &pod_handle,
                ip,
                self.pod_cidr.prefix,
                self.pod_cidr.gateway(),
            )
            .await;
            task.abort();
            Ok::<_, PodNetError>(mac?)
        }
        .await;
        tracing::debug!(
            ns_ms = t_ns.as_secs_f64() * 1e3,
            veth_ms = (t_veth - t_ns).as_secs_f64() * 1e3,
            pod_side_ms = (started.elapsed() - t_veth).as_secs_f64() * 1e3,
            "pod network attached"
        );
        let mac = match configured {
            Ok(mac) => mac,
            Err(e) => {
                let _ = links::delete(&self.host, host_index).await;
                return Err(e);
            }
        };
        let pod = Arc::new(PodNet {
            ns,
            ip,
            prefix: self.pod_cidr.prefix,
            gateway: self.pod_cidr.gateway(),
            mac,
            host_if,
            host_index,
            worker: self.worker.clone(),
            cluster_cidr: self.cluster_cidr,
            windows: self.windows,
            standins: Mutex::new(HashMap::new()),
        });
        self.lock().insert(sandbox_id.to_string(), pod.clone());
        let mut setup = match self.setup.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if setup.len() >= SETUP_SAMPLES {
            setup.pop_front();
        }
        setup.push_back(started.elapsed());
        Ok(pod)
    }

    /// Removes a sandbox's network: closes its stand-ins, deletes its veth pair (the namespace
    /// goes with the last reference).
    pub async fn detach(&self, sandbox_id: &str) {
        let Some(pod) = self.lock().remove(sandbox_id) else {
            return;
        };
        pod.stop_all();
        if let Err(e) = links::delete(&self.host, pod.host_index).await {
            tracing::warn!(error = %e, veth = pod.host_if, "cannot delete a pod's veth pair");
        }
    }

    /// Removes every pod's network and the bridge.
    pub async fn shutdown(&self) {
        let ids: Vec<String> = self.lock().keys().cloned().collect();
        for id in ids {
            self.detach(&id).await;
        }
        if let Err(e) = links::delete(&self.host, self.bridge_index).await {
            tracing::warn!(error = %e, bridge = self.bridge, "cannot delete an emulated node's bridge");
        }
    }
}

/// One emulated pod's network namespace and what runs in it.
#[derive(Debug)]
pub struct PodNet {
    ns: Arc<NetNs>,
    pub ip: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    pub mac: Option<String>,
    pub host_if: String,
    host_index: u32,
    worker: NsWorker,
    cluster_cidr: Net,
    windows: bool,
    standins: Mutex<HashMap<String, standin::StandIn>>,
}

impl std::fmt::Debug for NsWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NsWorker")
    }
}

impl PodNet {
    fn standins(&self) -> std::sync::MutexGuard<'_, HashMap<String, standin::StandIn>> {
        match self.standins.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Starts the stand-in of a container (replacing an earlier one of the same id).
    pub async fn start_standin(
        &self,
        container_id: &str,
        ports: &std::collections::BTreeSet<standin::Port>,
        who: standin::Identity,
        log: Arc<standin::ContainerLog>,
    ) {
        self.standins().remove(container_id);
        let s = standin::start(&self.worker, &self.ns, ports, who, log).await;
        self.standins().insert(container_id.to_string(), s);
    }

    /// Stops a container's stand-in: its ports refuse connections again.
    pub fn stop_standin(&self, container_id: &str) {
        self.standins().remove(container_id);
    }

    fn stop_all(&self) {
        self.standins().clear();
    }

    /// A TCP connection from inside the pod.
    pub async fn tcp_connect(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> io::Result<tokio::net::TcpStream> {
        let socket = self
            .worker
            .run_in(&self.ns, move || match addr {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
            })
            .await?;
        match tokio::time::timeout(timeout, socket.connect(addr)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection timed out",
            )),
        }
    }

    /// A UDP socket bound to `0.0.0.0:0` inside the pod.
    pub async fn udp_socket(&self) -> io::Result<tokio::net::UdpSocket> {
        let s = self
            .worker
            .run_in(&self.ns, || {
                let s = std::net::UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .await?;
        tokio::net::UdpSocket::from_std(s)
    }

    /// Whether an ICMP echo to `dst` can be answered: on a Windows node, ICMP to destinations
    /// outside the pod network is not (the Windows data plane does not translate ICMP; the
    /// reference documents' "Windows Pods do not have outbound rules programmed for the ICMP
    /// protocol"). TCP and UDP are not affected.
    pub fn icmp_allowed(&self, dst: Ipv4Addr) -> bool {
        !self.windows || self.cluster_cidr.contains(dst) || dst == self.gateway
    }

    /// One ICMP echo request from inside the pod: `Ok(Some((rtt, ttl)))` on a reply, `Ok(None)`
    /// when none came within `timeout`, an error of kind `PermissionDenied` when the node's data
    /// plane does not carry ICMP to `dst` (see [`PodNet::icmp_allowed`]).
    pub async fn icmp_echo(
        &self,
        dst: Ipv4Addr,
        seq: u16,
        timeout: Duration,
    ) -> io::Result<Option<(Duration, u8)>> {
        if !self.icmp_allowed(dst) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the Windows data plane does not answer ICMP to destinations outside the pod network",
            ));
        }
        icmp::echo(&self.worker, &self.ns, dst, seq, timeout).await
    }
}

mod icmp {
    //! ICMP echo over a raw socket opened in the pod's namespace.

    use std::io::{self, Read};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use socket2::{Domain, Protocol, Socket, Type};

    use super::netns::{NetNs, NsWorker};

    fn checksum(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum = sum.wrapping_add(u32::from(word));
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    pub async fn echo(
        worker: &NsWorker,
        ns: &Arc<NetNs>,
        dst: Ipv4Addr,
        seq: u16,
        timeout: Duration,
    ) -> io::Result<Option<(Duration, u8)>> {
        let socket = worker
            .run_in(ns, || {
                let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
                Ok(s)
            })
            .await?;
        let id = (std::process::id() as u16) ^ seq.rotate_left(7);
        let mut packet = vec![8u8, 0, 0, 0];
        packet.extend_from_slice(&id.to_be_bytes());
        packet.extend_from_slice(&seq.to_be_bytes());
        packet.extend_from_slice(&[0x61; 24]);
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
        let sent = Instant::now();
        socket.send_to(&packet, &SocketAddrV4::new(dst, 0).into())?;
        // Replies are awaited on a blocking thread: tokio's reactor takes raw sockets only
        // through an unsafe registration.
        tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 1500];
            loop {
                let left = timeout.saturating_sub(sent.elapsed());
                if left.is_zero() {
                    return Ok(None);
                }
                socket.set_read_timeout(Some(left))?;
                let n = match (&socket).read(&mut buf) {
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                };
                let Some(&vihl) = buf.first() else { continue };
                let ihl = usize::from(vihl & 0x0f) * 4;
                if n < ihl + 8 || buf.get(12..16) != Some(&dst.octets()[..]) {
                    continue;
                }
                let icmp = &buf[ihl..n];
                let reply_id = u16::from_be_bytes([icmp[4], icmp[5]]);
                let reply_seq = u16::from_be_bytes([icmp[6], icmp[7]]);
                if icmp[0] == 0 && reply_id == id && reply_seq == seq {
                    return Ok(Some((sent.elapsed(), buf[8])));
                }
            }
        })
        .await
        .map_err(|_| io::Error::other("the ICMP reader stopped"))?
    }
}
