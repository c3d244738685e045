//! PodTopologySpread, `whenUnsatisfiable: DoNotSchedule` constraints: placing the pod in a
//! domain must not make that domain's matching-pod count exceed the global minimum by more than
//! `maxSkew`. Domains are the values of `topologyKey` on nodes that pass the pod's node
//! affinity/selector (`nodeAffinityPolicy: Honor`, the default); `minDomains` treats a cluster
//! with fewer domains as having a minimum of zero. Mirrors upstream
//! `pkg/scheduler/framework/plugins/podtopologyspread` (`filtering.go`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::cycle_state::CycleState;
use crate::labels::Selector;
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, Status};
use crate::plugins::node_affinity::PodNodeAffinity;
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream `ErrReasonConstraintsNotMatch`.
pub const ERR_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
/// Upstream `ErrReasonNodeLabelNotMatch`.
pub const ERR_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

#[derive(Debug)]
struct Constraint {
    max_skew: i64,
    topology_key: String,
    selector: Selector,
    min_domains: usize,
    self_match: bool,
    counts: HashMap<String, i64>,
    min: i64,
}

/// Per-pod state: each hard constraint with its per-domain counts.
#[derive(Debug, Default)]
struct PreState {
    constraints: Vec<Constraint>,
}

/// The PodTopologySpread plugin (pre-filter, filter; hard constraints only).
#[derive(Debug, Clone, Copy, Default)]
pub struct PodTopologySpread;

/// Each hard constraint with its per-domain counts: `None` when the pod has no
/// `DoNotSchedule` constraint.
fn pre_filter(
    pod: &Pod,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    affinity: &PodNodeAffinity<'_>,
    snapshot: &Snapshot,
) -> Option<PreState> {
    let raw = pod.spec.as_ref()?.topology_spread_constraints.as_ref()?;
    let mut constraints: Vec<Constraint> = raw
        .iter()
        .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
        .map(|c| {
            let selector = Selector::new(c.label_selector.as_ref());
            Constraint {
                max_skew: i64::from(c.max_skew.max(1)),
                topology_key: c.topology_key.clone(),
                self_match: selector.matches(labels),
                selector,
                min_domains: c.min_domains.map_or(1, |m| m.max(1) as usize),
                counts: HashMap::new(),
                min: 0,
            }
        })
        .collect();
    if constraints.is_empty() {
        return None;
    }
    for node in snapshot.nodes() {
        if !affinity.matches(node)
            || !constraints
                .iter()
                .all(|c| node.labels.contains_key(&c.topology_key))
        {
            continue;
        }
        for c in &mut constraints {
            let Some(v) = node.labels.get(&c.topology_key) else {
                continue;
            };
            let matching = node
                .pods
                .iter()
                .filter(|p| p.namespace == namespace && c.selector.matches(&p.labels))
                .count();
            *c.counts.entry(v.clone()).or_insert(0) += matching as i64;
        }
    }
    for c in &mut constraints {
        c.min = if c.counts.len() < c.min_domains {
            0
        } else {
            c.counts.values().copied().min().unwrap_or(0)
        };
    }
    Some(PreState { constraints })
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for PodTopologySpread {
    /// A pod without hard constraints skips the filter.
    fn pre_filter(&self, cs: &mut CycleState<'_>, snapshot: &Snapshot) -> Status {
        match pre_filter(cs.pod, cs.namespace, cs.labels, &cs.node_affinity, snapshot) {
            Some(state) => {
                cs.write(state);
                Status::Success
            }
            None => Status::Skip,
        }
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        let Some(st) = cs.read::<PreState>() else {
            return Ok(());
        };
        for c in &st.constraints {
            let Some(v) = node.labels.get(&c.topology_key) else {
                return Err(Rejection::new(
                    ERR_MISSING_LABEL,
                    Code::UnschedulableAndUnresolvable,
                ));
            };
            let here = c.counts.get(v).copied().unwrap_or(0);
            if here + i64::from(c.self_match) - c.min > c.max_skew {
                return Err(Rejection::new(ERR_CONSTRAINTS, Code::Unschedulable));
            }
        }
        Ok(())
    }
}
