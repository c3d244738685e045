//! `tandem bench controllers`: how fast the workload controllers scale one Deployment from 0 to
//! N replicas. The caller runs the API server, the scheduler and (emulated) node agents; this
//! measures from the scale-up to all pods existing and to all pods Running and Ready, and the
//! process's peak resident memory. It lived in `tandem-controllers` until issue 23 moved the
//! benchmarks out of the library crates; it uses that crate's public `controller_utils`.

use std::fmt;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use tandem_controllers::controller_utils::{self as cu, Error};

use super::rss::peak_rss_kib;

/// Namespace the benchmark's Deployment lives in.
pub const NAMESPACE: &str = "bench-controllers";
const NAME: &str = "scale";

/// What one run measured.
#[derive(Debug, Clone)]
pub struct ScaleBenchReport {
    pub replicas: usize,
    /// From the scale-up to every pod existing; `None` if that did not happen before the deadline.
    pub all_created: Option<Duration>,
    /// From the scale-up to every pod Running and Ready.
    pub all_ready: Option<Duration>,
    /// The process's peak resident set size (`VmHWM`) in KiB, when /proc is available.
    pub peak_rss_kib: Option<u64>,
}

impl fmt::Display for ScaleBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = |d: Option<Duration>| {
            d.map_or("did not finish".to_string(), |d| {
                format!("{:.2} s", d.as_secs_f64())
            })
        };
        writeln!(f, "deployment scaled 0 → {} replicas", self.replicas)?;
        writeln!(f, "  all pods created:        {}", d(self.all_created))?;
        writeln!(f, "  all pods Running+Ready:  {}", d(self.all_ready))?;
        match self.peak_rss_kib {
            Some(k) => write!(f, "  peak RSS (VmHWM):        {:.1} MiB", k as f64 / 1024.0),
            None => write!(f, "  peak RSS (VmHWM):        unavailable"),
        }
    }
}

/// Creates a Deployment with 0 replicas in [`NAMESPACE`], scales it to `replicas` and waits
/// (polling every 250 ms, at most 120 s plus 20 ms per replica) until all its pods exist and
/// all are Running and Ready.
pub async fn bench_deployment_scale(
    client: kube::Client,
    replicas: usize,
) -> Result<ScaleBenchReport, Error> {
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?;
    match ns_api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(e) if cu::is_already_exists(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": NAME },
        "spec": {
            "replicas": 0,
            "selector": { "matchLabels": { "app": NAME } },
            "template": { "metadata": { "labels": { "app": NAME } },
                          "spec": { "containers": [{ "name": "pause", "image": "registry.k8s.io/pause:3.10" }] } }
        }
    }))?;
    match api.create(&PostParams::default(), &d).await {
        Ok(_) => {}
        Err(e) if cu::is_already_exists(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let want = i32::try_from(replicas).map_err(|_| Error::Invalid("too many replicas".into()))?;
    let start = Instant::now();
    api.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "spec": { "replicas": want } })),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let deadline = Duration::from_secs(120)
        + Duration::from_millis(20).saturating_mul(u32::try_from(replicas).unwrap_or(u32::MAX));
    let (mut all_created, mut all_ready) = (None, None);
    while all_ready.is_none() && start.elapsed() < deadline {
        let (mut existing, mut ready) = (0usize, 0usize);
        let mut params = ListParams::default()
            .labels(&format!("app={NAME}"))
            .limit(5000);
        loop {
            let page = pods.list(&params).await?;
            for p in page
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
            {
                existing += 1;
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if running && cu::pod_is_ready(p) {
                    ready += 1;
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => params = params.continue_token(&c),
                None => break,
            }
        }
        if all_created.is_none() && existing >= replicas {
            all_created = Some(start.elapsed());
        }
        if ready >= replicas {
            all_ready = Some(start.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(ScaleBenchReport {
        replicas,
        all_created,
        all_ready,
        peak_rss_kib: peak_rss_kib(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One emulated Linux node, the scheduler and the controllers against a test server: the
    /// figures `tandem bench controllers` prints, on a small Deployment.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scale_benchmark_reports_creation_readiness_and_peak_memory() -> anyhow::Result<()> {
        let ts = tandem_test_support::TestServer::start().await?;
        let client = ts.client.clone();
        tandem_controllers::start_all(client.clone(), tandem_core::registry::Registry::builtin());
        tokio::spawn(tandem_scheduler::run(
            client.clone(),
            tandem_scheduler::SchedulerOptions::default(),
        ));
        let mut node = tandem_agent::NodeConfig::linux("bench-controllers-0");
        node.streaming_port = None;
        let agent = tokio::spawn(tandem_agent::run(client.clone(), node));
        let report = bench_deployment_scale(client, 5).await?;
        agent.abort();
        assert!(
            report.all_created.is_some() && report.all_ready.is_some(),
            "{report}"
        );
        assert!(report.all_created <= report.all_ready);
        assert!(report.peak_rss_kib.is_some_and(|k| k > 0));
        assert!(report.to_string().contains("0 → 5 replicas"));
        Ok(())
    }
}
