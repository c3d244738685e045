//! Pure Kubernetes API machinery and Windows knowledge for tandem. Nothing in this crate does I/O:
//! the resource registry, field errors, selectors, patches, defaulting, validation, RBAC rule
//! evaluation and bootstrap policy, OpenAPI schemas and table printing are functions of their
//! inputs, so they can be unit-tested exhaustively and reused by the API server, scheduler, node
//! agent and `tandem check`.

pub mod accept;
pub mod admission;
pub mod apiextensions;
pub mod audit;
pub mod conversion;
pub mod defaults;
pub mod events;
pub mod field;
pub mod images;
pub mod local_path;
pub mod metrics;
pub mod openapi;
pub mod patch;
pub mod quota;
pub mod rbac;
pub mod registry;
pub mod resource;
pub mod scheduling;
pub mod selector;
pub mod smb_csi;
pub mod strategy;
pub mod table;
pub mod time;
pub mod typed;
pub mod validation;
pub mod windows;

/// Set by the node agent on an emulated node whose pods are on the network (a real namespace and
/// address each, answered by stand-ins): the service proxy sends such pods traffic, and leaves
/// out the pods of emulated nodes without it.
pub const POD_NETWORK_ANNOTATION: &str = "node.tandem.dev/emulated-pod-network";

/// Set by a node agent running the pod network between hosts (`tandem agent
/// --pod-network-backend`) on its own Node: the backend it uses (`host-gw`, `vxlan`, `auto`).
/// Other hosts route to its pod CIDR, and the service proxy counts its pods as reachable.
pub const POD_NETWORK_BACKEND_ANNOTATION: &str = "node.tandem.dev/pod-network-backend";
/// The MAC address of a host's VXLAN device (flannel's `backend-data` `VtepMAC`).
pub const POD_NETWORK_VTEP_MAC_ANNOTATION: &str = "node.tandem.dev/pod-network-vtep-mac";
/// The address other hosts send a host's pods' traffic to: tunnel endpoint, host-gw gateway
/// (flannel's `public-ip`).
pub const POD_NETWORK_PUBLIC_IP_ANNOTATION: &str = "node.tandem.dev/pod-network-public-ip";
