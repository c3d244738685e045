//! The scheduling loop, an API client like kube-scheduler: watch pods and nodes, queue pending
//! pods that are ours, schedule them one at a time against the in-memory [`Snapshot`] (which
//! assumes each placement at once, before the binding is confirmed — upstream's assume cache),
//! bind through `pods/binding` with a bounded number of bindings in flight, and explain failures
//! with a `PodScheduled=False` condition and a `FailedScheduling` event. A pod that fits nowhere
//! preempts pods of lower priority ([`crate::preemption`]): it is nominated to the chosen node
//! (`status.nominatedNodeName`), the victims get a `DisruptionTarget` condition, are deleted and
//! get a `Preempted` event, and later cycles keep the nominated room for it.
//!
//! Mirrors upstream `pkg/scheduler/schedule_one.go` (`ScheduleOne`, `assume`, `bind`,
//! `handleSchedulingFailure`), `pkg/scheduler/eventhandlers.go`, the nominator of
//! `pkg/scheduler/backend/queue` and the evaluator's `prepareCandidate` / `PreemptPod`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

use crate::framework::{FitError, Framework, FrameworkOptions, Placement, TieBreak};
use crate::metrics::AttemptResult;
use crate::plugins::volume_binding;
use crate::preemption::{self, Candidate, Nominator, NotPreempting, Pdb, Preemptor};
use crate::queue::SchedulingQueue;
use crate::snapshot::{NodeChange, PodInfo, PodKey, Snapshot, pod_key, pod_priority};

/// The scheduler name upstream's kube-scheduler answers to, and tandem's by default.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// How the scheduler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// Pods whose `spec.schedulerName` is this (or empty) are ours; others are left alone.
    pub scheduler_name: String,
    /// Turn off tandem's OS placement and Windows build compatibility, scheduling exactly as
    /// upstream does (`--upstream-os-placement`).
    pub upstream_os_placement: bool,
    /// Upstream `percentageOfNodesToScore`; `None` for upstream's adaptive default.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// How many bindings may be in flight at once while the snapshot assumes their result.
    pub max_in_flight_binds: usize,
    /// How many events may be being written at once. Upstream's legacy event broadcaster (which
    /// writes core/v1 events, as this scheduler does) writes one at a time.
    pub max_in_flight_events: usize,
    /// Events waiting to be written beyond which new ones are dropped, as upstream's broadcaster
    /// drops them (`maxQueuedEvents` = 1,000, `DropIfChannelFull`): events are best effort and
    /// never hold up scheduling.
    pub max_queued_events: usize,
    pub tie_break: TieBreak,
    /// Record `Scheduled` events for successful bindings (upstream always does; turning it off
    /// halves the writes per pod). `FailedScheduling` events are always recorded.
    pub record_scheduled_events: bool,
    /// Where attempts, pending pods and preemptions are reported (see `metrics`).
    pub metrics: crate::metrics::SchedulerMetrics,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            scheduler_name: DEFAULT_SCHEDULER_NAME.to_string(),
            upstream_os_placement: false,
            percentage_of_nodes_to_score: None,
            max_in_flight_binds: 256,
            max_in_flight_events: 1,
            max_queued_events: 1_000,
            tie_break: TieBreak::Random,
            record_scheduled_events: true,
            metrics: Default::default(),
        }
    }
}

impl SchedulerOptions {
    fn framework(&self) -> FrameworkOptions {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        FrameworkOptions {
            os_placement: !self.upstream_os_placement,
            percentage_of_nodes_to_score: self.percentage_of_nodes_to_score,
            tie_break: self.tie_break,
            seed,
        }
    }
}

enum Input {
    Pod(Box<watcher::Event<Pod>>),
    Node(Box<watcher::Event<Node>>),
    Pdb(Box<watcher::Event<PodDisruptionBudget>>),
    Storage(volume_binding::StorageEvent),
}

/// What a scheduling failure does to the pod's `status.nominatedNodeName` (upstream
/// `NominatingInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Nomination {
    /// Leave it as it is.
    Keep,
    /// Nominate the pod to this node.
    Set(String),
    /// Preemption found no node: clear any nomination.
    Clear,
}

struct BindOutcome {
    /// When the scheduling attempt began (the pod left the queue).
    started: Instant,
    key: PodKey,
    pod: Arc<Pod>,
    node: String,
    result: Result<(), kube::Error>,
}

/// An event to write (core/v1, as upstream's scheduler records them through the legacy
/// recorder's `events` API).
struct EventRequest {
    pod: Arc<Pod>,
    type_: &'static str,
    reason: &'static str,
    action: &'static str,
    message: String,
}

/// Runs the scheduler on `client` until the runtime stops (or the watches end). This is what
/// `tandem up`/`tandem server` call; [`start`] gives a handle instead.
pub async fn run(client: kube::Client, options: SchedulerOptions) {
    run_inner(client, options, None, Arc::default()).await;
}

/// A running scheduler.
#[derive(Debug)]
pub struct SchedulerHandle {
    ready: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<Stats>,
}

/// Counters of a running scheduler.
#[derive(Debug, Default)]
pub struct Stats {
    /// Events written through the API.
    pub events_recorded: AtomicU64,
    /// Events dropped because the queue was full (or whose write failed).
    pub events_dropped: AtomicU64,
}

impl SchedulerHandle {
    /// Waits until the scheduler has listed every node and pod and starts scheduling.
    pub async fn ready(&mut self) {
        let _ = self.ready.wait_for(|r| *r).await;
    }

    /// The scheduler's counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Stops the scheduler and its watches.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the scheduler as a task; it stops when the handle is dropped.
pub fn start(client: kube::Client, options: SchedulerOptions) -> SchedulerHandle {
    let (tx, rx) = watch::channel(false);
    let stats = Arc::new(Stats::default());
    let task = tokio::spawn(run_inner(client, options, Some(tx), stats.clone()));
    SchedulerHandle {
        ready: rx,
        task,
        stats,
    }
}

/// Aborts the tasks it holds when dropped, so stopping the loop stops its helpers.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

async fn run_inner(
    client: kube::Client,
    options: SchedulerOptions,
    ready: Option<watch::Sender<bool>>,
    stats: Arc<Stats>,
) {
    let (input_tx, input_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::channel(options.max_queued_events.max(1));
    // Claims, volumes and storage classes, for VolumeBinding.
    let _storage = AbortOnDrop(volume_binding::watch(
        client.clone(),
        input_tx.clone(),
        Input::Storage,
    ));
    let _helpers = AbortOnDrop(vec![
        tokio::spawn(forward(
            Api::<Pod>::all(client.clone()),
            input_tx.clone(),
            |e| Input::Pod(Box::new(e)),
        )),
        tokio::spawn(forward(
            Api::<Node>::all(client.clone()),
            input_tx.clone(),
            |e| Input::Node(Box::new(e)),
        )),
        // Budgets only steer the choice of preemption victims: until they are listed (or when
        // the API does not serve them) preemption goes ahead without them.
        tokio::spawn(forward(
            Api::<PodDisruptionBudget>::all(client.clone()),
            input_tx,
            |e| Input::Pdb(Box::new(e)),
        )),
        tokio::spawn(write_events(
            client.clone(),
            Arc::from(options.scheduler_name.as_str()),
            event_rx,
            options.max_in_flight_events.max(1),
            stats.clone(),
        )),
    ]);
    let mut state = Loop::new(client, options, event_tx, stats);
    state.ready = ready;
    state.run(input_rx).await;
}

async fn forward<K, F>(api: Api<K>, tx: mpsc::UnboundedSender<Input>, wrap: F)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(watcher::Event<K>) -> Input,
{
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                // managedFields is most of a fresh pod's size once decoded (a tree of every
                // field set), and nothing here reads it; pods waiting in the input queue and the
                // pending map were most of the scheduler's memory without this.
                let ev = ev.modify(|o| o.meta_mut().managed_fields = None);
                if tx.send(wrap(ev)).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "scheduler watch error; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

struct Loop {
    client: kube::Client,
    options: SchedulerOptions,
    framework: Framework,
    snapshot: Snapshot,
    queue: SchedulingQueue,
    /// Our pending pods.
    pending: HashMap<PodKey, Arc<Pod>>,
    /// Pods placed by us whose binding is in flight or not yet observed: node and pod.
    assumed: HashMap<PodKey, (String, Arc<Pod>)>,
    in_flight: usize,
    pods_synced: bool,
    nodes_synced: bool,
    pod_relist: Option<HashSet<PodKey>>,
    node_relist: Option<HashSet<String>>,
    bind_tx: mpsc::UnboundedSender<BindOutcome>,
    bind_rx: mpsc::UnboundedReceiver<BindOutcome>,
    event_tx: mpsc::Sender<EventRequest>,
    failure_slots: Arc<Semaphore>,
    ready: Option<watch::Sender<bool>>,
    stats: Arc<Stats>,
    /// Pending pods nominated to nodes by preemption.
    nominator: Nominator,
    /// PodDisruptionBudgets by `namespace/name`.
    pdbs: HashMap<String, Pdb>,
    pdb_relist: Option<HashMap<String, Pdb>>,
    /// Rotates where preemption starts looking.
    preempt_offset: usize,
}

impl Loop {
    fn new(
        client: kube::Client,
        options: SchedulerOptions,
        event_tx: mpsc::Sender<EventRequest>,
        stats: Arc<Stats>,
    ) -> Loop {
        let (bind_tx, bind_rx) = mpsc::unbounded_channel();
        Loop {
            client,
            framework: Framework::new(options.framework()),
            options,
            snapshot: Snapshot::new(),
            queue: SchedulingQueue::new(),
            pending: HashMap::new(),
            assumed: HashMap::new(),
            in_flight: 0,
            pods_synced: false,
            nodes_synced: false,
            pod_relist: None,
            node_relist: None,
            bind_tx,
            bind_rx,
            event_tx,
            failure_slots: Arc::new(Semaphore::new(16)),
            ready: None,
            stats,
            nominator: Nominator::default(),
            pdbs: HashMap::new(),
            pdb_relist: None,
            preempt_offset: 0,
        }
    }

    async fn run(&mut self, mut inputs: mpsc::UnboundedReceiver<Input>) {
        let mut since_yield = 0u32;
        loop {
            let now = Instant::now();
            let (active, backoff, unschedulable) = self.queue.pending_counts();
            self.options.metrics.pending(active, backoff, unschedulable);
            while let Ok(input) = inputs.try_recv() {
                self.on_input(input, now);
            }
            while let Ok(outcome) = self.bind_rx.try_recv() {
                self.on_bound(outcome, now);
            }
            let ready = self.pods_synced && self.nodes_synced;
            if ready
                && self.in_flight < self.options.max_in_flight_binds
                && self.queue.has_ready(now)
            {
                if let Some(key) = self.queue.pop(now) {
                    self.schedule_one(key, now);
                }
                since_yield += 1;
                if since_yield >= 32 {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
                continue;
            }
            if ready && let Some(tx) = self.ready.take() {
                let _ = tx.send(true);
            }
            let wake = if ready {
                self.queue.next_wakeup()
            } else {
                None
            };
            enum Woken {
                Input(Option<Input>),
                Bound(BindOutcome),
                Timer,
            }
            let woken = tokio::select! {
                input = inputs.recv() => Woken::Input(input),
                Some(outcome) = self.bind_rx.recv() => Woken::Bound(outcome),
                _ = sleep_until(wake) => Woken::Timer,
            };
            match woken {
                Woken::Input(Some(input)) => self.on_input(input, Instant::now()),
                Woken::Input(None) => return,
                Woken::Bound(outcome) => self.on_bound(outcome, Instant::now()),
                Woken::Timer => {}
            }
        }
    }

    fn responsible(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .filter(|n| !n.is_empty());
        name.unwrap_or(DEFAULT_SCHEDULER_NAME) == self.options.scheduler_name
    }

    fn on_input(&mut self, input: Input, now: Instant) {
        match input {
            Input::Pod(e) => self.on_pod_event(*e, now),
            Input::Node(e) => self.on_node_event(*e, now),
            Input::Pdb(e) => self.on_pdb_event(*e),
            Input::Storage(e) => {
                if self.snapshot.volumes_mut().apply(e) {
                    self.queue.cluster_changed(now);
                }
            }
        }
    }

    fn on_pdb_event(&mut self, event: watcher::Event<PodDisruptionBudget>) {
        let key = |p: &PodDisruptionBudget| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            )
        };
        match event {
            watcher::Event::Apply(p) => {
                self.pdbs.insert(key(&p), Pdb::new(&p));
            }
            watcher::Event::Delete(p) => {
                self.pdbs.remove(&key(&p));
            }
            watcher::Event::Init => self.pdb_relist = Some(HashMap::new()),
            watcher::Event::InitApply(p) => {
                if let Some(list) = self.pdb_relist.as_mut() {
                    list.insert(key(&p), Pdb::new(&p));
                }
            }
            watcher::Event::InitDone => {
                if let Some(list) = self.pdb_relist.take() {
                    self.pdbs = list;
                }
            }
        }
    }

    fn on_pod_event(&mut self, event: watcher::Event<Pod>, now: Instant) {
        match event {
            watcher::Event::Apply(pod) => self.on_pod(pod, now),
            watcher::Event::Delete(pod) => self.on_pod_deleted(&pod_key(&pod), now),
            watcher::Event::Init => self.pod_relist = Some(HashSet::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(seen) = self.pod_relist.as_mut() {
                    seen.insert(pod_key(&pod));
                }
                self.on_pod(pod, now);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    let gone: Vec<PodKey> = self
                        .pending
                        .keys()
                        .cloned()
                        .chain(self.snapshot.pods().map(|(_, p)| p.key.clone()))
                        .filter(|k| !seen.contains(k) && !self.assumed.contains_key(k))
                        .collect();
                    for k in gone {
                        self.on_pod_deleted(&k, now);
                    }
                }
                self.pods_synced = true;
            }
        }
    }

    fn on_node_event(&mut self, event: watcher::Event<Node>, now: Instant) {
        match event {
            watcher::Event::Apply(node) => self.on_node(&node, now),
            watcher::Event::Delete(node) => {
                if let Some(name) = node.metadata.name.as_deref() {
                    self.snapshot.remove_node(name);
                }
            }
            watcher::Event::Init => self.node_relist = Some(HashSet::new()),
            watcher::Event::InitApply(node) => {
                if let (Some(seen), Some(name)) =
                    (self.node_relist.as_mut(), node.metadata.name.as_deref())
                {
                    seen.insert(name.to_string());
                }
                self.on_node(&node, now);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.node_relist.take() {
                    let gone: Vec<String> = self
                        .snapshot
                        .nodes()
                        .iter()
                        .map(|n| n.name.clone())
                        .filter(|n| !seen.contains(n))
                        .collect();
                    for n in gone {
                        self.snapshot.remove_node(&n);
                    }
                }
                self.nodes_synced = true;
            }
        }
    }

    fn on_node(&mut self, node: &Node, now: Instant) {
        match self.snapshot.upsert_node(node) {
            NodeChange::Added | NodeChange::Relevant => self.queue.cluster_changed(now),
            NodeChange::Irrelevant => {}
        }
    }

    fn on_pod(&mut self, pod: Pod, now: Instant) {
        let key = pod_key(&pod);
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded" | "Failed"));
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        if let Some(node) = node {
            // Assigned (by us or anyone): account it; this also confirms an assumed pod.
            self.pending.remove(&key);
            self.queue.remove(&key);
            self.assumed.remove(&key);
            self.nominator.remove(&key);
            if terminal {
                if self.snapshot.remove_pod(&key).is_some() {
                    self.queue.cluster_changed(now);
                }
            } else {
                self.snapshot.add_pod(Arc::new(PodInfo::new(&pod, node)));
            }
            return;
        }
        if self.assumed.contains_key(&key) {
            // Our binding is in flight or not yet visible; this is an older view of the pod.
            return;
        }
        if pod.metadata.deletion_timestamp.is_some() || terminal || !self.responsible(&pod) {
            self.pending.remove(&key);
            self.queue.remove(&key);
            self.nominator.remove(&key);
            return;
        }
        let priority = pod_priority(&pod);
        // A nomination seen on the pod (set by this scheduler, perhaps before a restart). An
        // absent one does not clear ours: the watch may still be behind our own status patch.
        if let Some(node) = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
        {
            self.nominator.nominate(&pod, node);
        }
        let pod = Arc::new(pod);
        match self.pending.insert(key.clone(), pod.clone()) {
            None => self.queue.add(key, priority),
            Some(old) => {
                if old.spec != pod.spec || old.metadata.labels != pod.metadata.labels {
                    self.queue.update(&key, now);
                }
            }
        }
    }

    fn on_pod_deleted(&mut self, key: &str, now: Instant) {
        self.pending.remove(key);
        self.queue.remove(key);
        self.assumed.remove(key);
        self.nominator.remove(key);
        if self.snapshot.remove_pod(key).is_some() {
            self.queue.cluster_changed(now);
        }
    }

    fn schedule_one(&mut self, key: PodKey, now: Instant) {
        let started = Instant::now();
        let Some(pod) = self.pending.get(&key).cloned() else {
            self.queue.remove(&key);
            return;
        };
        let priority = pod_priority(&pod);
        // Pods nominated elsewhere by preemption hold their room against pods of their priority
        // or lower: count them as placed for this attempt.
        let held = self.nominator.hold(&mut self.snapshot, &key, priority);
        let nominated = self.nominator.node_of(&key).map(str::to_string);
        let result = match nominated
            .as_deref()
            .filter(|n| self.framework.fits_node(&self.snapshot, &pod, n))
        {
            Some(node) => Ok(Placement {
                node: node.to_string(),
                evaluated_nodes: 1,
                feasible_nodes: 1,
            }),
            None => self.framework.schedule(&self.snapshot, &pod),
        };
        let result = result.map_err(|mut fit| {
            let outcome = self.preempt(&pod, nominated.as_deref(), &mut fit);
            (fit, outcome)
        });
        Nominator::release(&mut self.snapshot, &held);
        match result {
            Ok(placement) => {
                self.nominator.remove(&key);
                self.snapshot
                    .add_pod(Arc::new(PodInfo::new(&pod, &placement.node)));
                self.pending.remove(&key);
                self.assumed
                    .insert(key.clone(), (placement.node.clone(), pod.clone()));
                self.in_flight += 1;
                tokio::spawn(bind(
                    started,
                    self.client.clone(),
                    volume_binding::claims_to_bind(self.snapshot.volumes(), &pod),
                    pod,
                    key,
                    placement.node,
                    self.bind_tx.clone(),
                ));
            }
            Err((fit, outcome)) => {
                tracing::debug!(pod = %key, reason = %fit, "pod is unschedulable");
                let nomination = match outcome {
                    Some(Ok(candidate)) => {
                        let node = candidate.node.clone();
                        self.nominate(&key, &pod, candidate, now);
                        Nomination::Set(node)
                    }
                    Some(Err(NotPreempting::NoCandidates(_))) => {
                        self.nominator.remove(&key);
                        Nomination::Clear
                    }
                    Some(Err(NotPreempting::NotEligible(_))) | None => Nomination::Keep,
                };
                self.queue.unschedulable(key, now);
                self.options.metrics.attempt(
                    &self.options.scheduler_name,
                    AttemptResult::Unschedulable,
                    started.elapsed().as_secs_f64(),
                );
                self.report_unschedulable(pod, &fit, nomination);
            }
        }
    }

    /// Runs preemption for a pod that fits nowhere (upstream's PostFilter) and records its
    /// outcome in `fit`'s message. `None` when there are no nodes (upstream does not run
    /// PostFilter plugins then).
    fn preempt(
        &mut self,
        pod: &Pod,
        nominated: Option<&str>,
        fit: &mut FitError,
    ) -> Option<Result<Candidate, NotPreempting>> {
        if fit.num_all_nodes == 0 {
            return None;
        }
        self.options.metrics.preemption_attempt();
        let pdbs: Vec<Pdb> = self.pdbs.values().cloned().collect();
        self.preempt_offset = self.preempt_offset.wrapping_add(1);
        let preemptor = Preemptor {
            pod,
            nominated,
            fit,
        };
        let outcome = preemption::preempt(
            &self.snapshot,
            preemptor,
            &pdbs,
            self.framework.profile(),
            self.preempt_offset,
        );
        fit.post_filter = Some(match &outcome {
            Ok(c) => c.message(),
            Err(e) => e.message().to_string(),
        });
        Some(outcome)
    }

    /// Nominates `pod` to the candidate's node and preempts its victims (upstream
    /// `prepareCandidate`): lower-priority pods nominated to that node lose their nomination,
    /// and each victim not already terminating gets the `DisruptionTarget` condition, is
    /// deleted and gets a `Preempted` event.
    fn nominate(&mut self, key: &PodKey, pod: &Arc<Pod>, candidate: Candidate, now: Instant) {
        let priority = pod_priority(pod);
        for k in self.nominator.displace(key, &candidate.node, priority) {
            self.queue.update(&k, now);
            if let Some(p) = self.pending.get(&k).cloned() {
                let (client, slots) = (self.client.clone(), self.failure_slots.clone());
                tokio::spawn(async move {
                    let Ok(_permit) = slots.acquire_owned().await else {
                        return;
                    };
                    let patch = json!({"status": {"nominatedNodeName": null}});
                    if let Err(e) = patch_pod_status(client, &p, &Patch::Merge(&patch)).await {
                        tracing::debug!(error = %e, "could not clear a nominatedNodeName");
                    }
                });
            }
        }
        self.nominator.nominate(pod, &candidate.node);
        let scheduler = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| self.options.scheduler_name.clone());
        let preemptor_uid = pod.metadata.uid.clone().unwrap_or_default();
        let victims: Vec<Arc<PodInfo>> = candidate
            .victims
            .into_iter()
            .filter(|v| !v.terminating)
            .collect();
        let (client, events, stats) = (
            self.client.clone(),
            self.event_tx.clone(),
            self.stats.clone(),
        );
        let node = candidate.node;
        tokio::spawn(async move {
            for victim in victims {
                let deleted = preempt_victim(client.clone(), &victim, &scheduler).await;
                if !deleted {
                    continue;
                }
                let req = EventRequest {
                    pod: Arc::new(victim_ref(&victim)),
                    type_: "Normal",
                    reason: "Preempted",
                    action: "Preempting",
                    message: format!("Preempted by pod {preemptor_uid} on node {node}"),
                };
                if events.try_send(req).is_err() {
                    stats.events_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }

    fn on_bound(&mut self, outcome: BindOutcome, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let BindOutcome {
            started,
            key,
            pod: bound_pod,
            node,
            result,
        } = outcome;
        let attempt = if result.is_ok() {
            AttemptResult::Scheduled
        } else {
            AttemptResult::Error
        };
        self.options.metrics.attempt(
            &self.options.scheduler_name,
            attempt,
            started.elapsed().as_secs_f64(),
        );
        match result {
            Ok(()) => {
                self.queue.remove(&key);
                if self.options.record_scheduled_events {
                    let message = format!("Successfully assigned {key} to {node}");
                    self.emit(bound_pod, "Normal", "Scheduled", "Binding", message);
                }
            }
            Err(e) => {
                let Some((assumed_node, pod)) = self.assumed.remove(&key) else {
                    return;
                };
                if self.snapshot.pod_node(&key) == Some(assumed_node.as_str()) {
                    self.snapshot.remove_pod(&key);
                }
                let gone_or_taken =
                    matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
                if gone_or_taken {
                    // Deleted, or bound by someone else: the watch will say which.
                    self.queue.remove(&key);
                    return;
                }
                tracing::debug!(pod = %key, node = %node, error = %e, "binding failed; will retry");
                self.emit(
                    pod.clone(),
                    "Warning",
                    "FailedScheduling",
                    "Scheduling",
                    format!("Binding rejected: {e}"),
                );
                self.pending.insert(key.clone(), pod);
                self.queue.error(key, now);
            }
        }
    }

    fn emit(
        &self,
        pod: Arc<Pod>,
        type_: &'static str,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) {
        let req = EventRequest {
            pod,
            type_,
            reason,
            action,
            message,
        };
        if self.event_tx.try_send(req).is_err() {
            self.stats.events_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("event queue full; dropping an event");
        }
    }

    /// Sets `PodScheduled=False` (reason `Unschedulable`) and the nomination when they changed,
    /// and records a `FailedScheduling` event (upstream `handleSchedulingFailure` and
    /// `updatePod`).
    fn report_unschedulable(&self, pod: Arc<Pod>, fit: &FitError, nomination: Nomination) {
        let message = fit.to_string();
        self.emit(
            pod.clone(),
            "Warning",
            "FailedScheduling",
            "Scheduling",
            message.clone(),
        );
        let conditions = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let current = conditions.iter().find(|c| c.type_ == "PodScheduled");
        let condition_unchanged = current.is_some_and(|c| {
            c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(&message)
        });
        let nominated_now = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty());
        let nominated_node = match &nomination {
            Nomination::Set(n) if nominated_now != Some(n.as_str()) => Some(json!(n)),
            Nomination::Clear if nominated_now.is_some() => Some(serde_json::Value::Null),
            _ => None,
        };
        if condition_unchanged && nominated_node.is_none() {
            return;
        }
        let mut list: Vec<serde_json::Value> = conditions
            .iter()
            .filter(|c| c.type_ != "PodScheduled")
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        list.push(json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": tandem_core::time::now_rfc3339(),
        }));
        let mut patch = json!({"status": {"conditions": list}});
        if let Some(n) = nominated_node {
            patch["status"]["nominatedNodeName"] = n;
        }
        let (client, slots) = (self.client.clone(), self.failure_slots.clone());
        tokio::spawn(async move {
            let Ok(_permit) = slots.acquire_owned().await else {
                return;
            };
            if let Err(e) = patch_pod_status(client, &pod, &Patch::Merge(&patch)).await {
                tracing::debug!(error = %e, "could not set the PodScheduled condition");
            }
        });
    }
}

/// `PATCH pods/<name>/status`.
async fn patch_pod_status(
    client: kube::Client,
    pod: &Pod,
    patch: &Patch<&serde_json::Value>,
) -> Result<(), kube::Error> {
    let (Some(ns), Some(name)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
    ) else {
        return Ok(());
    };
    let api: Api<Pod> = Api::namespaced(client, ns);
    api.patch_status(name, &PatchParams::default(), patch)
        .await
        .map(|_| ())
}

/// A pod object carrying only what an event about a victim refers to.
fn victim_ref(victim: &PodInfo) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(victim.namespace.clone());
    pod.metadata.name = Some(victim.name().to_string());
    pod.metadata.uid = Some(victim.uid.clone()).filter(|u| !u.is_empty());
    pod
}

/// Preempts one victim as upstream's `PreemptPod` does: a `DisruptionTarget` condition (reason
/// `PreemptionByScheduler`) first, then the deletion (the pod's own grace period). Returns
/// whether the victim was deleted by this call (false when it was already gone or a call
/// failed).
async fn preempt_victim(client: kube::Client, victim: &PodInfo, scheduler: &str) -> bool {
    let pod = victim_ref(victim);
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
        "lastProbeTime": null,
        "lastTransitionTime": tandem_core::time::now_rfc3339(),
    }]}});
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    if let Err(e) = patch_pod_status(client.clone(), &pod, &Patch::Strategic(&condition)).await {
        if !gone(&e) {
            tracing::debug!(pod = %victim.key, error = %e, "could not add the DisruptionTarget condition");
        }
        return false;
    }
    let api: Api<Pod> = Api::namespaced(client, &victim.namespace);
    match api.delete(victim.name(), &DeleteParams::default()).await {
        Ok(_) => true,
        Err(e) => {
            if !gone(&e) {
                tracing::debug!(pod = %victim.key, error = %e, "could not delete a preemption victim");
            }
            false
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// VolumeBinding's PreBind for the pod's delayed `claims`, then `POST pods/<name>/binding`
/// (upstream `DefaultBinder.Bind`).
async fn bind(
    started: Instant,
    client: kube::Client,
    claims: Vec<volume_binding::DelayedClaim>,
    pod: Arc<Pod>,
    key: PodKey,
    node: String,
    tx: mpsc::UnboundedSender<BindOutcome>,
) {
    let result = async {
        volume_binding::pre_bind(&client, &claims, &node).await?;
        let pod = &pod;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut metadata = json!({"name": name, "namespace": ns});
        if let Some(uid) = pod.metadata.uid.as_deref() {
            metadata["uid"] = json!(uid);
        }
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let api: Api<Pod> = Api::namespaced(client, ns);
        api.create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .map(|_| ())
    }
    .await;
    let _ = tx.send(BindOutcome {
        started,
        key,
        pod,
        node,
        result,
    });
}

/// Writes queued events, `concurrency` at a time (upstream's broadcaster writes one at a time).
/// Writes queued events, reported as from `component` (the scheduler's name, as each upstream
/// profile's event recorder reports its own).
async fn write_events(
    client: kube::Client,
    component: Arc<str>,
    mut rx: mpsc::Receiver<EventRequest>,
    concurrency: usize,
    stats: Arc<Stats>,
) {
    let slots = Arc::new(Semaphore::new(concurrency));
    while let Some(req) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (client, stats, component) = (client.clone(), stats.clone(), component.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match write_event(client, &component, req).await {
                Ok(()) => stats.events_recorded.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::debug!(error = %e, "could not record a scheduler event");
                    stats.events_dropped.fetch_add(1, Ordering::Relaxed)
                }
            };
        });
    }
}

async fn write_event(
    client: kube::Client,
    component: &str,
    req: EventRequest,
) -> Result<(), kube::Error> {
    let pod = &req.pod;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let event = tandem_core::events::event(tandem_core::events::EventSpec {
        involved: k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(ns.to_string()),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            field_path: None,
        },
        type_: if req.type_ == "Warning" {
            tandem_core::events::EventType::Warning
        } else {
            tandem_core::events::EventType::Normal
        },
        reason: req.reason,
        message: &req.message,
        component,
        host: None,
        action: Some(req.action),
        at: std::time::SystemTime::now(),
    });
    Api::<Event>::namespaced(client, ns)
        .create(&PostParams::default(), &event)
        .await
        .map(|_| ())
}
