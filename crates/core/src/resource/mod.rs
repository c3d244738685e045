//! Resource arithmetic shared by the scheduler and the node agent, as upstream keeps it in
//! `k8s.io/component-helpers/resource`: [`requests`] holds the one [`Resources`] type and a
//! pod's effective requests.

pub mod requests;

pub use requests::{
    NonMissingRequests, PodResourcesOptions, Resources, milli_value, pod_requests, value,
};
