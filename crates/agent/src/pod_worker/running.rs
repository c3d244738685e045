//! The running stage, [`Stage::Main`]: the pod's containers (and ephemeral containers, started
//! once and never restarted) are started, observed and probed; an exited container is restarted
//! as the pod's `restartPolicy` says, after the kubelet's back-off (upstream `kuberuntime`
//! `doBackOff`: the first restart at once, then 10 s doubling to 5 min, `CrashLoopBackOff` while
//! waiting). The pod leaves the stage for [`Stage::Finished`] once its phase is terminal.

use tokio::time::Instant;

use super::container::{CState, Term};
use super::{BACKOFF_INITIAL, EventType, PodWorker, Stage, format_pod, go_duration, next_backoff};
use crate::runtime::{ContainerInfo, ContainerState, RuntimeError};

impl PodWorker {
    /// Drives every regular and ephemeral container once; ends the stage on a terminal phase.
    pub(super) async fn step_main(&mut self) {
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

    /// Moves one container along: start it if it should run, observe it, probe it, and handle
    /// its exit (restart with back-off when `restartable`).
    pub(super) async fn drive(&mut self, i: usize, restartable: bool) {
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
                    t.backoff = Some(next_backoff(t.backoff));
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
                        let term = Term::not_located(self.ctx.clock.now(), Some(id));
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
                            t.backoff = Some(next_backoff(Some(b)));
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

    /// Records container `i`'s exit as the runtime reports it (nothing when `info` is not an
    /// exit): not ready, not started, no probes.
    pub(super) async fn exited(&mut self, i: usize, info: &ContainerInfo) {
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
}
