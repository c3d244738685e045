//! NodeAffinity: `spec.nodeSelector` and the required node affinity must match the node (filter);
//! preferred terms add their weights (score). Every operator (`In`, `NotIn`, `Exists`,
//! `DoesNotExist`, `Gt`, `Lt`) and `matchFields` on `metadata.name` are supported. Mirrors
//! upstream `pkg/scheduler/framework/plugins/nodeaffinity` and
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm};

use crate::framework::{Code, CycleState, Rejection};
use crate::snapshot::NodeInfo;

/// Upstream `nodeaffinity.ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// What of the pod this plugin reads, borrowed once per scheduling cycle.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeAffinity<'a> {
    pub node_selector: Option<&'a BTreeMap<String, String>>,
    /// `None` when the pod has no required node affinity.
    pub required: Option<&'a [NodeSelectorTerm]>,
    pub preferred: &'a [PreferredSchedulingTerm],
}

impl<'a> NodeAffinity<'a> {
    /// Reads the pod's selector and affinity.
    pub fn of(spec: Option<&'a k8s_openapi::api::core::v1::PodSpec>) -> NodeAffinity<'a> {
        let Some(spec) = spec else {
            return NodeAffinity::default();
        };
        let na = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        NodeAffinity {
            node_selector: spec.node_selector.as_ref(),
            required: na
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| r.node_selector_terms.as_slice()),
            preferred: na
                .and_then(|n| {
                    n.preferred_during_scheduling_ignored_during_execution
                        .as_deref()
                })
                .unwrap_or_default(),
        }
    }

    /// Whether the node satisfies the nodeSelector and the required affinity (upstream
    /// `RequiredNodeAffinity.Match`).
    pub fn matches(&self, node: &NodeInfo) -> bool {
        if let Some(sel) = self.node_selector
            && !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return false;
        }
        match self.required {
            None => true,
            Some(terms) => terms.iter().any(|t| term_matches(t, node)),
        }
    }
}

/// Whether one node selector term matches the node (the shared check in `tandem_core`).
pub fn term_matches(term: &NodeSelectorTerm, node: &NodeInfo) -> bool {
    tandem_core::node_selector::term_matches(term, &node.labels, &node.name)
}

/// Filter.
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    if cs.node_affinity.matches(node) {
        Ok(())
    } else {
        Err(Rejection::Reason(
            ERR_REASON_POD,
            Code::UnschedulableAndUnresolvable,
        ))
    }
}

/// Score (raw): the sum of the weights of the preferred terms the node matches.
pub fn score(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
    cs.node_affinity
        .preferred
        .iter()
        .filter(|p| p.weight != 0 && term_matches(&p.preference, node))
        .map(|p| i64::from(p.weight))
        .sum()
}
