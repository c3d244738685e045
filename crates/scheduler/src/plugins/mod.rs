//! The filter and score plugins, one module per upstream plugin (named as upstream names them),
//! plus tandem's OS placement. Filters return `Err(Rejection)` with what is wrong; scores return
//! a raw per-node value that the framework normalises and weights.

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
