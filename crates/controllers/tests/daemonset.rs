//! DaemonSet controller behaviour against a real API server, with Node objects created by the test.

mod common;

use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PostParams};
use serde_json::json;

async fn node(c: &common::Cluster, name: &str, os: &str) -> Result<()> {
    let n: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { "kubernetes.io/os": os, "kubernetes.io/hostname": name } }
    }))?;
    Api::<Node>::all(c.client.clone())
        .create(&PostParams::default(), &n)
        .await?;
    Ok(())
}

fn pinned_node(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|r| r.node_selector_terms.first())
        .and_then(|t| t.match_fields.as_ref())
        .and_then(|f| f.first())
        .and_then(|f| f.values.as_ref())
        .and_then(|v| v.first().cloned())
        .unwrap_or_default()
}

async fn pods_by_node(c: &common::Cluster, ns: &str) -> Result<BTreeSet<String>> {
    Ok(common::live_pods(&c.client, ns, "app=agent")
        .await?
        .iter()
        .map(pinned_node)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_with_linux_selector_skips_windows_nodes() -> Result<()> {
    let c = common::start().await?;
    node(&c, "linux-1", "linux").await?;
    node(&c, "win-2019", "windows").await?;
    node(&c, "win-2022", "windows").await?;
    common::namespace(&c.client, "ds1").await?;
    let _: DaemonSet = common::create(
        &c.client,
        "ds1",
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": { "name": "agent" },
            "spec": {
                "selector": { "matchLabels": { "app": "agent" } },
                "template": {
                    "metadata": { "labels": { "app": "agent" } },
                    "spec": {
                        "nodeSelector": { "kubernetes.io/os": "linux" },
                        "containers": [{ "name": "agent", "image": "busybox" }]
                    }
                }
            }
        }),
    )
    .await?;
    common::wait_for(20, "one pod on linux-1", || async {
        let nodes = pods_by_node(&c, "ds1").await?;
        Ok((nodes == BTreeSet::from(["linux-1".to_string()])).then_some(()))
    })
    .await?;
    let pods = common::live_pods(&c.client, "ds1", "app=agent").await?;
    assert_eq!(pods.len(), 1);
    let tolerations = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
    );

    // A Linux node joining gets a pod; a Windows node joining does not; a node leaving loses it.
    node(&c, "linux-2", "linux").await?;
    node(&c, "win-3", "windows").await?;
    common::wait_for(20, "pods on both linux nodes", || async {
        let nodes = pods_by_node(&c, "ds1").await?;
        Ok((nodes == BTreeSet::from(["linux-1".to_string(), "linux-2".to_string()])).then_some(()))
    })
    .await?;
    Api::<Node>::all(c.client.clone())
        .delete("linux-1", &DeleteParams::default())
        .await?;
    common::wait_for(20, "pod follows the node away", || async {
        let nodes = pods_by_node(&c, "ds1").await?;
        Ok((nodes == BTreeSet::from(["linux-2".to_string()])).then_some(()))
    })
    .await?;

    common::make_all_ready(&c.client, "ds1", "app=agent").await?;
    let api: Api<DaemonSet> = Api::namespaced(c.client.clone(), "ds1");
    common::wait_for(20, "status", || async {
        let s = api.get("agent").await?.status.unwrap_or_default();
        Ok((s.desired_number_scheduled == 1
            && s.current_number_scheduled == 1
            && s.number_ready == 1
            && s.updated_number_scheduled == Some(1))
        .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_rolling_update_replaces_pods_within_max_unavailable() -> Result<()> {
    let c = common::start().await?;
    for n in ["n1", "n2", "n3"] {
        node(&c, n, "linux").await?;
    }
    common::namespace(&c.client, "ds2").await?;
    let _: DaemonSet = common::create(&c.client, "ds2", json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": { "name": "agent" },
        "spec": {
            "selector": { "matchLabels": { "app": "agent" } },
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1 } },
            "template": {
                "metadata": { "labels": { "app": "agent" } },
                "spec": { "containers": [{ "name": "agent", "image": "busybox:1" }] }
            }
        }
    }))
    .await?;
    common::wait_for(20, "3 ready pods", || async {
        common::make_all_ready(&c.client, "ds2", "app=agent").await?;
        let p = common::live_pods(&c.client, "ds2", "app=agent").await?;
        Ok((p.len() == 3 && p.iter().all(common::is_ready)).then_some(()))
    })
    .await?;
    let api: Api<DaemonSet> = Api::namespaced(c.client.clone(), "ds2");
    let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "agent", "image": "busybox:2" }] } } } });
    common::patch(&api, "agent", &Patch::Strategic(patch)).await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut min_ready = usize::MAX;
    loop {
        let pods = common::live_pods(&c.client, "ds2", "app=agent").await?;
        min_ready = min_ready.min(pods.iter().filter(|p| common::is_ready(p)).count());
        let image = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default()
        };
        if pods.len() == 3
            && pods
                .iter()
                .all(|p| image(p) == "busybox:2" && common::is_ready(p))
        {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "daemonset update did not finish"
        );
        if let Some(p) = pods.iter().find(|p| !common::is_ready(p)) {
            common::make_ready(&c.client, p, "10.244.2.1").await?;
        }
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    assert!(
        min_ready >= 2,
        "saw {min_ready} ready pods with maxUnavailable 1 of 3"
    );
    let names: Vec<String> = common::live_pods(&c.client, "ds2", "app=agent")
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names.len(), 3);
    Ok(())
}
