//! The Recreate strategy — upstream's `pkg/controller/deployment/recreate.go`: scale the old
//! ReplicaSets to zero, wait until none of their pods runs, then scale the new one up.

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::ResourceExt;

use super::Sync;
use super::util::{replicas_of, rs_replicas, rs_status};
use crate::controller_utils::{Error, SyncResult, controller_of};

impl Sync<'_> {
    /// Upstream's `rolloutRecreate`.
    pub(super) async fn rollout_recreate(&mut self) -> SyncResult {
        let (new_rs, mut old) = self.new_and_old(false).await?;
        let mut scaled_down = false;
        for rs in old.iter_mut().filter(|r| rs_replicas(r) > 0) {
            scaled_down |= self.scale_rs(rs, 0).await?;
        }
        if scaled_down || self.old_pods_running(&old, new_rs.as_ref()) {
            return self.sync_rollout_status(old, new_rs).await;
        }
        let new_rs = match new_rs {
            Some(n) => Some(n),
            None => self.new_and_old(true).await?.0,
        };
        let Some(mut new_rs) = new_rs else {
            return Err(Error::Retry("new replica set missing".into()));
        };
        let replicas = replicas_of(&self.d);
        self.scale_rs(&mut new_rs, replicas).await?;
        let current = self.original_status.clone();
        if self.complete(&current) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(old, Some(new_rs)).await
    }

    /// Upstream's `oldPodsRunning`.
    fn old_pods_running(&self, old: &[ReplicaSet], new_rs: Option<&ReplicaSet>) -> bool {
        if old.iter().map(|r| rs_status(r).0).sum::<i32>() > 0 {
            return true;
        }
        let ns = self.d.namespace().unwrap_or_default();
        let old_uids: Vec<String> = old.iter().filter_map(|r| r.uid()).collect();
        let new_uid = new_rs.and_then(|r| r.uid());
        self.ctx.pods.list_namespace(&ns).iter().any(|p| {
            controller_of(&p.metadata)
                .is_some_and(|r| old_uids.contains(&r.uid) && Some(&r.uid) != new_uid.as_ref())
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Failed" | "Succeeded")
                )
        })
    }
}
