//! End-to-end: `metrics.k8s.io` and `kubectl top`, as a cluster with metrics-server answers them.
//! The API server scrapes every agent's `/metrics/resource` each `--metric-resolution` (2 s
//! here) and serves NodeMetrics and PodMetrics. On emulated nodes the figures are declared
//! (`metrics.tandem.io/emulated-cpu` / `-memory`) and `kubectl top` prints a warning saying so;
//! on the real Linux node (`--linux-runtime cri`, root and the project's images, as
//! e2e_cri.rs) a pod burning CPU is measured through CRI.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

/// Millicores of a `kubectl top` CPU cell (`250m`, `1`).
fn millicores(cell: &str) -> u64 {
    match cell.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => cell.parse::<u64>().unwrap() * 1000,
    }
}

/// Mebibytes of a `kubectl top` memory cell (`64Mi`).
fn mebibytes(cell: &str) -> u64 {
    cell.strip_suffix("Mi").unwrap().parse().unwrap()
}

/// The cells of `kubectl top ARGS --no-headers` row `name`, with kubectl's stderr.
fn top_row(s: &Server, args: &[&str], name: &str) -> Option<(Vec<String>, String)> {
    let mut full: Vec<&str> = vec!["top"];
    full.extend_from_slice(args);
    full.push("--no-headers");
    let out = s.kubectl(&full);
    if !out.success() {
        return None;
    }
    let row = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(name))?;
    Some((row, out.stderr.clone()))
}

const WINDOWS_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: iis
  labels: {app: iis}
  annotations:
    metrics.tandem.io/emulated-cpu: 300m
    metrics.tandem.io/emulated-memory: 64Mi
spec:
  os: {name: windows}
  nodeSelector: {kubernetes.io/os: windows}
  containers:
  - name: web
    image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022
    resources: {requests: {cpu: 500m, memory: 128Mi}}
"#;

#[test]
fn kubectl_top_shows_declared_usage_of_emulated_nodes_and_says_it_is_emulated() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "emulated",
        "--emulated-pod-network",
        "off",
        "--nodes",
        "linux=1,windows-2022=1",
        "--metric-resolution",
        "2s",
    ]);
    // The group is discoverable, as kubectl top checks before asking.
    let groups = s.kubectl(&["api-versions"]);
    assert!(
        groups.ok().lines().any(|l| l == "metrics.k8s.io/v1beta1"),
        "{}",
        groups.stdout
    );
    s.create(WINDOWS_POD);
    s.eventually("iis Running", LONG, || {
        let p = s.get_json(&["pod", "iis"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });

    // The pod's declared 300m and 64Mi, with the warning that names its node.
    let (row, stderr) = s.eventually("kubectl top pod iis", LONG, || {
        top_row(&s, &["pod", "iis"], "iis")
    });
    // The first figure may come from a short window whose ends are dated to the scrape's
    // round trip; later windows read the declaration back within a few percent.
    let cpu = millicores(&row[1]);
    assert!(
        (250..=350).contains(&cpu),
        "declared 300m, top says {row:?}"
    );
    s.eventually("top reads back 300m", LONG, || {
        let (row, _) = top_row(&s, &["pod", "iis"], "iis")?;
        (285..=315).contains(&millicores(&row[1])).then_some(())
    });
    assert_eq!(mebibytes(&row[2]), 64, "{row:?}");
    assert!(
        stderr.contains("Warning: metrics of node(s) windows-2022-1 are emulated"),
        "{stderr}"
    );
    let (row, _) = top_row(&s, &["pod", "iis", "--containers"], "iis").unwrap();
    assert_eq!(row[1], "web", "{row:?}");

    // The raw PodMetrics as metrics-server shapes it.
    let raw = s.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/iis",
    ]);
    let pm: Value = raw.json();
    assert_eq!(pm["kind"], "PodMetrics");
    assert_eq!(pm["metadata"]["labels"]["app"], "iis");
    assert_eq!(pm["containers"][0]["name"], "web");
    assert!(pm["window"].as_str().unwrap().ends_with('s'), "{pm}");
    let by_label = s.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dother",
    ]);
    assert_eq!(by_label.json()["items"], Value::Array(vec![]));
    let missing = s.kubectl(&[
        "get",
        "--raw",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
    ]);
    assert!(!missing.success());
    assert!(
        missing
            .stderr
            .contains("podmetrics.metrics.k8s.io \"default/nope\" not found"),
        "{}",
        missing.stderr
    );

    // Usage follows the annotation as it is now.
    let out = s.kubectl(&[
        "annotate",
        "--overwrite",
        "pod",
        "iis",
        "metrics.tandem.io/emulated-cpu=100m",
    ]);
    assert!(out.success(), "{}", out.stderr);
    s.eventually("top follows the new declaration", LONG, || {
        let (row, _) = top_row(&s, &["pod", "iis"], "iis")?;
        (95..=105).contains(&millicores(&row[1])).then_some(())
    });

    // Nodes: the Windows node carries its reservations on top of its pods.
    let (row, stderr) = s.eventually("kubectl top node windows-2022-1", LONG, || {
        top_row(&s, &["node", "windows-2022-1"], "windows-2022-1")
    });
    assert!(
        millicores(&row[1]) >= 90,
        "the pod's 100m at least: {row:?}"
    );
    let node = s.get_json(&["node", "windows-2022-1"]).unwrap();
    let mib = |q: &Value| {
        let q = q.as_str().unwrap();
        match q.strip_suffix("Ki") {
            Some(k) => k.parse::<u64>().unwrap() / 1024,
            None => q.strip_suffix("Mi").unwrap().parse::<u64>().unwrap(),
        }
    };
    let reserved =
        mib(&node["status"]["capacity"]["memory"]) - mib(&node["status"]["allocatable"]["memory"]);
    assert!(reserved > 0, "{node}");
    assert!(
        mebibytes(&row[3]) >= reserved + 64,
        "reservations ({reserved}Mi) and the pod's 64Mi: {row:?}"
    );
    assert!(
        stderr.contains("emulated"),
        "an emulated node's figures say so: {stderr}"
    );
    let nodes = s.kubectl(&["top", "nodes", "--no-headers"]);
    assert_eq!(nodes.ok().lines().count(), 2, "{}", nodes.stdout);

    // A table for `kubectl get`, with metrics-server's columns.
    let table = s.kubectl(&["get", "nodemetrics"]);
    assert!(
        common::header(table.ok()).starts_with("NAME CPU MEMORY WINDOW"),
        "{}",
        table.stdout
    );
}

/// A pod that keeps one CPU busy.
const BURNER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burner}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  containers:
  - name: loop
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "while :; do :; done"]
    resources: {requests: {cpu: 100m}}
"#;

#[test]
fn kubectl_top_measures_a_real_pod_burning_cpu() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1",
        "--cluster-cidr",
        "10.230.0.0/16",
        "--service-cidr",
        "10.137.0.0/16",
        "--ingress=false",
        "--metric-resolution",
        "2s",
    ]);
    s.create(BURNER);
    s.eventually("burner Running", LONG, || {
        let p = s.get_json(&["pod", "burner"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
    // A busy loop gets a good share of a core even on a loaded machine.
    let (row, stderr) = s.eventually("burner measured busy", LONG, || {
        let (row, stderr) = top_row(&s, &["pod", "burner"], "burner")?;
        (millicores(&row[1]) >= 200).then_some((row, stderr))
    });
    assert!(mebibytes(&row[2]) < 64, "a shell loop is small: {row:?}");
    assert!(
        !stderr.contains("emulated"),
        "real figures are not called emulated: {stderr}"
    );
    let (node, _) = s.eventually("kubectl top node linux-1", LONG, || {
        top_row(&s, &["node", "linux-1"], "linux-1")
    });
    assert!(
        millicores(&node[1]) >= 200,
        "the node counts the pod: {node:?}"
    );
}
