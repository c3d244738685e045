//! The agent's control loops: Node registration (re-registration updates instead of failing),
//! Lease renewal in `kube-node-lease`, node status heartbeats, and the pod manager that admits
//! pods bound to the node, runs one [`PodWorker`] each and re-adopts what the runtime still runs
//! after a restart.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::admission::{self, Rejection};
use crate::clock::{self, Clock};
use crate::config::{ConfigError, NodeConfig, Resources, RuntimeKind};
use crate::events::ApiReporter;
use crate::ipam::PodCidr;
use crate::node_status;
use crate::pod_worker::{EventType, PodUpdate, PodWorker, Reporter, WorkerContext};
use crate::runtime::behaviour::StageFile;
use crate::runtime::emulated::{EmulatedConfig, EmulatedRuntime, PAUSE_IMAGE};
use crate::runtime::{NodeResources, Runtime, RuntimeError};
use crate::server;
use crate::stats::StatsSource;

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("runtime failed to start")]
    Runtime(#[from] RuntimeError),
    #[error("node registration failed")]
    Register(#[source] kube::Error),
    #[error("the streaming server could not listen on the node address")]
    Streaming(#[source] std::io::Error),
    #[error("the streaming server's TLS could not be set up")]
    StreamingTls(#[from] server::TlsError),
    #[error("pod watch ended")]
    WatchEnded,
}

/// Runs a node agent until the pod watch ends: registers the Node, renews its Lease, reports node
/// status, and runs the pods bound to it on the configured runtime.
pub async fn run(client: Client, config: NodeConfig) -> Result<(), AgentError> {
    run_fed(client, config, None).await
}

/// [`run`] for one of many agents in this process that share one pod watch: the agent's pods
/// come from `feed` (see [`SharedPodWatch`]) instead of a watch of its own.
pub async fn run_shared(
    client: Client,
    config: NodeConfig,
    feed: PodFeed,
) -> Result<(), AgentError> {
    run_fed(client, config, Some(feed)).await
}

async fn run_fed(
    client: Client,
    config: NodeConfig,
    feed: Option<PodFeed>,
) -> Result<(), AgentError> {
    config.validate()?;
    let clock = Clock::new();
    let runtime: Arc<dyn Runtime> = match config.runtime {
        RuntimeKind::Emulated => {
            let stages = match &config.stage_file {
                Some(p) => StageFile::load(p)?,
                None => StageFile::default(),
            };
            let runtime = EmulatedRuntime::new(
                EmulatedConfig {
                    os: config.os,
                    windows_build: config.windows_build,
                    bandwidth: config.image_bandwidth,
                    pause_image: PAUSE_IMAGE.to_string(),
                    preloaded_images: config.preloaded_images.clone(),
                    stages,
                    state_dir: config.state_dir.clone(),
                    node_name: config.name.clone(),
                    network: config.pod_network.clone(),
                    dns: crate::dns_config::NodeDns {
                        cluster_dns: config.cluster_dns.clone(),
                        cluster_domain: config.cluster_domain.clone(),
                        node_ips: vec![config.internal_ip],
                    },
                },
                clock,
            )?;
            runtime.restore_network().await;
            Arc::new(runtime)
        }
    };
    run_inner(client, config, runtime, clock, feed).await
}

/// [`run`] with a runtime the caller built (tests, other backends).
pub async fn run_with_runtime(
    client: Client,
    config: NodeConfig,
    runtime: Arc<dyn Runtime>,
    clock: Clock,
) -> Result<(), AgentError> {
    run_inner(client, config, runtime, clock, None).await
}

async fn run_inner(
    client: Client,
    mut config: NodeConfig,
    runtime: Arc<dyn Runtime>,
    clock: Clock,
    feed: Option<PodFeed>,
) -> Result<(), AgentError> {
    config.validate()?;
    // The node's stats and metrics; the pod workers drive the runtime through it so that its
    // operations are counted.
    let stats = Arc::new(StatsSource::new(
        &config.name,
        runtime,
        NodeResources {
            capacity: config.capacity,
            allocatable: config.allocatable(),
        },
        clock,
    ));
    let runtime = stats.instrumented_runtime();
    let listener = match (config.streaming_port, &config.cluster_ca_pem) {
        (Some(port), Some(ca)) => {
            let tls = server::tls_config(ca, &config.name, &[config.internal_ip])?;
            let l = server::bind(SocketAddr::new(config.internal_ip, port))
                .await
                .map_err(AgentError::Streaming)?;
            config.kubelet_port = l.local_addr().map_err(AgentError::Streaming)?.port();
            Some((l, tls))
        }
        (Some(_), None) => {
            tracing::error!(
                node = %config.name,
                "no cluster CA to authenticate the API server with: the streaming server \
                 (logs, exec, attach, port-forward) is not started"
            );
            None
        }
        (None, _) => None,
    };
    let node = register(&client, &config, runtime.as_ref(), clock).await?;
    let streaming = listener.map(|(l, tls)| {
        tokio::spawn(server::serve_with_stats(
            l,
            tls,
            runtime.clone(),
            Some(stats.clone()),
        ))
    });
    if config.pod_cidr.is_none() {
        config.pod_cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone());
    }
    let config = Arc::new(config);
    let lease = tokio::spawn(lease_loop(
        client.clone(),
        config.clone(),
        clock,
        node.metadata.uid.clone(),
    ));
    // Every node offers the emulated SMB CSI driver (its CSINode lists it); bounded, not kept.
    tokio::spawn(crate::volumes::smb_csi::register(
        client.clone(),
        config.name.clone(),
    ));
    // Emulated runtimes create no volume directories, so they have none to remove.
    let local_path = (!runtime.version().starts_with("emulated")).then(|| {
        tokio::spawn(crate::volumes::local_path::run(
            client.clone(),
            config.name.clone(),
            crate::volumes::local_path::root_for(&config),
        ))
    });
    let status = tokio::spawn(status_loop(
        client.clone(),
        config.clone(),
        runtime.clone(),
        clock,
        node,
    ));
    let result = pod_loop(client, config, runtime, clock, feed, stats).await;
    lease.abort();
    status.abort();
    if let Some(t) = local_path {
        t.abort();
    }
    if let Some(s) = streaming {
        s.abort();
    }
    result
}

/// Creates the Node, or updates an existing one (labels, pod CIDR) as the kubelet does when it
/// restarts; then writes its status.
async fn register(
    client: &Client,
    config: &NodeConfig,
    runtime: &dyn Runtime,
    clock: Clock,
) -> Result<Node, AgentError> {
    let api: Api<Node> = Api::all(client.clone());
    let desired = node_status::node(
        config,
        &runtime.version(),
        &runtime.list_images(),
        clock.now(),
    );
    let mut attempts = 0;
    let _created = loop {
        attempts += 1;
        let result = match api.create(&PostParams::default(), &desired).await {
            Ok(n) => Ok(n),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let mut patch = serde_json::json!({ "metadata": { "labels": node_status::node_labels(config) } });
                let existing = api.get(&config.name).await.map_err(AgentError::Register)?;
                if existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.pod_cidr.as_ref())
                    .is_none()
                    && let Some(cidr) = &config.pod_cidr
                {
                    patch["spec"] = serde_json::json!({ "podCIDR": cidr, "podCIDRs": [cidr] });
                }
                api.patch(&config.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(n) => break n,
            Err(e) if attempts >= 30 => return Err(AgentError::Register(e)),
            Err(e) => {
                tracing::warn!(node = %config.name, error = %e, "node registration failed; retrying");
                tokio::time::sleep(config.timing.retry_interval).await;
            }
        }
    };
    let status = serde_json::json!({ "status": desired.status });
    let node = api
        .patch_status(
            &config.name,
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .map_err(AgentError::Register)?;
    tracing::info!(node = %config.name, os = config.os.as_str(), runtime = %runtime.version(), "node registered");
    Ok(node)
}

/// Renews the node's Lease every `lease_renew_interval` (upstream `nodelease` controller). Like
/// upstream's `Controller.sync`, it updates the Lease it last wrote without reading it first, and
/// reads (or creates) it only when that fails: one write per renewal instead of a read and a
/// write.
async fn lease_loop(
    client: Client,
    config: Arc<NodeConfig>,
    clock: Clock,
    node_uid: Option<String>,
) {
    let api: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let mut tick = tokio::time::interval(config.timing.lease_renew_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut latest: Option<Lease> = None;
    loop {
        tick.tick().await;
        match renew_lease(&api, &config, clock, node_uid.as_deref(), latest.take()).await {
            Ok(lease) => latest = Some(lease),
            Err(e) => tracing::debug!(node = %config.name, error = %e, "lease renewal failed"),
        }
    }
}

/// `lease` with this node as holder and a renewTime of now.
fn renewed(mut lease: Lease, config: &NodeConfig, clock: Clock) -> Lease {
    let mut s = lease.spec.take().unwrap_or_default();
    s.holder_identity = Some(config.name.clone());
    s.lease_duration_seconds = Some(config.timing.lease_duration_seconds);
    s.renew_time = Some(clock::micro_time(clock.now()));
    lease.spec = Some(s);
    lease
}

async fn renew_lease(
    api: &Api<Lease>,
    config: &NodeConfig,
    clock: Clock,
    node_uid: Option<&str>,
    latest: Option<Lease>,
) -> Result<Lease, kube::Error> {
    if let Some(lease) = latest {
        match api
            .replace(
                &config.name,
                &PostParams::default(),
                &renewed(lease, config, clock),
            )
            .await
        {
            Ok(l) => return Ok(l),
            Err(e) => {
                tracing::debug!(node = %config.name, error = %e, "lease update failed; reading it")
            }
        }
    }
    match api.get_opt(&config.name).await? {
        Some(lease) => {
            api.replace(
                &config.name,
                &PostParams::default(),
                &renewed(lease, config, clock),
            )
            .await
        }
        None => {
            let mut lease = renewed(Lease::default(), config, clock);
            lease.metadata.name = Some(config.name.clone());
            lease.metadata.namespace = Some("kube-node-lease".into());
            if let Some(uid) = node_uid {
                lease.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: config.name.clone(),
                    uid: uid.to_string(),
                    ..OwnerReference::default()
                }]);
            }
            api.create(&PostParams::default(), &lease).await
        }
    }
}

fn without_heartbeats(conditions: &[NodeCondition]) -> Vec<(String, String)> {
    conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect()
}

/// Computes node status every `node_status_update_frequency` and posts it when it changed or
/// `node_status_report_frequency` has passed (upstream `syncNodeStatus`).
async fn status_loop(
    client: Client,
    config: Arc<NodeConfig>,
    runtime: Arc<dyn Runtime>,
    clock: Clock,
    node: Node,
) {
    let api: Api<Node> = Api::all(client);
    let mut previous = node.status.and_then(|s| s.conditions).unwrap_or_default();
    let mut last_images = runtime.list_images();
    let mut last_post = Instant::now();
    let mut tick = tokio::time::interval(config.timing.node_status_update_frequency);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let images = runtime.list_images();
        let status =
            node_status::status(&config, &runtime.version(), &images, clock.now(), &previous);
        let conditions = status.conditions.clone().unwrap_or_default();
        let changed = images != last_images
            || without_heartbeats(&conditions) != without_heartbeats(&previous);
        if !changed && last_post.elapsed() < config.timing.node_status_report_frequency {
            continue;
        }
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(&config.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                previous = conditions;
                last_images = images;
                last_post = Instant::now();
            }
            Err(e) => tracing::debug!(node = %config.name, error = %e, "node status update failed"),
        }
    }
}

/// Drops `metadata.managedFields` from the pods of a watch event: nothing in the agent reads them
/// and they are a large part of every pod kept by a worker (client-go's
/// `cache.TransformStripManagedFields`, which upstream components apply to their informers).
fn strip_managed_fields(mut ev: watcher::Event<Pod>) -> watcher::Event<Pod> {
    if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) =
        &mut ev
    {
        p.metadata.managed_fields = None;
    }
    ev
}

type PodEvents = futures::stream::BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>>;

/// One node's share of a [`SharedPodWatch`].
///
/// Events travel boxed: a channel allocates its slots in blocks of 32 values, and an unboxed
/// `Event<Pod>` is kilobytes wide, so 1,000 idle feeds held tens of megabytes of empty slots.
pub struct PodFeed(mpsc::UnboundedReceiver<Box<watcher::Event<Pod>>>);

impl PodFeed {
    fn into_stream(self) -> PodEvents {
        futures::stream::unfold(self.0, |mut rx| async move {
            rx.recv().await.map(|ev| (Ok(*ev), rx))
        })
        .boxed()
    }
}

/// One pod watch for every node agent this process runs, instead of one `spec.nodeName=<node>`
/// watch per agent (as kwok serves all its emulated nodes from one watch). With a thousand
/// emulated nodes this saves the API server from matching every pod event against a thousand
/// watchers, and the process from a thousand watch connections.
///
/// Each agent still sees what its own watch would show: `Init`, `InitApply` for its pods only,
/// `InitDone`, then `Apply`/`Delete` of its pods (a pod's `spec.nodeName` never changes once
/// set, so routing by it is stable). Register every node with [`subscribe`](Self::subscribe)
/// before [`start`](Self::start): a node added later would miss the initial list.
pub struct SharedPodWatch {
    client: Client,
    routes: HashMap<String, mpsc::UnboundedSender<Box<watcher::Event<Pod>>>>,
}

impl SharedPodWatch {
    pub fn new(client: Client) -> SharedPodWatch {
        SharedPodWatch {
            client,
            routes: HashMap::new(),
        }
    }

    /// The feed of node `node`, for [`run_shared`].
    pub fn subscribe(&mut self, node: &str) -> PodFeed {
        let (tx, rx) = mpsc::unbounded_channel();
        self.routes.insert(node.to_string(), tx);
        PodFeed(rx)
    }

    /// Starts watching every bound pod and routing events to the subscribed nodes. The task ends
    /// when every feed is gone.
    pub fn start(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let api: Api<Pod> = Api::all(self.client);
            let wc = watcher::Config::default().fields("spec.nodeName!=");
            let mut stream = watcher(api, wc).map_ok(strip_managed_fields).boxed();
            let mut routes = self.routes;
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::debug!(error = %e, "shared pod watch error; the watcher retries");
                        continue;
                    }
                };
                match &ev {
                    watcher::Event::Apply(p)
                    | watcher::Event::InitApply(p)
                    | watcher::Event::Delete(p) => {
                        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                        if let Some(node) = node
                            && routes
                                .get(&node)
                                .is_some_and(|tx| tx.send(Box::new(ev)).is_err())
                        {
                            routes.remove(&node);
                        }
                    }
                    // The list boundaries go to every node, each then sees its own list.
                    watcher::Event::Init | watcher::Event::InitDone => {
                        routes.retain(|_, tx| tx.send(Box::new(ev.clone())).is_ok());
                    }
                }
                if routes.is_empty() {
                    return;
                }
            }
        })
    }
}

struct Handle {
    tx: mpsc::Sender<PodUpdate>,
    requests: Resources,
    terminal: bool,
}

/// The pod manager: admission, workers, IPs.
struct Manager {
    ctx: Arc<WorkerContext>,
    config: Arc<NodeConfig>,
    workers: HashMap<String, Handle>,
    /// Pods rejected at admission or already terminal: nothing runs for them.
    inert: HashSet<String>,
    ipam: Option<PodCidr>,
    done_tx: mpsc::UnboundedSender<(String, Option<String>)>,
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Manager {
    fn used(&self) -> (Resources, i64) {
        let active = self.workers.values().filter(|h| !h.terminal);
        let mut used = Resources::default();
        let mut n = 0;
        for h in active {
            used = used.plus(h.requests);
            n += 1;
        }
        (used, n)
    }

    async fn reject(&mut self, pod: &Pod, r: Rejection) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.ctx
            .reporter
            .event(pod, None, EventType::Warning, &r.reason, &r.message)
            .await;
        let status = PodStatus {
            phase: Some("Failed".into()),
            reason: Some(r.reason.clone()),
            message: Some(r.status_message()),
            qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
            ..PodStatus::default()
        };
        if let Err(e) = self.ctx.reporter.status(pod, &status).await {
            tracing::debug!(error = %e, "rejected pod status not written");
        }
        self.inert.insert(uid);
    }

    async fn apply(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if let Some(h) = self.workers.get_mut(&uid) {
            h.terminal = is_terminal(&pod);
            let _ = h.tx.send(PodUpdate::Changed(Box::new(pod))).await;
            return;
        }
        if self.inert.contains(&uid) || is_terminal(&pod) {
            self.inert.insert(uid);
            if deleting {
                let _ = self.ctx.reporter.delete(&pod).await;
            }
            return;
        }
        let existing = self
            .ctx
            .runtime
            .list_sandboxes()
            .into_iter()
            .find(|s| s.pod_uid == uid);
        if let Some(sb) = existing {
            if let (Some(ipam), Some(ip)) = (self.ipam.as_mut(), sb.ip.as_deref()) {
                ipam.reserve(ip);
            }
            let ip = sb.ip.clone();
            let worker = PodWorker::adopt(self.ctx.clone(), pod.clone(), sb);
            self.spawn(uid, &pod, worker, ip);
            return;
        }
        if deleting {
            let _ = self.ctx.reporter.delete(&pod).await;
            return;
        }
        if let Err(r) = admission::check_os(&pod, self.config.os) {
            return self.reject(&pod, r).await;
        }
        let (used, n) = self.used();
        if let Err(r) = admission::check_fit(&pod, self.config.allocatable(), used, n) {
            return self.reject(&pod, r).await;
        }
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ip = if host_network {
            None
        } else {
            self.ipam.as_mut().and_then(PodCidr::allocate)
        };
        let worker = PodWorker::new(self.ctx.clone(), pod.clone(), ip.clone());
        self.spawn(uid, &pod, worker, ip);
    }

    fn spawn(&mut self, uid: String, pod: &Pod, worker: PodWorker, ip: Option<String>) {
        let (tx, rx) = mpsc::channel(32);
        let done = self.done_tx.clone();
        let id = uid.clone();
        // The task holds the (small) run future, not the worker by value beside it.
        let run = worker.run(rx);
        tokio::spawn(async move {
            run.await;
            let _ = done.send((id, ip));
        });
        self.workers.insert(
            uid,
            Handle {
                tx,
                requests: admission::pod_requests(pod),
                terminal: false,
            },
        );
    }

    async fn removed(&mut self, uid: &str) {
        self.inert.remove(uid);
        // Sandboxes a finished pod kept for its logs go with the pod.
        let runtime = self.ctx.runtime.clone();
        let stale: Vec<String> = runtime
            .list_sandboxes()
            .into_iter()
            .filter(|s| s.pod_uid == uid && !s.ready)
            .map(|s| s.id)
            .collect();
        if !stale.is_empty() {
            tokio::spawn(async move {
                for id in stale {
                    let _ = runtime.remove_sandbox(&id).await;
                }
            });
        }
        if let Some(h) = self.workers.get(uid) {
            let _ = h.tx.send(PodUpdate::Removed).await;
        }
    }
}

async fn pod_loop(
    client: Client,
    config: Arc<NodeConfig>,
    runtime: Arc<dyn Runtime>,
    clock: Clock,
    feed: Option<PodFeed>,
    stats: Arc<StatsSource>,
) -> Result<(), AgentError> {
    let reporter: Arc<dyn Reporter> =
        Arc::new(ApiReporter::new(client.clone(), &config.name, clock));
    let ctx = Arc::new(WorkerContext {
        node_name: config.name.clone(),
        node_os: config.os,
        host_ip: config.internal_ip.to_string(),
        runtime: runtime.clone(),
        reporter,
        secrets: Arc::new(crate::pull_secrets::ApiSecrets(client.clone())),
        clock,
    });
    let ipam = match &config.pod_cidr {
        Some(c) => Some(PodCidr::parse(c)?),
        None => {
            tracing::warn!(node = %config.name, "no pod CIDR configured or assigned: pods get no IP");
            None
        }
    };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel();
    let mut m = Manager {
        ctx,
        config: config.clone(),
        workers: HashMap::new(),
        inert: HashSet::new(),
        ipam,
        done_tx,
    };
    let mut stream = match feed {
        Some(feed) => feed.into_stream(),
        None => {
            let api: Api<Pod> = Api::all(client);
            let wc = watcher::Config::default().fields(&format!("spec.nodeName={}", config.name));
            watcher(api, wc).map_ok(strip_managed_fields).boxed()
        }
    };
    let mut listed: Option<HashSet<String>> = None;
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                None => return Err(AgentError::WatchEnded),
                Some(Err(e)) => {
                    tracing::debug!(node = %config.name, error = %e, "pod watch error; the watcher retries");
                    tokio::time::sleep(config.timing.retry_interval).await;
                }
                Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                Some(Ok(watcher::Event::InitApply(pod))) => {
                    if let (Some(l), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                        l.insert(uid);
                    }
                    stats.pod_applied(&pod);
                    m.apply(pod).await;
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    let present = listed.take().unwrap_or_default();
                    stats.pods_listed(&present);
                    let stale: Vec<String> = m.workers.keys().chain(m.inert.iter()).filter(|u| !present.contains(*u)).cloned().collect();
                    for uid in stale {
                        m.removed(&uid).await;
                    }
                    // Sandboxes whose pods no longer exist (deleted while the agent was down).
                    for sb in runtime.list_sandboxes() {
                        if !present.contains(&sb.pod_uid) && !m.workers.contains_key(&sb.pod_uid) {
                            let _ = runtime.remove_sandbox(&sb.id).await;
                        }
                    }
                }
                Some(Ok(watcher::Event::Apply(pod))) => {
                    stats.pod_applied(&pod);
                    m.apply(pod).await
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(uid) = pod.metadata.uid.as_deref() {
                        stats.pod_removed(uid);
                        m.removed(uid).await;
                    }
                }
            },
            Some((uid, ip)) = done_rx.recv() => {
                m.workers.remove(&uid);
                if let (Some(ipam), Some(ip)) = (m.ipam.as_mut(), ip) {
                    ipam.release(&ip);
                }
            }
        }
    }
}
