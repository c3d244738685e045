//! NodeResourcesFit (filter), LeastAllocated and BalancedAllocation (scores): a pod fits when its
//! requests (upstream `PodRequests`: init containers, sidecars, overhead) plus what the node's pods
//! already request stay within allocatable, and the node's `pods` capacity is not reached. Mirrors
//! upstream `pkg/scheduler/framework/plugins/noderesources` (`fit.go`, `least_allocated.go`,
//! `balanced_allocation.go`).

use std::sync::Arc;

use crate::cycle_state::CycleState;
use crate::plugin::{Code, FilterPlugin, Plugin, PreFilterPlugin, Rejection, ScorePlugin, Status};
use crate::resources::{Resources, pod_non_zero_requests, pod_requests};
use crate::snapshot::{NodeInfo, Snapshot};

/// Which requests do not fit; turned into upstream's reasons (`Too many pods`,
/// `Insufficient cpu`, …) only when a message is needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Insufficient {
    pub pods: bool,
    pub cpu: bool,
    pub memory: bool,
    pub ephemeral_storage: bool,
    pub scalar: Vec<String>,
}

impl Insufficient {
    /// Upstream's reasons, in upstream's order.
    pub fn reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.pods {
            out.push("Too many pods".to_string());
        }
        if self.cpu {
            out.push("Insufficient cpu".to_string());
        }
        if self.memory {
            out.push("Insufficient memory".to_string());
        }
        if self.ephemeral_storage {
            out.push("Insufficient ephemeral-storage".to_string());
        }
        out.extend(self.scalar.iter().map(|s| format!("Insufficient {s}")));
        out
    }
}

/// The NodeResourcesFit plugin (pre-filter, filter; LeastAllocated score, 0–100).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeResourcesFit;

/// The NodeResourcesBalancedAllocation plugin (score, 0–100).
#[derive(Debug, Clone, Copy, Default)]
pub struct BalancedAllocation;

/// The pod's requests (NodeResourcesFit's PreFilter state).
#[derive(Debug)]
struct Requests(Resources);

/// The pod's CPU and memory requests with upstream's non-zero defaults (the PreScore state of
/// both scores, computed by whichever runs first).
#[derive(Debug)]
struct NonZero((i64, i64));

/// Upstream `fitsRequest`: which of the pod's requests the node cannot hold.
fn insufficient(cs: &CycleState<'_>, node: &NodeInfo) -> Insufficient {
    let mut ins = Insufficient {
        pods: node.pods.len() as i64 + 1 > node.allowed_pods,
        ..Insufficient::default()
    };
    let computed;
    let req = match cs.read::<Requests>() {
        Some(Requests(r)) => r,
        None => {
            computed = pod_requests(cs.pod);
            &computed
        }
    };
    if !req.is_zero() {
        let (alloc, used) = (&node.allocatable, &node.requested);
        ins.cpu = req.milli_cpu > 0 && alloc.milli_cpu < req.milli_cpu + used.milli_cpu;
        ins.memory = req.memory > 0 && alloc.memory < req.memory + used.memory;
        ins.ephemeral_storage = req.ephemeral_storage > 0
            && alloc.ephemeral_storage < req.ephemeral_storage + used.ephemeral_storage;
        for (name, want) in req.scalar.iter().filter(|(_, v)| **v > 0) {
            let have = alloc.scalar.get(name).copied().unwrap_or(0);
            let used = used.scalar.get(name).copied().unwrap_or(0);
            if have < want + used {
                ins.scalar.push(name.clone());
            }
        }
    }
    ins
}

fn explain(cs: &CycleState<'_>, node: &NodeInfo, _: usize) -> Vec<String> {
    insufficient(cs, node).reasons()
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(&self, cs: &mut CycleState<'_>, _: &Snapshot) -> Status {
        cs.write(Requests(pod_requests(cs.pod)));
        Status::Success
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        if insufficient(cs, node) == Insufficient::default() {
            Ok(())
        } else {
            Err(Rejection::deferred(Code::Unschedulable, explain, 0))
        }
    }
}

/// Stores the pod's non-zero requests unless the other score plugin already did.
fn pre_score_non_zero(cs: &mut CycleState<'_>) -> Status {
    if cs.read::<NonZero>().is_none() {
        cs.write(NonZero(pod_non_zero_requests(cs.pod)));
    }
    Status::Success
}

fn fractions(cs: &CycleState<'_>, node: &NodeInfo) -> [(i64, i64); 2] {
    let non_zero = match cs.read::<NonZero>() {
        Some(NonZero(n)) => *n,
        None => pod_non_zero_requests(cs.pod),
    };
    [
        (
            node.non_zero_requested.0 + non_zero.0,
            node.allocatable.milli_cpu,
        ),
        (
            node.non_zero_requested.1 + non_zero.1,
            node.allocatable.memory,
        ),
    ]
}

impl ScorePlugin for NodeResourcesFit {
    fn pre_score(&self, cs: &mut CycleState<'_>) -> Status {
        pre_score_non_zero(cs)
    }

    /// LeastAllocated: the mean over CPU and memory (weight 1 each) of the free share left after
    /// placing the pod.
    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, _: &Snapshot) -> i64 {
        let mut sum = 0;
        for (requested, capacity) in fractions(cs, node) {
            if capacity > 0 && requested <= capacity {
                sum += (capacity - requested) * 100 / capacity;
            }
        }
        sum / 2
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }

    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl ScorePlugin for BalancedAllocation {
    fn pre_score(&self, cs: &mut CycleState<'_>) -> Status {
        pre_score_non_zero(cs)
    }

    /// `(1 − std-dev of the CPU and memory utilisation) × 100`, so nodes whose resources fill
    /// evenly are preferred.
    fn score(&self, cs: &CycleState<'_>, node: &NodeInfo, _: &Snapshot) -> i64 {
        let [cpu, mem] = fractions(cs, node).map(|(r, c)| {
            if c > 0 {
                (r as f64 / c as f64).min(1.0)
            } else {
                1.0
            }
        });
        let std = ((cpu - mem) / 2.0).abs();
        ((1.0 - std) * 100.0) as i64
    }
}
