//! Resource arithmetic shared by the scheduler, the node agent and ResourceQuota, as upstream
//! keeps it in `k8s.io/component-helpers/resource`: [`requests`] holds the one [`Resources`]
//! type, a pod's effective requests, and the container arithmetic behind them.

pub mod requests;

pub use requests::{
    NonMissingRequests, PodResourcesOptions, ResourceAmounts, Resources, aggregate_containers,
    milli_value, pod_requests, value,
};
