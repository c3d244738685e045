//! Shared harness for the controllers' integration tests: the in-process API server of
//! `tandem-test-support` with every controller started against it, and helpers that play the
//! node agent's part (marking pods Ready). Waiting is `tandem_test_support::wait_for`, re-exported.
#![allow(dead_code)]

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
pub use tandem_test_support::{TestServer, wait_for};

/// A running API server with every controller, and an admin client.
pub type Cluster = TestServer;

/// Starts a server and `tandem_controllers::start_all` against it.
pub async fn start() -> Result<Cluster> {
    let cluster = TestServer::start().await?;
    tandem_controllers::start_all(
        cluster.client.clone(),
        tandem_core::registry::Registry::builtin(),
    );
    Ok(cluster)
}

/// Creates a namespace.
pub async fn namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

/// Creates any namespaced object from JSON.
pub async fn create<K>(client: &Client, ns: &str, obj: Value) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await?)
}

/// Pods in `ns` that are not being deleted.
pub async fn live_pods(client: &Client, ns: &str, selector: &str) -> Result<Vec<Pod>> {
    let list = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Plays the node agent: marks `pod` Running and Ready with an IP.
pub async fn make_ready(client: &Client, pod: &Pod, ip: &str) -> Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({ "status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "conditions": [
            { "type": "Ready", "status": "True", "lastTransitionTime": now },
            { "type": "ContainersReady", "status": "True", "lastTransitionTime": now },
        ],
    }});
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Marks every live pod matching `selector` in `ns` Ready; returns how many it changed.
pub async fn make_all_ready(client: &Client, ns: &str, selector: &str) -> Result<usize> {
    let mut n = 0;
    for (i, p) in live_pods(client, ns, selector).await?.iter().enumerate() {
        if !is_ready(p) {
            match make_ready(client, p, &format!("10.244.0.{}", i + 10)).await {
                Ok(()) => n += 1,
                Err(e) if e.to_string().contains("not found") => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(n)
}

/// Marks a pod's phase (Succeeded or Failed), as the node agent does when containers exit.
pub async fn finish_pod(client: &Client, pod: &Pod, phase: &str) -> Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let patch = json!({ "status": { "phase": phase, "conditions": [{ "type": "Ready", "status": "False" }] } });
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Patches with retries on 409: the API server currently answers an unconditional patch that
/// races another write with a Conflict instead of retrying it (see the report in issue 5).
pub async fn patch<K>(api: &Api<K>, name: &str, patch: &Patch<Value>) -> Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..20 {
        match api.patch(name, &PatchParams::default(), patch).await {
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => return Ok(other?),
        }
    }
    anyhow::bail!("patch of {name} kept conflicting")
}
