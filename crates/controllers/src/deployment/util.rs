//! The Deployment controller's helpers — upstream's `pkg/controller/deployment/util/
//! deployment_util.go` (annotations, revisions, `ResolveFenceposts`, `NewRSNewReplicas`,
//! `EqualIgnoreHash`, `DeploymentComplete`, the condition helpers) and
//! `controller.ComputeHash`.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::Sync;
use crate::controller_utils::{self as cu, Error};

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

pub(super) fn replicas_of(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub(super) fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub(super) fn rs_status(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status.as_ref().map_or((0, 0, 0), |s| {
        (
            s.replicas,
            s.ready_replicas.unwrap_or(0),
            s.available_replicas.unwrap_or(0),
        )
    })
}

pub(super) fn is_recreate(d: &Deployment) -> bool {
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

pub(super) fn revision_of(rs: &ReplicaSet) -> i64 {
    rs.annotations()
        .get(REVISION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub(super) fn created(rs: &ReplicaSet) -> (Option<Time>, String) {
    (rs.metadata.creation_timestamp.clone(), rs.name_any())
}

pub(super) fn condition<'a>(
    s: &'a DeploymentStatus,
    type_: &str,
) -> Option<&'a DeploymentCondition> {
    s.conditions.iter().flatten().find(|c| c.type_ == type_)
}

pub(super) fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) -> DeploymentCondition {
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
pub(super) fn set_condition(s: &mut DeploymentStatus, mut c: DeploymentCondition) {
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

pub(super) fn remove_condition(s: &mut DeploymentStatus, type_: &str) {
    if let Some(c) = s.conditions.as_mut() {
        c.retain(|x| x.type_ != type_);
    }
}

pub(super) fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .filter(|s| *s != i32::MAX)
}

impl Sync<'_> {
    /// Upstream's `SetNewReplicaSetAnnotations`; returns whether anything changed.
    pub(super) fn set_new_rs_annotations(
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

    /// Upstream's `NewRSNewReplicas`.
    pub(super) fn new_rs_new_replicas(
        &self,
        all: &[&ReplicaSet],
        new_rs: &ReplicaSet,
    ) -> Result<i32, Error> {
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

    /// Upstream's `DeploymentComplete`.
    pub(super) fn complete(&self, s: &DeploymentStatus) -> bool {
        let r = replicas_of(&self.d);
        s.updated_replicas.unwrap_or(0) == r
            && s.replicas.unwrap_or(0) == r
            && s.available_replicas.unwrap_or(0) == r
            && s.observed_generation.unwrap_or(0) >= self.d.metadata.generation.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
