//! `tandem bench nodes` (issue 6): many emulated nodes heartbeating against one API server, pods
//! created through Deployments (so the ReplicaSet controller creates them and the scheduler binds
//! them), and the figures the issue asks for: pod startup latency (create → Running, p50/p99,
//! image already present), API latency during the run, and the process's peak resident memory.
//!
//! The caller runs the API server, the controllers and the scheduler in the same process; this
//! module runs the agents (through `tandem-agent`'s public API) and measures. It lived in
//! `tandem-agent` until issue 23 moved the benchmarks out of the library crates. Definitions of what is printed:
//!
//! - **pod startup**: per pod, from the first time the bench's pod watch sees it (the ReplicaSet
//!   controller's create, observed on the bench's clock) to the first time it sees the pod with
//!   `status.phase: Running`. The pod's `creationTimestamp` has one-second resolution, too coarse
//!   for a one-second target, so the watch's observation of the create stands in for it; it lags
//!   the create by the watch delivery time, which is small beside the figures measured. Split into
//!   create → bound (first seen with `spec.nodeName`) and bound → Running.
//! - **API latency**: a probe client of its own (its own connections) that, every 100 ms, GETs a
//!   small ConfigMap and, independently, merge-patches it, from before the first Deployment until
//!   the last pod runs. Each request is timed from send to response; a slow request does not
//!   delay the next tick, so stalls are counted, not skipped.
//! - **RSS**: the process's peak resident set size (`VmHWM` in `/proc/self/status`): API
//!   server, store, watch cache, controllers, scheduler, agents and the bench together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio::time::Instant;

use tandem_agent::SharedPodWatch;
use tandem_agent::config::{NodeConfig, Timing};
use tandem_agent::podnet::{EmulatedNetwork, NetworkSpec};
use tandem_agent::runtime::emulated::PAUSE_IMAGE;

use super::percentile;
use super::rss::{peak_rss_bytes, rss_bytes};

/// Namespace of the bench's Deployments, pods and probe object.
pub const NAMESPACE: &str = "bench-nodes";
const PROBE: &str = "probe";
const PROBE_PERIOD: Duration = Duration::from_millis(100);

/// What to run.
#[derive(Clone, Debug)]
pub struct NodesBenchOptions {
    /// Emulated Linux nodes, named `bench-<i>`.
    pub nodes: usize,
    /// Pods in all, rounded up to whole Deployments.
    pub pods: usize,
    /// Replicas of each Deployment.
    pub replicas: usize,
    /// Pods per second to ask for, by spacing the Deployments' creation; `0` creates every
    /// Deployment at once.
    pub pod_rate: f64,
    /// Give up waiting for pods to run after this long (from the first Deployment).
    pub timeout: Duration,
    /// One pod watch per agent (each kubelet's own `spec.nodeName` watch) instead of one
    /// [`SharedPodWatch`] for all of them.
    pub watch_per_node: bool,
    /// Put the nodes' pods on the network ([`tandem_agent::podnet`]): each gets a namespace and an
    /// address in [`NETWORKED_CLUSTER_CIDR`], and a stand-in on [`NETWORKED_PORT`].
    pub networked: bool,
}

/// The pod range of a networked bench (node `i` gets the `i`-th /24).
pub const NETWORKED_CLUSTER_CIDR: &str = "10.64.0.0/16";
/// The port each networked bench pod declares (answered by its stand-in).
pub const NETWORKED_PORT: u16 = 8080;

/// The clients the bench uses. They can be clones of one client; separate ones keep the probe's
/// and the bench's requests off the agents' connections, as separate processes would be.
#[derive(Clone)]
pub struct NodesBenchClients {
    /// The emulated agents' clients: agent `i` uses `agents[i % agents.len()]` (the shared pod
    /// watch the first). Must not be empty.
    pub agents: Vec<Client>,
    /// Creates the Deployments and watches the pods.
    pub bench: Client,
    /// The API latency probe.
    pub probe: Client,
}

/// p50, p99 and maximum of a set of durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Percentiles {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Percentiles {
    /// Sorts `v` and takes nearest-rank percentiles.
    pub fn of(mut v: Vec<Duration>) -> Percentiles {
        v.sort_unstable();
        Percentiles {
            count: v.len(),
            p50: percentile(&v, 0.5),
            p99: percentile(&v, 0.99),
            max: v.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.count
        )
    }
}

/// The bench's figures.
#[derive(Clone, Debug, Default)]
pub struct BenchReport {
    pub nodes: usize,
    pub watch_per_node: bool,
    pub deployments: usize,
    pub replicas: usize,
    /// Pods the bench's watch saw created.
    pub pods_created: usize,
    pub pods_running: usize,
    /// From starting the agents to every Node reporting Ready.
    pub nodes_ready_after: Duration,
    /// Create (first seen) → Running.
    pub startup: Percentiles,
    /// Create (first seen) → bound to a node (first seen with `spec.nodeName`).
    pub create_to_bound: Percentiles,
    /// Bound → Running.
    pub bound_to_running: Percentiles,
    /// Probe GET of a small ConfigMap every 100 ms.
    pub api_get: Percentiles,
    /// Probe merge-patch of the same ConfigMap every 100 ms.
    pub api_patch: Percentiles,
    /// Probe requests that failed.
    pub api_errors: usize,
    /// Peak resident set size (`VmHWM`).
    pub peak_rss_bytes: Option<u64>,
    /// From the first Deployment to the last pod Running (or the timeout).
    pub wall: Duration,
    /// Networked mode: the nodes' pod networks (kept, with the pods on them, for the caller to
    /// measure traffic and shut down), the time each pod's network took to set up, and the
    /// resident memory before the first pod and after the last.
    pub networks: Vec<Arc<EmulatedNetwork>>,
    pub network_setup: Percentiles,
    pub rss_before_pods: Option<u64>,
    pub rss_after_pods: Option<u64>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "nodes: {} emulated ({}), all Ready after {:.1} s",
            self.nodes,
            if self.watch_per_node {
                "a pod watch each"
            } else {
                "one shared pod watch"
            },
            self.nodes_ready_after.as_secs_f64()
        )?;
        writeln!(
            f,
            "pods: {} Deployments × {} replicas; {} created, {} Running in {:.1} s ({:.0} pods/s)",
            self.deployments,
            self.replicas,
            self.pods_created,
            self.pods_running,
            self.wall.as_secs_f64(),
            self.pods_running as f64 / self.wall.as_secs_f64().max(1e-9)
        )?;
        writeln!(
            f,
            "pod startup (created → Running, watch-observed): {}",
            self.startup
        )?;
        writeln!(f, "  created → bound:  {}", self.create_to_bound)?;
        writeln!(f, "  bound → Running:  {}", self.bound_to_running)?;
        writeln!(
            f,
            "API latency (probe client, one request of each kind every 100 ms during the run):"
        )?;
        writeln!(f, "  GET configmap:    {}", self.api_get)?;
        writeln!(f, "  PATCH configmap:  {}", self.api_patch)?;
        if self.api_errors > 0 {
            writeln!(f, "  probe errors:     {}", self.api_errors)?;
        }
        if !self.networks.is_empty() {
            writeln!(
                f,
                "pod network setup (namespace, veth pair, address, route): {}",
                self.network_setup
            )?;
            if let (Some(before), Some(after)) = (self.rss_before_pods, self.rss_after_pods) {
                let per_pod = after.saturating_sub(before) as f64 / self.pods_running.max(1) as f64;
                writeln!(
                    f,
                    "RSS before the first pod {:.0} MiB, after the last {:.0} MiB: {:.1} KiB per running pod (control plane, agents, namespaces' sockets and stand-ins together)",
                    before as f64 / (1024.0 * 1024.0),
                    after as f64 / (1024.0 * 1024.0),
                    per_pod / 1024.0
                )?;
            }
        }
        match self.peak_rss_bytes {
            Some(b) => write!(
                f,
                "peak RSS (VmHWM) of the process: {:.0} MiB",
                b as f64 / (1024.0 * 1024.0)
            ),
            None => write!(f, "peak RSS: unavailable"),
        }
    }
}

/// When the bench's watch first saw each phase of a pod.
#[derive(Clone, Copy, Debug)]
struct PodTimes {
    created: Instant,
    bound: Option<Instant>,
    running: Option<Instant>,
}

#[derive(Default)]
struct Observed {
    pods: HashMap<String, PodTimes>,
    running: usize,
}

impl Observed {
    fn see(&mut self, pod: &Pod, at: Instant) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let t = self.pods.entry(uid.to_string()).or_insert(PodTimes {
            created: at,
            bound: None,
            running: None,
        });
        if t.bound.is_none() && pod.spec.as_ref().is_some_and(|s| s.node_name.is_some()) {
            t.bound = Some(at);
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running && t.running.is_none() {
            t.running = Some(at);
            self.running += 1;
        }
    }
}

#[derive(Default)]
struct ProbeSamples {
    get: Vec<Duration>,
    patch: Vec<Duration>,
    errors: usize,
}

/// Issues one GET and one merge-patch of the probe ConfigMap every [`PROBE_PERIOD`], each in its
/// own task, until aborted.
async fn probe_loop(client: Client, samples: Arc<Mutex<ProbeSamples>>) {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let mut tick = tokio::time::interval(PROBE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        n += 1;
        let (api_get, s_get) = (api.clone(), samples.clone());
        tokio::spawn(async move {
            let t = Instant::now();
            let ok = api_get.get(PROBE).await.is_ok();
            let d = t.elapsed();
            let mut s = s_get.lock().unwrap_or_else(|p| p.into_inner());
            if ok { s.get.push(d) } else { s.errors += 1 }
        });
        let (api_patch, s_patch) = (api.clone(), samples.clone());
        tokio::spawn(async move {
            let patch = serde_json::json!({ "data": { "n": n.to_string() } });
            let t = Instant::now();
            let ok = api_patch
                .patch(PROBE, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok();
            let d = t.elapsed();
            let mut s = s_patch.lock().unwrap_or_else(|p| p.into_inner());
            if ok { s.patch.push(d) } else { s.errors += 1 }
        });
    }
}

/// Starts `nodes` emulated Linux agents named `bench-<i>` (heartbeats on, streaming servers
/// off), waits until every Node is Ready, then creates Deployments of `replicas` pause pods in
/// [`NAMESPACE`] (paced to `pod_rate` pods/s) and waits (at most `timeout`) until all their pods
/// run, measuring as the module documentation says. Agents are stopped at the end; the objects
/// are left for inspection.
pub async fn run_nodes_bench(clients: NodesBenchClients, opts: NodesBenchOptions) -> BenchReport {
    let replicas = opts.replicas.max(1);
    let deployments = opts.pods.div_ceil(replicas);
    let want = deployments * replicas;
    let mut report = BenchReport {
        nodes: opts.nodes,
        watch_per_node: opts.watch_per_node,
        deployments,
        replicas,
        ..BenchReport::default()
    };

    let agents_started = Instant::now();
    let mut agents = Vec::with_capacity(opts.nodes + 1);
    let agent_client = |i: usize| clients.agents[i % clients.agents.len()].clone();
    let mut shared = (!opts.watch_per_node).then(|| SharedPodWatch::new(agent_client(0)));
    for i in 0..opts.nodes {
        let mut c = NodeConfig::linux(&format!("bench-{i}"));
        c.pod_cidr = Some(format!("10.{}.{}.0/24", 64 + (i / 256) % 64, i % 256));
        if opts.networked {
            let spec = NetworkSpec {
                node_name: c.name.clone(),
                pod_cidr: c.pod_cidr.clone().unwrap_or_default(),
                cluster_cidr: Some(NETWORKED_CLUSTER_CIDR.to_string()),
                windows: false,
            };
            match EmulatedNetwork::start(&spec).await {
                Ok(net) => {
                    c.pod_network = Some(net.clone());
                    report.networks.push(net);
                }
                Err(e) => {
                    tracing::error!(node = %c.name, error = %e, "no pod network for a bench node")
                }
            }
        }
        c.timing = Timing::default();
        c.streaming_port = None;
        let client = agent_client(i);
        agents.push(match shared.as_mut() {
            Some(w) => {
                let feed = w.subscribe(&c.name);
                tokio::spawn(async move { tandem_agent::run_shared(client, c, feed).await })
            }
            None => tokio::spawn(async move { tandem_agent::run(client, c).await }),
        });
    }
    if let Some(w) = shared {
        let watch = w.start();
        agents.push(tokio::spawn(async move {
            let _ = watch.await;
            Ok(())
        }));
    }
    let nodes: Api<Node> = Api::all(clients.bench.clone());
    loop {
        let ready = nodes
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().filter(|n| is_bench_node_ready(n)).count())
            .unwrap_or(0);
        if ready >= opts.nodes || agents_started.elapsed() > opts.timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    report.nodes_ready_after = agents_started.elapsed();

    if let Err(e) = prepare_namespace(&clients.bench).await {
        tracing::error!(error = %e, "bench namespace or probe object not created");
    }
    let samples = Arc::new(Mutex::new(ProbeSamples::default()));
    let probe = tokio::spawn(probe_loop(clients.probe.clone(), samples.clone()));

    // Watch the pods before creating anything, so no create is missed.
    let observed = Arc::new(Mutex::new(Observed::default()));
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(0usize);
    let pods: Api<Pod> = Api::namespaced(clients.bench.clone(), NAMESPACE);
    let watch_observed = observed.clone();
    let watch = tokio::spawn(async move {
        let mut s = watcher(pods, watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            let at = Instant::now();
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
                let mut o = watch_observed.lock().unwrap_or_else(|p| p.into_inner());
                o.see(&p, at);
                let _ = done_tx.send(o.running);
            }
        }
    });

    report.rss_before_pods = rss_bytes();
    let start = Instant::now();
    let deadline = start + opts.timeout;
    let creator = tokio::spawn(create_deployments(
        clients.bench.clone(),
        deployments,
        replicas,
        opts.pod_rate,
        opts.networked,
    ));
    let mut progress = tokio::time::interval(Duration::from_secs(10));
    progress.tick().await;
    loop {
        tokio::select! {
            changed = done_rx.changed() => {
                if changed.is_err() || *done_rx.borrow() >= want {
                    break;
                }
            }
            _ = progress.tick() => {
                let (seen, bound, running) = {
                    let o = observed.lock().unwrap_or_else(|p| p.into_inner());
                    (o.pods.len(), o.pods.values().filter(|t| t.bound.is_some()).count(), o.running)
                };
                eprintln!(
                    "[{:>5.0} s] pods created {seen}, bound {bound}, Running {running} / {want}; RSS {:.0} MiB",
                    start.elapsed().as_secs_f64(),
                    rss_bytes().unwrap_or(0) as f64 / (1024.0 * 1024.0)
                );
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    report.wall = start.elapsed();
    report.peak_rss_bytes = peak_rss_bytes();
    report.rss_after_pods = rss_bytes();
    report.network_setup = Percentiles::of(
        report
            .networks
            .iter()
            .flat_map(|n| n.setup_durations())
            .collect(),
    );
    creator.abort();
    probe.abort();
    watch.abort();
    let running = observed.lock().unwrap_or_else(|p| p.into_inner()).running;
    if running < want {
        describe_stragglers(&clients.bench).await;
    }
    for a in agents {
        a.abort();
    }

    let o = observed.lock().unwrap_or_else(|p| p.into_inner());
    report.pods_created = o.pods.len();
    report.pods_running = o.running;
    let mut startup = Vec::with_capacity(o.pods.len());
    let mut to_bound = Vec::with_capacity(o.pods.len());
    let mut to_running = Vec::with_capacity(o.pods.len());
    for t in o.pods.values() {
        if let Some(r) = t.running {
            startup.push(r.saturating_duration_since(t.created));
        }
        if let Some(b) = t.bound {
            to_bound.push(b.saturating_duration_since(t.created));
            if let Some(r) = t.running {
                to_running.push(r.saturating_duration_since(b));
            }
        }
    }
    report.startup = Percentiles::of(startup);
    report.create_to_bound = Percentiles::of(to_bound);
    report.bound_to_running = Percentiles::of(to_running);
    let s = samples.lock().unwrap_or_else(|p| p.into_inner());
    report.api_get = Percentiles::of(s.get.clone());
    report.api_patch = Percentiles::of(s.patch.clone());
    report.api_errors = s.errors;
    report
}

/// Prints (to stderr) how many pods are short of Running, grouped by phase, node assignment and
/// first container state, with one example each: what a run that did not finish was waiting for.
async fn describe_stragglers(client: &Client) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        return;
    };
    let mut groups: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    for p in &list.items {
        let status = p.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("-");
        if phase == "Running" {
            continue;
        }
        let state = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|v| v.first())
            .and_then(|c| c.state.as_ref())
            .map(|s| match (&s.waiting, &s.running, &s.terminated) {
                (Some(w), _, _) => format!("waiting:{}", w.reason.as_deref().unwrap_or("")),
                (_, Some(_), _) => "running".into(),
                (_, _, Some(t)) => format!("terminated:{}", t.reason.as_deref().unwrap_or("")),
                _ => "-".into(),
            })
            .unwrap_or_else(|| "no container status".into());
        let bound = if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            "bound"
        } else {
            "unbound"
        };
        let key = format!("{phase}, {bound}, {state}");
        let example = format!(
            "{} on {}",
            p.metadata.name.as_deref().unwrap_or(""),
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or("-")
        );
        groups.entry(key).or_insert((0, example)).0 += 1;
    }
    for (key, (n, example)) in groups {
        eprintln!("not Running: {n} pods ({key}), e.g. {example}");
    }
}

fn is_bench_node_ready(n: &Node) -> bool {
    n.metadata
        .name
        .as_deref()
        .is_some_and(|name| name.starts_with("bench-"))
        && n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn prepare_namespace(client: &Client) -> Result<(), kube::Error> {
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(NAMESPACE.into()),
            ..Default::default()
        },
        ..Namespace::default()
    };
    create_or_keep(&Api::all(client.clone()), &ns).await?;
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(PROBE.into()),
            ..Default::default()
        },
        data: Some([("n".to_string(), "0".to_string())].into()),
        ..ConfigMap::default()
    };
    create_or_keep(&Api::namespaced(client.clone(), NAMESPACE), &cm).await
}

async fn create_or_keep<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A Deployment of `replicas` pause containers (the image every node has, `IfNotPresent`).
fn deployment(name: &str, replicas: usize, networked: bool) -> Option<Deployment> {
    let mut container = serde_json::json!({
        "name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "IfNotPresent"
    });
    if networked {
        container["ports"] = serde_json::json!([{ "containerPort": NETWORKED_PORT }]);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name, "tandem.dev/bench": "nodes" } },
                "spec": { "containers": [container] }
            }
        }
    }))
    .ok()
}

/// Creates `count` Deployments `bench-<i>`, one every `replicas / pod_rate` seconds (all at once
/// when `pod_rate` is 0), retrying each until the API accepts it.
async fn create_deployments(
    client: Client,
    count: usize,
    replicas: usize,
    pod_rate: f64,
    networked: bool,
) {
    let api: Api<Deployment> = Api::namespaced(client, NAMESPACE);
    let interval = (pod_rate > 0.0).then(|| Duration::from_secs_f64(replicas as f64 / pod_rate));
    let first = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        if let Some(iv) = interval {
            tokio::time::sleep_until(first + iv.mul_f64(i as f64)).await;
        }
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let Some(d) = deployment(&format!("bench-{i}"), replicas, networked) else {
                return;
            };
            while let Err(e) = create_or_keep(&api, &d).await {
                tracing::warn!(error = %e, deployment = i, "bench Deployment not created; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
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
        let p = Percentiles::of(v.into_iter().rev().collect());
        assert_eq!(
            (p.count, p.p50, p.max),
            (100, Duration::from_millis(51), Duration::from_millis(100))
        );
    }

    #[test]
    fn a_pod_is_timed_from_first_sight_to_bound_and_running() {
        let mut o = Observed::default();
        let t0 = Instant::now();
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "uid": "u1"}, "spec": {"containers": []}
        }))
        .expect("pod");
        o.see(&p, t0);
        p.spec.as_mut().expect("spec").node_name = Some("bench-0".into());
        o.see(&p, t0 + Duration::from_millis(10));
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        o.see(&p, t0 + Duration::from_millis(30));
        o.see(&p, t0 + Duration::from_millis(50));
        let t = o.pods["u1"];
        assert_eq!(o.running, 1);
        assert_eq!(t.bound, Some(t0 + Duration::from_millis(10)));
        assert_eq!(t.running, Some(t0 + Duration::from_millis(30)));
    }

    #[test]
    fn bench_deployment_runs_the_preloaded_pause_image() {
        let d = deployment("bench-3", 100, false).expect("deployment");
        let spec = d.spec.expect("spec");
        assert_eq!(spec.replicas, Some(100));
        let c = &spec.template.spec.expect("pod spec").containers[0];
        assert_eq!(c.image.as_deref(), Some(PAUSE_IMAGE));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_run_brings_every_deployment_pod_to_running() {
        let ts = tandem_test_support::TestServer::start()
            .await
            .expect("server");
        let client = ts.client.clone();
        tandem_controllers::start_all(client.clone(), tandem_core::registry::Registry::builtin());
        tokio::spawn(tandem_scheduler::run(
            client.clone(),
            tandem_scheduler::SchedulerOptions::default(),
        ));
        let clients = NodesBenchClients {
            agents: vec![client.clone()],
            bench: client.clone(),
            probe: client,
        };
        let opts = NodesBenchOptions {
            nodes: 10,
            pods: 100,
            replicas: 25,
            pod_rate: 0.0,
            timeout: Duration::from_secs(90),
            watch_per_node: false,
            networked: false,
        };
        let report = run_nodes_bench(clients, opts).await;
        println!("{report}");
        assert_eq!(report.deployments, 4, "{report}");
        assert_eq!(
            (report.pods_created, report.pods_running),
            (100, 100),
            "{report}"
        );
        assert!(
            report.api_get.count > 0 && report.api_patch.count > 0,
            "{report}"
        );
        assert!(report.peak_rss_bytes.is_some_and(|b| b > 0), "{report}");
    }
}
