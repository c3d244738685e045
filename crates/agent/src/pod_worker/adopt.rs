//! Re-adoption after an agent restart: a worker built from what the runtime still runs for a
//! pod (its sandbox and the latest attempt of each container) instead of starting the pod
//! again, as the kubelet's first `SyncPod` after a restart finds its containers through the
//! runtime. Probes of running containers are due at once; readiness is carried over from the
//! pod's last reported status for the same container id.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::container::{CState, Term, track_spec};
use super::probes::ProbeTrack;
use super::{PodWorker, Stage, WorkerContext};
use crate::runtime::{ContainerState, ProbeKind, SandboxInfo};

impl PodWorker {
    /// A worker that re-adopts what the runtime already runs for this pod after an agent
    /// restart: containers keep running, restart counts and start times are the runtime's, and
    /// readiness is taken from the pod's last reported status for the same container id.
    pub fn adopt(ctx: Arc<WorkerContext>, pod: Pod, sandbox: SandboxInfo) -> PodWorker {
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
}
