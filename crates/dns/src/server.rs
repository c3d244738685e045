//! The sockets: UDP and TCP on each listen address, answering from the index through
//! [`Handler`] and forwarding the rest through [`Forwarder`].
//!
//! UDP: a few tasks per socket each receive, answer in place (an index lookup takes
//! microseconds), and send; forwarded queries get a task of their own, bounded by the
//! forwarder's in-flight limit and timeouts. TCP (RFC 7766): at most [`MAX_TCP_CONNECTIONS`]
//! connections, each closed after [`TCP_IDLE_TIMEOUT`] without a query or when a message or a
//! reply takes longer than [`TCP_IO_TIMEOUT`]; queries on one connection are answered in order.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::forward::{Forwarder, UPSTREAM_TIMEOUT};
use crate::handler::{Handler, Outcome, Transport};
use crate::records::Index;
use crate::{DnsConfig, DnsError, watch};

/// Open TCP connections at most; further clients wait in the listen backlog.
pub const MAX_TCP_CONNECTIONS: usize = 256;
/// A TCP connection without a query for this long is closed.
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Reading the rest of a TCP message, or writing a reply, may take this long.
pub const TCP_IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`DnsServer::start`] waits for the first lists from the API before serving anyway.
pub const SYNC_WAIT: Duration = Duration::from_secs(5);
/// Large enough for any query a client sends over UDP (EDNS allows up to 4096 and more).
const UDP_BUFFER: usize = 4096;
/// A port-0 listen address gets a free UDP port, which may be taken for TCP: retried this often.
const BIND_ATTEMPTS: usize = 8;

/// A running DNS server. Dropping it stops every task it started: sockets, connections,
/// forwarded queries and API watches.
#[derive(Debug)]
pub struct DnsServer {
    local_addrs: Vec<SocketAddr>,
    index: Arc<RwLock<Index>>,
    tasks: Vec<JoinHandle<()>>,
}

struct Shared {
    handler: Handler,
    forwarder: Forwarder,
}

impl DnsServer {
    /// Serves the cluster zone of `config` from Services, EndpointSlices and Namespaces watched
    /// through `client`. Returns once the sockets are bound and the first lists are in, or after
    /// [`SYNC_WAIT`] if the API is slow (names that match nothing get SERVFAIL until then).
    pub async fn start(client: kube::Client, config: DnsConfig) -> Result<DnsServer, DnsError> {
        let mut index = Index::new(&config.cluster_domain, config.ttl)?;
        index.set_synced(false);
        let index = Arc::new(RwLock::new(index));
        let mut server = DnsServer::start_with_index(config, index.clone()).await?;
        let (watchers, mut synced) = watch::spawn(client, index);
        server.tasks.extend(watchers);
        if tokio::time::timeout(SYNC_WAIT, synced.wait_for(|done| *done))
            .await
            .is_err()
        {
            tracing::warn!("cluster DNS serving before its first lists from the API are in");
        }
        Ok(server)
    }

    /// Serves from `index` as it is and as the caller changes it; `config.cluster_domain` and
    /// `config.ttl` are not used (the index has its own).
    pub async fn start_with_index(
        config: DnsConfig,
        index: Arc<RwLock<Index>>,
    ) -> Result<DnsServer, DnsError> {
        if config.listen.is_empty() {
            return Err(DnsError::NoListenAddress);
        }
        let mut bound = Vec::with_capacity(config.listen.len());
        for addr in &config.listen {
            bound.push(bind(*addr).await?);
        }
        let local_addrs: Vec<SocketAddr> = bound.iter().map(|(_, _, a)| *a).collect();
        let shared = Arc::new(Shared {
            handler: Handler::new(index.clone()),
            forwarder: Forwarder::new(&config.upstreams, &local_addrs, UPSTREAM_TIMEOUT),
        });
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 4);
        let tcp_slots = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
        let mut tasks = Vec::new();
        for (udp, tcp, addr) in bound {
            let udp = Arc::new(udp);
            for _ in 0..workers {
                tasks.push(tokio::spawn(udp_worker(udp.clone(), shared.clone())));
            }
            tasks.push(tokio::spawn(tcp_acceptor(
                tcp,
                shared.clone(),
                tcp_slots.clone(),
            )));
            tracing::info!(%addr, "cluster DNS listening on UDP and TCP");
        }
        Ok(DnsServer {
            local_addrs,
            index,
            tasks,
        })
    }

    /// Where the server listens (UDP and TCP on each), with ports chosen for port-0 addresses.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The index answers come from.
    pub fn index(&self) -> &Arc<RwLock<Index>> {
        &self.index
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A UDP socket and a TCP listener on the same address and port.
async fn bind(addr: SocketAddr) -> Result<(UdpSocket, TcpListener, SocketAddr), DnsError> {
    let failed = |source| DnsError::Bind { addr, source };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let udp = UdpSocket::bind(addr).await.map_err(failed)?;
        let local = udp.local_addr().map_err(failed)?;
        match TcpListener::bind(local).await {
            Ok(tcp) => return Ok((udp, tcp, local)),
            Err(e) if addr.port() == 0 && e.kind() == ErrorKind::AddrInUse => {
                if attempt >= BIND_ATTEMPTS {
                    return Err(failed(e));
                }
            }
            Err(e) => return Err(failed(e)),
        }
    }
}

async fn udp_worker(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; UDP_BUFFER];
    // Dropped with the worker, which aborts the forwards still out.
    let mut forwards = JoinSet::new();
    loop {
        while forwards.try_join_next().is_some() {}
        let (len, peer) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(e) => {
                tracing::debug!(error = %e, "DNS UDP receive failed");
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let packet = &buffer[..len];
        let reply = match shared.handler.handle(packet, Transport::Udp) {
            Outcome::Drop => continue,
            Outcome::Reply(reply) => reply,
            Outcome::Forward { servfail } => match shared.forwarder.permit() {
                None => servfail,
                Some(permit) => {
                    let (query, socket, shared) = (packet.to_vec(), socket.clone(), shared.clone());
                    forwards.spawn(async move {
                        let reply = shared.forwarder.udp(&query).await.unwrap_or(servfail);
                        drop(permit);
                        send(&socket, &reply, peer).await;
                    });
                    continue;
                }
            },
        };
        send(&socket, &reply, peer).await;
    }
}

async fn send(socket: &UdpSocket, reply: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(reply, peer).await {
        tracing::debug!(%peer, error = %e, "DNS UDP send failed");
    }
}

async fn tcp_acceptor(listener: TcpListener, shared: Arc<Shared>, slots: Arc<Semaphore>) {
    // Dropped with the acceptor, which closes every connection.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: let some connections end first.
                tracing::debug!(error = %e, "DNS TCP accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let shared = shared.clone();
        connections.spawn(async move {
            tcp_connection(stream, &shared).await;
            drop(slot);
        });
    }
}

/// Answers length-prefixed queries on one connection until the client closes it, goes idle,
/// or sends something that cannot be a DNS message.
async fn tcp_connection(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    loop {
        let mut prefix = [0u8; 2];
        match tokio::time::timeout(TCP_IDLE_TIMEOUT, stream.read_exact(&mut prefix)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        if len < 12 {
            return;
        }
        let mut packet = vec![0u8; len];
        match tokio::time::timeout(TCP_IO_TIMEOUT, stream.read_exact(&mut packet)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let reply = match shared.handler.handle(&packet, Transport::Tcp) {
            Outcome::Drop => continue,
            Outcome::Reply(reply) => reply,
            Outcome::Forward { servfail } => match shared.forwarder.permit() {
                None => servfail,
                Some(_permit) => shared.forwarder.tcp(&packet).await.unwrap_or(servfail),
            },
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&reply);
        match tokio::time::timeout(TCP_IO_TIMEOUT, stream.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}
