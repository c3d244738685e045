//! NodeAffinity: `spec.nodeSelector` and the required node affinity must match the node (filter);
//! preferred terms add their weights (score). Mirrors upstream
//! `pkg/scheduler/framework/plugins/nodeaffinity`; the matching itself is the shared
//! `tandem_core::scheduling::node_affinity` (upstream
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`), parsed once per scheduling cycle.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodSpec;
use tandem_core::scheduling::node_affinity::{
    NodeView, PreferredSchedulingTerms, RequiredNodeAffinity,
};

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Normalize, Plugin, Rejection, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream `nodeaffinity.ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// The pod's node selector and node affinity, parsed once per scheduling cycle (kept in the
/// [`CycleState`] itself: PodTopologySpread counts only the nodes it admits).
#[derive(Debug, Clone, Default)]
pub struct PodNodeAffinity<'a> {
    /// The node selector and required node affinity (upstream `GetRequiredNodeAffinity`).
    pub required: RequiredNodeAffinity<'a>,
    /// The preferred terms that can add to a score.
    pub preferred: PreferredSchedulingTerms<'a>,
}

impl<'a> PodNodeAffinity<'a> {
    /// Reads and parses the pod's selector and affinity.
    pub fn of(spec: Option<&'a PodSpec>) -> PodNodeAffinity<'a> {
        PodNodeAffinity {
            required: RequiredNodeAffinity::of(spec),
            preferred: PreferredSchedulingTerms::of(spec),
        }
    }

    /// Whether the node satisfies the nodeSelector and the required affinity (upstream
    /// `RequiredNodeAffinity.Match`).
    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.required.matches(view(node))
    }
}

/// The node as node affinity reads it.
pub fn view(node: &NodeInfo) -> NodeView<'_> {
    NodeView {
        name: &node.name,
        labels: &node.labels,
    }
}

/// The NodeAffinity plugin (filter, node-only; score of the preferred terms).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeAffinity;

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        if cs.node_affinity.matches(node) {
            Ok(())
        } else {
            Err(Rejection::new(
                ERR_REASON_POD,
                Code::UnschedulableAndUnresolvable,
            ))
        }
    }

    fn node_only(&self) -> bool {
        true
    }

    fn sign(&self, cs: &CycleState<'_>, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let required = &cs.node_affinity.required;
        serde_json::to_writer(out, &(required.node_selector(), required.terms()))
    }
}

impl ScorePlugin for NodeAffinity {
    /// A pod without preferred terms scores every node alike.
    fn pre_score(&self, cs: &mut CycleState<'_>) -> Status {
        if cs.node_affinity.preferred.is_empty() {
            Status::Skip
        } else {
            Status::Success
        }
    }

    /// The sum of the weights of the preferred terms the node matches.
    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, _: &Snapshot) -> i64 {
        cs.node_affinity.preferred.score(view(node))
    }

    fn normalize(&self) -> Normalize {
        Normalize::Default
    }
}
