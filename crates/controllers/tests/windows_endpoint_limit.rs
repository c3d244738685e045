//! The Windows 64-backend note on Services, with every controller running.

mod common;

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

async fn pods(client: &Client, ns: &str, n: usize, windows: bool) -> Result<()> {
    for i in 0..n {
        let mut spec = json!({ "containers": [{ "name": "c", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022" }] });
        if windows {
            spec["os"] = json!({ "name": "windows" });
        }
        let _: Pod = common::create(
            client,
            ns,
            json!({
            "metadata": { "name": format!("p{i}"), "labels": { "app": "web" } }, "spec": spec }),
        )
        .await?;
    }
    Ok(())
}

async fn warnings(client: &Client, ns: &str) -> Result<usize> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("WindowsEndpointLimit")
                && e.type_.as_deref() == Some("Warning")
        })
        .count())
}

async fn service(client: &Client, ns: &str) -> Result<()> {
    let _: Service = common::create(
        client,
        ns,
        json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "port": 80 }] } }),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_with_more_than_64_windows_backends_is_warned_once() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "w1").await?;
    service(&c.client, "w1").await?;
    pods(&c.client, "w1", 66, true).await?;
    common::make_all_ready(&c.client, "w1", "app=web").await?;
    common::wait_for(30, "WindowsEndpointLimit warning", || async {
        Ok((warnings(&c.client, "w1").await? > 0).then_some(()))
    })
    .await?;
    // More endpoint changes do not repeat it.
    pods_extra(&c.client, "w1").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(warnings(&c.client, "w1").await?, 1);
    let ev = Api::<Event>::namespaced(c.client.clone(), "w1")
        .list(&ListParams::default())
        .await?;
    let msg = ev
        .items
        .iter()
        .find_map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(msg.contains("64 backend pods"), "{msg}");
    Ok(())
}

async fn pods_extra(client: &Client, ns: &str) -> Result<()> {
    let _: Pod = common::create(client, ns, json!({
        "metadata": { "name": "extra", "labels": { "app": "web" } },
        "spec": { "os": { "name": "windows" }, "containers": [{ "name": "c", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022" }] } })).await?;
    common::make_all_ready(client, ns, "app=web").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_with_many_linux_backends_is_not_warned() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "w2").await?;
    service(&c.client, "w2").await?;
    pods(&c.client, "w2", 66, false).await?;
    common::make_all_ready(&c.client, "w2", "app=web").await?;
    common::wait_for(30, "66 endpoints", || async {
        let slices = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
            c.client.clone(),
            "w2",
        )
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await?;
        let n: usize = slices.items.iter().map(|s| s.endpoints.len()).sum();
        Ok((n == 66).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(warnings(&c.client, "w2").await?, 0);
    Ok(())
}
