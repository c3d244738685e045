//! The NetworkPolicy model against upstream's documented semantics, one behaviour per test.
#![allow(clippy::unwrap_used, reason = "test fixtures are literals")]

use serde_json::json;

use super::*;

const NODE: &str = "linux-1";

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn ns(name: &str, labels: Value) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// A pod of `namespace` on `node` with `labels` and address `addr`, serving the named ports
/// `http` (TCP 8080) and `dns` (UDP 5353).
fn pod(namespace: &str, name: &str, node: &str, addr: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "c",
                "ports": [
                    {"name": "http", "containerPort": 8080},
                    {"name": "dns", "containerPort": 5353, "protocol": "UDP"}
                ]
            }]
        },
        "status": {"phase": "Running", "podIP": addr, "podIPs": [{"ip": addr}]}
    }))
    .unwrap()
}

fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec
    }))
    .unwrap()
}

/// Namespaces `app` (team=a) and `other` (team=b); in `app` on this node: `web` (10.0.0.2),
/// `db` (10.0.0.3), `client` (10.0.0.4); `remote` (10.0.1.2, app=client) on another node; in
/// `other`: `client` (10.0.0.5, app=client) and `agent` (10.0.0.6, app=agent).
fn cluster() -> ClusterState {
    let mut c = ClusterState::default();
    c.apply_namespace(&ns("app", json!({"team": "a"})));
    c.apply_namespace(&ns("other", json!({"team": "b"})));
    c.apply_pod(&pod("app", "web", NODE, "10.0.0.2", json!({"app": "web"})));
    c.apply_pod(&pod("app", "db", NODE, "10.0.0.3", json!({"app": "db"})));
    c.apply_pod(&pod(
        "app",
        "client",
        NODE,
        "10.0.0.4",
        json!({"app": "client"}),
    ));
    c.apply_pod(&pod(
        "app",
        "remote",
        "linux-2",
        "10.0.1.2",
        json!({"app": "client"}),
    ));
    c.apply_pod(&pod(
        "other",
        "client",
        NODE,
        "10.0.0.5",
        json!({"app": "client"}),
    ));
    c.apply_pod(&pod(
        "other",
        "agent",
        NODE,
        "10.0.0.6",
        json!({"app": "agent"}),
    ));
    c
}

fn local(p: &PodInfo) -> bool {
    p.node.as_deref() == Some(NODE)
}

fn rules(c: &ClusterState) -> BTreeMap<Ipv4Addr, PodRules> {
    c.pod_rules(&local)
}

fn ingress(c: &ClusterState, addr: &str) -> Allowed {
    rules(c)
        .get(&ip(addr))
        .and_then(|r| r.ingress.clone())
        .unwrap_or_else(|| panic!("{addr} is isolated for ingress"))
}

fn egress(c: &ClusterState, addr: &str) -> Allowed {
    rules(c)
        .get(&ip(addr))
        .and_then(|r| r.egress.clone())
        .unwrap_or_else(|| panic!("{addr} is isolated for egress"))
}

fn ips(list: &[&str]) -> IpRanges {
    IpRanges::from_ips(list.iter().map(|s| ip(s)))
}

fn tcp(port: u16) -> PortRange {
    PortRange::one(Protocol::Tcp, port)
}

#[test]
fn without_policies_no_pod_is_isolated() {
    assert!(rules(&cluster()).is_empty());
}

#[test]
fn default_deny_ingress_isolates_every_pod_of_its_namespace_on_this_node_only() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    ));
    let r = rules(&c);
    let isolated: BTreeSet<Ipv4Addr> = r.keys().copied().collect();
    // `remote` is on another node; `other`'s pods are in another namespace.
    assert_eq!(
        isolated,
        [ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4")].into()
    );
    for rules in r.values() {
        assert_eq!(
            rules.ingress,
            Some(Allowed::default()),
            "nothing allowed in"
        );
        assert_eq!(rules.egress, None, "egress not isolated");
        assert_eq!(rules.policies, ["app/deny".to_string()].into());
    }
}

#[test]
fn hostnetwork_and_finished_pods_are_neither_isolated_nor_peers() {
    let mut c = cluster();
    let mut host: Pod = pod(
        "app",
        "host",
        NODE,
        "192.168.1.10",
        json!({"app": "client"}),
    );
    if let Some(spec) = host.spec.as_mut() {
        spec.host_network = Some(true);
    }
    c.apply_pod(&host);
    let mut done = pod("app", "done", NODE, "10.0.0.9", json!({"app": "client"}));
    if let Some(status) = done.status.as_mut() {
        status.phase = Some("Succeeded".into());
    }
    c.apply_pod(&done);
    c.apply_policy(&policy(
        "app",
        "from-clients",
        json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]}),
    ));
    let r = rules(&c);
    assert!(!r.contains_key(&ip("192.168.1.10")));
    assert!(!r.contains_key(&ip("10.0.0.9")));
    assert_eq!(
        ingress(&c, "10.0.0.2").any_port,
        ips(&["10.0.0.4", "10.0.1.2"]),
        "the client pods of the namespace on any node, not the hostNetwork or finished ones"
    );
}

#[test]
fn pod_selector_peers_are_pods_of_the_policys_namespace() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "web",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]
        }),
    ));
    let r = rules(&c);
    assert_eq!(r.keys().copied().collect::<Vec<_>>(), [ip("10.0.0.2")]);
    let allowed = ingress(&c, "10.0.0.2");
    // other/client has the label too, but lives in another namespace.
    assert_eq!(allowed.any_port, ips(&["10.0.0.4", "10.0.1.2"]));
    assert!(allowed.ports.is_empty());
}

#[test]
fn namespace_selector_alone_allows_every_pod_of_the_selected_namespaces() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "from-b",
        json!({
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]
        }),
    ));
    assert_eq!(
        ingress(&c, "10.0.0.3").any_port,
        ips(&["10.0.0.5", "10.0.0.6"])
    );
}

#[test]
fn namespace_and_pod_selector_in_one_peer_are_anded_in_two_peers_ored() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "and",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{
                "namespaceSelector": {"matchLabels": {"team": "b"}},
                "podSelector": {"matchLabels": {"app": "client"}}
            }]}]
        }),
    ));
    assert_eq!(ingress(&c, "10.0.0.2").any_port, ips(&["10.0.0.5"]));

    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "or",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [
                {"namespaceSelector": {"matchLabels": {"team": "b"}}},
                {"podSelector": {"matchLabels": {"app": "client"}}}
            ]}]
        }),
    ));
    assert_eq!(
        ingress(&c, "10.0.0.2").any_port,
        ips(&["10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.2"])
    );
}

#[test]
fn namespace_selector_on_the_name_label_works_even_when_the_object_lacks_it() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "by-name",
        json!({
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}]}]
        }),
    ));
    assert_eq!(
        ingress(&c, "10.0.0.2").any_port,
        ips(&["10.0.0.5", "10.0.0.6"])
    );
}

#[test]
fn match_expressions_select_peers() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "expr",
        json!({
            "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]},
            "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web", "db"]}]}}]}]
        }),
    ));
    let r = rules(&c);
    assert_eq!(
        r.keys().copied().collect::<Vec<_>>(),
        [ip("10.0.0.2"), ip("10.0.0.3")]
    );
    assert_eq!(
        ingress(&c, "10.0.0.3").any_port,
        ips(&["10.0.0.4", "10.0.1.2"])
    );
}

#[test]
fn ip_block_allows_its_cidr_without_the_except_ranges() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "block",
        json!({
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "172.16.0.0/16", "except": ["172.16.1.0/24", "172.16.9.9/32"]}}]}]
        }),
    ));
    let any = ingress(&c, "10.0.0.3").any_port;
    let shown: Vec<String> = any.ranges().map(|(a, b)| format!("{a}-{b}")).collect();
    assert_eq!(
        shown,
        [
            "172.16.0.0-172.16.0.255",
            "172.16.2.0-172.16.9.8",
            "172.16.9.10-172.16.255.255"
        ]
    );
}

#[test]
fn empty_or_missing_from_allows_every_source_on_the_listed_ports() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "http-from-anyone",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [], "ports": [{"port": 8080}]}]
        }),
    ));
    let allowed = ingress(&c, "10.0.0.2");
    assert!(allowed.any_port.is_empty());
    assert_eq!(allowed.ports, [(tcp(8080), IpRanges::all())].into());
}

#[test]
fn a_rule_without_peers_or_ports_allows_everything() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "allow-all",
        json!({"podSelector": {}, "ingress": [{}]}),
    ));
    assert!(ingress(&c, "10.0.0.2").allows_everything());
}

#[test]
fn ports_default_to_tcp_and_take_udp_sctp_ranges_and_whole_protocols() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "ports",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                "ports": [
                    {"port": 80},
                    {"protocol": "UDP", "port": 53},
                    {"protocol": "SCTP", "port": 9000, "endPort": 9010},
                    {"protocol": "UDP"},
                    {"protocol": "ICMP", "port": 1},
                    {"port": 70000},
                    {"port": 100, "endPort": 90}
                ]
            }]
        }),
    ));
    let allowed = ingress(&c, "10.0.0.2");
    let peers = ips(&["10.0.0.4", "10.0.1.2"]);
    let expected: BTreeMap<PortRange, IpRanges> = [
        (tcp(80), peers.clone()),
        (
            PortRange {
                protocol: Protocol::Sctp,
                first: 9000,
                last: 9010,
            },
            peers.clone(),
        ),
        // UDP 53 is inside every UDP port for the same peers: one entry.
        (PortRange::any(Protocol::Udp), peers.clone()),
    ]
    .into();
    // An unknown protocol, a port out of range and an end before the start allow nothing.
    assert_eq!(allowed.ports, expected);
    assert!(allowed.any_port.is_empty());
}

#[test]
fn named_ports_resolve_against_the_destination_pod_for_ingress() {
    let mut c = cluster();
    let mut other = pod("app", "web2", NODE, "10.0.0.7", json!({"app": "web"}));
    if let Some(spec) = other.spec.as_mut() {
        spec.containers[0].ports =
            serde_json::from_value(json!([{"name": "http", "containerPort": 9090}])).unwrap();
    }
    c.apply_pod(&other);
    c.apply_pod(&pod(
        "app",
        "plain",
        NODE,
        "10.0.0.8",
        json!({"app": "web", "plain": "yes"}),
    ));
    if let Some(p) = c.pods.get_mut(&("app".to_string(), "plain".to_string())) {
        p.ports.clear();
    }
    c.apply_policy(&policy(
        "app",
        "named",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"ports": [{"port": "http"}, {"protocol": "UDP", "port": "http"}]}]
        }),
    ));
    assert_eq!(
        ingress(&c, "10.0.0.2").ports,
        [(tcp(8080), IpRanges::all())].into()
    );
    assert_eq!(
        ingress(&c, "10.0.0.7").ports,
        [(tcp(9090), IpRanges::all())].into()
    );
    // No container port of that name (or protocol): isolated, nothing allowed.
    assert_eq!(ingress(&c, "10.0.0.8"), Allowed::default());
}

#[test]
fn named_ports_resolve_against_each_destination_pod_for_egress() {
    let mut c = cluster();
    let mut alt = pod("app", "alt", "linux-2", "10.0.1.3", json!({"app": "db"}));
    if let Some(spec) = alt.spec.as_mut() {
        spec.containers[0].ports = serde_json::from_value(
            json!([{"name": "dns", "containerPort": 53, "protocol": "UDP"}]),
        )
        .unwrap();
    }
    c.apply_pod(&alt);
    c.apply_policy(&policy(
        "app",
        "egress-dns",
        json!({
            "podSelector": {"matchLabels": {"app": "client"}},
            "policyTypes": ["Egress"],
            "egress": [{
                "to": [
                    {"podSelector": {"matchLabels": {"app": "db"}}},
                    {"ipBlock": {"cidr": "192.168.0.0/16"}}
                ],
                "ports": [{"protocol": "UDP", "port": "dns"}, {"port": 443}]
            }]
        }),
    ));
    let r = rules(&c);
    assert_eq!(r.get(&ip("10.0.0.4")).and_then(|r| r.ingress.clone()), None);
    let allowed = egress(&c, "10.0.0.4");
    let mut peers_443 = ips(&["10.0.0.3", "10.0.1.3"]);
    peers_443.add(&IpRanges::cidr(Cidr::parse("192.168.0.0/16").unwrap()));
    let expected: BTreeMap<PortRange, IpRanges> = [
        (PortRange::one(Protocol::Udp, 5353), ips(&["10.0.0.3"])),
        (PortRange::one(Protocol::Udp, 53), ips(&["10.0.1.3"])),
        (tcp(443), peers_443),
    ]
    .into();
    assert_eq!(allowed.ports, expected);
}

#[test]
fn egress_named_ports_without_peers_reach_every_pod_serving_that_name() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "to-http",
        json!({
            "podSelector": {"matchLabels": {"app": "client"}},
            "policyTypes": ["Egress"],
            "egress": [{"ports": [{"port": "http"}]}]
        }),
    ));
    let allowed = egress(&c, "10.0.0.4");
    assert_eq!(
        allowed.ports,
        [(
            tcp(8080),
            ips(&[
                "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.1.2"
            ])
        )]
        .into()
    );
}

#[test]
fn policy_types_default_from_the_rules_present() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "no-types-with-egress",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}),
    ));
    c.apply_policy(&policy(
        "app",
        "no-types",
        json!({"podSelector": {"matchLabels": {"app": "db"}}}),
    ));
    c.apply_policy(&policy(
        "app",
        "egress-only",
        json!({"podSelector": {"matchLabels": {"app": "client"}}, "policyTypes": ["Egress"]}),
    ));
    let r = rules(&c);
    let web = &r[&ip("10.0.0.2")];
    assert_eq!(web.ingress, Some(Allowed::default()));
    assert_eq!(
        web.egress.as_ref().map(|e| e.ports.clone()),
        Some([(PortRange::one(Protocol::Udp, 53), IpRanges::all())].into())
    );
    let db = &r[&ip("10.0.0.3")];
    assert_eq!(db.ingress, Some(Allowed::default()));
    assert_eq!(db.egress, None);
    let client = &r[&ip("10.0.0.4")];
    assert_eq!(client.ingress, None);
    assert_eq!(client.egress, Some(Allowed::default()));
}

#[test]
fn allowed_traffic_is_the_union_of_every_selecting_policy() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "a",
        json!({
            "podSelector": {},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}], "ports": [{"port": 80}]}]
        }),
    ));
    c.apply_policy(&policy(
        "app",
        "b",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "db"}}}]},
                {"from": [{"ipBlock": {"cidr": "10.0.0.4/32"}}], "ports": [{"port": 80}, {"port": 81}]}
            ]
        }),
    ));
    let r = rules(&c);
    let web = r[&ip("10.0.0.2")].clone();
    assert_eq!(
        web.policies,
        ["app/a".to_string(), "app/b".to_string()].into()
    );
    let allowed = web.ingress.unwrap();
    assert_eq!(allowed.any_port, ips(&["10.0.0.3"]));
    assert_eq!(
        allowed.ports,
        [
            (tcp(80), ips(&["10.0.0.4", "10.0.1.2"])),
            (tcp(81), ips(&["10.0.0.4"]))
        ]
        .into()
    );
    // db is only selected by `a`.
    let db = r[&ip("10.0.0.3")].ingress.clone().unwrap();
    assert_eq!(db.ports, [(tcp(80), ips(&["10.0.0.4", "10.0.1.2"]))].into());
}

#[test]
fn port_entries_covered_by_an_any_port_peer_are_dropped() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "overlap",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]},
                {"from": [{"podSelector": {}}], "ports": [{"port": 80}]}
            ]
        }),
    ));
    let allowed = ingress(&c, "10.0.0.2");
    assert_eq!(allowed.any_port, ips(&["10.0.0.4", "10.0.1.2"]));
    assert_eq!(
        allowed.ports,
        [(tcp(80), ips(&["10.0.0.2", "10.0.0.3"]))].into()
    );
}

#[test]
fn policies_of_other_namespaces_do_not_apply() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "other",
        "deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
    ));
    let r = rules(&c);
    assert_eq!(
        r.keys().copied().collect::<BTreeSet<_>>(),
        [ip("10.0.0.5"), ip("10.0.0.6")].into()
    );
}

#[test]
fn invalid_selectors_and_peers_never_open_traffic() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "bad-target",
        json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]}}),
    ));
    assert!(
        rules(&c).is_empty(),
        "an invalid podSelector selects nothing"
    );
    c.apply_policy(&policy(
        "app",
        "bad-peers",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [
                {},
                {"ipBlock": {"cidr": "not-a-cidr"}},
                {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
                {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]}}
            ]}]
        }),
    ));
    assert_eq!(ingress(&c, "10.0.0.2"), Allowed::default());
}

#[test]
fn deleting_a_policy_or_a_peer_pod_updates_the_verdict() {
    let mut c = cluster();
    let np = policy(
        "app",
        "web",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}]}]
        }),
    );
    c.apply_policy(&np);
    c.delete_pod(&pod("app", "remote", "linux-2", "10.0.1.2", json!({})));
    assert_eq!(ingress(&c, "10.0.0.2").any_port, ips(&["10.0.0.4"]));
    c.delete_policy(&np);
    assert!(rules(&c).is_empty());
}

#[test]
fn nodes_that_do_not_enforce_are_reported_per_policy() {
    let mut c = cluster();
    c.apply_pod(&pod(
        "app",
        "iis",
        "windows-2019-1",
        "10.0.2.2",
        json!({"app": "web"}),
    ));
    c.apply_policy(&policy(
        "app",
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
    ));
    c.apply_policy(&policy(
        "app",
        "db",
        json!({"podSelector": {"matchLabels": {"app": "db"}}}),
    ));
    let enforcing = |n: &str| n.starts_with("linux-");
    let report = c.unenforced(&enforcing);
    assert_eq!(
        report,
        [(
            ("app".to_string(), "web".to_string()),
            ["windows-2019-1".to_string()].into()
        )]
        .into()
    );
}

#[test]
fn overlapping_port_ranges_are_cut_into_disjoint_entries_with_merged_peers() {
    let mut c = cluster();
    c.apply_policy(&policy(
        "app",
        "ranges",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                 "ports": [{"port": 8000, "endPort": 8100}]},
                {"from": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                 "ports": [{"port": 8050, "endPort": 8200}, {"port": 8101, "endPort": 8200}]}
            ]
        }),
    ));
    let range = |first, last| PortRange {
        protocol: Protocol::Tcp,
        first,
        last,
    };
    assert_eq!(
        ingress(&c, "10.0.0.2").ports,
        [
            (range(8000, 8049), ips(&["10.0.0.4", "10.0.1.2"])),
            (
                range(8050, 8100),
                ips(&["10.0.0.3", "10.0.0.4", "10.0.1.2"])
            ),
            (range(8101, 8200), ips(&["10.0.0.3"])),
        ]
        .into()
    );
}
