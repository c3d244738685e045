//! InterPodAffinity, required terms: a pod with required affinity lands only in topology domains
//! already holding pods that match all its terms (or anywhere its own terms allow, when it is the
//! first of its kind); required anti-affinity keeps it out of domains holding matching pods; and
//! existing pods' anti-affinity keeps matching newcomers out of their domains. Mirrors upstream
//! `pkg/scheduler/framework/plugins/interpodaffinity` (`filtering.go`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm};

use crate::cycle_state::CycleState;
use crate::labels::Selector;
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const ERR_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Upstream `ErrReasonAffinityRulesNotMatch`.
pub const ERR_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream `ErrReasonAntiAffinityRulesNotMatch`.
pub const ERR_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// A compiled pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// Namespaces the term looks in; ignored when `all_namespaces`.
    pub namespaces: Vec<String>,
    /// An empty `namespaceSelector` selects every namespace.
    pub all_namespaces: bool,
    pub selector: Selector,
    pub topology_key: String,
}

impl AffinityTerm {
    /// Compiles a term of a pod in namespace `own_ns`: no namespaces and no namespace selector
    /// mean the pod's own namespace. A non-empty `namespaceSelector` would need namespace labels,
    /// which the scheduler does not watch; such a selector adds no namespaces.
    pub fn new(term: &PodAffinityTerm, own_ns: &str) -> AffinityTerm {
        let mut namespaces = term.namespaces.clone().unwrap_or_default();
        let all_namespaces = term.namespace_selector.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        });
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.push(own_ns.to_string());
        }
        AffinityTerm {
            namespaces,
            all_namespaces,
            selector: Selector::new(term.label_selector.as_ref()),
            topology_key: term.topology_key.clone(),
        }
    }

    /// Whether a pod in `namespace` with `labels` is one the term is about.
    pub fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        (self.all_namespaces || self.namespaces.iter().any(|n| n == namespace))
            && self.selector.matches(labels)
    }
}

type TopologyPair = (String, String);

/// What the filter needs, computed once per pod from every placed pod.
#[derive(Debug, Default)]
struct PreState {
    affinity: Vec<AffinityTerm>,
    anti_affinity: Vec<AffinityTerm>,
    affinity_counts: HashMap<TopologyPair, i64>,
    anti_affinity_counts: HashMap<TopologyPair, i64>,
    existing_anti_affinity_counts: HashMap<TopologyPair, i64>,
    self_matches_all_affinity: bool,
}

fn terms(pod: &Pod, anti: bool, ns: &str) -> Vec<AffinityTerm> {
    let Some(a) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return Vec::new();
    };
    let raw = if anti {
        a.pod_anti_affinity.as_ref().and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    } else {
        a.pod_affinity.as_ref().and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    };
    raw.iter()
        .flat_map(|v| v.iter())
        .map(|t| AffinityTerm::new(t, ns))
        .collect()
}

/// The InterPodAffinity plugin (pre-filter, filter; required terms only).
#[derive(Debug, Clone, Copy, Default)]
pub struct InterPodAffinity;

/// The filter's state: `None` when neither the pod nor any placed pod has required
/// (anti-)affinity, so the filter costs nothing.
fn pre_filter(
    pod: &Pod,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    snapshot: &Snapshot,
) -> Option<PreState> {
    let affinity = terms(pod, false, namespace);
    let anti_affinity = terms(pod, true, namespace);
    let existing = snapshot.pods_with_required_anti_affinity() > 0;
    if affinity.is_empty() && anti_affinity.is_empty() && !existing {
        return None;
    }
    let mut st = PreState {
        self_matches_all_affinity: !affinity.is_empty()
            && affinity.iter().all(|t| t.matches(namespace, labels)),
        affinity,
        anti_affinity,
        ..PreState::default()
    };
    for node in snapshot.nodes() {
        if existing && node.pods_with_required_anti_affinity > 0 {
            for p in node
                .pods
                .iter()
                .filter(|p| !p.required_anti_affinity.is_empty())
            {
                for t in p
                    .required_anti_affinity
                    .iter()
                    .filter(|t| t.matches(namespace, labels))
                {
                    if let Some(v) = node.labels.get(&t.topology_key) {
                        *st.existing_anti_affinity_counts
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_insert(0) += 1;
                    }
                }
            }
        }
        if st.affinity.is_empty() && st.anti_affinity.is_empty() {
            continue;
        }
        for p in &node.pods {
            if !st.affinity.is_empty()
                && st
                    .affinity
                    .iter()
                    .all(|t| t.matches(&p.namespace, &p.labels))
            {
                for t in &st.affinity {
                    if let Some(v) = node.labels.get(&t.topology_key) {
                        *st.affinity_counts
                            .entry((t.topology_key.clone(), v.clone()))
                            .or_insert(0) += 1;
                    }
                }
            }
            for t in st
                .anti_affinity
                .iter()
                .filter(|t| t.matches(&p.namespace, &p.labels))
            {
                if let Some(v) = node.labels.get(&t.topology_key) {
                    *st.anti_affinity_counts
                        .entry((t.topology_key.clone(), v.clone()))
                        .or_insert(0) += 1;
                }
            }
        }
    }
    Some(st)
}

fn count(map: &HashMap<TopologyPair, i64>, key: &str, value: &str) -> i64 {
    // Lookups by borrowed pair without allocating: scan (the maps hold one entry per domain).
    map.iter()
        .filter(|((k, v), _)| k == key && v == value)
        .map(|(_, c)| *c)
        .sum()
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(&self, cs: &mut CycleState<'_>, snapshot: &Snapshot) -> Status {
        match pre_filter(cs.pod, cs.namespace, cs.labels, snapshot) {
            Some(state) => {
                cs.write(state);
                Status::Success
            }
            None => Status::Skip,
        }
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        filter(cs, node)
    }
}

fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    let Some(st) = cs.read::<PreState>() else {
        return Ok(());
    };
    let existing_blocks = st
        .existing_anti_affinity_counts
        .iter()
        .any(|((k, v), c)| *c > 0 && node.labels.get(k) == Some(v));
    if existing_blocks {
        return Err(Rejection::new(
            ERR_EXISTING_ANTI_AFFINITY,
            Code::Unschedulable,
        ));
    }
    if !st.affinity.is_empty() {
        let mut pods_exist = true;
        for t in &st.affinity {
            match node.labels.get(&t.topology_key) {
                Some(v) => {
                    if count(&st.affinity_counts, &t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                None => {
                    return Err(Rejection::new(
                        ERR_AFFINITY,
                        Code::UnschedulableAndUnresolvable,
                    ));
                }
            }
        }
        let first_of_its_kind = st.affinity_counts.is_empty() && st.self_matches_all_affinity;
        if !pods_exist && !first_of_its_kind {
            return Err(Rejection::new(
                ERR_AFFINITY,
                Code::UnschedulableAndUnresolvable,
            ));
        }
    }
    for t in &st.anti_affinity {
        if let Some(v) = node.labels.get(&t.topology_key)
            && count(&st.anti_affinity_counts, &t.topology_key, v) > 0
        {
            return Err(Rejection::new(ERR_ANTI_AFFINITY, Code::Unschedulable));
        }
    }
    Ok(())
}
