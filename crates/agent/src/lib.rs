//! tandem's node agent: registers a Node like the kubelet, renews its Lease, admits and runs the
//! pods bound to it through typed pod workers, and drives a [`runtime::Runtime`] backend (today
//! the data-driven `emulated` one, with Linux and Windows personalities).
//!
//! Entry points: [`run`] for one node, [`parse_nodes_spec`]/[`default_nodes`] for `tandem up
//! --nodes` (`tandem bench nodes` drives these from the `tandem` binary).

pub mod admission;
pub mod agent;
pub mod bootstrap;
pub mod clock;
pub mod cluster_network;
pub mod config;
pub mod dns_config;
pub mod emulated_exec;
pub mod env;
pub mod events;
pub mod ipam;
pub mod logs;
pub mod node_status;
pub mod pod_worker;
pub mod podnet;
pub mod pull_secrets;
pub mod registries;
pub mod runtime;
pub mod server;
pub mod stats;
pub mod streaming;
pub mod volumes;
pub mod windows;

pub use agent::{AgentError, PodFeed, SharedPodWatch, run, run_shared, run_with_runtime};
pub use config::{
    ConfigError, NodeConfig, NodeOs, Resources, RuntimeKind, Timing, WINDOWS_PRIORITY_CLASSES,
    default_nodes, parse_nodes_spec, validate_windows_priority_class,
};
pub use windows::WindowsVersion;
