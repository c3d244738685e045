#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]
//! A real server on 127.0.0.1:0 over UDP and TCP, fed with an index built in the test, and
//! upstream resolvers played by sockets on loopback.

#[path = "common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Result;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;
use tandem_dns::{DnsConfig, DnsServer, Index};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use common::{Rng, data, query, tcp_ask, tcp_ask_many, udp_ask, udp_raw};

fn index() -> Index {
    let mut index = Index::new("cluster.local", 30).unwrap();
    let services = [
        json!({ "metadata": { "name": "kubernetes", "namespace": "default" },
                "spec": { "clusterIP": "10.96.0.1",
                          "ports": [{ "name": "https", "port": 443, "protocol": "TCP" }] } }),
        json!({ "metadata": { "name": "ext", "namespace": "default" },
                "spec": { "type": "ExternalName", "externalName": "db.example.com" } }),
        json!({ "metadata": { "name": "web", "namespace": "ns" },
                "spec": { "clusterIP": "None",
                          "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] } }),
    ];
    for s in services {
        index.upsert_service(&serde_json::from_value::<Service>(s).unwrap());
    }
    let endpoints: Vec<_> = (0..100)
        .map(|i| {
            json!({ "addresses": [format!("10.244.1.{}", i + 1)],
                    "hostname": format!("web-{i}"),
                    "conditions": { "ready": true } })
        })
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "web-1", "namespace": "ns",
                      "labels": { "kubernetes.io/service-name": "web" } },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }]
    }))
    .unwrap();
    index.upsert_endpoint_slice(&slice);
    index
}

async fn start(upstreams: Vec<SocketAddr>) -> DnsServer {
    let config = DnsConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        upstreams,
        ..DnsConfig::default()
    };
    DnsServer::start_with_index(config, Arc::new(RwLock::new(index())))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_query_over_udp_gets_the_cluster_ip_authoritatively() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    assert_ne!(at.port(), 0);
    let reply = udp_ask(
        at,
        &query(
            1,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
        ),
    )
    .await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert!(reply.metadata.authoritative);
    assert_eq!(data(&reply), ["10.96.0.1"]);
    Ok(())
}

#[tokio::test]
async fn srv_cname_ptr_nxdomain_and_nodata_over_udp() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    let srv = udp_ask(
        at,
        &query(
            2,
            "_https._tcp.kubernetes.default.svc.cluster.local.",
            RecordType::SRV,
            None,
        ),
    )
    .await?;
    assert_eq!(
        data(&srv),
        ["0 100 443 kubernetes.default.svc.cluster.local."]
    );
    assert_eq!(srv.additionals.len(), 1);

    let cname = udp_ask(
        at,
        &query(3, "ext.default.svc.cluster.local.", RecordType::A, None),
    )
    .await?;
    assert_eq!(data(&cname), ["db.example.com."]);

    let ptr = udp_ask(
        at,
        &query(4, "1.0.96.10.in-addr.arpa.", RecordType::PTR, None),
    )
    .await?;
    assert_eq!(data(&ptr), ["kubernetes.default.svc.cluster.local."]);

    let ptr = udp_ask(
        at,
        &query(5, "7.1.244.10.in-addr.arpa.", RecordType::PTR, None),
    )
    .await?;
    assert_eq!(data(&ptr), ["web-6.web.ns.svc.cluster.local."]);

    let nx = udp_ask(
        at,
        &query(6, "nope.default.svc.cluster.local.", RecordType::A, None),
    )
    .await?;
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(nx.authorities[0].record_type(), RecordType::SOA);

    let nodata = udp_ask(
        at,
        &query(
            7,
            "kubernetes.default.svc.cluster.local.",
            RecordType::AAAA,
            None,
        ),
    )
    .await?;
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert_eq!(nodata.authorities[0].record_type(), RecordType::SOA);
    Ok(())
}

#[tokio::test]
async fn truncated_udp_reply_is_retried_over_tcp_in_full() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    let packet = query(
        8,
        "_http._tcp.web.ns.svc.cluster.local.",
        RecordType::SRV,
        None,
    );
    let raw = udp_raw(at, &packet).await?;
    assert!(raw.len() <= 512);
    let udp = Message::from_vec(&raw)?;
    assert!(udp.metadata.truncation);
    assert!(udp.answers.len() < 100);
    let tcp = tcp_ask(at, &packet).await?;
    assert!(!tcp.metadata.truncation);
    assert_eq!(tcp.answers.len(), 100);
    assert_eq!(tcp.additionals.len(), 100);
    Ok(())
}

#[tokio::test]
async fn tcp_answers_pipelined_queries_in_order() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    let packets: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            query(
                100 + i,
                &format!("web-{i}.web.ns.svc.cluster.local."),
                RecordType::A,
                None,
            )
        })
        .collect();
    let replies = tcp_ask_many(at, &packets).await?;
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(usize::from(reply.metadata.id), 100 + i);
        assert_eq!(data(reply), [format!("10.244.1.{}", i + 1)]);
    }
    Ok(())
}

#[tokio::test]
async fn without_upstreams_other_names_get_servfail_at_once() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    for (id, name, qtype) in [
        (9, "example.com.", RecordType::A),
        (10, "9.9.9.9.in-addr.arpa.", RecordType::PTR),
    ] {
        let started = Instant::now();
        let reply = udp_ask(at, &query(id, name, qtype, Some(1232))).await?;
        assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
        assert!(started.elapsed() < Duration::from_millis(500));
        let reply = tcp_ask(at, &query(id, name, qtype, None)).await?;
        assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
    }
    Ok(())
}

/// A UDP socket and a TCP listener on one loopback port. A port free for UDP may be taken for
/// TCP by a test running beside this one, so a few are tried.
async fn udp_and_tcp_on_one_port() -> (UdpSocket, TcpListener, SocketAddr) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        if let Ok(tcp) = TcpListener::bind(addr).await {
            return (udp, tcp, addr);
        }
    }
    panic!("no loopback port free for both UDP and TCP in 50 tries");
}

/// Answers every A query with 192.0.2.1, over UDP and TCP on one port.
async fn fake_upstream() -> SocketAddr {
    let (udp, tcp, addr) = udp_and_tcp_on_one_port().await;
    fn answer(packet: &[u8]) -> Option<Vec<u8>> {
        let request = Message::from_vec(packet).ok()?;
        let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
        reply.metadata.recursion_available = true;
        let q = request.queries.first()?.clone();
        reply.add_answer(Record::from_rdata(
            q.name().clone(),
            60,
            RData::A(A::new(192, 0, 2, 1)),
        ));
        reply.add_query(q);
        reply.to_vec().ok()
    }
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok((len, peer)) = udp.recv_from(&mut buffer).await {
            if let Some(reply) = answer(&buffer[..len]) {
                let _ = udp.send_to(&reply, peer).await;
            }
        }
    });
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = tcp.accept().await {
            tokio::spawn(async move {
                let mut prefix = [0u8; 2];
                stream.read_exact(&mut prefix).await?;
                let mut packet = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
                stream.read_exact(&mut packet).await?;
                if let Some(reply) = answer(&packet) {
                    stream
                        .write_all(&(reply.len() as u16).to_be_bytes())
                        .await?;
                    stream.write_all(&reply).await?;
                }
                Ok::<_, std::io::Error>(())
            });
        }
    });
    addr
}

#[tokio::test]
async fn other_names_are_forwarded_upstream_over_the_same_transport() -> Result<()> {
    let upstream = fake_upstream().await;
    let server = start(vec![upstream]).await;
    let at = server.local_addrs()[0];
    let reply = udp_ask(at, &query(11, "www.example.com.", RecordType::A, None)).await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(data(&reply), ["192.0.2.1"]);
    assert!(!reply.metadata.authoritative);
    let reply = tcp_ask(at, &query(12, "www.example.com.", RecordType::A, None)).await?;
    assert_eq!(data(&reply), ["192.0.2.1"]);
    // Unknown reverse names fall through to the upstream as well.
    let reply = udp_ask(
        at,
        &query(13, "9.9.9.9.in-addr.arpa.", RecordType::PTR, None),
    )
    .await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    // Cluster names are still answered here.
    let reply = udp_ask(
        at,
        &query(
            14,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
        ),
    )
    .await?;
    assert_eq!(data(&reply), ["10.96.0.1"]);
    Ok(())
}

#[tokio::test]
async fn an_upstream_that_does_not_answer_is_given_up_after_its_timeout() -> Result<()> {
    // Bound but silent: datagrams are swallowed, connections accepted and left hanging.
    let (silent, listener, addr) = udp_and_tcp_on_one_port().await;
    let hold = tokio::spawn(async move {
        let mut held: Vec<TcpStream> = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    // A closed port refuses at once and the next upstream is asked.
    let closed = {
        let s = UdpSocket::bind("127.0.0.1:0").await?;
        s.local_addr()?
    };
    let upstream = fake_upstream().await;
    let server = start(vec![closed, upstream]).await;
    let started = Instant::now();
    let reply = udp_ask(
        server.local_addrs()[0],
        &query(15, "a.example.", RecordType::A, None),
    )
    .await?;
    assert_eq!(data(&reply), ["192.0.2.1"]);
    assert!(started.elapsed() < Duration::from_secs(1));

    let server = start(vec![addr]).await;
    let at = server.local_addrs()[0];
    let started = Instant::now();
    let reply = udp_ask(at, &query(16, "b.example.", RecordType::A, None)).await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    let started = Instant::now();
    let reply = tcp_ask(at, &query(17, "c.example.", RecordType::A, None)).await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
    assert!(started.elapsed() < Duration::from_secs(4));
    hold.abort();
    drop(silent);
    Ok(())
}

#[tokio::test]
async fn changes_to_the_index_are_answered_at_once() -> Result<()> {
    let index = Arc::new(RwLock::new(index()));
    let config = DnsConfig {
        listen: vec!["127.0.0.1:0".parse()?],
        ..DnsConfig::default()
    };
    let server = DnsServer::start_with_index(config, index.clone()).await?;
    let at = server.local_addrs()[0];
    let q = query(18, "late.default.svc.cluster.local.", RecordType::A, None);
    assert_eq!(
        udp_ask(at, &q).await?.metadata.response_code,
        ResponseCode::NXDomain
    );
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "late", "namespace": "default" },
        "spec": { "clusterIP": "10.96.0.77", "ports": [{ "port": 80 }] }
    }))?;
    index.write().unwrap().upsert_service(&svc);
    assert_eq!(data(&udp_ask(at, &q).await?), ["10.96.0.77"]);
    Ok(())
}

#[tokio::test]
async fn malformed_datagrams_get_formerr_or_nothing_and_service_goes_on() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    socket.connect(at).await?;
    let seeds = [
        query(
            1,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
        ),
        query(
            2,
            "_http._tcp.web.ns.svc.cluster.local.",
            RecordType::SRV,
            Some(4096),
        ),
    ];
    let mut rng = Rng(7);
    let mut buffer = vec![0u8; 65535];
    for i in 0..3000u32 {
        let mut packet = if i % 2 == 0 {
            let len = rng.below(64);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut p = seeds[rng.below(2)].clone();
            for _ in 0..=rng.below(3) {
                let at = rng.below(p.len());
                p[at] = rng.next() as u8;
            }
            p
        };
        if packet.len() >= 3 {
            packet[2] &= 0x7f; // a query, which must be answered when it has a header
        }
        socket.send(&packet).await?;
        if packet.len() >= 12 {
            let len = tokio::time::timeout(Duration::from_secs(2), socket.recv(&mut buffer))
                .await
                .map_err(|_| anyhow::anyhow!("no reply to datagram {i}: {packet:02x?}"))??;
            assert_eq!(buffer[..2], packet[..2]);
            assert!(buffer[2] & 0x80 != 0);
            assert!(len >= 12);
        }
    }
    let reply = udp_ask(
        at,
        &query(
            99,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
        ),
    )
    .await?;
    assert_eq!(data(&reply), ["10.96.0.1"]);
    Ok(())
}

#[tokio::test]
async fn bad_tcp_input_closes_only_its_own_connection() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    // A length too short for a header: closed.
    let mut bad = TcpStream::connect(at).await?;
    bad.write_all(&[0, 3, 1, 2, 3]).await?;
    let mut byte = [0u8; 1];
    // Closed with its input unread, so a reset rather than an end of stream is fine too.
    let read = tokio::time::timeout(Duration::from_secs(2), bad.read(&mut byte)).await?;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Garbage with a header: FORMERR, and the connection stays usable.
    let mut garbage = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    garbage.extend([0xff; 10]);
    let good = query(
        20,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
    );
    let replies = tcp_ask_many(at, &[garbage, good]).await?;
    assert_eq!(replies[0].metadata.response_code, ResponseCode::FormErr);
    assert_eq!(data(&replies[1]), ["10.96.0.1"]);
    Ok(())
}

#[tokio::test]
async fn dropping_the_server_closes_its_sockets() -> Result<()> {
    let server = start(vec![]).await;
    let at = server.local_addrs()[0];
    drop(server);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The port is free again for UDP and TCP.
    let _udp = UdpSocket::bind(at).await?;
    let _tcp = TcpListener::bind(at).await?;
    Ok(())
}

#[tokio::test]
async fn no_listen_address_is_an_error() {
    let result =
        DnsServer::start_with_index(DnsConfig::default(), Arc::new(RwLock::new(index()))).await;
    assert!(matches!(result, Err(tandem_dns::DnsError::NoListenAddress)));
}
