//! Deployment controller behaviour against a real API server, with pods made Ready by the test.

mod common;

use std::collections::BTreeSet;

use anyhow::Result;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

fn deployment(name: &str, replicas: i32, strategy: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "nginx:1.0" }] }
            }
        }
    })
}

fn image_of(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Waits until the Deployment reports a finished rollout as `kubectl rollout status` judges it,
/// marking pods Ready along the way.
async fn wait_rolled_out(
    c: &common::Cluster,
    ns: &str,
    name: &str,
    selector: &str,
) -> Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), ns);
    common::wait_for(60, "rollout complete", || async {
        common::make_all_ready(&c.client, ns, selector).await?;
        let d = api.get(name).await?;
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = d.status.clone().unwrap_or_default();
        let done = s.observed_generation >= d.metadata.generation
            && s.updated_replicas == Some(want)
            && s.replicas == Some(want)
            && s.available_replicas == Some(want);
        Ok(done.then_some(d))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_reports_available_condition() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d1").await?;
    let _: Deployment = common::create(
        &c.client,
        "d1",
        deployment("web", 3, json!({ "type": "RollingUpdate" })),
    )
    .await?;
    wait_rolled_out(&c, "d1", "web", "app=web").await?;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d1");
    let d = common::wait_for(20, "conditions", || async {
        let d = api.get("web").await?;
        let conds = d
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let ok = conds.iter().any(|c| {
            c.type_ == "Available"
                && c.status == "True"
                && c.reason.as_deref() == Some("MinimumReplicasAvailable")
        }) && conds.iter().any(|c| {
            c.type_ == "Progressing"
                && c.status == "True"
                && c.reason.as_deref() == Some("NewReplicaSetAvailable")
        });
        Ok(ok.then_some(d))
    })
    .await?;
    let status = d.status.clone().unwrap_or_default();
    assert_eq!(status.ready_replicas, Some(3));
    assert_eq!(status.unavailable_replicas.unwrap_or(0), 0);
    assert_eq!(
        d.annotations()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("1")
    );
    let progressing = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Progressing");
    let rs_name = Api::<ReplicaSet>::namespaced(c.client.clone(), "d1")
        .list(&ListParams::default())
        .await?
        .items[0]
        .name_any();
    assert_eq!(
        progressing.and_then(|c| c.message),
        Some(format!(
            "ReplicaSet \"{rs_name}\" has successfully progressed."
        ))
    );

    // The ReplicaSet carries the template hash in its name, selector and template labels.
    let rs = Api::<ReplicaSet>::namespaced(c.client.clone(), "d1")
        .get(&rs_name)
        .await?;
    let hash = rs
        .labels()
        .get("pod-template-hash")
        .cloned()
        .unwrap_or_default();
    assert_eq!(rs_name, format!("web-{hash}"));
    let spec = rs.spec.unwrap_or_default();
    assert_eq!(
        spec.selector
            .match_labels
            .unwrap_or_default()
            .get("pod-template-hash"),
        Some(&hash)
    );
    assert_eq!(
        rs.metadata
            .annotations
            .unwrap_or_default()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("1")
    );

    // Scaling through the scale subresource (what `kubectl scale` does) resizes the ReplicaSet.
    let scale = json!({ "spec": { "replicas": 5 } });
    common::wait_for(10, "scale patch", || async {
        Ok(api
            .patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .ok())
    })
    .await?;
    wait_rolled_out(&c, "d1", "web", "app=web").await?;
    assert_eq!(
        common::live_pods(&c.client, "d1", "app=web").await?.len(),
        5
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolling_update_respects_max_surge_and_unavailable() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d2").await?;
    let strategy = json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": "25%" } });
    let _: Deployment = common::create(&c.client, "d2", deployment("web", 4, strategy)).await?;
    wait_rolled_out(&c, "d2", "web", "app=web").await?;

    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d2");
    let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "app", "image": "nginx:2.0" }] } } } });
    common::patch(&api, "web", &Patch::Strategic(patch.clone())).await?;

    // Step the rollout by making pods ready one pass at a time; at every observation the pod
    // count stays within replicas + maxSurge (5) and ready pods within replicas - maxUnavailable (3).
    let mut max_seen = 0;
    let mut min_ready = usize::MAX;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pods = common::live_pods(&c.client, "d2", "app=web").await?;
        let ready = pods.iter().filter(|p| common::is_ready(p)).count();
        max_seen = max_seen.max(pods.len());
        min_ready = min_ready.min(ready);
        let d = api.get("web").await?;
        let s = d.status.clone().unwrap_or_default();
        if pods.len() == 4
            && pods
                .iter()
                .all(|p| image_of(p) == "nginx:2.0" && common::is_ready(p))
            && s.updated_replicas == Some(4)
            && s.available_replicas == Some(4)
            && s.replicas == Some(4)
        {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "rollout did not finish: {s:?}"
        );
        // Make at most one unready pod ready per step, so the controller sees intermediate states.
        if let Some(p) = pods.iter().find(|p| !common::is_ready(p)) {
            common::make_ready(&c.client, p, "10.244.1.1").await?;
        }
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    assert!(
        max_seen <= 5,
        "saw {max_seen} pods, more than replicas + maxSurge"
    );
    assert!(
        min_ready >= 3,
        "saw only {min_ready} ready pods, fewer than replicas - maxUnavailable"
    );

    // Two ReplicaSets, revisions 1 (scaled to zero) and 2.
    let rss = Api::<ReplicaSet>::namespaced(c.client.clone(), "d2")
        .list(&ListParams::default())
        .await?
        .items;
    let revs: BTreeSet<(String, i32)> = rss
        .iter()
        .map(|r| {
            (
                r.annotations()
                    .get("deployment.kubernetes.io/revision")
                    .cloned()
                    .unwrap_or_default(),
                r.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        revs,
        BTreeSet::from([("1".to_string(), 0), ("2".to_string(), 4)])
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rollback_makes_the_old_replicaset_current_with_the_next_revision() -> Result<()>
{
    let c = common::start().await?;
    common::namespace(&c.client, "d3").await?;
    let _: Deployment = common::create(
        &c.client,
        "d3",
        deployment("web", 2, json!({ "type": "RollingUpdate" })),
    )
    .await?;
    wait_rolled_out(&c, "d3", "web", "app=web").await?;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d3");
    let rs_api: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "d3");
    let first = rs_api.list(&ListParams::default()).await?.items[0].clone();

    let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "app", "image": "nginx:2.0" }] } } } });
    common::patch(&api, "web", &Patch::Strategic(patch.clone())).await?;
    wait_rolled_out(&c, "d3", "web", "app=web").await?;

    // `kubectl rollout undo` sends a JSON patch replacing the template with the old
    // ReplicaSet's (minus pod-template-hash).
    let mut template = first
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove("pod-template-hash");
    }
    let undo = json!([{ "op": "replace", "path": "/spec/template", "value": template }]);
    common::patch(&api, "web", &Patch::Json(serde_json::from_value(undo)?)).await?;
    let d = wait_rolled_out(&c, "d3", "web", "app=web").await?;
    assert!(
        common::live_pods(&c.client, "d3", "app=web")
            .await?
            .iter()
            .all(|p| image_of(p) == "nginx:1.0")
    );
    let back = rs_api.get(&first.name_any()).await?;
    assert_eq!(
        back.annotations()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        back.annotations()
            .get("deployment.kubernetes.io/revision-history")
            .map(String::as_str),
        Some("1")
    );
    common::wait_for(10, "deployment revision 3", || async {
        let d = api.get("web").await?;
        Ok((d
            .annotations()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str)
            == Some("3"))
        .then_some(()))
    })
    .await?;
    assert_eq!(
        rs_api.list(&ListParams::default()).await?.items.len(),
        2,
        "no third ReplicaSet: {d:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_recreate_removes_old_pods_before_creating_new_ones() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d4").await?;
    let _: Deployment = common::create(
        &c.client,
        "d4",
        deployment("web", 3, json!({ "type": "Recreate" })),
    )
    .await?;
    wait_rolled_out(&c, "d4", "web", "app=web").await?;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d4");
    let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "app", "image": "nginx:2.0" }] } } } });
    common::patch(&api, "web", &Patch::Strategic(patch.clone())).await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pods = common::live_pods(&c.client, "d4", "app=web").await?;
        let images: BTreeSet<String> = pods.iter().map(image_of).collect();
        assert!(
            images.len() <= 1,
            "old and new pods at once under Recreate: {images:?}"
        );
        if pods.len() == 3 && images == BTreeSet::from(["nginx:2.0".to_string()]) {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "recreate did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    wait_rolled_out(&c, "d4", "web", "app=web").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_removes_its_replicasets_and_pods() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d5").await?;
    let _: Deployment = common::create(
        &c.client,
        "d5",
        deployment("web", 3, json!({ "type": "RollingUpdate" })),
    )
    .await?;
    wait_rolled_out(&c, "d5", "web", "app=web").await?;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d5");
    api.delete("web", &DeleteParams::background()).await?;
    let rs_api: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "d5");
    common::wait_for(30, "replica sets and pods gone", || async {
        let rss = rs_api.list(&ListParams::default()).await?.items.len();
        let pods = common::live_pods(&c.client, "d5", "app=web").await?.len();
        Ok((rss == 0 && pods == 0).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_deployment_does_not_roll_out_until_resumed() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d6").await?;
    let _: Deployment = common::create(
        &c.client,
        "d6",
        deployment("web", 2, json!({ "type": "RollingUpdate" })),
    )
    .await?;
    wait_rolled_out(&c, "d6", "web", "app=web").await?;
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d6");
    common::patch(
        &api,
        "web",
        &Patch::Merge(json!({ "spec": { "paused": true } })),
    )
    .await?;
    common::wait_for(20, "paused condition", || async {
        let d = api.get("web").await?;
        let c = d.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(c.iter()
            .any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("DeploymentPaused"))
            .then_some(()))
    })
    .await?;
    // `kubectl rollout restart` sets a template annotation.
    let restart = json!({ "spec": { "template": { "metadata": { "annotations": { "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z" } } } } });
    common::patch(&api, "web", &Patch::Strategic(restart.clone())).await?;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let rs_api: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "d6");
    assert_eq!(
        rs_api.list(&ListParams::default()).await?.items.len(),
        1,
        "no rollout while paused"
    );
    common::patch(
        &api,
        "web",
        &Patch::Merge(json!({ "spec": { "paused": false } })),
    )
    .await?;
    wait_rolled_out(&c, "d6", "web", "app=web").await?;
    let pods = common::live_pods(&c.client, "d6", "app=web").await?;
    assert!(pods.iter().all(|p| {
        p.annotations()
            .contains_key("kubectl.kubernetes.io/restartedAt")
    }));
    assert_eq!(rs_api.list(&ListParams::default()).await?.items.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_that_makes_no_progress_reports_progress_deadline_exceeded() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "d7").await?;
    let mut d = deployment("stuck", 2, json!({ "type": "RollingUpdate" }));
    d["spec"]["progressDeadlineSeconds"] = json!(1);
    let _: Deployment = common::create(&c.client, "d7", d).await?;
    // Pods are never made ready.
    let api: Api<Deployment> = Api::namespaced(c.client.clone(), "d7");
    let cond = common::wait_for(30, "ProgressDeadlineExceeded", || async {
        let d = api.get("stuck").await?;
        let c = d.status.and_then(|s| s.conditions).unwrap_or_default();
        Ok(c.into_iter().find(|c| {
            c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        }))
    })
    .await?;
    assert_eq!(cond.status, "False");
    assert!(
        cond.message
            .unwrap_or_default()
            .ends_with("has timed out progressing.")
    );
    let d = api.get("stuck").await?;
    let available = d
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available");
    assert_eq!(
        available.and_then(|c| c.reason).as_deref(),
        Some("MinimumReplicasUnavailable")
    );
    Ok(())
}
