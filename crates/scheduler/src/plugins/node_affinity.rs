//! NodeAffinity: `spec.nodeSelector` and the required node affinity must match the node (filter);
//! preferred terms add their weights (score). Mirrors upstream
//! `pkg/scheduler/framework/plugins/nodeaffinity`; the matching itself is the shared
//! `tandem_core::scheduling::node_affinity` (upstream
//! `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`), parsed once per scheduling cycle.

use k8s_openapi::api::core::v1::PodSpec;
use tandem_core::scheduling::node_affinity::{
    NodeView, PreferredSchedulingTerms, RequiredNodeAffinity,
};

use crate::framework::{Code, CycleState, Rejection};
use crate::snapshot::NodeInfo;

/// Upstream `nodeaffinity.ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// What of the pod this plugin reads, parsed once per scheduling cycle.
#[derive(Debug, Clone, Default)]
pub struct NodeAffinity<'a> {
    /// The node selector and required node affinity (upstream `GetRequiredNodeAffinity`).
    pub required: RequiredNodeAffinity<'a>,
    /// The preferred terms that can add to a score.
    pub preferred: PreferredSchedulingTerms<'a>,
}

impl<'a> NodeAffinity<'a> {
    /// Reads and parses the pod's selector and affinity.
    pub fn of(spec: Option<&'a PodSpec>) -> NodeAffinity<'a> {
        NodeAffinity {
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
    cs.node_affinity.preferred.score(view(node))
}
