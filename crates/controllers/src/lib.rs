//! The control loops of tandem. Each is an API client (kube-rs: watch → cache → reconcile), exactly
//! as upstream's kube-controller-manager runs them, so they work in-process (`tandem up`/`server`)
//! or in a separate process against any tandem or Kubernetes API server.

pub mod certificates;
pub mod clock;
pub mod clusterrole_aggregation;
pub mod controller_ref_manager;
pub mod controller_utils;
pub mod cron_schedule;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod dynamic;
pub mod endpointslice;
pub mod events;
pub mod garbage_collector;
pub mod hpa;
pub mod informer;
pub mod job;
pub mod leader_election;
pub mod local_path;
pub mod metrics;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod persistent_volume;
pub mod replicaset;
pub mod replication_controller;
pub mod resource_quota;
pub mod root_ca_publisher;
pub mod scope;
pub mod service_lb;
pub mod serviceaccount;
pub mod smb_csi;
pub mod statefulset;
pub mod windows_endpoint_limit;
pub mod workqueue;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use tandem_core::registry::Registry;

/// Starts every controller on `client` in a [`scope::TaskScope`] of their own and returns it:
/// [`TaskScope::stop`](scope::TaskScope::stop) ends every task they started (what a leader does
/// when it loses its lease); otherwise, and if the handle is dropped, they run until the runtime
/// stops.
pub fn start_all(client: kube::Client, registry: Registry) -> scope::TaskScope {
    start_all_with(client, registry, ControllerOptions::default())
}

/// The controller manager's flags that tune individual controllers.
#[derive(Clone, Default)]
pub struct ControllerOptions {
    /// `--horizontal-pod-autoscaler-*`.
    pub hpa: hpa::HpaOptions,
    /// How long a node may go unheard before it is `Unknown` (`--node-monitor-grace-period`;
    /// `None`: upstream's 40 s).
    pub node_monitor_grace_period: Option<std::time::Duration>,
    /// Controllers of add-ons switched off (`tandem up --disable`), by name: `servicelb`,
    /// `local-storage`, `smb`.
    pub disabled: Vec<&'static str>,
}

/// As [`start_all`], with `options`.
pub fn start_all_with(
    client: kube::Client,
    registry: Registry,
    options: ControllerOptions,
) -> scope::TaskScope {
    let scope = scope::TaskScope::new();
    scope.enter(|| start_all_in_scope(client, registry, options));
    scope
}

fn start_all_in_scope(client: kube::Client, registry: Registry, options: ControllerOptions) {
    use scope::spawn;
    spawn(garbage_collector::run(client.clone(), registry.clone()));
    spawn(namespace::run(client.clone(), registry.clone()));
    spawn(serviceaccount::run(client.clone()));
    spawn(clusterrole_aggregation::run(client.clone()));
    spawn(persistent_volume::run(client.clone()));
    // One pod watch and cache shared by every controller that manages pods.
    let pods = informer::Informer::<Pod>::start(client.clone());
    spawn(resource_quota::run(
        client.clone(),
        registry,
        pods.clone(),
        resource_quota::ResourceQuotaOptions::default(),
    ));
    let replicasets = informer::Informer::<ReplicaSet>::start(client.clone());
    spawn(replicaset::run(
        client.clone(),
        pods.clone(),
        replicasets.clone(),
    ));
    spawn(disruption::run(
        client.clone(),
        pods.clone(),
        replicasets.clone(),
        disruption::DisruptionOptions::default(),
    ));
    spawn(deployment::run(client.clone(), pods.clone(), replicasets));
    let nodes = informer::Informer::<Node>::start(client.clone());
    spawn(daemonset::run(client.clone(), pods.clone(), nodes.clone()));
    let on = |addon: &str| !options.disabled.contains(&addon);
    if on("local-storage") {
        spawn(local_path::run(client.clone(), nodes.clone()));
    }
    if on("smb") {
        spawn(smb_csi::run(client.clone()));
    }
    spawn(node_lifecycle::run(
        client.clone(),
        pods.clone(),
        nodes.clone(),
        node_lifecycle::NodeLifecycleOptions {
            node_monitor_grace_period: options.node_monitor_grace_period.unwrap_or(
                node_lifecycle::NodeLifecycleOptions::default().node_monitor_grace_period,
            ),
            ..Default::default()
        },
    ));
    spawn(node_ipam::run(
        client.clone(),
        nodes.clone(),
        node_ipam::NodeIpamOptions::default(),
    ));
    spawn(hpa::run(client.clone(), pods.clone(), options.hpa));
    spawn(job::run(client.clone(), pods.clone()));
    spawn(statefulset::run(client.clone(), pods.clone()));
    spawn(cronjob::run(
        client.clone(),
        cronjob::CronJobOptions::default(),
    ));
    spawn(replication_controller::run(client.clone(), pods.clone()));
    if on("servicelb") {
        spawn(service_lb::run(client.clone(), nodes.clone()));
    }
    spawn(windows_endpoint_limit::run(
        client.clone(),
        pods.clone(),
        nodes,
    ));
    spawn(endpointslice::run(client, pods));
}
