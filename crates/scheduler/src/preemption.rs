//! Preemption: when a pod fits nowhere, find a node where evicting pods of lower priority lets
//! it fit, and choose which pods to evict there.
//!
//! Mirrors upstream's default preemption (`pkg/scheduler/framework/plugins/defaultpreemption`:
//! `PodEligibleToPreemptOthers`, `SelectVictimsOnNode`, `filterPodsWithPDBViolation`,
//! `calculateNumCandidates`) and its evaluator (`pkg/scheduler/framework/preemption`:
//! `Preempt`, `findCandidates`, `DryRunPreemption`, `pickOneNodeForPreemption`):
//!
//! 1. A pod with `preemptionPolicy: Never`, or whose nominated node still has pods terminating
//!    because of an earlier preemption, does not preempt.
//! 2. Only nodes the filters rejected as `Unschedulable` (resources, ports, spreading,
//!    anti-affinity; not taints, selectors or OS) are tried. On each, every pod of lower
//!    priority is removed and the filters are run again; if the pod still does not fit the node
//!    is no candidate. Otherwise the removed pods are given back one at a time, most important
//!    first (higher priority, then earlier start), those whose PodDisruptionBudget would be
//!    violated before the others; a pod stays removed (a victim) only when giving it back makes
//!    the pod not fit.
//! 3. Among the candidates the node with the fewest budget violations wins, then the lowest
//!    highest victim priority, the lowest sum of victim priorities, the fewest victims, the
//!    latest start of the highest-priority victims, and finally the first found.
//!
//! PodDisruptionBudgets are a preference, as upstream: a node whose victims violate none is
//! preferred, but budgets never stop a preemption. The filters are the framework's own, run on a
//! copy of the snapshot with the victims removed (upstream runs them on a copy of the node with
//! its PreFilter state updated; here the PreFilter state is recomputed from the copy). Pure: no
//! I/O; the scheduling loop deletes the victims.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::framework::FitError;
use crate::labels::Selector;
use crate::plugin::Code;
use crate::profile::Profile;
use crate::snapshot::{PodInfo, PodKey, Snapshot, pod_key, pod_priority};

/// Upstream `DefaultPreemptionArgs.MinCandidateNodesPercentage`.
pub const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
/// Upstream `DefaultPreemptionArgs.MinCandidateNodesAbsolute`.
pub const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

/// Upstream's status for a node without pods of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
/// Upstream's status for a node whose rejection preemption cannot fix.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Why a pod with `preemptionPolicy: Never` does not preempt.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Why a pod whose earlier victims are still terminating does not preempt again.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";

/// What preemption needs of a PodDisruptionBudget.
#[derive(Debug, Clone)]
pub struct Pdb {
    pub namespace: String,
    /// `None` for a missing or empty selector, which matches no pod.
    pub selector: Option<Selector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// Names in `status.disruptedPods`: evictions the API server already counted.
    pub disrupted_pods: HashSet<String>,
}

impl Pdb {
    /// Reads a budget.
    pub fn new(pdb: &PodDisruptionBudget) -> Pdb {
        let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        let empty = sel.is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        });
        let status = pdb.status.as_ref();
        Pdb {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector: (!empty).then(|| Selector::new(sel)),
            disruptions_allowed: status.map_or(0, |s| s.disruptions_allowed),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }
}

/// A node where the pod fits once `victims` are gone.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub node: String,
    /// Most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// Victims whose eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

impl Candidate {
    /// The post-filter message of a successful preemption (upstream `DefaultPreemption`
    /// `PostFilter` since 1.36), shown after `preemption: ` in the FailedScheduling event.
    pub fn message(&self) -> String {
        format!(
            "found a potential placement for pod on node {}, preempting {} victims",
            self.node,
            self.victims.len()
        )
    }
}

/// Upstream `calculateNumCandidates`: how many candidates to find before choosing.
pub fn num_candidates(potential_nodes: usize) -> usize {
    (potential_nodes * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(potential_nodes)
}

/// The start time as upstream orders it: a pod not started yet counts as starting now, after
/// every pod that has.
fn start_key(t: Option<&Time>) -> (bool, Option<&Time>) {
    (t.is_none(), t)
}

/// Upstream `MoreImportantPod` as an ordering: `Less` when `a` is more important (higher
/// priority, then earlier start).
pub fn importance(a: &PodInfo, b: &PodInfo) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| start_key(a.start_time.as_ref()).cmp(&start_key(b.start_time.as_ref())))
}

/// Upstream `filterPodsWithPDBViolation`: splits `pods` (kept in order) into those whose
/// eviction would take a budget below zero and the others.
pub fn split_by_pdb_violation(
    pods: &[Arc<PodInfo>],
    pdbs: &[Pdb],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        if !pod.labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.namespace != pod.namespace {
                    continue;
                }
                let Some(sel) = &pdb.selector else {
                    continue;
                };
                if !sel.matches(&pod.labels) || pdb.disrupted_pods.contains(pod.name()) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pod.clone());
        } else {
            fine.push(pod.clone());
        }
    }
    (violating, fine)
}

/// Why preemption on one node failed: the filters' reasons and their code.
type NodeStatus = (Vec<String>, Code);

/// Runs the filters for `pod` on `node` in `snapshot`: `Ok` when it fits, else the reasons.
fn fits(snapshot: &Snapshot, pod: &Pod, node: &str, profile: &Profile) -> Result<(), NodeStatus> {
    let Some(info) = snapshot.node(node) else {
        return Err((
            vec![NOT_HELPFUL.to_string()],
            Code::UnschedulableAndUnresolvable,
        ));
    };
    let cs = profile.pre_filter(pod, snapshot);
    profile
        .run_filters(&cs, info)
        .map_err(|r| (r.reasons(&cs, info), r.code()))
}

/// Upstream `SelectVictimsOnNode`: the fewest, least important pods on `node` whose removal
/// lets `pod` fit, and how many of them violate a budget. `work` is changed while this runs and
/// restored before it returns.
pub fn select_victims_on_node(
    work: &mut Snapshot,
    pod: &Pod,
    node: &str,
    pdbs: &[Pdb],
    profile: &Profile,
) -> Result<(Vec<Arc<PodInfo>>, usize), NodeStatus> {
    let priority = pod_priority(pod);
    let mut potential: Vec<Arc<PodInfo>> = work
        .node(node)
        .map(|n| {
            n.pods
                .iter()
                .filter(|p| p.priority < priority)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if potential.is_empty() {
        return Err((
            vec![NO_VICTIMS.to_string()],
            Code::UnschedulableAndUnresolvable,
        ));
    }
    for p in &potential {
        work.remove_pod(&p.key);
    }
    let result = reprieve(work, pod, node, &mut potential, pdbs, profile);
    for p in &potential {
        if work.pod_node(&p.key).is_none() {
            work.add_pod(p.clone());
        }
    }
    result
}

/// With every pod of `potential` removed from `work`: checks that `pod` fits, then gives back
/// as many of them as it can (see [`select_victims_on_node`]); returns the rest.
fn reprieve(
    work: &mut Snapshot,
    pod: &Pod,
    node: &str,
    potential: &mut [Arc<PodInfo>],
    pdbs: &[Pdb],
    profile: &Profile,
) -> Result<(Vec<Arc<PodInfo>>, usize), NodeStatus> {
    fits(work, pod, node, profile)?;
    potential.sort_by(|a, b| importance(a, b));
    let (violating, fine) = split_by_pdb_violation(potential, pdbs);
    let mut victims = Vec::new();
    let mut violations = 0;
    for (group, counts) in [(&violating, true), (&fine, false)] {
        for p in group {
            work.add_pod(p.clone());
            if fits(work, pod, node, profile).is_err() {
                work.remove_pod(&p.key);
                victims.push(p.clone());
                if counts {
                    violations += 1;
                }
            }
        }
    }
    if !violating.is_empty() && !fine.is_empty() {
        victims.sort_by(|a, b| importance(a, b));
    }
    Ok((victims, violations))
}

/// Why preemption did not nominate a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPreempting {
    /// The pod may not preempt now (upstream `PodEligibleToPreemptOthers`); its nomination, if
    /// any, stands.
    NotEligible(&'static str),
    /// No node would fit the pod even without its lower-priority pods: upstream's FitError
    /// message over the nodes tried. Any nomination is cleared.
    NoCandidates(String),
}

impl NotPreempting {
    /// The post-filter message (after `preemption: `).
    pub fn message(&self) -> &str {
        match self {
            NotPreempting::NotEligible(m) => m,
            NotPreempting::NoCandidates(m) => m,
        }
    }
}

/// Upstream `PodEligibleToPreemptOthers`: `Err` with the reason when `pod` must not preempt.
/// `nominated` is the node the pod was nominated to by an earlier preemption, if any.
pub fn eligible(
    snapshot: &Snapshot,
    pod: &Pod,
    nominated: Option<&str>,
    fit: &FitError,
) -> Result<(), &'static str> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return Err(NOT_ELIGIBLE_NEVER);
    }
    let Some(nominated) = nominated.filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    let nodes = snapshot.nodes();
    let Some(pos) = nodes.iter().position(|n| n.name == nominated) else {
        // An absent node counts as unresolvable: preempt elsewhere.
        return Ok(());
    };
    if !fit.potential_nodes.contains(&pos) {
        return Ok(());
    }
    let priority = pod_priority(pod);
    let terminating = nodes[pos]
        .pods
        .iter()
        .any(|p| p.priority < priority && p.terminating_by_preemption);
    if terminating {
        return Err(NOT_ELIGIBLE_TERMINATING);
    }
    Ok(())
}

/// Upstream `pickOneNodeForPreemption` over `candidates` (not empty): the position of the best.
pub fn pick_one_node(candidates: &[Candidate]) -> usize {
    type Score = fn(&Candidate) -> i128;
    let scores: [Score; 5] = [
        |c| -(c.num_pdb_violations as i128),
        |c| {
            -i128::from(
                c.victims
                    .iter()
                    .map(|v| v.priority)
                    .max()
                    .unwrap_or(i32::MIN),
            )
        },
        // Offset by 2^31 so that pods of negative priority still add up.
        |c| {
            -c.victims
                .iter()
                .map(|v| i128::from(v.priority) + (1i128 << 31))
                .sum::<i128>()
        },
        |c| -(c.victims.len() as i128),
        |c| {
            // The latest of the earliest starts among the highest-priority victims.
            let top = c.victims.iter().map(|v| v.priority).max();
            c.victims
                .iter()
                .filter(|v| Some(v.priority) == top)
                .map(|v| {
                    v.start_time
                        .as_ref()
                        .map_or(i128::MAX, |t| t.0.as_nanosecond())
                })
                .min()
                .unwrap_or(i128::MIN)
        },
    ];
    let mut remaining: Vec<usize> = (0..candidates.len()).collect();
    for score in scores {
        let best = remaining
            .iter()
            .map(|&i| score(&candidates[i]))
            .max()
            .unwrap_or(0);
        remaining.retain(|&i| score(&candidates[i]) == best);
        if remaining.len() == 1 {
            break;
        }
    }
    remaining.first().copied().unwrap_or(0)
}

/// What [`preempt`] is asked about: the pod `fit` says fits nowhere in the snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Preemptor<'a> {
    pub pod: &'a Pod,
    /// The node an earlier preemption nominated it to.
    pub nominated: Option<&'a str>,
    pub fit: &'a FitError,
}

/// Upstream `Evaluator.Preempt` (without its API calls): the node and victims to preempt for
/// the pod, or why preemption does not help. `offset` rotates where the search starts among
/// the candidate nodes (upstream picks it at random).
pub fn preempt(
    snapshot: &Snapshot,
    preemptor: Preemptor<'_>,
    pdbs: &[Pdb],
    profile: &Profile,
    offset: usize,
) -> Result<Candidate, NotPreempting> {
    let Preemptor {
        pod,
        nominated,
        fit,
    } = preemptor;
    eligible(snapshot, pod, nominated, fit).map_err(NotPreempting::NotEligible)?;
    let nodes = snapshot.nodes();
    let potential = &fit.potential_nodes;
    let mut statuses: Vec<(usize, Vec<String>)> = Vec::new();
    let mut candidates = Vec::new();
    if !potential.is_empty() {
        let want = num_candidates(potential.len());
        let priority = pod_priority(pod);
        // Copied only once a node has pods of lower priority: with none anywhere (every pod
        // of equal priority, the common case) preemption costs one pass over the nodes.
        let mut work: Option<Snapshot> = None;
        let mut violating = 0;
        for k in 0..potential.len() {
            let i = potential[(offset + k) % potential.len()];
            let Some(node) = nodes.get(i) else {
                continue;
            };
            if !node.pods.iter().any(|p| p.priority < priority) {
                statuses.push((i, vec![NO_VICTIMS.to_string()]));
                continue;
            }
            let work = work.get_or_insert_with(|| snapshot.clone());
            match select_victims_on_node(work, pod, &node.name, pdbs, profile) {
                Ok((victims, _)) if victims.is_empty() => statuses.push((
                    i,
                    vec![format!(
                        "expected at least one victim pod on node \"{}\"",
                        node.name
                    )],
                )),
                Ok((victims, num_pdb_violations)) => {
                    if num_pdb_violations > 0 {
                        violating += 1;
                    }
                    candidates.push(Candidate {
                        node: node.name.clone(),
                        victims,
                        num_pdb_violations,
                    });
                    let non_violating = candidates.len() - violating;
                    if non_violating > 0 && candidates.len() >= want {
                        break;
                    }
                }
                Err((reasons, _)) => statuses.push((i, reasons)),
            }
        }
    }
    if candidates.is_empty() {
        let mut err = FitError {
            num_all_nodes: nodes.len(),
            ..FitError::default()
        };
        let mut reported = vec![false; nodes.len()];
        for (i, reasons) in statuses {
            if let Some(r) = reported.get_mut(i) {
                *r = true;
            }
            for reason in reasons {
                *err.reasons.entry(reason).or_insert(0) += 1;
            }
        }
        let absent = reported.iter().filter(|r| !**r).count();
        if absent > 0 {
            *err.reasons.entry(NOT_HELPFUL.to_string()).or_insert(0) += absent;
        }
        // Upstream formats this FitError without a post-filter part of its own.
        err.post_filter = Some(String::new());
        return Err(NotPreempting::NoCandidates(err.to_string()));
    }
    let best = pick_one_node(&candidates);
    Ok(candidates.swap_remove(best))
}

/// Pending pods nominated to nodes by their preemption (upstream's nominator in
/// `pkg/scheduler/backend/queue`). While a pod waits for its victims to go, scheduling attempts
/// of pods of its priority or lower count it as placed on its node
/// (`RunFilterPluginsWithNominatedPods`), so they do not take the room it preempted for.
#[derive(Debug, Default)]
pub struct Nominator {
    /// Each pod as if placed on its nominated node.
    pods: HashMap<PodKey, Arc<PodInfo>>,
}

impl Nominator {
    /// Records that `pod` is nominated to `node`.
    pub fn nominate(&mut self, pod: &Pod, node: &str) {
        self.pods
            .insert(pod_key(pod), Arc::new(PodInfo::new(pod, node)));
    }

    /// Forgets a pod (bound, deleted, or its nomination cleared).
    pub fn remove(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// The node `key` is nominated to.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.pods.get(key).map(|p| p.node_name.as_str())
    }

    /// Removes and returns the pods other than `key` nominated to `node` with a priority below
    /// `priority`: they may no longer fit there once `key` takes the room (upstream
    /// `getLowerPriorityNominatedPods`).
    pub fn displace(&mut self, key: &str, node: &str, priority: i32) -> Vec<PodKey> {
        let keys: Vec<PodKey> = self
            .pods
            .iter()
            .filter(|(k, p)| *k != key && p.node_name == node && p.priority < priority)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.pods.remove(k);
        }
        keys
    }

    /// Places in `snapshot`, for one scheduling attempt of the pod `key` of `priority`, every
    /// other nominated pod of equal or higher priority not accounted yet; give the result to
    /// [`Nominator::release`] after the attempt.
    pub fn hold(&self, snapshot: &mut Snapshot, key: &str, priority: i32) -> Vec<PodKey> {
        let mut held = Vec::new();
        for (k, p) in &self.pods {
            if k != key && p.priority >= priority && snapshot.pod_node(k).is_none() {
                snapshot.add_pod(p.clone());
                held.push(k.clone());
            }
        }
        held
    }

    /// Takes the pods [`Nominator::hold`] placed out of `snapshot` again.
    pub fn release(snapshot: &mut Snapshot, held: &[PodKey]) {
        for k in held {
            snapshot.remove_pod(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use serde_json::{Value, json};

    use super::*;
    use crate::framework::{Framework, FrameworkOptions, TieBreak};
    use crate::plugins::default_profile;

    /// A Linux node with `cpu` allocatable CPUs.
    fn node(name: &str, cpu: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}}
        }))
        .expect("fixture node")
    }

    /// A pod requesting `cpu` with `priority`, started at second `start` (none when negative).
    fn pod(name: &str, cpu: &str, priority: i32, start: i64) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "labels": {"app": name}},
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": cpu}}}]},
            "status": {}
        });
        if start >= 0 {
            v["status"]["startTime"] = json!(format!("2026-01-01T00:00:{start:02}Z"));
        }
        serde_json::from_value(v).expect("fixture pod")
    }

    fn with(mut p: Pod, patch: Value) -> Pod {
        let mut v = serde_json::to_value(&p).expect("pod to json");
        if let (Some(o), Some(extra)) = (v.as_object_mut(), patch.as_object()) {
            for (k, val) in extra {
                if let (Some(dst), Some(src)) =
                    (o.get_mut(k).and_then(Value::as_object_mut), val.as_object())
                {
                    dst.extend(src.clone());
                }
            }
        }
        p = serde_json::from_value(v).expect("patched pod");
        p
    }

    fn cluster(nodes: &[Node], pods: &[(&Pod, &str)]) -> Snapshot {
        let mut s = Snapshot::new();
        for n in nodes {
            s.upsert_node(n);
        }
        for (p, n) in pods {
            s.add_pod(Arc::new(PodInfo::new(p, n)));
        }
        s
    }

    fn fit(s: &Snapshot, p: &Pod) -> FitError {
        let mut fw = Framework::new(FrameworkOptions {
            tie_break: TieBreak::FirstInOrder,
            ..FrameworkOptions::default()
        });
        fw.schedule(s, p).expect_err("the preemptor must not fit")
    }

    fn run(s: &Snapshot, p: &Pod, pdbs: &[Pdb]) -> Result<Candidate, NotPreempting> {
        let f = fit(s, p);
        preempt(
            s,
            Preemptor {
                pod: p,
                nominated: None,
                fit: &f,
            },
            pdbs,
            &default_profile(true),
            0,
        )
    }

    fn names(c: &Candidate) -> Vec<&str> {
        c.victims.iter().map(|v| v.name()).collect()
    }

    fn pdb(selector: Value, allowed: i32) -> Pdb {
        Pdb::new(
            &serde_json::from_value(json!({
                "metadata": {"name": "b", "namespace": "default"},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1,
                    "desiredHealthy": 1, "expectedPods": 1}
            }))
            .expect("fixture pdb"),
        )
    }

    #[test]
    fn lower_priority_pods_are_evicted_fewest_first_and_the_rest_reprieved() {
        // 4 CPUs: a (1, started first), b (1), c (2). The preemptor needs 2: evicting c alone
        // is enough once a and b are reprieved.
        let (a, b, c) = (
            pod("a", "1", 0, 1),
            pod("b", "1", 0, 2),
            pod("c", "2", 0, 3),
        );
        let s = cluster(&[node("n1", "4")], &[(&a, "n1"), (&b, "n1"), (&c, "n1")]);
        let got = run(&s, &pod("high", "2", 100, -1), &[]).expect("a preemption candidate");
        assert_eq!(got.node, "n1");
        assert_eq!(names(&got), vec!["c"]);
        assert_eq!(got.num_pdb_violations, 0);
        assert_eq!(
            got.message(),
            "found a potential placement for pod on node n1, preempting 1 victims"
        );
    }

    #[test]
    fn more_important_pods_are_reprieved_first() {
        // Two 2-CPU pods of the same priority; the one started later is the victim.
        let (old, young) = (pod("old", "2", 0, 1), pod("young", "2", 0, 5));
        let s = cluster(&[node("n1", "4")], &[(&young, "n1"), (&old, "n1")]);
        let got = run(&s, &pod("high", "2", 100, -1), &[]).expect("a preemption candidate");
        assert_eq!(names(&got), vec!["young"]);
        // A higher-priority pod is kept over an older lower-priority one.
        let (low, mid) = (pod("low", "2", 0, 1), pod("mid", "2", 50, 5));
        let s = cluster(&[node("n1", "4")], &[(&low, "n1"), (&mid, "n1")]);
        assert_eq!(
            names(&run(&s, &pod("high", "2", 100, -1), &[]).expect("a preemption candidate")),
            vec!["low"]
        );
    }

    #[test]
    fn pods_of_equal_or_higher_priority_are_never_victims() {
        let same = pod("same", "4", 100, 1);
        let s = cluster(&[node("n1", "4")], &[(&same, "n1")]);
        let err = run(&s, &pod("high", "2", 100, -1), &[]).expect_err("no preemption");
        assert_eq!(
            err,
            NotPreempting::NoCandidates(
                "0/1 nodes are available: 1 No preemption victims found for incoming pod.".into()
            )
        );
    }

    #[test]
    fn a_node_that_stays_too_small_is_no_candidate_and_says_why() {
        let low = pod("low", "1", 0, 1);
        let s = cluster(&[node("n1", "2")], &[(&low, "n1")]);
        let err = run(&s, &pod("huge", "3", 100, -1), &[]).expect_err("no preemption");
        assert_eq!(
            err.message(),
            "0/1 nodes are available: 1 Insufficient cpu."
        );
    }

    #[test]
    fn unresolvable_nodes_are_not_tried() {
        let low = pod("low", "4", 0, 1);
        let tainted: Node = serde_json::from_value(json!({
            "metadata": {"name": "t", "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
        }))
        .expect("fixture node");
        let s = cluster(&[tainted], &[(&low, "t")]);
        let err = run(&s, &pod("high", "2", 100, -1), &[]).expect_err("no preemption");
        assert_eq!(
            err.message(),
            "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn preemption_policy_never_does_not_preempt() {
        let low = pod("low", "4", 0, 1);
        let s = cluster(&[node("n1", "4")], &[(&low, "n1")]);
        let never = with(
            pod("high", "2", 100, -1),
            json!({"spec": {"preemptionPolicy": "Never"}}),
        );
        assert_eq!(
            run(&s, &never, &[]).expect_err("no preemption"),
            NotPreempting::NotEligible(NOT_ELIGIBLE_NEVER)
        );
    }

    #[test]
    fn a_pod_waits_while_its_earlier_victims_terminate() {
        let low = pod("low", "1", 0, 1);
        let dying = with(
            pod("dying", "3", 0, 1),
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler"}]}}),
        );
        let s = cluster(&[node("n1", "4")], &[(&low, "n1"), (&dying, "n1")]);
        let high = pod("high", "2", 100, -1);
        let f = fit(&s, &high);
        let got = preempt(
            &s,
            Preemptor {
                pod: &high,
                nominated: Some("n1"),
                fit: &f,
            },
            &[],
            &default_profile(true),
            0,
        );
        assert_eq!(
            got.expect_err("no preemption"),
            NotPreempting::NotEligible(NOT_ELIGIBLE_TERMINATING)
        );
        // Not nominated there: it may preempt (the terminating pod is a victim like any other).
        assert!(run(&s, &high, &[]).is_ok());
    }

    #[test]
    fn budget_violating_pods_are_reprieved_first_and_counted() {
        // Either pod frees enough room; the one a budget protects is kept.
        let (guarded, free) = (pod("guarded", "2", 0, 5), pod("free", "2", 0, 1));
        let s = cluster(&[node("n1", "4")], &[(&guarded, "n1"), (&free, "n1")]);
        let budget = pdb(json!({"matchLabels": {"app": "guarded"}}), 0);
        let got = run(
            &s,
            &pod("high", "2", 100, -1),
            std::slice::from_ref(&budget),
        )
        .expect("a preemption candidate");
        assert_eq!(names(&got), vec!["free"]);
        assert_eq!(got.num_pdb_violations, 0);
        // When only the guarded pod's eviction helps, it goes anyway: budgets are a preference.
        let s = cluster(&[node("n1", "2")], &[(&guarded, "n1")]);
        let got = run(&s, &pod("high", "2", 100, -1), &[budget]).expect("a preemption candidate");
        assert_eq!(names(&got), vec!["guarded"]);
        assert_eq!(got.num_pdb_violations, 1);
    }

    #[test]
    fn empty_budget_selectors_match_nothing() {
        let p = Arc::new(PodInfo::new(&pod("a", "1", 0, 1), "n1"));
        let (violating, fine) = split_by_pdb_violation(&[p], &[pdb(json!({}), 0)]);
        assert!(violating.is_empty());
        assert_eq!(fine.len(), 1);
    }

    #[test]
    fn the_node_with_the_lowest_victim_priority_wins() {
        let (n1_pod, n2_pod) = (pod("mid", "4", 50, 1), pod("low", "4", 10, 1));
        let s = cluster(
            &[node("n1", "4"), node("n2", "4")],
            &[(&n1_pod, "n1"), (&n2_pod, "n2")],
        );
        let got = run(&s, &pod("high", "2", 100, -1), &[]).expect("a preemption candidate");
        assert_eq!(got.node, "n2");
    }

    #[test]
    fn ties_go_to_fewer_victims_then_to_the_latest_started() {
        // Same highest priority and sum: n1 needs two victims, n2 one (priority sums differ
        // by the offset per pod, so n2 also wins on the sum).
        let (a, b, c) = (
            pod("a", "2", 0, 1),
            pod("b", "2", 0, 1),
            pod("c", "4", 0, 1),
        );
        let s = cluster(
            &[node("n1", "4"), node("n2", "4")],
            &[(&a, "n1"), (&b, "n1"), (&c, "n2")],
        );
        assert_eq!(
            run(&s, &pod("high", "4", 100, -1), &[])
                .expect("a preemption candidate")
                .node,
            "n2"
        );
        // Everything equal but start times: the node whose victim started last wins.
        let (early, late) = (pod("early", "4", 0, 1), pod("late", "4", 0, 9));
        let s = cluster(
            &[node("n1", "4"), node("n2", "4")],
            &[(&early, "n1"), (&late, "n2")],
        );
        assert_eq!(
            run(&s, &pod("high", "4", 100, -1), &[])
                .expect("a preemption candidate")
                .node,
            "n2"
        );
    }

    #[test]
    fn fewer_budget_violations_beat_lower_priorities() {
        let (guarded, mid) = (pod("guarded", "4", 0, 1), pod("mid", "4", 50, 1));
        let s = cluster(
            &[node("n1", "4"), node("n2", "4")],
            &[(&guarded, "n1"), (&mid, "n2")],
        );
        let budget = pdb(json!({"matchLabels": {"app": "guarded"}}), 0);
        assert_eq!(
            run(&s, &pod("high", "4", 100, -1), &[budget])
                .expect("a preemption candidate")
                .node,
            "n2"
        );
    }

    #[test]
    fn the_snapshot_is_left_as_it_was() {
        let (a, b) = (pod("a", "2", 0, 1), pod("b", "2", 0, 2));
        let mut s = cluster(&[node("n1", "4")], &[(&a, "n1"), (&b, "n1")]);
        let high = pod("high", "4", 100, -1);
        select_victims_on_node(&mut s, &high, "n1", &[], &default_profile(true)).expect("victims");
        let n = s.node("n1").expect("node n1");
        assert_eq!(n.pods.len(), 2);
        assert_eq!(n.requested.milli_cpu, 4000);
    }

    #[test]
    fn fit_error_shows_the_preemption_outcome() {
        let low = pod("low", "4", 0, 1);
        let s = cluster(&[node("n1", "4")], &[(&low, "n1")]);
        let high = pod("high", "2", 100, -1);
        let mut f = fit(&s, &high);
        let c = run(&s, &high, &[]).expect("a preemption candidate");
        f.post_filter = Some(c.message());
        assert_eq!(
            f.to_string(),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential \
             placement for pod on node n1, preempting 1 victims"
        );
    }

    #[test]
    fn lower_priority_pods_do_not_take_the_nominated_room() {
        let s0 = cluster(&[node("n1", "4")], &[]);
        let high = pod("high", "3", 100, -1);
        let mut nominator = Nominator::default();
        nominator.nominate(&high, "n1");
        assert_eq!(nominator.node_of("default/high"), Some("n1"));
        let fw = Framework::new(FrameworkOptions::default());
        // A lower-priority pod sees the nominated pod on n1 and does not fit beside it.
        let mut s = s0.clone();
        let low = pod("low", "2", 10, -1);
        let held = nominator.hold(&mut s, "default/low", 10);
        assert_eq!(held, vec!["default/high".to_string()]);
        assert!(!fw.fits_node(&s, &low, "n1"));
        Nominator::release(&mut s, &held);
        assert!(s.node("n1").expect("node n1").pods.is_empty());
        // A pod of higher priority ignores the nomination, and so does the nominated pod.
        let mut s = s0.clone();
        let top = pod("top", "2", 500, -1);
        assert!(nominator.hold(&mut s, "default/top", 500).is_empty());
        assert!(fw.fits_node(&s, &top, "n1"));
        assert!(nominator.hold(&mut s, "default/high", 100).is_empty());
    }

    #[test]
    fn a_new_nomination_displaces_lower_priority_nominees_on_that_node() {
        let mut nominator = Nominator::default();
        nominator.nominate(&pod("low", "1", 10, -1), "n1");
        nominator.nominate(&pod("other", "1", 10, -1), "n2");
        nominator.nominate(&pod("peer", "1", 100, -1), "n1");
        let displaced = nominator.displace("default/high", "n1", 100);
        assert_eq!(displaced, vec!["default/low".to_string()]);
        assert_eq!(nominator.node_of("default/low"), None);
        assert_eq!(nominator.node_of("default/other"), Some("n2"));
        assert_eq!(nominator.node_of("default/peer"), Some("n1"));
    }

    #[test]
    fn num_candidates_follows_upstreams_bounds() {
        assert_eq!(num_candidates(5), 5);
        assert_eq!(num_candidates(500), 100);
        assert_eq!(num_candidates(5000), 500);
    }
}
