//! Name resolution from inside the pod: the names a resolver tries for a name (Windows' single
//! suffix or glibc's search list with ndots), and DNS over UDP (TCP after a truncated reply)
//! through [`PodNetwork`](super::PodNetwork).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::{DNS_DEADLINE, Env, Os};

/// How long one UDP or TCP query waits for its reply.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a query is sent to one server over UDP before the next server is tried.
const ATTEMPTS: u32 = 2;

/// Why no reply was had.
#[derive(Debug, thiserror::Error)]
pub(super) enum DnsError {
    #[error("no nameserver is configured")]
    NoNameserver,
    #[error("{0:?} is not a valid domain name")]
    BadName(String),
    #[error("no reply from {0} (timed out)")]
    Timeout(SocketAddr),
    #[error("DNS over {protocol} to {server} failed")]
    Io {
        protocol: &'static str,
        server: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The end of a search through the candidate names.
#[derive(Debug)]
pub(super) enum Outcome {
    /// A reply with records of the asked type (possibly behind CNAMEs) for `name`.
    Found {
        name: String,
        reply: Message,
        server: SocketAddr,
    },
    /// Every candidate failed; `code` is NXDOMAIN, or NOERROR when some name existed without
    /// records of the type (NODATA), or the last server failure.
    NotFound {
        code: ResponseCode,
        /// The last reply (its authority section may hold the zone's SOA).
        reply: Option<Message>,
    },
}

/// The names tried for `name`, in order, each fully qualified (ending in `.`).
///
/// Windows (the DNS client as Kubernetes documents it for Windows pods): a name with a dot is
/// fully qualified; a single label gets the one suffix, the first search domain.
///
/// Linux (glibc `res_search`): a trailing dot means no search; with at least `ndots` dots the
/// name is tried first, then with each search domain; with fewer, the search domains come first.
pub(super) fn candidates(os: Os, searches: &[String], ndots: u32, name: &str) -> Vec<String> {
    let name = name.trim();
    if name.ends_with('.') {
        return vec![name.to_string()];
    }
    let absolute = format!("{name}.");
    let with = |suffix: &String| format!("{name}.{}.", suffix.trim_matches('.'));
    match os {
        Os::Windows => {
            if name.contains('.') {
                vec![absolute]
            } else {
                match searches.iter().find(|s| !s.trim_matches('.').is_empty()) {
                    Some(suffix) => vec![with(suffix)],
                    None => vec![absolute],
                }
            }
        }
        Os::Linux => {
            let dots = u32::try_from(name.matches('.').count()).unwrap_or(u32::MAX);
            let searched = searches
                .iter()
                .filter(|s| !s.trim_matches('.').is_empty())
                .map(with);
            if dots >= ndots {
                std::iter::once(absolute).chain(searched).collect()
            } else {
                searched.chain(std::iter::once(absolute)).collect()
            }
        }
    }
}

/// The pod's nameservers as socket addresses.
pub(super) fn servers(env: &Env<'_>) -> Vec<SocketAddr> {
    env.ctx
        .dns
        .nameservers
        .iter()
        .map(|ip| SocketAddr::new(*ip, env.dns_port))
        .collect()
}

/// Searches for `name` with the pod's rules, asking `servers` (the pod's when empty), within
/// [`DNS_DEADLINE`].
pub(super) async fn search(
    env: &Env<'_>,
    name: &str,
    qtype: RecordType,
    servers_override: Option<Vec<SocketAddr>>,
) -> Result<Outcome, DnsError> {
    let servers = servers_override.unwrap_or_else(|| servers(env));
    if servers.is_empty() {
        return Err(DnsError::NoNameserver);
    }
    let dns = &env.ctx.dns;
    let names = candidates(env.os, &dns.searches, dns.ndots, name);
    let deadline = Instant::now() + DNS_DEADLINE;
    let mut code = ResponseCode::NXDomain;
    let mut nodata = false;
    let mut last_reply = None;
    for candidate in names {
        let query_name =
            Name::from_ascii(&candidate).map_err(|_| DnsError::BadName(name.into()))?;
        let (reply, server) = ask_any(env, &servers, &query_name, qtype, deadline).await?;
        match reply.metadata.response_code {
            ResponseCode::NoError if has_answer(&reply, qtype) => {
                return Ok(Outcome::Found {
                    name: candidate.trim_end_matches('.').to_string(),
                    reply,
                    server,
                });
            }
            ResponseCode::NoError => nodata = true,
            ResponseCode::NXDomain => {}
            other => code = other,
        }
        last_reply = Some(reply);
    }
    if nodata {
        code = ResponseCode::NoError;
    }
    Ok(Outcome::NotFound {
        code,
        reply: last_reply,
    })
}

/// Whether `reply` answers `qtype` (ANY: any record).
fn has_answer(reply: &Message, qtype: RecordType) -> bool {
    reply
        .answers
        .iter()
        .any(|r| qtype == RecordType::ANY || r.record_type() == qtype)
}

/// Asks the servers in turn until one replies other than SERVFAIL/REFUSED (which moves on to
/// the next server, keeping the reply in case none does better).
async fn ask_any(
    env: &Env<'_>,
    servers: &[SocketAddr],
    name: &Name,
    qtype: RecordType,
    deadline: Instant,
) -> Result<(Message, SocketAddr), DnsError> {
    let mut fallback: Option<(Message, SocketAddr)> = None;
    let mut last_error = DnsError::NoNameserver;
    for &server in servers {
        let asked = tokio::time::timeout_at(deadline, query(env, server, name, qtype, ATTEMPTS));
        match asked.await {
            Err(_) => {
                last_error = DnsError::Timeout(server);
                break;
            }
            Ok(Ok(reply)) => match reply.metadata.response_code {
                ResponseCode::ServFail | ResponseCode::Refused => fallback = Some((reply, server)),
                _ => return Ok((reply, server)),
            },
            Ok(Err(e)) => last_error = e,
        }
    }
    fallback.ok_or(last_error)
}

/// One query to one server: UDP, `attempts` times [`ATTEMPT_TIMEOUT`], then TCP when the reply
/// was truncated.
pub(super) async fn query(
    env: &Env<'_>,
    server: SocketAddr,
    name: &Name,
    qtype: RecordType,
    attempts: u32,
) -> Result<Message, DnsError> {
    let id = random_id();
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name.clone(), qtype));
    let packet = message
        .to_vec()
        .map_err(|_| DnsError::BadName(name.to_string()))?;
    let io = |source| DnsError::Io {
        protocol: "UDP",
        server,
        source,
    };
    let socket = env.ctx.net.udp_socket().await.map_err(io)?;
    let mut reply = None;
    for _ in 0..attempts.max(1) {
        socket.send_to(&packet, server).await.map_err(io)?;
        match tokio::time::timeout(ATTEMPT_TIMEOUT, receive(&socket, server, id)).await {
            Ok(Ok(message)) => {
                reply = Some(message);
                break;
            }
            Ok(Err(e)) => return Err(io(e)),
            Err(_) => {}
        }
    }
    let reply = reply.ok_or(DnsError::Timeout(server))?;
    if reply.metadata.truncation {
        return query_tcp(env, server, &packet, id).await;
    }
    Ok(reply)
}

/// The first well-formed reply from `server` with `id`; others are ignored.
async fn receive(
    socket: &tokio::net::UdpSocket,
    server: SocketAddr,
    id: u16,
) -> std::io::Result<Message> {
    let mut buffer = vec![0u8; 65535];
    loop {
        let (len, from) = socket.recv_from(&mut buffer).await?;
        if from != server {
            continue;
        }
        if let Ok(message) = Message::from_vec(&buffer[..len])
            && message.metadata.id == id
            && message.metadata.message_type == MessageType::Response
        {
            return Ok(message);
        }
    }
}

/// The query again over TCP, length-prefixed.
async fn query_tcp(
    env: &Env<'_>,
    server: SocketAddr,
    packet: &[u8],
    id: u16,
) -> Result<Message, DnsError> {
    let io = |source| DnsError::Io {
        protocol: "TCP",
        server,
        source,
    };
    let exchange = async {
        let mut stream = env.ctx.net.tcp_connect(server, ATTEMPT_TIMEOUT).await?;
        let len = u16::try_from(packet.len()).map_err(std::io::Error::other)?;
        let mut framed = Vec::with_capacity(packet.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(packet);
        stream.write_all(&framed).await?;
        loop {
            let mut prefix = [0u8; 2];
            stream.read_exact(&mut prefix).await?;
            let mut body = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
            stream.read_exact(&mut body).await?;
            let message = Message::from_vec(&body).map_err(std::io::Error::other)?;
            if message.metadata.id == id {
                return Ok::<_, std::io::Error>(message);
            }
        }
    };
    match tokio::time::timeout(ATTEMPT_TIMEOUT, exchange).await {
        Ok(result) => result.map_err(io),
        Err(_) => Err(DnsError::Timeout(server)),
    }
}

/// A query id no one can guess from the previous one.
fn random_id() -> u16 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    (hasher.finish() & 0xffff) as u16
}

/// The `in-addr.arpa.`/`ip6.arpa.` name of `ip`, for PTR queries.
pub(super) fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.in-addr.arpa.", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut name = String::new();
            for byte in v6.octets().iter().rev() {
                name.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            name.push_str("ip6.arpa.");
            name
        }
    }
}

/// Why a host name gave no address.
#[derive(Debug, thiserror::Error)]
pub(super) enum HostError {
    #[error("{0:?} was not found")]
    NotFound(String),
    #[error("resolving {name:?} failed")]
    Dns {
        name: String,
        #[source]
        source: DnsError,
    },
}

/// Where a host name led.
#[derive(Debug, Clone)]
pub(super) struct HostAddrs {
    /// The name that answered (`web.default.svc.cluster.local` for `web`), or the input for an
    /// address or a hosts-file name.
    pub(super) canonical: String,
    pub(super) addrs: Vec<IpAddr>,
}

/// An address for a host name as the pod's resolver finds it: an address literal, the hosts
/// file (`localhost`, the pod's own hostname), then DNS A records with the pod's rules.
pub(super) async fn resolve_host(env: &Env<'_>, host: &str) -> Result<HostAddrs, HostError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(HostAddrs {
            canonical: bare.to_string(),
            addrs: vec![ip],
        });
    }
    let plain = host.trim_end_matches('.');
    let ctx = env.ctx;
    let hosts_file: Option<IpAddr> = if plain.eq_ignore_ascii_case("localhost") {
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
    } else if plain.eq_ignore_ascii_case("ip6-localhost") {
        Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
    } else if plain.eq_ignore_ascii_case(&ctx.hostname) || plain.eq_ignore_ascii_case(&ctx.pod) {
        ctx.ip.map(IpAddr::V4)
    } else {
        None
    };
    if let Some(ip) = hosts_file {
        return Ok(HostAddrs {
            canonical: plain.to_string(),
            addrs: vec![ip],
        });
    }
    let outcome = search(env, host, RecordType::A, None)
        .await
        .map_err(|source| HostError::Dns {
            name: host.to_string(),
            source,
        })?;
    match outcome {
        Outcome::Found { name, reply, .. } => {
            let addrs: Vec<IpAddr> = reply
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    _ => None,
                })
                .collect();
            if addrs.is_empty() {
                return Err(HostError::NotFound(host.to_string()));
            }
            Ok(HostAddrs {
                canonical: name,
                addrs,
            })
        }
        Outcome::NotFound { .. } => Err(HostError::NotFound(host.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn searches() -> Vec<String> {
        [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn windows_uses_one_suffix_and_treats_dotted_names_as_fully_qualified() {
        assert_eq!(
            candidates(Os::Windows, &searches(), 5, "web"),
            ["web.default.svc.cluster.local."]
        );
        assert_eq!(
            candidates(Os::Windows, &searches(), 5, "web.default"),
            ["web.default."]
        );
        assert_eq!(
            candidates(Os::Windows, &searches(), 5, "web.default.svc.cluster.local"),
            ["web.default.svc.cluster.local."]
        );
    }

    #[test]
    fn linux_searches_first_below_ndots_and_last_at_or_above() {
        assert_eq!(
            candidates(Os::Linux, &searches(), 5, "web.default"),
            [
                "web.default.default.svc.cluster.local.",
                "web.default.svc.cluster.local.",
                "web.default.cluster.local.",
                "web.default.",
            ]
        );
        assert_eq!(
            candidates(Os::Linux, &searches(), 1, "example.com"),
            [
                "example.com.",
                "example.com.default.svc.cluster.local.",
                "example.com.svc.cluster.local.",
                "example.com.cluster.local.",
            ]
        );
        assert_eq!(
            candidates(Os::Linux, &searches(), 5, "web.default."),
            ["web.default."]
        );
    }

    #[test]
    fn reverse_names() {
        assert_eq!(
            reverse_name(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))),
            "10.0.96.10.in-addr.arpa."
        );
        assert!(reverse_name(IpAddr::V6(Ipv6Addr::LOCALHOST)).starts_with("1.0.0.0."));
    }
}
