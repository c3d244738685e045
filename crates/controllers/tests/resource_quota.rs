//! ResourceQuota controller and admission against a real API server: the controller fills in
//! status, admission charges creates and refuses what does not fit, deletions and finished pods
//! give usage back.

mod common;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

fn pod(name: &str, cpu: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"containers": [{
        "name": "app", "image": "busybox", "resources": {"requests": {"cpu": cpu}}
    }]}})
}

async fn used(client: &Client, ns: &str, name: &str) -> Result<Option<Value>> {
    let q = Api::<ResourceQuota>::namespaced(client.clone(), ns)
        .get(name)
        .await?;
    let v = serde_json::to_value(q)?;
    Ok(v.pointer("/status/used").cloned())
}

/// Waits until the quota's `status.used[resource]` reads `want`.
async fn wait_used(
    client: &Client,
    ns: &str,
    name: &str,
    resource: &str,
    want: &str,
) -> Result<()> {
    common::wait_for(20, &format!("{resource}={want} in {ns}/{name}"), || async {
        let u = used(client, ns, name).await?;
        Ok(
            u.filter(|u| u.get(resource).and_then(Value::as_str) == Some(want))
                .map(|_| ()),
        )
    })
    .await
}

async fn create_quota(client: &Client, ns: &str, name: &str, hard: Value) -> Result<()> {
    common::create::<ResourceQuota>(
        client,
        ns,
        json!({"metadata": {"name": name}, "spec": {"hard": hard}}),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_status_is_charged_on_create_and_given_back_on_delete() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rq1").await?;
    create_quota(
        &c.client,
        "rq1",
        "q",
        json!({"pods": "2", "requests.cpu": "1", "count/secrets": "5"}),
    )
    .await?;
    wait_used(&c.client, "rq1", "q", "pods", "0").await?;
    let q = Api::<ResourceQuota>::namespaced(c.client.clone(), "rq1")
        .get("q")
        .await?;
    let status = serde_json::to_value(&q)?["status"].clone();
    assert_eq!(
        status["hard"],
        json!({"count/secrets": "5", "pods": "2", "requests.cpu": "1"})
    );
    assert_eq!(
        status["used"],
        json!({"count/secrets": "0", "pods": "0", "requests.cpu": "0"})
    );

    common::create::<Pod>(&c.client, "rq1", pod("a", "250m")).await?;
    common::create::<Pod>(&c.client, "rq1", pod("b", "500m")).await?;
    let u = used(&c.client, "rq1", "q").await?.context("used")?;
    assert_eq!(u["pods"], "2");
    assert_eq!(u["requests.cpu"], "750m");

    let err = common::create::<Pod>(&c.client, "rq1", pod("c", "100m"))
        .await
        .expect_err("third pod is over quota");
    let kube_err = err.downcast_ref::<kube::Error>().context("api error")?;
    let kube::Error::Api(status) = kube_err else {
        anyhow::bail!("unexpected error {err}");
    };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );

    // A pod that is not scheduled goes at once; its usage comes back.
    Api::<Pod>::namespaced(c.client.clone(), "rq1")
        .delete("a", &DeleteParams::default())
        .await?;
    wait_used(&c.client, "rq1", "q", "pods", "1").await?;
    wait_used(&c.client, "rq1", "q", "requests.cpu", "500m").await?;

    // A finished pod keeps its object but no longer uses compute quota.
    let b = Api::<Pod>::namespaced(c.client.clone(), "rq1")
        .get("b")
        .await?;
    common::finish_pod(&c.client, &b, "Succeeded").await?;
    wait_used(&c.client, "rq1", "q", "pods", "0").await?;

    // Object counts: charged on create, given back on delete.
    common::create::<Secret>(&c.client, "rq1", json!({"metadata": {"name": "s"}})).await?;
    wait_used(&c.client, "rq1", "q", "count/secrets", "1").await?;
    Api::<Secret>::namespaced(c.client.clone(), "rq1")
        .delete("s", &DeleteParams::default())
        .await?;
    wait_used(&c.client, "rq1", "q", "count/secrets", "0").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_cannot_overrun_a_quota() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rq2").await?;
    create_quota(&c.client, "rq2", "q", json!({"secrets": "3"})).await?;
    wait_used(&c.client, "rq2", "q", "secrets", "0").await?;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let client = c.client.clone();
        tasks.push(tokio::spawn(async move {
            common::create::<Secret>(
                &client,
                "rq2",
                json!({"metadata": {"name": format!("s{i}")}}),
            )
            .await
            .is_ok()
        }));
    }
    let mut created = 0;
    for t in tasks {
        if t.await? {
            created += 1;
        }
    }
    assert_eq!(created, 3);
    let list = Api::<Secret>::namespaced(c.client.clone(), "rq2")
        .list(&Default::default())
        .await?;
    assert_eq!(list.items.len(), 3);
    wait_used(&c.client, "rq2", "q", "secrets", "3").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_hard_updates_status_hard() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "rq3").await?;
    create_quota(&c.client, "rq3", "q", json!({"services": "1"})).await?;
    wait_used(&c.client, "rq3", "q", "services", "0").await?;
    let api = Api::<ResourceQuota>::namespaced(c.client.clone(), "rq3");
    api.patch(
        "q",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hard": {"services": "4", "secrets": "2"}}})),
    )
    .await?;
    common::wait_for(20, "status.hard raised", || async {
        let q = serde_json::to_value(api.get("q").await?)?;
        Ok(
            (q.pointer("/status/hard/services").and_then(Value::as_str) == Some("4")
                && q.pointer("/status/used/secrets").is_some())
            .then_some(()),
        )
    })
    .await?;
    Ok(())
}
