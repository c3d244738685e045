//! Scheduling predicates that the scheduler, the controllers and admission share, as upstream
//! keeps them in `k8s.io/component-helpers/scheduling/corev1`: whether tolerations tolerate a
//! node's taints ([`taints`]) and whether a node satisfies a pod's node selector and node affinity
//! ([`node_affinity`]). Each component calls these rather than keeping a copy, so a fix lands
//! everywhere at once.

pub mod node_affinity;
pub mod taints;
