//! A UDP load generator for the DNS server, as `tandem bench services` runs it: `concurrency`
//! clients, each with its own socket, send A queries for `names` round-robin, one outstanding
//! query each, until `duration` has passed or `max_queries` have been sent. It lived in
//! `tandem-dns` until issue 23 moved the benchmarks out of the library crates.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::net::UdpSocket;
use tokio::task::JoinSet;

/// A query without a reply for this long counts as an error.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// At most this many clients.
const MAX_CONCURRENCY: usize = 1024;

/// What a load run measured.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadReport {
    /// Queries answered (NOERROR or NXDOMAIN).
    pub queries: u64,
    /// Answered queries per second of the run.
    pub qps: f64,
    /// Latency of answered queries (within about 6 %).
    pub p50: Duration,
    pub p99: Duration,
    /// Queries without a usable answer: no reply in [`QUERY_TIMEOUT`], a send or receive
    /// failure, or SERVFAIL, REFUSED, FORMERR or NOTIMP.
    pub errors: u64,
    /// How long the run took.
    pub elapsed: Duration,
}

/// Runs the load against `server` and reports. Names that are not valid domain names are
/// skipped; with none left, or `max_queries` 0, nothing is sent. Returns within about
/// `duration` + [`QUERY_TIMEOUT`].
pub async fn query_load(
    server: SocketAddr,
    names: &[String],
    concurrency: usize,
    duration: Duration,
    max_queries: u64,
) -> LoadReport {
    let packets: Vec<Vec<u8>> = names.iter().filter_map(|n| query_packet(n)).collect();
    if packets.is_empty() || max_queries == 0 {
        return LoadReport::default();
    }
    let packets = Arc::new(packets);
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut clients = JoinSet::new();
    for _ in 0..concurrency.clamp(1, MAX_CONCURRENCY) {
        let (packets, issued) = (packets.clone(), issued.clone());
        clients.spawn(client(server, packets, issued, deadline, max_queries));
    }
    let mut total = Tally::default();
    while let Some(result) = clients.join_next().await {
        if let Ok(tally) = result {
            total.merge(&tally);
        }
    }
    let elapsed = start.elapsed();
    LoadReport {
        queries: total.answered,
        qps: total.answered as f64 / elapsed.as_secs_f64().max(1e-9),
        p50: total.latency.quantile(0.50),
        p99: total.latency.quantile(0.99),
        errors: total.errors,
        elapsed,
    }
}

/// An A query with RD set and id 0 (each send writes its own id).
fn query_packet(name: &str) -> Option<Vec<u8>> {
    let name = if name.ends_with('.') {
        Name::from_ascii(name)
    } else {
        Name::from_ascii(format!("{name}."))
    }
    .ok()?;
    let mut message = Message::new(0, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name, RecordType::A));
    message.to_vec().ok()
}

#[derive(Debug, Default)]
struct Tally {
    answered: u64,
    errors: u64,
    latency: Histogram,
}

impl Tally {
    fn merge(&mut self, other: &Tally) {
        self.answered += other.answered;
        self.errors += other.errors;
        self.latency.merge(&other.latency);
    }
}

async fn client(
    server: SocketAddr,
    packets: Arc<Vec<Vec<u8>>>,
    issued: Arc<AtomicU64>,
    deadline: Instant,
    max_queries: u64,
) -> Tally {
    let mut tally = Tally::default();
    let local = match server.ip() {
        IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        IpAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(socket) if socket.connect(server).await.is_ok() => socket,
        _ => {
            tally.errors += 1;
            return tally;
        }
    };
    let mut buffer = vec![0u8; usize::from(u16::MAX)];
    let mut id: u16 = rand_id(&socket);
    while Instant::now() < deadline {
        let n = issued.fetch_add(1, Ordering::Relaxed);
        if n >= max_queries {
            break;
        }
        let mut packet = packets[(n % packets.len() as u64) as usize].clone();
        id = id.wrapping_add(1);
        packet[..2].copy_from_slice(&id.to_be_bytes());
        let sent = Instant::now();
        if socket.send(&packet).await.is_err() {
            tally.errors += 1;
            // A refused port would otherwise spin until the deadline.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        match tokio::time::timeout(QUERY_TIMEOUT, reply(&socket, &mut buffer, id)).await {
            Ok(Some(0 | 3)) => {
                tally.answered += 1;
                tally.latency.record(sent.elapsed());
            }
            _ => tally.errors += 1,
        }
    }
    tally
}

/// Waits for the reply with `id` (late replies to earlier queries are skipped) and returns its
/// rcode; `None` on a receive error.
async fn reply(socket: &UdpSocket, buffer: &mut [u8], id: u16) -> Option<u8> {
    loop {
        let len = socket.recv(buffer).await.ok()?;
        let reply = &buffer[..len];
        if len >= 12 && reply[..2] == id.to_be_bytes() && reply[2] & 0x80 != 0 {
            return Some(reply[3] & 0x0f);
        }
    }
}

/// A starting id that differs between clients: their local ports do.
fn rand_id(socket: &UdpSocket) -> u16 {
    socket
        .local_addr()
        .map_or(0, |a| a.port().wrapping_mul(40503))
}

/// Latencies in microseconds, in buckets of 16 per power of two (a relative error under 6.25 %).
#[derive(Debug, Clone)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

const SUB_BUCKETS: u64 = 16;
const SUB_BITS: u32 = 4;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; Histogram::index(u64::MAX) + 1],
            total: 0,
        }
    }
}

impl Histogram {
    fn index(micros: u64) -> usize {
        if micros < SUB_BUCKETS {
            return micros as usize;
        }
        let power = 63 - micros.leading_zeros(); // ≥ SUB_BITS
        let shift = power - SUB_BITS;
        let sub = (micros >> shift) & (SUB_BUCKETS - 1);
        (SUB_BUCKETS + u64::from(shift) * SUB_BUCKETS + sub) as usize
    }

    /// The largest value that falls in bucket `index`.
    fn upper(index: usize) -> u64 {
        let index = index as u64;
        if index < SUB_BUCKETS {
            return index;
        }
        let shift = (index - SUB_BUCKETS) / SUB_BUCKETS;
        let sub = (index - SUB_BUCKETS) % SUB_BUCKETS;
        let low = (SUB_BUCKETS + sub) << shift;
        low.saturating_add((1u64 << shift) - 1)
    }

    fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.counts[Histogram::index(micros)] += 1;
        self.total += 1;
    }

    fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
    }

    fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((self.total as f64 * q).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_micros(Histogram::upper(index));
            }
        }
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for micros in 1..=10_000u64 {
            h.record(Duration::from_micros(micros));
        }
        let p50 = h.quantile(0.5).as_micros() as f64;
        let p99 = h.quantile(0.99).as_micros() as f64;
        assert!((5000.0..=5000.0 * 1.07).contains(&p50), "{p50}");
        assert!((9900.0..=9900.0 * 1.07).contains(&p99), "{p99}");
        assert_eq!(Histogram::default().quantile(0.5), Duration::ZERO);
    }

    #[test]
    fn every_value_lands_in_a_bucket_that_holds_it() {
        for micros in (0..5000u64).chain([u64::MAX / 2, u64::MAX]) {
            let index = Histogram::index(micros);
            assert!(Histogram::upper(index) >= micros, "{micros}");
            if index > 0 {
                assert!(Histogram::upper(index - 1) < micros, "{micros}");
            }
        }
    }

    #[test]
    fn invalid_names_are_skipped_and_nothing_is_sent_without_names() {
        assert!(query_packet("a.b").is_some());
        assert!(query_packet("a..b").is_none());
        let report = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| {
                rt.block_on(query_load(
                    "127.0.0.1:9"
                        .parse()
                        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9))),
                    &["a..b".to_string()],
                    4,
                    Duration::from_secs(5),
                    100,
                ))
            });
        assert_eq!(report.ok(), Some(LoadReport::default()));
    }

    /// The load against a real server answering from a small index: every query of a bounded
    /// run answered, and a run bounded in time ends in time.
    #[tokio::test]
    async fn the_load_measures_answered_queries_and_stops_in_time() {
        let mut index = tandem_dns::Index::new("cluster.local", 30).expect("index");
        let service = serde_json::json!({
            "metadata": { "name": "kubernetes", "namespace": "default" },
            "spec": { "clusterIP": "10.96.0.1",
                      "ports": [{ "name": "https", "port": 443, "protocol": "TCP" }] }
        });
        index.upsert_service(&serde_json::from_value(service).expect("service"));
        let config = tandem_dns::DnsConfig {
            listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
            ..tandem_dns::DnsConfig::default()
        };
        let index = Arc::new(std::sync::RwLock::new(index));
        let server = tandem_dns::DnsServer::start_with_index(config, index)
            .await
            .expect("dns server");
        let at = server.local_addrs()[0];
        let names: Vec<String> = ["kubernetes.default.svc.cluster.local", "nope.cluster.local"]
            .map(String::from)
            .to_vec();
        let report = query_load(at, &names, 4, Duration::from_secs(5), 2000).await;
        assert_eq!((report.queries, report.errors), (2000, 0), "{report:?}");
        assert!(report.qps > 0.0);
        assert!(report.p50 > Duration::ZERO && report.p50 <= report.p99);
        let report = query_load(at, &names, 2, Duration::from_millis(200), u64::MAX).await;
        assert!(report.elapsed < Duration::from_secs(2));
        assert!(report.queries > 0);
    }
}
