//! A scheduling profile: the registered plugins, kept in order per extension point, and the runs
//! of each point over them (PreFilter for a pod, Filter for a node, PreScore and Score over the
//! feasible nodes). The default plugin set is built in one place,
//! [`crate::plugins::default_profile`].
//!
//! Mirrors upstream `pkg/scheduler/framework/runtime/framework.go` (`RunPreFilterPlugins`,
//! `RunFilterPlugins`, `RunPreScorePlugins`, `RunScorePlugins`): plugins run in registration
//! order, the first rejection wins, a PreFilter that says Skip leaves its Filter out for the
//! cycle, and scores are normalised and weighted per plugin. Pure: no I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::cycle_state::CycleState;
use crate::plugin::{
    FilterPlugin, Normalize, Plugin, PreFilterPlugin, Rejection, ScorePlugin, Status,
};
use crate::snapshot::{NodeInfo, Snapshot};

/// Upstream's `MaxNodeScore`.
pub const MAX_NODE_SCORE: i64 = 100;

/// A filter with its position among the registered plugins (for its PreFilter's Skip).
type Filter = (usize, Arc<dyn FilterPlugin>);

/// The plugins of a profile, per extension point in registration order.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    registered: usize,
    pre_filters: Vec<(usize, Arc<dyn PreFilterPlugin>)>,
    /// Filters whose answer depends only on the node object and the pod's signature.
    node_filters: Vec<Filter>,
    /// Filters that depend on what is placed on the node.
    placement_filters: Vec<Filter>,
    /// Score plugins with their weights.
    scores: Vec<(Arc<dyn ScorePlugin>, i64)>,
}

impl Profile {
    /// A profile without plugins: every node fits and scores alike.
    pub fn new() -> Profile {
        Profile::default()
    }

    /// Adds `plugin` at the end of every extension point it implements; `weight` multiplies its
    /// normalised score (upstream's per-plugin score weight; unused when it does not score).
    ///
    /// Node-only filters ([`FilterPlugin::node_only`]) always run before the others, so register
    /// them first to keep the first-rejection order the registration order.
    pub fn register<P: Plugin + 'static>(&mut self, plugin: P, weight: i64) -> &mut Profile {
        let index = self.registered;
        self.registered += 1;
        let plugin = Arc::new(plugin);
        if let Some(p) = Arc::clone(&plugin).as_pre_filter() {
            self.pre_filters.push((index, p));
        }
        if let Some(f) = Arc::clone(&plugin).as_filter() {
            if f.node_only() {
                self.node_filters.push((index, f));
            } else {
                self.placement_filters.push((index, f));
            }
        }
        if let Some(s) = plugin.as_score() {
            self.scores.push((s, weight));
        }
        self
    }

    /// Runs every PreFilter for `pod` against `snapshot` (upstream `RunPreFilterPlugins`).
    pub fn pre_filter<'a>(&self, pod: &'a Pod, snapshot: &Snapshot) -> CycleState<'a> {
        let mut state = CycleState::new(pod);
        for (index, plugin) in &self.pre_filters {
            if plugin.pre_filter(&mut state, snapshot) == Status::Skip {
                state.skip(*index);
            }
        }
        state
    }

    /// Runs the filters in order, node-only ones first; the first rejection wins (as upstream's
    /// `RunFilterPlugins`).
    pub fn run_filters(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        self.run_node_filters(cs, node)?;
        self.run_placement_filters(cs, node)
    }

    /// The filters whose answer depends only on the pod's placement constraints and on the node
    /// object: the same for every pod of one [signature](crate::signature) until the node
    /// changes.
    pub fn run_node_filters(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
        run(&self.node_filters, cs, node)
    }

    /// The filters that depend on what is placed on the node.
    pub fn run_placement_filters(
        &self,
        cs: &CycleState<'_>,
        node: &NodeInfo,
    ) -> Result<(), Rejection> {
        run(&self.placement_filters, cs, node)
    }

    /// What the node-only filters read of the pod, as one key; `None` when it cannot be encoded
    /// (never for objects that came from the API).
    pub fn signature(&self, cs: &CycleState<'_>) -> Option<Vec<u8>> {
        let mut key = Vec::new();
        for (index, filter) in &self.node_filters {
            if cs.skips(*index) {
                continue;
            }
            key.extend_from_slice(filter.name().as_bytes());
            key.push(b'=');
            filter.sign(cs, &mut key).ok()?;
            key.push(b';');
        }
        Some(key)
    }

    /// The weighted total score of each feasible node, in the order given (upstream
    /// `RunPreScorePlugins` then `RunScorePlugins`).
    pub fn score_nodes(
        &self,
        cs: &mut CycleState<'_>,
        snapshot: &Snapshot,
        feasible: &[usize],
    ) -> Vec<i64> {
        let nodes = snapshot.nodes();
        let mut total = vec![0i64; feasible.len()];
        let mut raw = Vec::with_capacity(feasible.len());
        for (plugin, weight) in &self.scores {
            if plugin.pre_score(cs) == Status::Skip {
                continue;
            }
            raw.clear();
            raw.extend(
                feasible
                    .iter()
                    .map(|&i| plugin.score(cs, &nodes[i], snapshot)),
            );
            match plugin.normalize() {
                Normalize::None => {}
                Normalize::Default => default_normalize(&mut raw, false),
                Normalize::Reversed => default_normalize(&mut raw, true),
            }
            for (t, s) in total.iter_mut().zip(&raw) {
                *t += s * weight;
            }
        }
        total
    }
}

/// Upstream `helper.DefaultNormalizeScore`: scale to 0–`MAX_NODE_SCORE` by the maximum, reversed
/// when lower raw values are better.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

fn run(filters: &[Filter], cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
    for (index, filter) in filters {
        if !cs.skips(*index) {
            filter.filter(cs, node)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;

    use super::*;
    use crate::plugin::Code;

    /// A plugin outside the default set: admits only nodes whose name starts with the pod's
    /// `prefix` label, keeping the prefix in its own state; skips pods without the label.
    #[derive(Debug)]
    struct NamePrefix;

    #[derive(Debug)]
    struct Prefix(String);

    impl Plugin for NamePrefix {
        fn name(&self) -> &'static str {
            "NamePrefix"
        }

        fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
            Some(self)
        }

        fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
            Some(self)
        }
    }

    impl PreFilterPlugin for NamePrefix {
        fn pre_filter(&self, cs: &mut CycleState<'_>, _: &Snapshot) -> Status {
            match cs.labels.get("prefix").cloned() {
                Some(p) => {
                    cs.write(Prefix(p));
                    Status::Success
                }
                None => Status::Skip,
            }
        }
    }

    impl FilterPlugin for NamePrefix {
        fn filter(&self, cs: &CycleState<'_>, node: &NodeInfo) -> Result<(), Rejection> {
            let Some(Prefix(p)) = cs.read() else {
                panic!("a skipped filter must not run");
            };
            if node.name.starts_with(p.as_str()) {
                Ok(())
            } else {
                Err(Rejection::new(
                    "node(s) had the wrong name",
                    Code::Unschedulable,
                ))
            }
        }
    }

    fn snapshot() -> Snapshot {
        let mut s = Snapshot::new();
        for name in ["a-1", "b-1"] {
            let n: Node = serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
            .unwrap();
            s.upsert_node(&n);
        }
        s
    }

    fn pod(labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_registered_plugin_filters_with_its_own_state_and_can_skip() {
        let mut profile = Profile::new();
        profile.register(NamePrefix, 0);
        let s = snapshot();
        let fits = |p: &Pod| -> Vec<bool> {
            let cs = profile.pre_filter(p, &s);
            s.nodes()
                .iter()
                .map(|n| profile.run_filters(&cs, n).is_ok())
                .collect()
        };
        assert_eq!(fits(&pod(json!({"prefix": "b"}))), vec![false, true]);
        assert_eq!(fits(&pod(json!({}))), vec![true, true]);
    }

    #[test]
    fn cycle_state_keeps_one_state_per_type() {
        let p = pod(json!({}));
        let mut cs = CycleState::new(&p);
        assert!(cs.read::<Prefix>().is_none());
        cs.write(Prefix("x".into()));
        cs.write(Prefix("y".into()));
        assert_eq!(cs.read::<Prefix>().map(|p| p.0.as_str()), Some("y"));
    }
}
