//! The built-in service load balancer against a real API server.

mod common;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn ingress(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect()
}

async fn node(client: &kube::Client, name: &str, ip: &str, proxy: bool) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = json!({"kubernetes.io/os": "linux"});
    if proxy {
        labels["node.tandem.dev/service-proxy"] = json!("nftables");
    }
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    nodes.create(&PostParams::default(), &n).await?;
    let status = json!({"status": {
        "addresses": [{"type": "InternalIP", "address": ip}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_gets_the_addresses_of_the_nodes_that_proxy_it() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "lb").await?;
    node(&c.client, "proxy-node", "127.0.0.11", true).await?;
    node(&c.client, "plain-node", "127.0.0.12", false).await?;
    let _: Service = common::create(
        &c.client,
        "lb",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"port": 80}]}
        }),
    )
    .await?;
    let _: Service = common::create(
        &c.client,
        "lb",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "elsewhere"},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/other",
                     "selector": {"app": "web"}, "ports": [{"port": 81}]}
        }),
    )
    .await?;
    let api: Api<Service> = Api::namespaced(c.client.clone(), "lb");
    common::wait_for(20, "ingress on the proxy node's address", || async {
        let s = api.get("web").await?;
        Ok((ingress(&s) == ["127.0.0.11"]).then_some(()))
    })
    .await?;
    assert!(
        ingress(&api.get("elsewhere").await?).is_empty(),
        "another class is left alone"
    );

    // No longer a load balancer: the address is withdrawn.
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
    )
    .await?;
    common::wait_for(20, "ingress withdrawn", || async {
        let s = api.get("web").await?;
        Ok(ingress(&s).is_empty().then_some(()))
    })
    .await?;
    Ok(())
}
