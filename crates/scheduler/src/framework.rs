//! The scheduling algorithm: for one pod, run the profile's filters over the nodes (node-only
//! ones first and remembered per pod signature, stopping once enough feasible nodes are found,
//! like upstream's `percentageOfNodesToScore`), score the feasible ones with the profile's
//! normalised, weighted plugins, and pick the best. When nothing fits, a [`FitError`] explains
//! why in upstream's words. The plugins themselves are behind the traits of [`crate::plugin`],
//! run by a [`Profile`].
//!
//! Mirrors upstream `pkg/scheduler/schedule_one.go` (`schedulePod`, `findNodesThatFitPod`,
//! `numFeasibleNodesToFind`, `prioritizeNodes`, `selectHost`). Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;

use crate::plugin::Code;
use crate::plugins::default_profile;
use crate::profile::Profile;
use crate::signature::StaticFits;
use crate::snapshot::Snapshot;

/// Why a pod fits nowhere: how many nodes there were and how often each reason was given.
/// Displays as upstream's `FitError` with the default preemption's post-filter message appended:
/// the outcome of [`crate::preemption`] once the scheduling loop has run it
/// ([`FitError::post_filter`]), else the summary upstream gives when no node has lower-priority
/// victims (what a framework-only caller such as the benchmark reports).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FitError {
    pub num_all_nodes: usize,
    /// Reason → number of nodes giving it.
    pub reasons: BTreeMap<String, usize>,
    /// Nodes whose rejection preemption could never fix.
    pub unresolvable_nodes: usize,
    /// Nodes whose rejection (resources, ports, anti-affinity, spread) evicting pods might fix.
    pub resolvable_nodes: usize,
    /// `spec.preemptionPolicy: Never`.
    pub preemption_never: bool,
    /// Positions (in [`Snapshot::nodes`] of the snapshot scheduled against) of the nodes whose
    /// rejection was `Unschedulable`: where preemption might help (upstream
    /// `NodesForStatusCode(Unschedulable)`).
    pub potential_nodes: Vec<usize>,
    /// The preemption outcome (upstream's `PostFilterMsg` without its `preemption: ` prefix),
    /// once preemption has run; empty for no message.
    pub post_filter: Option<String>,
}

fn histogram(counts: impl IntoIterator<Item = (String, usize)>) -> String {
    let mut parts: Vec<String> = counts
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    // Upstream sorts the formatted "<count> <reason>" strings, count included.
    parts.sort();
    parts.join(", ")
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.num_all_nodes == 0 {
            // Upstream `ErrNoNodesAvailable`.
            return f.write_str("no nodes available to schedule pods");
        }
        let n = self.num_all_nodes;
        write!(
            f,
            "0/{n} nodes are available: {}.",
            histogram(self.reasons.iter().map(|(r, c)| (r.clone(), *c)))
        )?;
        if let Some(msg) = &self.post_filter {
            if !msg.is_empty() {
                write!(f, " preemption: {msg}")?;
            }
            return Ok(());
        }
        if self.preemption_never {
            return f.write_str(" preemption: not eligible due to preemptionPolicy=Never.");
        }
        let pre = histogram([
            (
                "Preemption is not helpful for scheduling".to_string(),
                self.unresolvable_nodes,
            ),
            (
                "No preemption victims found for incoming pod".to_string(),
                self.resolvable_nodes,
            ),
        ]);
        write!(f, " preemption: 0/{n} nodes are available: {pre}.")
    }
}

impl std::error::Error for FitError {}

/// How ties between equally scored nodes are broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TieBreak {
    /// Uniformly at random among the best (upstream `selectHost`).
    #[default]
    Random,
    /// The first best node in evaluation order (reproducible; for tests).
    FirstInOrder,
}

/// Framework settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameworkOptions {
    /// tandem's OS placement and Windows build compatibility (on by default).
    pub os_placement: bool,
    /// Upstream `percentageOfNodesToScore`; `None` is upstream's adaptive default
    /// (50% − nodes/125, at least 5%, at least 100 nodes).
    pub percentage_of_nodes_to_score: Option<u32>,
    pub tie_break: TieBreak,
    /// Seed of the tie-breaking generator.
    pub seed: u64,
}

impl Default for FrameworkOptions {
    fn default() -> Self {
        FrameworkOptions {
            os_placement: true,
            percentage_of_nodes_to_score: None,
            tie_break: TieBreak::Random,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

/// A successful placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub node: String,
    /// Nodes the filters looked at.
    pub evaluated_nodes: usize,
    /// Nodes that passed them.
    pub feasible_nodes: usize,
}

/// The scheduling algorithm with its rotating start index and tie-breaking state.
#[derive(Debug, Clone)]
pub struct Framework {
    options: FrameworkOptions,
    next_start: usize,
    rng: u64,
    feasible: Vec<usize>,
    static_fits: StaticFits,
    profile: Profile,
}

impl Framework {
    /// A framework with `options`.
    pub fn new(options: FrameworkOptions) -> Framework {
        let rng = options.seed | 1;
        Framework {
            profile: default_profile(options.os_placement),
            options,
            next_start: 0,
            rng,
            feasible: Vec::new(),
            static_fits: StaticFits::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &FrameworkOptions {
        &self.options
    }

    /// The plugins this framework runs.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Upstream `numFeasibleNodesToFind`.
    pub fn num_feasible_nodes_to_find(&self, all: usize) -> usize {
        const MIN_FEASIBLE: usize = 100;
        const MIN_PERCENTAGE: usize = 5;
        let pct = match self.options.percentage_of_nodes_to_score {
            Some(p) => p as usize,
            None => 50usize.saturating_sub(all / 125).max(MIN_PERCENTAGE),
        };
        if all < MIN_FEASIBLE
            || pct >= 100
            || pct == 0 && self.options.percentage_of_nodes_to_score.is_some()
        {
            return all;
        }
        (all * pct / 100).max(MIN_FEASIBLE)
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: tie-breaking needs no more than this.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Finds the best node for `pod` in `snapshot`.
    pub fn schedule(&mut self, snapshot: &Snapshot, pod: &Pod) -> Result<Placement, FitError> {
        let nodes = snapshot.nodes();
        let preemption_never = pod
            .spec
            .as_ref()
            .and_then(|s| s.preemption_policy.as_deref())
            == Some("Never");
        if nodes.is_empty() {
            return Err(FitError {
                preemption_never,
                ..FitError::default()
            });
        }
        let profile = &self.profile;
        let mut cs = profile.pre_filter(pod, snapshot);
        let want = self.num_feasible_nodes_to_find(nodes.len());
        let n = nodes.len();
        let start = self.next_start % n;
        self.feasible.clear();
        let mut processed = n;
        let key = profile.signature(&cs);
        let mut known = self.static_fits.lookup(key, snapshot.node_generation(), n);
        for k in 0..n {
            let i = (start + k) % n;
            let node = &nodes[i];
            let fits = match known.get(i) {
                Some(node_fits) => node_fits && profile.run_placement_filters(&cs, node).is_ok(),
                None => {
                    let node_fits = profile.run_node_filters(&cs, node).is_ok();
                    known.set(i, node_fits);
                    node_fits && profile.run_placement_filters(&cs, node).is_ok()
                }
            };
            if fits {
                self.feasible.push(i);
                if self.feasible.len() >= want {
                    processed = k + 1;
                    break;
                }
            }
        }
        self.next_start = (start + processed) % n;
        if self.feasible.is_empty() {
            let mut err = FitError {
                num_all_nodes: n,
                preemption_never,
                ..FitError::default()
            };
            // Remembered rejections skipped their reasons; every node failed, so ask them all.
            for (i, node) in nodes.iter().enumerate() {
                let Err(r) = profile.run_filters(&cs, node) else {
                    continue;
                };
                for reason in r.reasons(&cs, node) {
                    *err.reasons.entry(reason).or_insert(0) += 1;
                }
                match r.code() {
                    Code::Unschedulable => {
                        err.resolvable_nodes += 1;
                        err.potential_nodes.push(i);
                    }
                    Code::UnschedulableAndUnresolvable => err.unresolvable_nodes += 1,
                }
            }
            return Err(err);
        }
        let feasible = std::mem::take(&mut self.feasible);
        let best = if feasible.len() == 1 {
            feasible[0]
        } else {
            let scores = self.profile.score_nodes(&mut cs, snapshot, &feasible);
            self.select(&feasible, &scores)
        };
        let placement = Placement {
            node: nodes[best].name.clone(),
            evaluated_nodes: processed,
            feasible_nodes: feasible.len(),
        };
        self.feasible = feasible;
        Ok(placement)
    }

    /// Whether `pod` passes every filter on the node named `node` (upstream
    /// `evaluateNominatedNode`: a pod nominated by preemption tries its nominated node first).
    pub fn fits_node(&self, snapshot: &Snapshot, pod: &Pod, node: &str) -> bool {
        let Some(info) = snapshot.node(node) else {
            return false;
        };
        let cs = self.profile.pre_filter(pod, snapshot);
        self.profile.run_filters(&cs, info).is_ok()
    }

    /// Picks the best of the feasible nodes by their scores (upstream `selectHost`).
    fn select(&mut self, feasible: &[usize], scores: &[i64]) -> usize {
        let mut best = feasible[0];
        let mut best_score = i64::MIN;
        let mut ties = 0u64;
        for (&i, &s) in feasible.iter().zip(scores) {
            if s > best_score {
                best_score = s;
                best = i;
                ties = 1;
            } else if s == best_score && self.options.tie_break == TieBreak::Random {
                ties += 1;
                if self.next_random().is_multiple_of(ties) {
                    best = i;
                }
            }
        }
        best
    }
}
