//! NetworkPolicy enforcement on a node with real containers, in an nftables table of its own
//! (`inet tandem-netpol-<bridge>`), as CNI plugins with policy support (Calico, Cilium,
//! kube-network-policies) enforce upstream's `networking.k8s.io/v1` NetworkPolicy.
//!
//! [`model`] turns Policies, Pods and Namespaces into what each pod of the node may receive
//! and send ([`ranges`] holds the address sets), [`rules`] turns that into nftables text, and
//! [`controller`] keeps the kernel in step with the API.

pub mod controller;
pub mod model;
pub mod ranges;
pub mod rules;

pub use controller::{NetpolConfig, NetpolError, NetpolStatus, NetworkPolicyController};
