//! One pod worker per admitted pod: a typed state machine that drives the pod through
//! sandbox → volumes → images → init containers (in order) → containers → probes → restarts,
//! and graceful termination, publishing the pod status kubectl shows and the kubelet's events.
//!
//! Pod stages ([`Stage`]), each in a file of its own:
//! - `Sandbox` (`sandbox.rs`): mount volumes, create the sandbox; retried with back-off;
//! - `Init(i)` (`init.rs`): init container `i` must exit 0; restartable sidecars only need to be
//!   started;
//! - `Main` (`running.rs`): containers run, are probed (`probes.rs`) and restarted;
//! - `Finished`: a terminal phase, nothing more runs.
//!
//! Deletion from any stage goes through termination (`terminating.rs`): preStop hooks, stop with
//! the remaining grace period, final status, then delete with `gracePeriodSeconds=0` and a uid
//! precondition (upstream `status_manager` `syncPod` → `canBeDeleted`). A worker can also start
//! from what the runtime already runs for the pod (`adopt.rs`).
//!
//! Container states ([`CState`], `container.rs`): `Waiting` (with the kubelet's reason:
//! `ContainerCreating`, `PodInitializing`, `ErrImageNeverPull`, `ImagePullBackOff`
//! (`images.rs`), `CreateContainerError` (`starting.rs`), `CrashLoopBackOff`) → `Running` →
//! `Terminated`, with restarts after exponential back-off (upstream `kuberuntime` `doBackOff`:
//! the first restart is immediate, then 10 s doubling to 5 min). What is published is built in
//! `status.rs`.
//!
//! This file holds the worker itself: its types, the loop that steps it and listens for
//! updates, and the step that dispatches on the stage.
//!
//! Time comes from tokio, so tests run the machine with `tokio::time::pause()`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::NodeOs;
use crate::pull_secrets::SecretSource;
use crate::runtime::{ContainerState, Runtime};

mod adopt;
mod container;
mod images;
mod init;
mod probes;
mod running;
mod sandbox;
mod starting;
mod status;
mod terminating;

pub use container::{CState, Term};
use container::{Track, new_ephemeral_tracks};

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
    /// Where the pods' `imagePullSecrets` are read.
    pub secrets: Arc<dyn SecretSource>,
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

/// The back-off after `previous` (the initial one when there was none), doubling up to
/// [`BACKOFF_MAX`]: upstream's container restart and image pull back-off.
fn next_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(BACKOFF_INITIAL, |b| (b * 2).min(BACKOFF_MAX))
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
        // Ephemeral containers added since (`kubectl debug`) join the pod's tracks.
        let added = new_ephemeral_tracks(&self.pod, &self.tracks);
        self.tracks.extend(added);
        if let Stage::Sandbox { retry_at, backoff } = self.stage.clone()
            && !self.step_sandbox(retry_at, backoff).await
        {
            return;
        }
        // Sidecars keep being managed once started, in every later stage.
        self.drive_sidecars().await;
        self.step_init().await;
        if self.stage == Stage::Main {
            self.step_main().await;
        }
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

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => futures::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests;
