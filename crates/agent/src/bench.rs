//! `tandem bench nodes`: many emulated nodes heartbeating against one API server, pods bound to
//! them round-robin (their image already present), and the figures the issue asks for: pod
//! startup latency (create → Running, p50/p99), API latency of the creates (p50/p99), and the
//! process's resident memory.
//!
//! Pods are created directly bound (`spec.nodeName`), not through Deployments and the
//! scheduler: this measures the agents and the API server, not the controllers.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::config::{NodeConfig, Timing};

/// The bench's figures.
#[derive(Clone, Debug, Default)]
pub struct BenchReport {
    pub nodes: usize,
    pub pods: usize,
    pub pods_running: usize,
    pub startup_p50: Duration,
    pub startup_p99: Duration,
    pub api_p50: Duration,
    pub api_p99: Duration,
    pub rss_bytes: Option<u64>,
    pub wall: Duration,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "nodes: {} (emulated), pods: {} created, {} Running",
            self.nodes, self.pods, self.pods_running
        )?;
        writeln!(
            f,
            "pod startup (create → Running): p50 {:?}, p99 {:?}",
            self.startup_p50, self.startup_p99
        )?;
        writeln!(
            f,
            "API create latency: p50 {:?}, p99 {:?}",
            self.api_p50, self.api_p99
        )?;
        match self.rss_bytes {
            Some(b) => writeln!(f, "RSS: {:.1} MiB", b as f64 / (1024.0 * 1024.0))?,
            None => writeln!(f, "RSS: unavailable")?,
        }
        write!(f, "wall time: {:?}", self.wall)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The resident set size of this process (Linux `/proc/self/status`).
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Starts `nodes` emulated Linux agents named `bench-<i>`, creates `pods` pods bound round-robin
/// in namespace `default` with `concurrency` creates in flight, waits (at most `timeout`) until
/// they are Running, and reports. Agents are stopped at the end; pods are left for inspection.
pub async fn run_nodes_bench(
    client: Client,
    nodes: usize,
    pods: usize,
    concurrency: usize,
    timeout: Duration,
) -> BenchReport {
    const IMAGE: &str = "registry.k8s.io/pause:3.10";
    let start = Instant::now();
    let mut agents = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let mut c = NodeConfig::linux(&format!("bench-{i}"));
        c.capacity.pods = i64::try_from(pods / nodes.max(1) + 10).unwrap_or(i64::MAX);
        c.pod_cidr = Some(format!("10.{}.{}.0/24", 64 + (i / 256) % 64, i % 256));
        c.timing = Timing::default();
        c.streaming_port = None;
        let client = client.clone();
        agents.push(tokio::spawn(async move { crate::run(client, c).await }));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Watch for Running before creating, so no transition is missed.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch_api = api.clone();
    let watch = tokio::spawn(async move {
        let wc = watcher::Config::default().labels("tandem.dev/bench=nodes");
        let mut s = watcher(watch_api, wc).boxed();
        while let Some(ev) = s.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            {
                let _ = tx.send((p.metadata.name.unwrap_or_default(), Instant::now()));
            }
        }
    });
    let created: std::sync::Arc<tokio::sync::Mutex<HashMap<String, Instant>>> = Default::default();
    let api_lat: std::sync::Arc<tokio::sync::Mutex<Vec<Duration>>> = Default::default();
    futures::stream::iter(0..pods)
        .for_each_concurrent(concurrency.max(1), |i| {
            let api = api.clone();
            let created = created.clone();
            let api_lat = api_lat.clone();
            async move {
                let name = format!("bench-pod-{i}");
                let pod: Pod = match serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {"tandem.dev/bench": "nodes"}},
                    "spec": {"nodeName": format!("bench-{}", i % nodes.max(1)),
                             "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}]}
                })) {
                    Ok(p) => p,
                    Err(_) => return,
                };
                let t = Instant::now();
                if api.create(&PostParams::default(), &pod).await.is_ok() {
                    api_lat.lock().await.push(t.elapsed());
                    created.lock().await.insert(name, t);
                }
            }
        })
        .await;
    let mut startup = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let deadline = start + timeout;
    while seen.len() < pods {
        let Ok(Some((name, at))) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            break;
        };
        if seen.insert(name.clone())
            && let Some(t0) = created.lock().await.get(&name)
        {
            startup.push(at.saturating_duration_since(*t0));
        }
    }
    watch.abort();
    let rss = rss_bytes();
    for a in agents {
        a.abort();
    }
    startup.sort();
    let mut lat = api_lat.lock().await.clone();
    lat.sort();
    BenchReport {
        nodes,
        pods: created.lock().await.len(),
        pods_running: seen.len(),
        startup_p50: percentile(&startup, 0.5),
        startup_p99: percentile(&startup, 0.99),
        api_p50: percentile(&lat, 0.5),
        api_p99: percentile(&lat, 0.99),
        rss_bytes: rss,
        wall: start.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(51));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert!(rss_bytes().is_some_and(|b| b > 0));
    }
}
