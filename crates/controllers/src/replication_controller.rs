//! The ReplicationController controller: upstream runs the ReplicaSet controller's logic over
//! ReplicationControllers (`pkg/controller/replication`), and so does tandem — see
//! [`crate::replicaset`].

use k8s_openapi::api::core::v1::{Pod, ReplicationController};

use crate::informer::Informer;

/// Runs the ReplicationController controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>) {
    let owners = Informer::<ReplicationController>::start(client.clone());
    crate::replicaset::run_for(client, pods, owners).await;
}
