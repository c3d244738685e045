//! End-to-end: `kubectl get` output formats, selectors, paging and watch.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::time::Duration;

use common::{Server, configmap, deployment, header, node, pod, seed};

fn names(out: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect();
    v.sort();
    v
}

#[test]
fn get_pods_wide_shows_upstream_columns() {
    let s = Server::start();
    s.create(&pod("web-1", Some("node-a")));
    let out = s.kubectl(&["get", "pods", "-o", "wide"]);
    let table = out.ok();
    assert_eq!(
        header(table),
        "NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES",
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("one row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "web-1", "{table}");
    assert_eq!(row[1], "0/1", "{table}");
    assert_eq!(row[2], "Pending", "{table}");
    assert_eq!(row[3], "0", "{table}");
    assert!(row.contains(&"node-a"), "NODE column: {table}");
    let narrow = s.kubectl(&["get", "pods"]);
    assert_eq!(header(narrow.ok()), "NAME READY STATUS RESTARTS AGE");
}

#[test]
fn get_nodes_wide_shows_upstream_columns() {
    let s = Server::start();
    s.create(&node("win-node-1"));
    let out = s.kubectl(&["get", "nodes", "-o", "wide"]);
    let table = out.ok();
    assert_eq!(
        header(table),
        "NAME STATUS ROLES AGE VERSION INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME",
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("one row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "win-node-1");
    // A node that never reported a Ready condition is Unknown; it has no role label.
    assert_eq!(row[1], "Unknown", "{table}");
    assert_eq!(row[2], "<none>", "{table}");
}

#[test]
fn get_deployments_and_replicasets_wide_show_upstream_columns() {
    let s = Server::start();
    s.create(&deployment("web", 2));
    let out = s.kubectl(&["get", "deployments", "-o", "wide"]);
    let table = out.ok();
    assert_eq!(
        header(table),
        "NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR",
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("one row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "web");
    assert!(row[1].ends_with("/2"), "READY is ready/desired: {table}");
    assert_eq!(&row[5..], &["web", "nginx:1.25", "app=web"], "{table}");

    let rs = s.kubectl(&["get", "replicasets", "-o", "wide"]);
    // An empty list prints "No resources found" on stderr, so create one to see the header.
    assert!(rs.success(), "{}", rs.stderr);
    s.create(
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-rs\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: rs\n  template:\n    metadata:\n      labels:\n        app: rs\n    spec:\n      containers:\n      - name: c\n        image: busybox:1.36\n",
    );
    let rs = s.kubectl(&["get", "rs", "-o", "wide"]);
    assert_eq!(
        header(rs.ok()),
        "NAME DESIRED CURRENT READY AGE CONTAINERS IMAGES SELECTOR",
        "{}",
        rs.stdout
    );
}

#[test]
fn get_services_wide_shows_type_ports_and_selector() {
    let s = Server::start();
    s.kubectl(&["apply", "-f", &seed("win-webserver.yaml")])
        .ok();
    let out = s.kubectl(&["get", "services", "win-webserver", "-o", "wide"]);
    let table = out.ok();
    assert_eq!(
        header(table),
        "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE SELECTOR",
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("one row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "win-webserver");
    assert_eq!(row[1], "NodePort");
    // A ClusterIP is allocated from the service range.
    assert!(
        row[2].parse::<std::net::Ipv4Addr>().is_ok(),
        "CLUSTER-IP should be an address: {table}"
    );
    assert_eq!(row[3], "<none>", "{table}");
    // A NodePort service is allocated a node port: PORT(S) reads 80:3xxxx/TCP.
    assert!(
        row[4].starts_with("80:") && row[4].ends_with("/TCP"),
        "{table}"
    );
    assert_eq!(row[6], "app=win-webserver");
}

#[test]
fn get_output_json_yaml_and_name_render_the_stored_objects() {
    let s = Server::start();
    s.create(&configmap("alpha", &[("tier", "web")]));
    s.create(&configmap("beta", &[]));

    let one = s.kubectl(&["get", "cm", "alpha", "-o", "json"]).json();
    assert_eq!(one["kind"], "ConfigMap");
    assert_eq!(one["apiVersion"], "v1");
    assert_eq!(one["metadata"]["name"], "alpha");
    assert_eq!(one["metadata"]["namespace"], "default");
    assert_eq!(one["data"]["key"], "value");
    let uid = one["metadata"]["uid"].as_str().expect("uid").to_string();
    assert!(
        one["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
    assert!(one["metadata"]["creationTimestamp"].is_string());

    let list = s.kubectl(&["get", "cm", "-o", "json"]).json();
    assert_eq!(list["kind"], "List");
    let mut listed: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    listed.retain(|n| *n == "alpha" || *n == "beta");
    assert_eq!(listed, ["alpha", "beta"]);

    let yaml = s.kubectl(&["get", "cm", "alpha", "-o", "yaml"]);
    let y = yaml.ok();
    assert!(y.contains("kind: ConfigMap"), "{y}");
    assert!(y.contains("name: alpha"), "{y}");
    assert!(y.contains(&format!("uid: {uid}")), "{y}");
    assert!(y.contains("tier: web"), "{y}");

    let name = s.kubectl(&["get", "cm", "alpha", "beta", "-o", "name"]);
    assert_eq!(names(name.ok()), ["configmap/alpha", "configmap/beta"]);
}

#[test]
fn get_jsonpath_extracts_fields() {
    let s = Server::start();
    s.create(&configmap("alpha", &[]));
    s.create(&configmap("beta", &[]));
    let out = s.kubectl(&["get", "cm", "alpha", "-o", "jsonpath={.data.key}"]);
    assert_eq!(out.ok(), "value");
    let out = s.kubectl(&[
        "get",
        "cm",
        "alpha",
        "beta",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(out.ok(), "alpha beta");
    let out = s.kubectl(&[
        "get",
        "cm",
        "-o",
        r#"jsonpath={range .items[?(@.metadata.name=="beta")]}{.metadata.namespace}{end}"#,
    ]);
    assert_eq!(out.ok(), "default");
    let cols = s.kubectl(&[
        "get",
        "cm",
        "alpha",
        "-o",
        "custom-columns=N:.metadata.name,V:.data.key",
    ]);
    assert_eq!(header(cols.ok()), "N V");
    assert!(
        cols.stdout.contains("alpha") && cols.stdout.contains("value"),
        "{}",
        cols.stdout
    );
}

#[test]
fn get_with_label_selectors_returns_only_matching_objects() {
    let s = Server::start();
    s.create(&configmap("web-1", &[("tier", "web"), ("env", "prod")]));
    s.create(&configmap("web-2", &[("tier", "web"), ("env", "dev")]));
    s.create(&configmap("db-1", &[("tier", "db"), ("env", "prod")]));
    s.create(&configmap("plain", &[]));
    let sel = |selector: &str| -> Vec<String> {
        let out = s.kubectl(&["get", "cm", "-l", selector, "-o", "name"]);
        names(out.ok())
    };
    assert_eq!(sel("tier=web"), ["configmap/web-1", "configmap/web-2"]);
    assert_eq!(sel("tier=web,env=prod"), ["configmap/web-1"]);
    assert_eq!(sel("tier in (db,cache)"), ["configmap/db-1"]);
    assert_eq!(sel("tier!=web,tier"), ["configmap/db-1"]);
    assert!(sel("!tier").contains(&"configmap/plain".to_string()));
    assert!(
        !sel("!tier")
            .iter()
            .any(|n| n.contains("web") || n.contains("db"))
    );
    assert_eq!(sel("env notin (prod),tier"), ["configmap/web-2"]);
    assert!(sel("tier=nothing").is_empty());
    let bad = s.kubectl(&["get", "cm", "-l", "tier==="]);
    bad.err();
}

#[test]
fn get_with_field_selectors_filters_by_name_namespace_and_pod_node() {
    let s = Server::start();
    s.create(&configmap("one", &[]));
    s.create(&configmap("two", &[]));
    let out = s.kubectl(&[
        "get",
        "cm",
        "--field-selector",
        "metadata.name=two",
        "-o",
        "name",
    ]);
    assert_eq!(names(out.ok()), ["configmap/two"]);
    let out = s.kubectl(&[
        "get",
        "cm",
        "--field-selector",
        "metadata.name!=two",
        "-o",
        "name",
    ]);
    assert!(names(out.ok()).contains(&"configmap/one".to_string()));
    assert!(!out.stdout.contains("configmap/two"));

    s.create(&pod("on-a", Some("node-a")));
    s.create(&pod("on-b", Some("node-b")));
    s.create(&pod("unbound", None));
    let by_node = |sel: &str| {
        names(
            s.kubectl(&["get", "pods", "--field-selector", sel, "-o", "name"])
                .ok(),
        )
    };
    assert_eq!(by_node("spec.nodeName=node-a"), ["pod/on-a"]);
    assert_eq!(by_node("spec.nodeName="), ["pod/unbound"]);
    assert_eq!(
        by_node("spec.nodeName!=node-a"),
        ["pod/on-b", "pod/unbound"]
    );
    assert_eq!(by_node("status.phase=Pending").len(), 3);
    assert!(by_node("status.phase=Running").is_empty());
    let across = s.kubectl(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "metadata.namespace=default",
        "-o",
        "name",
    ]);
    assert_eq!(names(across.ok()).len(), 3);
    // Upstream refuses fields it does not index, naming the field.
    let bad = s.kubectl(&["get", "pods", "--field-selector", "spec.nope=x"]);
    let err = bad.err();
    assert!(
        err.contains("BadRequest") && err.contains("spec.nope"),
        "{err}"
    );
}

#[test]
fn get_all_namespaces_lists_objects_from_every_namespace() {
    let s = Server::start();
    s.create(&configmap("here", &[]));
    s.kubectl_stdin(
        &["create", "-n", "kube-system", "-f", "-"],
        &configmap("there", &[]),
    )
    .ok();
    let out = s.kubectl(&["get", "cm", "-A"]);
    let table = out.ok();
    assert!(
        header(table).starts_with("NAMESPACE NAME DATA AGE"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("default") && l.contains("here")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("kube-system") && l.contains("there")),
        "{table}"
    );
    let plain = s.kubectl(&["get", "cm", "-o", "name"]);
    assert!(!plain.ok().contains("there"), "{}", plain.stdout);
}

#[test]
fn get_with_chunk_size_returns_every_object_across_pages() {
    let s = Server::start();
    let manifests: Vec<String> = (0..9)
        .map(|i| configmap(&format!("page-{i}"), &[("set", "paged")]))
        .collect();
    s.kubectl_stdin(&["create", "-f", "-"], &manifests.join("---\n"))
        .ok();
    let out = s.kubectl(&[
        "get",
        "cm",
        "-l",
        "set=paged",
        "--chunk-size=2",
        "-o",
        "name",
    ]);
    let got = names(out.ok());
    let want: Vec<String> = (0..9).map(|i| format!("configmap/page-{i}")).collect();
    assert_eq!(got, want);
    let table = s.kubectl(&["get", "cm", "-l", "set=paged", "--chunk-size=2"]);
    assert_eq!(
        table
            .ok()
            .lines()
            .filter(|l| l.starts_with("page-"))
            .count(),
        9,
        "{}",
        table.stdout
    );
    assert_eq!(
        table
            .stdout
            .lines()
            .filter(|l| l.starts_with("NAME"))
            .count(),
        1,
        "one header: {}",
        table.stdout
    );

    // The server really pages: a limited list returns a continue token. (Upstream reports
    // remainingItemCount only for lists without selectors.)
    let page = s
        .kubectl(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?limit=2",
        ])
        .json();
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
    let token = page["metadata"]["continue"]
        .as_str()
        .expect("continue token");
    assert!(!token.is_empty());
    assert!(
        page["metadata"]["remainingItemCount"]
            .as_i64()
            .is_some_and(|n| n >= 7),
        "{page}"
    );
    let selected = s
        .kubectl(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/configmaps?labelSelector=set%3Dpaged&limit=4",
        ])
        .json();
    assert_eq!(selected["items"].as_array().unwrap().len(), 4, "{selected}");
    assert!(
        selected["metadata"]["continue"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{selected}"
    );
}

#[test]
fn get_watch_streams_changes_made_from_another_client() {
    let s = Server::start();
    s.create(&configmap("before", &[]));
    let mut watch = s.kubectl_stream(&["get", "configmaps", "-w", "--output-watch-events"]);
    let timeout = Duration::from_secs(30);
    let is = |event: &'static str, name: &'static str| {
        move |l: &str| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.first() == Some(&event) && cols.get(1) == Some(&name)
        }
    };
    watch.wait_for(
        "ADDED before (initial list)",
        timeout,
        is("ADDED", "before"),
    );
    s.create(&configmap("during", &[]));
    watch.wait_for("ADDED during", timeout, is("ADDED", "during"));
    s.kubectl(&["label", "cm", "during", "seen=yes"]).ok();
    watch.wait_for("MODIFIED during", timeout, is("MODIFIED", "during"));
    s.kubectl(&["delete", "cm", "during"]).ok();
    watch.wait_for("DELETED during", timeout, is("DELETED", "during"));
}

#[test]
fn get_watch_only_with_name_output_prints_new_objects() {
    let s = Server::start();
    s.create(&configmap("old", &[]));
    let mut watch = s.kubectl_stream(&["get", "configmaps", "--watch-only", "-o", "name"]);
    // kubectl lists first and watches from the list's resourceVersion: an object created before
    // the list completes is (correctly) not printed, so keep creating until one shows (bounded).
    let mut seen = None;
    for i in 0..10 {
        s.create(&configmap(&format!("new-{i}"), &[]));
        let got = watch.try_wait_for(Duration::from_secs(3), |l| l.starts_with("configmap/"));
        if let Ok(Some(line)) = got {
            seen = Some(line);
            break;
        }
    }
    let line = seen.unwrap_or_else(|| panic!("no watch output: {:?}", watch.seen()));
    assert!(
        line.starts_with("configmap/new-"),
        "watch-only must not replay old objects: {line}"
    );
    assert!(
        !watch.seen().iter().any(|l| l == "configmap/old"),
        "{:?}",
        watch.seen()
    );
}

#[test]
fn get_namespaced_resource_in_missing_namespace_is_empty_and_unknown_type_errors() {
    let s = Server::start();
    let out = s.kubectl(&["get", "widgets"]);
    let err = out.err();
    assert!(
        err.contains("the server doesn't have a resource type \"widgets\""),
        "{err}"
    );
    let missing = s.kubectl(&["get", "cm", "nope"]);
    assert!(
        missing.err().contains("configmaps \"nope\" not found"),
        "{}",
        missing.stderr
    );
}

#[test]
fn get_tables_for_other_kinds_use_upstream_columns() {
    let s = Server::start();
    s.kubectl(&["apply", "-f", &seed("runtimeClasses.yml")])
        .ok();
    s.kubectl(&["apply", "-f", &seed("gmsa-billing.yaml")]).ok();
    s.create(&configmap("cfg", &[]));
    s.create(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: creds
type: Opaque
stringData:
  user: admin
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: builder
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres:16
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      nodeSelector:
        kubernetes.io/os: windows
      containers:
      - name: agent
        image: busybox:1.36
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: job
            image: busybox:1.36
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: leader
spec:
  holderIdentity: node-a
"#,
    );
    let cases: &[(&[&str], &str)] = &[
        (&["configmaps"], "NAME DATA AGE"),
        (&["secrets"], "NAME TYPE DATA AGE"),
        (&["serviceaccounts", "builder"], "NAME SECRETS AGE"),
        (&["namespaces"], "NAME STATUS AGE"),
        (&["statefulsets"], "NAME READY AGE"),
        (
            &["daemonsets"],
            "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE",
        ),
        (
            &["cronjobs"],
            "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE",
        ),
        (&["runtimeclasses"], "NAME HANDLER AGE"),
        (&["leases"], "NAME HOLDER AGE"),
        (&["gmsacredentialspecs"], "NAME AGE"),
    ];
    for (args, want) in cases {
        let mut full = vec!["get"];
        full.extend_from_slice(args);
        let out = s.kubectl(&full);
        assert_eq!(header(out.ok()), *want, "{args:?}:\n{}", out.stdout);
    }
    let secret = s.kubectl(&["get", "secret", "creds"]);
    let row: Vec<&str> = secret
        .ok()
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..3],
        &["creds", "Opaque", "1"],
        "stringData is folded into data: {}",
        secret.stdout
    );
    let ds = s.kubectl(&["get", "ds", "agent"]);
    assert!(
        ds.ok().contains("kubernetes.io/os=windows"),
        "{}",
        ds.stdout
    );
    let cj = s.kubectl(&["get", "cj", "nightly"]);
    assert!(cj.ok().contains("0 3 * * *"), "{}", cj.stdout);
    let rc = s.kubectl(&["get", "runtimeclass", "windows-2019"]);
    assert!(
        rc.ok().contains("example-container-runtime-handler"),
        "{}",
        rc.stdout
    );
}
