//! EndpointSlice and Endpoints controller behaviour against a real API server.

mod common;

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

fn pod(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": "web" } },
        "spec": {
            "nodeName": "node-a",
            "containers": [{ "name": "web", "image": "nginx", "ports": [{ "name": "http", "containerPort": 8080 }] }]
        }
    })
}

/// Endpoint address → (ready, serving, terminating), from the Service's slices.
async fn slice_view(
    api: &Api<EndpointSlice>,
) -> Result<(BTreeMap<String, (bool, bool, bool)>, Vec<EndpointSlice>)> {
    let slices = api
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await?
        .items;
    let mut view = BTreeMap::new();
    for s in &slices {
        for e in &s.endpoints {
            let c = e.conditions.clone().unwrap_or_default();
            for a in &e.addresses {
                view.insert(
                    a.clone(),
                    (
                        c.ready.unwrap_or(false),
                        c.serving.unwrap_or(false),
                        c.terminating.unwrap_or(false),
                    ),
                );
            }
        }
    }
    Ok((view, slices))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpointslice_lists_ready_pod_addresses() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "es1").await?;
    let _: Service = common::create(&c.client, "es1", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "web" },
        "spec": { "selector": { "app": "web" }, "ports": [{ "name": "http", "port": 80, "targetPort": "http" }] }
    }))
    .await?;
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "es1");
    let a: Pod = common::create(&c.client, "es1", pod("a")).await?;
    let b: Pod = common::create(&c.client, "es1", pod("b")).await?;
    common::make_ready(&c.client, &a, "10.244.0.5").await?;
    // b has an IP but is not ready.
    let patch = json!({ "status": { "phase": "Running", "podIP": "10.244.0.6", "podIPs": [{ "ip": "10.244.0.6" }] } });
    pod_api
        .patch_status("b", &Default::default(), &kube::api::Patch::Merge(&patch))
        .await?;

    let slice_api: Api<EndpointSlice> = Api::namespaced(c.client.clone(), "es1");
    let (_, slices) = common::wait_for(20, "slice with both pods", || async {
        let (view, slices) = slice_view(&slice_api).await?;
        let want = BTreeMap::from([
            ("10.244.0.5".to_string(), (true, true, false)),
            ("10.244.0.6".to_string(), (false, false, false)),
        ]);
        Ok((view == want).then_some((view, slices)))
    })
    .await?;
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.address_type, "IPv4");
    assert_eq!(
        s.labels()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    let port = s
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .next()
        .unwrap_or_default();
    assert_eq!(
        (port.name.as_deref(), port.port, port.protocol.as_deref()),
        (Some("http"), Some(8080), Some("TCP"))
    );
    let ep = s
        .endpoints
        .iter()
        .find(|e| e.addresses == ["10.244.0.5"])
        .cloned()
        .unwrap_or_default();
    assert_eq!(ep.node_name.as_deref(), Some("node-a"));
    assert_eq!(ep.target_ref.and_then(|t| t.name), Some(a.name_any()));

    // Legacy Endpoints: ready and not-ready addresses.
    let ep_api: Api<Endpoints> = Api::namespaced(c.client.clone(), "es1");
    common::wait_for(20, "endpoints", || async {
        let Some(e) = ep_api.get_opt("web").await? else {
            return Ok(None);
        };
        let subset = e
            .subsets
            .unwrap_or_default()
            .into_iter()
            .next()
            .unwrap_or_default();
        let ready: Vec<String> = subset
            .addresses
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.ip)
            .collect();
        let not_ready: Vec<String> = subset
            .not_ready_addresses
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.ip)
            .collect();
        Ok((ready == ["10.244.0.5"] && not_ready == ["10.244.0.6"]).then_some(()))
    })
    .await?;

    // b becomes ready; then a (bound to a node, so deletion is graceful) starts terminating.
    common::make_ready(&c.client, &b, "10.244.0.6").await?;
    pod_api.delete("a", &Default::default()).await?;
    common::wait_for(20, "terminating endpoint", || async {
        let (view, _) = slice_view(&slice_api).await?;
        let want = BTreeMap::from([
            ("10.244.0.5".to_string(), (false, true, true)),
            ("10.244.0.6".to_string(), (true, true, false)),
        ]);
        Ok((view == want).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_carry_the_hostname_of_pods_whose_subdomain_is_the_service() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "es-host").await?;
    let _: Service = common::create(&c.client, "es-host", json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "web" },
        "spec": { "clusterIP": "None", "selector": { "app": "web" }, "ports": [{ "name": "http", "port": 80 }] }
    }))
    .await?;
    let mut named = pod("web-0");
    named["spec"]["hostname"] = json!("web-0");
    named["spec"]["subdomain"] = json!("web");
    let mut elsewhere = pod("other-0");
    elsewhere["spec"]["hostname"] = json!("other-0");
    elsewhere["spec"]["subdomain"] = json!("another-service");
    let a: Pod = common::create(&c.client, "es-host", named).await?;
    let b: Pod = common::create(&c.client, "es-host", elsewhere).await?;
    common::make_ready(&c.client, &a, "10.244.0.5").await?;
    common::make_ready(&c.client, &b, "10.244.0.6").await?;

    let slice_api: Api<EndpointSlice> = Api::namespaced(c.client.clone(), "es-host");
    let hostnames = common::wait_for(20, "both endpoints", || async {
        let (view, slices) = slice_view(&slice_api).await?;
        if view.len() != 2 {
            return Ok(None);
        }
        let names: BTreeMap<String, Option<String>> = slices
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .map(|e| (e.addresses[0].clone(), e.hostname.clone()))
            .collect();
        Ok(Some(names))
    })
    .await?;
    assert_eq!(hostnames["10.244.0.5"].as_deref(), Some("web-0"));
    assert_eq!(
        hostnames["10.244.0.6"], None,
        "another Service's subdomain publishes no hostname"
    );
    Ok(())
}
