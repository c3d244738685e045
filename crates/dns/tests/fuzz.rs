//! Property tests of the cluster DNS server against hostile input, as CoreDNS is fuzzed upstream
//! (its `kubernetes` plugin has a fuzz target over arbitrary messages):
//!
//! - the zone lookup ([`Index::lookup`]) answers any name and record type without panicking,
//!   and the index accepts any Service or EndpointSlice the API would store;
//! - the server, over TCP (where every message long enough to hold a header and not itself a
//!   response must get exactly one reply), answers arbitrary bytes and mutated queries with a
//!   reply carrying the query's ID, and keeps serving: a panic in the handler would close the
//!   connection without a reply;
//! - over UDP, a burst of garbage does not stop any worker from answering.
//!
//! hickory parses the wire format; what is tested is tandem's handling of whatever parses.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

#[path = "../../core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use proptest::prelude::*;
use serde_json::{Value, json};
use tandem_dns::{DnsConfig, DnsServer, Index};

use fuzz_support::{ensure, hostile_text, property};

const LIMIT: Duration = Duration::from_secs(40);

fn index() -> Index {
    let mut index = Index::new("cluster.local", 30).unwrap();
    for s in [
        json!({"metadata": {"name": "kubernetes", "namespace": "default"},
               "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}}),
        json!({"metadata": {"name": "ext", "namespace": "default"},
               "spec": {"type": "ExternalName", "externalName": "db.example.com"}}),
        json!({"metadata": {"name": "web", "namespace": "ns"},
               "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
        json!({"metadata": {"name": "v6", "namespace": "ns"},
               "spec": {"clusterIP": "fd00::10", "clusterIPs": ["fd00::10", "10.96.0.9"]}}),
    ] {
        index.upsert_service(&serde_json::from_value::<Service>(s).unwrap());
    }
    let endpoints: Vec<Value> = (0..40)
        .map(|i| {
            json!({"addresses": [format!("10.244.1.{}", i + 1)], "hostname": format!("web-{i}"),
                        "conditions": {"ready": i % 5 != 0}})
        })
        .collect();
    let slice = json!({
        "metadata": {"name": "web-1", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    });
    index.upsert_endpoint_slice(&serde_json::from_value::<EndpointSlice>(slice).unwrap());
    index.upsert_namespace("ns");
    index
}

/// Names around the cluster zone: services, pods, SRV, reverse zones, and near misses.
fn name_text() -> impl Strategy<Value = String> {
    let label = prop_oneof![
        4 => proptest::sample::select(vec![
            "kubernetes", "default", "svc", "cluster", "local", "ns", "web", "web-3", "ext", "v6",
            "pod", "_http", "_tcp", "_udp", "10-244-1-3", "fd00--10", "1", "0", "244", "10",
            "in-addr", "arpa", "ip6", "a", "*", "xn--bcher-kva", "-", "", "WEB", "Svc",
        ])
        .prop_map(str::to_string),
        1 => hostile_text(5),
        1 => "[0-9a-f]{1,2}",
    ];
    (proptest::collection::vec(label, 0..9), any::<bool>()).prop_map(|(labels, fqdn)| {
        let mut name = labels.join(".");
        if fqdn {
            name.push('.');
        }
        name
    })
}

fn record_type() -> impl Strategy<Value = RecordType> {
    prop_oneof![
        4 => proptest::sample::select(vec![
            RecordType::A, RecordType::AAAA, RecordType::SRV, RecordType::PTR, RecordType::CNAME,
            RecordType::TXT, RecordType::NS, RecordType::SOA, RecordType::ANY, RecordType::AXFR,
            RecordType::IXFR, RecordType::MX, RecordType::OPT,
        ]),
        1 => any::<u16>().prop_map(RecordType::from),
    ]
}

#[test]
fn zone_lookups_of_any_name_never_panic() {
    let index = Arc::new(index());
    property(
        "lookup",
        3000,
        LIMIT,
        (name_text(), record_type()),
        move |(text, qtype)| {
            if let Ok(name) = Name::from_utf8(&text) {
                let _ = index.lookup(&name, qtype);
            }
            if let Ok(name) = Name::from_ascii(&text) {
                let _ = index.lookup(&name, qtype);
            }
            Ok(())
        },
    );
}

#[test]
fn any_service_or_endpoint_slice_is_indexed_without_panicking() {
    let text = || {
        prop_oneof![
            proptest::sample::select(vec![
                "None",
                "",
                "10.96.0.5",
                "fd00::5",
                "::",
                "0.0.0.0",
                "255.255.255.255",
                "1.2.3",
                "a.b.c",
                "web",
                "-",
                "ExternalName",
                "ClusterIP",
                "Headless",
                "db.example.com.",
                "..",
                "*",
                "UDP",
                "TCP",
                "SCTP",
            ])
            .prop_map(str::to_string),
            hostile_text(8),
        ]
    };
    let service = (
        text(),
        text(),
        text(),
        text(),
        proptest::collection::vec(text(), 0..3),
        text(),
        any::<i32>(),
    )
        .prop_map(|(name, ns, ty, ip, ips, ext, port)| {
            json!({"metadata": {"name": name, "namespace": ns},
                   "spec": {"type": ty, "clusterIP": ip, "clusterIPs": ips, "externalName": ext,
                            "ports": [{"name": name, "port": port, "protocol": ty}]}})
        });
    let slice = (
        text(),
        text(),
        text(),
        proptest::collection::vec((text(), text(), any::<bool>()), 0..4),
        any::<i32>(),
    )
        .prop_map(|(name, service, family, endpoints, port)| {
            let endpoints: Vec<Value> = endpoints
                .into_iter()
                .map(|(address, host, ready)| {
                    json!({"addresses": [address], "hostname": host,
                                                     "conditions": {"ready": ready}})
                })
                .collect();
            json!({"metadata": {"name": name, "namespace": "ns",
                                "labels": {"kubernetes.io/service-name": service}},
                   "addressType": family, "endpoints": endpoints,
                   "ports": [{"name": service, "port": port}]})
        });
    property(
        "index",
        800,
        LIMIT,
        (service, slice, name_text(), record_type()),
        |(service, slice, text, qtype)| {
            let mut index = index();
            if let Ok(service) = serde_json::from_value::<Service>(service) {
                index.upsert_service(&service);
            }
            if let Ok(slice) = serde_json::from_value::<EndpointSlice>(slice) {
                index.upsert_endpoint_slice(&slice);
            }
            for name in [
                text.as_str(),
                "web.ns.svc.cluster.local.",
                "_http._tcp.web.ns.svc.cluster.local.",
            ] {
                if let Ok(name) = Name::from_utf8(name) {
                    let _ = index.lookup(&name, qtype);
                }
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// The server over the wire.

fn query(id: u16, name: &str, qtype: RecordType, edns: Option<u16>, extra: bool) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    let name = Name::from_ascii(name).unwrap();
    message.add_query(Query::query(name.clone(), qtype));
    if extra {
        let mut q = Query::query(name, RecordType::A);
        q.set_query_class(DNSClass::CH);
        message.add_query(q);
    }
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        message.set_edns(e);
    }
    message.to_vec().unwrap()
}

/// Valid queries the mutations start from.
fn seeds() -> Vec<Vec<u8>> {
    vec![
        query(
            1,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
            false,
        ),
        query(
            2,
            "web.ns.svc.cluster.local.",
            RecordType::A,
            Some(4096),
            false,
        ),
        query(
            3,
            "_http._tcp.web.ns.svc.cluster.local.",
            RecordType::SRV,
            Some(512),
            false,
        ),
        query(4, "1.0.96.10.in-addr.arpa.", RecordType::PTR, None, false),
        query(
            5,
            "ext.default.svc.cluster.local.",
            RecordType::CNAME,
            Some(1232),
            true,
        ),
        query(
            6,
            "10-244-1-3.ns.pod.cluster.local.",
            RecordType::AAAA,
            None,
            false,
        ),
        query(7, "example.com.", RecordType::MX, None, false),
    ]
}

/// A server with no upstreams (forwarded names get SERVFAIL at once), on a runtime of its own.
fn start_server() -> (tokio::runtime::Runtime, DnsServer, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(async {
        let config = DnsConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            ..DnsConfig::default()
        };
        DnsServer::start_with_index(config, Arc::new(RwLock::new(index())))
            .await
            .unwrap()
    });
    let at = server.local_addrs()[0];
    (rt, server, at)
}

fn connect(at: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&at, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends one framed message and reads one framed reply; `None` when the connection ended.
fn exchange(stream: &mut TcpStream, packet: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(packet.len()).ok()?;
    // One write: a prefix and body sent apart wait on Nagle and delayed ACKs.
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(packet);
    stream.write_all(&framed).ok()?;
    let mut prefix = [0u8; 2];
    stream.read_exact(&mut prefix).ok()?;
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
    stream.read_exact(&mut reply).ok()?;
    Some(reply)
}

/// A message the server must answer: at least a header, with the QR bit clear.
fn as_query(mut packet: Vec<u8>) -> Vec<u8> {
    packet.resize(packet.len().max(12), 0);
    packet[2] &= 0x7f;
    packet
}

fn answered(stream: &Mutex<TcpStream>, at: SocketAddr, packet: &[u8]) -> Result<(), TestCaseError> {
    let mut stream = stream
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let reply = exchange(&mut stream, packet);
    // Whatever happened, the next case starts on a fresh connection if this one ended.
    if reply.is_none() {
        *stream = connect(at);
    }
    let reply = reply.ok_or_else(|| {
        TestCaseError::fail(format!("no reply to {packet:02x?}: the connection ended"))
    })?;
    ensure(reply.len() >= 12 && reply[..2] == packet[..2], || {
        format!("reply {reply:02x?} to {packet:02x?} does not carry the query's ID")
    })?;
    ensure(reply[2] & 0x80 != 0, || {
        format!("reply {reply:02x?} is not a response")
    })
}

/// Inputs that once failed (none so far from the handler); kept replayed with the seeds.
const REGRESSIONS: &[&[u8]] = &[
    &[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    &[0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
    &[0, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    &[0, 1, 0x78, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1],
    &[
        0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0x29, 0x10, 0, 0xff, 0, 0, 0, 0, 0,
    ],
];

#[test]
fn the_server_answers_every_malformed_message_over_tcp_and_keeps_serving() {
    let (rt, server, at) = start_server();
    let mut stream = connect(at);
    let mut inputs: Vec<Vec<u8>> = REGRESSIONS.iter().map(|p| p.to_vec()).collect();
    inputs.extend(seeds());
    for packet in &inputs {
        let mutex = Mutex::new(stream);
        answered(&mutex, at, packet).unwrap();
        stream = mutex.into_inner().unwrap();
    }
    drop(stream);

    let stream = Arc::new(Mutex::new(connect(at)));
    let seeds = seeds();
    let count = seeds.len();
    let packet = prop_oneof![
        proptest::collection::vec(any::<u8>(), 12..80),
        (
            0..count,
            proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 1..6),
        )
            .prop_map(move |(i, edits)| {
                let mut p = seeds[i].clone();
                for (at, byte, kind) in edits {
                    let n = p.len();
                    match kind {
                        0 => p[at % n] = byte,
                        1 => p[at % n] ^= 1 << (byte % 8),
                        2 => p.truncate((at % n).max(12)),
                        _ => p.insert(at % n, byte),
                    }
                }
                p
            }),
    ]
    .prop_map(as_query);
    property(
        "dns-tcp",
        1500,
        Duration::from_secs(90),
        packet,
        move |packet| answered(&stream, at, &packet),
    );
    // Still serving a real query.
    let mut fresh = connect(at);
    let probe = query(
        99,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
        false,
    );
    let reply = exchange(&mut fresh, &probe).unwrap();
    let message = Message::from_vec(&reply).unwrap();
    assert_eq!(message.answers.len(), 1);
    drop(server);
    rt.shutdown_timeout(Duration::from_secs(5));
}

#[test]
fn a_burst_of_udp_garbage_leaves_every_worker_answering() {
    let (rt, server, at) = start_server();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let seeds = seeds();
    for i in 0..2000u64 {
        let mut packet = seeds[(i % seeds.len() as u64) as usize].clone();
        for _ in 0..(next() % 6) {
            let n = packet.len();
            let at = (next() as usize) % n;
            packet[at] = next() as u8;
        }
        if i % 3 == 0 {
            packet = (0..(next() % 64)).map(|_| next() as u8).collect();
        }
        let _ = socket.send_to(&packet, at);
        if i % 100 == 0 {
            // Drain what came back so the socket buffer never fills.
            let mut buf = [0u8; 4096];
            while socket.recv_from(&mut buf).is_ok() {}
        }
    }
    let mut buf = [0u8; 4096];
    while socket.recv_from(&mut buf).is_ok() {}
    // More probes than workers: each is answered, so no worker died.
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for id in 0..16u16 {
        let probe = query(
            1000 + id,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
            false,
        );
        socket.send_to(&probe, at).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "probe {id} not answered"
            );
            let (len, _) = socket.recv_from(&mut buf).unwrap();
            if len >= 2 && buf[..2] == probe[..2] {
                break;
            }
        }
    }
    drop(server);
    rt.shutdown_timeout(Duration::from_secs(5));
}
