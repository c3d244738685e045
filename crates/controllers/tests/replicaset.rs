//! ReplicaSet and ReplicationController controller behaviour against a real API server.

mod common;

use anyhow::Result;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch};
use serde_json::json;

fn rs(name: &str, replicas: i32) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_creates_missing_pods_and_deletes_surplus() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rs1").await?;
    let created: ReplicaSet = common::create(&c.client, "rs1", rs("web", 3)).await?;
    let uid = created.uid().unwrap_or_default();

    let pods = common::wait_for(20, "3 pods", || async {
        let p = common::live_pods(&c.client, "rs1", "app=web").await?;
        Ok((p.len() == 3).then_some(p))
    })
    .await?;
    for p in &pods {
        assert!(
            p.name_any().starts_with("web-"),
            "generateName from the owner: {}",
            p.name_any()
        );
        let owner = p.owner_references().first().cloned().unwrap_or_default();
        assert_eq!(
            (
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            (uid.as_str(), Some(true), Some(true))
        );
    }

    // A deleted pod is replaced.
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "rs1");
    pod_api
        .delete(&pods[0].name_any(), &DeleteParams::default())
        .await?;
    common::wait_for(20, "replacement pod", || async {
        let p = common::live_pods(&c.client, "rs1", "app=web").await?;
        Ok((p.len() == 3 && p.iter().all(|x| x.name_any() != pods[0].name_any())).then_some(()))
    })
    .await?;

    // Status follows readiness.
    common::make_all_ready(&c.client, "rs1", "app=web").await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "rs1");
    common::wait_for(20, "ready status", || async {
        let s = rs_api.get("web").await?.status.unwrap_or_default();
        Ok((s.replicas == 3
            && s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.fully_labeled_replicas == Some(3)
            && s.observed_generation == Some(1))
        .then_some(()))
    })
    .await?;

    // Scaling down deletes the surplus, and scaling up creates more.
    common::patch(
        &rs_api,
        "web",
        &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
    )
    .await?;
    common::wait_for(20, "1 pod", || async {
        Ok((common::live_pods(&c.client, "rs1", "app=web").await?.len() == 1).then_some(()))
    })
    .await?;
    common::patch(
        &rs_api,
        "web",
        &Patch::Merge(json!({ "spec": { "replicas": 40 } })),
    )
    .await?;
    common::wait_for(30, "40 pods", || async {
        Ok((common::live_pods(&c.client, "rs1", "app=web").await?.len() == 40).then_some(()))
    })
    .await?;
    // It settles at exactly 40 (expectations keep a lagging cache from creating more).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        common::live_pods(&c.client, "rs1", "app=web").await?.len(),
        40
    );
    common::wait_for(20, "status replicas 40", || async {
        Ok((rs_api.get("web").await?.status.unwrap_or_default().replicas == 40).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_adopts_matching_orphans() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rs2").await?;
    for n in ["orphan-a", "orphan-b"] {
        let _: Pod = common::create(
            &c.client,
            "rs2",
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": n, "labels": { "app": "adopt" } },
                "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
            }),
        )
        .await?;
    }
    let created: ReplicaSet = common::create(&c.client, "rs2", rs("adopt", 3)).await?;
    let uid = created.uid().unwrap_or_default();
    let pods = common::wait_for(20, "2 adopted + 1 created", || async {
        let p = common::live_pods(&c.client, "rs2", "app=adopt").await?;
        let owned = p
            .iter()
            .filter(|x| {
                x.owner_references()
                    .iter()
                    .any(|o| o.uid == uid && o.controller == Some(true))
            })
            .count();
        Ok((p.len() == 3 && owned == 3).then_some(p))
    })
    .await?;
    assert!(pods.iter().any(|p| p.name_any() == "orphan-a"));
    assert!(pods.iter().any(|p| p.name_any() == "orphan-b"));

    // A pod relabelled out of the selector is released, and replaced.
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "rs2");
    common::patch(
        &pod_api,
        "orphan-a",
        &Patch::Merge(json!({ "metadata": { "labels": { "app": "other" } } })),
    )
    .await?;
    common::wait_for(20, "release and replace", || async {
        let released = pod_api.get("orphan-a").await?;
        let still = common::live_pods(&c.client, "rs2", "app=adopt").await?;
        Ok((released.owner_references().is_empty() && still.len() == 3).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controller_keeps_its_replicas() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rc1").await?;
    let _: ReplicationController = common::create(
        &c.client,
        "rc1",
        json!({
            "apiVersion": "v1", "kind": "ReplicationController",
            "metadata": { "name": "legacy" },
            "spec": {
                "replicas": 2,
                "selector": { "app": "legacy" },
                "template": {
                    "metadata": { "labels": { "app": "legacy" } },
                    "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
                }
            }
        }),
    )
    .await?;
    common::wait_for(20, "2 pods", || async {
        Ok((common::live_pods(&c.client, "rc1", "app=legacy")
            .await?
            .len()
            == 2)
            .then_some(()))
    })
    .await?;
    common::make_all_ready(&c.client, "rc1", "app=legacy").await?;
    let api: Api<ReplicationController> = Api::namespaced(c.client.clone(), "rc1");
    common::wait_for(20, "ready", || async {
        Ok((api
            .get("legacy")
            .await?
            .status
            .unwrap_or_default()
            .ready_replicas
            == Some(2))
        .then_some(()))
    })
    .await?;
    Ok(())
}
