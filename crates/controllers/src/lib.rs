//! The control loops of tandem. Each is an API client (kube-rs: watch → cache → reconcile), exactly
//! as upstream's kube-controller-manager runs them, so they work in-process (`tandem up`/`server`)
//! or in a separate process against any tandem or Kubernetes API server.

pub mod bench;
pub mod certificates;
pub mod clock;
pub mod clusterrole_aggregation;
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
pub mod informer;
pub mod job;
pub mod local_path;
pub mod namespace;
pub mod node_ipam;
pub mod node_lifecycle;
pub mod persistent_volume;
pub mod replicaset;
pub mod replication_controller;
pub mod resource_quota;
pub mod root_ca_publisher;
pub mod service_lb;
pub mod serviceaccount;
pub mod statefulset;
pub mod windows_endpoint_limit;
pub mod workqueue;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use tandem_core::registry::Registry;

/// Starts every controller on `client`; they run until the runtime stops.
pub fn start_all(client: kube::Client, registry: Registry) {
    tokio::spawn(garbage_collector::run(client.clone(), registry.clone()));
    tokio::spawn(namespace::run(client.clone(), registry.clone()));
    tokio::spawn(serviceaccount::run(client.clone()));
    tokio::spawn(clusterrole_aggregation::run(client.clone()));
    tokio::spawn(persistent_volume::run(client.clone()));
    // One pod watch and cache shared by every controller that manages pods.
    let pods = informer::Informer::<Pod>::start(client.clone());
    tokio::spawn(resource_quota::run(
        client.clone(),
        registry,
        pods.clone(),
        resource_quota::ResourceQuotaOptions::default(),
    ));
    let replicasets = informer::Informer::<ReplicaSet>::start(client.clone());
    tokio::spawn(replicaset::run(
        client.clone(),
        pods.clone(),
        replicasets.clone(),
    ));
    tokio::spawn(disruption::run(
        client.clone(),
        pods.clone(),
        replicasets.clone(),
        disruption::DisruptionOptions::default(),
    ));
    tokio::spawn(deployment::run(client.clone(), pods.clone(), replicasets));
    let nodes = informer::Informer::<Node>::start(client.clone());
    tokio::spawn(daemonset::run(client.clone(), pods.clone(), nodes.clone()));
    tokio::spawn(local_path::run(client.clone(), nodes.clone()));
    tokio::spawn(node_lifecycle::run(
        client.clone(),
        pods.clone(),
        nodes.clone(),
        node_lifecycle::NodeLifecycleOptions::default(),
    ));
    tokio::spawn(node_ipam::run(
        client.clone(),
        nodes.clone(),
        node_ipam::NodeIpamOptions::default(),
    ));
    tokio::spawn(job::run(client.clone(), pods.clone()));
    tokio::spawn(statefulset::run(client.clone(), pods.clone()));
    tokio::spawn(cronjob::run(
        client.clone(),
        cronjob::CronJobOptions::default(),
    ));
    tokio::spawn(replication_controller::run(client.clone(), pods.clone()));
    tokio::spawn(service_lb::run(client.clone(), nodes.clone()));
    tokio::spawn(windows_endpoint_limit::run(
        client.clone(),
        pods.clone(),
        nodes,
    ));
    tokio::spawn(endpointslice::run(client, pods));
}
