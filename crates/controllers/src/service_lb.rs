//! The built-in service load balancer: `type: LoadBalancer` without a cloud, as k3s' ServiceLB
//! (klipper-lb) gives it. A LoadBalancer Service without `spec.loadBalancerClass` gets
//! `status.loadBalancer.ingress` set to the InternalIPs of the nodes whose service proxy serves
//! load-balancer addresses (nodes labelled [`SERVICE_PROXY_LABEL`]); the proxy on those nodes
//! then forwards the Service's ports on that address, as kube-proxy does for an ingress IP.
//! When no such node is Ready the ingress stays empty (`kubectl get svc` shows `<pending>`), and
//! a Service that stops being a LoadBalancer has the addresses removed again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::controller_utils::SyncResult;
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// The label a node agent puts on its Node when its service proxy runs (value: the proxy's
/// mode, e.g. `nftables`).
pub const SERVICE_PROXY_LABEL: &str = "node.tandem.dev/service-proxy";

struct Ctx {
    client: kube::Client,
    services: Informer<Service>,
    nodes: Informer<Node>,
    queue: WorkQueue,
}

/// Runs the controller until the runtime stops.
pub async fn run(client: kube::Client, nodes: Informer<Node>) {
    let ctx = Arc::new(Ctx {
        services: Informer::start(client.clone()),
        client,
        nodes,
        queue: WorkQueue::named("service"),
    });
    let mut svc_events = ctx.services.subscribe();
    let mut node_events = ctx.nodes.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.services, &ctx.nodes]).await;
    ctx.queue.add_keys(&ctx.services.list());
    ctx.queue
        .run_workers_for(1, "service-lb", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = svc_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = node_events.recv() => {
                let before = change.old.as_deref().and_then(lb_address);
                let after = change.new.as_deref().and_then(lb_address);
                if before != after {
                    for s in ctx.services.list() {
                        if is_ours(&s) {
                            ctx.queue.add(queue_key(s.as_ref()));
                        }
                    }
                }
            }
            else => return,
        }
    }
}

/// Whether this controller balances `svc`: a LoadBalancer Service with no other class.
fn is_ours(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

/// The address a node serves load balancers on: its InternalIP, when it runs a service proxy
/// and is Ready.
fn lb_address(node: &Node) -> Option<String> {
    node.labels().get(SERVICE_PROXY_LABEL)?;
    let status = node.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return None;
    }
    status
        .addresses
        .iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

fn current_ingress(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone())
        .collect()
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(svc) = ctx.services.get(ns, name) else {
        return Ok(None);
    };
    let current = current_ingress(&svc);
    let desired: Vec<String> = if is_ours(&svc) {
        let mut ips: Vec<String> = ctx
            .nodes
            .list()
            .iter()
            .filter_map(|n| lb_address(n))
            .collect();
        ips.sort();
        ips.dedup();
        ips
    } else if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        // No longer a load balancer: what was published goes.
        Vec::new()
    } else {
        // Another class's load balancer: not ours to touch.
        return Ok(None);
    };
    if desired == current {
        return Ok(None);
    }
    let ingress: Vec<serde_json::Value> = desired
        .iter()
        .map(|ip| json!({"ip": ip, "ipMode": "VIP"}))
        .collect();
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    api.patch_status(
        svc.name_any().as_str(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(None)
}
