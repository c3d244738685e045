//! `tandem bench ingress`: HTTP requests/s and latency through the ingress controller, next to
//! the same requests sent straight to the backends, in one run.
//!
//! An in-process API server holds a Service whose EndpointSlice lists `--endpoints` stand-in
//! backends (small HTTP servers in this process on loopback addresses 127.0.0.1, 127.0.0.2, …,
//! one port) and an Ingress of the `tandem` class routing `bench.local` to it; the ingress
//! controller (`tandem_ingress`) serves it on an ephemeral loopback port. `--clients` concurrent
//! clients then send `GET /` for at most `--seconds` and `--requests` per measurement: straight
//! to the backends (round-robin, as the ingress spreads them) and through the ingress, first
//! with a new connection per request, then over kept-alive connections. Everything shares this
//! machine's cores, so the figures compare the two paths; they are not a capacity.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, PostParams};
use tokio::net::{TcpListener, TcpStream};

use crate::bench::{bench_server, ms, percentile};

/// The host the bench's Ingress routes.
const HOST: &str = "bench.local";
/// The namespace of the bench's objects.
const NAMESPACE: &str = "default";
/// How long the ingress may take to route the bench's Ingress after it is created.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Flags of `tandem bench ingress`.
#[derive(Args)]
pub struct IngressBench {
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// How long each measurement runs, at most, in seconds.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// How many requests each measurement sends, at most.
    #[arg(long, default_value_t = 200_000)]
    requests: u64,
    /// Stand-in backends behind the Service (at most 200).
    #[arg(long, default_value_t = 2)]
    endpoints: usize,
}

pub async fn run(b: IngressBench) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=200).contains(&b.endpoints),
        "--endpoints must be 1 to 200"
    );
    anyhow::ensure!(b.clients >= 1, "--clients must be at least 1");
    let (_dir, _server, client) = bench_server().await?;
    let (port, backends, backend_tasks) = start_backends(b.endpoints).await?;
    create_objects(&client, port, &backends).await?;
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    tokio::spawn(tandem_ingress::ensure_class(
        client.clone(),
        tandem_ingress::class::Identity::default(),
    ));
    let controller = tandem_ingress::IngressController::start(
        client.clone(),
        tandem_ingress::IngressConfig::new("bench-ingress", loopback, loopback),
    )
    .await
    .context("the ingress controller cannot start")?;
    let ingress = controller.http_addr();
    let ready_by = Instant::now() + READY_TIMEOUT;
    while request(ingress).await.is_err() {
        if Instant::now() > ready_by {
            anyhow::bail!("the ingress on {ingress} did not route {HOST} within {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "tandem bench ingress: {} clients, at most {} s and {} requests per measurement, {} stand-in backends on port {port}, ingress on {ingress}",
        b.clients, b.seconds, b.requests, b.endpoints
    );
    let limits = Limits {
        clients: b.clients,
        time: Duration::from_secs(b.seconds),
        requests: b.requests,
    };
    for keep_alive in [false, true] {
        let mode = if keep_alive {
            "kept-alive connections"
        } else {
            "a new connection per request"
        };
        let direct = measure(&limits, Path::Direct(backends.clone()), keep_alive).await;
        let through = measure(&limits, Path::Ingress(ingress), keep_alive).await;
        println!("{mode}:");
        println!("  direct to the backends: {}", direct.line());
        println!("  through the ingress:    {}", through.line());
        if direct.rate() > 0.0 {
            println!(
                "  the ingress carries {:.0}% of the direct rate",
                100.0 * through.rate() / direct.rate()
            );
        }
    }
    controller.shutdown().await;
    for t in backend_tasks {
        t.abort();
    }
    Ok(())
}

/// Starts `n` stand-in backends on 127.0.0.1, 127.0.0.2, … sharing one port (an EndpointSlice
/// has one port for all its endpoints).
async fn start_backends(
    n: usize,
) -> anyhow::Result<(u16, Vec<SocketAddr>, Vec<tokio::task::JoinHandle<()>>)> {
    // The first address picks a free port; another process may hold it on a later address, so
    // try a few times.
    let mut last = None;
    for _ in 0..5 {
        let first = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = first.local_addr()?.port();
        let mut listeners = vec![first];
        let mut failed = None;
        for i in 1..n {
            let ip = Ipv4Addr::new(127, 0, 0, (i + 1) as u8);
            match TcpListener::bind((ip, port)).await {
                Ok(l) => listeners.push(l),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            last = Some(e);
            continue;
        }
        let addrs = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<Result<Vec<_>, _>>()?;
        let tasks = listeners
            .into_iter()
            .map(|l| tokio::spawn(backend(l)))
            .collect();
        return Ok((port, addrs, tasks));
    }
    Err(anyhow::anyhow!(
        "cannot bind {n} stand-in backends on one port: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// A stand-in pod: answers every request `200 ok`.
async fn backend(listener: TcpListener) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_req| async {
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                    Bytes::from_static(b"ok\n"),
                )))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

async fn create_objects(
    client: &kube::Client,
    port: u16,
    backends: &[SocketAddr],
) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench-web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}
    }))?;
    Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(&pp, &svc)
        .await
        .context("cannot create the bench Service")?;
    let endpoints: Vec<serde_json::Value> = backends
        .iter()
        .map(|a| serde_json::json!({"addresses": [a.ip().to_string()], "conditions": {"ready": true}}))
        .collect();
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench-web-1", "labels": {"kubernetes.io/service-name": "bench-web"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE)
        .create(&pp, &slice)
        .await
        .context("cannot create the bench EndpointSlice")?;
    let ingress: Ingress = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bench"},
        "spec": {
            "ingressClassName": tandem_ingress::CLASS_NAME,
            "rules": [{"host": HOST, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "bench-web", "port": {"name": "http"}}}}]}}]
        }
    }))?;
    Api::<Ingress>::namespaced(client.clone(), NAMESPACE)
        .create(&pp, &ingress)
        .await
        .context("cannot create the bench Ingress (is networking.k8s.io/v1 served?)")?;
    Ok(())
}

struct Limits {
    clients: usize,
    time: Duration,
    requests: u64,
}

#[derive(Clone)]
enum Path {
    /// Straight to the backends, round-robin.
    Direct(Vec<SocketAddr>),
    Ingress(SocketAddr),
}

struct Figures {
    ok: u64,
    failed: u64,
    took: Duration,
    latencies: Vec<Duration>,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.ok as f64 / self.took.as_secs_f64().max(1e-9)
    }

    fn line(&self) -> String {
        format!(
            "{} requests in {:.1} s = {:.0} requests/s, latency p50 {} p99 {}, {} failed",
            self.ok,
            self.took.as_secs_f64(),
            self.rate(),
            ms(percentile(&self.latencies, 0.5)),
            ms(percentile(&self.latencies, 0.99)),
            self.failed
        )
    }
}

async fn measure(limits: &Limits, path: Path, keep_alive: bool) -> Figures {
    let sent = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(limits.clients);
    for _ in 0..limits.clients {
        let (sent, failed, next, path) = (sent.clone(), failed.clone(), next.clone(), path.clone());
        let (time, max) = (limits.time, limits.requests);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut conn: Option<(
                SocketAddr,
                hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
            )> = None;
            while started.elapsed() < time && sent.fetch_add(1, Ordering::Relaxed) < max {
                let target = match &path {
                    Path::Direct(list) => list[next.fetch_add(1, Ordering::Relaxed) % list.len()],
                    Path::Ingress(a) => *a,
                };
                let t0 = Instant::now();
                let result = if keep_alive {
                    // One connection per client (per backend, for the direct path).
                    if conn
                        .as_ref()
                        .is_none_or(|(a, s)| *a != target || s.is_closed())
                    {
                        conn = connect(target).await.ok().map(|s| (target, s));
                    }
                    match conn.as_mut() {
                        Some((_, sender)) => send(sender).await,
                        None => Err(anyhow::anyhow!("cannot connect to {target}")),
                    }
                } else {
                    request(target).await
                };
                match result {
                    Ok(()) => latencies.push(t0.elapsed()),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                }
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for w in workers {
        if let Ok(l) = w.await {
            latencies.extend(l);
        }
    }
    let took = started.elapsed();
    latencies.sort();
    Figures {
        ok: latencies.len() as u64,
        failed: failed.load(Ordering::Relaxed),
        took,
        latencies,
    }
}

async fn connect(
    target: SocketAddr,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Empty<Bytes>>> {
    let tcp = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(target))
        .await
        .context("connect timed out")??;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// `GET /` for the bench host on `sender`; `Ok` on a `200` whose body arrived.
async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
) -> anyhow::Result<()> {
    let work = async {
        sender.ready().await?;
        let req = hyper::Request::get("/")
            .header(http::header::HOST, HOST)
            .body(Empty::new())?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        resp.into_body().collect().await?;
        anyhow::ensure!(status == hyper::StatusCode::OK, "status {status}");
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .context("request timed out")?
}

/// One `GET /` on a new connection.
async fn request(target: SocketAddr) -> anyhow::Result<()> {
    let mut sender = connect(target).await?;
    send(&mut sender).await
}
