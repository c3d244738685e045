#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]
//! The server fed from a real tandem API server (in-process, SQLite in a temporary directory):
//! objects written through the API are answered within a second, and `register_service`
//! publishes the server as `kube-system/kube-dns`.

#[path = "common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tandem_dns::{DnsConfig, DnsServer, register_service};
use tandem_test_support::TestServer;

use common::{data, query, udp_ask};

async fn dns(client: &Client) -> Result<DnsServer> {
    let config = DnsConfig {
        listen: vec!["127.0.0.1:0".parse()?],
        ..DnsConfig::default()
    };
    Ok(DnsServer::start(client.clone(), config).await?)
}

/// Asks `name` every 10 ms until the reply has `rcode` and (when given) `expected` as its
/// answers; returns how long that took, failing after 3 s.
async fn until(
    at: SocketAddr,
    name: &str,
    qtype: RecordType,
    rcode: ResponseCode,
    expected: &[&str],
) -> Result<Duration> {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < Duration::from_secs(3) {
        let reply = udp_ask(at, &query(1, name, qtype, None)).await?;
        if reply.metadata.response_code == rcode
            && (expected.is_empty() || data(&reply) == expected)
        {
            return Ok(started.elapsed());
        }
        last = Some(reply);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("{name} {qtype} never became {rcode} {expected:?}; last reply {last:?}")
}

#[tokio::test]
async fn objects_written_through_the_api_are_answered_within_a_second() -> Result<()> {
    let cluster = TestServer::start().await?;
    let services: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
    let listed: Service = serde_json::from_value(json!({
        "metadata": { "name": "listed" },
        "spec": { "clusterIP": "10.96.0.50", "ports": [{ "port": 80 }] }
    }))?;
    services.create(&PostParams::default(), &listed).await?;
    let server = dns(&cluster.client).await?;
    let at = server.local_addrs()[0];
    assert!(server.index().read().unwrap().is_synced());

    // Listed at start: a Service made before, and the namespaces the API server made.
    let reply = udp_ask(
        at,
        &query(1, "listed.default.svc.cluster.local.", RecordType::A, None),
    )
    .await?;
    assert_eq!(data(&reply), ["10.96.0.50"]);
    let reply = udp_ask(
        at,
        &query(2, "kube-public.svc.cluster.local.", RecordType::A, None),
    )
    .await?;
    assert_eq!(reply.metadata.response_code, ResponseCode::NoError);

    let slices: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": { "name": "db" },
        "spec": { "clusterIP": "None", "ports": [{ "name": "pg", "port": 5432 }] }
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "db-1", "labels": { "kubernetes.io/service-name": "db" } },
        "addressType": "IPv4",
        "endpoints": [
            { "addresses": ["10.244.0.5"], "hostname": "db-0", "conditions": { "ready": true } }
        ],
        "ports": [{ "name": "pg", "port": 5432, "protocol": "TCP" }]
    }))?;
    slices.create(&PostParams::default(), &slice).await?;
    let took = until(
        at,
        "db-0.db.default.svc.cluster.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["10.244.0.5"],
    )
    .await?;
    assert!(took < Duration::from_secs(1), "{took:?}");
    let srv = udp_ask(
        at,
        &query(
            3,
            "_pg._tcp.db.default.svc.cluster.local.",
            RecordType::SRV,
            None,
        ),
    )
    .await?;
    assert_eq!(
        data(&srv),
        ["0 100 5432 db-0.db.default.svc.cluster.local."]
    );

    services.delete("db", &DeleteParams::default()).await?;
    let took = until(
        at,
        "db.default.svc.cluster.local.",
        RecordType::A,
        ResponseCode::NXDomain,
        &[],
    )
    .await?;
    assert!(took < Duration::from_secs(1), "{took:?}");
    Ok(())
}

#[tokio::test]
async fn register_service_publishes_the_server_as_kube_dns() -> Result<()> {
    let cluster = TestServer::start().await?;
    let server = dns(&cluster.client).await?;
    let at = server.local_addrs()[0];
    let dns_ip = "10.96.0.10".parse()?;
    register_service(&cluster.client, dns_ip, at, "node-1").await?;
    // Again: nothing changes, nothing fails.
    register_service(&cluster.client, dns_ip, at, "node-1").await?;

    let services: Api<Service> = Api::namespaced(cluster.client.clone(), "kube-system");
    let svc = services.get("kube-dns").await?;
    let labels = svc.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("k8s-app").map(String::as_str), Some("kube-dns"));
    assert_eq!(
        labels.get("kubernetes.io/name").map(String::as_str),
        Some("CoreDNS")
    );
    let spec = svc.spec.context("spec")?;
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
    assert!(spec.selector.is_none());
    let ports = spec.ports.context("ports")?;
    let names: Vec<_> = ports
        .iter()
        .map(|p| (p.name.clone(), p.protocol.clone(), p.port))
        .collect();
    assert_eq!(
        names,
        [
            (Some("dns".into()), Some("UDP".into()), 53),
            (Some("dns-tcp".into()), Some("TCP".into()), 53),
        ]
    );
    let slices: Api<EndpointSlice> = Api::namespaced(cluster.client.clone(), "kube-system");
    let slice = slices.get("kube-dns-node-1").await?;
    assert_eq!(slice.endpoints[0].addresses, [at.ip().to_string()]);
    assert_eq!(slice.endpoints[0].node_name.as_deref(), Some("node-1"));
    let slice_ports = slice.ports.context("ports")?;
    assert!(
        slice_ports
            .iter()
            .all(|p| p.port == Some(i32::from(at.port())))
    );
    let slice_labels = slice.metadata.labels.unwrap_or_default();
    assert_eq!(
        slice_labels
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("tandem-dns")
    );

    // The server serves its own Service.
    until(
        at,
        "kube-dns.kube-system.svc.cluster.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["10.96.0.10"],
    )
    .await?;
    until(
        at,
        "ns.dns.cluster.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["10.96.0.10"],
    )
    .await?;
    until(
        at,
        "_dns._udp.kube-dns.kube-system.svc.cluster.local.",
        RecordType::SRV,
        ResponseCode::NoError,
        &["0 100 53 kube-dns.kube-system.svc.cluster.local."],
    )
    .await?;

    // A new cluster DNS address replaces the Service (its cluster IP is immutable).
    register_service(&cluster.client, "10.96.0.11".parse()?, at, "node-1").await?;
    let svc = services.get("kube-dns").await?;
    assert_eq!(
        svc.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some("10.96.0.11")
    );
    until(
        at,
        "kube-dns.kube-system.svc.cluster.local.",
        RecordType::A,
        ResponseCode::NoError,
        &["10.96.0.11"],
    )
    .await?;
    Ok(())
}
