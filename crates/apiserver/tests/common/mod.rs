//! Shared harness for the API server's integration tests: an in-process server on an ephemeral
//! port over a SQLite store in a temporary directory, and a `kube::Client` authenticated with the
//! admin kubeconfig the server writes.
//!
//! Each test binary includes this module with `mod common;`; not every binary uses every helper.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use http_body_util::BodyExt;
use kube::Client;
use kube::core::Status;
use serde_json::Value;
use tandem_apiserver::{ApiServer, Config};
use tandem_store::sqlite::{SqliteOptions, SqliteStore};
use tempfile::TempDir;

/// A running API server and a client for it. Dropping it stops the listener; the temporary data
/// directory lives as long as the value.
pub struct TestServer {
    pub client: Client,
    pub server: ApiServer,
    pub data_dir: PathBuf,
    _dir: Option<TempDir>,
}

/// Starts a server on a fresh temporary data directory.
pub async fn start() -> TestServer {
    let dir = tempfile::tempdir().expect("create temp dir");
    let (server, client) = start_at(dir.path()).await.expect("start API server");
    TestServer {
        client,
        server,
        data_dir: dir.path().to_path_buf(),
        _dir: Some(dir),
    }
}

/// Starts a server on `data_dir` (which may hold the state of an earlier server), returning the
/// server and an admin client. The caller keeps `data_dir` alive.
pub async fn start_at(data_dir: &Path) -> Result<(ApiServer, Client)> {
    let store = Arc::new(
        SqliteStore::open(&data_dir.join("state.db"), SqliteOptions::default())
            .context("open store")?,
    );
    let kubeconfig = data_dir.join("kubeconfig");
    let config = Config {
        data_dir: data_dir.to_path_buf(),
        bind: "127.0.0.1:0".parse()?,
        kubeconfig: Some(kubeconfig.clone()),
    };
    let server = ApiServer::start(config, store)
        .await
        .context("start server")?;
    let client = client_for(&kubeconfig).await?;
    Ok((server, client))
}

/// A `kube::Client` built from a kubeconfig file, as a controller would build one.
pub async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).context("read kubeconfig")?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .context("load kubeconfig")?;
    Ok(Client::try_from(config)?)
}

/// Runs `f` against a server on `data_dir` inside its own runtime on its own thread, then shuts
/// that runtime down, which ends every task holding the store so the data directory can be opened
/// again by a later server (the store holds an exclusive lock on its file while open).
pub fn with_server_then_stop<T, F, Fut>(data_dir: &Path, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    let data_dir = data_dir.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let out = rt.block_on(async move {
            let (server, client) = start_at(&data_dir).await.expect("start first server");
            let out = f(client).await;
            drop(server);
            out
        });
        rt.shutdown_timeout(std::time::Duration::from_secs(10));
        out
    })
    .join()
    .expect("first server thread")
}

/// The `Status` of a failed call; panics with the outcome if the call did not fail with an API
/// error.
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Asserts a call failed with `code` and `reason`, returning the `Status`.
#[track_caller]
pub fn expect_status<T: std::fmt::Debug>(
    result: kube::Result<T>,
    code: u16,
    reason: &str,
) -> Status {
    let status = api_error(result);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (code, reason),
        "unexpected status: {status:?}"
    );
    status
}

/// A raw HTTP exchange through the client's authenticated transport: status code, content type,
/// and body parsed as JSON (`Value::Null` when it is not JSON).
pub struct RawResponse {
    pub code: u16,
    pub content_type: String,
    pub body: Value,
    pub text: String,
}

/// Sends `method path` with an optional JSON body and extra headers.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    headers: &[(&str, &str)],
) -> RawResponse {
    let mut builder = http::Request::builder().method(method).uri(path);
    let has_body = body.is_some();
    if has_body
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        builder = builder.header("content-type", "application/json");
    }
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let req = builder
        .body(kube::client::Body::from(body.unwrap_or_default()))
        .expect("build request");
    let resp = client.send(req).await.expect("send request");
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("read body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    RawResponse {
        code,
        content_type,
        body,
        text,
    }
}

/// Parses a JSON value into a typed object, panicking on mismatch (test fixtures only).
pub fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture matches its type")
}

/// A minimal valid pod: one container `app` running `nginx`.
pub fn pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    from_json(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
    }))
}

/// A pod with labels.
pub fn labeled_pod(name: &str, labels: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Pod {
    let mut p = pod(name);
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    p
}

/// A config map with one data key.
pub fn config_map(name: &str, key: &str, value: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    from_json(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name },
        "data": { key: value }
    }))
}

/// A minimal valid deployment selecting `app=<name>`.
pub fn deployment(name: &str, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
    from_json(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
            }
        }
    }))
}

/// Creates a namespace and returns its name.
pub async fn namespace(client: &Client, name: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    let ns: Namespace = from_json(
        serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } }),
    );
    kube::Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .expect("create namespace");
    name.to_string()
}

/// Runs a future with a deadline so a missing event fails the test instead of hanging it.
pub async fn within<F: std::future::Future>(secs: u64, what: &str, f: F) -> F::Output {
    match tokio::time::timeout(std::time::Duration::from_secs(secs), f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {secs}s waiting for {what}"),
    }
}
