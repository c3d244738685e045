//! Rollout progress — upstream's `pkg/controller/deployment/progress.go`: the Progressing
//! condition (`syncRolloutStatus`, `DeploymentProgressing`, `DeploymentTimedOut`) and the requeue
//! of a rollout when its progress deadline passes (`requeueStuckDeployment`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DeploymentStatus, ReplicaSet};
use kube::ResourceExt;

use super::Sync;
use super::util::{
    NEW_RS_AVAILABLE, RS_UPDATED, TIMED_OUT, condition, new_condition, progress_deadline,
    remove_condition, set_condition,
};
use crate::controller_utils::{self as cu, SyncResult};

impl Sync<'_> {
    /// Upstream's `syncRolloutStatus` with `requeueStuckDeployment`.
    pub(super) async fn sync_rollout_status(
        &mut self,
        old: Vec<ReplicaSet>,
        new_rs: Option<ReplicaSet>,
    ) -> SyncResult {
        let all: Vec<ReplicaSet> = old.into_iter().chain(new_rs.clone()).collect();
        let mut st = self.calculate_status(&all, new_rs.as_ref())?;
        let deadline = progress_deadline(&self.d);
        if deadline.is_none() {
            remove_condition(&mut st, "Progressing");
        }
        let cur = condition(&st, "Progressing").cloned();
        let complete_already = st.replicas == st.updated_replicas
            && cur.as_ref().and_then(|c| c.reason.as_deref()) == Some(NEW_RS_AVAILABLE);
        let rs_name = new_rs.as_ref().map(|r| r.name_any());
        if deadline.is_some() && !complete_already {
            if self.complete(&st) {
                let msg = rs_name
                    .as_ref()
                    .map_or("Deployment has successfully progressed.".to_string(), |n| {
                        format!("ReplicaSet \"{n}\" has successfully progressed.")
                    });
                set_condition(
                    &mut st,
                    new_condition("Progressing", "True", NEW_RS_AVAILABLE, msg),
                );
            } else if self.progressing(&st) {
                let msg = rs_name
                    .as_ref()
                    .map_or("Deployment is progressing.".to_string(), |n| {
                        format!("ReplicaSet \"{n}\" is progressing.")
                    });
                let mut c = new_condition("Progressing", "True", RS_UPDATED, msg);
                if let Some(cur) = &cur {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    remove_condition(&mut st, "Progressing");
                }
                set_condition(&mut st, c);
            } else if self.timed_out(&st) {
                let msg = rs_name.as_ref().map_or(
                    format!("Deployment \"{}\" has timed out progressing.", self.name()),
                    |n| format!("ReplicaSet \"{n}\" has timed out progressing."),
                );
                set_condition(
                    &mut st,
                    new_condition("Progressing", "False", TIMED_OUT, msg),
                );
            }
        }
        let requeue = self.stuck_requeue(&st);
        self.d.status = Some(st);
        self.write_status().await?;
        Ok(requeue)
    }

    /// Upstream's `DeploymentProgressing`: compared with the status last written.
    fn progressing(&self, new: &DeploymentStatus) -> bool {
        let old = &self.original_status;
        let old_old = old.replicas.unwrap_or(0) - old.updated_replicas.unwrap_or(0);
        let new_old = new.replicas.unwrap_or(0) - new.updated_replicas.unwrap_or(0);
        new.updated_replicas.unwrap_or(0) > old.updated_replicas.unwrap_or(0)
            || new_old < old_old
            || new.ready_replicas.unwrap_or(0) > old.ready_replicas.unwrap_or(0)
            || new.available_replicas.unwrap_or(0) > old.available_replicas.unwrap_or(0)
    }

    /// Upstream's `DeploymentTimedOut`.
    fn timed_out(&self, s: &DeploymentStatus) -> bool {
        let Some(deadline) = progress_deadline(&self.d) else {
            return false;
        };
        let Some(c) = condition(s, "Progressing") else {
            return false;
        };
        match c.reason.as_deref() {
            Some(NEW_RS_AVAILABLE) => false,
            Some(TIMED_OUT) => true,
            _ => c
                .last_update_time
                .as_ref()
                .is_some_and(|t| t.0.as_second() + i64::from(deadline) < cu::now().as_second()),
        }
    }

    /// Upstream's `requeueStuckDeployment`: a rollout that is progressing is looked at again when
    /// its deadline passes, so it can be marked ProgressDeadlineExceeded.
    fn stuck_requeue(&self, s: &DeploymentStatus) -> Option<Duration> {
        let deadline = progress_deadline(&self.d)?;
        let c = condition(s, "Progressing")?;
        if c.status != "True" || c.reason.as_deref() != Some(RS_UPDATED) || self.complete(s) {
            return None;
        }
        let from = c.last_update_time.as_ref()?.0.as_second();
        let left = from + i64::from(deadline) - cu::now().as_second();
        Some(Duration::from_secs(left.max(0).unsigned_abs() + 1))
    }
}
