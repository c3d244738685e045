//! Questions the cluster zone does not answer go to the upstream resolvers, as kubeadm's
//! Corefile does with `forward . /etc/resolv.conf`: the query is sent as received, over the
//! transport it came on, to each upstream in turn until one replies, each given a bounded time.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long one upstream is given to answer.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many upstreams are tried, as a resolver reads at most three `nameserver` lines
/// (glibc's `MAXNS`).
const MAX_UPSTREAMS: usize = 3;
/// Forwarded queries in flight at once (each holds a socket and a 64 KiB reply buffer); beyond
/// that queries get SERVFAIL at once rather than piling up.
const MAX_IN_FLIGHT: usize = 512;

/// The upstream resolvers and the budget for asking them.
#[derive(Debug, Clone)]
pub(crate) struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    in_flight: Arc<Semaphore>,
}

impl Forwarder {
    /// `upstreams` in order of preference, without the server's own addresses (a resolver that
    /// names itself would make every forwarded query loop until it times out).
    pub(crate) fn new(upstreams: &[SocketAddr], own: &[SocketAddr], timeout: Duration) -> Self {
        let mut kept: Vec<SocketAddr> = Vec::new();
        for upstream in upstreams {
            if !own.contains(upstream) && !kept.contains(upstream) {
                kept.push(*upstream);
            }
        }
        kept.truncate(MAX_UPSTREAMS);
        Forwarder {
            upstreams: kept,
            timeout,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }

    /// A slot for one forwarded query, or `None` when there is no upstream or too many
    /// queries are already out: the caller answers SERVFAIL at once.
    pub(crate) fn permit(&self) -> Option<OwnedSemaphorePermit> {
        if self.upstreams.is_empty() {
            return None;
        }
        self.in_flight.clone().try_acquire_owned().ok()
    }

    /// The first upstream reply to `query` over UDP, `None` when none replies in time.
    pub(crate) async fn udp(&self, query: &[u8]) -> Option<Vec<u8>> {
        for upstream in &self.upstreams {
            match tokio::time::timeout(self.timeout, udp_exchange(*upstream, query)).await {
                Ok(Ok(reply)) => return Some(reply),
                Ok(Err(e)) => tracing::debug!(%upstream, error = %e, "upstream failed"),
                Err(_) => tracing::debug!(%upstream, "upstream timed out"),
            }
        }
        None
    }

    /// The first upstream reply to `query` over TCP, `None` when none replies in time.
    pub(crate) async fn tcp(&self, query: &[u8]) -> Option<Vec<u8>> {
        for upstream in &self.upstreams {
            match tokio::time::timeout(self.timeout, tcp_exchange(*upstream, query)).await {
                Ok(Ok(reply)) => return Some(reply),
                Ok(Err(e)) => tracing::debug!(%upstream, error = %e, "upstream failed"),
                Err(_) => tracing::debug!(%upstream, "upstream timed out"),
            }
        }
        None
    }
}

/// Sends `query` from a fresh socket (a new random source port each time) connected to
/// `upstream`, and waits for the reply that matches it; stray datagrams are skipped.
async fn udp_exchange(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let local = match upstream.ip() {
        IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        IpAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buffer = vec![0u8; usize::from(u16::MAX)];
    loop {
        let len = socket.recv(&mut buffer).await?;
        if is_reply_to(query, &buffer[..len]) {
            buffer.truncate(len);
            return Ok(buffer);
        }
    }
}

async fn tcp_exchange(upstream: SocketAddr, query: &[u8]) -> std::io::Result<Vec<u8>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let len = u16::try_from(query.len()).map_err(|_| invalid("query too long"))?;
    let mut stream = TcpStream::connect(upstream).await?;
    stream.set_nodelay(true)?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await?;
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix).await?;
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    stream.read_exact(&mut reply).await?;
    if is_reply_to(query, &reply) {
        Ok(reply)
    } else {
        Err(invalid("reply does not match the query"))
    }
}

/// A response (QR set) with the query's id.
fn is_reply_to(query: &[u8], reply: &[u8]) -> bool {
    reply.len() >= 12 && query.len() >= 2 && reply[..2] == query[..2] && reply[2] & 0x80 != 0
}

/// The `nameserver` addresses of a resolv.conf, on port 53, in order and each once. Lines that
/// do not parse are skipped, as are scoped IPv6 addresses (`fe80::1%eth0`).
pub fn upstreams_from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    let mut out: Vec<SocketAddr> = Vec::new();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        let addr = SocketAddr::new(ip, 53);
        if !out.contains(&addr) {
            out.push(addr);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

    use super::*;

    #[test]
    fn resolv_conf_nameservers_are_read_in_order() {
        let text = "\
# generated
search default.svc.cluster.local svc.cluster.local
nameserver 10.0.0.2
nameserver 2001:db8::53 # v6
 nameserver\t10.0.0.3
;nameserver 10.0.0.4
nameserver fe80::1%eth0
nameserver bogus
nameserver 10.0.0.2
options ndots:5
";
        assert_eq!(
            upstreams_from_resolv_conf(text),
            [
                "10.0.0.2:53".parse().unwrap(),
                "[2001:db8::53]:53".parse().unwrap(),
                "10.0.0.3:53".parse().unwrap(),
            ]
        );
        assert!(upstreams_from_resolv_conf("").is_empty());
    }

    #[test]
    fn own_addresses_and_extra_upstreams_are_left_out() {
        let own: SocketAddr = "127.0.0.1:5353".parse().unwrap();
        let ups: Vec<SocketAddr> = [
            "127.0.0.1:5353",
            "10.0.0.1:53",
            "10.0.0.2:53",
            "10.0.0.1:53",
        ]
        .iter()
        .chain(&["10.0.0.3:53", "10.0.0.4:53"])
        .map(|s| s.parse().unwrap())
        .collect();
        let f = Forwarder::new(&ups, &[own], UPSTREAM_TIMEOUT);
        assert_eq!(
            f.upstreams,
            ["10.0.0.1:53", "10.0.0.2:53", "10.0.0.3:53"].map(|s| s.parse::<SocketAddr>().unwrap())
        );
        assert!(
            Forwarder::new(&[], &[], UPSTREAM_TIMEOUT)
                .permit()
                .is_none()
        );
    }

    #[test]
    fn only_responses_with_the_query_id_are_replies() {
        let query = [0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        let mut reply = query;
        reply[2] |= 0x80;
        assert!(is_reply_to(&query, &reply));
        assert!(!is_reply_to(&query, &query));
        reply[1] = 0;
        assert!(!is_reply_to(&query, &reply));
        assert!(!is_reply_to(&query, &reply[..5]));
    }
}
