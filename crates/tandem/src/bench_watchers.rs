//! `tandem bench watchers`: what open watches cost the API server (issue 22). A `tandem server`
//! runs as a child process, so its resident memory (`VmRSS` in `/proc/<pid>/status`) holds only
//! the server; then:
//!
//! 1. `--idle` watchers (default 10,000) of ConfigMaps that see no events, opened over HTTP/2
//!    connections of up to 150 streams each, as client-go's informers share connections; the
//!    figure is the server's memory with them open, and per watcher.
//! 2. `--stalled` watchers (default 100) that never read while `--writes` ConfigMaps of
//!    `--size` bytes each are created. Without a bound, each would pin every event it has not
//!    read; the server ends a watch whose buffer stays full for
//!    [`tandem_apiserver::watch::BLOCKED_WATCHER_TIMEOUT`] (as upstream's cacher stops
//!    unresponsive watchers), so the figures are the peak during the writes and the memory once
//!    the stalled watchers were cut off, and how many were.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams, WatchParams};

/// Watch streams per HTTP/2 connection (the server allows 200).
const STREAMS_PER_CONNECTION: usize = 150;

/// Flags of `tandem bench watchers`.
#[derive(Args)]
pub struct WatchersBench {
    /// Idle watchers to open.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Watchers that stop reading.
    #[arg(long, default_value_t = 100)]
    stalled: usize,
    /// ConfigMaps created while the stalled watchers do not read.
    #[arg(long, default_value_t = 400)]
    writes: usize,
    /// Bytes of data in each of those ConfigMaps.
    #[arg(long, default_value_t = 64 * 1024)]
    size: usize,
}

/// The server child; killed when dropped.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl ServerProcess {
    fn rss_mib(&self) -> f64 {
        rss_kib(self.0.id()) as f64 / 1024.0
    }
}

/// `VmRSS` of process `pid` in KiB (0 if unreadable).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn start_server(dir: &Path) -> anyhow::Result<(ServerProcess, std::path::PathBuf)> {
    let kubeconfig = dir.join("kubeconfig");
    let exe = std::env::current_exe().context("cannot find the tandem binary")?;
    let child = Command::new(exe)
        .args(["server", "--port", "0", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start tandem server")?;
    let server = ServerProcess(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if kubeconfig.exists()
            && let Ok(client) = crate::h2_client::client_from(&kubeconfig).await
            && Api::<Namespace>::all(client).get("default").await.is_ok()
        {
            return Ok((server, kubeconfig));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("tandem server was not ready within 60 s")
}

/// Waits for memory to settle after a change (allocator returns, tasks finish).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}

pub async fn run(b: WatchersBench) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let (server, kubeconfig) = start_server(dir.path()).await?;
    settle().await;
    let base = server.rss_mib();
    println!("tandem server RSS at rest: {base:.1} MiB");

    // 1. Idle watchers.
    let started = Instant::now();
    let mut clients = Vec::new();
    let mut idle = Vec::with_capacity(b.idle);
    for i in 0..b.idle {
        if i % STREAMS_PER_CONNECTION == 0 {
            clients.push(crate::h2_client::client_from(&kubeconfig).await?);
        }
        let client = clients.last().context("no client")?.clone();
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let stream = api
            .watch(&WatchParams::default().timeout(290), "0")
            .await
            .with_context(|| format!("watch {i} failed"))?;
        idle.push(stream.boxed());
    }
    let opened = started.elapsed();
    settle().await;
    let with_idle = server.rss_mib();
    println!(
        "{} idle watchers (opened in {opened:.1?} over {} HTTP/2 connections): RSS {with_idle:.1} MiB, +{:.1} MiB, {:.1} KiB per watcher",
        b.idle,
        clients.len(),
        with_idle - base,
        (with_idle - base) * 1024.0 / b.idle.max(1) as f64
    );
    drop(idle);
    drop(clients);
    settle().await;
    let after_idle = server.rss_mib();
    println!("after closing them: RSS {after_idle:.1} MiB");

    // 2. Stalled watchers: opened, never polled again.
    let stall_client = crate::h2_client::client_from(&kubeconfig).await?;
    let mut stalled = Vec::with_capacity(b.stalled);
    let mut stall_clients = vec![stall_client];
    for i in 0..b.stalled {
        if i > 0 && i % STREAMS_PER_CONNECTION == 0 {
            stall_clients.push(crate::h2_client::client_from(&kubeconfig).await?);
        }
        let client = stall_clients.last().context("no client")?.clone();
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        stalled.push(
            api.watch(&WatchParams::default().timeout(290), "0")
                .await?
                .boxed(),
        );
    }
    eprintln!("{} stalled watchers open; writing", b.stalled);
    let writer: Api<ConfigMap> =
        Api::namespaced(crate::h2_client::client_from(&kubeconfig).await?, "default");
    let data = "x".repeat(b.size);
    let before = server.rss_mib();
    let mut peak = before;
    let started = Instant::now();
    for i in 0..b.writes {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("stall-{i:05}")},
            "data": {"blob": data},
        }))?;
        writer.create(&PostParams::default(), &cm).await?;
        if i % 10 == 0 {
            peak = peak.max(server.rss_mib());
        }
    }
    let wrote = started.elapsed();
    eprintln!(
        "wrote {} ConfigMaps in {wrote:.1?}; waiting for the cut-off",
        b.writes
    );
    // Past the blocked-watcher timeout, sampling the peak meanwhile.
    let wait_until =
        Instant::now() + tandem_apiserver::watch::BLOCKED_WATCHER_TIMEOUT + Duration::from_secs(3);
    while Instant::now() < wait_until {
        peak = peak.max(server.rss_mib());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after_cutoff = server.rss_mib();
    // Which stalled watches the server ended: their streams end after the buffered events.
    let drained = futures::future::join_all(stalled.iter_mut().map(|stream| {
        tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(item) = stream.next().await {
                if item.is_err() {
                    break;
                }
            }
        })
    }))
    .await;
    let ended = drained.iter().filter(|d| d.is_ok()).count();
    println!(
        "{} stalled watchers while {} ConfigMaps of {} KiB were created ({:.1} MiB of events, in {wrote:.1?}): RSS {before:.1} MiB before, peak {peak:.1} MiB, {after_cutoff:.1} MiB once cut off; {ended} of {} watches ended by the server",
        b.stalled,
        b.writes,
        b.size / 1024,
        (b.writes * b.size) as f64 / (1024.0 * 1024.0),
        b.stalled
    );
    Ok(())
}
