//! NodeResourcesFit (filter), LeastAllocated and BalancedAllocation (scores): a pod fits when its
//! requests (upstream `PodRequests`: init containers, sidecars, overhead) plus what the node's pods
//! already request stay within allocatable, and the node's `pods` capacity is not reached. Mirrors
//! upstream `pkg/scheduler/framework/plugins/noderesources` (`fit.go`, `least_allocated.go`,
//! `balanced_allocation.go`).

use crate::framework::{CycleState, Rejection};
use crate::snapshot::NodeInfo;

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

/// Filter (upstream `fitsRequest`).
pub fn filter(cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    let mut ins = Insufficient {
        pods: node.pods.len() as i64 + 1 > node.allowed_pods,
        ..Insufficient::default()
    };
    let req = &cs.requests;
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
    if ins == Insufficient::default() {
        Ok(())
    } else {
        Err(Rejection::Insufficient(ins))
    }
}

fn fractions(cs: &CycleState<'_>, node: &NodeInfo) -> [(i64, i64); 2] {
    [
        (
            node.non_zero_requested.0 + cs.non_zero.0,
            node.allocatable.milli_cpu,
        ),
        (
            node.non_zero_requested.1 + cs.non_zero.1,
            node.allocatable.memory,
        ),
    ]
}

/// LeastAllocated score (0–100): the mean over CPU and memory (weight 1 each) of the free share
/// left after placing the pod.
pub fn least_allocated(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
    let mut sum = 0;
    for (requested, capacity) in fractions(cs, node) {
        if capacity > 0 && requested <= capacity {
            sum += (capacity - requested) * 100 / capacity;
        }
    }
    sum / 2
}

/// BalancedAllocation score (0–100): `(1 − std-dev of the CPU and memory utilisation) × 100`, so
/// nodes whose resources fill evenly are preferred.
pub fn balanced_allocation(cs: &CycleState<'_>, node: &NodeInfo) -> i64 {
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
