//! The Deployment controller — upstream's `pkg/controller/deployment` (`sync.go`, `rolling.go`,
//! `recreate.go`, `progress.go`, `util/deployment_util.go`).
//!
//! A Deployment owns ReplicaSets named `<deployment>-<pod-template-hash>`; the one whose template
//! equals the Deployment's (ignoring the `pod-template-hash` label) is the *new* ReplicaSet, the
//! others are old. RollingUpdate scales the new one up within `maxSurge` and the old ones down
//! within `maxUnavailable`; Recreate scales the old ones to zero, waits for their pods to go, then
//! scales the new one up. Revisions live in the `deployment.kubernetes.io/revision` annotation;
//! `kubectl rollout undo` patches an old template back, which makes that ReplicaSet the new one
//! again with the next revision. Status and the Available/Progressing conditions follow upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::controller_ref_manager::ControllerRefManager;
use crate::controller_utils::{self as cu, Error, SyncResult, controller_of, controller_ref};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// Label on a Deployment's ReplicaSets and their pods, holding the template hash.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The revision of a ReplicaSet (and the Deployment's current one).
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// Revisions a ReplicaSet held before (when a rollback reused it).
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus maxSurge when the ReplicaSet was last scaled.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

const SKIP_COPY: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

// Condition reasons, as upstream's `deploymentutil`.
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

struct Ctx {
    client: kube::Client,
    deployments: Informer<Deployment>,
    replicasets: Informer<ReplicaSet>,
    pods: Informer<Pod>,
    queue: WorkQueue,
}

/// Runs the Deployment controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>, replicasets: Informer<ReplicaSet>) {
    let deployments = Informer::<Deployment>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        deployments,
        replicasets,
        pods,
        queue: WorkQueue::named("deployment"),
    });
    let mut d_events = ctx.deployments.subscribe();
    let mut rs_events = ctx.replicasets.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.deployments, &ctx.replicasets, &ctx.pods]).await;
    ctx.queue.add_keys(&ctx.deployments.list());
    ctx.queue
        .run_workers_for(4, "deployment", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = d_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = rs_events.recv() => {
                for rs in change.objects() {
                    let ns = rs.namespace().unwrap_or_default();
                    match controller_of(&rs.metadata) {
                        Some(r) if r.kind == "Deployment" => ctx.queue.add(format!("{ns}/{}", r.name)),
                        Some(_) => {}
                        None => {
                            for d in ctx.deployments.list_namespace(&ns) {
                                if selects(&d, rs.metadata.labels.as_ref()) {
                                    ctx.queue.add(queue_key(d.as_ref()));
                                }
                            }
                        }
                    }
                }
            }
            Some(change) = pod_events.recv() => {
                // Only Recreate waits on pods: a deleted pod may let it proceed.
                if change.new.is_none()
                    && let Some(pod) = &change.old
                    && let Some(r) = controller_of(&pod.metadata)
                    && r.kind == "ReplicaSet"
                {
                    let ns = pod.namespace().unwrap_or_default();
                    if let Some(rs) = ctx.replicasets.get(&ns, &r.name)
                        && let Some(dr) = controller_of(&rs.metadata)
                        && dr.kind == "Deployment"
                    {
                        ctx.queue.add(format!("{ns}/{}", dr.name));
                    }
                }
            }
            else => return,
        }
    }
}

fn selects(d: &Deployment, labels: Option<&BTreeMap<String, String>>) -> bool {
    d.spec.as_ref().is_some_and(|s| {
        !cu::selector_is_empty(&s.selector) && cu::selector_matches(&s.selector, labels)
    })
}

fn replicas_of(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status.as_ref().map_or((0, 0, 0), |s| {
        (
            s.replicas,
            s.ready_replicas.unwrap_or(0),
            s.available_replicas.unwrap_or(0),
        )
    })
}

fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

/// Upstream's `ResolveFenceposts`: (maxSurge, maxUnavailable) as pod counts; surge rounds up,
/// unavailable rounds down, and both zero means one unavailable.
pub fn resolve_fenceposts(d: &Deployment) -> Result<(i32, i32), Error> {
    let replicas = replicas_of(d);
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let surge = cu::scaled_value(ru.and_then(|r| r.max_surge.as_ref()), 25, replicas, true)?;
    let mut unavailable = cu::scaled_value(
        ru.and_then(|r| r.max_unavailable.as_ref()),
        25,
        replicas,
        false,
    )?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// Upstream's `MaxSurge`.
pub fn max_surge(d: &Deployment) -> Result<i32, Error> {
    if is_recreate(d) {
        return Ok(0);
    }
    Ok(resolve_fenceposts(d)?.0)
}

/// Upstream's `MaxUnavailable`.
pub fn max_unavailable(d: &Deployment) -> Result<i32, Error> {
    if is_recreate(d) || replicas_of(d) == 0 {
        return Ok(0);
    }
    Ok(resolve_fenceposts(d)?.1.min(replicas_of(d)))
}

fn fnv32a(data: &[u8], mut hash: u32) -> u32 {
    for b in data {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Upstream's `controller.ComputeHash`: an FNV-32a hash of the template (upstream hashes its
/// `spew` dump; tandem hashes its canonical JSON) and the collision count, rendered with
/// `rand.SafeEncodeString` so it never spells words and never looks like a number.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let mut h = fnv32a(&json, 0x811c_9dc5);
    if let Some(c) = collision_count {
        h = fnv32a(&c.to_le_bytes(), h);
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

fn without_hash(t: &PodTemplateSpec) -> serde_json::Value {
    let mut t = t.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(POD_TEMPLATE_HASH);
    }
    let mut v = serde_json::to_value(&t).unwrap_or_default();
    // An empty labels map and no labels are the same template.
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        if m.get("labels")
            .and_then(|l| l.as_object())
            .is_some_and(|l| l.is_empty())
        {
            m.remove("labels");
        }
        if m.is_empty() {
            v.as_object_mut().map(|o| o.remove("metadata"));
        }
    }
    v
}

/// Upstream's `EqualIgnoreHash`.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

fn revision_of(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn created(rs: &ReplicaSet) -> (Option<Time>, String) {
    (rs.metadata.creation_timestamp.clone(), rs.name_any())
}

fn condition<'a>(s: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    s.conditions.iter().flatten().find(|c| c.type_ == type_)
}

fn new_condition(type_: &str, status: &str, reason: &str, message: String) -> DeploymentCondition {
    let now = Time(cu::now());
    DeploymentCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// Upstream's `SetDeploymentCondition`: same status and reason is no change; same status keeps the
/// transition time.
fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
    let conds = s.conditions.get_or_insert_default();
    if let Some(cur) = conds.iter().find(|x| x.type_ == c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    conds.retain(|x| x.type_ != c.type_);
    conds.push(c);
}

fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = s.conditions.as_mut() {
        c.retain(|x| x.type_ != type_);
    }
}

fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

/// One sync's view: the Deployment (with the status being built) and its ReplicaSets.
struct Sync<'a> {
    ctx: &'a Ctx,
    d: Deployment,
    original_status: DeploymentStatus,
    rs_api: Api<ReplicaSet>,
    /// The Deployment's ReplicaSets, kept current with this sync's own writes.
    rs: Vec<ReplicaSet>,
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(d) = ctx.deployments.get(ns, name) else {
        return Ok(None);
    };
    let mut d = d.as_ref().clone();
    let original_status = d.status.clone().unwrap_or_default();
    let rs_api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), ns);
    let empty_selector = d
        .spec
        .as_ref()
        .is_none_or(|s| cu::selector_is_empty(&s.selector));
    if empty_selector {
        let generation = d.metadata.generation;
        if original_status.observed_generation != generation {
            let patch = json!({ "status": { "observedGeneration": generation } });
            Api::<Deployment>::namespaced(ctx.client.clone(), ns)
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        return Ok(None);
    }
    d.status.get_or_insert_default();
    let mut s = Sync {
        ctx,
        d,
        original_status,
        rs_api,
        rs: Vec::new(),
    };
    s.rs = s.claim_replicasets().await?;

    if s.d.metadata.deletion_timestamp.is_some() {
        let (new_rs, old) = s.new_and_old(false).await?;
        let all: Vec<ReplicaSet> = old.into_iter().chain(new_rs.clone()).collect();
        let st = s.calculate_status(&all, new_rs.as_ref())?;
        s.d.status = Some(st);
        return s.write_status().await;
    }

    s.check_paused_conditions();
    let paused = s.d.spec.as_ref().and_then(|x| x.paused).unwrap_or(false);
    if paused || s.is_scaling_event().await? {
        return s.sync_scale(paused).await;
    }
    if is_recreate(&s.d) {
        s.rollout_recreate().await
    } else {
        s.rollout_rolling().await
    }
}

impl Sync<'_> {
    fn name(&self) -> String {
        self.d.name_any()
    }

    fn status(&mut self) -> &mut DeploymentStatus {
        self.d.status.get_or_insert_default()
    }

    /// Upstream's `getReplicaSetsForDeployment` through `ClaimReplicaSets`.
    async fn claim_replicasets(&mut self) -> Result<Vec<ReplicaSet>, Error> {
        let ns = self.d.namespace().unwrap_or_default();
        let d = &self.d;
        let claimed = ControllerRefManager::new(self.ctx.client.clone(), d)
            .claim(self.ctx.replicasets.list_namespace(&ns), |rs| {
                selects(d, rs.metadata.labels.as_ref())
            })
            .await?;
        let mut owned: Vec<ReplicaSet> = claimed.into_iter().map(Arc::unwrap_or_clone).collect();
        owned.sort_by_key(created);
        Ok(owned)
    }

    /// Upstream's `checkPausedConditions`.
    fn check_paused_conditions(&mut self) {
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
    async fn new_and_old(
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
                rs = self
                    .rs_api
                    .patch(
                        &rs.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                self.remember(&rs);
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

    /// Upstream's `SetNewReplicaSetAnnotations`; returns whether anything changed.
    fn set_new_rs_annotations(
        &self,
        rs: &mut ReplicaSet,
        new_revision: i64,
        exists: bool,
    ) -> Result<bool, Error> {
        let mut changed = false;
        let d_annotations = self.d.metadata.annotations.clone().unwrap_or_default();
        let ann = rs.metadata.annotations.get_or_insert_default();
        for (k, v) in &d_annotations {
            if SKIP_COPY.contains(&k.as_str()) {
                continue;
            }
            if ann.get(k) != Some(v) {
                ann.insert(k.clone(), v.clone());
                changed = true;
            }
        }
        let old_revision = ann.get(REVISION).cloned().unwrap_or_default();
        let old_num: i64 = old_revision.parse().unwrap_or(0);
        if old_num < new_revision {
            ann.insert(REVISION.into(), new_revision.to_string());
            changed = true;
            if !old_revision.is_empty() {
                let hist = match ann.get(REVISION_HISTORY) {
                    Some(h) if !h.is_empty() => format!("{h},{old_revision}"),
                    _ => old_revision.clone(),
                };
                ann.insert(REVISION_HISTORY.into(), hist);
            }
        }
        if !exists {
            let replicas = replicas_of(&self.d);
            ann.insert(DESIRED_REPLICAS.into(), replicas.to_string());
            ann.insert(
                MAX_REPLICAS.into(),
                (replicas + max_surge(&self.d)?).to_string(),
            );
            changed = true;
        }
        Ok(changed)
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

    /// Upstream's `NewRSNewReplicas`.
    fn new_rs_new_replicas(&self, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> Result<i32, Error> {
        let replicas = replicas_of(&self.d);
        if is_recreate(&self.d) {
            return Ok(replicas);
        }
        let surge = max_surge(&self.d)?;
        let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
        let max_total = replicas + surge;
        let new_current = rs_replicas(new_rs);
        if current >= max_total {
            return Ok(new_current);
        }
        let up = (max_total - current).min(replicas - new_current).max(0);
        Ok(new_current + up)
    }

    /// Upstream's `isScalingEvent`: an active ReplicaSet was sized for another replica count.
    async fn is_scaling_event(&mut self) -> Result<bool, Error> {
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

    /// Upstream's `scaleReplicaSet`: size and the replicas annotations in one update.
    /// Replaces the cached copy of `rs` after a write.
    fn remember(&mut self, rs: &ReplicaSet) {
        match self.rs.iter_mut().find(|r| r.uid() == rs.uid()) {
            Some(slot) => *slot = rs.clone(),
            None => self.rs.push(rs.clone()),
        }
    }

    async fn scale_rs(&mut self, rs: &mut ReplicaSet, size: i32) -> Result<bool, Error> {
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
        *rs = self
            .rs_api
            .patch(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        self.remember(rs);
        Ok(true)
    }

    /// Upstream's `sync`: scaling (proportionally during a rollout) and status, for paused
    /// Deployments and scaling events.
    async fn sync_scale(&mut self, paused: bool) -> SyncResult {
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

    /// Upstream's `rolloutRolling`.
    async fn rollout_rolling(&mut self) -> SyncResult {
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

    /// Upstream's `rolloutRecreate`.
    async fn rollout_recreate(&mut self) -> SyncResult {
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

    /// Upstream's `cleanupDeployment`: delete the oldest unused ReplicaSets beyond
    /// `revisionHistoryLimit`.
    async fn cleanup(&self, old: &[ReplicaSet]) -> Result<(), Error> {
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
    fn calculate_status(
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

    /// Upstream's `DeploymentComplete`.
    fn complete(&self, s: &DeploymentStatus) -> bool {
        let r = replicas_of(&self.d);
        s.updated_replicas.unwrap_or(0) == r
            && s.replicas.unwrap_or(0) == r
            && s.available_replicas.unwrap_or(0) == r
            && s.observed_generation.unwrap_or(0) >= self.d.metadata.generation.unwrap_or(0)
    }

    /// Upstream's `syncRolloutStatus` with `requeueStuckDeployment`.
    async fn sync_rollout_status(
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

    /// Writes the status built during this sync when it differs from the stored one.
    async fn write_status(&mut self) -> SyncResult {
        let st = self.d.status.clone().unwrap_or_default();
        if st == self.original_status {
            return Ok(None);
        }
        let api: Api<Deployment> = Api::namespaced(
            self.ctx.client.clone(),
            &self.d.namespace().unwrap_or_default(),
        );
        let patch = json!({ "status": st });
        match api
            .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
        self.original_status = st;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_uses_the_safe_alphabet_and_changes_with_collisions() {
        let t = PodTemplateSpec::default();
        let a = compute_hash(&t, None);
        let b = compute_hash(&t, Some(1));
        assert_ne!(a, b);
        assert!(a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn templates_differing_only_in_hash_label_are_equal() {
        let mut a = PodTemplateSpec::default();
        let mut b = PodTemplateSpec::default();
        a.metadata = Some(ObjectMeta {
            labels: Some([("app".into(), "x".into())].into()),
            ..Default::default()
        });
        b.metadata = Some(ObjectMeta {
            labels: Some(
                [
                    ("app".into(), "x".into()),
                    (POD_TEMPLATE_HASH.into(), "abc".into()),
                ]
                .into(),
            ),
            ..Default::default()
        });
        assert!(equal_ignore_hash(&a, &b));
    }
}
