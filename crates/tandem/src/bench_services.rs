//! `tandem bench services`: the service proxy's rule sync and the cluster DNS's query rate.
//!
//! Services (ClusterIP, one port) with an EndpointSlice of emulated endpoints each are created
//! through an in-process API server. The service proxy programs them into an nftables table in
//! a private network namespace of the bench (so rules for made-up addresses never touch this
//! machine's traffic); then EndpointSlices are changed one at a time and the time from the API
//! write to `nft` having applied the new endpoint is measured, at each size asked for. Finally
//! a loopback UDP client queries the cluster DNS, fed by the same API, for the Services' names.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tandem_proxy::{Cidr, ProxyConfig, ServiceProxy};

use crate::bench::percentile;

#[derive(Args)]
pub struct ServicesBench {
    /// Services in the end; the sync is also measured at 1,000 on the way when this is larger.
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Endpoints per Service.
    #[arg(long, default_value_t = 5)]
    endpoints: usize,
    /// EndpointSlice changes measured at each size, one at a time.
    #[arg(long, default_value_t = 200)]
    changes: usize,
    /// Seconds of DNS load.
    #[arg(long, default_value_t = 10)]
    dns_secs: u64,
    /// Concurrent DNS queries in flight.
    #[arg(long, default_value_t = 8)]
    dns_concurrency: usize,
}

const NAMESPACE: &str = "bench";

/// A child process holding a network namespace of the bench's own (also used by
/// `bench netpol`).
pub(crate) struct PrivateNetns(tokio::process::Child);

impl PrivateNetns {
    pub(crate) async fn new() -> anyhow::Result<PrivateNetns> {
        let child = tokio::process::Command::new("unshare")
            .args(["--net", "sleep", "100000"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a private network namespace (unshare --net; needs root)")?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(PrivateNetns(child))
    }
    pub(crate) fn path(&self) -> Option<std::path::PathBuf> {
        Some(format!("/proc/{}/ns/net", self.0.id()?).into())
    }
}

/// Endpoint `k` of Service `i`: addresses in 10.250.0.0/16 and up, never on the network.
fn endpoint_ip(i: usize, k: usize, endpoints: usize) -> Ipv4Addr {
    let n = (i * endpoints + k) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 250, 0, 0)) + n)
}

fn slice(i: usize, ips: &[Ipv4Addr]) -> anyhow::Result<EndpointSlice> {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip.to_string()], "conditions": {"ready": true}, "nodeName": "bench-node"}))
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}"), "namespace": NAMESPACE,
                     "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }))?)
}

/// Creates Services `from..to` with their slices, 32 requests at a time.
async fn create_services(
    client: &kube::Client,
    from: usize,
    to: usize,
    endpoints: usize,
) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(from..to)
        .map(|i| {
            let services = services.clone();
            let slices = slices.clone();
            async move {
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("svc-{i}")},
                    "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
                }))?;
                services.create(&PostParams::default(), &svc).await?;
                let ips: Vec<Ipv4Addr> = (0..endpoints)
                    .map(|k| endpoint_ip(i, k, endpoints))
                    .collect();
                slices
                    .create(&PostParams::default(), &slice(i, &ips)?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Waits until the proxy has applied `want` for Service `i` (at most `limit`).
async fn wait_applied(
    proxy: &ServiceProxy,
    i: usize,
    want: Ipv4Addr,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut status = proxy.status();
    let name = format!("svc-{i}");
    loop {
        if proxy
            .applied_endpoints(NAMESPACE, &name)
            .iter()
            .any(|(ip, _)| *ip == want)
        {
            return Some(started.elapsed());
        }
        let left = limit.checked_sub(started.elapsed())?;
        let _ = tokio::time::timeout(left, status.changed()).await;
    }
}

/// Changes the first endpoint of `changes` Services (spread over `0..count`) one at a time;
/// returns the sorted write → applied latencies and the number that never got applied.
async fn measure_changes(
    client: &kube::Client,
    proxy: &ServiceProxy,
    count: usize,
    endpoints: usize,
    changes: usize,
    round: usize,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let mut latencies = Vec::with_capacity(changes);
    let mut missed = 0;
    for c in 0..changes {
        let i = (c * 7919) % count;
        // A fresh address for the first endpoint: 10.251.x.y, unique per change and round.
        let fresh =
            Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 251, 0, 0)) + (round * changes + c) as u32);
        let mut ips: Vec<Ipv4Addr> = (0..endpoints)
            .map(|k| endpoint_ip(i, k, endpoints))
            .collect();
        if let Some(first) = ips.first_mut() {
            *first = fresh;
        }
        let body = serde_json::to_value(slice(i, &ips)?)?;
        let started = Instant::now();
        slices
            .patch(
                &format!("svc-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&json!({"endpoints": body["endpoints"]})),
            )
            .await?;
        match wait_applied(proxy, i, fresh, Duration::from_secs(30)).await {
            Some(_) => latencies.push(started.elapsed()),
            None => missed += 1,
        }
    }
    latencies.sort();
    Ok((latencies, missed))
}

/// The bench's proxy: a table of its own in the bench's private network namespace.
fn proxy_config(table: &str, netns: &PrivateNetns) -> anyhow::Result<ProxyConfig> {
    Ok(ProxyConfig {
        table: table.to_string(),
        node_name: "bench-node".into(),
        cluster_cidr: Cidr::parse("10.244.0.0/16").context("cluster CIDR")?,
        node_pod_cidr: None,
        service_cidr: Cidr::parse("10.96.0.0/12").context("service CIDR")?,
        bridge: None,
        netns: netns.path(),
        windows: None,
        pod_network: false,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub async fn run(b: ServicesBench) -> anyhow::Result<()> {
    let (_dir, _server, client) = crate::bench::bench_server().await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let netns = PrivateNetns::new().await?;
    let table = format!("tandem-bench-{}", std::process::id());
    let config = proxy_config(&table, &netns)?;
    println!(
        "tandem bench services: {} Services x {} endpoints, {} EndpointSlice changes per size; nftables in a private network namespace",
        b.services, b.endpoints, b.changes
    );
    let proxy = ServiceProxy::start(client.clone(), config)
        .await
        .context("cannot start the service proxy")?;

    let mut sizes: Vec<usize> = vec![b.services.min(1_000), b.services];
    sizes.dedup();
    let mut created = 0;
    for (round, size) in sizes.iter().copied().enumerate() {
        let started = Instant::now();
        create_services(&client, created, size, b.endpoints).await?;
        created = size;
        let made = started.elapsed();
        // Until the proxy has every Service in the kernel.
        let last = endpoint_ip(size - 1, 0, b.endpoints);
        let caught_up = wait_applied(&proxy, size - 1, last, Duration::from_secs(600)).await;
        println!(
            "  {size} Services: created in {:.1} s; rules for all in place {:.1} s after the last write{}",
            made.as_secs_f64(),
            caught_up.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN),
            if caught_up.is_none() {
                " (timed out)"
            } else {
                ""
            }
        );
        let (lat, missed) =
            measure_changes(&client, &proxy, size, b.endpoints, b.changes, round).await?;
        println!(
            "  {size} Services: EndpointSlice change -> rule in place: p50 {}, p99 {}, max {} ({} changes{})",
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
            ms(lat.last().copied().unwrap_or_default()),
            lat.len(),
            if missed > 0 {
                format!(", {missed} not applied within 30 s")
            } else {
                String::new()
            }
        );
    }
    // The kernel holds what the proxy says it applied: spot-check one Service's chain.
    let listing = proxy.listing().await.unwrap_or_default();
    let chains = listing.matches("chain svc-").count();
    println!("  nftables: {chains} service chains in table ip {table}");
    // A proxy starting on a cluster this size (a restart): one full load of the table.
    let started = Instant::now();
    let second = ServiceProxy::start(
        client.clone(),
        proxy_config(&format!("{table}-restart"), &netns)?,
    )
    .await
    .context("cannot start the second service proxy")?;
    let mut second_status = second.status();
    let loaded = tokio::time::timeout(
        Duration::from_secs(300),
        second_status.wait_for(|s| s.syncs > 0),
    )
    .await
    .is_ok();
    println!(
        "  {created} Services: a proxy starting from nothing loads the whole table in {:.1} s{}",
        started.elapsed().as_secs_f64(),
        if loaded { "" } else { " (timed out)" }
    );
    second.shutdown().await;
    let status = proxy.status().borrow().clone();
    println!(
        "  proxy: {} transactions, last error: {}",
        status.syncs,
        status.last_error.as_deref().unwrap_or("none")
    );

    // DNS: the same API feeds the server; query the Services' names from a loopback client.
    let dns = tandem_dns::DnsServer::start(
        client.clone(),
        tandem_dns::DnsConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
            cluster_domain: "cluster.local".into(),
            upstreams: Vec::new(),
            ttl: 30,
        },
    )
    .await
    .context("cannot start the DNS server")?;
    let addr = dns.local_addrs().first().copied().context("DNS address")?;
    let names: Vec<String> = (0..created.min(1_000))
        .map(|i| format!("svc-{}.{NAMESPACE}.svc.cluster.local", (i * 7919) % created))
        .collect();
    let report = crate::bench::dns_load::query_load(
        addr,
        &names,
        b.dns_concurrency,
        Duration::from_secs(b.dns_secs),
        5_000_000,
    )
    .await;
    println!(
        "  DNS ({} Services indexed, {} in flight): {:.0} queries/s, p50 {}, p99 {}, {} errors of {} queries",
        created,
        b.dns_concurrency,
        report.qps,
        ms(report.p50),
        ms(report.p99),
        report.errors,
        report.queries + report.errors
    );
    drop(dns);
    proxy.shutdown().await;
    drop(netns);
    Ok(())
}
