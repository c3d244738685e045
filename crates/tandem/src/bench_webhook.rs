//! `tandem bench api --webhook`: what admission webhooks cost a create. The same pod create
//! load runs on fresh servers in the order none, webhooks, webhooks, none (each mode once
//! early and once late, as `bench_wire` alternates), with "webhooks" one validating and one
//! mutating webhook (a JSONPatch adding a label) on every pod create, served over HTTPS on
//! loopback by a webhook server in this process. A last run adds a webhook that never answers
//! (`timeoutSeconds: 1`, `failurePolicy: Ignore`) on ConfigMaps only: pod creates must not slow
//! down for it, and its own ConfigMap creates each wait out the timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

use crate::bench::{ms, percentile};

/// A webhook server on loopback: allows every review, patching pods on `/mutate`, and never
/// answering on `/hang`. Counts the reviews it answered.
struct StandIn {
    port: u16,
    ca_pem: String,
    answered: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    req: http::Request<hyper::body::Incoming>,
    answered: Arc<AtomicU64>,
) -> Result<http::Response<Full<Bytes>>, hyper::Error> {
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await?.to_bytes();
    if path == "/hang" {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut response = json!({"uid": review["request"]["uid"], "allowed": true});
    if path == "/mutate" {
        let patch = json!([{"op": "add", "path": "/metadata/labels/admitted", "value": "yes"}]);
        response["patchType"] = json!("JSONPatch");
        response["patch"] =
            json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string().as_bytes()));
    }
    answered.fetch_add(1, Ordering::Relaxed);
    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    Ok(http::Response::new(Full::new(Bytes::from(out.to_string()))))
}

impl StandIn {
    async fn start() -> anyhow::Result<StandIn> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, &ca_key);
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
        params.subject_alt_names.push(rcgen::SanType::IpAddress(
            std::net::Ipv4Addr::LOCALHOST.into(),
        ));
        let cert = params.signed_by(&key, &issuer)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())?,
            )?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let answered = Arc::new(AtomicU64::new(0));
        let counter = answered.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, counter) = (acceptor.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req| answer(req, counter.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Ok(StandIn {
            port,
            ca_pem: ca_cert.pem(),
            answered,
            task,
        })
    }

    fn webhook(&self, name: &str, path: &str, resource: &str) -> Value {
        json!({
            "name": name,
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}{path}", self.port),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes()),
            },
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": [resource]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }
}

async fn post(client: &kube::Client, path: &str, body: &Value) -> anyhow::Result<http::StatusCode> {
    let req = http::Request::post(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(body)?)?;
    let resp = client.send(req.map(Into::into)).await?;
    let status = resp.status();
    let _ = resp.into_body().collect().await?;
    Ok(status)
}

async fn configure(
    client: &kube::Client,
    kind: &str,
    plural: &str,
    webhooks: Vec<Value>,
) -> anyhow::Result<()> {
    let name = format!("bench-{}", kind.to_lowercase());
    let body = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": webhooks,
    });
    let status = post(
        client,
        &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
        &body,
    )
    .await?;
    if status != http::StatusCode::CREATED {
        bail!("creating the {kind} answered {status}");
    }
    Ok(())
}

/// One run's figures.
struct Figures {
    rate: f64,
    latencies: Vec<Duration>,
}

/// Creates `count` objects at `path` from `clients` clients.
async fn load(
    client: &kube::Client,
    path: &str,
    count: usize,
    clients: usize,
    make: fn(usize) -> Value,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let per_client = count.div_ceil(clients);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, path) = (client.clone(), path.to_string());
        let range = (c * per_client)..((c + 1) * per_client).min(count);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(range.len());
            for i in range {
                let t = Instant::now();
                let status = post(&client, &path, &make(i)).await?;
                lat.push(t.elapsed());
                if status != http::StatusCode::CREATED {
                    bail!("create answered {status}");
                }
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.context("a client task failed")??);
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    Ok(Figures { rate, latencies })
}

fn pod(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i:06}"), "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1"}]}
    })
}

fn config_map(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("slow-{i:04}")}})
}

const PODS: &str = "/api/v1/namespaces/default/pods";

pub async fn compare(pods: usize, clients: usize) -> anyhow::Result<()> {
    println!(
        "tandem bench api --webhook: {pods} pod creates from {clients} clients per run: none, webhooks, webhooks, none (webhooks: one validating and one mutating webhook on every pod create, HTTPS on loopback, in this process), each on a fresh server"
    );
    let stand_in = StandIn::start().await?;
    let mut runs: Vec<(bool, Figures)> = Vec::new();
    for with in [false, true, true, false] {
        let (_dir, _server, client) = crate::bench::bench_server().await?;
        if with {
            configure(
                &client,
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                vec![stand_in.webhook("validate.bench.tandem", "/validate", "pods")],
            )
            .await?;
            configure(
                &client,
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
                vec![stand_in.webhook("mutate.bench.tandem", "/mutate", "pods")],
            )
            .await?;
            // The configurations reach the server's cache a moment after they are written.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let before = stand_in.answered.load(Ordering::Relaxed);
        let f = load(&client, PODS, pods, clients, pod).await?;
        let calls = stand_in.answered.load(Ordering::Relaxed) - before;
        if with && calls < 2 * pods as u64 {
            bail!("the webhooks answered {calls} reviews for {pods} creates");
        }
        println!(
            "run {}: {:8} {:.0} creates/s  p50 {}  p99 {}  ({calls} reviews answered)",
            runs.len() + 1,
            if with { "webhooks" } else { "none" },
            f.rate,
            ms(percentile(&f.latencies, 0.5)),
            ms(percentile(&f.latencies, 0.99)),
        );
        runs.push((with, f));
    }
    println!();
    let mut summary = Vec::new();
    for with in [false, true] {
        let mine: Vec<&Figures> = runs
            .iter()
            .filter(|(w, _)| *w == with)
            .map(|(_, f)| f)
            .collect();
        let rate = mine.iter().map(|f| f.rate).sum::<f64>() / mine.len().max(1) as f64;
        let mut lat: Vec<Duration> = mine
            .iter()
            .flat_map(|f| f.latencies.iter().copied())
            .collect();
        lat.sort();
        let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
        println!(
            "{:8} {rate:.0} creates/s (mean of {} runs)  p50 {}  p99 {}",
            if with { "webhooks" } else { "none" },
            mine.len(),
            ms(p50),
            ms(p99)
        );
        summary.push((rate, p50, p99));
    }
    if let [(_, p50_none, p99_none), (_, p50_hooks, p99_hooks)] = summary.as_slice() {
        println!(
            "added per webhook call (two per create): p50 {}  p99 {}",
            ms(p50_hooks.saturating_sub(*p50_none) / 2),
            ms(p99_hooks.saturating_sub(*p99_none) / 2)
        );
    }

    // A webhook that never answers, failing open, on ConfigMaps only.
    let (_dir, _server, client) = crate::bench::bench_server().await?;
    let mut hang = stand_in.webhook("hang.bench.tandem", "/hang", "configmaps");
    hang["timeoutSeconds"] = json!(1);
    hang["failurePolicy"] = json!("Ignore");
    configure(
        &client,
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        vec![hang],
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let slow_client = client.clone();
    let slow = tokio::spawn(async move {
        load(
            &slow_client,
            "/api/v1/namespaces/default/configmaps",
            8,
            8,
            config_map,
        )
        .await
    });
    let f = load(&client, PODS, pods, clients, pod).await?;
    let s = slow.await.context("the ConfigMap task failed")??;
    println!(
        "hanging webhook (timeoutSeconds 1, Ignore) on ConfigMaps: pod creates {:.0}/s  p99 {}; its 8 ConfigMap creates p50 {} (each waits out the timeout, then succeeds)",
        f.rate,
        ms(percentile(&f.latencies, 0.99)),
        ms(percentile(&s.latencies, 0.5)),
    );
    Ok(())
}
