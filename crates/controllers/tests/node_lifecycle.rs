//! Node lifecycle and taint eviction against a real API server, with a fake clock: the test plays
//! the node agent (Lease renewals, Ready heartbeats) and moves time instead of waiting for it.

mod common;

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_controllers::clock::FakeClock;
use tandem_controllers::informer::Informer;
use tandem_controllers::node_lifecycle::{self, NodeLifecycleOptions, TAINT_UNREACHABLE};

/// Starts the controller with a 2 s grace period on `clock`, checking every 100 ms.
fn start_controller(client: &Client, clock: &FakeClock) {
    let options = NodeLifecycleOptions {
        node_monitor_grace_period: Duration::from_secs(2),
        node_monitor_period: Duration::from_millis(100),
        clock: std::sync::Arc::new(clock.clone()),
    };
    tokio::spawn(node_lifecycle::run(
        client.clone(),
        Informer::<Pod>::start(client.clone()),
        Informer::<Node>::start(client.clone()),
        options,
    ));
}

/// Registers a Ready node, as the agent does.
async fn register(client: &Client, name: &str) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    api.create(&PostParams::default(), &node).await?;
    heartbeat(client, name, "True").await
}

/// Posts the node's Ready condition with a fresh heartbeat and renews its Lease.
async fn heartbeat(client: &Client, name: &str, ready: &str) -> Result<()> {
    let now = Timestamp::now().to_string();
    let api: Api<Node> = Api::all(client.clone());
    let conditions: Vec<_> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|t| {
            let status = match (*t, ready) {
                ("Ready", r) => r,
                _ => "False",
            };
            json!({ "type": t, "status": status, "reason": "KubeletReady", "message": "ok",
                    "lastHeartbeatTime": now, "lastTransitionTime": now })
        })
        .collect();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "conditions": conditions } })),
    )
    .await?;
    renew_lease(client, name).await
}

async fn renew_lease(client: &Client, name: &str) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = k8s_openapi::jiff::Timestamp::now();
    let spec = json!({ "holderIdentity": name, "leaseDurationSeconds": 40,
                       "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(now) });
    if api.get_opt(name).await?.is_some() {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": spec })),
        )
        .await?;
    } else {
        let lease: Lease =
            serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec }))?;
        api.create(&PostParams::default(), &lease).await?;
    }
    Ok(())
}

fn ready(node: &Node) -> String {
    node_lifecycle::ready_status(node).to_string()
}

fn taint_keys(node: &Node) -> Vec<(String, String, bool)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect, t.time_added.is_some()))
        .collect()
}

async fn bound_pod(
    client: &Client,
    name: &str,
    node: &str,
    tolerations: serde_json::Value,
) -> Result<Pod> {
    let mut spec = json!({ "nodeName": node, "containers": [{ "name": "c", "image": "busybox" }] });
    if !tolerations.is_null() {
        spec["tolerations"] = tolerations;
    }
    common::create(
        client,
        "default",
        json!({ "metadata": { "name": name }, "spec": spec }),
    )
    .await
}

/// Whether the pod is gone or being deleted.
async fn evicted(client: &Client, name: &str) -> Result<bool> {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    Ok(api
        .get_opt(name)
        .await?
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_without_lease_renewal_becomes_unknown_and_unreachable_then_recovers() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let clock = FakeClock::new(Timestamp::now());
    register(&s.client, "n1").await?;
    start_controller(&s.client, &clock);
    let nodes: Api<Node> = Api::all(s.client.clone());

    // Renewed within the grace period: stays Ready.
    tokio::time::sleep(Duration::from_millis(400)).await;
    clock.advance(Duration::from_millis(1500));
    renew_lease(&s.client, "n1").await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    clock.advance(Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let n = nodes.get("n1").await?;
    assert_eq!(ready(&n), "True", "a renewed lease keeps the node Ready");
    assert!(taint_keys(&n).is_empty());

    // Silent for longer than the grace period: Unknown, tainted unreachable.
    clock.advance(Duration::from_secs(1));
    let n = common::wait_for(10, "node Unknown and tainted", || async {
        let n = nodes.get("n1").await?;
        Ok((ready(&n) == "Unknown" && taint_keys(&n).len() == 2).then_some(n))
    })
    .await?;
    for c in n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if node_lifecycle::MONITORED_CONDITIONS.contains(&c.type_.as_str()) {
            assert_eq!(c.status, "Unknown", "{}", c.type_);
            assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
            assert_eq!(
                c.message.as_deref(),
                Some("Kubelet stopped posting node status.")
            );
        }
    }
    let mut taints = taint_keys(&n);
    taints.sort();
    assert_eq!(
        taints,
        vec![
            (TAINT_UNREACHABLE.to_string(), "NoExecute".to_string(), true),
            (
                TAINT_UNREACHABLE.to_string(),
                "NoSchedule".to_string(),
                true
            ),
        ]
    );

    // The agent comes back: Lease renewed, Ready True again; the taints go.
    heartbeat(&s.client, "n1", "True").await?;
    common::wait_for(10, "node untainted", || async {
        let n = nodes.get("n1").await?;
        Ok((ready(&n) == "True" && taint_keys(&n).is_empty()).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_unreachable_node_are_evicted_when_their_toleration_runs_out() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let clock = FakeClock::new(Timestamp::now());
    register(&s.client, "n2").await?;
    // Default tolerations from admission: unreachable for 300 s.
    bound_pod(
        &s.client,
        "default-toleration",
        "n2",
        serde_json::Value::Null,
    )
    .await?;
    bound_pod(
        &s.client,
        "zero-seconds",
        "n2",
        json!([{ "key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0 }]),
    )
    .await?;
    bound_pod(
        &s.client,
        "forever",
        "n2",
        json!([{ "key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute" }]),
    )
    .await?;
    start_controller(&s.client, &clock);
    tokio::time::sleep(Duration::from_millis(400)).await;
    clock.advance(Duration::from_secs(3));
    common::wait_for(10, "pod without time left evicted", || async {
        Ok(evicted(&s.client, "zero-seconds").await?.then_some(()))
    })
    .await?;
    assert!(!evicted(&s.client, "default-toleration").await?);

    clock.advance(Duration::from_secs(290));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !evicted(&s.client, "default-toleration").await?,
        "still within its 300 s"
    );
    clock.advance(Duration::from_secs(15));
    common::wait_for(
        10,
        "pod with default toleration evicted after 300 s",
        || async {
            Ok(evicted(&s.client, "default-toleration")
                .await?
                .then_some(()))
        },
    )
    .await?;
    assert!(!evicted(&s.client, "forever").await?, "tolerates for ever");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_not_tolerating_a_no_execute_taint_is_evicted_at_once() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let clock = FakeClock::new(Timestamp::now());
    register(&s.client, "n3").await?;
    bound_pod(&s.client, "intolerant", "n3", serde_json::Value::Null).await?;
    bound_pod(
        &s.client,
        "tolerant",
        "n3",
        json!([{ "key": "example.com/drain", "operator": "Exists", "effect": "NoExecute" }]),
    )
    .await?;
    start_controller(&s.client, &clock);
    let nodes: Api<Node> = Api::all(s.client.clone());
    common::patch(
        &nodes,
        "n3",
        &Patch::Merge(json!({ "spec": { "taints": [{ "key": "example.com/drain", "effect": "NoExecute" }] } })),
    )
    .await?;
    common::wait_for(10, "intolerant pod evicted", || async {
        Ok(evicted(&s.client, "intolerant").await?.then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!evicted(&s.client, "tolerant").await?);
    Ok(())
}
