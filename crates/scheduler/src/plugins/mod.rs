//! The filter and score plugins, one module per upstream plugin (named as upstream names them),
//! plus tandem's OS placement, and the default profile that registers them. Each plugin
//! implements the extension points of [`crate::plugin`] it takes part in and keeps its per-pod
//! state in the cycle state; filters return `Err(Rejection)` with what is wrong, scores a raw
//! per-node value that the profile normalises and weights.

pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod os_placement;
pub mod pod_topology_spread;
pub mod selector_spread;
pub mod taint_toleration;
pub mod volume_binding;

use crate::profile::Profile;

/// The default profile (upstream `pkg/scheduler/apis/config/v1/default_plugins.go` with the
/// in-tree registry of `pkg/scheduler/framework/plugins/registry.go`): the plugins in the order
/// their filters and scores run, with upstream's score weights. `os_placement` adds tandem's OS
/// and Windows build placement in front.
///
/// Filters: OS placement, NodeUnschedulable, NodeName, TaintToleration, NodeAffinity (node-only,
/// cheapest and most selective first), then NodePorts, NodeResourcesFit, PodTopologySpread,
/// InterPodAffinity, VolumeBinding. Scores: TaintToleration ×3, NodeAffinity ×2,
/// NodeResourcesFit (LeastAllocated) ×1, NodeResourcesBalancedAllocation ×1, ImageLocality ×1,
/// SelectorSpread ×2.
pub fn default_profile(os_placement: bool) -> Profile {
    let mut profile = Profile::new();
    if os_placement {
        profile.register(os_placement::OsPlacement, 0);
    }
    profile
        .register(node_unschedulable::NodeUnschedulable, 0)
        .register(node_name::NodeName, 0)
        .register(taint_toleration::TaintToleration, 3)
        .register(node_affinity::NodeAffinity, 2)
        .register(node_ports::NodePorts, 0)
        .register(node_resources::NodeResourcesFit, 1)
        .register(node_resources::BalancedAllocation, 1)
        .register(pod_topology_spread::PodTopologySpread, 0)
        .register(inter_pod_affinity::InterPodAffinity, 0)
        .register(volume_binding::VolumeBinding, 0)
        .register(image_locality::ImageLocality, 1)
        .register(selector_spread::SelectorSpread, 2);
    profile
}
