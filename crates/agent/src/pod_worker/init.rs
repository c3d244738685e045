//! The init stage, [`Stage::Init`]: init containers run one at a time, in order, each to a
//! successful exit before the next starts; a restartable init container (`restartPolicy:
//! Always`, a sidecar) only needs to have started, and keeps being managed in every later stage
//! (upstream `kuberuntime` `computeInitContainerActions`). Under `restartPolicy: Never` a failed
//! init container fails the pod.

use super::container::CState;
use super::{PodWorker, Stage};

impl PodWorker {
    /// Keeps the sidecars that have started running (restarts them when they exit).
    pub(super) async fn drive_sidecars(&mut self) {
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
    }

    /// Moves the init containers along, from the stage's current one: the stage advances past
    /// each that completed (or, for a sidecar, started) and stops at the first still running or
    /// waiting; [`Stage::Main`] follows the last.
    pub(super) async fn step_init(&mut self) {
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
    }
}
