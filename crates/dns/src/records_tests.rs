#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use serde_json::{Value, json};

use super::*;

fn service(value: Value) -> Service {
    serde_json::from_value(value).unwrap()
}

fn slice(value: Value) -> EndpointSlice {
    serde_json::from_value(value).unwrap()
}

fn cluster_ip(ns: &str, name: &str, ips: &[&str], ports: Value) -> Service {
    service(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "type": "ClusterIP", "clusterIP": ips[0], "clusterIPs": ips, "ports": ports }
    }))
}

fn headless(ns: &str, name: &str, ports: Value) -> Service {
    service(json!({
        "metadata": { "name": name, "namespace": ns },
        "spec": { "clusterIP": "None", "clusterIPs": ["None"], "ports": ports }
    }))
}

/// An EndpointSlice of `svc` with endpoints given as (address, hostname, ready).
fn endpoints(
    ns: &str,
    name: &str,
    svc: &str,
    eps: &[(&str, Option<&str>, Option<bool>)],
    ports: Value,
) -> EndpointSlice {
    let eps: Vec<Value> = eps
        .iter()
        .map(|(ip, hostname, ready)| {
            let mut ep = json!({ "addresses": [ip], "conditions": {} });
            if let Some(h) = hostname {
                ep["hostname"] = json!(h);
            }
            if let Some(r) = ready {
                ep["conditions"]["ready"] = json!(r);
            }
            ep
        })
        .collect();
    slice(json!({
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": { "kubernetes.io/service-name": svc }
        },
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": ports
    }))
}

fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

fn index() -> Index {
    let mut index = Index::new("cluster.local", DEFAULT_TTL).unwrap();
    index.upsert_service(&cluster_ip(
        "default",
        "kubernetes",
        &["10.96.0.1"],
        json!([{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443 }]),
    ));
    index
}

fn ask(index: &Index, q: &str, qtype: RecordType) -> Answer {
    index
        .lookup(&name(q), qtype)
        .unwrap_or_else(|| panic!("{q} {qtype} should be answered from the index"))
}

/// The answer records' data as text, e.g. `["10.96.0.1"]`.
fn data(answer: &Answer) -> Vec<String> {
    answer.answers.iter().map(|r| r.data.to_string()).collect()
}

fn additional(answer: &Answer) -> Vec<String> {
    answer
        .additionals
        .iter()
        .map(|r| format!("{} {}", r.name, r.data))
        .collect()
}

fn assert_negative(answer: &Answer, rcode: ResponseCode) {
    assert_eq!(answer.rcode, rcode);
    assert!(answer.answers.is_empty(), "{answer:?}");
    assert_eq!(answer.authorities.len(), 1);
    assert_eq!(answer.authorities[0].record_type(), RecordType::SOA);
}

/// my-service in ns with two ready endpoints, one of them named, and one that is not ready.
fn index_with_headless() -> Index {
    let mut index = index();
    index.upsert_service(&headless(
        "ns",
        "my-service",
        json!([{ "name": "http", "port": 80, "protocol": "TCP" }]),
    ));
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "my-service-abc",
        "my-service",
        &[
            ("10.244.0.5", Some("my-pod-0"), Some(true)),
            ("10.244.0.6", None, Some(true)),
            ("10.244.0.7", None, Some(false)),
        ],
        json!([{ "name": "http", "port": 8080, "protocol": "TCP" }]),
    ));
    index
}

#[test]
fn kubernetes_service_answers_a_with_its_cluster_ip() {
    let answer = ask(
        &index(),
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert_eq!(data(&answer), ["10.96.0.1"]);
    assert_eq!(answer.answers[0].ttl, 30);
    assert_eq!(
        answer.answers[0].name,
        name("kubernetes.default.svc.cluster.local.")
    );
}

#[test]
fn names_are_matched_case_insensitively_and_answered_as_asked() {
    let asked = "KUBERNETES.Default.SVC.Cluster.Local.";
    let answer = ask(&index(), asked, RecordType::A);
    assert_eq!(data(&answer), ["10.96.0.1"]);
    assert!(answer.answers[0].name.eq_case(&name(asked)));
}

#[test]
fn node_port_and_load_balancer_services_answer_with_their_cluster_ip() {
    let mut index = index();
    for (svc, kind, ip) in [
        ("np", "NodePort", "10.96.0.20"),
        ("lb", "LoadBalancer", "10.96.0.21"),
    ] {
        index.upsert_service(&service(json!({
            "metadata": { "name": svc, "namespace": "default" },
            "spec": { "type": kind, "clusterIP": ip, "ports": [{ "port": 80 }] }
        })));
        let answer = ask(
            &index,
            &format!("{svc}.default.svc.cluster.local."),
            RecordType::A,
        );
        assert_eq!(data(&answer), [ip]);
    }
}

#[test]
fn dual_stack_service_answers_each_family_with_its_own_cluster_ip() {
    let mut index = index();
    index.upsert_service(&cluster_ip(
        "default",
        "dual",
        &["10.96.0.30", "fd00::30"],
        json!([{ "port": 80 }]),
    ));
    let q = "dual.default.svc.cluster.local.";
    assert_eq!(data(&ask(&index, q, RecordType::A)), ["10.96.0.30"]);
    assert_eq!(data(&ask(&index, q, RecordType::AAAA)), ["fd00::30"]);
}

#[test]
fn aaaa_for_an_ipv4_only_service_is_nodata_with_the_soa() {
    let answer = ask(
        &index(),
        "kubernetes.default.svc.cluster.local.",
        RecordType::AAAA,
    );
    assert_negative(&answer, ResponseCode::NoError);
}

#[test]
fn other_types_on_an_existing_service_are_nodata() {
    for qtype in [RecordType::TXT, RecordType::MX, RecordType::PTR] {
        let answer = ask(&index(), "kubernetes.default.svc.cluster.local.", qtype);
        assert_negative(&answer, ResponseCode::NoError);
    }
}

#[test]
fn service_without_an_allocated_cluster_ip_is_nodata() {
    let mut index = index();
    index.upsert_service(&service(json!({
        "metadata": { "name": "pending", "namespace": "default" },
        "spec": { "ports": [{ "port": 80 }] }
    })));
    let answer = ask(&index, "pending.default.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NoError);
}

#[test]
fn unknown_service_is_nxdomain_with_a_coredns_like_soa() {
    let answer = ask(&index(), "nope.default.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
    let soa = &answer.authorities[0];
    assert_eq!(soa.name, name("cluster.local."));
    assert_eq!(soa.ttl, 30);
    let RData::SOA(soa) = &soa.data else {
        panic!("not an SOA: {soa:?}");
    };
    assert_eq!(soa.mname, name("ns.dns.cluster.local."));
    assert_eq!(soa.rname, name("hostmaster.cluster.local."));
    assert_eq!(soa.minimum, 30);
}

#[test]
fn headless_service_answers_with_its_ready_endpoints() {
    let answer = ask(
        &index_with_headless(),
        "my-service.ns.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.244.0.5", "10.244.0.6"]);
}

#[test]
fn endpoint_without_a_ready_condition_counts_as_ready() {
    let mut index = index();
    index.upsert_service(&headless("ns", "h", json!([])));
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "h-1",
        "h",
        &[("10.244.1.1", None, None)],
        json!([]),
    ));
    assert_eq!(
        data(&ask(&index, "h.ns.svc.cluster.local.", RecordType::A)),
        ["10.244.1.1"]
    );
}

#[test]
fn publish_not_ready_addresses_serves_every_endpoint() {
    let mut index = index_with_headless();
    index.upsert_service(&service(json!({
        "metadata": { "name": "my-service", "namespace": "ns" },
        "spec": { "clusterIP": "None", "publishNotReadyAddresses": true,
                  "ports": [{ "name": "http", "port": 80 }] }
    })));
    let answer = ask(&index, "my-service.ns.svc.cluster.local.", RecordType::A);
    assert_eq!(data(&answer), ["10.244.0.5", "10.244.0.6", "10.244.0.7"]);
    let dashed = ask(
        &index,
        "10-244-0-7.my-service.ns.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&dashed), ["10.244.0.7"]);
}

#[test]
fn headless_service_without_ready_endpoints_is_nxdomain() {
    let mut index = index();
    index.upsert_service(&headless("ns", "empty", json!([])));
    let answer = ask(&index, "empty.ns.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "empty-1",
        "empty",
        &[("10.244.2.1", None, Some(false))],
        json!([]),
    ));
    let answer = ask(&index, "empty.ns.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn endpoints_of_every_slice_of_the_service_are_merged_once() {
    let mut index = index_with_headless();
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "my-service-def",
        "my-service",
        &[
            ("10.244.0.8", None, Some(true)),
            ("10.244.0.6", None, Some(true)),
        ],
        json!([{ "name": "http", "port": 8080, "protocol": "TCP" }]),
    ));
    let answer = ask(&index, "my-service.ns.svc.cluster.local.", RecordType::A);
    assert_eq!(data(&answer), ["10.244.0.5", "10.244.0.6", "10.244.0.8"]);
}

#[test]
fn statefulset_pod_answers_under_its_hostname_and_subdomain() {
    let index = index_with_headless();
    let answer = ask(
        &index,
        "my-pod-0.my-service.ns.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.244.0.5"]);
    // A named endpoint is not also reachable by its dashed address (CoreDNS endpointHostname).
    let answer = ask(
        &index,
        "10-244-0-5.my-service.ns.svc.cluster.local.",
        RecordType::A,
    );
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn endpoint_without_hostname_answers_by_its_dashed_address() {
    let index = index_with_headless();
    let q = "10-244-0-6.my-service.ns.svc.cluster.local.";
    assert_eq!(data(&ask(&index, q, RecordType::A)), ["10.244.0.6"]);
    assert_negative(&ask(&index, q, RecordType::AAAA), ResponseCode::NoError);
    // Not ready: not served.
    let q = "10-244-0-7.my-service.ns.svc.cluster.local.";
    assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
}

#[test]
fn ipv6_endpoint_answers_aaaa_under_its_dashed_address() {
    let mut index = index();
    index.upsert_service(&headless("ns", "v6", json!([])));
    let mut s = endpoints("ns", "v6-1", "v6", &[("fd00::5", None, None)], json!([]));
    s.address_type = "IPv6".into();
    index.upsert_endpoint_slice(&s);
    let answer = ask(&index, "v6.ns.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(data(&answer), ["fd00::5"]);
    let answer = ask(&index, "fd00--5.v6.ns.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(data(&answer), ["fd00::5"]);
}

#[test]
fn endpoint_names_also_answer_for_a_cluster_ip_service_as_coredns_does() {
    let mut index = index();
    index.upsert_endpoint_slice(&endpoints(
        "default",
        "kubernetes",
        "kubernetes",
        &[("192.168.1.10", None, None)],
        json!([{ "name": "https", "port": 6443 }]),
    ));
    let answer = ask(
        &index,
        "192-168-1-10.kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["192.168.1.10"]);
    // The Service name itself still answers with the cluster IP.
    let answer = ask(
        &index,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.96.0.1"]);
}

#[test]
fn srv_for_a_named_port_of_a_cluster_ip_service_targets_the_service() {
    let answer = ask(
        &index(),
        "_https._tcp.kubernetes.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(
        data(&answer),
        ["0 100 443 kubernetes.default.svc.cluster.local."]
    );
    assert_eq!(
        additional(&answer),
        ["kubernetes.default.svc.cluster.local. 10.96.0.1"]
    );
}

#[test]
fn headless_srv_has_one_record_per_ready_endpoint_with_its_address() {
    // The specification's example: my-service with two ready endpoints and a port `http`.
    let answer = ask(
        &index_with_headless(),
        "_http._tcp.my-service.ns.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(
        data(&answer),
        [
            "0 50 8080 my-pod-0.my-service.ns.svc.cluster.local.",
            "0 50 8080 10-244-0-6.my-service.ns.svc.cluster.local.",
        ]
    );
    assert_eq!(
        additional(&answer),
        [
            "my-pod-0.my-service.ns.svc.cluster.local. 10.244.0.5",
            "10-244-0-6.my-service.ns.svc.cluster.local. 10.244.0.6",
        ]
    );
}

#[test]
fn srv_weights_share_one_hundred_and_never_fall_below_one() {
    let mut index = index();
    index.upsert_service(&headless("ns", "many", json!([{ "name": "p", "port": 1 }])));
    let eps: Vec<String> = (0..150)
        .map(|i| format!("10.1.{}.{}", i / 200, i % 200))
        .collect();
    let eps: Vec<(&str, Option<&str>, Option<bool>)> =
        eps.iter().map(|ip| (ip.as_str(), None, None)).collect();
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "many-1",
        "many",
        &eps[..3],
        json!([{ "name": "p", "port": 1 }]),
    ));
    let answer = ask(
        &index,
        "_p._tcp.many.ns.svc.cluster.local.",
        RecordType::SRV,
    );
    assert!(data(&answer).iter().all(|d| d.starts_with("0 33 1 ")));
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "many-1",
        "many",
        &eps,
        json!([{ "name": "p", "port": 1 }]),
    ));
    let answer = ask(
        &index,
        "_p._tcp.many.ns.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(answer.answers.len(), 150);
    assert!(data(&answer).iter().all(|d| d.starts_with("0 1 1 ")));
}

#[test]
fn srv_port_and_protocol_are_matched_case_insensitively() {
    let answer = ask(
        &index(),
        "_HTTPS._TCP.kubernetes.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_eq!(answer.answers.len(), 1);
}

#[test]
fn srv_for_an_unknown_port_or_protocol_is_nxdomain() {
    let index = index();
    for q in [
        "_http._tcp.kubernetes.default.svc.cluster.local.",
        "_https._udp.kubernetes.default.svc.cluster.local.",
        "https.tcp.kubernetes.default.svc.cluster.local.",
        "_._tcp.kubernetes.default.svc.cluster.local.",
    ] {
        assert_negative(&ask(&index, q, RecordType::SRV), ResponseCode::NXDomain);
    }
}

#[test]
fn other_types_on_an_srv_name_are_nodata() {
    let answer = ask(
        &index(),
        "_https._tcp.kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_negative(&answer, ResponseCode::NoError);
}

#[test]
fn protocol_label_above_an_srv_name_is_an_empty_non_terminal() {
    let index = index();
    let answer = ask(
        &index,
        "_tcp.kubernetes.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_negative(&answer, ResponseCode::NoError);
    let answer = ask(
        &index,
        "_udp.kubernetes.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn srv_on_the_service_name_lists_every_port() {
    let mut index = index();
    index.upsert_service(&cluster_ip(
        "default",
        "web",
        &["10.96.0.40"],
        json!([{ "name": "http", "port": 80 }, { "name": "metrics", "port": 9090 }]),
    ));
    let answer = ask(&index, "web.default.svc.cluster.local.", RecordType::SRV);
    assert_eq!(
        data(&answer),
        [
            "0 50 80 web.default.svc.cluster.local.",
            "0 50 9090 web.default.svc.cluster.local.",
        ]
    );
    assert_eq!(
        additional(&answer),
        ["web.default.svc.cluster.local. 10.96.0.40"]
    );
}

#[test]
fn external_name_service_answers_a_cname_it_does_not_follow_out_of_the_zone() {
    let mut index = index();
    index.upsert_service(&service(json!({
        "metadata": { "name": "ext", "namespace": "default" },
        "spec": { "type": "ExternalName", "externalName": "my.database.example.com" }
    })));
    for qtype in [RecordType::A, RecordType::AAAA, RecordType::CNAME] {
        let answer = ask(&index, "ext.default.svc.cluster.local.", qtype);
        assert_eq!(answer.rcode, ResponseCode::NoError);
        assert_eq!(data(&answer), ["my.database.example.com."]);
        assert_eq!(answer.answers[0].record_type(), RecordType::CNAME);
    }
    let srv = ask(
        &index,
        "_http._tcp.ext.default.svc.cluster.local.",
        RecordType::SRV,
    );
    assert_negative(&srv, ResponseCode::NXDomain);
}

#[test]
fn external_name_inside_the_zone_is_followed() {
    let mut index = index();
    index.upsert_service(&service(json!({
        "metadata": { "name": "alias", "namespace": "default" },
        "spec": { "type": "ExternalName",
                  "externalName": "kubernetes.default.svc.cluster.local" }
    })));
    let answer = ask(&index, "alias.default.svc.cluster.local.", RecordType::A);
    assert_eq!(
        data(&answer),
        ["kubernetes.default.svc.cluster.local.", "10.96.0.1"]
    );
    assert_eq!(
        answer.answers[1].name,
        name("kubernetes.default.svc.cluster.local.")
    );
}

#[test]
fn external_name_loops_inside_the_zone_stop() {
    let mut index = index();
    for (a, b) in [("x", "y"), ("y", "x")] {
        index.upsert_service(&service(json!({
            "metadata": { "name": a, "namespace": "default" },
            "spec": { "type": "ExternalName",
                      "externalName": format!("{b}.default.svc.cluster.local") }
        })));
    }
    let answer = ask(&index, "x.default.svc.cluster.local.", RecordType::A);
    assert_eq!(answer.answers.len(), MAX_CNAME_CHAIN + 1);
}

#[test]
fn external_name_that_is_an_address_is_nxdomain() {
    let mut index = index();
    index.upsert_service(&service(json!({
        "metadata": { "name": "ip", "namespace": "default" },
        "spec": { "type": "ExternalName", "externalName": "1.2.3.4" }
    })));
    let answer = ask(&index, "ip.default.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn ptr_answers_the_service_name_for_a_cluster_ip() {
    let answer = ask(&index(), "1.0.96.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(data(&answer), ["kubernetes.default.svc.cluster.local."]);
}

#[test]
fn ptr_answers_the_hostname_of_a_headless_endpoint() {
    let index = index_with_headless();
    let answer = ask(&index, "5.0.244.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(data(&answer), ["my-pod-0.my-service.ns.svc.cluster.local."]);
    // Without a hostname there is no PTR here: the question goes upstream.
    assert!(
        index
            .lookup(&name("6.0.244.10.in-addr.arpa."), RecordType::PTR)
            .is_none()
    );
}

#[test]
fn ptr_answers_ipv6_cluster_ips() {
    let mut index = index();
    index.upsert_service(&cluster_ip(
        "default",
        "six",
        &["fd00::30"],
        json!([{ "port": 80 }]),
    ));
    let q = "0.3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";
    assert_eq!(
        data(&ask(&index, q, RecordType::PTR)),
        ["six.default.svc.cluster.local."]
    );
}

#[test]
fn unknown_or_partial_reverse_names_fall_through() {
    let index = index();
    for q in [
        "9.9.9.9.in-addr.arpa.",
        "96.10.in-addr.arpa.",
        "in-addr.arpa.",
        "x.0.96.10.in-addr.arpa.",
        "1.ip6.arpa.",
    ] {
        assert!(index.lookup(&name(q), RecordType::PTR).is_none(), "{q}");
    }
    // Other types on a known reverse name fall through as well.
    assert!(
        index
            .lookup(&name("1.0.96.10.in-addr.arpa."), RecordType::A)
            .is_none()
    );
}

#[test]
fn names_outside_the_zone_are_not_answered() {
    let index = index();
    for q in ["example.com.", "cluster.local.example.com.", "local.", "."] {
        assert!(index.lookup(&name(q), RecordType::A).is_none(), "{q}");
    }
}

#[test]
fn pod_records_answer_any_well_formed_dashed_address() {
    let index = index();
    let answer = ask(
        &index,
        "10-244-1-7.any-ns.pod.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.244.1.7"]);
    let answer = ask(
        &index,
        "fd00--7.default.pod.cluster.local.",
        RecordType::AAAA,
    );
    assert_eq!(data(&answer), ["fd00::7"]);
    let answer = ask(
        &index,
        "10-244-1-7.default.pod.cluster.local.",
        RecordType::AAAA,
    );
    assert_negative(&answer, ResponseCode::NoError);
    for q in [
        "10-244-1-300.default.pod.cluster.local.",
        "not-an-ip.default.pod.cluster.local.",
        "10-244-1.default.pod.cluster.local.",
        "a.10-244-1-7.default.pod.cluster.local.",
    ] {
        assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
    }
}

#[test]
fn dns_version_is_the_schema_version() {
    let answer = ask(&index(), "dns-version.cluster.local.", RecordType::TXT);
    assert_eq!(data(&answer), ["1.1.0"]);
    let answer = ask(&index(), "dns-version.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NoError);
}

#[test]
fn empty_non_terminals_are_nodata_not_nxdomain() {
    let mut index = index();
    index.upsert_namespace("quiet");
    for q in [
        "cluster.local.",
        "svc.cluster.local.",
        "default.svc.cluster.local.",
        "quiet.svc.cluster.local.",
        "pod.cluster.local.",
        "default.pod.cluster.local.",
        "dns.cluster.local.",
    ] {
        assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NoError);
    }
    for q in [
        "nope.svc.cluster.local.",
        "x.nope.svc.cluster.local.",
        "other.cluster.local.",
        "a.b.c.d.e.svc.cluster.local.",
    ] {
        assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
    }
    index.remove_namespace("quiet");
    let answer = ask(&index, "quiet.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn apex_answers_soa_and_ns_with_the_dns_service_address() {
    let mut index = index();
    index.upsert_service(&cluster_ip(
        "kube-system",
        "kube-dns",
        &["10.96.0.10"],
        json!([{ "name": "dns", "port": 53, "protocol": "UDP" }]),
    ));
    let soa = ask(&index, "cluster.local.", RecordType::SOA);
    assert_eq!(soa.answers[0].record_type(), RecordType::SOA);
    let ns = ask(&index, "cluster.local.", RecordType::NS);
    assert_eq!(data(&ns), ["ns.dns.cluster.local."]);
    assert_eq!(additional(&ns), ["ns.dns.cluster.local. 10.96.0.10"]);
    let a = ask(&index, "ns.dns.cluster.local.", RecordType::A);
    assert_eq!(data(&a), ["10.96.0.10"]);
}

#[test]
fn ttl_is_configurable() {
    let mut index = Index::new("corp.example.", 5).unwrap();
    index.upsert_service(&cluster_ip("a", "b", &["10.0.0.1"], json!([{ "port": 1 }])));
    let answer = ask(&index, "b.a.svc.corp.example.", RecordType::A);
    assert_eq!(answer.answers[0].ttl, 5);
    let answer = ask(&index, "c.a.svc.corp.example.", RecordType::A);
    assert_eq!(answer.authorities[0].ttl, 5);
}

#[test]
fn an_empty_cluster_domain_is_refused() {
    assert!(Index::new("", 30).is_err());
    assert!(Index::new(".", 30).is_err());
    assert!(Index::new("a..b", 30).is_err());
}

#[test]
fn removed_service_no_longer_answers_and_its_ptr_goes() {
    let mut index = index();
    index.remove_service("default", "kubernetes");
    let answer = ask(
        &index,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_negative(&answer, ResponseCode::NXDomain);
    assert!(
        index
            .lookup(&name("1.0.96.10.in-addr.arpa."), RecordType::PTR)
            .is_none()
    );
    assert!(index.service_keys().is_empty());
    // Nothing is left of the namespace either.
    let answer = ask(&index, "default.svc.cluster.local.", RecordType::A);
    assert_negative(&answer, ResponseCode::NXDomain);
}

#[test]
fn updated_service_answers_with_its_new_cluster_ip() {
    let mut index = index();
    index.upsert_service(&cluster_ip(
        "default",
        "kubernetes",
        &["10.96.0.2"],
        json!([{ "port": 443 }]),
    ));
    let answer = ask(
        &index,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.96.0.2"]);
    assert!(
        index
            .lookup(&name("1.0.96.10.in-addr.arpa."), RecordType::PTR)
            .is_none()
    );
    assert!(
        index
            .lookup(&name("2.0.96.10.in-addr.arpa."), RecordType::PTR)
            .is_some()
    );
}

#[test]
fn removed_or_relabelled_slices_take_their_endpoints_away() {
    let mut index = index_with_headless();
    let q = "my-service.ns.svc.cluster.local.";
    // Relabelled to another Service: gone from this one, PTR included.
    let mut moved = endpoints(
        "ns",
        "my-service-abc",
        "other",
        &[("10.244.0.5", Some("my-pod-0"), None)],
        json!([]),
    );
    index.upsert_endpoint_slice(&moved);
    assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
    assert!(
        index
            .lookup(&name("5.0.244.10.in-addr.arpa."), RecordType::PTR)
            .is_none()
    );
    // Without the label: dropped altogether.
    moved.metadata.labels = None;
    index.upsert_endpoint_slice(&moved);
    assert!(index.endpoint_slice_keys().is_empty());
    // Back, then removed by key.
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "my-service-abc",
        "my-service",
        &[("10.244.0.9", None, None)],
        json!([]),
    ));
    assert_eq!(data(&ask(&index, q, RecordType::A)), ["10.244.0.9"]);
    index.remove_endpoint_slice("ns", "my-service-abc");
    assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
}

#[test]
fn slices_seen_before_their_service_are_served_once_it_arrives() {
    let mut index = index();
    index.upsert_endpoint_slice(&endpoints(
        "ns",
        "late-1",
        "late",
        &[("10.244.3.1", Some("h"), None)],
        json!([]),
    ));
    let q = "late.ns.svc.cluster.local.";
    assert_negative(&ask(&index, q, RecordType::A), ResponseCode::NXDomain);
    index.upsert_service(&headless("ns", "late", json!([])));
    assert_eq!(data(&ask(&index, q, RecordType::A)), ["10.244.3.1"]);
    assert!(
        index
            .lookup(&name("1.3.244.10.in-addr.arpa."), RecordType::PTR)
            .is_some()
    );
}

#[test]
fn unsynced_index_answers_servfail_instead_of_nxdomain() {
    let mut index = index();
    index.set_synced(false);
    let answer = ask(&index, "nope.default.svc.cluster.local.", RecordType::A);
    assert_eq!(answer.rcode, ResponseCode::ServFail);
    // What is known is still answered.
    let answer = ask(
        &index,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(data(&answer), ["10.96.0.1"]);
}
