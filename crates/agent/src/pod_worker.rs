//! One pod worker per admitted pod: a typed state machine that drives the pod through
//! sandbox → volumes → images → init containers (in order) → containers → probes → restarts,
//! and graceful termination, publishing the pod status kubectl shows and the kubelet's events.
//!
//! Pod stages ([`Stage`]): `Sandbox` (mount volumes, create the sandbox; retried with back-off)
//! → `Init(i)` (init container `i` must exit 0; restartable sidecars only need to be started)
//! → `Main` (containers run, probes, restarts) → `Finished` (a terminal phase, nothing more
//! runs). Deletion from any stage goes through termination: preStop hooks, stop with the
//! remaining grace period, final status, then delete with `gracePeriodSeconds=0` and a uid
//! precondition (upstream `status_manager` `syncPod` → `canBeDeleted`).
//!
//! Container states ([`CState`]): `Waiting` (with the kubelet's reason: `ContainerCreating`,
//! `PodInitializing`, `ErrImageNeverPull`, `ImagePullBackOff`, `CreateContainerError`,
//! `CrashLoopBackOff`) → `Running` → `Terminated`, with restarts after exponential back-off
//! (upstream `kuberuntime` `doBackOff`: the first restart is immediate, then 10 s doubling to
//! 5 min).
//!
//! Time comes from tokio, so tests run the machine with `tokio::time::pause()`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Container, ContainerState as KState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus, Probe,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::{self, Clock};
use crate::config::NodeOs;
use crate::runtime::{
    ContainerInfo, ContainerState, HookKind, ProbeKind, ProbeResult, Runtime, RuntimeError,
    SandboxConfig,
};

/// Upstream's initial container restart back-off.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// Upstream's maximum container restart back-off.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// `Normal` or `Warning`: the event types (one definition, in core).
pub use tandem_core::events::EventType;

/// A failure to talk to the API about a pod.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The pod no longer exists (or was replaced by another with the same name).
    #[error("pod no longer exists")]
    Gone,
    #[error("api request failed")]
    Api(#[source] kube::Error),
}

/// Where a worker sends what it observes: the status manager and the event recorder.
#[async_trait]
pub trait Reporter: Send + Sync {
    /// Writes the pod's status (only called when it changed).
    async fn status(&self, pod: &Pod, status: &PodStatus) -> Result<(), ReportError>;
    /// Records an event about the pod; `field_path` names a container (`spec.containers{app}`).
    async fn event(
        &self,
        pod: &Pod,
        field_path: Option<&str>,
        type_: EventType,
        reason: &str,
        message: &str,
    );
    /// Deletes the pod once it has terminated (grace 0, uid precondition).
    async fn delete(&self, pod: &Pod) -> Result<(), ReportError>;
}

/// What the agent tells a worker.
#[derive(Clone, Debug)]
pub enum PodUpdate {
    /// A newer version of the pod (a deletionTimestamp starts termination).
    Changed(Box<Pod>),
    /// The pod is gone from the API (force-deleted): stop everything now, report nothing.
    Removed,
}

/// Everything a worker shares with the rest of the agent.
pub struct WorkerContext {
    pub node_name: String,
    pub node_os: NodeOs,
    pub host_ip: String,
    pub runtime: Arc<dyn Runtime>,
    pub reporter: Arc<dyn Reporter>,
    pub clock: Clock,
}

/// How a worker ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerOutcome {
    /// Terminated and deleted from the API (or found gone).
    Deleted,
    /// Stopped because the pod was removed from the API.
    Removed,
    /// The agent went away (its update channel closed): the worker stops without touching the
    /// runtime, so the containers keep running for the next agent to re-adopt.
    Abandoned,
}

/// The pod's stage.
#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    /// Volumes and sandbox; `retry_at` after a failure.
    Sandbox {
        retry_at: Option<Instant>,
        backoff: Duration,
    },
    /// Running init container `i`.
    Init(usize),
    /// Containers run.
    Main,
    /// A terminal phase was reached; nothing is restarted.
    Finished,
}

/// How a container ended (`state.terminated` / `lastState.terminated`).
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    pub exit_code: i32,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<SystemTime>,
    pub finished_at: SystemTime,
    pub container_id: Option<String>,
}

/// A container's state in the worker.
#[derive(Clone, Debug, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
        retry_at: Option<Instant>,
    },
    Running {
        id: String,
        started_at: SystemTime,
    },
    Terminated(Term),
}

#[derive(Clone, Debug)]
struct ProbeTrack {
    kind: ProbeKind,
    period: Duration,
    success_threshold: i32,
    failure_threshold: i32,
    next_at: Instant,
    successes: i32,
    failures: i32,
}

impl ProbeTrack {
    fn from_spec(kind: ProbeKind, p: &Probe, started: Instant) -> ProbeTrack {
        let secs = |v: Option<i32>, d: i32| {
            Duration::from_secs(u64::try_from(v.unwrap_or(d).max(0)).unwrap_or(0))
        };
        let initial_delay = secs(p.initial_delay_seconds, 0);
        ProbeTrack {
            kind,
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1),
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1),
            next_at: started + initial_delay,
            successes: 0,
            failures: 0,
        }
    }

    fn implicit(kind: ProbeKind, started: Instant) -> ProbeTrack {
        ProbeTrack {
            kind,
            period: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold: 1,
            next_at: started,
            successes: 0,
            failures: 0,
        }
    }
}

#[derive(Clone, Debug)]
struct Track {
    /// The container's name; its spec is read from the worker's pod when needed
    /// ([`spec_container`]) rather than copied here: a parsed `Container` is over 2 KB, and a
    /// node bench keeps tens of thousands of workers.
    name: String,
    /// The image the container runs, as the spec named it when the worker started.
    image: String,
    is_init: bool,
    /// An ephemeral container's spec (as a `Container`; `kubectl debug` adds them to a running
    /// pod). Kept here because an ephemeral container is not in the pod's `containers`; it is
    /// started once in the pod's sandbox and never restarted.
    ephemeral: Option<Box<Container>>,
    /// A restartable init container (`restartPolicy: Always`): a sidecar.
    sidecar: bool,
    state: CState,
    restart_count: i32,
    last: Option<Term>,
    backoff: Option<Duration>,
    image_id: String,
    container_id: Option<String>,
    ready: bool,
    started: bool,
    probes: Vec<ProbeTrack>,
    ever_ran: bool,
}

impl Track {
    fn new(container: &Container, is_init: bool, waiting_reason: &str) -> Track {
        let sidecar = is_init && container.restart_policy.as_deref() == Some("Always");
        Track {
            name: container.name.clone(),
            image: container.image.clone().unwrap_or_default(),
            is_init,
            ephemeral: None,
            sidecar,
            state: CState::Waiting {
                reason: waiting_reason.to_string(),
                message: None,
                retry_at: None,
            },
            restart_count: 0,
            last: None,
            backoff: None,
            image_id: String::new(),
            container_id: None,
            ready: false,
            started: false,
            probes: Vec::new(),
            ever_ran: false,
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn is_ephemeral(&self) -> bool {
        self.ephemeral.is_some()
    }

    /// A regular container (neither init nor ephemeral): what the pod phase and readiness count.
    fn is_regular(&self) -> bool {
        !self.is_init && !self.is_ephemeral()
    }

    fn field_path(&self) -> String {
        if self.is_ephemeral() {
            format!("spec.ephemeralContainers{{{}}}", self.name)
        } else if self.is_init {
            format!("spec.initContainers{{{}}}", self.name)
        } else {
            format!("spec.containers{{{}}}", self.name)
        }
    }

    fn image(&self) -> String {
        self.image.clone()
    }
}

/// The spec of a worker's container: the init container or container named `name` in `pod`,
/// or an empty spec if the pod no longer has it (a pod's containers cannot change, so only a
/// malformed update gets there).
fn spec_container<'a>(pod: &'a Pod, is_init: bool, name: &str) -> &'a Container {
    static NONE: std::sync::LazyLock<Container> = std::sync::LazyLock::new(Container::default);
    let spec = pod.spec.as_ref();
    let list = if is_init {
        spec.and_then(|s| s.init_containers.as_deref())
    } else {
        spec.map(|s| s.containers.as_slice())
    };
    list.into_iter()
        .flatten()
        .find(|c| c.name == name)
        .unwrap_or(&NONE)
}

/// A track's container spec: its ephemeral container's, or the pod's container of that name.
fn track_spec<'a>(pod: &'a Pod, t: &'a Track) -> &'a Container {
    match &t.ephemeral {
        Some(c) => c,
        None => spec_container(pod, t.is_init, &t.name),
    }
}

/// An `EphemeralContainer` as the `Container` the runtime creates (the same fields, less
/// `targetContainerName`, which the runtime reads from the pod).
fn ephemeral_as_container(ec: &k8s_openapi::api::core::v1::EphemeralContainer) -> Container {
    let mut v = serde_json::to_value(ec).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("targetContainerName");
    }
    serde_json::from_value(v).unwrap_or_else(|_| Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        ..Container::default()
    })
}

/// Tracks for the pod's ephemeral containers that `tracks` does not have yet, in spec order.
fn new_ephemeral_tracks(pod: &Pod, tracks: &[Track]) -> Vec<Track> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|ec| !tracks.iter().any(|t| t.name == ec.name))
        .map(|ec| {
            let c = ephemeral_as_container(ec);
            let mut t = Track::new(&c, false, "ContainerCreating");
            t.ephemeral = Some(Box::new(c));
            t
        })
        .collect()
}

/// Formats a duration as Go's `time.Duration.String` does.
pub fn go_duration(d: Duration) -> String {
    tandem_core::time::format_duration(d)
}

/// `name_namespace(uid)`, upstream `format.Pod`.
fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// The image pull policy, defaulted as the API does when absent.
fn pull_policy(c: &Container) -> &str {
    if let Some(p) = c.image_pull_policy.as_deref() {
        return p;
    }
    let image = c.image.as_deref().unwrap_or_default();
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        "IfNotPresent"
    } else {
        match last.split_once(':') {
            Some((_, "latest")) | None => "Always",
            Some(_) => "IfNotPresent",
        }
    }
}

fn qos_class(pod: &Pod) -> String {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort".into();
    };
    let all: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let res = c.resources.as_ref();
        let req = res.and_then(|r| r.requests.clone()).unwrap_or_default();
        let lim = res.and_then(|r| r.limits.clone()).unwrap_or_default();
        if !req.is_empty() || !lim.is_empty() {
            any = true;
        }
        for name in ["cpu", "memory"] {
            match (req.get(name).or(lim.get(name)), lim.get(name)) {
                (Some(r), Some(l)) if r == l => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort".into()
    } else if guaranteed {
        "Guaranteed".into()
    } else {
        "Burstable".into()
    }
}

/// One pod's worker.
pub struct PodWorker {
    ctx: Arc<WorkerContext>,
    pod: Pod,
    ip: Option<String>,
    stage: Stage,
    sandbox_id: Option<String>,
    tracks: Vec<Track>,
    start_time: SystemTime,
    conditions: BTreeMap<String, (String, SystemTime)>,
    /// A fingerprint of the status last written, to skip writes that would change nothing. A
    /// hash rather than the status itself: a `PodStatus` is kilobytes, and a node bench holds
    /// tens of thousands of workers.
    last_published: Option<u64>,
    phase_override: Option<String>,
}

impl PodWorker {
    /// A worker for an admitted pod, starting from the beginning.
    pub fn new(ctx: Arc<WorkerContext>, pod: Pod, ip: Option<String>) -> PodWorker {
        let spec = pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        let has_init = !init.is_empty();
        let waiting = if has_init {
            "PodInitializing"
        } else {
            "ContainerCreating"
        };
        let mut tracks: Vec<Track> = init.iter().map(|c| Track::new(c, true, waiting)).collect();
        tracks.extend(
            spec.iter()
                .flat_map(|s| s.containers.iter())
                .map(|c| Track::new(c, false, waiting)),
        );
        let ephemeral = new_ephemeral_tracks(&pod, &tracks);
        tracks.extend(ephemeral);
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| {
                SystemTime::UNIX_EPOCH
                    + Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0))
            })
            .unwrap_or_else(|| ctx.clock.now());
        PodWorker {
            ctx,
            pod,
            ip,
            stage: Stage::Sandbox {
                retry_at: None,
                backoff: BACKOFF_INITIAL,
            },
            sandbox_id: None,
            tracks,
            start_time,
            conditions: BTreeMap::new(),
            last_published: None,
            phase_override: None,
        }
    }

    /// A worker that re-adopts what the runtime already runs for this pod after an agent
    /// restart: containers keep running, restart counts and start times are the runtime's, and
    /// readiness is taken from the pod's last reported status for the same container id.
    pub fn adopt(
        ctx: Arc<WorkerContext>,
        pod: Pod,
        sandbox: crate::runtime::SandboxInfo,
    ) -> PodWorker {
        let containers = ctx.runtime.list_containers(&sandbox.id);
        let mut w = PodWorker::new(ctx, pod, sandbox.ip.clone());
        w.sandbox_id = Some(sandbox.id.clone());
        let reported: BTreeMap<String, bool> = w
            .pod
            .status
            .iter()
            .flat_map(|s| {
                s.container_statuses
                    .iter()
                    .flatten()
                    .chain(s.init_container_statuses.iter().flatten())
            })
            .filter_map(|cs| cs.container_id.clone().map(|id| (id, cs.ready)))
            .collect();
        let now = Instant::now();
        let mut any_main = false;
        let mut init_done = 0usize;
        let init_count = w.tracks.iter().filter(|t| t.is_init).count();
        for (i, t) in w.tracks.iter_mut().enumerate() {
            let Some(latest) = containers
                .iter()
                .filter(|c| c.name == t.name)
                .max_by_key(|c| c.attempt)
            else {
                continue;
            };
            t.restart_count = i32::try_from(latest.attempt).unwrap_or(i32::MAX);
            t.image_id = latest.image_id.clone();
            t.container_id = Some(latest.id.clone());
            t.ever_ran = latest.started_at.is_some();
            match &latest.state {
                ContainerState::Running => {
                    t.state = CState::Running {
                        id: latest.id.clone(),
                        started_at: latest.started_at.unwrap_or(sandbox.created_at),
                    };
                    t.started = true;
                    let c = track_spec(&w.pod, t).clone();
                    t.ready = c.readiness_probe.is_none()
                        || reported.get(&latest.id).copied().unwrap_or(false);
                    for (kind, p) in [
                        (ProbeKind::Liveness, &c.liveness_probe),
                        (ProbeKind::Readiness, &c.readiness_probe),
                    ] {
                        if let Some(p) = p {
                            let mut pt = ProbeTrack::from_spec(kind, p, now);
                            pt.next_at = now;
                            if kind == ProbeKind::Readiness && t.ready {
                                pt.successes = pt.success_threshold;
                            }
                            t.probes.push(pt);
                        }
                    }
                }
                ContainerState::Exited {
                    exit_code,
                    reason,
                    message,
                } => {
                    t.state = CState::Terminated(Term {
                        exit_code: *exit_code,
                        reason: reason.clone(),
                        message: message.clone(),
                        started_at: latest.started_at,
                        finished_at: latest.finished_at.unwrap_or(sandbox.created_at),
                        container_id: Some(latest.id.clone()),
                    });
                }
                ContainerState::Created => {}
            }
            if t.is_init
                && i == init_done
                && (matches!(t.state, CState::Terminated(ref tm) if tm.exit_code == 0)
                    || (t.sidecar && t.started))
            {
                init_done += 1;
            }
            if t.is_regular() {
                any_main = true;
            }
        }
        w.stage = if any_main || init_done >= init_count {
            Stage::Main
        } else {
            Stage::Init(init_done)
        };
        w
    }

    /// The current stage (for tests and diagnostics).
    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    async fn event(&self, track: Option<usize>, type_: EventType, reason: &str, message: &str) {
        let fp = track
            .and_then(|i| self.tracks.get(i))
            .map(Track::field_path);
        self.ctx
            .reporter
            .event(&self.pod, fp.as_deref(), type_, reason, message)
            .await;
    }

    /// Runs the worker until the pod is deleted or removed.
    ///
    /// The worker is boxed before the loop starts: an async fn keeps its by-value arguments
    /// beside its locals, so running an unboxed worker would carry two copies of it in every
    /// pod's task.
    pub fn run(
        self,
        updates: mpsc::Receiver<PodUpdate>,
    ) -> impl std::future::Future<Output = WorkerOutcome> + Send {
        Box::new(self).run_boxed(updates)
    }

    async fn run_boxed(
        mut self: Box<Self>,
        mut updates: mpsc::Receiver<PodUpdate>,
    ) -> WorkerOutcome {
        // Report Pending/ContainerCreating before the first (possibly long) step.
        if self.pod.metadata.deletion_timestamp.is_none()
            && let Err(ReportError::Gone) = self.publish().await
        {
            return self.terminate(true).await;
        }
        loop {
            if let Some(outcome) = self.check_deletion(&mut updates).await {
                return outcome;
            }
            // Step, but let a deletion interrupt a long step (an image pull, a start delay);
            // other updates (our own status writes coming back) only refresh the pod.
            let mut latest: Option<Box<Pod>> = None;
            let mut stop: Option<bool> = None;
            let mut abandoned = false;
            {
                // Boxed: a step's future is large and lives only while stepping, so the
                // worker's resting future (one per pod) stays small.
                let mut step = Box::pin(self.step());
                loop {
                    tokio::select! {
                        _ = &mut step => break,
                        u = updates.recv() => match u {
                            Some(PodUpdate::Changed(p)) => {
                                let deleting = p.metadata.deletion_timestamp.is_some();
                                latest = Some(p);
                                if deleting {
                                    stop = Some(false);
                                    break;
                                }
                            }
                            Some(PodUpdate::Removed) => {
                                stop = Some(true);
                                break;
                            }
                            None => {
                                abandoned = true;
                                break;
                            }
                        },
                    }
                }
            }
            if let Some(p) = latest {
                self.pod = kept(*p);
            }
            if abandoned {
                return WorkerOutcome::Abandoned;
            }
            if let Some(removed) = stop {
                return self.terminate(removed).await;
            }
            match self.publish().await {
                Err(ReportError::Gone) => return self.terminate(true).await,
                Err(ReportError::Api(e)) => {
                    tracing::debug!(error = %e, "pod status update failed; will retry")
                }
                Ok(()) => {}
            }
            let wake = self.next_wake();
            tokio::select! {
                u = updates.recv() => match u {
                    Some(PodUpdate::Changed(p)) => {
                        let deleting = p.metadata.deletion_timestamp.is_some();
                        self.pod = kept(*p);
                        if deleting {
                            return self.terminate(false).await;
                        }
                    }
                    Some(PodUpdate::Removed) => return self.terminate(true).await,
                    None => return WorkerOutcome::Abandoned,
                },
                _ = sleep_until_opt(wake) => {}
            }
        }
    }

    async fn check_deletion(
        &mut self,
        updates: &mut mpsc::Receiver<PodUpdate>,
    ) -> Option<WorkerOutcome> {
        if self.pod.metadata.deletion_timestamp.is_some() {
            return Some(self.terminate(false).await);
        }
        match updates.try_recv() {
            Ok(PodUpdate::Changed(p)) => {
                let deleting = p.metadata.deletion_timestamp.is_some();
                self.pod = kept(*p);
                if deleting {
                    return Some(self.terminate(false).await);
                }
                None
            }
            Ok(PodUpdate::Removed) => Some(self.terminate(true).await),
            Err(mpsc::error::TryRecvError::Disconnected) => Some(WorkerOutcome::Abandoned),
            Err(mpsc::error::TryRecvError::Empty) => None,
        }
    }

    /// The earliest time something is due.
    pub fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Instant| wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
        if let Stage::Sandbox {
            retry_at: Some(t), ..
        } = self.stage
        {
            at(t);
        }
        if self.stage == Stage::Finished {
            return None;
        }
        for t in &self.tracks {
            match &t.state {
                CState::Waiting {
                    retry_at: Some(r), ..
                } => at(*r),
                CState::Running { id, .. } => {
                    for p in &t.probes {
                        at(p.next_at);
                    }
                    match self.ctx.runtime.container_status(id) {
                        Ok(info) if matches!(info.state, ContainerState::Exited { .. }) => {
                            at(Instant::now())
                        }
                        Ok(info) => {
                            if let Some(n) = info.next_change {
                                at(n);
                            }
                        }
                        Err(_) => at(Instant::now()),
                    }
                }
                _ => {}
            }
        }
        wake
    }

    /// Does everything that is due now.
    pub async fn step(&mut self) {
        let now = Instant::now();
        // Ephemeral containers added since (`kubectl debug`) join the pod's tracks.
        let added = new_ephemeral_tracks(&self.pod, &self.tracks);
        self.tracks.extend(added);
        if let Stage::Sandbox { retry_at, backoff } = self.stage.clone() {
            if retry_at.is_some_and(|r| r > now) {
                return;
            }
            if let Err(e) = self.ctx.runtime.prepare_volumes(&self.pod).await {
                self.event(None, EventType::Warning, "FailedMount", &e.to_string())
                    .await;
                self.stage = Stage::Sandbox {
                    retry_at: Some(now + backoff),
                    backoff: (backoff * 2).min(Duration::from_secs(120)),
                };
                return;
            }
            let cfg = SandboxConfig {
                pod_uid: self.pod.metadata.uid.clone().unwrap_or_default(),
                namespace: self
                    .pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                name: self.pod.metadata.name.clone().unwrap_or_default(),
                pod: self.pod.clone(),
                ip: self.ip.clone(),
            };
            match self.ctx.runtime.run_sandbox(&cfg).await {
                Ok(sb) => {
                    self.sandbox_id = Some(sb.id);
                    // A runtime with its own IPAM (CNI) decides the address.
                    if sb.ip.is_some() {
                        self.ip = sb.ip;
                    }
                    let has_init = self.tracks.iter().any(|t| t.is_init);
                    self.stage = if has_init {
                        Stage::Init(0)
                    } else {
                        Stage::Main
                    };
                }
                Err(e) => {
                    self.event(
                        None,
                        EventType::Warning,
                        "FailedCreatePodSandBox",
                        &format!("Failed to create pod sandbox: {e}"),
                    )
                    .await;
                    self.stage = Stage::Sandbox {
                        retry_at: Some(now + backoff),
                        backoff: (backoff * 2).min(BACKOFF_MAX),
                    };
                    return;
                }
            }
        }
        // Sidecars keep being managed once started, in every later stage.
        let sidecars: Vec<usize> = self
            .tracks
            .iter()
            .enumerate()
            .filter(|(_, t)| t.sidecar && t.ever_ran)
            .map(|(i, _)| i)
            .collect();
        for i in sidecars {
            self.drive(i, true).await;
        }
        while let Stage::Init(idx) = self.stage {
            let Some(i) = self
                .tracks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_init)
                .nth(idx)
                .map(|(i, _)| i)
            else {
                self.stage = Stage::Main;
                break;
            };
            let sidecar = self.tracks[i].sidecar;
            self.drive(i, sidecar).await;
            let t = &self.tracks[i];
            match &t.state {
                CState::Running { .. } if sidecar && t.started => self.stage = Stage::Init(idx + 1),
                CState::Terminated(term) if term.exit_code == 0 && !sidecar => {
                    self.stage = Stage::Init(idx + 1)
                }
                CState::Terminated(term)
                    if self.restart_policy() == "Never" && term.exit_code != 0 =>
                {
                    self.stage = Stage::Finished;
                    self.phase_override = Some("Failed".into());
                }
                _ => return,
            }
        }
        if self.stage == Stage::Main {
            let main: Vec<(usize, bool)> = self
                .tracks
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.is_init)
                .map(|(i, t)| (i, t.is_regular()))
                .collect();
            // Ephemeral containers run once in the sandbox: never restarted (upstream kubelet).
            for (i, restartable) in main {
                self.drive(i, restartable).await;
            }
            let phase = self.phase();
            if phase == "Succeeded" || phase == "Failed" {
                self.stage = Stage::Finished;
            }
        }
    }

    /// Moves one container along: start it if it should run, observe it, probe it, and handle
    /// its exit (restart with back-off when `restartable`).
    async fn drive(&mut self, i: usize, restartable: bool) {
        // A container seen exiting is handled (restarted or backed off) in the same step.
        for _ in 0..3 {
            let was_running = matches!(self.tracks[i].state, CState::Running { .. });
            self.drive_once(i, restartable).await;
            if !(was_running
                && matches!(self.tracks[i].state, CState::Terminated(_))
                && restartable)
            {
                break;
            }
        }
    }

    async fn drive_once(&mut self, i: usize, restartable: bool) {
        let now = Instant::now();
        match self.tracks[i].state.clone() {
            CState::Waiting {
                retry_at, reason, ..
            } => {
                if retry_at.is_some_and(|r| r > now) {
                    return;
                }
                if reason == "CrashLoopBackOff" {
                    let t = &mut self.tracks[i];
                    t.restart_count += 1;
                    t.backoff = Some(
                        t.backoff
                            .map_or(BACKOFF_INITIAL, |b| (b * 2).min(BACKOFF_MAX)),
                    );
                }
                self.start_container(i).await;
            }
            CState::Running { id, .. } => {
                let info = self.ctx.runtime.container_status(&id);
                match info {
                    Ok(info) if matches!(info.state, ContainerState::Exited { .. }) => {
                        self.exited(i, &info).await
                    }
                    Ok(_) => self.run_probes(i, &id).await,
                    Err(RuntimeError::NotFound(_)) => {
                        let term = Term {
                            exit_code: 137,
                            reason: "ContainerStatusUnknown".into(),
                            message: Some(
                                "The container could not be located when the pod was terminated"
                                    .into(),
                            ),
                            started_at: None,
                            finished_at: self.ctx.clock.now(),
                            container_id: Some(id),
                        };
                        self.tracks[i].state = CState::Terminated(term);
                    }
                    Err(_) => {}
                }
            }
            CState::Terminated(term) => {
                if !restartable || !self.should_restart(i, &term) {
                    return;
                }
                let t = &mut self.tracks[i];
                match t.backoff {
                    None => {
                        t.backoff = Some(BACKOFF_INITIAL);
                        t.last = Some(term);
                        t.restart_count += 1;
                        self.start_container(i).await;
                    }
                    Some(b) => {
                        let until = self.ctx.clock.instant(term.finished_at) + b;
                        if until <= now {
                            t.backoff = Some((b * 2).min(BACKOFF_MAX));
                            t.last = Some(term);
                            t.restart_count += 1;
                            self.start_container(i).await;
                        } else {
                            let msg = format!(
                                "back-off {} restarting failed container={} pod={}",
                                go_duration(b),
                                t.name(),
                                format_pod(&self.pod)
                            );
                            let name = t.name().to_string();
                            t.last = Some(term);
                            t.state = CState::Waiting {
                                reason: "CrashLoopBackOff".into(),
                                message: Some(msg),
                                retry_at: Some(until),
                            };
                            let ev = format!(
                                "Back-off restarting failed container {name} in pod {}",
                                format_pod(&self.pod)
                            );
                            self.event(Some(i), EventType::Warning, "BackOff", &ev)
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// The restart policy applied to one exit: sidecars always restart, init containers only on
    /// failure (unless `Never`), regular containers per `restartPolicy`.
    fn should_restart(&self, i: usize, term: &Term) -> bool {
        let t = &self.tracks[i];
        if t.sidecar {
            return true;
        }
        match self.restart_policy() {
            "Never" => false,
            "OnFailure" => term.exit_code != 0,
            _ => !t.is_init || term.exit_code != 0,
        }
    }

    async fn exited(&mut self, i: usize, info: &ContainerInfo) {
        let ContainerState::Exited {
            exit_code,
            reason,
            message,
        } = &info.state
        else {
            return;
        };
        let t = &mut self.tracks[i];
        t.ready = false;
        t.started = false;
        t.probes.clear();
        t.state = CState::Terminated(Term {
            exit_code: *exit_code,
            reason: reason.clone(),
            message: message.clone(),
            started_at: info.started_at,
            finished_at: info.finished_at.unwrap_or_else(|| self.ctx.clock.now()),
            container_id: Some(info.id.clone()),
        });
    }

    /// Image → create → start → postStart, with the kubelet's events and waiting reasons.
    async fn start_container(&mut self, i: usize) {
        let now = Instant::now();
        let image = self.tracks[i].image();
        let t = &self.tracks[i];
        let policy = pull_policy(track_spec(&self.pod, t)).to_string();
        let present = self.ctx.runtime.image_status(&image);
        let retry = |b: Option<Duration>| now + b.unwrap_or(BACKOFF_INITIAL);
        match (policy.as_str(), present) {
            ("Never", None) => {
                let msg =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.event(Some(i), EventType::Warning, "ErrImageNeverPull", &msg)
                    .await;
                self.tracks[i].state = CState::Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: Some(msg),
                    retry_at: Some(now + BACKOFF_INITIAL),
                };
                return;
            }
            ("IfNotPresent" | "Never", Some(img)) => {
                self.tracks[i].image_id = img.id.clone();
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                )
                .await;
            }
            _ => {
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulling",
                    &format!("Pulling image \"{image}\""),
                )
                .await;
                match self.ctx.runtime.pull_image(&image).await {
                    Ok(out) => {
                        self.tracks[i].image_id = out.image.id.clone();
                        let msg = format!(
                            "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {} bytes. (emulated pull)",
                            go_duration(out.took),
                            go_duration(out.took_including_waiting),
                            out.image.size_bytes
                        );
                        self.event(Some(i), EventType::Normal, "Pulled", &msg).await;
                    }
                    Err(e) => {
                        self.event(
                            Some(i),
                            EventType::Warning,
                            "Failed",
                            &format!("Failed to pull image \"{image}\": {e}"),
                        )
                        .await;
                        self.event(Some(i), EventType::Warning, "Failed", "Error: ErrImagePull")
                            .await;
                        let b = self.tracks[i].backoff;
                        self.tracks[i].backoff =
                            Some(b.map_or(BACKOFF_INITIAL, |b| (b * 2).min(BACKOFF_MAX)));
                        self.event(
                            Some(i),
                            EventType::Normal,
                            "BackOff",
                            &format!("Back-off pulling image \"{image}\""),
                        )
                        .await;
                        self.tracks[i].state = CState::Waiting {
                            reason: "ImagePullBackOff".into(),
                            message: Some(format!(
                                "Back-off pulling image \"{image}\": ErrImagePull: {e}"
                            )),
                            retry_at: Some(retry(b)),
                        };
                        return;
                    }
                }
            }
        }
        let Some(sandbox) = self.sandbox_id.clone() else {
            return;
        };
        let attempt = u32::try_from(self.tracks[i].restart_count).unwrap_or(0);
        let t = &self.tracks[i];
        let container = track_spec(&self.pod, t).clone();
        let info = match self
            .ctx
            .runtime
            .create_container(&sandbox, &self.pod, &container, attempt)
            .await
        {
            Ok(info) => info,
            Err(e) => {
                let msg = e.to_string();
                let reason = match e {
                    RuntimeError::Config(_) => "CreateContainerConfigError",
                    _ => "CreateContainerError",
                };
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Failed",
                    &format!("Error: {msg}"),
                )
                .await;
                let b = self.tracks[i].backoff;
                self.tracks[i].backoff =
                    Some(b.map_or(BACKOFF_INITIAL, |b| (b * 2).min(BACKOFF_MAX)));
                self.tracks[i].state = CState::Waiting {
                    reason: reason.into(),
                    message: Some(msg),
                    retry_at: Some(retry(b)),
                };
                return;
            }
        };
        self.tracks[i].container_id = Some(info.id.clone());
        self.tracks[i].image_id = info.image_id.clone();
        let name = container.name.clone();
        self.event(
            Some(i),
            EventType::Normal,
            "Created",
            &format!("Created container: {name}"),
        )
        .await;
        if let Err(e) = self.ctx.runtime.start_container(&info.id).await {
            self.event(
                Some(i),
                EventType::Warning,
                "Failed",
                &format!("Error: {e}"),
            )
            .await;
            self.tracks[i].state = CState::Waiting {
                reason: "RunContainerError".into(),
                message: Some(e.to_string()),
                retry_at: Some(retry(self.tracks[i].backoff)),
            };
            return;
        }
        let started_at = self
            .ctx
            .runtime
            .container_status(&info.id)
            .ok()
            .and_then(|c| c.started_at)
            .unwrap_or_else(|| self.ctx.clock.now());
        // The kubelet's message; an emulated runtime adds that nothing runs.
        let message = if self.ctx.runtime.emulated() {
            format!("Started container {name} (emulated: no process runs)")
        } else {
            format!("Started container {name}")
        };
        self.event(Some(i), EventType::Normal, "Started", &message)
            .await;
        let t = &mut self.tracks[i];
        let c = &container;
        t.ever_ran = true;
        t.state = CState::Running {
            id: info.id.clone(),
            started_at,
        };
        let started = Instant::now();
        t.probes.clear();
        let implicit = self.ctx.runtime.implicit_probes(&info.id);
        for (kind, spec) in [
            (ProbeKind::Startup, c.startup_probe.as_ref()),
            (ProbeKind::Liveness, c.liveness_probe.as_ref()),
            (ProbeKind::Readiness, c.readiness_probe.as_ref()),
        ] {
            match spec {
                Some(p) => t.probes.push(ProbeTrack::from_spec(kind, p, started)),
                None if implicit.contains(&kind) => {
                    t.probes.push(ProbeTrack::implicit(kind, started))
                }
                None => {}
            }
        }
        t.started = !t.probes.iter().any(|p| p.kind == ProbeKind::Startup);
        t.ready = t.started && !t.probes.iter().any(|p| p.kind == ProbeKind::Readiness);
        if c.lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
            .is_some()
            && let Err(e) = self
                .ctx
                .runtime
                .run_hook(&info.id, HookKind::PostStart)
                .await
        {
            {
                let msg = format!("PostStartHook failed: {e}");
                self.event(Some(i), EventType::Warning, "FailedPostStartHook", &msg)
                    .await;
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Killing",
                    &format!("FailedPostStartHook: stopping container {name}"),
                )
                .await;
                let _ = self
                    .ctx
                    .runtime
                    .stop_container(&info.id, self.grace())
                    .await;
                if let Ok(info) = self.ctx.runtime.container_status(&info.id) {
                    self.exited(i, &info).await;
                }
                return;
            }
        }
        self.run_probes(i, &info.id).await;
    }

    async fn run_probes(&mut self, i: usize, id: &str) {
        let now = Instant::now();
        let mut kill: Option<ProbeKind> = None;
        let mut events: Vec<String> = Vec::new();
        let probes = self.tracks[i].probes.clone();
        let mut updated = Vec::with_capacity(probes.len());
        let mut started = self.tracks[i].started;
        let mut ready = self.tracks[i].ready;
        for mut p in probes {
            let gated = p.kind != ProbeKind::Startup && !started;
            if p.next_at > now || gated || (p.kind == ProbeKind::Startup && started) {
                if gated && p.next_at <= now {
                    p.next_at = now + p.period;
                }
                updated.push(p);
                continue;
            }
            let result = self.ctx.runtime.probe(id, p.kind).await;
            p.next_at = now + p.period;
            match result {
                ProbeResult::Success => {
                    p.failures = 0;
                    p.successes += 1;
                    match p.kind {
                        ProbeKind::Startup => started = true,
                        ProbeKind::Readiness if p.successes >= p.success_threshold => ready = true,
                        _ => {}
                    }
                }
                ProbeResult::Failure(out) => {
                    p.successes = 0;
                    p.failures += 1;
                    events.push(format!("{} probe failed: {out}", p.kind.title()));
                    if p.failures >= p.failure_threshold {
                        match p.kind {
                            ProbeKind::Readiness => ready = false,
                            k => kill = Some(k),
                        }
                    }
                }
            }
            updated.push(p);
        }
        {
            let t = &mut self.tracks[i];
            t.probes = updated;
            if started && !t.started {
                // Liveness and readiness start counting their initial delay once startup passed
                // (upstream runs them from container start but ignores results until started).
                for p in t.probes.iter_mut().filter(|p| p.kind != ProbeKind::Startup) {
                    p.next_at = p.next_at.max(now);
                }
                if !t.probes.iter().any(|p| p.kind == ProbeKind::Readiness) {
                    ready = true;
                }
            }
            t.started = started;
            t.ready = ready && started;
        }
        for e in events {
            self.event(Some(i), EventType::Warning, "Unhealthy", &e)
                .await;
        }
        if let Some(kind) = kill {
            let name = self.tracks[i].name().to_string();
            let what = if kind == ProbeKind::Startup {
                "startup"
            } else {
                "liveness"
            };
            self.event(
                Some(i),
                EventType::Normal,
                "Killing",
                &format!("Container {name} failed {what} probe, will be restarted"),
            )
            .await;
            let _ = self.ctx.runtime.stop_container(id, self.grace()).await;
            if let Ok(info) = self.ctx.runtime.container_status(id) {
                self.exited(i, &info).await;
            }
        }
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30);
        Duration::from_secs(u64::try_from(secs.max(0)).unwrap_or(0))
    }

    /// Stops everything; when `removed` is false the final status is reported and the pod is
    /// deleted from the API. Boxed for the same reason as a step: it is large and rare.
    fn terminate(
        &mut self,
        removed: bool,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = WorkerOutcome> + Send + '_>> {
        Box::pin(self.terminate_now(removed))
    }

    async fn terminate_now(&mut self, removed: bool) -> WorkerOutcome {
        let grace = if removed {
            Duration::ZERO
        } else {
            self.grace()
        };
        let deadline = Instant::now() + grace;
        let running: Vec<(usize, String)> = self
            .tracks
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match &t.state {
                CState::Running { id, .. } => Some((i, id.clone())),
                _ => None,
            })
            .collect();
        for (i, _) in &running {
            let name = self.tracks[*i].name().to_string();
            self.event(
                Some(*i),
                EventType::Normal,
                "Killing",
                &format!("Stopping container {name}"),
            )
            .await;
        }
        let runtime = self.ctx.runtime.clone();
        let stops = running.iter().map(|(i, id)| {
            let runtime = runtime.clone();
            let t = &self.tracks[*i];
            let has_pre_stop = track_spec(&self.pod, t)
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .is_some();
            let id = id.clone();
            async move {
                let mut hook_err = None;
                if has_pre_stop && !removed {
                    match tokio::time::timeout_at(
                        deadline,
                        runtime.run_hook(&id, HookKind::PreStop),
                    )
                    .await
                    {
                        Ok(Err(e)) => hook_err = Some(e.to_string()),
                        Err(_) => hook_err = Some("timed out within the grace period".into()),
                        Ok(Ok(())) => {}
                    }
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                let _ = runtime.stop_container(&id, remaining).await;
                hook_err
            }
        });
        let hook_errors = futures::future::join_all(stops).await;
        for ((i, _), err) in running.iter().zip(hook_errors) {
            if let Some(err) = err {
                let name = self.tracks[*i].name().to_string();
                self.event(
                    Some(*i),
                    EventType::Warning,
                    "FailedPreStopHook",
                    &format!("PreStopHook failed for container {name}: {err}"),
                )
                .await;
            }
            let id = running
                .iter()
                .find(|(j, _)| j == i)
                .map(|(_, id)| id.clone())
                .unwrap_or_default();
            if let Ok(info) = self.ctx.runtime.container_status(&id) {
                self.exited(*i, &info).await;
            }
        }
        let now = self.ctx.clock.now();
        for t in self.tracks.iter_mut() {
            if matches!(t.state, CState::Waiting { .. }) && (!t.is_init || t.ever_ran) {
                {
                    t.state = CState::Terminated(Term {
                        exit_code: 137,
                        reason: "ContainerStatusUnknown".into(),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        started_at: None,
                        finished_at: now,
                        container_id: None,
                    });
                }
            }
            t.ready = false;
        }
        if self.phase_override.is_none() && self.stage != Stage::Finished {
            let all_zero = self
                .tracks
                .iter()
                .filter(|t| t.is_regular())
                .all(|t| matches!(&t.state, CState::Terminated(x) if x.exit_code == 0));
            self.phase_override = Some(if all_zero { "Succeeded" } else { "Failed" }.into());
        }
        self.stage = Stage::Finished;
        if let Some(sb) = self.sandbox_id.clone() {
            // A pod that finished by itself keeps its exited containers (and their logs) until
            // it is deleted, as on a kubelet; a deleted pod loses everything now.
            let deleting = removed || self.pod.metadata.deletion_timestamp.is_some();
            let _ = if deleting {
                self.ctx.runtime.remove_sandbox(&sb).await
            } else {
                self.ctx.runtime.stop_sandbox(&sb).await
            };
        }
        if removed {
            return WorkerOutcome::Removed;
        }
        match self.publish().await {
            Err(ReportError::Gone) => return WorkerOutcome::Deleted,
            Err(ReportError::Api(e)) => {
                tracing::debug!(error = %e, "final pod status update failed")
            }
            Ok(()) => {}
        }
        let _ = self.ctx.reporter.delete(&self.pod).await;
        WorkerOutcome::Deleted
    }

    /// The pod phase, as upstream `getPhase` computes it.
    pub fn phase(&self) -> String {
        if let Some(p) = &self.phase_override {
            return p.clone();
        }
        if matches!(self.stage, Stage::Sandbox { .. } | Stage::Init(_)) {
            return "Pending".into();
        }
        let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
        for t in self.tracks.iter().filter(|t| t.is_regular()) {
            match &t.state {
                CState::Running { .. } => running += 1,
                CState::Terminated(term) => {
                    stopped += 1;
                    if term.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                CState::Waiting { .. } if t.last.is_some() => stopped += 1,
                CState::Waiting { .. } => waiting += 1,
            }
        }
        if waiting > 0 {
            return "Pending".into();
        }
        if running > 0 {
            return "Running".into();
        }
        if stopped == 0 {
            return "Pending".into();
        }
        match self.restart_policy() {
            "Never" => if succeeded == stopped {
                "Succeeded"
            } else {
                "Failed"
            }
            .into(),
            "OnFailure" => if succeeded == stopped {
                "Succeeded"
            } else {
                "Running"
            }
            .into(),
            _ => "Running".into(),
        }
    }

    fn condition(
        &mut self,
        type_: &str,
        status: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) -> PodCondition {
        let s = if status { "True" } else { "False" }.to_string();
        let now = self.ctx.clock.now();
        let entry = self
            .conditions
            .entry(type_.to_string())
            .or_insert_with(|| (s.clone(), now));
        if entry.0 != s {
            *entry = (s.clone(), now);
        }
        PodCondition {
            type_: type_.to_string(),
            status: s,
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(clock::time(entry.1)),
            last_probe_time: None,
            observed_generation: None,
        }
    }

    fn container_status(&self, t: &Track) -> ContainerStatus {
        let term_state = |x: &Term| ContainerStateTerminated {
            container_id: x.container_id.clone(),
            exit_code: x.exit_code,
            finished_at: Some(clock::time(x.finished_at)),
            message: x.message.clone(),
            reason: Some(x.reason.clone()),
            signal: None,
            started_at: x.started_at.map(clock::time),
        };
        let state = match &t.state {
            CState::Waiting {
                reason, message, ..
            } => KState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..KState::default()
            },
            CState::Running { started_at, .. } => KState {
                running: Some(ContainerStateRunning {
                    started_at: Some(clock::time(*started_at)),
                }),
                ..KState::default()
            },
            CState::Terminated(x) => KState {
                terminated: Some(term_state(x)),
                ..KState::default()
            },
        };
        ContainerStatus {
            name: t.name.clone(),
            image: t.image(),
            image_id: t.image_id.clone(),
            container_id: match &t.state {
                CState::Running { id, .. } => Some(id.clone()),
                CState::Terminated(x) => x.container_id.clone(),
                CState::Waiting { .. } => t.last.as_ref().and_then(|l| l.container_id.clone()),
            },
            ready: t.ready,
            restart_count: t.restart_count,
            started: Some(t.started && matches!(t.state, CState::Running { .. })),
            state: Some(state),
            last_state: Some(
                t.last
                    .as_ref()
                    .map(|x| KState {
                        terminated: Some(term_state(x)),
                        ..KState::default()
                    })
                    .unwrap_or_default(),
            ),
            ..ContainerStatus::default()
        }
    }

    /// The pod status as it stands.
    pub fn status(&mut self) -> PodStatus {
        let phase = self.phase();
        let terminal = phase == "Succeeded" || phase == "Failed";
        let sandbox_ready = self.sandbox_id.is_some() && !terminal;
        let init_incomplete: Vec<String> = match self.stage {
            Stage::Sandbox { .. } | Stage::Init(_) => self
                .tracks
                .iter()
                .filter(|t| {
                    t.is_init
                        && !matches!(&t.state, CState::Terminated(x) if x.exit_code == 0)
                        && !(t.sidecar && t.started)
                })
                .map(|t| t.name().to_string())
                .collect(),
            _ => Vec::new(),
        };
        let unready: Vec<String> = self
            .tracks
            .iter()
            .filter(|t| (t.is_regular() || t.sidecar) && !t.ready)
            .map(|t| t.name().to_string())
            .collect();
        let mut conditions =
            vec![self.condition("PodReadyToStartContainers", sandbox_ready, None, None)];
        conditions.push(if init_incomplete.is_empty() {
            self.condition("Initialized", true, None, None)
        } else {
            let m = format!(
                "containers with incomplete status: [{}]",
                init_incomplete.join(" ")
            );
            self.condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(m),
            )
        });
        let (ready, reason, message) = if phase == "Succeeded" {
            (false, Some("PodCompleted"), None)
        } else if unready.is_empty() {
            (true, None, None)
        } else {
            (
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
            )
        };
        conditions.push(self.condition("ContainersReady", ready, reason, message.clone()));
        conditions.push(self.condition("Ready", ready, reason, message));
        conditions.push(self.condition("PodScheduled", true, None, None));
        let (reason, message) = (None, None);
        let host_network = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let pod_ip = if host_network {
            Some(self.ctx.host_ip.clone())
        } else {
            self.ip.clone()
        };
        let init: Vec<ContainerStatus> = self
            .tracks
            .iter()
            .filter(|t| t.is_init)
            .map(|t| self.container_status(t))
            .collect();
        // Upstream reports ephemeral containers never ready.
        let ephemeral: Vec<ContainerStatus> = self
            .tracks
            .iter()
            .filter(|t| t.is_ephemeral())
            .map(|t| ContainerStatus {
                ready: false,
                ..self.container_status(t)
            })
            .collect();
        PodStatus {
            phase: Some(phase),
            conditions: Some(conditions),
            container_statuses: Some(
                self.tracks
                    .iter()
                    .filter(|t| t.is_regular())
                    .map(|t| self.container_status(t))
                    .collect(),
            ),
            ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
            init_container_statuses: (!init.is_empty()).then_some(init),
            host_ip: Some(self.ctx.host_ip.clone()),
            host_ips: Some(vec![HostIP {
                ip: self.ctx.host_ip.clone(),
            }]),
            pod_ip: pod_ip.clone(),
            pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
            start_time: Some(clock::time(self.start_time)),
            qos_class: Some(
                self.pod
                    .status
                    .as_ref()
                    .and_then(|s| s.qos_class.clone())
                    .unwrap_or_else(|| qos_class(&self.pod)),
            ),
            reason,
            message,
            ..PodStatus::default()
        }
    }

    async fn publish(&mut self) -> Result<(), ReportError> {
        let status = self.status();
        let fingerprint = status_fingerprint(&status);
        if fingerprint.is_some() && self.last_published == fingerprint {
            return Ok(());
        }
        self.ctx.reporter.status(&self.pod, &status).await?;
        self.last_published = fingerprint;
        Ok(())
    }

    /// Whether the pod has reached a terminal phase.
    pub fn finished(&self) -> bool {
        self.stage == Stage::Finished
    }
}

/// The pod as a worker keeps it after an update from the API: the status there is the one this
/// worker wrote (it builds the next from its own state), so only the QoS class is kept of it. A
/// pod's status is kilobytes once parsed, and a node bench keeps tens of thousands of workers.
/// [`PodWorker::adopt`] reads the reported status before any update replaces the pod.
fn kept(mut pod: Pod) -> Pod {
    pod.status = pod.status.map(|s| PodStatus {
        qos_class: s.qos_class,
        ..PodStatus::default()
    });
    pod
}

/// A 64-bit hash of the status's JSON form; `None` if it does not serialise (never expected),
/// which makes the next publish write rather than skip.
fn status_fingerprint(status: &PodStatus) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let bytes = serde_json::to_vec(status).ok()?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(hasher.finish())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending::<()>().await,
    }
}

#[cfg(test)]
#[path = "pod_worker_tests.rs"]
mod tests;
