//! StatefulSet controller behaviour against a real API server; the test plays the node agent by
//! marking pods Running and Ready.

mod common;

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch};
use kube::{Client, ResourceExt};
use serde_json::json;

fn set(name: &str, replicas: i32, policy: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": { "name": name },
        "spec": {
            "replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
            "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": { "labels": { "app": name } },
                          "spec": { "containers": [{ "name": "c", "image": "nginx:1" }] } },
            "volumeClaimTemplates": [{ "metadata": { "name": "data" },
                "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } } }]
        }
    })
}

async fn names(client: &Client, ns: &str, app: &str) -> Result<Vec<String>> {
    let mut n: Vec<String> = common::live_pods(client, ns, &format!("app={app}"))
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    n.sort();
    Ok(n)
}

async fn wait_names(client: &Client, ns: &str, app: &str, want: &[&str]) -> Result<()> {
    common::wait_for(20, &format!("pods {want:?}"), || async {
        let n = names(client, ns, app).await?;
        Ok((n == want).then_some(()))
    })
    .await
}

async fn make_ready(client: &Client, ns: &str, name: &str) -> Result<()> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get(name).await?;
    common::make_ready(client, &pod, "10.244.0.9").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_ready_creates_stable_names_one_at_a_time_with_claims_and_scales_down_in_reverse()
-> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "s1").await?;
    let _: StatefulSet = common::create(&c.client, "s1", set("web", 3, "OrderedReady")).await?;
    wait_names(&c.client, "s1", "web", &["web-0"]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        names(&c.client, "s1", "web").await?,
        ["web-0"],
        "web-1 waits for web-0 to be Ready"
    );
    make_ready(&c.client, "s1", "web-0").await?;
    wait_names(&c.client, "s1", "web", &["web-0", "web-1"]).await?;
    make_ready(&c.client, "s1", "web-1").await?;
    wait_names(&c.client, "s1", "web", &["web-0", "web-1", "web-2"]).await?;
    make_ready(&c.client, "s1", "web-2").await?;

    let pod = Api::<Pod>::namespaced(c.client.clone(), "s1")
        .get("web-1")
        .await?;
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.hostname.as_deref(), Some("web-1"));
    assert_eq!(spec.subdomain.as_deref(), Some("web"));
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "data")
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    assert_eq!(claim.as_deref(), Some("data-web-1"));
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), "s1");
    for i in 0..3 {
        assert!(
            pvcs.get_opt(&format!("data-web-{i}")).await?.is_some(),
            "data-web-{i}"
        );
    }
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "s1");
    common::wait_for(20, "status", || async {
        let s = sts.get("web").await?;
        let st = s.status.clone().unwrap_or_default();
        Ok((st.replicas == 3
            && st.ready_replicas == Some(3)
            && st.current_replicas == Some(3)
            && st.updated_replicas == Some(3)
            && st.current_revision.is_some()
            && st.current_revision == st.update_revision
            && st.observed_generation == s.metadata.generation)
            .then_some(()))
    })
    .await?;

    // Scale down: web-2 goes before web-1, and the claims stay.
    common::patch(
        &sts,
        "web",
        &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
    )
    .await?;
    common::wait_for(20, "scaled down to web-0", || async {
        let n = names(&c.client, "s1", "web").await?;
        anyhow::ensure!(
            !n.contains(&"web-2".to_string()) || n.contains(&"web-1".to_string()),
            "web-1 deleted before web-2: {n:?}"
        );
        Ok((n == ["web-0"]).then_some(()))
    })
    .await?;
    assert!(
        pvcs.get_opt("data-web-2").await?.is_some(),
        "claims are retained"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_policy_creates_all_pods_without_waiting() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "s2").await?;
    let _: StatefulSet = common::create(&c.client, "s2", set("db", 3, "Parallel")).await?;
    wait_names(&c.client, "s2", "db", &["db-0", "db-1", "db-2"]).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_with_partition_updates_only_ordinals_at_or_above_it() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "s3").await?;
    let _: StatefulSet = common::create(&c.client, "s3", set("app", 3, "Parallel")).await?;
    wait_names(&c.client, "s3", "app", &["app-0", "app-1", "app-2"]).await?;
    common::make_all_ready(&c.client, "s3", "app=app").await?;
    let sts: Api<StatefulSet> = Api::namespaced(c.client.clone(), "s3");
    let old_rev = common::wait_for(20, "current revision", || async {
        let st = sts.get("app").await?.status.unwrap_or_default();
        Ok(st.current_revision.filter(|_| st.ready_replicas == Some(3)))
    })
    .await?;
    common::patch(
        &sts,
        "app",
        &Patch::Merge(json!({ "spec": {
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "partition": 1 } },
            "template": { "spec": { "containers": [{ "name": "c", "image": "nginx:2" }] } } } })),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "s3");
    let revision_of = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(name).await?;
            Ok::<_, anyhow::Error>(p.and_then(|p| {
                let image = p.spec.as_ref()?.containers.first()?.image.clone()?;
                let rev = p.labels().get("controller-revision-hash").cloned()?;
                Some((image, rev, p))
            }))
        }
    };
    // Updated from the top, one at a time: the test marks each new pod Ready.
    for name in ["app-2", "app-1"] {
        let pod = common::wait_for(30, &format!("{name} updated"), || async {
            Ok(revision_of(name)
                .await?
                .filter(|(img, _, p)| img == "nginx:2" && p.metadata.deletion_timestamp.is_none()))
        })
        .await?;
        assert_ne!(pod.1, old_rev);
        common::make_ready(&c.client, &pod.2, "10.244.0.7").await?;
    }
    let st = common::wait_for(20, "status after partitioned update", || async {
        let st = sts.get("app").await?.status.unwrap_or_default();
        Ok((st.updated_replicas == Some(2) && st.ready_replicas == Some(3)).then_some(st))
    })
    .await?;
    assert_eq!(st.current_revision.as_deref(), Some(old_rev.as_str()));
    assert_ne!(st.update_revision, st.current_revision);
    assert_eq!(st.current_replicas, Some(1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (img, rev, _) = revision_of("app-0")
        .await?
        .ok_or_else(|| anyhow::anyhow!("app-0 gone"))?;
    assert_eq!(
        (img.as_str(), rev.as_str()),
        ("nginx:1", old_rev.as_str()),
        "below the partition"
    );

    // Partition 0 finishes the rollout and the current revision moves.
    common::patch(
        &sts,
        "app",
        &Patch::Merge(
            json!({ "spec": { "updateStrategy": { "rollingUpdate": { "partition": 0 } } } }),
        ),
    )
    .await?;
    let pod = common::wait_for(30, "app-0 updated", || async {
        Ok(revision_of("app-0")
            .await?
            .filter(|(img, _, p)| img == "nginx:2" && p.metadata.deletion_timestamp.is_none()))
    })
    .await?;
    common::make_ready(&c.client, &pod.2, "10.244.0.8").await?;
    common::wait_for(20, "rollout complete", || async {
        let st = sts.get("app").await?.status.unwrap_or_default();
        Ok(
            (st.current_revision == st.update_revision && st.current_replicas == Some(3))
                .then_some(()),
        )
    })
    .await?;
    Ok(())
}
