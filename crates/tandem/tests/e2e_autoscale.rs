//! End-to-end: a HorizontalPodAutoscaler scales a Deployment up under load and back down once
//! the load is gone and its stabilization window has passed, with every piece real: the agents'
//! `/metrics/resource`, the API server's `metrics.k8s.io`, the HPA controller reading it and
//! writing the Deployment's `scale` subresource. The load is declared usage on emulated
//! Windows nodes (`metrics.tandem.io/emulated-cpu`), so the figures are exact; the controller
//! syncs every 2 s and resource metrics are scraped every 2 s. The window is the HPA's own
//! `behavior.scaleDown.stabilizationWindowSeconds` (10 s); the window logic itself is tested
//! with a fake clock in crates/controllers/tests/hpa.rs.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(180);

/// Each replica declares 400m of CPU against a request of 200m: 200 % of its request, four
/// times the HPA's 50 % target.
const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {metrics.tandem.io/emulated-cpu: 400m}
    spec:
      os: {name: windows}
      nodeSelector: {kubernetes.io/os: windows}
      containers:
      - name: iis
        image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022
        resources: {requests: {cpu: 200m, memory: 64Mi}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 10
      policies: [{type: Percent, value: 100, periodSeconds: 2}]
"#;

fn hpa(s: &Server) -> Option<Value> {
    s.get_json(&["hpa", "web"])
}

fn events(s: &Server) -> Vec<String> {
    s.get_json(&[
        "events",
        "--field-selector",
        "involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name=web",
    ])
    .and_then(|l| l["items"].as_array().cloned())
    .unwrap_or_default()
    .iter()
    .map(|e| {
        format!(
            "{}: {}",
            e["reason"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        )
    })
    .collect()
}

#[test]
fn an_hpa_scales_a_deployment_up_under_load_and_down_after_its_window() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "emulated",
        "--emulated-pod-network",
        "off",
        "--nodes",
        "linux=1,windows-2022=2",
        "--metric-resolution",
        "2s",
        "--horizontal-pod-autoscaler-sync-period",
        "2s",
    ]);
    s.create(WEB);

    // Under load: 200 % against 50 % asks for 4 replicas, the maximum.
    let scaled_up = s.eventually("web scaled to 4", LONG, || {
        let h = hpa(&s)?;
        (h["status"]["desiredReplicas"] == 4 && h["status"]["currentReplicas"] == 4).then_some(h)
    });
    let current = &scaled_up["status"]["currentMetrics"][0]["resource"]["current"];
    assert!(
        current["averageUtilization"].as_i64().unwrap() >= 150,
        "{scaled_up}"
    );
    let up_events = events(&s);
    assert!(
        up_events
            .iter()
            .any(|e| e.starts_with("SuccessfulRescale: New size:")
                && e.contains("cpu resource utilization (percentage of request) above target")),
        "{up_events:?}"
    );
    s.eventually("4 web pods running", LONG, || {
        let pods = s.get_json(&["pods", "-l", "app=web"])?;
        let running = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count();
        (running == 4).then_some(())
    });
    let table = s.kubectl(&["get", "hpa", "web", "--no-headers"]);
    assert!(table.ok().contains("/50%"), "{}", table.stdout);

    // The load goes: every pod now declares 10m (5 % of its request).
    let out = s.kubectl(&[
        "annotate",
        "--overwrite",
        "pods",
        "-l",
        "app=web",
        "metrics.tandem.io/emulated-cpu=10m",
    ]);
    assert!(out.success(), "{}", out.stderr);
    let load_gone = Instant::now();

    // Held by the 10 s window, then down to the minimum.
    s.eventually("web scaled down to 1", LONG, || {
        let h = hpa(&s)?;
        (h["status"]["desiredReplicas"] == 1).then_some(())
    });
    // The last high recommendation is at most one 2 s sync older than the change, so the
    // 10 s window cannot end sooner than 8 s after it.
    assert!(
        load_gone.elapsed() >= Duration::from_secs(8),
        "scaled down {:?} after the load went: inside the 10 s window",
        load_gone.elapsed()
    );
    s.eventually("the Deployment at 1 replica", LONG, || {
        let d = s.get_json(&["deployment", "web"])?;
        (d["spec"]["replicas"] == 1).then_some(())
    });
    let down_events = events(&s);
    assert!(
        down_events
            .iter()
            .any(|e| e.contains("New size: 1; reason: All metrics below target")),
        "{down_events:?}"
    );
}
