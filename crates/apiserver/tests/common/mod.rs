//! Shared helpers for the API server's integration tests: the in-process server, clients and
//! deadlines of `tandem-test-support` (re-exported), and what only these tests need: raw HTTP
//! exchanges, `Status` assertions and fixtures.
//!
//! Each test binary includes this module with `mod common;`; not every binary uses every helper
//! or re-export.
#![allow(dead_code, unused_imports)]

use http_body_util::BodyExt;
use kube::Client;
use kube::core::Status;
use serde_json::Value;
pub use tandem_test_support::{TestServer, client_for, start_at, with_server_then_stop, within};

/// Starts a server on a fresh temporary data directory.
pub async fn start() -> TestServer {
    TestServer::start().await.expect("start API server")
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
