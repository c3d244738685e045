//! Behaviour tests of the framework and every plugin, table-driven over small clusters.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use crate::framework::{FitError, Framework, FrameworkOptions, TieBreak};
use crate::plugin::ScorePlugin;
use crate::plugins::default_profile;
use crate::plugins::node_resources::BalancedAllocation;
use crate::snapshot::{NodeChange, PodInfo, Snapshot};

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(&k);
                } else {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p,
    }
}

/// A 4-CPU / 32 GiB / 110-pod Linux node, changed by `patch` (a JSON merge patch).
fn node(name: &str, patch: Value) -> Node {
    let mut v = json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}}
    });
    merge(&mut v, patch);
    serde_json::from_value(v).expect("fixture node")
}

fn windows_node(name: &str, build: &str, tainted: bool) -> Node {
    let taints = if tainted {
        json!([{"key": "os", "value": "windows", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    node(
        name,
        json!({
            "metadata": {"labels": {"kubernetes.io/os": "windows", "node.kubernetes.io/windows-build": build}},
            "spec": {"taints": taints}
        }),
    )
}

/// A pod in `default` with one `nginx` container, changed by `patch` applied to the whole pod.
fn pod(name: &str, patch: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}
    });
    merge(&mut v, patch);
    serde_json::from_value(v).expect("fixture pod")
}

fn spec(patch: Value) -> Value {
    json!({"spec": patch})
}

fn snapshot(nodes: &[Node]) -> Snapshot {
    let mut s = Snapshot::new();
    for n in nodes {
        s.upsert_node(n);
    }
    s
}

fn place(s: &mut Snapshot, p: &Pod, node: &str) {
    s.add_pod(Arc::new(PodInfo::new(p, node)));
}

fn deterministic() -> FrameworkOptions {
    FrameworkOptions {
        tie_break: TieBreak::FirstInOrder,
        ..FrameworkOptions::default()
    }
}

fn upstream() -> FrameworkOptions {
    FrameworkOptions {
        os_placement: false,
        ..deterministic()
    }
}

/// Which nodes pass the filters for `p`, by name, in snapshot order.
fn feasible(s: &Snapshot, p: &Pod, os_placement: bool) -> Vec<String> {
    let profile = default_profile(os_placement);
    let cs = profile.pre_filter(p, s);
    s.nodes()
        .iter()
        .filter(|n| profile.run_filters(&cs, n).is_ok())
        .map(|n| n.name.clone())
        .collect()
}

fn schedule(s: &Snapshot, p: &Pod, opts: FrameworkOptions) -> Result<String, FitError> {
    Framework::new(opts).schedule(s, p).map(|pl| pl.node)
}

fn fit_message(s: &Snapshot, p: &Pod, opts: FrameworkOptions) -> String {
    match schedule(s, p, opts) {
        Ok(n) => panic!("expected no fit, got {n}"),
        Err(e) => e.to_string(),
    }
}

// ----- NodeUnschedulable, NodeName -----

#[test]
fn cordoned_node_is_filtered_unless_tolerated() {
    let s = snapshot(&[
        node("cordoned", json!({"spec": {"unschedulable": true}})),
        node("open", json!({})),
    ]);
    let cases = [
        (json!({}), vec!["open"]),
        (
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
            vec!["cordoned", "open"],
        ),
        (
            json!({"tolerations": [{"operator": "Exists"}]}),
            vec!["cordoned", "open"],
        ),
        (
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}]}),
            vec!["open"],
        ),
    ];
    for (sp, want) in cases {
        assert_eq!(
            feasible(&s, &pod("p", spec(sp.clone())), true),
            want,
            "{sp}"
        );
    }
    let s = snapshot(&[node("cordoned", json!({"spec": {"unschedulable": true}}))]);
    let msg = fit_message(&s, &pod("p", json!({})), deterministic());
    assert!(
        msg.starts_with("0/1 nodes are available: 1 node(s) were unschedulable."),
        "{msg}"
    );
}

#[test]
fn node_name_must_match_the_node() {
    let s = snapshot(&[node("a", json!({})), node("b", json!({}))]);
    assert_eq!(
        feasible(&s, &pod("p", spec(json!({"nodeName": "b"}))), true),
        vec!["b"]
    );
}

// ----- NodeAffinity -----

#[test]
fn node_selector_and_required_affinity_support_every_operator() {
    let s = snapshot(&[
        node(
            "a",
            json!({"metadata": {"labels": {"zone": "z1", "gen": "3", "ssd": "true"}}}),
        ),
        node(
            "b",
            json!({"metadata": {"labels": {"zone": "z2", "gen": "5"}}}),
        ),
        node("c", json!({"metadata": {"labels": {"zone": "z3"}}})),
    ]);
    let req = |exprs: Value| {
        spec(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": exprs}}}}),
        )
    };
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "nodeSelector",
            spec(json!({"nodeSelector": {"zone": "z2"}})),
            vec!["b"],
        ),
        (
            "In",
            req(
                json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z3"]}]}]),
            ),
            vec!["a", "c"],
        ),
        (
            "NotIn",
            req(
                json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}]),
            ),
            vec!["b", "c"],
        ),
        (
            "Exists",
            req(json!([{"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}])),
            vec!["a"],
        ),
        (
            "DoesNotExist",
            req(json!([{"matchExpressions": [{"key": "ssd", "operator": "DoesNotExist"}]}])),
            vec!["b", "c"],
        ),
        (
            "Gt",
            req(json!([{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}])),
            vec!["b"],
        ),
        (
            "Lt",
            req(json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["4"]}]}])),
            vec!["a"],
        ),
        (
            "terms are ORed",
            req(json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}])),
            vec!["a", "b"],
        ),
        (
            "expressions are ANDed",
            req(json!([{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["z1", "z2"]}, {"key": "gen", "operator": "Gt", "values": ["4"]}]}])),
            vec!["b"],
        ),
        (
            "matchFields metadata.name",
            req(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]),
            ),
            vec!["c"],
        ),
        ("empty term matches nothing", req(json!([{}])), vec![]),
        (
            "selector and affinity both apply",
            {
                let mut v =
                    req(json!([{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]));
                v["spec"]["nodeSelector"] = json!({"gen": "5"});
                v
            },
            vec!["b"],
        ),
    ];
    for (what, patch, want) in cases {
        assert_eq!(feasible(&s, &pod("p", patch), false), want, "{what}");
    }
}

#[test]
fn preferred_node_affinity_decides_between_feasible_nodes() {
    let s = snapshot(&[
        node("a", json!({})),
        node("b", json!({"metadata": {"labels": {"disk": "ssd"}}})),
    ]);
    let p = pod(
        "p",
        spec(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}),
        ),
    );
    assert_eq!(schedule(&s, &p, deterministic()).ok().as_deref(), Some("b"));
}

// ----- TaintToleration -----

#[test]
fn untolerated_noschedule_and_noexecute_taints_filter_but_prefer_no_schedule_does_not() {
    let taint = |effect: &str| {
        node(
            "n",
            json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": effect}]}}),
        )
    };
    let cases = [
        ("NoSchedule", json!({}), false),
        ("NoExecute", json!({}), false),
        ("PreferNoSchedule", json!({}), true),
        (
            "NoSchedule",
            json!({"tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]}),
            true,
        ),
        (
            "NoSchedule",
            json!({"tolerations": [{"key": "k", "value": "v"}]}),
            true,
        ),
        (
            "NoSchedule",
            json!({"tolerations": [{"key": "k", "operator": "Exists"}]}),
            true,
        ),
        (
            "NoSchedule",
            json!({"tolerations": [{"operator": "Exists"}]}),
            true,
        ),
        (
            "NoSchedule",
            json!({"tolerations": [{"key": "k", "value": "other"}]}),
            false,
        ),
        (
            "NoSchedule",
            json!({"tolerations": [{"key": "k", "value": "v", "effect": "NoExecute"}]}),
            false,
        ),
        (
            "NoExecute",
            json!({"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]}),
            true,
        ),
    ];
    for (effect, sp, fits) in cases {
        let s = snapshot(&[taint(effect)]);
        assert_eq!(
            !feasible(&s, &pod("p", spec(sp.clone())), false).is_empty(),
            fits,
            "{effect} {sp}"
        );
    }
}

#[test]
fn prefer_no_schedule_taints_lower_the_score() {
    let s = snapshot(&[
        node(
            "tainted",
            json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]}}),
        ),
        node("clean", json!({})),
    ]);
    assert_eq!(
        schedule(&s, &pod("p", json!({})), deterministic())
            .ok()
            .as_deref(),
        Some("clean")
    );
    let tolerant = pod(
        "p",
        spec(
            json!({"tolerations": [{"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"}]}),
        ),
    );
    let profile = default_profile(true);
    let mut cs = profile.pre_filter(&tolerant, &s);
    let scores = profile.score_nodes(&mut cs, &s, &[0, 1]);
    assert_eq!(
        scores[0], scores[1],
        "a tolerated PreferNoSchedule taint costs nothing"
    );
}

// ----- NodeResourcesFit -----

fn requests(cpu: &str, mem: &str) -> Value {
    spec(
        json!({"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}),
    )
}

#[test]
fn node_resources_fit_reports_each_insufficient_resource() {
    let mut s = snapshot(&[node(
        "n",
        json!({"status": {"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "2", "example.com/gpu": "1"}}}),
    )]);
    place(&mut s, &pod("existing", requests("600m", "600Mi")), "n");
    let gpu = spec(
        json!({"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"example.com/gpu": "2"}}}]}),
    );
    let cases = [
        (requests("400m", "400Mi"), None),
        (requests("500m", "100Mi"), Some("1 Insufficient cpu")),
        (requests("100m", "500Mi"), Some("1 Insufficient memory")),
        (
            requests("500m", "500Mi"),
            Some("1 Insufficient cpu, 1 Insufficient memory"),
        ),
        (gpu, Some("1 Insufficient example.com/gpu")),
    ];
    for (patch, want) in cases {
        let p = pod("p", patch.clone());
        match (schedule(&s, &p, deterministic()), want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) => assert!(
                e.to_string()
                    .starts_with(&format!("0/1 nodes are available: {w}.")),
                "{e}"
            ),
            (got, want) => panic!("{patch}: got {got:?}, want {want:?}"),
        }
    }
    place(&mut s, &pod("second", json!({})), "n");
    let msg = fit_message(&s, &pod("p", json!({})), deterministic());
    assert!(
        msg.starts_with("0/1 nodes are available: 1 Too many pods."),
        "{msg}"
    );
}

#[test]
fn pod_overhead_and_init_containers_count_towards_fit() {
    let s = snapshot(&[node("n", json!({"status": {"allocatable": {"cpu": "1"}}}))]);
    let init_heavy = pod(
        "p",
        spec(
            json!({"initContainers": [{"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "1500m"}}}]}),
        ),
    );
    assert!(feasible(&s, &init_heavy, false).is_empty());
    let overhead = pod(
        "p",
        spec(json!({
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "900m"}}}],
            "overhead": {"cpu": "200m"}
        })),
    );
    assert!(feasible(&s, &overhead, false).is_empty());
}

#[test]
fn least_allocated_prefers_the_emptier_node() {
    let mut s = snapshot(&[node("busy", json!({})), node("idle", json!({}))]);
    place(&mut s, &pod("existing", requests("3", "16Gi")), "busy");
    assert_eq!(
        schedule(&s, &pod("p", requests("100m", "100Mi")), deterministic())
            .ok()
            .as_deref(),
        Some("idle")
    );
}

#[test]
fn balanced_allocation_prefers_even_utilisation() {
    let s = snapshot(&[node("n", json!({}))]);
    let p = pod("p", requests("2", "16Gi"));
    let profile = default_profile(true);
    let balanced = |p: &Pod| {
        let mut cs = profile.pre_filter(p, &s);
        let _ = BalancedAllocation.pre_score(&mut cs);
        BalancedAllocation.score(&cs, &s.nodes()[0], &s)
    };
    assert_eq!(balanced(&p), 100);
    let skewed = pod("q", requests("4", "100Mi"));
    assert!(balanced(&skewed) < 60);
}

// ----- NodePorts -----

#[test]
fn host_ports_conflict_per_protocol_and_ip() {
    let port = |p: i32, proto: &str, ip: &str| {
        let mut c = json!({"containerPort": 80, "hostPort": p, "protocol": proto});
        if !ip.is_empty() {
            c["hostIP"] = json!(ip);
        }
        spec(json!({"containers": [{"name": "app", "image": "nginx", "ports": [c]}]}))
    };
    let mut s = snapshot(&[node("n", json!({}))]);
    place(&mut s, &pod("existing", port(8080, "TCP", "10.0.0.1")), "n");
    let cases = [
        (port(8080, "TCP", ""), false),
        (port(8080, "TCP", "10.0.0.1"), false),
        (port(8080, "TCP", "10.0.0.2"), true),
        (port(8080, "UDP", ""), true),
        (port(9090, "TCP", ""), true),
    ];
    for (patch, fits) in cases {
        assert_eq!(
            !feasible(&s, &pod("p", patch.clone()), false).is_empty(),
            fits,
            "{patch}"
        );
    }
}

// ----- InterPodAffinity -----

fn zoned(name: &str, zone: &str) -> Node {
    node(name, json!({"metadata": {"labels": {"zone": zone}}}))
}

#[test]
fn required_pod_affinity_and_anti_affinity_follow_topology_domains() {
    let mut s = snapshot(&[zoned("a1", "a"), zoned("a2", "a"), zoned("b1", "b")]);
    place(
        &mut s,
        &pod("db", json!({"metadata": {"labels": {"app": "db"}}})),
        "a1",
    );
    let term = json!([{"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}]);
    let with_db = pod(
        "web",
        spec(
            json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}),
        ),
    );
    assert_eq!(feasible(&s, &with_db, false), vec!["a1", "a2"]);
    let away = pod(
        "web",
        spec(
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}),
        ),
    );
    assert_eq!(feasible(&s, &away, false), vec!["b1"]);
    let other_ns = pod(
        "web",
        json!({"metadata": {"namespace": "other"},
        "spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}}),
    );
    assert!(
        feasible(&s, &other_ns, false).is_empty(),
        "terms default to the pod's own namespace"
    );
    let msg = fit_message(&s, &other_ns, deterministic());
    assert!(
        msg.contains("3 node(s) didn't match pod affinity rules"),
        "{msg}"
    );
}

#[test]
fn first_pod_of_a_self_affine_group_may_land_anywhere() {
    let s = snapshot(&[zoned("a1", "a"), zoned("b1", "b")]);
    let term = json!([{"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}]);
    let p = pod(
        "cache-0",
        json!({"metadata": {"labels": {"app": "cache"}},
        "spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}}),
    );
    assert_eq!(feasible(&s, &p, false), vec!["a1", "b1"]);
}

#[test]
fn existing_pods_anti_affinity_keeps_matching_pods_out() {
    let mut s = snapshot(&[zoned("a1", "a"), zoned("b1", "b")]);
    let term =
        json!([{"labelSelector": {"matchLabels": {"team": "noisy"}}, "topologyKey": "zone"}]);
    place(
        &mut s,
        &pod(
            "loner",
            spec(
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": term}}}),
            ),
        ),
        "a1",
    );
    let noisy = pod("noisy", json!({"metadata": {"labels": {"team": "noisy"}}}));
    assert_eq!(feasible(&s, &noisy, false), vec!["b1"]);
    assert_eq!(
        feasible(&s, &pod("quiet", json!({})), false),
        vec!["a1", "b1"]
    );
}

// ----- PodTopologySpread -----

#[test]
fn topology_spread_do_not_schedule_limits_skew() {
    let mut s = snapshot(&[
        zoned("a1", "a"),
        zoned("b1", "b"),
        node("nozone", json!({})),
    ]);
    let web = |n: &str| pod(n, json!({"metadata": {"labels": {"app": "web"}}}));
    place(&mut s, &web("w1"), "a1");
    place(&mut s, &web("w2"), "a1");
    place(&mut s, &web("w3"), "b1");
    let constraint = |skew: i32| {
        pod(
            "w4",
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"topologySpreadConstraints": [
            {"maxSkew": skew, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]}}),
        )
    };
    assert_eq!(feasible(&s, &constraint(1), false), vec!["b1"]);
    assert_eq!(feasible(&s, &constraint(2), false), vec!["a1", "b1"]);
    let scheduled_anyway = pod(
        "w4",
        spec(json!({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]})),
    );
    assert_eq!(feasible(&s, &scheduled_anyway, false).len(), 3);
    let msg = fit_message(
        &snapshot(&[node("nozone", json!({}))]),
        &constraint(1),
        deterministic(),
    );
    assert!(
        msg.contains(
            "1 node(s) didn't match pod topology spread constraints (missing required label)"
        ),
        "{msg}"
    );
}

// ----- ImageLocality, spreading -----

#[test]
fn image_locality_prefers_nodes_holding_the_image() {
    let s = snapshot(&[
        node("cold", json!({})),
        node(
            "warm",
            json!({"status": {"images": [{"names": ["docker.io/library/big:1", "big:1"], "sizeBytes": 800_000_000}]}}),
        ),
    ]);
    let p = pod(
        "p",
        spec(json!({"containers": [{"name": "app", "image": "big:1"}]})),
    );
    assert_eq!(
        schedule(&s, &p, deterministic()).ok().as_deref(),
        Some("warm")
    );
}

#[test]
fn pods_of_one_owner_spread_across_nodes() {
    let owned = |n: &str| {
        pod(
            n,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]}}),
        )
    };
    let mut s = snapshot(&[node("a", json!({})), node("b", json!({}))]);
    place(&mut s, &owned("r1"), "a");
    assert_eq!(
        schedule(&s, &owned("r2"), deterministic()).ok().as_deref(),
        Some("b")
    );
}

// ----- OS placement and Windows builds (beyond upstream) -----

#[test]
fn windows_pod_never_lands_on_linux_node() {
    let s = snapshot(&[
        node("l1", json!({})),
        node("l2", json!({})),
        node("l3", json!({})),
    ]);
    let p = pod("p", spec(json!({"os": {"name": "windows"}})));
    let msg = fit_message(&s, &p, deterministic());
    assert_eq!(
        msg,
        "0/3 nodes are available: 3 node(s) run linux, pod requires windows (spec.os.name). \
         preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // Upstream would place it: nothing in the pod selects a node.
    assert!(schedule(&s, &p, upstream()).is_ok());
}

#[test]
fn linux_pods_never_land_on_windows_nodes_even_when_tolerating() {
    let s = snapshot(&[windows_node("w", "10.0.17763", true), node("l", json!({}))]);
    let tolerant = pod("p", spec(json!({"tolerations": [{"operator": "Exists"}]})));
    assert_eq!(feasible(&s, &tolerant, true), vec!["l"]);
    assert_eq!(feasible(&s, &tolerant, false), vec!["w", "l"]);
}

#[test]
fn pods_with_windows_images_are_windows_pods() {
    let s = snapshot(&[node("l", json!({})), windows_node("w", "10.0.20348", false)]);
    let p = pod(
        "p",
        spec(
            json!({"containers": [{"name": "app", "image": "mcr.microsoft.com/windows/servercore:ltsc2022"}]}),
        ),
    );
    assert_eq!(feasible(&s, &p, true), vec!["w"]);
}

#[test]
fn ltsc2019_image_only_lands_on_2019_nodes() {
    let s = snapshot(&[
        windows_node("w2019", "10.0.17763", false),
        windows_node("w2022", "10.0.20348", false),
        windows_node("w2025", "10.0.26100", false),
    ]);
    let p = pod(
        "p",
        spec(
            json!({"containers": [{"name": "app", "image": "mcr.microsoft.com/windows/servercore:ltsc2019"}]}),
        ),
    );
    assert_eq!(feasible(&s, &p, true), vec!["w2019"]);
    let s = snapshot(&[windows_node("w2022", "10.0.20348", false)]);
    let msg = fit_message(&s, &p, deterministic());
    assert!(
        msg.starts_with("0/1 nodes are available: 1 node(s) run Windows build 10.0.20348, image mcr.microsoft.com/windows/servercore:ltsc2019 needs 10.0.17763 (process isolation)."),
        "{msg}"
    );
}

#[test]
fn a_2025_host_runs_2022_images() {
    let s = snapshot(&[
        windows_node("w2019", "10.0.17763", false),
        windows_node("w2022", "10.0.20348", false),
        windows_node("w2025", "10.0.26100", false),
    ]);
    let img = |tag: &str| {
        pod(
            "p",
            spec(
                json!({"containers": [{"name": "app", "image": format!("mcr.microsoft.com/windows/servercore:{tag}")}]}),
            ),
        )
    };
    assert_eq!(feasible(&s, &img("ltsc2022"), true), vec!["w2022", "w2025"]);
    assert_eq!(
        feasible(&s, &img("ltsc2025"), true),
        vec!["w2025"],
        "never an image newer than the host"
    );
    assert_eq!(feasible(&s, &img("1809"), true), vec!["w2019"]);
}

#[test]
fn win_webserver_replicas_both_land_on_the_2019_node() {
    // The seed manifest's pod template: servercore:ltsc2019 and nodeSelector os=windows.
    let replica = |n: &str| {
        pod(
            n,
            json!({
                "metadata": {"labels": {"app": "win-webserver"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "win-webserver-1", "uid": "rs-1", "controller": true}]},
                "spec": {
                    "containers": [{"name": "windowswebserver", "image": "mcr.microsoft.com/windows/servercore:ltsc2019", "command": ["powershell.exe"]}],
                    "nodeSelector": {"kubernetes.io/os": "windows"}
                }
            }),
        )
    };
    let mut s = snapshot(&[
        node("linux", json!({})),
        windows_node("win-2019", "10.0.17763", false),
        windows_node("win-2022", "10.0.20348", false),
    ]);
    let mut fw = Framework::new(FrameworkOptions::default());
    for name in ["win-webserver-a", "win-webserver-b"] {
        let p = replica(name);
        let placed = fw.schedule(&s, &p).expect("fits");
        assert_eq!(placed.node, "win-2019");
        place(&mut s, &p, &placed.node);
    }
    // Upstream spreads the replicas, putting one where it can never start.
    let mut s = snapshot(&[
        node("linux", json!({})),
        windows_node("win-2019", "10.0.17763", false),
        windows_node("win-2022", "10.0.20348", false),
    ]);
    let mut fw = Framework::new(upstream());
    let mut nodes = Vec::new();
    for name in ["win-webserver-a", "win-webserver-b"] {
        let p = replica(name);
        let placed = fw.schedule(&s, &p).expect("fits");
        place(&mut s, &p, &placed.node);
        nodes.push(placed.node);
    }
    nodes.sort();
    assert_eq!(nodes, vec!["win-2019", "win-2022"]);
}

// ----- FitError -----

#[test]
fn fit_error_message_matches_upstream_format() {
    let s = snapshot(&[
        windows_node("w1", "10.0.17763", true),
        windows_node("w2", "10.0.20348", true),
        node("l1", json!({})),
        node("l2", json!({})),
        node("l3", json!({})),
    ]);
    let p = pod("p", spec(json!({"nodeSelector": {"disktype": "ssd"}})));
    assert_eq!(
        fit_message(&s, &p, upstream()),
        "0/5 nodes are available: 2 node(s) had untolerated taint {os: windows}, 3 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    );
    // With OS placement, the Windows nodes say why they are wrong for a Linux pod.
    assert_eq!(
        fit_message(&s, &p, deterministic()),
        "0/5 nodes are available: 2 node(s) run windows, pod requires linux (nothing selects an OS; pods default to linux), \
         3 node(s) didn't match Pod's node affinity/selector. \
         preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    );
}

#[test]
fn fit_error_sorts_reasons_as_strings_like_upstream() {
    let err = FitError {
        num_all_nodes: 12,
        reasons: [
            ("Insufficient cpu".to_string(), 10),
            ("node(s) were unschedulable".to_string(), 2),
        ]
        .into_iter()
        .collect(),
        unresolvable_nodes: 2,
        resolvable_nodes: 10,
        preemption_never: false,
        ..FitError::default()
    };
    assert_eq!(
        err.to_string(),
        "0/12 nodes are available: 10 Insufficient cpu, 2 node(s) were unschedulable. \
         preemption: 0/12 nodes are available: 10 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        FitError::default().to_string(),
        "no nodes available to schedule pods"
    );
}

// ----- framework mechanics -----

#[test]
fn num_feasible_nodes_to_find_matches_upstream() {
    let fw = Framework::new(FrameworkOptions::default());
    for (all, want) in [
        (50, 50),
        (100, 100),
        (1000, 420),
        (5000, 500),
        (6000, 300),
        (20000, 1000),
    ] {
        assert_eq!(fw.num_feasible_nodes_to_find(all), want, "{all} nodes");
    }
    let all = Framework::new(FrameworkOptions {
        percentage_of_nodes_to_score: Some(100),
        ..FrameworkOptions::default()
    });
    assert_eq!(all.num_feasible_nodes_to_find(5000), 5000);
}

#[test]
fn assumed_pods_count_against_capacity() {
    let mut s = snapshot(&[node(
        "n",
        json!({"status": {"allocatable": {"cpu": "1", "pods": "110"}}}),
    )]);
    let mut fw = Framework::new(deterministic());
    for i in 0..4 {
        let p = pod(&format!("p{i}"), requests("250m", "1Mi"));
        let placed = fw.schedule(&s, &p).expect("fits");
        place(&mut s, &p, &placed.node);
    }
    let msg = fit_message(&s, &pod("p5", requests("250m", "1Mi")), deterministic());
    assert!(
        msg.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
        "{msg}"
    );
    assert!(
        msg.ends_with("1 No preemption victims found for incoming pod."),
        "{msg}"
    );
    s.remove_pod("default/p0");
    assert!(schedule(&s, &pod("p5", requests("250m", "1Mi")), deterministic()).is_ok());
}

#[test]
fn node_heartbeats_are_not_cluster_changes() {
    let mut s = snapshot(&[node("n", json!({}))]);
    let beat = node(
        "n",
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(s.upsert_node(&beat), NodeChange::Irrelevant);
    let relabelled = node("n", json!({"metadata": {"labels": {"new": "label"}}}));
    assert_eq!(s.upsert_node(&relabelled), NodeChange::Relevant);
}

#[test]
fn pods_on_removed_nodes_come_back_with_the_node() {
    let mut s = snapshot(&[node(
        "n",
        json!({"status": {"allocatable": {"cpu": "1", "pods": "110"}}}),
    )]);
    place(&mut s, &pod("p", requests("1", "1Mi")), "n");
    assert!(s.remove_node("n"));
    assert!(s.nodes().is_empty());
    s.upsert_node(&node(
        "n",
        json!({"status": {"allocatable": {"cpu": "1", "pods": "110"}}}),
    ));
    assert_eq!(s.nodes()[0].requested.milli_cpu, 1000);
    assert_eq!(s.nodes()[0].pods.len(), 1);
}

#[test]
fn random_tie_break_spreads_over_equal_nodes() {
    let names: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
    let nodes: Vec<Node> = names.iter().map(|n| node(n, json!({}))).collect();
    let s = snapshot(&nodes);
    let mut fw = Framework::new(FrameworkOptions {
        seed: 42,
        ..FrameworkOptions::default()
    });
    let picked: std::collections::HashSet<String> = (0..64)
        .filter_map(|i| fw.schedule(&s, &pod(&format!("p{i}"), json!({}))).ok())
        .map(|p| p.node)
        .collect();
    assert!(
        picked.len() > 1,
        "ties broken the same way every time: {picked:?}"
    );
}

// ----- remembered node-only answers (pod scheduling signatures) -----

#[test]
fn pods_sharing_a_signature_are_placed_as_without_the_memo() {
    let mut nodes: Vec<Node> = (0..6)
        .map(|i| windows_node(&format!("w{i}"), ["10.0.17763", "10.0.20348"][i % 2], true))
        .collect();
    nodes.extend((0..6).map(|i| node(&format!("l{i}"), json!({}))));
    let mut remembered = snapshot(&nodes);
    let mut fresh = snapshot(&nodes);
    let mut fw = Framework::new(deterministic());
    let win_2019 = |name: &str| {
        pod(
            name,
            json!({"spec": {
                "containers": [{"name": "app", "image": "mcr.microsoft.com/windows/servercore:ltsc2019", "resources": {"requests": {"cpu": "1"}}}],
                "nodeSelector": {"kubernetes.io/os": "windows"},
                "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]
            }}),
        )
    };
    // Twelve pods of 1 CPU fill the three 2019 nodes (4 CPU each); the thirteenth fits nowhere
    // and must explain every node, including those whose rejection was remembered.
    for i in 0..12 {
        let p = win_2019(&format!("p{i}"));
        let placed = fw.schedule(&remembered, &p).expect("fits").node;
        let expected = Framework::new(deterministic())
            .schedule(&fresh, &p)
            .expect("fits")
            .node;
        assert!(
            feasible(&fresh, &p, true).contains(&placed),
            "{placed} is not feasible for {i}"
        );
        place(&mut remembered, &p, &placed);
        place(&mut fresh, &p, &expected);
    }
    let last = win_2019("p12");
    let remembered_error = fw.schedule(&remembered, &last).expect_err("full");
    let fresh_error = Framework::new(deterministic())
        .schedule(&fresh, &last)
        .expect_err("full");
    assert_eq!(remembered_error, fresh_error);
    assert_eq!(
        remembered_error.reasons.values().sum::<usize>(),
        12,
        "{remembered_error}"
    );
}

#[test]
fn remembered_answers_are_forgotten_when_a_node_changes() {
    let ssd = |name: &str, ssd: bool| {
        let label = if ssd { json!("ssd") } else { Value::Null };
        node(name, json!({"metadata": {"labels": {"disk": label}}}))
    };
    let mut s = snapshot(&[ssd("a", true), ssd("b", false)]);
    let mut fw = Framework::new(deterministic());
    let wants_ssd = |name: &str| pod(name, spec(json!({"nodeSelector": {"disk": "ssd"}})));
    for i in 0..3 {
        assert_eq!(
            fw.schedule(&s, &wants_ssd(&format!("p{i}")))
                .expect("fits")
                .node,
            "a"
        );
    }
    s.upsert_node(&ssd("a", false));
    s.upsert_node(&ssd("b", true));
    assert_eq!(fw.schedule(&s, &wants_ssd("p3")).expect("fits").node, "b");
    assert!(s.remove_node("b"));
    assert!(fw.schedule(&s, &wants_ssd("p4")).is_err());
}
