//! Termination, from any stage: when the pod is deleted (a deletionTimestamp) its running
//! containers get their preStop hooks and a stop within what is left of the grace period, in
//! parallel, as the kubelet's `killPodWithSyncResult` does; containers that never started end
//! as `ContainerStatusUnknown`; the final status is written and the pod deleted with
//! `gracePeriodSeconds=0` and a uid precondition (upstream `status_manager` `syncPod` →
//! `canBeDeleted`). A pod removed from the API (force-deleted) is stopped at once and nothing is
//! reported.

use std::time::Duration;

use tokio::time::Instant;

use super::container::{CState, Term, track_spec};
use super::{EventType, PodWorker, ReportError, Stage, WorkerOutcome};
use crate::runtime::HookKind;

impl PodWorker {
    /// The grace period a stop gets: the deletion's, else the pod's
    /// `terminationGracePeriodSeconds`, else 30 s.
    pub(super) fn grace(&self) -> Duration {
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
    pub(super) fn terminate(
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
                t.state = CState::Terminated(Term::not_located(now, None));
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
}
