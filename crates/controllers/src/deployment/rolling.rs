//! The RollingUpdate strategy — upstream's `pkg/controller/deployment/rolling.go`: scale the new
//! ReplicaSet up within `maxSurge`, then the old ones down within `maxUnavailable`, unhealthy
//! replicas first.

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::Sync;
use super::util::{created, max_unavailable, replicas_of, rs_replicas, rs_status};
use crate::controller_utils::{Error, SyncResult};

impl Sync<'_> {
    /// Upstream's `rolloutRolling`.
    pub(super) async fn rollout_rolling(&mut self) -> SyncResult {
        let (new_rs, mut old) = self.new_and_old(true).await?;
        let Some(mut new_rs) = new_rs else {
            return Err(Error::Retry("new replica set missing".into()));
        };
        // reconcileNewReplicaSet
        let replicas = replicas_of(&self.d);
        let scaled_up = if rs_replicas(&new_rs) == replicas {
            false
        } else if rs_replicas(&new_rs) > replicas {
            self.scale_rs(&mut new_rs, replicas).await?
        } else {
            let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
            let count = self.new_rs_new_replicas(&all, &new_rs)?;
            self.scale_rs(&mut new_rs, count).await?
        };
        if !scaled_up {
            let scaled_down = self.reconcile_old(&mut old, &new_rs).await?;
            if !scaled_down {
                let current = self.original_status.clone();
                if self.complete(&current) {
                    self.cleanup(&old).await?;
                }
            }
        }
        self.sync_rollout_status(old, Some(new_rs)).await
    }

    /// Upstream's `reconcileOldReplicaSets` with `cleanupUnhealthyReplicas` and
    /// `scaleDownOldReplicaSetsForRollingUpdate`.
    async fn reconcile_old(
        &mut self,
        old: &mut [ReplicaSet],
        new_rs: &ReplicaSet,
    ) -> Result<bool, Error> {
        let old_pods: i32 = old.iter().map(rs_replicas).sum();
        if old_pods == 0 {
            return Ok(false);
        }
        let all_pods = old_pods + rs_replicas(new_rs);
        let replicas = replicas_of(&self.d);
        let min_available = replicas - max_unavailable(&self.d)?;
        let new_unavailable = rs_replicas(new_rs) - rs_status(new_rs).2;
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        old.sort_by_key(created);
        // Scale down unhealthy replicas of old ReplicaSets first.
        let mut cleaned = 0;
        for rs in old.iter_mut() {
            if cleaned >= max_scaled_down {
                break;
            }
            let (current, available) = (rs_replicas(rs), rs_status(rs).2);
            if current == 0 || current <= available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(current - available);
            self.scale_rs(rs, current - down).await?;
            cleaned += down;
        }
        // Then available ones, as far as minAvailable allows.
        let available: i32 = old
            .iter()
            .chain(std::iter::once(new_rs))
            .map(|r| rs_status(r).2)
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for rs in old.iter_mut() {
                if scaled >= total {
                    break;
                }
                let current = rs_replicas(rs);
                if current == 0 {
                    continue;
                }
                let down = current.min(total - scaled);
                self.scale_rs(rs, current - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }
}
