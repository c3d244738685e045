//! `tandem bench nodes --networked`: after the pods of the nodes bench run on pod networks of
//! their own (see `tandem_agent::podnet`), HTTP through a ClusterIP. A service proxy programs a
//! table of its own in this machine's nftables; a Service selects every bench pod; once every
//! endpoint is in the kernel, a fixed number of clients in this process send requests, each on a
//! new connection (so conntrack and the DNAT pick a backend per request), for a bounded time and
//! count. Everything is removed afterwards: the Service's table, the pods' namespaces, the
//! bridges.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use tandem_proxy::{ProxyConfig, ServiceProxy};

use crate::bench::nodes::{BenchReport, NAMESPACE, NETWORKED_CLUSTER_CIDR, NETWORKED_PORT};
use crate::node_network::cidr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long the load runs, at most, and how many requests it sends, at most.
const LOAD_TIME: Duration = Duration::from_secs(10);
const LOAD_REQUESTS: u64 = 2_000_000;
const CLIENTS: usize = 32;

/// The host's neighbour table thresholds (`gc_thresh1..3`).
const NEIGH: [&str; 3] = [
    "/proc/sys/net/ipv4/neigh/default/gc_thresh1",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh2",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh3",
];

/// Measures HTTP through a ClusterIP to the bench's pods, then removes the bench's networks.
///
/// The host talks to every pod directly (one neighbour entry each): with the kernel's default
/// table (hard limit 1,024 entries) a thousand pods overflow it and connections fail. The
/// thresholds are raised for the load when they are too small and put back afterwards, as a node
/// with that many pods is configured.
pub async fn measure(client: kube::Client, report: &BenchReport) -> anyhow::Result<()> {
    let saved: Vec<Option<String>> = NEIGH
        .iter()
        .map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let need = (report.pods_running as u64 + 512) * 2;
    let hard: u64 = saved[2]
        .as_deref()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let raised = hard < need;
    if raised {
        for (path, value) in NEIGH.iter().zip([need / 4, need / 2, need]) {
            let _ = std::fs::write(path, value.to_string());
        }
        println!(
            "neighbour table thresholds raised to {}/{}/{} for the load (was {}), restored after",
            need / 4,
            need / 2,
            need,
            hard
        );
    }
    let result = measure_inner(client, report).await;
    if raised {
        for (path, value) in NEIGH.iter().zip(&saved) {
            if let Some(v) = value {
                let _ = std::fs::write(path, v.trim());
            }
        }
    }
    for net in &report.networks {
        net.shutdown().await;
    }
    result
}

async fn measure_inner(client: kube::Client, report: &BenchReport) -> anyhow::Result<()> {
    let proxy = ServiceProxy::start(
        client.clone(),
        ProxyConfig {
            table: format!("tandem-bench-{}", std::process::id()),
            node_name: "bench-proxy".into(),
            cluster_cidr: cidr("cluster CIDR", NETWORKED_CLUSTER_CIDR)?,
            node_pod_cidr: None,
            service_cidr: cidr("service CIDR", "10.96.0.0/12")?,
            bridge: None,
            netns: None,
            windows: None,
            pod_network: false,
        },
    )
    .await
    .context("the bench's service proxy cannot start")?;
    let outcome = load(client, report).await;
    proxy.shutdown().await;
    outcome
}

async fn load(client: kube::Client, report: &BenchReport) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(client, NAMESPACE);
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench-web"},
        "spec": {
            "selector": {"tandem.dev/bench": "nodes"},
            "ports": [{"port": 80, "targetPort": NETWORKED_PORT}]
        }
    }))?;
    let svc = api
        .create(&PostParams::default(), &svc)
        .await
        .context("cannot create the bench Service")?;
    let ip: Ipv4Addr = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|s| s.parse().ok())
        .context("the bench Service has no IPv4 cluster IP")?;
    let target = SocketAddr::from((ip, 80));
    // Wait (bounded) until a request answers: the endpoints are programmed.
    let ready_by = Instant::now() + Duration::from_secs(60);
    while request(target).await.is_err() {
        if Instant::now() > ready_by {
            anyhow::bail!("{target} did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let (done, failed) = (done.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            while started.elapsed() < LOAD_TIME && done.load(Ordering::Relaxed) < LOAD_REQUESTS {
                match request(target).await {
                    Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    let took = started.elapsed().as_secs_f64();
    let ok = done.load(Ordering::Relaxed);
    println!(
        "HTTP through ClusterIP {target} to {} pods: {ok} requests in {took:.1} s = {:.0} requests/s ({CLIENTS} clients, a new connection per request), {} failed",
        report.pods_running,
        ok as f64 / took.max(1e-9),
        failed.load(Ordering::Relaxed)
    );
    Ok(())
}

/// One `GET /` on a new connection; `Ok` on a `200`.
async fn request(target: SocketAddr) -> std::io::Result<()> {
    let work = async {
        let mut s = tokio::net::TcpStream::connect(target).await?;
        s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            .await?;
        let mut buf = Vec::with_capacity(1024);
        s.read_to_end(&mut buf).await?;
        if buf.starts_with(b"HTTP/1.1 200") {
            Ok(())
        } else {
            Err(std::io::Error::other("not a 200"))
        }
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("timed out")))
}
