//! The Deployment controller's shared sync steps — upstream's `pkg/controller/deployment/sync.go`:
//! finding (or creating) the new ReplicaSet and syncing the revision, scaling (proportionally
//! during a rollout), cleaning up old ReplicaSets, and computing and writing the status.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Sync;
use super::util::{
    DESIRED_REPLICAS, FOUND_NEW_RS, MAX_REPLICAS, MIN_AVAILABLE, MIN_UNAVAILABLE, NEW_RS_CREATED,
    PAUSED, POD_TEMPLATE_HASH, RESUMED, REVISION, TIMED_OUT, compute_hash, condition, created,
    equal_ignore_hash, is_recreate, max_surge, max_unavailable, new_condition, progress_deadline,
    replicas_of, revision_of, rs_replicas, rs_status, set_condition,
};
use crate::controller_utils::{self as cu, Error, SyncResult, controller_of, controller_ref};

impl Sync<'_> {
    /// Upstream's `checkPausedConditions`.
    pub(super) fn check_paused_conditions(&mut self) {
        if progress_deadline(&self.d).is_none() {
            return;
        }
        let paused = self.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
        let cur_reason = condition(self.status(), "Progressing").and_then(|c| c.reason.clone());
        let timed_out = cur_reason.as_deref() == Some(TIMED_OUT);
        if paused && !timed_out && cur_reason.as_deref() != Some(PAUSED) {
            set_condition(
                self.status(),
                new_condition(
                    "Progressing",
                    "Unknown",
                    PAUSED,
                    "Deployment is paused".into(),
                ),
            );
        } else if !paused && cur_reason.as_deref() == Some(PAUSED) {
            set_condition(
                self.status(),
                new_condition(
                    "Progressing",
                    "Unknown",
                    RESUMED,
                    "Deployment is resumed".into(),
                ),
            );
        }
    }

    /// Upstream's `getAllReplicaSetsAndSyncRevision`: the new ReplicaSet (created when asked and
    /// missing) and the old ones.
    pub(super) async fn new_and_old(
        &mut self,
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let rs_list = &self.rs;
        let template = self
            .d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let existing = rs_list
            .iter()
            .find(|rs| {
                rs.spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &template))
            })
            .cloned();
        let old: Vec<ReplicaSet> = rs_list
            .iter()
            .filter(|rs| existing.as_ref().is_none_or(|e| e.uid() != rs.uid()))
            .cloned()
            .collect();
        let max_old = old.iter().map(revision_of).max().unwrap_or(0);
        let new_revision = max_old + 1;
        let min_ready = self.d.spec.as_ref().and_then(|s| s.min_ready_seconds);

        if let Some(mut rs) = existing {
            let annotations_changed = self.set_new_rs_annotations(&mut rs, new_revision, true)?;
            let spec = rs.spec.get_or_insert_default();
            let min_ready_changed = spec.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0);
            if annotations_changed || min_ready_changed {
                spec.min_ready_seconds = min_ready;
                let patch = json!({
                    "metadata": { "annotations": rs.metadata.annotations, "resourceVersion": rs.resource_version() },
                    "spec": { "minReadySeconds": min_ready },
                });
                rs = self.patch_rs(&rs, &patch).await?;
            }
            let revision = rs.annotations().get(REVISION).cloned().unwrap_or_default();
            self.sync_revision(&revision).await?;
            if progress_deadline(&self.d).is_some()
                && condition(self.status(), "Progressing").is_none()
            {
                let msg = format!("Found new replica set \"{}\"", rs.name_any());
                set_condition(
                    self.status(),
                    new_condition("Progressing", "True", FOUND_NEW_RS, msg),
                );
            }
            return Ok((Some(rs), old));
        }
        if !create {
            return Ok((None, old));
        }

        let collision = self.d.status.as_ref().and_then(|s| s.collision_count);
        let hash = compute_hash(&template, collision);
        let mut rs_template = template.clone();
        rs_template
            .metadata
            .get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let mut selector: LabelSelector = self
            .d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_default()
            .insert(POD_TEMPLATE_HASH.into(), hash.clone());
        let ns = self.d.namespace().unwrap_or_default();
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", self.name())),
                namespace: Some(ns),
                owner_references: Some(vec![controller_ref(
                    "apps/v1",
                    "Deployment",
                    &self.name(),
                    &self.d.uid().unwrap_or_default(),
                )]),
                labels: rs_template.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: min_ready,
                selector,
                template: Some(rs_template),
            }),
            status: None,
        };
        let mut all: Vec<&ReplicaSet> = old.iter().collect();
        all.push(&rs);
        let count = self.new_rs_new_replicas(&all, &rs)?;
        if let Some(spec) = rs.spec.as_mut() {
            spec.replicas = Some(count);
        }
        self.set_new_rs_annotations(&mut rs, new_revision, false)?;
        match self.rs_api.create(&PostParams::default(), &rs).await {
            Ok(created) => {
                self.remember(&created);
                if progress_deadline(&self.d).is_some() {
                    let msg = format!("Created new replica set \"{}\"", created.name_any());
                    set_condition(
                        self.status(),
                        new_condition("Progressing", "True", NEW_RS_CREATED, msg),
                    );
                }
                self.sync_revision(&new_revision.to_string()).await?;
                Ok((Some(created), old))
            }
            Err(e) if cu::is_already_exists(&e) => {
                let name = rs.name_any();
                let found = self.rs_api.get(&name).await?;
                let ours = controller_of(&found.metadata)
                    .is_some_and(|r| Some(&r.uid) == self.d.uid().as_ref());
                let same = found
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| equal_ignore_hash(t, &template));
                if ours && same {
                    return Ok((Some(found), old));
                }
                // A hash collision: bump collisionCount so the next hash differs, and retry.
                let next = collision.unwrap_or(0).saturating_add(1);
                self.status().collision_count = Some(next);
                self.write_status().await?;
                Err(Error::Retry(format!(
                    "hash collision for replica set {name}"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Upstream's `SetDeploymentRevision`, written with a metadata patch.
    async fn sync_revision(&mut self, revision: &str) -> Result<(), Error> {
        if revision.is_empty()
            || self.d.annotations().get(REVISION).map(String::as_str) == Some(revision)
        {
            return Ok(());
        }
        let patch = json!({ "metadata": { "annotations": { REVISION: revision } } });
        let api: Api<Deployment> = Api::namespaced(
            self.ctx.client.clone(),
            &self.d.namespace().unwrap_or_default(),
        );
        api.patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.d
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(REVISION.into(), revision.into());
        Ok(())
    }

    /// Upstream's `isScalingEvent`: an active ReplicaSet was sized for another replica count.
    pub(super) async fn is_scaling_event(&mut self) -> Result<bool, Error> {
        let (new_rs, old) = self.new_and_old(false).await?;
        let replicas = replicas_of(&self.d);
        Ok(old
            .iter()
            .chain(new_rs.iter())
            .filter(|rs| rs_replicas(rs) > 0)
            .any(|rs| {
                rs.annotations()
                    .get(DESIRED_REPLICAS)
                    .and_then(|v| v.parse::<i32>().ok())
                    .is_some_and(|v| v != replicas)
            }))
    }

    /// Replaces the cached copy of `rs` after a write.
    fn remember(&mut self, rs: &ReplicaSet) {
        match self.rs.iter_mut().find(|r| r.uid() == rs.uid()) {
            Some(slot) => *slot = rs.clone(),
            None => self.rs.push(rs.clone()),
        }
    }

    /// Merge-patches `rs` (the patch carries its resourceVersion, so a stale copy conflicts) and
    /// caches the answer.
    async fn patch_rs(
        &mut self,
        rs: &ReplicaSet,
        patch: &serde_json::Value,
    ) -> Result<ReplicaSet, Error> {
        let patched = self
            .rs_api
            .patch(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        self.remember(&patched);
        Ok(patched)
    }

    /// Upstream's `scaleReplicaSet`: size and the replicas annotations in one update.
    pub(super) async fn scale_rs(&mut self, rs: &mut ReplicaSet, size: i32) -> Result<bool, Error> {
        let replicas = replicas_of(&self.d);
        let max = replicas + max_surge(&self.d)?;
        let ann = rs.annotations();
        let ann_needs = ann.get(DESIRED_REPLICAS) != Some(&replicas.to_string())
            || ann.get(MAX_REPLICAS) != Some(&max.to_string());
        if rs_replicas(rs) == size && !ann_needs {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {
                "annotations": { DESIRED_REPLICAS: replicas.to_string(), MAX_REPLICAS: max.to_string() },
                "resourceVersion": rs.resource_version(),
            },
            "spec": { "replicas": size },
        });
        *rs = self.patch_rs(rs, &patch).await?;
        Ok(true)
    }

    /// Upstream's `sync`: scaling (proportionally during a rollout) and status, for paused
    /// Deployments and scaling events.
    pub(super) async fn sync_scale(&mut self, paused: bool) -> SyncResult {
        let (new_rs, old) = self.new_and_old(false).await?;
        let (new_rs, old) = self.scale(new_rs, old).await?;
        if paused {
            self.cleanup(&old).await?;
        }
        let all: Vec<ReplicaSet> = old.into_iter().chain(new_rs.clone()).collect();
        let st = self.calculate_status(&all, new_rs.as_ref())?;
        self.d.status = Some(st);
        self.write_status().await
    }

    /// Upstream's `scale`.
    async fn scale(
        &mut self,
        mut new_rs: Option<ReplicaSet>,
        mut old: Vec<ReplicaSet>,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let replicas = replicas_of(&self.d);
        let active_count = old
            .iter()
            .chain(new_rs.iter())
            .filter(|rs| rs_replicas(rs) > 0)
            .count();
        // FindActiveOrLatest.
        let target: Option<(bool, usize)> = if active_count == 0 {
            if new_rs.is_some() {
                Some((true, 0))
            } else {
                (0..old.len())
                    .max_by_key(|i| created(&old[*i]))
                    .map(|i| (false, i))
            }
        } else if active_count == 1 {
            if new_rs.as_ref().is_some_and(|r| rs_replicas(r) > 0) {
                Some((true, 0))
            } else {
                old.iter()
                    .position(|r| rs_replicas(r) > 0)
                    .map(|i| (false, i))
            }
        } else {
            None
        };
        if let Some((is_new, i)) = target {
            let rs = if is_new {
                new_rs.as_mut()
            } else {
                old.get_mut(i)
            };
            if let Some(rs) = rs
                && rs_replicas(rs) != replicas
            {
                self.scale_rs(rs, replicas).await?;
            }
            return Ok((new_rs, old));
        }
        // IsSaturated: the new ReplicaSet has everything available; old active ones go to zero.
        let saturated = new_rs.as_ref().is_some_and(|rs| {
            rs_replicas(rs) == replicas
                && rs.annotations().get(DESIRED_REPLICAS) == Some(&replicas.to_string())
                && rs_status(rs).2 == replicas
        });
        if saturated {
            for rs in old.iter_mut().filter(|r| rs_replicas(r) > 0) {
                self.scale_rs(rs, 0).await?;
            }
            return Ok((new_rs, old));
        }
        if is_recreate(&self.d) {
            return Ok((new_rs, old));
        }
        // Proportional scaling of every active ReplicaSet.
        let surge = max_surge(&self.d)?;
        let mut all: Vec<ReplicaSet> = old
            .iter()
            .chain(new_rs.iter())
            .filter(|r| rs_replicas(r) > 0)
            .cloned()
            .collect();
        let total: i32 = all.iter().map(rs_replicas).sum();
        let allowed = if replicas > 0 { replicas + surge } else { 0 };
        let to_add = allowed - total;
        if to_add > 0 {
            // Larger first, newer first on ties.
            all.sort_by(|a, b| {
                rs_replicas(b)
                    .cmp(&rs_replicas(a))
                    .then_with(|| created(b).cmp(&created(a)))
            });
        } else {
            // Larger first, older first on ties.
            all.sort_by(|a, b| {
                rs_replicas(b)
                    .cmp(&rs_replicas(a))
                    .then_with(|| created(a).cmp(&created(b)))
            });
        }
        let status_replicas = self.original_status.replicas.unwrap_or(0);
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::with_capacity(all.len());
        for rs in &all {
            let current = rs_replicas(rs);
            let mut proportion = 0;
            if to_add != 0 && current != 0 && to_add != added {
                let fraction = if replicas == 0 {
                    -current
                } else {
                    let annotated = rs
                        .annotations()
                        .get(MAX_REPLICAS)
                        .and_then(|v| v.parse::<i32>().ok())
                        .unwrap_or(status_replicas);
                    if annotated == 0 {
                        0
                    } else {
                        let size =
                            f64::from(current) * f64::from(replicas + surge) / f64::from(annotated);
                        // Rounded half away from zero as Go's math.Round; sizes fit i32.
                        #[allow(clippy::cast_possible_truncation)]
                        let rounded = size.round() as i32;
                        rounded - current
                    }
                };
                let allowed_left = to_add - added;
                proportion = if to_add > 0 {
                    fraction.min(allowed_left)
                } else {
                    fraction.max(allowed_left)
                };
            }
            added += proportion;
            sizes.push(current + proportion);
        }
        if to_add != 0
            && let Some(first) = sizes.first_mut()
        {
            *first = (*first + to_add - added).max(0);
        }
        for (rs, size) in all.iter_mut().zip(sizes) {
            self.scale_rs(rs, size).await?;
        }
        // Put the scaled objects back in place.
        for rs in all {
            if new_rs.as_ref().is_some_and(|n| n.uid() == rs.uid()) {
                new_rs = Some(rs);
            } else if let Some(slot) = old.iter_mut().find(|o| o.uid() == rs.uid()) {
                *slot = rs;
            }
        }
        Ok((new_rs, old))
    }

    /// Upstream's `cleanupDeployment`: delete the oldest unused ReplicaSets beyond
    /// `revisionHistoryLimit`.
    pub(super) async fn cleanup(&self, old: &[ReplicaSet]) -> Result<(), Error> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = i32::try_from(cleanable.len()).unwrap_or(i32::MAX) - limit;
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision_of(a)
                .cmp(&revision_of(b))
                .then_with(|| created(a).cmp(&created(b)))
        });
        for rs in cleanable
            .into_iter()
            .take(usize::try_from(diff).unwrap_or(0))
        {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if rs_status(rs).0 != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed
            {
                continue;
            }
            match self
                .rs_api
                .delete(&rs.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if cu::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Upstream's `calculateStatus`, with the Available condition.
    pub(super) fn calculate_status(
        &self,
        all: &[ReplicaSet],
        new_rs: Option<&ReplicaSet>,
    ) -> Result<DeploymentStatus, Error> {
        let available: i32 = all.iter().map(|r| rs_status(r).2).sum();
        let total_spec: i32 = all.iter().map(rs_replicas).sum();
        let mut s = self.d.status.clone().unwrap_or_default();
        s.observed_generation = self.d.metadata.generation;
        s.replicas = Some(all.iter().map(|r| rs_status(r).0).sum());
        s.updated_replicas = Some(new_rs.map_or(0, |r| rs_status(r).0));
        s.ready_replicas = Some(all.iter().map(|r| rs_status(r).1).sum());
        s.available_replicas = Some(available);
        s.unavailable_replicas = Some((total_spec - available).max(0));
        if available >= replicas_of(&self.d) - max_unavailable(&self.d)? {
            set_condition(
                &mut s,
                new_condition(
                    "Available",
                    "True",
                    MIN_AVAILABLE,
                    "Deployment has minimum availability.".into(),
                ),
            );
        } else {
            set_condition(
                &mut s,
                new_condition(
                    "Available",
                    "False",
                    MIN_UNAVAILABLE,
                    "Deployment does not have minimum availability.".into(),
                ),
            );
        }
        Ok(s)
    }

    /// Writes the status built during this sync when it differs from the stored one.
    pub(super) async fn write_status(&mut self) -> SyncResult {
        let st = self.d.status.clone().unwrap_or_default();
        if st == self.original_status {
            return Ok(None);
        }
        let api: Api<Deployment> = Api::namespaced(
            self.ctx.client.clone(),
            &self.d.namespace().unwrap_or_default(),
        );
        let patch = json!({ "status": st });
        cu::merge_patch_status(&api, &self.name(), &patch).await?;
        self.original_status = st;
        Ok(None)
    }
}
