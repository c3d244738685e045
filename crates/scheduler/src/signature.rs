//! Pod scheduling signatures: pods that ask for the same placement (OS, Windows builds, node
//! name, tolerations, node selector and required node affinity) get the same answer from the
//! node-only filters (OS placement, NodeUnschedulable, NodeName, TaintToleration, NodeAffinity)
//! on every node, so those answers are remembered per signature until a node changes. Each
//! node-only filter writes its part of the signature
//! ([`FilterPlugin::sign`](crate::plugin::FilterPlugin::sign)); the
//! [`Profile`](crate::profile::Profile) joins them.
//!
//! This is the idea of upstream's opportunistic batching (KEP-5598, pod scheduling signatures):
//! the pods of one workload are alike, and re-checking their labels and taints against thousands
//! of nodes for each of them was most of the scheduling decision's cost in `tandem bench scheduler`
//! (half of it in node selector matching, by `perf`). Filters that depend on what is placed on a
//! node (resources, ports, spreading, inter-pod affinity) still run for every pod. Pure: no I/O.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

/// Signatures remembered at most; beyond this the memo starts over (pods with one-off
/// constraints, such as DaemonSet pods pinned to a node each, must not make it grow forever).
const MAX_SIGNATURES: usize = 1_024;

/// The node-only filter answers of one signature, one slot per node of the snapshot.
#[derive(Debug, Clone)]
struct Answers {
    /// `UNKNOWN` until the node has been checked for this signature.
    fits: Vec<u8>,
}

const UNKNOWN: u8 = 0;
const FITS: u8 = 1;
const REJECTED: u8 = 2;

/// Remembered node-only filter answers, valid for one node generation of the snapshot.
#[derive(Debug, Clone, Default)]
pub struct StaticFits {
    generation: u64,
    /// Signature → answers; `None` for a signature seen once (a pod whose constraints no other
    /// pod shares costs no more than it did without the memo).
    memo: HashMap<Vec<u8>, Option<Answers>>,
}

/// The answers for one scheduling cycle: a view of the memo entry of the pod's signature.
pub struct Lookup<'a> {
    answers: Option<&'a mut Answers>,
}

impl Lookup<'_> {
    /// The remembered answer for node `i`, if any.
    pub fn get(&self, i: usize) -> Option<bool> {
        match self.answers.as_ref()?.fits.get(i).copied() {
            Some(FITS) => Some(true),
            Some(REJECTED) => Some(false),
            _ => None,
        }
    }

    /// Remembers the answer for node `i`.
    pub fn set(&mut self, i: usize, fits: bool) {
        if let Some(slot) = self.answers.as_mut().and_then(|a| a.fits.get_mut(i)) {
            *slot = if fits { FITS } else { REJECTED };
        }
    }
}

impl StaticFits {
    /// The answers to use for a pod of signature `key` (`None`: no memo for this pod) on a
    /// snapshot of `nodes` nodes at node generation `generation`. Everything remembered for an
    /// older generation is dropped first: node positions and node-only fields may have changed.
    pub fn lookup(&mut self, key: Option<Vec<u8>>, generation: u64, nodes: usize) -> Lookup<'_> {
        if self.generation != generation || self.memo.len() >= MAX_SIGNATURES {
            self.memo.clear();
            self.generation = generation;
        }
        let Some(key) = key else {
            return Lookup { answers: None };
        };
        match self.memo.entry(key) {
            // A first sighting: nothing to remember yet.
            Entry::Vacant(vacant) => {
                vacant.insert(None);
                Lookup { answers: None }
            }
            // Seen before: from now on, remember.
            Entry::Occupied(occupied) => {
                let slot = occupied.into_mut();
                let answers = slot.get_or_insert_with(|| Answers {
                    fits: vec![UNKNOWN; nodes],
                });
                Lookup {
                    answers: Some(answers).filter(|a| a.fits.len() == nodes),
                }
            }
        }
    }
}
