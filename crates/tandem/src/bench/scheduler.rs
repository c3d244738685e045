//! `tandem bench scheduler`: emulated nodes and pods through the real API, timing how fast the
//! scheduler binds them. Comparable to upstream's `scheduler_perf` SchedulingBasic workload
//! (5,000 nodes / 10,000 pods), with a hybrid twist: half the nodes are Linux, half Windows
//! (tainted `os=windows:NoSchedule`, split between Server 2019 and 2022), and the pods are a mix of
//! Linux pods and Windows pods for each build, with node selectors and tolerations. It lived in
//! `tandem-scheduler` until issue 23 moved the benchmarks out of the library crates; it starts
//! the scheduler through that crate's public [`tandem_scheduler::start`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

use tandem_scheduler::{SchedulerOptions, start};

/// The namespace the bench creates its pods in.
pub const BENCH_NAMESPACE: &str = "bench-scheduler";

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub nodes: usize,
    pub pods: usize,
    /// Pods seen bound before the deadline.
    pub bound: usize,
    /// Creating every node.
    pub node_setup: Duration,
    /// From the first pod create to the last create acknowledged.
    pub pods_created: Duration,
    /// From the first pod create to the last binding seen.
    pub elapsed: Duration,
    /// Bound pods per second over `elapsed`.
    pub pods_per_second: f64,
    /// Create (request sent) → binding seen on a watch, per pod.
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Events (`Scheduled` and any `FailedScheduling`) written by the time the last pod was
    /// bound, and dropped because the scheduler's event queue was full.
    pub events_recorded: u64,
    pub events_dropped: u64,
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scheduler bench: {} nodes (half linux, half windows 2019/2022), {} pods",
            self.nodes, self.pods
        )?;
        writeln!(
            f,
            "  nodes created in {:.2}s",
            self.node_setup.as_secs_f64()
        )?;
        writeln!(
            f,
            "  pods created in {:.2}s",
            self.pods_created.as_secs_f64()
        )?;
        writeln!(
            f,
            "  {}/{} pods bound in {:.2}s: {:.0} pods/s (first create to last binding)",
            self.bound,
            self.pods,
            self.elapsed.as_secs_f64(),
            self.pods_per_second
        )?;
        writeln!(
            f,
            "  create to bind: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3
        )?;
        write!(
            f,
            "  scheduler events by then: {} written, {} dropped (queue full)",
            self.events_recorded, self.events_dropped
        )
    }
}

fn node_json(i: usize) -> serde_json::Value {
    let name = format!("bench-node-{i:05}");
    let (os, build, taints) = if i.is_multiple_of(2) {
        ("linux", None, json!([]))
    } else {
        let build = if (i / 2).is_multiple_of(2) {
            "10.0.17763"
        } else {
            "10.0.20348"
        };
        (
            "windows",
            Some(build),
            json!([{"key": "os", "value": "windows", "effect": "NoSchedule"}]),
        )
    };
    let mut labels = json!({"kubernetes.io/os": os, "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "type": "emulated"});
    if let Some(b) = build {
        labels["node.kubernetes.io/windows-build"] = json!(b);
    }
    let resources =
        json!({"cpu": "4", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "emulated"}],
            "nodeInfo": {"operatingSystem": os, "architecture": "amd64", "containerRuntimeVersion": "emulated://0",
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "osImage": os, "kernelVersion": build.unwrap_or("6.1"),
                "machineID": "", "systemUUID": "", "bootID": ""}
        }
    })
}

fn pod_json(i: usize) -> serde_json::Value {
    let (selector, image, tolerations) = match i % 4 {
        0 | 1 => ("linux", "registry.k8s.io/pause:3.10", json!([])),
        2 => (
            "windows",
            "mcr.microsoft.com/windows/servercore:ltsc2019",
            json!([{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]),
        ),
        _ => (
            "windows",
            "mcr.microsoft.com/windows/servercore:ltsc2022",
            json!([{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]),
        ),
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("bench-pod-{i:05}"), "namespace": BENCH_NAMESPACE, "labels": {"app": "bench"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/os": selector},
            "tolerations": tolerations,
            "containers": [{"name": "app", "image": image, "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]
        }
    })
}

/// The nearest-rank percentile rounding the rank up (unlike [`super::percentile`], which rounds
/// to the nearest index): the figures `tandem bench scheduler` has always printed.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

/// Creates `nodes` emulated nodes, starts a scheduler, creates `pods` pods as fast as the API
/// takes them, and reports how fast they were bound. Run it against a fresh cluster: it leaves its
/// nodes and pods behind, and its own scheduler would compete with another one.
///
/// `client` creates the nodes and pods and watches for bindings; the scheduler talks through
/// `scheduler_client`, which should be a connection of its own, as kube-scheduler's is. Over
/// HTTP/2, one connection's frames are read and written by one task, so the bench's creates and
/// the scheduler's bindings sharing it would queue behind each other.
pub async fn run_bench(
    client: kube::Client,
    scheduler_client: kube::Client,
    nodes: usize,
    pods: usize,
) -> anyhow::Result<BenchReport> {
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE}}),
    )
    .context("a fixture did not decode")?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("failed to create the bench namespace"),
    }

    let node_api: Api<Node> = Api::all(client.clone());
    let t_nodes = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..nodes)
        .map(|i| {
            let api = node_api.clone();
            async move {
                let v = node_json(i);
                let name = format!("bench-node-{i:05}");
                let node: Node =
                    serde_json::from_value(v.clone()).context("a fixture did not decode")?;
                let created = match api.create(&PostParams::default(), &node).await {
                    Ok(n) => Some(n),
                    Err(kube::Error::Api(s)) if s.code == 409 => None,
                    Err(e) => return Err(e).context(format!("failed to create node {name}")),
                };
                // Some servers drop status on create, as upstream does for most kinds.
                if created.is_some_and(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.allocatable.as_ref())
                        .is_none()
                }) {
                    let patch = json!({"status": v["status"]});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("failed to create node {name}"))?;
                }
                Ok(())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let node_setup = t_nodes.elapsed();

    // Watch bindings in the bench namespace before creating anything.
    let bound_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let watch_task = {
        let bound_at = bound_at.clone();
        let api: Api<Pod> = Api::namespaced(client.clone(), BENCH_NAMESPACE);
        tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            // Only bound pods: the bench needs each pod once, when its binding lands.
            let config = watcher::Config::default().fields("spec.nodeName!=");
            let mut stream = watcher(api, config).boxed();
            while let Some(ev) = stream.next().await {
                let pod = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                if pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty())
                    && let Some(name) = pod.metadata.name
                {
                    bound_at
                        .lock()
                        .await
                        .entry(name)
                        .or_insert_with(Instant::now);
                }
            }
        })
    };
    let _ = synced_rx.await;

    let options = SchedulerOptions {
        record_scheduled_events: std::env::var_os("TANDEM_BENCH_NO_EVENTS").is_none(),
        ..SchedulerOptions::default()
    };
    let mut scheduler = start(scheduler_client, options);
    scheduler.ready().await;

    // The requests are encoded before the clock starts, and the created pods the API returns are
    // not decoded: the figure is about the API server and the scheduler, not the bench's JSON.
    let pods_url = kube::core::Request::new(format!("/api/v1/namespaces/{BENCH_NAMESPACE}/pods"));
    let requests = (0..pods)
        .map(|i| {
            let body = serde_json::to_vec(&pod_json(i)).context("a fixture did not decode")?;
            let request = pods_url
                .create(&PostParams::default(), body)
                .context("cannot build a request")?;
            Ok((format!("bench-pod-{i:05}"), request))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let first_create = Instant::now();
    let created: Vec<anyhow::Result<(String, Instant)>> = futures::stream::iter(requests)
        .map(|(name, request)| {
            let client = client.clone();
            async move {
                let sent = Instant::now();
                match client.request_text(request).await {
                    Ok(_) => Ok((name, sent)),
                    Err(e) => Err(e).context(format!("failed to create pod {name}")),
                }
            }
        })
        .buffer_unordered(128)
        .collect()
        .await;
    let pods_created = first_create.elapsed();
    let created: HashMap<String, Instant> = created.into_iter().collect::<anyhow::Result<_>>()?;

    let deadline =
        Instant::now() + Duration::from_secs(60) + Duration::from_millis(pods as u64 * 2);
    loop {
        if bound_at.lock().await.len() >= pods || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watch_task.abort();
    scheduler.stop();
    let events_recorded = scheduler.stats().events_recorded.load(Ordering::Relaxed);
    let events_dropped = scheduler.stats().events_dropped.load(Ordering::Relaxed);

    let bound_at = bound_at.lock().await;
    let mut latencies: Vec<Duration> = created
        .iter()
        .filter_map(|(name, sent)| {
            bound_at
                .get(name)
                .map(|b| b.saturating_duration_since(*sent))
        })
        .collect();
    latencies.sort();
    let last_bind = bound_at.values().max().copied().unwrap_or(first_create);
    let elapsed = last_bind.saturating_duration_since(first_create);
    let bound = latencies.len();
    Ok(BenchReport {
        nodes,
        pods,
        bound,
        node_setup,
        pods_created,
        elapsed,
        pods_per_second: if elapsed.is_zero() {
            0.0
        } else {
            bound as f64 / elapsed.as_secs_f64()
        },
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or_default(),
        events_recorded,
        events_dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_alternate_linux_and_tainted_windows_of_both_builds() {
        let os = |i| node_json(i)["metadata"]["labels"]["kubernetes.io/os"].clone();
        let build =
            |i| node_json(i)["metadata"]["labels"]["node.kubernetes.io/windows-build"].clone();
        assert_eq!(
            (os(0), os(1), os(2)),
            (json!("linux"), json!("windows"), json!("linux"))
        );
        assert_eq!(
            (build(1), build(3)),
            (json!("10.0.17763"), json!("10.0.20348"))
        );
        assert_eq!(node_json(0)["spec"]["taints"], json!([]));
        assert_eq!(node_json(1)["spec"]["taints"][0]["key"], json!("os"));
    }

    #[test]
    fn the_percentile_rounds_the_rank_up() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 0.5), Duration::from_millis(50));
        assert_eq!(percentile(&v, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    /// What `tandem bench scheduler` runs, small: every pod of the OS mix bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_run_binds_every_pod() -> anyhow::Result<()> {
        let ts = tandem_test_support::TestServer::start().await?;
        let report = run_bench(ts.client.clone(), ts.new_client().await?, 8, 16).await?;
        assert_eq!(
            (report.nodes, report.pods, report.bound),
            (8, 16, 16),
            "{report}"
        );
        assert!(
            report.p50 <= report.p99 && report.p99 <= report.max,
            "{report}"
        );
        assert!(report.to_string().contains("16/16 pods bound"), "{report}");
        Ok(())
    }
}
