//! The API server's shared state: the registry of served types, the store and its watch cache,
//! the server's options, and the parts of the request path that keep state between requests
//! (authentication, flow control, Service allocation, node-agent metrics). Every layer of the
//! server reads it and it calls into none of the request layers (`rest`, admission, `auth`), so
//! they can all depend on it without depending on each other (upstream's
//! `genericapiserver.Config` plays this part).

use std::sync::Arc;

use tandem_core::registry::ResourceType;
use tandem_store::Store;

use crate::cache::Cache;
use crate::error::{ApiError, ApiResult};

/// Shared state of the API server.
pub struct State {
    /// Built-in types and the custom resources of established CRDs (see `crds`).
    pub registry: crate::crds::CustomResources,
    pub store: Arc<dyn Store>,
    pub cache: Arc<Cache>,
    pub options: Options,
    /// Held by Service writes until the cache reflects them (see `service_alloc`).
    pub service_lock: tokio::sync::Mutex<()>,
    /// The Services' allocations as last read from the cache (see `service_alloc`).
    pub service_alloc_cache: std::sync::Mutex<crate::service_alloc::UsedCache>,
    /// Addresses and ports other servers claimed (`service_claims`) that the Service being
    /// created (under `service_lock`) must not be given.
    pub service_alloc_avoid: std::sync::Mutex<(
        std::collections::HashSet<std::net::Ipv4Addr>,
        std::collections::HashSet<u16>,
    )>,
    /// Authentication and authorization (see `auth`).
    pub auth: crate::auth::Auth,
    /// How `node_proxy` reaches node agents: TLS as `kube-apiserver-kubelet-client`, the agents'
    /// serving certificates not verified (see `node_proxy::kubelet_client`).
    pub kubelet_client: tandem_netproxy::Forwarder,
    /// The resource metrics scraped from node agents (`metrics.k8s.io`, see `metrics_api`).
    pub metrics: crate::metrics_api::MetricsApi,
    /// Seats and queues of the requests being served (see `flowcontrol`).
    pub flow_control: Arc<crate::flowcontrol::FlowControl>,
    /// The admission webhooks of the stored configurations (see `webhook`).
    pub(crate) webhooks: crate::webhook::HookCache,
    /// The ValidatingAdmissionPolicies and their bindings (see `admission_policy`).
    pub(crate) policies: crate::admission_policy::PolicyCache,
    /// The group-versions served by aggregated API servers (see `aggregator`).
    pub(crate) aggregator: crate::aggregator::Aggregator,
}

/// Server behaviour switches.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whether privileged (and so HostProcess) pods are allowed: upstream's `--allow-privileged`.
    pub allow_privileged: bool,
    /// Service ClusterIP and NodePort ranges.
    pub service_ranges: crate::service_alloc::ServiceRanges,
    /// Which authorizers run: upstream's `--authorization-mode`.
    pub authorization: crate::auth::authz::AuthorizationMode,
    /// How often node agents' resource metrics are scraped (metrics-server's
    /// `--metric-resolution`); `None` scrapes nothing.
    pub metric_resolution: Option<std::time::Duration>,
    /// What `/metrics` serves and requests are measured with (see `metrics`); `None` builds a
    /// server without Prometheus metrics (not a flag: upstream always has them; `tandem bench
    /// api --metrics both` compares).
    pub server_metrics: Option<crate::metrics::ServerMetrics>,
    /// The bounds on requests in flight and API Priority and Fairness (see `flowcontrol`).
    pub flow_control: crate::flowcontrol::FlowControlConfig,
    /// Whether this server serves `metrics.k8s.io` itself (`tandem up --disable
    /// metrics-server` turns it off, so a metrics-server the user installs can register it).
    pub metrics_api: bool,
    /// The PodSecurity admission plugin's cluster defaults and exemptions (its entry of
    /// `--admission-control-config-file`; privileged everywhere by default, as upstream).
    pub pod_security: crate::pod_security::PodSecurity,
    /// `tolerationSeconds` of the default not-ready/unreachable tolerations
    /// (`--default-not-ready-toleration-seconds`, `--default-unreachable-toleration-seconds`).
    pub default_tolerations: tandem_core::admission::default_tolerations::DefaultTolerations,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            allow_privileged: true,
            service_ranges: Default::default(),
            authorization: Default::default(),
            metric_resolution: Some(crate::metrics_api::DEFAULT_RESOLUTION),
            server_metrics: Some(crate::metrics::ServerMetrics::standalone()),
            flow_control: Default::default(),
            metrics_api: true,
            pod_security: Default::default(),
            default_tolerations: Default::default(),
        }
    }
}

impl State {
    /// The served type of a group, version and plural; a 404 for a path naming none.
    pub fn resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> ApiResult<Arc<ResourceType>> {
        self.registry
            .by_plural(group, version, plural)
            .ok_or_else(ApiError::no_route)
    }

    /// The compiled schema of a custom resource's version (`None` for built-in kinds).
    pub fn custom_schema(
        &self,
        rt: &ResourceType,
    ) -> Option<Arc<tandem_core::apiextensions::schema::Structural>> {
        self.registry.custom(rt)?.schema.clone()
    }
}
