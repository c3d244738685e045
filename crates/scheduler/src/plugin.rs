//! The scheduling framework's extension points as traits a plugin implements: PreFilter, Filter,
//! PreScore/Score (with score normalisation), and what a filter answers when a node does not fit.
//! A plugin implements the points it takes part in and keeps what it computes for one pod in the
//! [`CycleState`] under its own state type; the [`Profile`](crate::profile::Profile) runs the
//! registered plugins in order at each point.
//!
//! Mirrors upstream `pkg/scheduler/framework/interface.go` (`Plugin`, `PreFilterPlugin`,
//! `FilterPlugin`, `PreScorePlugin`, `ScorePlugin` with `ScoreExtensions`, `Status` with its
//! `Code`s). tandem has no Reserve/Permit points; PostFilter is [`crate::preemption`] and PreBind
//! is [`crate::plugins::volume_binding::pre_bind`], both run by the scheduling loop.

use std::fmt;
use std::sync::Arc;

use crate::cycle_state::CycleState;
use crate::snapshot::{NodeInfo, Snapshot};

/// How bad a rejection is (upstream `framework.Code`): preemption could help an `Unschedulable`
/// node but never an `UnschedulableAndUnresolvable` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unschedulable,
    UnschedulableAndUnresolvable,
}

/// What a PreFilter or PreScore tells the framework (upstream `Status` codes `Success` and
/// `Skip`): `Skip` means the plugin has nothing to check for this pod, so the framework does not
/// call its Filter (or Score) in this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    Skip,
}

/// Turns a deferred rejection into upstream's reasons: called with the cycle's state, the node
/// and the detail the filter recorded.
pub type Explain = fn(&CycleState<'_>, &NodeInfo, usize) -> Vec<String>;

/// Why a filter rejected a node. Cheap to build (filters run for thousands of nodes per pod):
/// a fixed reason, or a function that finds the words only when a message is needed.
#[derive(Debug, Clone, Copy)]
pub struct Rejection {
    code: Code,
    reason: Reason,
}

#[derive(Debug, Clone, Copy)]
enum Reason {
    Fixed(&'static str),
    Deferred { explain: Explain, detail: usize },
}

impl Rejection {
    /// A rejection with a fixed upstream reason.
    pub const fn new(reason: &'static str, code: Code) -> Rejection {
        Rejection {
            code,
            reason: Reason::Fixed(reason),
        }
    }

    /// A rejection whose words `explain` finds from the cycle state, the node and `detail` (an
    /// index the filter chooses, such as the position of the offending taint).
    pub const fn deferred(code: Code, explain: Explain, detail: usize) -> Rejection {
        Rejection {
            code,
            reason: Reason::Deferred { explain, detail },
        }
    }

    /// The upstream code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, as the histogram of a [`FitError`](crate::framework::FitError) counts them.
    pub fn reasons(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Vec<String> {
        match self.reason {
            Reason::Fixed(r) => vec![r.to_string()],
            Reason::Deferred { explain, detail } => explain(cs, node, detail),
        }
    }
}

/// A scheduling plugin (upstream `framework.Plugin`): a name, and the extension points it
/// implements. Each `as_*` method returns the plugin itself when it implements that point.
pub trait Plugin: fmt::Debug + Send + Sync {
    /// The upstream plugin name (`NodeResourcesFit`, `TaintToleration`, …).
    fn name(&self) -> &'static str;

    /// The plugin as a PreFilter plugin, if it is one.
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        None
    }

    /// The plugin as a Filter plugin, if it is one.
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        None
    }

    /// The plugin as a Score plugin, if it is one.
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        None
    }
}

/// Upstream `PreFilterPlugin`: runs once per pod before any filter, computing what the plugin's
/// filter needs (written into the cycle state under the plugin's own state type).
pub trait PreFilterPlugin: Plugin {
    /// Prepares the cycle; `Status::Skip` when the plugin's filter has nothing to check.
    fn pre_filter(&self, state: &mut CycleState<'_>, snapshot: &Snapshot) -> Status;
}

/// Upstream `FilterPlugin`: whether the pod can run on one node.
pub trait FilterPlugin: Plugin {
    /// `Ok` when the node passes, else why not.
    fn filter(&self, state: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection>;

    /// Whether the answer depends only on the node object (labels, taints, cordoning, name) and
    /// on what [`sign`](FilterPlugin::sign) writes of the pod, never on what runs on the node:
    /// such answers are remembered per [signature](crate::signature) until a node changes. The
    /// framework runs these filters before the others.
    fn node_only(&self) -> bool {
        false
    }

    /// Appends everything of the pod a node-only filter reads to the pod's signature (upstream
    /// KEP-5598's per-plugin signature fragments). Unused for other filters.
    fn sign(&self, _state: &CycleState<'_>, _out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        Ok(())
    }
}

/// Upstream `ScoreExtensions.NormalizeScore` as the default plugins use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalize {
    /// The raw score is already 0–[`MAX_NODE_SCORE`](crate::profile::MAX_NODE_SCORE).
    None,
    /// `helper.DefaultNormalizeScore(MaxNodeScore, false, …)`: scaled by the maximum.
    Default,
    /// `helper.DefaultNormalizeScore(MaxNodeScore, true, …)`: scaled and reversed (lower raw
    /// values are better).
    Reversed,
}

/// Upstream `PreScorePlugin` and `ScorePlugin`: ranks the nodes that passed the filters.
pub trait ScorePlugin: Plugin {
    /// Upstream PreScore: prepares the plugin's state once per pod; `Status::Skip` when the
    /// plugin would score every node alike, so it is left out.
    fn pre_score(&self, _state: &mut CycleState<'_>) -> Status {
        Status::Success
    }

    /// The raw score of one node.
    fn score(&self, state: &CycleState<'_>, node: &NodeInfo, snapshot: &Snapshot) -> i64;

    /// How raw scores are normalised before weighting.
    fn normalize(&self) -> Normalize {
        Normalize::None
    }
}
