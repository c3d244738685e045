//! The control loops of tandem. Each is an API client (kube-rs: watch → cache → reconcile), exactly
//! as upstream's kube-controller-manager runs them, so they work in-process (`tandem up`/`server`)
//! or in a separate process against any tandem or Kubernetes API server.

pub mod dynamic;
pub mod garbage_collector;
pub mod namespace;

use tandem_core::registry::Registry;

/// Starts every controller on `client`; they run until the runtime stops.
pub fn start_all(client: kube::Client, registry: Registry) {
    tokio::spawn(garbage_collector::run(client.clone(), registry.clone()));
    tokio::spawn(namespace::run(client, registry));
}
