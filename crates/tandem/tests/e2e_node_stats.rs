//! End-to-end: each agent's kubelet endpoints through the API server's node proxy —
//! `/api/v1/nodes/NAME/proxy/metrics/resource`, `…/stats/summary` and `…/metrics` — on one
//! cluster with the real Linux node (`--linux-runtime cri`: root and the project's images, as
//! e2e_cri.rs) and an emulated Windows node. A busybox pod burning CPU on the real node shows a
//! growing measured counter; an emulated pod annotated `metrics.tandem.io/emulated-cpu: 300m`
//! grows by 0.3 core-seconds a second, declared, and says it is emulated.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);
const MI: f64 = 1024.0 * 1024.0;

const BURNER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: burner}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: spin
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "while :; do :; done"]
    resources:
      limits: {cpu: 300m, memory: 32Mi}
"#;

const EMULATED: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: iis
  annotations:
    metrics.tandem.io/emulated-cpu: 300m
    metrics.tandem.io/emulated-memory: 64Mi
spec:
  os: {name: windows}
  nodeSelector: {kubernetes.io/os: windows}
  containers:
  - name: web
    image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022
"#;

type Samples = Vec<(String, BTreeMap<String, String>, f64)>;

/// The samples of a text-format body (comments skipped).
fn parse(text: &str) -> Samples {
    tandem_core::metrics::text::parse(text)
        .expect("the text format")
        .into_iter()
        .map(|s| (s.name, s.labels, s.value))
        .collect()
}

fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

/// `kubectl get --raw /api/v1/nodes/NODE/proxy/PATH`.
fn raw(s: &Server, node: &str, path: &str) -> Option<String> {
    let out = s.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/{path}"),
    ]);
    out.success().then(|| out.stdout.clone())
}

/// The node's resource metrics and when they were read (the middle of the request).
fn resource_metrics(s: &Server, node: &str) -> Option<(Instant, Samples)> {
    let before = Instant::now();
    let text = raw(s, node, "metrics/resource")?;
    let at = before + (Instant::now() - before) / 2;
    Some((at, parse(&text)))
}

fn summary(s: &Server, node: &str) -> Option<Value> {
    serde_json::from_str(&raw(s, node, "stats/summary")?).ok()
}

fn summary_pod<'a>(summary: &'a Value, name: &str) -> Option<&'a Value> {
    summary["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name && p["podRef"]["namespace"] == "default")
}

fn wait_running(s: &Server, pod: &str) {
    s.eventually(&format!("{pod} Running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
}

#[test]
fn node_proxy_serves_measured_and_declared_stats_of_real_and_emulated_nodes() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1,windows-2022=1",
        "--cluster-cidr",
        "10.236.0.0/16",
        "--service-cidr",
        "10.138.0.0/16",
        "--ingress=false",
    ]);
    s.create(BURNER);
    s.create(EMULATED);
    wait_running(&s, "burner");
    wait_running(&s, "iis");

    // The emulated Windows node: declared figures, marked emulated.
    let windows = "windows-2022-1";
    let web = [
        ("container", "web"),
        ("namespace", "default"),
        ("pod", "iis"),
    ];
    let (t1, first) = s.eventually("iis in the resource metrics", LONG, || {
        let (at, samples) = resource_metrics(&s, windows)?;
        sample(&samples, "container_cpu_usage_seconds_total", &web).map(|_| (at, samples))
    });
    assert_eq!(
        sample(&first, "tandem_resource_metrics_emulated", &[]),
        Some(1.0)
    );
    assert_eq!(sample(&first, "resource_scrape_error", &[]), Some(0.0));
    assert_eq!(
        sample(&first, "container_memory_working_set_bytes", &web),
        Some(64.0 * MI)
    );
    assert!(sample(&first, "container_start_time_seconds", &web).is_some_and(|t| t > 1.0e9));
    // The node's working set holds its reservations (2 GiB system-reserved) and the pod.
    let node_memory = sample(&first, "node_memory_working_set_bytes", &[]).unwrap();
    assert!(node_memory >= 2048.0 * MI + 64.0 * MI, "{node_memory}");
    std::thread::sleep(Duration::from_secs(4));
    let (t2, second) = resource_metrics(&s, windows).unwrap();
    let cpu =
        |samples: &Samples| sample(samples, "container_cpu_usage_seconds_total", &web).unwrap();
    let rate = (cpu(&second) - cpu(&first)) / (t2 - t1).as_secs_f64();
    eprintln!("emulated container: {rate:.3} cores between two scrapes (declared 300m)");
    assert!(
        (0.25..=0.35).contains(&rate),
        "declared 300m, scraped {rate} cores"
    );
    let pod_rate = (sample(&second, "pod_cpu_usage_seconds_total", &[("pod", "iis")]).unwrap()
        - sample(&first, "pod_cpu_usage_seconds_total", &[("pod", "iis")]).unwrap())
        / (t2 - t1).as_secs_f64();
    assert!((0.25..=0.35).contains(&pod_rate), "{pod_rate}");

    let summary_windows = summary(&s, windows).unwrap();
    assert_eq!(summary_windows["node"]["nodeName"], windows);
    let iis = summary_pod(&summary_windows, "iis").unwrap();
    assert_eq!(iis["containers"][0]["name"], "web");
    assert_eq!(iis["containers"][0]["cpu"]["usageNanoCores"], 300_000_000);
    assert_eq!(iis["memory"]["workingSetBytes"], 64 * 1024 * 1024);
    assert!(
        summary_windows["node"]["cpu"]["usageNanoCores"]
            .as_u64()
            .unwrap()
            >= 300_000_000
    );

    // A live change of the declaration.
    let out = s.kubectl(&[
        "annotate",
        "--overwrite",
        "pod",
        "iis",
        "metrics.tandem.io/emulated-cpu=1",
    ]);
    assert!(out.success(), "{}", out.stderr);
    s.eventually("iis declared at one core", Duration::from_secs(30), || {
        let summary = summary(&s, windows)?;
        let iis = summary_pod(&summary, "iis")?;
        (iis["cpu"]["usageNanoCores"] == 1_000_000_000).then_some(())
    });

    let kubelet = parse(&raw(&s, windows, "metrics").unwrap());
    assert_eq!(
        sample(&kubelet, "kubelet_node_name", &[("node", windows)]),
        Some(1.0)
    );
    assert!(sample(&kubelet, "kubelet_running_pods", &[]).is_some_and(|n| n >= 1.0));
    assert!(
        sample(&kubelet, "kubelet_pod_start_duration_seconds_count", &[]).is_some_and(|n| n >= 1.0)
    );

    // The real Linux node: measured through CRI, not marked emulated.
    let linux = "linux-1";
    let spin = [
        ("container", "spin"),
        ("namespace", "default"),
        ("pod", "burner"),
    ];
    let (_, first) = s.eventually("burner in the resource metrics", LONG, || {
        let (at, samples) = resource_metrics(&s, linux)?;
        sample(&samples, "container_cpu_usage_seconds_total", &spin).map(|_| (at, samples))
    });
    assert_eq!(
        sample(&first, "tandem_resource_metrics_emulated", &[]),
        Some(0.0)
    );
    assert_eq!(sample(&first, "resource_scrape_error", &[]), Some(0.0));
    let burned =
        |samples: &Samples| sample(samples, "container_cpu_usage_seconds_total", &spin).unwrap();
    let start = burned(&first);
    let t0 = Instant::now();
    let (t, grown) = s.eventually(
        "the burner's CPU counter grows",
        Duration::from_secs(30),
        || {
            let (at, samples) = resource_metrics(&s, linux)?;
            let grown = burned(&samples) - start;
            (grown > 0.2).then_some((at, grown))
        },
    );
    eprintln!(
        "real container: {grown:.3} core-seconds more after {:.1} s (limit 300m)",
        (t - t0).as_secs_f64()
    );
    assert!(sample(&first, "node_cpu_usage_seconds_total", &[]).is_some_and(|v| v > 0.0));
    assert!(sample(&first, "node_memory_working_set_bytes", &[]).is_some_and(|v| v > 0.0));
    let memory = sample(&first, "container_memory_working_set_bytes", &spin).unwrap();
    assert!(memory > 0.0 && memory < 32.0 * MI, "{memory}");

    let summary_linux = summary(&s, linux).unwrap();
    assert_eq!(summary_linux["node"]["nodeName"], linux);
    assert!(
        summary_linux["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        summary_linux["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let burner = summary_pod(&summary_linux, "burner").unwrap();
    assert_eq!(burner["containers"][0]["name"], "spin");
    assert!(
        burner["containers"][0]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(burner["containers"][0]["startTime"].is_string());
}
