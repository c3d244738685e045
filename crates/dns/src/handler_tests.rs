#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

use super::*;

/// 200 ready endpoints behind `big.default`, and the `kubernetes` Service.
fn handler() -> Handler {
    handler_with(200)
}

/// `count` ready endpoints behind `big.default`, and the `kubernetes` Service.
fn handler_with(count: usize) -> Handler {
    let mut index = Index::new("cluster.local", 30).unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "kubernetes", "namespace": "default" },
        "spec": { "clusterIP": "10.96.0.1", "ports": [{ "name": "https", "port": 443 }] }
    }))
    .unwrap();
    index.upsert_service(&svc);
    let big: Service = serde_json::from_value(json!({
        "metadata": { "name": "big", "namespace": "default" },
        "spec": { "clusterIP": "None", "ports": [{ "name": "http", "port": 80 }] }
    }))
    .unwrap();
    index.upsert_service(&big);
    let endpoints: Vec<_> = (0..count)
        .map(|i| json!({ "addresses": [format!("10.244.{}.{}", i / 250, i % 250 + 1)] }))
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "big-1", "namespace": "default",
                      "labels": { "kubernetes.io/service-name": "big" } },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }]
    }))
    .unwrap();
    index.upsert_endpoint_slice(&slice);
    Handler::new(Arc::new(RwLock::new(index)))
}

fn query(id: u16, name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        message.set_edns(e);
    }
    message.to_vec().unwrap()
}

fn reply_to(handler: &Handler, packet: &[u8], transport: Transport) -> (Vec<u8>, Message) {
    match handler.handle(packet, transport) {
        Outcome::Reply(bytes) => {
            let message = Message::from_vec(&bytes).unwrap();
            (bytes, message)
        }
        other => panic!("expected a reply, got {other:?}"),
    }
}

#[test]
fn zone_query_gets_an_authoritative_reply_echoing_the_question() {
    let handler = handler();
    let packet = query(
        7,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
    );
    let (_, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert_eq!(reply.metadata.id, 7);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert!(reply.metadata.authoritative);
    assert!(reply.metadata.recursion_desired);
    assert!(!reply.metadata.truncation);
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
    assert_eq!(reply.queries, Message::from_vec(&packet).unwrap().queries);
    assert_eq!(reply.answers.len(), 1);
    assert!(reply.edns.is_none());
}

#[test]
fn nxdomain_reply_carries_the_soa() {
    let handler = handler();
    let packet = query(8, "nope.default.svc.cluster.local.", RecordType::A, None);
    let (_, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(reply.authorities.len(), 1);
}

#[test]
fn name_outside_the_zone_is_forwarded_with_a_servfail_ready() {
    let handler = handler();
    let packet = query(9, "example.com.", RecordType::A, Some(1232));
    let Outcome::Forward { servfail } = handler.handle(&packet, Transport::Udp) else {
        panic!("expected forwarding");
    };
    let servfail = Message::from_vec(&servfail).unwrap();
    assert_eq!(servfail.metadata.id, 9);
    assert_eq!(servfail.metadata.response_code, ResponseCode::ServFail);
    assert!(!servfail.metadata.authoritative);
    assert_eq!(servfail.queries.len(), 1);
    assert!(servfail.edns.is_some());
}

#[test]
fn packet_shorter_than_a_header_is_dropped() {
    let handler = handler();
    for len in 0..HEADER_LEN {
        assert_eq!(
            handler.handle(&vec![0xab; len], Transport::Udp),
            Outcome::Drop
        );
    }
}

#[test]
fn unparseable_packet_with_a_header_gets_formerr() {
    let handler = handler();
    let mut packet = query(
        0x1234,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
    );
    packet.truncate(20);
    let Outcome::Reply(bytes) = handler.handle(&packet, Transport::Udp) else {
        panic!("expected a reply");
    };
    let reply = Message::from_vec(&bytes).unwrap();
    assert_eq!(reply.metadata.id, 0x1234);
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
}

#[test]
fn responses_are_never_answered() {
    let handler = handler();
    let packet = query(
        1,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
    );
    let (bytes, _) = reply_to(&handler, &packet, Transport::Udp);
    assert_eq!(handler.handle(&bytes, Transport::Udp), Outcome::Drop);
}

#[test]
fn other_opcodes_get_notimp() {
    let handler = handler();
    let mut packet = query(
        2,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        None,
    );
    packet[2] |= 2 << 3; // STATUS
    let (_, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert_eq!(reply.metadata.response_code, ResponseCode::NotImp);
}

#[test]
fn zero_or_two_questions_get_formerr() {
    let handler = handler();
    let empty = Message::new(3, MessageType::Query, OpCode::Query)
        .to_vec()
        .unwrap();
    let (_, reply) = reply_to(&handler, &empty, Transport::Udp);
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
    let mut two = Message::new(4, MessageType::Query, OpCode::Query);
    for name in ["a.cluster.local.", "b.cluster.local."] {
        two.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    }
    let (_, reply) = reply_to(&handler, &two.to_vec().unwrap(), Transport::Udp);
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
}

#[test]
fn edns_query_gets_an_opt_record_back() {
    let handler = handler();
    let packet = query(
        5,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
        Some(4096),
    );
    let (_, reply) = reply_to(&handler, &packet, Transport::Udp);
    let edns = reply.edns.unwrap();
    assert_eq!(edns.max_payload(), ADVERTISED_PAYLOAD);
    assert_eq!(edns.version(), 0);
}

#[test]
fn edns_version_above_zero_gets_badvers() {
    let handler = handler();
    let mut message = Message::new(6, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(
        Name::from_ascii("kubernetes.default.svc.cluster.local.").unwrap(),
        RecordType::A,
    ));
    let mut edns = Edns::new();
    edns.set_version(1);
    message.set_edns(edns);
    let (_, reply) = reply_to(&handler, &message.to_vec().unwrap(), Transport::Udp);
    // 16 is BADVERS in an OPT record (and BADSIG in a TSIG one, which hickory decodes it to).
    assert_eq!(u16::from(reply.metadata.response_code), 16);
    assert!(reply.edns.is_some());
    assert!(reply.answers.is_empty());
}

#[test]
fn zone_transfers_and_other_classes_are_refused() {
    let handler = handler();
    let packet = query(10, "cluster.local.", RecordType::AXFR, None);
    let (_, reply) = reply_to(&handler, &packet, Transport::Tcp);
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
    let mut message = Message::new(11, MessageType::Query, OpCode::Query);
    let mut q = Query::query(
        Name::from_ascii("kubernetes.default.svc.cluster.local.").unwrap(),
        RecordType::A,
    );
    q.set_query_class(DNSClass::CH);
    message.add_query(q);
    let (_, reply) = reply_to(&handler, &message.to_vec().unwrap(), Transport::Udp);
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn large_udp_answer_without_edns_is_cut_to_512_bytes_with_tc() {
    let handler = handler();
    let packet = query(12, "big.default.svc.cluster.local.", RecordType::A, None);
    let (bytes, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert!(bytes.len() <= 512, "{} bytes", bytes.len());
    assert!(reply.metadata.truncation);
    assert!(!reply.answers.is_empty() && reply.answers.len() < 200);
    // The same question over TCP gets every record.
    let (_, reply) = reply_to(&handler, &packet, Transport::Tcp);
    assert!(!reply.metadata.truncation);
    assert_eq!(reply.answers.len(), 200);
}

#[test]
fn large_udp_answer_fills_the_clients_edns_size() {
    let handler = handler();
    let packet = query(
        13,
        "big.default.svc.cluster.local.",
        RecordType::A,
        Some(4096),
    );
    let (bytes, reply) = reply_to(&handler, &packet, Transport::Udp);
    // hickory compresses the first 120 names of a message only, so not all 200 fit.
    assert!(
        bytes.len() <= 4096 && bytes.len() > 3500,
        "{} bytes",
        bytes.len()
    );
    assert!(reply.answers.len() > 120);
    assert!(reply.metadata.truncation);
    assert!(reply.edns.is_some());
    // A client offering less than 512 still gets 512.
    let packet = query(
        14,
        "big.default.svc.cluster.local.",
        RecordType::A,
        Some(100),
    );
    let (bytes, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert!(bytes.len() <= 512 && bytes.len() > 400);
    assert!(reply.metadata.truncation);
}

#[test]
fn additional_records_are_dropped_before_answers_are_truncated() {
    let handler = handler();
    let packet = query(
        15,
        "_http._tcp.big.default.svc.cluster.local.",
        RecordType::SRV,
        Some(4096),
    );
    let (bytes, reply) = reply_to(&handler, &packet, Transport::Udp);
    assert!(bytes.len() <= 4096);
    assert!(reply.metadata.truncation);
    assert!(reply.additionals.is_empty());
    let (_, reply) = reply_to(&handler, &packet, Transport::Tcp);
    assert_eq!(reply.answers.len(), 200);
    assert_eq!(reply.additionals.len(), 200);
}

#[test]
fn address_records_turn_from_one_reply_to_the_next() {
    let handler = handler();
    let packet = query(16, "big.default.svc.cluster.local.", RecordType::A, None);
    let (_, first) = reply_to(&handler, &packet, Transport::Tcp);
    let (_, second) = reply_to(&handler, &packet, Transport::Tcp);
    assert_ne!(first.answers[0], second.answers[0]);
    let mut a: Vec<String> = first.answers.iter().map(|r| r.data.to_string()).collect();
    let mut b: Vec<String> = second.answers.iter().map(|r| r.data.to_string()).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// SplitMix64: a small deterministic generator, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Checks one outcome: a reply is a well-formed response with the query's id.
fn check(packet: &[u8], outcome: &Outcome) {
    let bytes = match outcome {
        Outcome::Drop => {
            // Dropped only when there is no header, or the packet is itself a response.
            assert!(packet.len() < HEADER_LEN || packet[2] & 0x80 != 0);
            return;
        }
        Outcome::Reply(bytes) | Outcome::Forward { servfail: bytes } => bytes,
    };
    assert!(bytes.len() >= HEADER_LEN);
    assert_eq!(bytes[..2], packet[..2], "reply id");
    assert!(bytes[2] & 0x80 != 0, "QR set");
    Message::from_vec(bytes).unwrap();
}

#[test]
fn random_bytes_never_panic_and_any_header_gets_an_answer() {
    let handler = handler_with(5);
    let mut rng = Rng(0x5eed);
    for _ in 0..20_000 {
        let len = rng.below(80);
        let packet: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        for transport in [Transport::Udp, Transport::Tcp] {
            check(&packet, &handler.handle(&packet, transport));
        }
    }
}

#[test]
fn mutated_queries_never_panic_and_parseable_ones_are_answered() {
    let handler = handler_with(5);
    let seeds = [
        query(
            1,
            "kubernetes.default.svc.cluster.local.",
            RecordType::A,
            None,
        ),
        query(
            2,
            "_http._tcp.big.default.svc.cluster.local.",
            RecordType::SRV,
            Some(1232),
        ),
        query(3, "1.0.96.10.in-addr.arpa.", RecordType::PTR, None),
        query(
            4,
            "10-1-2-3.default.pod.cluster.local.",
            RecordType::AAAA,
            Some(512),
        ),
        query(5, "example.com.", RecordType::MX, None),
    ];
    let mut rng = Rng(42);
    let mut parseable = 0;
    for _ in 0..20_000 {
        let mut packet = seeds[rng.below(seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            match rng.below(4) {
                0 | 1 if packet.is_empty() => {}
                0 => {
                    let at = rng.below(packet.len());
                    packet[at] = rng.next() as u8;
                }
                1 => {
                    let at = rng.below(packet.len());
                    packet[at] ^= 1 << rng.below(8);
                }
                2 => packet.truncate(rng.below(packet.len() + 1)),
                _ => {
                    let extra = rng.below(16);
                    packet.extend((0..extra).map(|_| rng.next() as u8));
                }
            }
        }
        let outcome = handler.handle(&packet, Transport::Udp);
        check(&packet, &outcome);
        if packet.len() >= HEADER_LEN && packet[2] & 0x80 == 0 && Message::from_vec(&packet).is_ok()
        {
            parseable += 1;
            assert_ne!(outcome, Outcome::Drop);
        }
    }
    assert!(parseable > 1000, "only {parseable} mutated queries parsed");
}
