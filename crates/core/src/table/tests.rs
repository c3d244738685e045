use serde_json::{Value, json};

use super::*;
use crate::registry::Registry;

/// 2024-01-01T00:00:00Z, the time every table test measures ages against.
pub(super) const NOW: i64 = 1_704_067_200;

/// The built-in resource type `group`/`plural`.
pub(super) fn rt(group: &str, plural: &str) -> ResourceType {
    Registry::builtin()
        .all()
        .iter()
        .find(|t| t.group == group && t.plural == plural)
        .map(|t| (**t).clone())
        .expect("registered type")
}

/// The RFC 3339 time `secs_ago` seconds before [`NOW`].
fn ago(secs_ago: i64) -> String {
    crate::time::format_rfc3339(NOW - secs_ago)
}

/// The cells of `obj`'s row at [`NOW`] as text (strings as they are, other values as JSON),
/// after checking that there is one cell per column.
pub(super) fn row(group: &str, plural: &str, obj: &Value) -> Vec<String> {
    let rt = rt(group, plural);
    let cells = cells(&rt, obj, NOW);
    assert_eq!(columns(&rt).len(), cells.len(), "{group}/{plural}");
    cells
        .into_iter()
        .map(|c| match c {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .collect()
}

fn pod(status: Value) -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(300)},
        "spec": {"containers": [{"name": "app", "image": "nginx"}], "nodeName": "n1"},
        "status": status,
    })
}

#[test]
fn pod_status_shows_crashloopbackoff_reason() {
    let p = pod(json!({
        "phase": "Running",
        "podIP": "10.0.0.5",
        "containerStatuses": [{
            "name": "app", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(30)}},
        }],
    }));
    assert_eq!(
        row("", "pods", &p),
        [
            "web",
            "0/1",
            "CrashLoopBackOff",
            "4 (30s ago)",
            "5m",
            "10.0.0.5",
            "n1",
            "<none>",
            "<none>"
        ]
    );

    let running = pod(json!({
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": ago(60)}}}],
    }));
    assert_eq!(row("", "pods", &running)[1..4], ["1/1", "Running", "0"]);

    let errored = pod(json!({
        "phase": "Failed",
        "containerStatuses": [{"name": "app", "restartCount": 0, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}],
    }));
    assert_eq!(row("", "pods", &errored)[2], "Error");
    let signalled = pod(json!({
        "phase": "Failed",
        "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 137, "signal": 9}}}],
    }));
    assert_eq!(row("", "pods", &signalled)[2], "Signal:9");
    let completed = pod(json!({
        "phase": "Succeeded",
        "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
    }));
    assert_eq!(row("", "pods", &completed)[2], "Completed");
    let creating = pod(json!({
        "phase": "Pending",
        "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}],
    }));
    assert_eq!(row("", "pods", &creating)[2], "ContainerCreating");
    assert_eq!(
        row("", "pods", &pod(json!({"phase": "Pending"})))[2],
        "Pending"
    );

    // One container completed, another still running: Running when Ready, else NotReady.
    let mut sidecar = pod(json!({
        "phase": "Running",
        "containerStatuses": [
            {"name": "app", "ready": true, "state": {"running": {}}},
            {"name": "job", "ready": false, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        ],
    }));
    assert_eq!(row("", "pods", &sidecar)[2], "NotReady");
    sidecar["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    assert_eq!(row("", "pods", &sidecar)[2], "Running");

    let lost = pod(json!({"phase": "Running", "reason": "NodeLost"}));
    assert_eq!(row("", "pods", &lost)[2], "NodeLost");
    let gated = pod(
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
    );
    assert_eq!(row("", "pods", &gated)[2], "SchedulingGated");
}

#[test]
fn pod_in_init_shows_init_progress() {
    let mut p = pod(json!({
        "phase": "Pending",
        "initContainerStatuses": [
            {"name": "init-a", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "init-b", "restartCount": 0, "state": {"running": {}}},
        ],
        "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}],
    }));
    p["spec"]["initContainers"] = json!([{"name": "init-a"}, {"name": "init-b"}]);
    assert_eq!(row("", "pods", &p)[1..3], ["0/1", "Init:1/2"]);

    p["status"]["initContainerStatuses"][1]["state"] =
        json!({"terminated": {"exitCode": 1, "reason": "Error"}});
    p["status"]["initContainerStatuses"][1]["restartCount"] = json!(3);
    assert_eq!(row("", "pods", &p)[2..4], ["Init:Error", "3"]);
    p["status"]["initContainerStatuses"][1]["state"] =
        json!({"waiting": {"reason": "CrashLoopBackOff"}});
    assert_eq!(row("", "pods", &p)[2], "Init:CrashLoopBackOff");
    p["status"]["initContainerStatuses"][1]["state"] = json!({"terminated": {"exitCode": 3}});
    assert_eq!(row("", "pods", &p)[2], "Init:ExitCode:3");

    // A started sidecar (restartable init container) counts toward READY and the total.
    let mut side = pod(json!({
        "phase": "Running",
        "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
        "initContainerStatuses": [{"name": "proxy", "started": true, "ready": true, "restartCount": 1, "state": {"running": {}}}],
        "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}],
    }));
    side["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
    assert_eq!(row("", "pods", &side)[1..4], ["2/2", "Running", "1"]);
}

#[test]
fn terminating_pod_shows_terminating() {
    let mut p = pod(
        json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}),
    );
    p["metadata"]["deletionTimestamp"] = json!(ago(5));
    assert_eq!(row("", "pods", &p)[2], "Terminating");
    p["status"]["phase"] = json!("Succeeded");
    assert_ne!(
        row("", "pods", &p)[2],
        "Terminating",
        "terminal pods keep their phase"
    );
    p["status"]["reason"] = json!("NodeLost");
    p["status"]["phase"] = json!("Running");
    assert_eq!(row("", "pods", &p)[2], "Unknown");
}

#[test]
fn node_row_shows_scheduling_disabled_and_roles() {
    let node = json!({
        "metadata": {"name": "cp-1", "creationTimestamp": ago(3 * 86_400 + 5 * 3600), "labels": {
            "node-role.kubernetes.io/control-plane": "",
            "node-role.kubernetes.io/etcd": "true",
            "kubernetes.io/role": "master",
            "kubernetes.io/os": "linux",
        }},
        "spec": {"unschedulable": true},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "192.168.1.10"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0"},
        },
    });
    assert_eq!(
        row("", "nodes", &node),
        [
            "cp-1",
            "Ready,SchedulingDisabled",
            "control-plane,etcd,master",
            "3d5h",
            "v1.32.0",
            "192.168.1.10",
            "<none>",
            "Debian GNU/Linux 12",
            "6.1.0",
            "containerd://1.7.0"
        ]
    );
    let bare = json!({"metadata": {"name": "w"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    assert_eq!(
        row("", "nodes", &bare)[1..4],
        ["NotReady", "<none>", "<unknown>"]
    );
    assert_eq!(
        row("", "nodes", &json!({"metadata": {"name": "w"}}))[1],
        "Unknown"
    );
    assert_eq!(
        row("", "nodes", &json!({}))[7..],
        ["<unknown>", "<unknown>", "<unknown>"]
    );
}

#[test]
fn service_ports_render_like_upstream() {
    let svc = |spec: Value, status: Value| json!({"metadata": {"name": "s", "creationTimestamp": ago(3600)}, "spec": spec, "status": status});
    let np = svc(
        json!({"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web", "tier": "fe"},
               "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}),
        json!({}),
    );
    assert_eq!(
        row("", "services", &np),
        [
            "s",
            "NodePort",
            "10.96.0.10",
            "<none>",
            "80:30080/TCP,53/UDP",
            "60m",
            "app=web,tier=fe"
        ]
    );
    let lb = svc(
        json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"], "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]}),
        json!({}),
    );
    assert_eq!(row("", "services", &lb)[3], "<pending>");
    let lb_up = svc(
        json!({"type": "LoadBalancer", "clusterIPs": ["10.96.0.11"], "externalIPs": ["1.2.3.4"]}),
        json!({"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example.com"}]}}),
    );
    assert_eq!(
        row("", "services", &lb_up)[3..5],
        ["5.6.7.8,lb.example.com,1.2.3.4", "<none>"]
    );
    let headless = svc(
        json!({"type": "ClusterIP", "clusterIP": "None", "externalIPs": ["9.9.9.9"]}),
        json!({}),
    );
    assert_eq!(
        row("", "services", &headless)[2..5],
        ["None", "9.9.9.9", "<none>"]
    );
    let ext = svc(
        json!({"type": "ExternalName", "externalName": "db.example.com"}),
        json!({}),
    );
    assert_eq!(
        row("", "services", &ext)[2..4],
        ["<none>", "db.example.com"]
    );
    assert_eq!(row("", "services", &ext)[6], "<none>");
}

#[test]
fn deployment_wide_columns_list_containers_images_selector() {
    let d = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(10 * 86_400)},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "track", "operator": "NotIn", "values": ["canary"]}]},
            "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}, {"name": "log", "image": "busybox"}]}},
        },
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    });
    let c = cells(&rt("apps", "deployments"), &d, NOW);
    assert_eq!(
        c,
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("10d"),
            json!("app,log"),
            json!("nginx:1.27,busybox"),
            json!("app=web,track notin (canary)")
        ]
    );
    let cols = columns(&rt("apps", "deployments"));
    let wide: Vec<&str> = cols
        .iter()
        .filter(|c| c.priority == 1)
        .map(|c| c.name)
        .collect();
    assert_eq!(wide, ["Containers", "Images", "Selector"]);
    assert_eq!(cols[0].to_json()["format"], "name");
    assert_eq!(
        cols[1].to_json(),
        json!({"name": "Ready", "type": "string", "format": "", "description": "Number of the pod with ready state", "priority": 0})
    );

    // ReplicaSets print an empty selector as <none> (FormatLabelSelector).
    let rs =
        json!({"metadata": {"name": "web-1"}, "spec": {"template": {"spec": {"containers": []}}}});
    assert_eq!(
        row("apps", "replicasets", &rs)[1..],
        ["1", "0", "0", "<unknown>", "", "", "<none>"]
    );
}

#[test]
fn human_duration_matches_upstream_buckets() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 30 * 60, "3h30m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (2 * 86_400 + 5 * 3600, "2d5h"),
        (7 * 86_400, "7d"),
        (8 * 86_400, "8d"),
        (729 * 86_400, "729d"),
        (730 * 86_400, "2y"),
        (800 * 86_400, "2y70d"),
        (8 * 365 * 86_400, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(secs), want, "{secs}s");
    }
}

fn minimal(plural: &str) -> Value {
    json!({"metadata": {"name": format!("x-{plural}"), "namespace": "default", "creationTimestamp": ago(42)}})
}

#[test]
fn columns_and_cells_have_the_same_length_for_every_resource() {
    for t in Registry::builtin().all() {
        let cols = columns(t);
        assert!(!cols.is_empty());
        assert_eq!(
            cols[0].name == "Name",
            cols[0].format == "name",
            "{}: name column",
            t.plural
        );
        assert_eq!(
            cols.iter().filter(|c| c.format == "name").count(),
            1,
            "{}: one name column",
            t.plural
        );
        for c in &cols {
            assert!(
                matches!(
                    c.type_,
                    "string" | "integer" | "number" | "boolean" | "date"
                ),
                "{}: {}",
                t.plural,
                c.type_
            );
            assert!(c.priority == 0 || c.priority == 1);
        }
        let row = cells(t, &minimal(&t.plural), NOW);
        assert_eq!(row.len(), cols.len(), "{}: cells vs columns", t.plural);
        let name_at = cols.iter().position(|c| c.format == "name").unwrap_or(0);
        assert_eq!(
            row[name_at],
            json!(format!("x-{}", t.plural)),
            "{}: name cell",
            t.plural
        );
    }
    // The fallbacks: LimitRange uses the default table, unknown kinds the CRD-style one.
    assert_eq!(
        row("", "limitranges", &minimal("limitranges")),
        ["x-limitranges", &ago(42)]
    );
    assert_eq!(
        row("windows.k8s.io", "gmsacredentialspecs", &minimal("g")),
        ["x-g", "42s"]
    );
}

#[test]
fn cells_never_panic_on_odd_shapes() {
    let odd = [
        json!(null),
        json!(42),
        json!("pod"),
        json!([1, 2]),
        json!({}),
        json!({"metadata": null, "spec": [], "status": "weird"}),
        json!({"metadata": {"name": 7, "creationTimestamp": "not a time", "labels": ["x"], "ownerReferences": {"controller": true}}}),
        json!({"spec": {"containers": "no", "ports": [null, 1, {"port": "80"}], "replicas": "3", "selector": {"matchExpressions": [{"operator": "Bogus"}]}},
               "status": {"conditions": [null, {"type": 1}], "containerStatuses": [{"state": {"terminated": null}}, 5], "initContainerStatuses": [{"state": {"waiting": {"reason": 3}}}],
                          "podIPs": [{}], "hard": {"cpu": {"x": 1}}, "addresses": "none", "loadBalancer": {"ingress": [{}]}},
               "subsets": [{"addresses": [{"ip": "fe80::1"}, {}, {}, {}], "ports": [{"port": 80}]}], "endpoints": [{"addresses": [1, "10.0.0.1"]}], "series": {"count": "x"}}),
    ];
    for t in Registry::builtin().all() {
        for obj in &odd {
            assert_eq!(cells(t, obj, NOW).len(), columns(t).len(), "{}", t.plural);
            assert_eq!(cells(t, obj, i64::MIN).len(), columns(t).len());
            assert_eq!(cells(t, obj, i64::MAX).len(), columns(t).len());
        }
    }
    let ep = &odd[7];
    assert_eq!(
        row("", "endpoints", ep)[1],
        "[fe80::1]:80,:80,:80 + 1 more..."
    );
}

#[test]
fn events_jobs_and_other_rows_follow_upstream() {
    let ev = json!({
        "metadata": {"name": "web.17a", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
        "reason": "BackOff", "type": "Warning", "message": " Back-off restarting failed container \n",
        "source": {"component": "kubelet", "host": "n1"},
        "firstTimestamp": ago(600), "lastTimestamp": ago(30), "count": 7,
    });
    assert_eq!(
        row("", "events", &ev),
        [
            "30s",
            "Warning",
            "BackOff",
            "pod/web",
            "spec.containers{app}",
            "kubelet, n1",
            "Back-off restarting failed container",
            "10m",
            "7",
            "web.17a"
        ]
    );
    let ev_v1 = json!({
        "metadata": {"name": "e"}, "regarding": {"kind": "Node", "name": "n1"}, "note": "ok", "type": "Normal", "reason": "Ready",
        "eventTime": format!("{}.000000Z", ago(90).trim_end_matches('Z')), "reportingController": "tandem", "reportingInstance": "cp",
    });
    assert_eq!(
        row("events.k8s.io", "events", &ev_v1),
        [
            "90s",
            "Normal",
            "Ready",
            "node/n1",
            "",
            "tandem, cp",
            "ok",
            "90s",
            "1",
            "e"
        ]
    );

    let job = json!({
        "metadata": {"name": "pi", "creationTimestamp": ago(400)},
        "spec": {"completions": 3, "selector": {"matchLabels": {"job-name": "pi"}}, "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}},
        "status": {"succeeded": 3, "startTime": ago(400), "completionTime": ago(250), "conditions": [{"type": "Complete", "status": "True"}]},
    });
    assert_eq!(
        row("batch", "jobs", &job),
        [
            "pi",
            "Complete",
            "3/3",
            "2m30s",
            "6m40s",
            "pi",
            "perl",
            "job-name=pi"
        ]
    );
    let running = json!({"metadata": {"name": "p"}, "spec": {"parallelism": 2}, "status": {"startTime": ago(30)}});
    assert_eq!(
        row("batch", "jobs", &running)[1..4],
        ["Running", "0/1 of 2", "30s"]
    );

    let cj = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "suspend": false}, "status": {"active": [{}]}});
    assert_eq!(
        row("batch", "cronjobs", &cj)[1..6],
        ["*/5 * * * *", "<none>", "False", "1", "<none>"]
    );
    let cm =
        json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}});
    assert_eq!(cells(&rt("", "configmaps"), &cm, NOW)[1], json!(3));
    let sec = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}});
    assert_eq!(row("", "secrets", &sec)[1..3], ["Opaque", "1"]);
    let rq = json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1"}, "used": {"pods": "3"}}});
    assert_eq!(
        row("", "resourcequotas", &rq)[2..],
        ["pods: 3/10, requests.cpu: 0/1", "limits.cpu: 0/2"]
    );
    let cr = json!({"metadata": {"name": "web-5d9", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]}, "revision": 2});
    assert_eq!(
        cells(&rt("apps", "controllerrevisions"), &cr, NOW)[1..3],
        [json!("statefulset.apps/web"), json!(2)]
    );
    let pvc = json!({"metadata": {"name": "data"}, "spec": {"volumeName": "pv-1", "storageClassName": "local"}, "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce", "ReadOnlyMany"]}});
    assert_eq!(
        row("", "persistentvolumeclaims", &pvc)[1..7],
        ["Bound", "pv-1", "1Gi", "RWO,ROX", "local", "<unset>"]
    );
    let slice = json!({"metadata": {"name": "s"}, "addressType": "IPv4", "ports": [{"port": 80}, {"name": "dns"}, {}], "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}]});
    assert_eq!(
        row("discovery.k8s.io", "endpointslices", &slice)[1..4],
        ["IPv4", "80,dns,*", "10.0.0.1,10.0.0.2"]
    );
    let lease = json!({"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}});
    assert_eq!(row("coordination.k8s.io", "leases", &lease)[1], "n1");
}

#[test]
fn role_bindings_show_role_ref_and_subjects_like_upstream() {
    let rb = json!({
        "metadata": {"name": "read-pods", "namespace": "dev", "creationTimestamp": ago(120)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
            {"kind": "ServiceAccount", "name": "builder", "namespace": "ci"},
            {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"},
            {"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"},
        ],
    });
    assert_eq!(
        row("rbac.authorization.k8s.io", "rolebindings", &rb),
        [
            "read-pods",
            "ClusterRole/view",
            "2m",
            "alice, bob",
            "devs",
            "ci/builder"
        ]
    );
    let crb = json!({"metadata": {"name": "system:node"}, "roleRef": {"kind": "ClusterRole", "name": "system:node"}});
    assert_eq!(
        row("rbac.authorization.k8s.io", "clusterrolebindings", &crb),
        [
            "system:node",
            "ClusterRole/system:node",
            "<unknown>",
            "",
            "",
            ""
        ]
    );
    let names: Vec<&str> = columns(&rt("rbac.authorization.k8s.io", "clusterrolebindings"))
        .iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        names,
        ["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"]
    );
    // Roles have no printer upstream: the default NAME, CREATED AT table.
    let role = json!({"metadata": {"name": "pod-reader", "creationTimestamp": ago(5)}});
    assert_eq!(
        row("rbac.authorization.k8s.io", "roles", &role),
        ["pod-reader", &ago(5)]
    );
}

#[test]
fn csr_condition_follows_extract_csr_status() {
    let csr = |conditions: Value, certificate: &str| {
        json!({
            "metadata": {"name": "node-csr-1", "creationTimestamp": ago(30)},
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "username": "system:bootstrap:abcdef", "expirationSeconds": 86400},
            "status": {"conditions": conditions, "certificate": certificate},
        })
    };
    let csrs = ("certificates.k8s.io", "certificatesigningrequests");
    assert_eq!(
        row(csrs.0, csrs.1, &csr(json!([]), "")),
        [
            "node-csr-1",
            "30s",
            "kubernetes.io/kube-apiserver-client-kubelet",
            "system:bootstrap:abcdef",
            "24h",
            "Pending"
        ]
    );
    let approved = json!([{"type": "Approved", "status": "True"}]);
    assert_eq!(
        row(csrs.0, csrs.1, &csr(approved, "LS0t"))[5],
        "Approved,Issued"
    );
    let denied_failed = json!([{"type": "Approved"}, {"type": "Failed"}, {"type": "Denied"}]);
    assert_eq!(
        row(csrs.0, csrs.1, &csr(denied_failed, ""))[5],
        "Denied,Failed"
    );
    let bare = json!({"metadata": {"name": "c"}});
    assert_eq!(
        row(csrs.0, csrs.1, &bare),
        ["c", "<unknown>", "<none>", "", "<none>", "Pending"]
    );
}
