//! `tandem bench startup`: pod startup on real containers (issue 7). One Linux node agent runs on
//! tandem's private containerd with the local busybox image already imported; pods go through the
//! API server and the scheduler, all in this process. Figures, from this client's clock: create →
//! Running (phase `Running`), create → Ready (condition `Ready` true), and the node's RunPodSandbox
//! durations.
//!
//! Upstream's counterpart is the pod startup latency SLO (create → Running with the image already
//! present, p99 ≤ 5 s), which clusterloader2's density test measures the same way: from the
//! creating client to the watch event that shows the pod running.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use tandem_agent::NodeConfig;
use tandem_agent::runtime::cri::CriRuntime;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::bench::{bench_server, percentile};
use crate::cri_node;

/// The node's name.
const NODE: &str = "startup-bench";
/// The label every benchmark pod carries, for the watch.
const SELECTOR: &str = "tandem.dev/bench=startup";
/// The grace period the pods are deleted with at the end (busybox's httpd runs as PID 1 of its
/// container without a SIGTERM handler, so the grace period is always used up).
const DELETE_GRACE_SECONDS: u32 = 1;
/// How long the pods may take to disappear from the API once deleted.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(300);

/// Flags of `tandem bench startup`.
#[derive(Args)]
pub struct StartupBench {
    /// Pods to create.
    #[arg(long, default_value_t = 200)]
    pods: usize,
    /// Pods created per second; 0 creates them all at once (as fast as --concurrency allows).
    /// The default, 5/s, is a pace this 2-core machine's containerd sustains (it saturates near
    /// 9/s): startup latency is a latency figure, and upstream's SLO is likewise measured on
    /// pods created at a set rate, not on a backlog. `--rate 0` shows the backlog.
    #[arg(long, default_value_t = 5.0)]
    rate: f64,
    /// Pod creates in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Where `scripts/build-images.sh` put the local OCI images (default: `images/` beside the
    /// directory of the tandem binary, i.e. `target/images`).
    #[arg(long)]
    images_dir: Option<PathBuf>,
    /// The node's pod CIDR: a network of its own, so the benchmark can run beside `tandem up`
    /// (10.244.0.0/16).
    #[arg(long, default_value = "10.250.0.0/24")]
    pod_cidr: String,
    /// Stop waiting for pods to become Ready after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

/// What the watch saw a pod reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Milestone {
    /// `spec.nodeName` is set.
    Scheduled,
    /// `status.phase` is `Running`.
    Running,
    /// The `Ready` condition is `True`.
    Ready,
}

/// When each pod's create was sent, and how long the API took to answer it.
#[derive(Default)]
struct Creates {
    sent: HashMap<String, Instant>,
    api_latency: Vec<Duration>,
    failed: usize,
    first_error: Option<String>,
}

/// Runs the benchmark and prints its figures. The pods are deleted and containerd is stopped
/// (its sandboxes, bridge and cgroups removed) whatever happens after it started, Ctrl-C
/// included.
pub async fn run(b: StartupBench) -> anyhow::Result<()> {
    if !(b.rate.is_finite() && b.rate >= 0.0) {
        anyhow::bail!("--rate must be 0 (all at once) or a positive number of pods per second");
    }
    let room = cidr_room(&b.pod_cidr)?;
    if b.pods > room {
        anyhow::bail!(
            "--pod-cidr {} has addresses for {room} pods, fewer than --pods {}",
            b.pod_cidr,
            b.pods
        );
    }
    let images_dir = b
        .images_dir
        .clone()
        .or_else(cri_node::default_images_dir)
        .unwrap_or_else(|| PathBuf::from("target/images"));
    if let Some(why) = cri_node::unavailable_reason(&images_dir) {
        anyhow::bail!(
            "tandem bench startup runs real containers, which this machine cannot: {why}"
        );
    }
    let load_before = load_average();

    let (_data_dir, _server, client) = bench_server().await?;
    tokio::spawn(tandem_scheduler::run(
        client.clone(),
        tandem_scheduler::SchedulerOptions::default(),
    ));
    let node_dir = tempfile::Builder::new()
        .prefix("tandem-bench-")
        .tempdir()
        .context("cannot create a temp dir for the node")?;
    let mut node = NodeConfig::linux(NODE);
    node.pod_cidr = Some(b.pod_cidr.clone());
    node.capacity.pods = node
        .capacity
        .pods
        .max(i64::try_from(b.pods).unwrap_or(i64::MAX));
    node.streaming_port = None;
    node.state_dir = Some(node_dir.path().to_path_buf());
    let cri = cri_node::start(&mut node, node_dir.path(), &images_dir, client.clone()).await?;

    let pace = if b.rate > 0.0 {
        format!("created at {} pods/s; --rate 0 for all at once", b.rate)
    } else {
        "all at once".to_string()
    };
    println!(
        "tandem bench startup: {} pods ({pace}, {} creates in flight at most), image present, HTTP readiness probe every 1 s",
        b.pods, b.concurrency
    );
    println!("node {NODE}: {}", cri.description);
    println!("API server, scheduler and node agent in this process; data in temp dirs");
    println!("load average before: {load_before}");

    let agent = tokio::spawn(tandem_agent::run_with_runtime(
        client.clone(),
        node,
        cri.runtime.clone(),
        tandem_agent::clock::Clock::new(),
    ));
    let outcome = tokio::select! {
        r = measure(&b, &client, &cri.cri, cri.containerd.base_dir()) => Some(r),
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: deleting the pods and stopping containerd");
            None
        }
    };
    let rss = crate::bench::rss::peak_rss_kib();

    let teardown = delete_pods(&client, b.concurrency).await;
    agent.abort();
    let stopped = Instant::now();
    let shutdown = cri.containerd.shutdown(true).await;
    let stop_time = stopped.elapsed();
    match teardown {
        Ok(t) => println!(
            "teardown:              pods deleted (grace {DELETE_GRACE_SECONDS} s) and gone from the API in {}",
            secs(t)
        ),
        Err(e) => println!("teardown:              {e:#}"),
    }
    match &shutdown {
        Ok(()) => println!("containerd shutdown:   {}", secs(stop_time)),
        Err(e) => println!("containerd shutdown:   {e}"),
    }
    println!(
        "left behind:           {}",
        leftovers(
            cri.containerd.pid(),
            cri.containerd.base_dir(),
            cri.containerd.bridge_name(),
            cri.containerd.cgroup_root(),
        )
    );
    match rss {
        Some(k) => println!(
            "peak RSS (VmHWM) of the tandem process: {:.1} MiB",
            k as f64 / 1024.0
        ),
        None => println!("peak RSS (VmHWM) of the tandem process: unavailable"),
    }
    println!("load average after:  {}", load_average());
    outcome.unwrap_or(Ok(()))
}

/// Waits for the node, creates the pods, waits until all are Ready (or the timeout) and prints
/// the startup figures.
async fn measure(
    b: &StartupBench,
    client: &kube::Client,
    cri: &CriRuntime,
    containerd_dir: &Path,
) -> anyhow::Result<()> {
    wait_for_node(client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Watch before creating, so no transition is missed.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Milestone, String, Instant)>();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_milestones(pods.clone(), tx, listed_tx));
    listed_rx
        .await
        .context("the watch on the benchmark pods ended before its initial list")?;

    let runtime_before = runtime_usage(containerd_dir);
    let tandem_cpu_before = cpu_time(Path::new("/proc/self/stat"), false);
    let started = Instant::now();
    let mut creating = tokio::spawn(create_pods(
        pods.clone(),
        b.pods,
        b.rate,
        b.concurrency.max(1),
        started,
    ));
    let mut creates: Option<Creates> = None;
    let mut seen: HashMap<Milestone, HashMap<String, Instant>> = HashMap::new();
    let mut all_ready_at = None;
    let deadline = started + Duration::from_secs(b.timeout_secs);
    loop {
        if let Some(c) = &creates {
            let ready = seen.get(&Milestone::Ready).map_or(0, HashMap::len);
            if ready >= c.sent.len() {
                all_ready_at = Some(Instant::now());
                break;
            }
        }
        tokio::select! {
            done = &mut creating, if creates.is_none() => {
                creates = Some(done.context("the create task failed")?);
            }
            ev = tokio::time::timeout_at(deadline, rx.recv()) => match ev {
                Ok(Some((m, name, at))) => {
                    seen.entry(m).or_default().entry(name).or_insert(at);
                }
                Ok(None) => anyhow::bail!("the watch on the benchmark pods ended"),
                Err(_) => break,
            },
        }
    }
    // The containerd and shim memory while every pod runs.
    let wall = started.elapsed();
    let runtime_after = runtime_usage(containerd_dir);
    let tandem_cpu = cpu_time(Path::new("/proc/self/stat"), false)
        .map(|after| after.saturating_sub(tandem_cpu_before.unwrap_or_default()));
    watch.abort();
    let creates = match creates {
        Some(c) => c,
        None => {
            // Timed out while still creating.
            creating.abort();
            Creates::default()
        }
    };

    let latencies = |m: Milestone| -> Vec<Duration> {
        let mut v: Vec<Duration> = seen
            .get(&m)
            .into_iter()
            .flatten()
            .filter_map(|(name, at)| Some(at.saturating_duration_since(*creates.sent.get(name)?)))
            .collect();
        v.sort();
        v
    };
    let scheduled = latencies(Milestone::Scheduled);
    let running = latencies(Milestone::Running);
    let ready = latencies(Milestone::Ready);
    let mut api = creates.api_latency.clone();
    api.sort();
    let mut sandboxes = cri.sandbox_create_durations();
    sandboxes.sort();

    println!();
    println!(
        "pods:                  {} created, {} Running, {} Ready{}",
        creates.sent.len(),
        running.len(),
        ready.len(),
        match all_ready_at {
            Some(at) => format!(", all Ready {} after the first create", secs(at - started)),
            None => format!(" when the {} s timeout struck", b.timeout_secs),
        }
    );
    if creates.failed > 0 {
        println!(
            "failed creates:        {} (first: {})",
            creates.failed,
            creates.first_error.as_deref().unwrap_or("?")
        );
    }
    println!("API create:            {}", spread(&api));
    println!("create → scheduled:    {}", spread(&scheduled));
    println!(
        "create → Running:      {}   (target p99 < 1 s; upstream SLO p99 ≤ 5 s)",
        spread(&running)
    );
    println!("create → Ready:        {}", spread(&ready));
    println!(
        "sandbox creation:      {}   ({} RunPodSandbox calls)",
        spread(&sandboxes),
        sandboxes.len()
    );
    let last_running = seen
        .get(&Milestone::Running)
        .and_then(|m| m.values().max().copied());
    if let Some(last) = last_running {
        let span = last.saturating_duration_since(started);
        println!(
            "throughput:            {:.2} pods/s to Running (first create → last Running, {})",
            running.len() as f64 / span.as_secs_f64().max(f64::EPSILON),
            secs(span)
        );
    }
    if let Some(after) = runtime_after {
        println!(
            "containerd + shims:    {:.1} MiB RSS in {} processes when the wait ended",
            after.rss_kib as f64 / 1024.0,
            after.processes
        );
    }
    // CPU spent from the first create to the end of the wait: whether the pipeline was short of
    // CPU, and who used it. (The shims' time is partial: that of runc processes still running
    // and of shims that exited is missing.)
    if let (Some(before), Some(after), Some(tandem)) = (runtime_before, runtime_after, tandem_cpu) {
        let runtime = after.cpu.saturating_sub(before.cpu);
        println!(
            "CPU time:              tandem {}, containerd + shims + runc + CNI {} over {} of wall time ({} cores)",
            secs(tandem),
            secs(runtime),
            secs(wall),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
    }
    let client_events: Api<Event> = Api::namespaced(client.clone(), "default");
    let unhealthy = unhealthy_events(&client_events).await;
    println!(
        "probe failures:        {} Unhealthy events on {} pods",
        unhealthy.values().map(|(n, _)| n).sum::<i32>(),
        unhealthy.len()
    );
    if all_ready_at.is_none() {
        println!("not Ready:             {}", not_ready_summary(&pods).await);
        for (name, ip) in not_ready_pods(&pods).await.into_iter().take(3) {
            let last = unhealthy
                .get(&name)
                .map_or("no Unhealthy event", |(_, m)| m.as_str());
            println!("  {name} (podIP {ip}): {last}");
        }
    }
    Ok(())
}

/// Waits (at most a minute) until the node has registered and reports Ready.
async fn wait_for_node(client: &kube::Client) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = nodes.get_opt(NODE).await.ok().flatten().is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("node {NODE} did not become Ready within a minute");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends each milestone of each benchmark pod as the watch delivers it, stamped with the time
/// it arrived; `listed` fires once the initial list is done.
async fn watch_milestones(
    pods: Api<Pod>,
    tx: mpsc::UnboundedSender<(Milestone, String, Instant)>,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let mut listed = Some(listed);
    let mut stream = watcher(pods, watcher::Config::default().labels(SELECTOR)).boxed();
    while let Some(ev) = stream.next().await {
        let at = Instant::now();
        let pod = match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listed.take() {
                    let _ = l.send(());
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "benchmark watch failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        for m in milestones(&pod) {
            if tx.send((m, name.clone(), at)).is_err() {
                return;
            }
        }
    }
}

/// The milestones `pod` has reached.
fn milestones(pod: &Pod) -> Vec<Milestone> {
    let mut out = Vec::new();
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        out.push(Milestone::Scheduled);
    }
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) == Some("Running") {
        out.push(Milestone::Running);
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        out.push(Milestone::Ready);
    }
    out
}

/// Creates `count` pods, `concurrency` at a time; with a `rate`, pod i is not sent before
/// `started + i / rate`.
async fn create_pods(
    pods: Api<Pod>,
    count: usize,
    rate: f64,
    concurrency: usize,
    started: Instant,
) -> Creates {
    let creates = Arc::new(std::sync::Mutex::new(Creates::default()));
    futures::stream::iter(0..count)
        .for_each_concurrent(concurrency, |i| {
            let pods = pods.clone();
            let creates = creates.clone();
            async move {
                if rate > 0.0 {
                    tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / rate))
                        .await;
                }
                let name = format!("startup-{i:05}");
                let spec = pod(&name);
                let sent = Instant::now();
                let result = match spec {
                    Ok(p) => pods
                        .create(&PostParams::default(), &p)
                        .await
                        .map_err(anyhow::Error::from),
                    Err(e) => Err(e),
                };
                let mut c = creates.lock().unwrap_or_else(|p| p.into_inner());
                match result {
                    Ok(_) => {
                        c.api_latency.push(sent.elapsed());
                        c.sent.insert(name, sent);
                    }
                    Err(e) => {
                        c.failed += 1;
                        c.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
        })
        .await;
    Arc::try_unwrap(creates)
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .unwrap_or_default()
}

/// A benchmark pod: busybox's httpd serving the image's `/var/www`, Ready once it answers.
fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"tandem.dev/bench": "startup"}},
        "spec": {"containers": [{
            "name": "httpd",
            "image": "tandem.local/busybox:1",
            "imagePullPolicy": "Never",
            "command": ["httpd", "-f", "-p", "8080", "-h", "/var/www"],
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
        }]}
    }))?)
}

/// Deletes every benchmark pod and waits until the agent has stopped them and they are gone
/// from the API; returns how long that took.
async fn delete_pods(client: &kube::Client, concurrency: usize) -> anyhow::Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    let list = pods
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .context("cannot list the benchmark pods")?;
    let params = DeleteParams {
        grace_period_seconds: Some(DELETE_GRACE_SECONDS),
        ..DeleteParams::default()
    };
    futures::stream::iter(list.items)
        .for_each_concurrent(concurrency.max(1), |p| {
            let (pods, params) = (pods.clone(), params.clone());
            async move {
                if let Some(name) = p.metadata.name {
                    let _ = pods.delete(&name, &params).await;
                }
            }
        })
        .await;
    loop {
        let left = pods
            .list(&ListParams::default().labels(SELECTOR))
            .await
            .map(|l| l.items.len())
            .unwrap_or(usize::MAX);
        if left == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > TEARDOWN_TIMEOUT {
            anyhow::bail!(
                "{left} pods still in the API after {}; containerd's shutdown removes their sandboxes",
                secs(TEARDOWN_TIMEOUT)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Per pod, how many Unhealthy events (probe failures) it had and the latest message.
async fn unhealthy_events(events: &Api<Event>) -> HashMap<String, (i32, String)> {
    let mut out: HashMap<String, (i32, String)> = HashMap::new();
    let Ok(list) = events.list(&ListParams::default()).await else {
        return out;
    };
    for e in list.items {
        if e.reason.as_deref() != Some("Unhealthy") {
            continue;
        }
        let Some(name) = e.involved_object.name else {
            continue;
        };
        let entry = out.entry(name).or_default();
        entry.0 += e.count.unwrap_or(1);
        entry.1 = e.message.unwrap_or_default();
    }
    out
}

/// The names and pod IPs of the pods that are not Ready.
async fn not_ready_pods(pods: &Api<Pod>) -> Vec<(String, String)> {
    let Ok(list) = pods.list(&ListParams::default().labels(SELECTOR)).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|p| !milestones(p).contains(&Milestone::Ready))
        .map(|p| {
            let ip = p
                .status
                .and_then(|s| s.pod_ip)
                .unwrap_or_else(|| "none".into());
            (p.metadata.name.unwrap_or_default(), ip)
        })
        .collect()
}

/// Phases and container waiting reasons of the pods that are not Ready, counted.
async fn not_ready_summary(pods: &Api<Pod>) -> String {
    let Ok(list) = pods.list(&ListParams::default().labels(SELECTOR)).await else {
        return "cannot list the pods".into();
    };
    let mut counts: HashMap<String, usize> = HashMap::new();
    for p in list
        .items
        .iter()
        .filter(|p| !milestones(p).contains(&Milestone::Ready))
    {
        let status = p.status.clone().unwrap_or_default();
        let waiting = status
            .container_statuses
            .iter()
            .flatten()
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .next();
        let key = format!(
            "{}{}",
            status.phase.unwrap_or_else(|| "no phase".into()),
            waiting.map(|w| format!(" ({w})")).unwrap_or_default()
        );
        *counts.entry(key).or_default() += 1;
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    parts.sort();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Addresses a pod network has for pods: all but the network, gateway and broadcast addresses.
fn cidr_room(cidr: &str) -> anyhow::Result<usize> {
    let bits: u32 = cidr
        .split_once('/')
        .and_then(|(_, b)| b.parse().ok())
        .filter(|b| (8..=30).contains(b))
        .with_context(|| format!("--pod-cidr {cidr:?} must be an IPv4 network from /8 to /30"))?;
    Ok((1usize << (32 - bits)) - 3)
}

/// Resident memory and CPU time of a set of processes.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    processes: usize,
    rss_kib: u64,
    /// User and system time, with that of the children they have waited for.
    cpu: Duration,
}

/// containerd and its shims, found by the base directory in their command lines (containerd's
/// config file, the shims' `-address`). Their CPU time includes that of the CNI plugins
/// (containerd's children) and of runc (the shims'), once those have exited.
fn runtime_usage(base_dir: &Path) -> Option<Usage> {
    let needle = base_dir.to_string_lossy().into_owned();
    let mut usage = Usage::default();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(&needle) {
            continue;
        }
        let rss = std::fs::read_to_string(path.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            });
        if let Some(r) = rss {
            usage.processes += 1;
            usage.rss_kib += r;
            usage.cpu += cpu_time(&path.join("stat"), true).unwrap_or_default();
        }
    }
    Some(usage)
}

/// User plus system time from a `/proc/<pid>/stat` file, with the waited-for children's when
/// `children`. The kernel counts in USER_HZ ticks, 100 per second on Linux.
pub(crate) fn cpu_time(stat: &Path, children: bool) -> Option<Duration> {
    let text = std::fs::read_to_string(stat).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces: state is
    // field 3, utime/stime 14/15, cutime/cstime 16/17.
    let fields: Vec<u64> = text
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let ticks: u64 = fields.iter().take(if children { 4 } else { 2 }).sum();
    Some(Duration::from_millis(ticks * 10))
}

/// What containerd's shutdown left: its process, shims, the bridge, cgroup directories.
fn leftovers(pid: u32, base_dir: &Path, bridge: &str, cgroup_root: &str) -> String {
    let mut left = Vec::new();
    let alive = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.contains(&*base_dir.to_string_lossy()));
    if alive {
        left.push(format!("containerd (pid {pid})"));
    }
    if let Some(u) = runtime_usage(base_dir).filter(|u| u.processes > 0) {
        left.push(format!("{} processes of this containerd", u.processes));
    }
    if Path::new("/sys/class/net").join(bridge).exists() {
        left.push(format!("bridge {bridge}"));
    }
    let cgroups: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|c| c.path().join(cgroup_root))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    left.extend(cgroups);
    let nat_rules = std::process::Command::new("iptables")
        .args(["-w", "5", "-t", "nat", "-S", "POSTROUTING"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).matches(bridge).count())
        .unwrap_or(0);
    if nat_rules > 0 {
        left.push(format!("{nat_rules} nat rule(s) naming {bridge}"));
    }
    if left.is_empty() {
        format!(
            "nothing (containerd exited; no shims, no bridge {bridge}, no NAT rule, no {cgroup_root} cgroups)"
        )
    } else {
        left.join(", ")
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute averages.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unavailable".into())
}

/// p50, p99 and max of sorted durations.
fn spread(sorted: &[Duration]) -> String {
    if sorted.is_empty() {
        return "no samples".into();
    }
    format!(
        "p50 {}  p99 {}  max {}",
        secs(percentile(sorted, 0.5)),
        secs(percentile(sorted, 0.99)),
        secs(percentile(sorted, 1.0))
    )
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_slash_24_has_room_for_253_pods() {
        assert_eq!(cidr_room("10.250.0.0/24").unwrap(), 253);
        assert_eq!(cidr_room("10.250.0.0/16").unwrap(), 65_533);
        assert!(cidr_room("10.250.0.0").is_err());
        assert!(cidr_room("10.250.0.0/31").is_err());
    }

    #[test]
    fn cpu_time_reads_ticks_after_a_command_name_with_parentheses() {
        let dir = tempfile::tempdir().unwrap();
        let stat = dir.path().join("stat");
        std::fs::write(
            &stat,
            "42 (a b) c) S 1 1 1 0 -1 0 0 0 0 0 100 50 7 3 20 0 1\n",
        )
        .unwrap();
        assert_eq!(cpu_time(&stat, false), Some(Duration::from_millis(1500)));
        assert_eq!(cpu_time(&stat, true), Some(Duration::from_millis(1600)));
        assert!(cpu_time(Path::new("/proc/self/stat"), false).is_some());
    }

    #[test]
    fn milestones_follow_binding_phase_and_ready_condition() {
        let mut p = pod("p").unwrap();
        assert!(milestones(&p).is_empty());
        p.spec.as_mut().unwrap().node_name = Some(NODE.into());
        assert_eq!(milestones(&p), [Milestone::Scheduled]);
        p.status = Some(
            serde_json::from_value(serde_json::json!({
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]
            }))
            .unwrap(),
        );
        assert_eq!(
            milestones(&p),
            [Milestone::Scheduled, Milestone::Running, Milestone::Ready]
        );
    }
}
