//! `tandem bench netpol`: how long NetworkPolicy enforcement takes to bring the kernel in step
//! after a change, with 1,000 policies (issue target: p99 under 1 s).
//!
//! A synthetic cluster (namespaces, pods with named ports spread over nodes, policies of every
//! kind: pod and namespace selectors, ipBlocks with except ranges, named ports, port ranges,
//! egress, default deny) is built in memory; then one policy at a time is changed and the sync
//! the controller would do is timed: model → nftables text → `nft -f` of the whole table. The
//! table is applied in a private network namespace of the bench (so the made-up addresses never
//! touch this machine's traffic); without root only the model and the text are timed, and the
//! bench says so.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{Value, json};
use tandem_proxy::netpol::model::{ClusterState, PodInfo};
use tandem_proxy::netpol::rules;
use tandem_proxy::nft::Nft;

use crate::bench::percentile;
use crate::bench_services::PrivateNetns;

#[derive(Args)]
pub struct NetpolBench {
    /// NetworkPolicies in the cluster.
    #[arg(long, default_value_t = 1_000)]
    policies: usize,
    /// Pods in the cluster (peers), spread over namespaces and nodes.
    #[arg(long, default_value_t = 5_000)]
    pods: usize,
    /// How many of them run on the enforcing node (upstream's default pod limit is 110).
    #[arg(long, default_value_t = 110)]
    local_pods: usize,
    /// Namespaces.
    #[arg(long, default_value_t = 50)]
    namespaces: usize,
    /// Policy changes measured, one sync each.
    #[arg(long, default_value_t = 100)]
    changes: usize,
}

const NODE: &str = "bench-node";

/// Pod `j`: in namespace `j % namespaces`, address 10.200.0.0/16 and up, on the bench node for
/// the first `local` ones.
fn pod(j: usize, namespaces: usize, local: usize) -> anyhow::Result<Pod> {
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 200, 0, 2)) + j as u32);
    let node = if j < local {
        NODE.to_string()
    } else {
        format!("node-{}", j % 50)
    };
    Ok(serde_json::from_value(json!({
        "metadata": {
            "namespace": format!("ns-{}", j % namespaces),
            "name": format!("pod-{j}"),
            "labels": {"app": format!("a{}", j % 10), "tier": format!("t{}", j % 3)}
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080},
                {"name": "metrics", "containerPort": 9090}
            ]}]
        },
        "status": {"phase": "Running", "podIP": ip.to_string()}
    }))?)
}

/// Policy `k` of five kinds in turn; `variant` changes its port so every change is real.
fn policy(k: usize, namespaces: usize, variant: usize) -> anyhow::Result<NetworkPolicy> {
    let port = 8000 + (variant % 1000) as i64;
    let select = json!({"matchLabels": {"app": format!("a{}", k % 10)}});
    let spec: Value = match k % 5 {
        0 => json!({
            "podSelector": select,
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": format!("a{}", (k + 1) % 10)}}}],
                         "ports": [{"port": port}, {"port": "http"}]}]
        }),
        1 => json!({
            "podSelector": select,
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": format!("team{}", k % 5)}},
                                   "podSelector": {"matchLabels": {"tier": format!("t{}", k % 3)}}}],
                         "ports": [{"port": "http"}, {"protocol": "UDP", "port": port, "endPort": port + 100}]}]
        }),
        2 => json!({
            "podSelector": select,
            "ingress": [{"from": [{"ipBlock": {"cidr": format!("172.16.{}.0/24", k % 256),
                                               "except": [format!("172.16.{}.128/25", k % 256)]}}],
                         "ports": [{"port": port}]}]
        }),
        3 => json!({
            "podSelector": select,
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": format!("a{}", (k + 3) % 10)}}}],
                        "ports": [{"port": "metrics"}, {"protocol": "UDP", "port": 53}]},
                       {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}],
                        "ports": [{"port": port}]}]
        }),
        _ => json!({
            "podSelector": {"matchLabels": {"tier": format!("t{}", k % 3)}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"namespaceSelector": {}}], "ports": [{"port": port}]}]
        }),
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"namespace": format!("ns-{}", k % namespaces), "name": format!("np-{k}")},
        "spec": spec
    }))?)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn summary(label: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "  {label:<28} p50 {:>10}  p99 {:>10}  max {:>10}",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(percentile(&times, 1.0))
    );
}

pub async fn run(b: NetpolBench) -> anyhow::Result<()> {
    let namespaces = b.namespaces.max(1);
    let mut state = ClusterState::default();
    for i in 0..namespaces {
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": format!("ns-{i}"), "labels": {"team": format!("team{}", i % 5)}}
        }))?;
        state.apply_namespace(&ns);
    }
    for j in 0..b.pods {
        state.apply_pod(&pod(j, namespaces, b.local_pods)?);
    }
    for k in 0..b.policies {
        state.apply_policy(&policy(k, namespaces, 0)?);
    }
    let netns = match PrivateNetns::new().await {
        Ok(n) => Some(n),
        Err(e) => {
            println!("note: {e:#}");
            None
        }
    };
    let nft = match &netns {
        Some(n) => {
            let nft = Nft { netns: n.path() };
            match nft.unavailable_reason().await {
                None => Some(nft),
                Some(why) => {
                    println!("note: {why}");
                    None
                }
            }
        }
        None => None,
    };
    println!(
        "tandem bench netpol: {} policies, {} pods ({} on the enforcing node), {} namespaces; {} changes, one full sync each{}",
        b.policies,
        b.pods,
        b.local_pods.min(b.pods),
        namespaces,
        b.changes,
        if nft.is_some() {
            " (nft -f in a private network namespace)"
        } else {
            " — NOT APPLIED: no root/nft here, model and text only"
        }
    );
    let table = format!("tandem-netpol-bench-{}", std::process::id());
    let local = |p: &PodInfo| p.node.as_deref() == Some(NODE);

    let mut model_t = Vec::new();
    let mut text_t = Vec::new();
    let mut apply_t = Vec::new();
    let mut total_t = Vec::new();
    let mut last = (0usize, 0usize, 0usize);
    for i in 0..=b.changes {
        if i > 0 && b.policies > 0 {
            let k = (i * 7919) % b.policies;
            state.apply_policy(&policy(k, namespaces, i)?);
        }
        let started = Instant::now();
        let pods = state.pod_rules(&local);
        let modelled = Instant::now();
        let script = rules::full_script(&table, &pods);
        let written = Instant::now();
        if let Some(nft) = &nft {
            nft.apply(&script)
                .await
                .with_context(|| format!("nft refused the table ({} bytes)", script.len()))?;
        }
        let applied = Instant::now();
        last = (pods.len(), script.len(), script.lines().count());
        if i == 0 {
            println!(
                "  first full load: {} (model {}, text {}, nft {})",
                ms(applied - started),
                ms(modelled - started),
                ms(written - modelled),
                ms(applied - written)
            );
            continue;
        }
        model_t.push(modelled - started);
        text_t.push(written - modelled);
        apply_t.push(applied - written);
        total_t.push(applied - started);
    }
    println!(
        "  table: {} isolated pods, {} lines, {} KiB of nft text",
        last.0,
        last.2,
        last.1 / 1024
    );
    if !total_t.is_empty() {
        summary("model (policies → pods)", model_t);
        summary("nft text", text_t);
        if nft.is_some() {
            summary("nft -f (kernel)", apply_t);
        }
        summary("sync, model → applied", total_t);
    }
    if let Some(nft) = &nft {
        let _ = nft.apply(&rules::delete_script(&table)).await;
    }
    drop(netns);
    Ok(())
}
