//! `tandem bench …`: benchmarks that print figures. They are never assertions; results go to
//! BENCHMARKS.md with the machine and date.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::sync::Mutex;

use crate::ServerArgs;

pub(crate) mod controllers;
pub(crate) mod dns_load;
pub(crate) mod nodes;
pub(crate) mod rss;
pub(crate) mod scheduler;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// API server: concurrent pod creates, a full LIST and watch delivery latency on a fresh
    /// durable store (SQLite, or etcd with `--store etcd|both`).
    Api(ApiBench),
    /// Scheduler: emulated Node objects (4 CPU, 32 GiB, 110 pods; half Linux, half Windows of two
    /// builds) and pods of mixed OS, through the real API and store; pods/s and create→bind.
    Scheduler(SchedulerBench),
    /// Node agents (issue 6): emulated nodes heartbeating, pods created through Deployments
    /// with the controllers and scheduler running; pod startup latency, API latency of a probe
    /// client during the run, and peak RSS.
    Nodes(NodesBench),
    /// Controllers: one Deployment scaled from 0 to N replicas on emulated nodes, with the
    /// scheduler and controllers running; time until all pods exist and until all are Ready.
    Controllers(ControllersBench),
    /// Real pods: one Linux node on tandem's private containerd (the local image already
    /// present), pods through the API server and scheduler; create → Running, create → Ready
    /// and sandbox creation times.
    Startup(crate::bench_startup::StartupBench),
    /// Image pulls (issue 34): N images from a registry on loopback into a fresh containerd, one
    /// at a time and all at once, and the lookup of an image already present.
    Pull(crate::bench_pull::PullBench),
    /// Service proxy and cluster DNS (issue 14): Services with emulated endpoints through the
    /// API; EndpointSlice change -> nftables rule in place at 1,000 and N Services, then DNS
    /// queries/s and latency from a loopback client.
    Services(crate::bench_services::ServicesBench),
    /// NetworkPolicy enforcement: with 1,000 policies, the time from a policy change to the
    /// node's nftables table applied (model, text, `nft -f` in a private network namespace).
    Netpol(crate::bench_netpol::NetpolBench),
    /// Pod network between hosts (issue 33): pod-to-pod latency and throughput through the
    /// VXLAN tunnel and host-gw routes next to the same pair on a plain link, and join → route.
    Multihost(crate::bench_multihost::MultihostBench),
    /// Ingress controller: HTTP requests/s and latency through the ingress next to the same
    /// requests straight to the backends (stand-ins on loopback), new connections and kept-alive.
    Ingress(crate::bench_ingress::IngressBench),
    /// Watch costs (issue 22): the server's memory with 10,000 idle watchers, and with 100
    /// watchers that stop reading under a write load (cut off once their buffers stay full).
    Watchers(crate::bench_watchers::WatchersBench),
    /// `tandem check` over generated manifests: objects/s and peak memory.
    Check(CheckBench),
    /// Overload (issue 22): many clients of one user flood the API server; node heartbeats'
    /// and scheduler bindings' latency without and with the flood, and the share refused with 429.
    Overload(crate::bench_overload::OverloadBench),
}

#[derive(Args)]
pub struct CheckBench {
    /// Objects to generate and check.
    #[arg(long, default_value_t = 1_000)]
    objects: usize,
}

#[derive(Args)]
pub struct ControllersBench {
    #[arg(long, default_value_t = 10_000)]
    replicas: usize,
    /// Emulated Linux nodes to run the pods (110 pods each).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
}

#[derive(Args)]
pub struct SchedulerBench {
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// The store under the API server (see `tandem bench api --store`).
    #[arg(long, value_enum, default_value_t = BenchStore::Sqlite)]
    store: BenchStore,
}

#[derive(Args)]
pub struct NodesBench {
    /// Emulated Linux nodes (heartbeating: Lease every 10 s, node status every 10 s).
    #[arg(long, default_value_t = 1_000)]
    nodes: usize,
    /// Pods in all, created through Deployments (rounded up to whole Deployments).
    #[arg(long, default_value_t = 30_000)]
    pods: usize,
    /// Replicas per Deployment.
    #[arg(long, default_value_t = 100)]
    replicas: usize,
    /// Pods per second asked for, by spacing the Deployments' creation; 0 creates every
    /// Deployment at once. The default, 300/s, is a pace the whole cluster in this process
    /// sustains on a 2-core machine (it falls behind near 400/s): startup latency is measured
    /// on pods created at a set rate, as upstream's pod startup SLO is, and `0` shows the
    /// backlog instead.
    #[arg(long, default_value_t = 300.0)]
    pod_rate: f64,
    /// Give up waiting for pods to run after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Give every agent its own pod watch (as separate kubelets have) instead of one watch
    /// shared by all the emulated nodes.
    #[arg(long)]
    watch_per_node: bool,
    /// Put the pods on the network (needs root): each in a namespace of its own with an
    /// address, answered by a stand-in; then measure HTTP requests/s through a ClusterIP.
    #[arg(long)]
    networked: bool,
}

#[derive(Args)]
pub struct ApiBench {
    /// Number of pods to create.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Compare authorization off and RBAC on side by side, each client a ServiceAccount with a
    /// namespaced Role (see `bench_rbac`).
    #[arg(long)]
    rbac: bool,
    /// `protobuf`: run the load in JSON and in protobuf side by side (see `bench_wire`).
    #[arg(long, value_parser = ["json", "protobuf"])]
    content_type: Option<String>,
    /// A CRD manifest: compare creates/s of its custom resource with ConfigMaps.
    #[arg(long, value_name = "CRD.yaml")]
    custom_resource: Option<std::path::PathBuf>,
    /// The store under the API server: the embedded SQLite store, a local etcd member
    /// (Debian's etcd-server, started for the run), or both one after the other.
    #[arg(long, value_enum, default_value_t = BenchStore::Sqlite)]
    store: BenchStore,
    /// The API server's Prometheus metrics: `on` (as served), `off` (a server built without
    /// them), or `both`: the same load on a server without, then on one with, figures side by
    /// side — what measuring every request costs.
    #[arg(long, value_enum, default_value_t = BenchMetrics::On)]
    metrics: BenchMetrics,
    /// Compare pod creates without and with one validating and one mutating admission webhook
    /// (served over HTTPS on loopback in this process), then with a webhook that never answers
    /// on another resource (see `bench_webhook`).
    #[arg(long)]
    webhook: bool,
}

/// `--metrics` of the API benchmark.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchMetrics {
    On,
    Off,
    Both,
}

impl BenchMetrics {
    /// Whether each run has metrics, in order.
    fn each(self) -> &'static [bool] {
        match self {
            BenchMetrics::On => &[true],
            BenchMetrics::Off => &[false],
            // Off, on, on, off: drift over the runs (a warming disk cache, the earlier servers'
            // leftovers, other load) weighs on both alike.
            BenchMetrics::Both => &[false, true, true, false],
        }
    }
}

/// `--metrics both`: each run's figures, and the mean of each mode's with the change.
fn print_metrics_comparison(runs: &[(bool, ApiFigures)]) {
    println!();
    let line = |label: &str, rate: f64, p50: f64, p99: f64, list: f64, watch: f64| {
        println!(
            "{label:<18} {rate:>6.0} creates/s   create p50 {p50:.2} ms  p99 {p99:.2} ms   LIST median {list:.2} ms   watch p99 {watch:.2} ms"
        );
    };
    let msec = |d: Duration| d.as_secs_f64() * 1000.0;
    for (on, f) in runs {
        let label = if *on {
            "  run, metrics on"
        } else {
            "  run, metrics off"
        };
        line(
            label,
            f.rate(),
            msec(f.create_p50),
            msec(f.create_p99),
            msec(f.list_median),
            msec(f.watch_p99),
        );
    }
    let mean = |on: bool, figure: &dyn Fn(&ApiFigures) -> f64| {
        let of_mode: Vec<f64> = runs
            .iter()
            .filter(|(m, _)| *m == on)
            .map(|(_, f)| figure(f))
            .collect();
        of_mode.iter().sum::<f64>() / of_mode.len().max(1) as f64
    };
    let figures: [&dyn Fn(&ApiFigures) -> f64; 5] = [
        &|f| f.rate(),
        &|f| msec(f.create_p50),
        &|f| msec(f.create_p99),
        &|f| msec(f.list_median),
        &|f| msec(f.watch_p99),
    ];
    let [off, on] = [false, true].map(|m| figures.map(|fig| mean(m, fig)));
    line("metrics off (mean)", off[0], off[1], off[2], off[3], off[4]);
    line("metrics on (mean)", on[0], on[1], on[2], on[3], on[4]);
    let change = |i: usize| (on[i] / off[i] - 1.0) * 100.0;
    println!(
        "metrics on vs off:  creates/s {:+.1} %, create p50 {:+.1} %, p99 {:+.1} %, LIST median {:+.1} %",
        change(0),
        change(1),
        change(2),
        change(3)
    );
}

/// `--store` of the API and scheduler benchmarks.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchStore {
    Sqlite,
    Etcd,
    Both,
}

impl BenchStore {
    /// The stores to run on, in order.
    fn each(self) -> &'static [BenchStore] {
        match self {
            BenchStore::Sqlite => &[BenchStore::Sqlite],
            BenchStore::Etcd => &[BenchStore::Etcd],
            BenchStore::Both => &[BenchStore::Sqlite, BenchStore::Etcd],
        }
    }
}

/// A benchmark's store: the flags naming it, and the local etcd member it runs on (stopped when
/// dropped).
pub(crate) struct BenchStoreHandle {
    pub args: crate::store::StoreArgs,
    _etcd: Option<crate::local_etcd::LocalEtcd>,
    description: String,
}

/// Starts what `kind` needs under `dir`: nothing for SQLite, a one-member etcd on a free
/// loopback port for etcd (its data on the same disk, fsync on every commit as in production).
pub(crate) async fn bench_store(
    kind: BenchStore,
    dir: &std::path::Path,
) -> anyhow::Result<BenchStoreHandle> {
    if kind != BenchStore::Etcd {
        return Ok(BenchStoreHandle {
            args: Default::default(),
            _etcd: None,
            description: format!("durable SQLite store in {}", dir.display()),
        });
    }
    let port = crate::local_etcd::free_port_pair()?;
    let etcd = crate::local_etcd::LocalEtcd::start(&dir.join("etcd"), port).await?;
    let args = crate::store::StoreArgs {
        etcd_servers: vec![etcd.client_url().to_string()],
        ..Default::default()
    };
    Ok(BenchStoreHandle {
        description: format!("etcd 3.4 (one local member, data in {})", dir.display()),
        args,
        _etcd: Some(etcd),
    })
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Api(b) if b.rbac => crate::bench_rbac::compare(b.pods, b.clients).await,
        BenchCommand::Api(b) if b.webhook => crate::bench_webhook::compare(b.pods, b.clients).await,
        BenchCommand::Api(b) if b.content_type.as_deref() == Some("protobuf") => {
            crate::bench_wire::compare(b.pods, b.clients).await
        }
        BenchCommand::Api(ApiBench {
            custom_resource: Some(crd),
            pods,
            clients,
            ..
        }) => crate::bench_wire::custom_resource(crd, pods, clients).await,
        BenchCommand::Api(b) => {
            for (i, store) in b.store.each().iter().enumerate() {
                let mut runs = Vec::new();
                for &metrics in b.metrics.each() {
                    if i > 0 || !runs.is_empty() {
                        println!();
                    }
                    runs.push((metrics, api(&b, *store, metrics).await?));
                }
                if b.metrics == BenchMetrics::Both {
                    print_metrics_comparison(&runs);
                }
            }
            Ok(())
        }
        BenchCommand::Startup(b) => crate::bench_startup::run(b).await,
        BenchCommand::Pull(b) => crate::bench_pull::run(b).await,
        BenchCommand::Services(b) => crate::bench_services::run(b).await,
        BenchCommand::Netpol(b) => crate::bench_netpol::run(b).await,
        BenchCommand::Multihost(b) => crate::bench_multihost::run(b).await,
        BenchCommand::Ingress(b) => crate::bench_ingress::run(b).await,
        BenchCommand::Check(b) => crate::check::bench(b.objects),
        BenchCommand::Overload(b) => crate::bench_overload::run(b).await,
        BenchCommand::Watchers(b) => crate::bench_watchers::run(b).await,
        BenchCommand::Scheduler(b) => {
            for store in b.store.each() {
                let dir = tempfile::tempdir().context("cannot create a temp dir")?;
                let handle = bench_store(*store, dir.path()).await?;
                let (_server, _client) = bench_server_in(dir.path(), &handle.args).await?;
                let kubeconfig = dir.path().join("kubeconfig");
                let client = crate::h2_client::client_from(&kubeconfig).await?;
                let scheduler_client = crate::h2_client::client_from(&kubeconfig).await?;
                println!(
                    "tandem bench scheduler: {} nodes, {} pods (in-process API server on a {})",
                    b.nodes, b.pods, handle.description
                );
                let report = scheduler::run_bench(client, scheduler_client, b.nodes, b.pods)
                    .await
                    .map_err(|e| anyhow::anyhow!("scheduler bench failed: {e}"))?;
                println!("{report}");
            }
            Ok(())
        }
        BenchCommand::Controllers(b) => {
            let (_dir, _server, client) = bench_server().await?;
            tandem_controllers::start_all(
                client.clone(),
                tandem_core::registry::Registry::builtin(),
            );
            tokio::spawn(tandem_scheduler::run(
                client.clone(),
                tandem_scheduler::SchedulerOptions::default(),
            ));
            let spec = format!("linux={}", b.nodes);
            for mut node in tandem_agent::parse_nodes_spec(&spec).context("invalid node count")? {
                node.streaming_port = None;
                let client = client.clone();
                tokio::spawn(async move { tandem_agent::run(client, node).await });
            }
            println!(
                "tandem bench controllers: Deployment scaled 0 → {} replicas on {} emulated Linux nodes (scheduler, controllers, agents and API server in this process)",
                b.replicas, b.nodes
            );
            let report = controllers::bench_deployment_scale(client, b.replicas)
                .await
                .map_err(|e| anyhow::anyhow!("controllers bench failed: {e}"))?;
            println!("{report}");
            Ok(())
        }
        BenchCommand::Nodes(b) => {
            let (dir, _server, client) = bench_server().await?;
            // As in `tandem up`: the controllers share one client and the scheduler has an
            // HTTP/2 connection of its own; the agents another, the bench and its probe one each.
            tandem_controllers::start_all(client, tandem_core::registry::Registry::builtin());
            let kubeconfig = dir.path().join("kubeconfig");
            tokio::spawn(tandem_scheduler::run(
                crate::h2_client::client_from(&kubeconfig).await?,
                tandem_scheduler::SchedulerOptions::default(),
            ));
            // The agents talk HTTP/2: one connection carries up to 200 requests and watches, so
            // one serves every agent with a shared pod watch, and a watch per agent needs one per
            // 150 agents.
            let agent_clients = if b.watch_per_node {
                b.nodes.div_ceil(150).max(1)
            } else {
                1
            };
            let mut agents = Vec::with_capacity(agent_clients);
            for _ in 0..agent_clients {
                agents.push(crate::h2_client::client_from(&kubeconfig).await?);
            }
            let clients = nodes::NodesBenchClients {
                agents,
                bench: crate::cluster::client_from(&kubeconfig).await?,
                probe: crate::cluster::client_from(&kubeconfig).await?,
            };
            println!(
                "tandem bench nodes: {} emulated nodes, {} pods through Deployments of {} (pod rate: {}); API server, store, controllers, scheduler and agents in this process",
                b.nodes,
                b.pods,
                b.replicas,
                if b.pod_rate > 0.0 {
                    format!("{}/s", b.pod_rate)
                } else {
                    "unpaced".into()
                }
            );
            let report = nodes::run_nodes_bench(
                clients,
                nodes::NodesBenchOptions {
                    nodes: b.nodes,
                    pods: b.pods,
                    replicas: b.replicas,
                    pod_rate: b.pod_rate,
                    timeout: Duration::from_secs(b.timeout_secs),
                    watch_per_node: b.watch_per_node,
                    networked: b.networked,
                },
            )
            .await;
            println!("{report}");
            if b.networked {
                crate::bench_nodes_net::measure(
                    crate::cluster::client_from(&kubeconfig).await?,
                    &report,
                )
                .await?;
            }
            Ok(())
        }
    }
}

/// A fresh server on a temp dir with an admin client, for benchmarks.
pub(crate) async fn bench_server()
-> anyhow::Result<(tempfile::TempDir, tandem_apiserver::ApiServer, kube::Client)> {
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let (server, client) = bench_server_in(dir.path(), &Default::default()).await?;
    Ok((dir, server, client))
}

/// A server with its data dir `dir` on the store `store` names, with an admin client.
pub(crate) async fn bench_server_in(
    dir: &std::path::Path,
    store: &crate::store::StoreArgs,
) -> anyhow::Result<(tandem_apiserver::ApiServer, kube::Client)> {
    let args = ServerArgs {
        store: store.clone(),
        ..server_args(dir)
    };
    let (server, _store) = crate::cluster::start(&args).await?;
    let client = crate::cluster::client_from(&args.kubeconfig_path()).await?;
    Ok((server, client))
}

/// The flags of a benchmark's API server with its data in `dir`: a free loopback port, privileged
/// pods allowed, authorization and flow control at their library defaults, the SQLite store, and
/// no resource metrics scraped (benchmark servers run no node agents). Benchmarks change a field
/// or two with struct update syntax.
pub(crate) fn server_args(dir: &std::path::Path) -> ServerArgs {
    ServerArgs {
        data_dir: dir.to_path_buf(),
        port: 0,
        bind_address: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        kubeconfig: None,
        allow_privileged: true,
        admission_control_config_file: None,
        upstream_os_placement: false,
        service_cidr: "10.96.0.0/12".to_string(),
        authorization_mode: Default::default(),
        metric_resolution: Duration::ZERO,
        hpa_sync_period: Duration::from_secs(15),
        node_monitor_grace_period: None,
        default_not_ready_toleration_seconds: 300,
        default_unreachable_toleration_seconds: 300,
        hpa_downscale_stabilization: Duration::from_secs(300),
        disable: Vec::new(),
        store: Default::default(),
        leader_election: Default::default(),
        flow_control: Default::default(),
    }
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub(crate) fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    }))?)
}

/// The figures of one `tandem bench api` run.
struct ApiFigures {
    creates: usize,
    elapsed: Duration,
    create_p50: Duration,
    create_p99: Duration,
    list_median: Duration,
    watch_p99: Duration,
}

impl ApiFigures {
    fn rate(&self) -> f64 {
        self.creates as f64 / self.elapsed.as_secs_f64()
    }
}

async fn api(b: &ApiBench, store: BenchStore, metrics: bool) -> anyhow::Result<ApiFigures> {
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let handle = bench_store(store, dir.path()).await?;
    let args = ServerArgs {
        store: handle.args.clone(),
        ..server_args(dir.path())
    };
    let server_metrics = metrics.then(tandem_apiserver::metrics::ServerMetrics::standalone);
    let (server, _store) = crate::cluster::start_with_metrics(&args, server_metrics).await?;
    let kubeconfig = kube::config::Kubeconfig::read_from(args.data_dir.join("kubeconfig"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    println!(
        "tandem bench api: {} pods, {} clients, {}, Prometheus metrics {}",
        b.pods,
        b.clients,
        handle.description,
        if metrics { "on" } else { "off" }
    );
    println!(
        "server: https://{} (in this process; client and server share the machine)",
        server.local_addr
    );

    // Watch delivery: a watcher records when each pod's ADDED event arrives.
    let client = kube::Client::try_from(config.clone())?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let acked: Arc<Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    let delivered: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let watch_pods = pods.clone();
    let (acked_w, delivered_w) = (acked.clone(), delivered.clone());
    let total = b.pods;
    let watcher = tokio::spawn(async move {
        let mut stream = watch_pods
            .watch(&WatchParams::default().timeout(290), "0")
            .await?
            .boxed();
        let mut seen = 0;
        while let Some(ev) = stream.try_next().await? {
            if let WatchEvent::Added(p) = ev {
                let now = Instant::now();
                let name = p.metadata.name.unwrap_or_default();
                // Latency from the create being acknowledged to the event arriving; an event that
                // beats the acknowledgement counts as zero.
                let sent = acked_w.lock().await.get(&name).copied();
                let d = sent
                    .map(|s| now.saturating_duration_since(s))
                    .unwrap_or(Duration::ZERO);
                delivered_w.lock().await.push(d);
                seen += 1;
                if seen >= total {
                    break;
                }
            }
        }
        anyhow::Ok(())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let per_client = b.pods.div_ceil(b.clients);
    let mut tasks = Vec::new();
    for c in 0..b.clients {
        let client = kube::Client::try_from(config.clone())?;
        let api: Api<Pod> = Api::namespaced(client, "default");
        let acked = acked.clone();
        let range = (c * per_client)..((c + 1) * per_client).min(b.pods);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(range.len());
            for i in range {
                let name = format!("bench-{i:06}");
                let p = pod(&name)?;
                let t = Instant::now();
                api.create(&PostParams::default(), &p).await?;
                let done = Instant::now();
                acked.lock().await.insert(name, done);
                lat.push(done - t);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let _ = tokio::time::timeout(Duration::from_secs(60), watcher).await;

    let mut list_times = Vec::new();
    let mut count = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let list = pods.list(&ListParams::default()).await?;
        list_times.push(t.elapsed());
        count = list.items.len();
    }
    list_times.sort();
    let mut delivered = delivered.lock().await.clone();
    delivered.sort();

    println!();
    println!(
        "creates:            {} in {:.2} s = {:.0} creates/s",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64()
    );
    println!(
        "create latency:     p50 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 1.0))
    );
    println!(
        "LIST of {count} pods:  median {}  best {} (5 runs, full JSON decode in the client included)",
        ms(percentile(&list_times, 0.5)),
        ms(list_times[0])
    );
    println!(
        "watch delivery:     {} events, p50 {}  p99 {}",
        delivered.len(),
        ms(percentile(&delivered, 0.5)),
        ms(percentile(&delivered, 0.99))
    );
    drop(server);
    Ok(ApiFigures {
        creates: latencies.len(),
        elapsed,
        create_p50: percentile(&latencies, 0.5),
        create_p99: percentile(&latencies, 0.99),
        list_median: percentile(&list_times, 0.5),
        watch_p99: percentile(&delivered, 0.99),
    })
}
