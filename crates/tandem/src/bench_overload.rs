//! `tandem bench overload`: what system traffic gets while one user floods the API server.
//!
//! One in-process server (the flags' request bounds, API Priority and Fairness as
//! kube-apiserver's defaults) serves, in one run: first the system traffic alone, then the same
//! system traffic while many clients of one ordinary user LIST and CREATE ConfigMaps as fast as
//! they can. The system traffic is what upstream's suggested FlowSchemas protect: node
//! heartbeats (each node renews its Lease and patches its status as `system:node:NAME`, the
//! `node-high` level) and scheduler bindings (`pods/binding` as `system:kube-scheduler`, the
//! `workload-high` level). Printed: their p50/p99 without and with the flood, the flood's own
//! outcome (requests, the share refused with 429), and how full the flooding user's level was
//! (its seats in use and requests queued, sampled every 50 ms).
//!
//! The flooders do not retry 429s (to count them); the system clients are kube-rs clients
//! with their default retry of 429s, as tandem's components run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::bench::{ms, percentile};
use crate::{FlowControlArgs, ServerArgs};

#[derive(Args)]
pub struct OverloadBench {
    /// Flooding clients, all one ordinary user (each its own connection).
    #[arg(long, default_value_t = 128)]
    clients: usize,
    /// Seconds of each phase (system traffic alone, then under the flood).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Emulated nodes heartbeating (a Lease renewal and a status patch each per interval).
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Milliseconds between one node's heartbeats.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
    /// Scheduler bindings per second.
    #[arg(long, default_value_t = 10)]
    bindings_per_second: u64,
    /// Stop each flooding client after this many requests (a bound besides the time).
    #[arg(long, default_value_t = 100_000)]
    max_requests_per_client: u64,
    #[command(flatten)]
    flow_control: FlowControlArgs,
}

/// Latencies of one kind of system request in one phase.
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    errors: usize,
}

impl Samples {
    fn line(&mut self, label: &str) {
        self.latencies.sort();
        println!(
            "{label:<28} {:>6}  p50 {:>10}  p99 {:>10}  max {:>10}  errors {}",
            self.latencies.len(),
            ms(percentile(&self.latencies, 0.5)),
            ms(percentile(&self.latencies, 0.99)),
            ms(percentile(&self.latencies, 1.0)),
            self.errors,
        );
    }
}

/// The flood's outcome.
#[derive(Default)]
struct Flood {
    ok: AtomicU64,
    rejected: AtomicU64,
    other: AtomicU64,
}

pub async fn run(b: OverloadBench) -> anyhow::Result<()> {
    anyhow::ensure!(b.nodes > 0, "--nodes must be at least 1");
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let args = ServerArgs {
        flow_control: b.flow_control.clone(),
        ..crate::bench::server_args(dir.path())
    };
    let (server, _store) = crate::cluster::start(&args).await?;
    let admin = crate::cluster::client_from(&args.kubeconfig_path()).await?;
    let fc = server.state.flow_control.clone();
    let seats = |name: &str| {
        fc.levels()
            .into_iter()
            .find(|l| l.name == name)
            .and_then(|l| l.seats)
            .map_or("unbounded".to_string(), |s| s.to_string())
    };
    let flood_level = if b.flow_control.enable_priority_and_fairness {
        "global-default"
    } else {
        "readOnly"
    };
    println!(
        "tandem bench overload: {} clients of one user (LIST and CREATE ConfigMaps) vs {} nodes heartbeating every {} ms and {} bindings/s, {} s per phase",
        b.clients, b.nodes, b.heartbeat_ms, b.bindings_per_second, b.seconds
    );
    println!(
        "  --max-requests-inflight {} --max-mutating-requests-inflight {} --enable-priority-and-fairness {} --flow-control-queue-wait {:?}; seats: node-high {}, workload-high {}, {flood_level} {}",
        b.flow_control.max_requests_inflight,
        b.flow_control.max_mutating_requests_inflight,
        b.flow_control.enable_priority_and_fairness,
        b.flow_control.flow_control_queue_wait,
        seats("node-high"),
        seats("workload-high"),
        seats(flood_level),
    );

    // The nodes, their Leases, the pods to bind and the flooding user's permissions.
    let nodes: Vec<String> = (0..b.nodes).map(|i| format!("node-{i:03}")).collect();
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let lease_api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), "kube-node-lease");
    for n in &nodes {
        node_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    json!({"metadata": {"name": n, "labels": {"kubernetes.io/os": "linux"}}}),
                )?,
            )
            .await?;
        lease_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": n},
                    "spec": {"holderIdentity": n, "leaseDurationSeconds": 40}
                }))?,
            )
            .await?;
    }
    let pods_needed = (b.bindings_per_second * b.seconds * 2 + 10) as usize;
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), "default");
    for i in 0..pods_needed {
        pod_api
            .create(
                &PostParams::default(),
                &crate::bench::pod(&format!("bind-{i:05}"))?,
            )
            .await?;
    }
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    ns_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "flood"}}))?,
        )
        .await?;
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(admin.clone(), "flood");
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "configmaps"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "create"]}]
            }))?,
        )
        .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(admin.clone(), "flood");
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "flooder"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "flooder"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmaps"}
            }))?,
        )
        .await?;
    // The caches must see the RBAC objects before the flood starts.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut node_clients = Vec::new();
    for n in &nodes {
        node_clients.push(
            crate::cluster::identity_client(
                &server,
                &format!("system:node:{n}"),
                &["system:nodes"],
                false,
            )
            .await?,
        );
    }
    let scheduler =
        crate::cluster::identity_client(&server, "system:kube-scheduler", &[], false).await?;
    let next_pod = Arc::new(AtomicU64::new(0));

    // Phase 1: system traffic alone.
    let (mut beats_alone, mut binds_alone) =
        system_traffic(&b, &nodes, &node_clients, &scheduler, &next_pod).await;

    // Phase 2: the same under the flood.
    let flood = Arc::new(Flood::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut flooders = Vec::new();
    let url = format!("https://{}", server.local_addr);
    let yaml = server
        .pki
        .mint_kubeconfig(&url, "flooder", &[], Duration::from_secs(3600))
        .context("cannot issue the flooder's certificate")?;
    let flood_latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    for c in 0..b.clients {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        // Count the 429s rather than retry them.
        config.default_retry = false;
        let client = kube::Client::try_from(config)?;
        let (flood, stop, latencies) = (flood.clone(), stop.clone(), flood_latencies.clone());
        let max = b.max_requests_per_client;
        flooders.push(tokio::spawn(async move {
            let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "flood");
            let mut own = Vec::new();
            for i in 0..max {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let started = Instant::now();
                let result = if i % 2 == 0 {
                    api.list(&ListParams::default().limit(100))
                        .await
                        .map(|_| ())
                } else {
                    let cm = serde_json::from_value(json!({
                        "metadata": {"generateName": format!("flood-{c}-")},
                        "data": {"k": "v"}
                    }))
                    .map_err(kube::Error::SerdeError);
                    match cm {
                        Ok(cm) => api.create(&PostParams::default(), &cm).await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                };
                match result {
                    Ok(()) => {
                        flood.ok.fetch_add(1, Ordering::Relaxed);
                        own.push(started.elapsed());
                    }
                    Err(kube::Error::Api(s)) if s.code == 429 => {
                        flood.rejected.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        flood.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if let Ok(mut l) = latencies.lock() {
                l.extend(own);
            }
        }));
    }
    // Saturation: the flooding level's seats in use and queue, every 50 ms.
    let sampler = {
        let (fc, stop) = (fc.clone(), stop.clone());
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(l) = fc.levels().into_iter().find(|l| l.name == flood_level) {
                    samples.push((l.executing, l.waiting, l.seats));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            samples
        })
    };
    // Let the flood build up before measuring.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let flood_started = Instant::now();
    let before = (
        flood.ok.load(Ordering::Relaxed),
        flood.rejected.load(Ordering::Relaxed),
        flood.other.load(Ordering::Relaxed),
    );
    let (mut beats_flood, mut binds_flood) =
        system_traffic(&b, &nodes, &node_clients, &scheduler, &next_pod).await;
    let flood_elapsed = flood_started.elapsed();
    let during = (
        flood.ok.load(Ordering::Relaxed) - before.0,
        flood.rejected.load(Ordering::Relaxed) - before.1,
        flood.other.load(Ordering::Relaxed) - before.2,
    );
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        let _ = tokio::time::timeout(Duration::from_secs(60), f).await;
    }
    let samples = sampler.await.unwrap_or_default();

    println!();
    println!(
        "{:<28} {:>6}  {:>14}  {:>14}  {:>14}",
        "system traffic", "count", "", "", ""
    );
    beats_alone.line("node heartbeat, alone");
    beats_flood.line("node heartbeat, under flood");
    binds_alone.line("binding, alone");
    binds_flood.line("binding, under flood");
    let total = during.0 + during.1 + during.2;
    let mut flood_lat = flood_latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    flood_lat.sort();
    println!(
        "flood (measured phase):      {total} requests, {:.0}/s; served {}, 429 {} ({:.1} %), other errors {}; served p50 {} p99 {}",
        total as f64 / flood_elapsed.as_secs_f64(),
        during.0,
        during.1,
        during.1 as f64 * 100.0 / total.max(1) as f64,
        during.2,
        ms(percentile(&flood_lat, 0.5)),
        ms(percentile(&flood_lat, 0.99)),
    );
    let at_bound = samples
        .iter()
        .filter(|(e, _, s)| s.is_some_and(|s| *e >= s))
        .count();
    let max_exec = samples.iter().map(|(e, _, _)| *e).max().unwrap_or(0);
    let max_wait = samples.iter().map(|(_, w, _)| *w).max().unwrap_or(0);
    let mean_wait =
        samples.iter().map(|(_, w, _)| *w).sum::<usize>() as f64 / samples.len().max(1) as f64;
    println!(
        "saturation ({flood_level}):   seats {}, in use max {max_exec}, at the bound in {:.0} % of {} samples; queued max {max_wait}, mean {mean_wait:.1}",
        seats(flood_level),
        at_bound as f64 * 100.0 / samples.len().max(1) as f64,
        samples.len(),
    );
    for l in fc.levels() {
        if l.dispatched > 0 || l.rejected > 0 {
            println!(
                "  level {:<16} dispatched {:>8}  rejected {:>8}",
                l.name, l.dispatched, l.rejected
            );
        }
    }
    Ok(())
}

/// Runs the system traffic for one phase: every node's heartbeats and the scheduler's
/// bindings, paced, each request timed.
async fn system_traffic(
    b: &OverloadBench,
    nodes: &[String],
    node_clients: &[kube::Client],
    scheduler: &kube::Client,
    next_pod: &Arc<AtomicU64>,
) -> (Samples, Samples) {
    let deadline = Instant::now() + Duration::from_secs(b.seconds);
    let interval = Duration::from_millis(b.heartbeat_ms.max(1));
    let mut tasks = Vec::new();
    for (i, (node, client)) in nodes.iter().zip(node_clients).enumerate() {
        let (node, client) = (node.clone(), client.clone());
        // Spread the nodes over the interval, as real agents' heartbeats are.
        let offset = interval.mul_f64(i as f64 / nodes.len().max(1) as f64);
        tasks.push(tokio::spawn(async move {
            let mut s = Samples::default();
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(client.clone(), "kube-node-lease");
            let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
            tokio::time::sleep(offset).await;
            let mut tick = tokio::time::interval(interval);
            while Instant::now() < deadline {
                tick.tick().await;
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let started = Instant::now();
                let renewed = leases
                    .patch(
                        &node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"renewTime": now}})),
                    )
                    .await;
                match renewed {
                    Ok(_) => s.latencies.push(started.elapsed()),
                    Err(_) => s.errors += 1,
                }
                let started = Instant::now();
                let status = node_api
                    .patch_status(
                        &node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"conditions": [{
                            "type": "Ready", "status": "True", "reason": "KubeletReady",
                            "lastHeartbeatTime": now, "lastTransitionTime": now
                        }]}})),
                    )
                    .await;
                match status {
                    Ok(_) => s.latencies.push(started.elapsed()),
                    Err(_) => s.errors += 1,
                }
            }
            s
        }));
    }
    let binder = {
        let (client, nodes, next_pod) = (scheduler.clone(), nodes.to_vec(), next_pod.clone());
        let period = Duration::from_secs_f64(1.0 / b.bindings_per_second.max(1) as f64);
        tokio::spawn(async move {
            let mut s = Samples::default();
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, "default");
            let mut tick = tokio::time::interval(period);
            while Instant::now() < deadline {
                tick.tick().await;
                let i = next_pod.fetch_add(1, Ordering::Relaxed);
                let name = format!("bind-{i:05}");
                let node = &nodes[(i as usize) % nodes.len().max(1)];
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": "default"},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}
                });
                let started = Instant::now();
                match pods
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => s.latencies.push(started.elapsed()),
                    Err(_) => s.errors += 1,
                }
            }
            s
        })
    };
    let mut beats = Samples::default();
    for t in tasks {
        if let Ok(s) = t.await {
            beats.latencies.extend(s.latencies);
            beats.errors += s.errors;
        }
    }
    let binds = binder.await.unwrap_or_default();
    (beats, binds)
}
