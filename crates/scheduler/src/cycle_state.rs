//! The state of one scheduling cycle: what every plugin reads of the pod (parsed once), and each
//! plugin's own per-cycle state in a typed map, keyed by the plugin's state type.
//!
//! Mirrors upstream `pkg/scheduler/framework/cycle_state.go` (`CycleState.Write`/`Read` with a
//! `StateKey` per plugin) and the pod-wide fields upstream caches in `framework.PodInfo`. A
//! plugin's state type is private to the plugin's module, so only that plugin can read it, as a
//! plugin-named `StateKey` does upstream.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};

use crate::plugins::node_affinity::PodNodeAffinity;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// What the plugins read of the pod, and what they computed for it in this cycle.
#[derive(Debug)]
pub struct CycleState<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub node_name: Option<&'a str>,
    pub tolerations: &'a [Toleration],
    /// The node selector and node affinity, parsed once: NodeAffinity filters and scores with
    /// them, PodTopologySpread counts only the nodes they admit.
    pub node_affinity: PodNodeAffinity<'a>,
    /// Plugin states, few per pod: a scan finds one faster than hashing would.
    states: Vec<(TypeId, Box<dyn Any + Send + Sync>)>,
    /// Per registered plugin (by position in the profile): whether its PreFilter said Skip.
    skipped: Vec<bool>,
}

impl<'a> CycleState<'a> {
    /// The state of a cycle for `pod`, before any plugin ran.
    pub fn new(pod: &'a Pod) -> CycleState<'a> {
        let spec = pod.spec.as_ref();
        CycleState {
            pod,
            namespace: pod.metadata.namespace.as_deref().unwrap_or_default(),
            labels: pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
            node_name: spec.and_then(|s| s.node_name.as_deref()),
            tolerations: spec
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
            node_affinity: PodNodeAffinity::of(spec),
            states: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Stores a plugin's state (upstream `CycleState.Write`), replacing an earlier one of the
    /// same type.
    pub fn write<T: Any + Send + Sync>(&mut self, state: T) {
        let key = TypeId::of::<T>();
        match self.states.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot = Box::new(state),
            None => self.states.push((key, Box::new(state))),
        }
    }

    /// A plugin's state (upstream `CycleState.Read`), if its plugin wrote one this cycle.
    pub fn read<T: Any>(&self) -> Option<&T> {
        let key = TypeId::of::<T>();
        self.states
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, s)| s.downcast_ref())
    }

    /// Records that the plugin at `index` of the profile skips its filter this cycle.
    pub(crate) fn skip(&mut self, index: usize) {
        if self.skipped.len() <= index {
            self.skipped.resize(index + 1, false);
        }
        self.skipped[index] = true;
    }

    /// Whether the plugin at `index` of the profile skips its filter this cycle (upstream
    /// `CycleState.SkipFilterPlugins`).
    pub fn skips(&self, index: usize) -> bool {
        self.skipped.get(index).copied().unwrap_or(false)
    }
}
