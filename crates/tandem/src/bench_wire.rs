//! `tandem bench api --content-type protobuf`: what the wire format costs. The same create load
//! and LIST run four times in one process, each on a fresh server: twice in JSON, twice in
//! protobuf (request bodies and responses), with the client decoding every create's answer and
//! every LIST in full (serde into k8s-openapi types for JSON, prost into k8s-pb types for
//! protobuf), as client-go's typed clients do. Each
//! client encodes its requests with its format's own encoder (serde for JSON, prost-generated
//! messages for protobuf), so the client's share of the process's CPU is what a real client's
//! would be.
//!
//! `tandem bench api --custom-resource CRD.yaml` instead compares creates/s of a custom
//! resource of that CRD (its schema pruned, defaulted and validated on every create) with
//! creates/s of ConfigMaps, in JSON.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::BodyExt;
use prost::Message;
use serde_json::{Value, json};

use crate::bench::{ms, percentile};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const JSON: &str = "application/json";

/// One wire format's figures.
struct Figures {
    creates: usize,
    elapsed: Duration,
    /// The process's CPU time (server and clients) over the creates.
    create_cpu: Duration,
    latencies: Vec<Duration>,
    lists: Vec<Duration>,
    listed: usize,
    list_bytes: usize,
}

/// Sends one request and returns the status and body.
async fn send(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let resp = client.send(req.map(Into::into)).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

fn bench_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    })
}

/// [`bench_pod`] as a protobuf client sends it: built as the generated message and encoded
/// by prost (client-go marshals its typed objects with generated code likewise), in the
/// `runtime.Unknown` envelope after the magic number.
fn bench_pod_protobuf(name: &str) -> Vec<u8> {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
    let quantity = |q: &str| Quantity {
        string: Some(q.to_string()),
    };
    let pod = core::Pod {
        metadata: Some(ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".to_string()),
            labels: [("app".to_string(), "bench".to_string())].into(),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".to_string()),
                image: Some("tandem.local/busybox:1".to_string()),
                resources: Some(core::ResourceRequirements {
                    requests: [
                        ("cpu".to_string(), quantity("100m")),
                        ("memory".to_string(), quantity("64Mi")),
                    ]
                    .into(),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let envelope = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
        }),
        raw: Some(pod.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(envelope.encode_to_vec());
    body
}

/// The name of the pod a create answered with, decoded into the format's typed object as
/// client-go's `Create` returns it (serde into k8s-openapi for JSON, prost into k8s-pb for
/// protobuf).
fn decode_pod_name(media: &str, body: &[u8]) -> anyhow::Result<String> {
    let metadata_name = match media {
        PROTOBUF => {
            let raw = body
                .strip_prefix(b"k8s\0")
                .context("a protobuf answer starts with the magic number")?;
            let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(raw)?;
            let pod =
                k8s_pb::api::core::v1::Pod::decode(unknown.raw.unwrap_or_default().as_slice())?;
            pod.metadata.and_then(|m| m.name)
        }
        _ => {
            serde_json::from_slice::<k8s_openapi::api::core::v1::Pod>(body)?
                .metadata
                .name
        }
    };
    metadata_name.context("the created pod has no name")
}

/// Creates `pods` pods from `clients` concurrent clients and lists them 5 times, in `media`.
async fn run(pods: usize, clients: usize, media: &'static str) -> anyhow::Result<Figures> {
    let (_dir, _server, client) = crate::bench::bench_server().await?;
    let started = Instant::now();
    let cpu_before = own_cpu();
    let per_client = pods.div_ceil(clients);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = client.clone();
        let range = (c * per_client)..((c + 1) * per_client).min(pods);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(range.len());
            for i in range {
                let name = format!("bench-{i:06}");
                let body = match media {
                    PROTOBUF => bench_pod_protobuf(&name),
                    _ => serde_json::to_vec(&bench_pod(&name))?,
                };
                let req = http::Request::post("/api/v1/namespaces/default/pods")
                    .header("Content-Type", media)
                    .header("Accept", media)
                    .body(body)?;
                let t = Instant::now();
                let (status, body) = send(&client, req).await?;
                if status != http::StatusCode::CREATED {
                    bail!("create answered {status}");
                }
                let created = decode_pod_name(media, &body)?;
                lat.push(t.elapsed());
                if created != name {
                    bail!("the create answered pod {created:?}, not {name:?}");
                }
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let elapsed = started.elapsed();
    let create_cpu = own_cpu().saturating_sub(cpu_before);
    latencies.sort();
    let mut lists = Vec::new();
    let (mut listed, mut list_bytes) = (0, 0);
    for _ in 0..5 {
        let req = http::Request::get("/api/v1/namespaces/default/pods")
            .header("Accept", media)
            .body(Vec::new())?;
        let t = Instant::now();
        let (status, body) = send(&client, req).await?;
        if status != http::StatusCode::OK {
            bail!("list answered {status}");
        }
        listed = match media {
            PROTOBUF => {
                let raw = body
                    .strip_prefix(b"k8s\0")
                    .context("a protobuf list starts with the magic number")?;
                let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(raw)?;
                let list = k8s_pb::api::core::v1::PodList::decode(
                    unknown.raw.unwrap_or_default().as_slice(),
                )?;
                list.items.len()
            }
            _ => {
                serde_json::from_slice::<k8s_openapi::List<k8s_openapi::api::core::v1::Pod>>(&body)?
                    .items
                    .len()
            }
        };
        lists.push(t.elapsed());
        list_bytes = body.len();
    }
    lists.sort();
    Ok(Figures {
        creates: latencies.len(),
        elapsed,
        create_cpu,
        latencies,
        lists,
        listed,
        list_bytes,
    })
}

/// This process's user and system CPU time so far: the server and the clients share it, so
/// per create it is what one create costs both ends, steadier than creates/s on a busy machine.
fn own_cpu() -> Duration {
    crate::bench_startup::cpu_time(std::path::Path::new("/proc/self/stat"), false)
        .unwrap_or_default()
}

fn cpu_per_create(f: &Figures) -> f64 {
    f.create_cpu.as_secs_f64() * 1e6 / f.creates.max(1) as f64
}

/// JSON and protobuf side by side, in the order JSON, protobuf, protobuf, JSON: whichever runs
/// first in a process pays the allocator's and the page cache's warm-up, so each format runs
/// once early and once late, and the summary is the mean of its two runs.
pub async fn compare(pods: usize, clients: usize) -> anyhow::Result<()> {
    println!(
        "tandem bench api --content-type protobuf: {pods} pods from {clients} clients, JSON, protobuf, protobuf, JSON, each on a fresh server (durable SQLite store, client in this process)"
    );
    let mut runs = Vec::new();
    for (label, media) in [
        ("JSON", JSON),
        ("protobuf", PROTOBUF),
        ("protobuf", PROTOBUF),
        ("JSON", JSON),
    ] {
        let f = run(pods, clients, media).await?;
        println!(
            "run {}: {label:9} {:.0} creates/s, {:.0} µs of CPU per create",
            runs.len() + 1,
            f.creates as f64 / f.elapsed.as_secs_f64(),
            cpu_per_create(&f)
        );
        runs.push((label, f));
    }
    println!();
    for label in ["JSON", "protobuf"] {
        let mine: Vec<&Figures> = runs
            .iter()
            .filter(|(l, _)| *l == label)
            .map(|(_, f)| f)
            .collect();
        let rate = mine
            .iter()
            .map(|f| f.creates as f64 / f.elapsed.as_secs_f64())
            .sum::<f64>()
            / mine.len().max(1) as f64;
        let mut latencies: Vec<Duration> = mine
            .iter()
            .flat_map(|f| f.latencies.iter().copied())
            .collect();
        latencies.sort();
        let mut lists: Vec<Duration> = mine.iter().flat_map(|f| f.lists.iter().copied()).collect();
        lists.sort();
        let (listed, list_bytes) = mine.first().map_or((0, 0), |f| (f.listed, f.list_bytes));
        let cpu = mine.iter().map(|f| cpu_per_create(f)).sum::<f64>() / mine.len().max(1) as f64;
        println!(
            "{label:9} creates: {rate:.0}/s (mean of {} runs)  p50 {}  p99 {}  CPU {cpu:.0} µs per create",
            mine.len(),
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.99)),
        );
        println!(
            "{label:9} LIST of {listed} pods ({} KiB): median {}  best {} ({} runs, full decode in the client)",
            list_bytes / 1024,
            ms(percentile(&lists, 0.5)),
            lists.first().map_or_else(|| "-".to_string(), |d| ms(*d)),
            lists.len(),
        );
    }
    Ok(())
}

/// The first object of a YAML file of one document.
fn read_yaml(path: &PathBuf) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(serde_yaml::from_str(&text)?)
}

/// Creates `count` objects of the collection at `path` from `clients` clients; creates/s.
async fn create_rate(
    client: &kube::Client,
    path: &str,
    count: usize,
    clients: usize,
    make: impl Fn(usize) -> Value + Send + Sync + Clone + 'static,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let started = Instant::now();
    let per_client = count.div_ceil(clients);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = client.clone();
        let path = path.to_string();
        let make = make.clone();
        let range = (c * per_client)..((c + 1) * per_client).min(count);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for i in range {
                let req = http::Request::post(path.as_str())
                    .header("Content-Type", JSON)
                    .body(serde_json::to_vec(&make(i))?)?;
                let t = Instant::now();
                let (status, body) = send(&client, req).await?;
                lat.push(t.elapsed());
                if status != http::StatusCode::CREATED {
                    bail!(
                        "create answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    );
                }
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    latencies.sort();
    Ok((count as f64 / started.elapsed().as_secs_f64(), latencies))
}

/// Creates/s of a custom resource with `crd_path`'s schema against ConfigMaps.
pub async fn custom_resource(
    crd_path: PathBuf,
    count: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let crd = read_yaml(&crd_path)?;
    let size = std::fs::metadata(&crd_path)?.len();
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .context("the CRD names a group")?
        .to_string();
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .context("the CRD names a plural")?
        .to_string();
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .context("the CRD names a kind")?
        .to_string();
    let version = tandem_core::apiextensions::crd::storage_version(&crd)
        .context("the CRD has a storage version")?;
    println!(
        "tandem bench api --custom-resource {}: {count} {kind} objects (schema of {} KiB) vs {count} ConfigMaps, {clients} clients, JSON, durable SQLite store",
        crd_path.display(),
        size / 1024
    );
    let (_dir, _server, client) = crate::bench::bench_server().await?;
    let req = http::Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        .header("Content-Type", JSON)
        .body(serde_json::to_vec(&crd)?)?;
    let (status, body) = send(&client, req).await?;
    if status != http::StatusCode::CREATED {
        bail!("the CRD was refused: {}", String::from_utf8_lossy(&body));
    }
    let collection = format!("/apis/{group}/{version}/namespaces/default/{plural}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = http::Request::get(collection.as_str()).body(Vec::new())?;
        if send(&client, req).await?.0 == http::StatusCode::OK {
            break;
        }
        if Instant::now() > deadline {
            bail!("the CRD was not established within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A minimal valid object: cert-manager's Issuer with a self-signed spec; other CRDs get an
    // empty spec, which their schema must accept.
    let spec = if kind == "Issuer" || kind == "ClusterIssuer" {
        json!({"selfSigned": {}})
    } else {
        json!({})
    };
    let api_version = format!("{group}/{version}");
    let (custom_rate, custom_lat) = create_rate(&client, &collection, count, clients, {
        let (api_version, kind) = (api_version.clone(), kind.clone());
        move |i| json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("bench-{i:06}")}, "spec": spec})
    })
    .await?;
    let (cm_rate, cm_lat) = create_rate(
        &client,
        "/api/v1/namespaces/default/configmaps",
        count,
        clients,
        |i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("bench-{i:06}")}, "data": {"k": "v"}}),
    )
    .await?;
    println!();
    println!(
        "{kind:12} creates: {custom_rate:.0}/s  p50 {}  p99 {}",
        ms(percentile(&custom_lat, 0.5)),
        ms(percentile(&custom_lat, 0.99))
    );
    println!(
        "{:12} creates: {cm_rate:.0}/s  p50 {}  p99 {}",
        "ConfigMap",
        ms(percentile(&cm_lat, 0.5)),
        ms(percentile(&cm_lat, 0.99))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protobuf_client_sends_the_same_pod_as_the_json_client() {
        let decoded = tandem_apiserver::protobuf::decode(&bench_pod_protobuf("bench-000007"))
            .expect("the server decodes the client's body");
        assert_eq!(decoded, bench_pod("bench-000007"));
    }
}
