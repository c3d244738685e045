//! The agent's streaming server, the kubelet's port 10250 counterpart: the API server forwards
//! `pods/log`, `pods/exec`, `pods/attach` and `pods/portforward` here. Paths are the kubelet's:
//!
//! - `GET /containerLogs/{namespace}/{pod}/{container}` with the `PodLogOptions` query;
//! - `/exec/{namespace}/{pod}/{container}?command=…&stdin=…&stdout=…&stderr=…&tty=…` (the kubelet's
//!   `input`/`output`/`error` spellings are accepted too);
//! - `/attach/{namespace}/{pod}/{container}` and `/portForward/{namespace}/{pod}`.
//!
//! Logs are read from the runtime's log files. Exec, attach and port-forward ask the runtime for
//! a single-use URL of its own streaming server (CRI `Exec`/`Attach`/`PortForward`) and splice
//! the client's upgraded connection to it, so the SPDY or websocket protocol is spoken end to end
//! between the client and containerd. Errors before an upgrade are JSON `Status` objects.
//!
//! Plain HTTP without authentication: the server binds to the node's own address, which `tandem
//! up` puts on loopback. Serving it on a shared network needs TLS and authorisation first.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::logs::{self, LogOptions, form_pairs};
use crate::runtime::{ContainerInfo, ContainerState, Runtime, RuntimeError, StreamRequest};

type Body = BoxBody<Bytes, std::io::Error>;

/// Serves the streaming endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, runtime: Arc<dyn Runtime>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "streaming server accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let runtime = runtime.clone();
                async move { Ok::<_, Infallible>(handle(req, runtime).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "streaming connection ended");
            }
        });
    }
}

/// Binds the streaming server's listener (`port` 0 picks a free one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

async fn handle(req: Request<Incoming>, runtime: Arc<dyn Runtime>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let parts: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(logs::percent_decode)
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let result = match parts.as_slice() {
        ["containerLogs", ns, pod, container] if req.method() == Method::GET => {
            container_logs(&runtime, ns, pod, container, &query).await
        }
        [kind @ ("exec" | "attach"), ns, pod, container] => {
            let kind = *kind;
            stream(req, &runtime, kind, ns, pod, container, &query).await
        }
        ["portForward", ns, pod] => port_forward(req, &runtime, ns, pod, &query).await,
        _ => Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no streaming endpoint at {path}"),
        )),
    };
    result.unwrap_or_else(Failure::into_response)
}

/// An error answered as a `Status`.
struct Failure {
    code: StatusCode,
    message: String,
}

impl Failure {
    fn new(code: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, message)
    }

    fn from_runtime(e: RuntimeError) -> Failure {
        let code = match e {
            RuntimeError::NotFound(_) => StatusCode::NOT_FOUND,
            RuntimeError::Emulated(_) | RuntimeError::Unsupported(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure::new(code, e.to_string())
    }

    fn into_response(self) -> Response<Body> {
        let reason = match self.code {
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::BAD_REQUEST => "BadRequest",
            _ => "InternalError",
        };
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": reason,
            "code": self.code.as_u16(),
        });
        let mut resp = Response::new(full(status.to_string().into_bytes()));
        *resp.status_mut() = self.code;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        resp
    }
}

fn full(data: Vec<u8>) -> Body {
    Full::new(Bytes::from(data))
        .map_err(|never| match never {})
        .boxed()
}

/// The newest sandbox of the pod `namespace/name` on this node.
fn sandbox_of(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
) -> Result<crate::runtime::SandboxInfo, Failure> {
    runtime
        .list_sandboxes()
        .into_iter()
        .filter(|s| s.namespace == namespace && s.name == pod)
        .max_by_key(|s| (s.ready, s.created_at))
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                format!("pod \"{pod}\" does not exist on this node"),
            )
        })
}

/// The current (or, with `previous`, the one before it) instance of a container.
fn container_of(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
) -> Result<ContainerInfo, Failure> {
    let sandbox = sandbox_of(runtime, namespace, pod)?;
    let mut instances: Vec<ContainerInfo> = runtime
        .list_containers(&sandbox.id)
        .into_iter()
        .filter(|c| c.name == container)
        .collect();
    instances.sort_by_key(|c| c.attempt);
    if previous {
        let current = instances.pop();
        return match (current, instances.pop()) {
            (Some(_), Some(prev)) => Ok(prev),
            _ => Err(Failure::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod}\" not found"
            ))),
        };
    }
    instances.pop().ok_or_else(|| {
        Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
        ))
    })
}

async fn container_logs(
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let opts =
        LogOptions::from_query(query, now).map_err(|e| Failure::bad_request(e.to_string()))?;
    let info = container_of(runtime, namespace, pod, container, opts.previous)?;
    let path = runtime.log_path(&info.id).map_err(Failure::from_runtime)?;
    if !path.exists() {
        return Err(Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" has no log yet"
        )));
    }
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    let id = info.id.clone();
    let rt = runtime.clone();
    let follow_running = move || {
        rt.container_status(&id)
            .is_ok_and(|c| !matches!(c.state, ContainerState::Exited { .. }))
    };
    tokio::spawn(async move {
        if let Err(e) = logs::stream_log(path, opts, tx, follow_running).await {
            tracing::debug!(error = %e, "log stream ended");
        }
    });
    let body = StreamBody::new(
        tokio_stream_from(rx).map(|chunk| Ok::<_, std::io::Error>(Frame::data(Bytes::from(chunk)))),
    );
    let mut resp = Response::new(BodyExt::boxed(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    Ok(resp)
}

/// An mpsc receiver as a stream.
fn tokio_stream_from(rx: mpsc::Receiver<Vec<u8>>) -> impl futures::Stream<Item = Vec<u8>> {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

/// The stream options of an exec/attach query; both the API's (`stdin`, `stdout`, `stderr`) and
/// the kubelet's (`input`, `output`, `error`) names are understood.
fn stream_request(query: &str) -> StreamRequest {
    let mut req = StreamRequest::default();
    for (k, v) in form_pairs(query) {
        let on = v.is_empty() || v == "true" || v == "1";
        match k.as_str() {
            "command" => req.command.push(v),
            "stdin" | "input" => req.stdin = on,
            "stdout" | "output" => req.stdout = on,
            "stderr" | "error" => req.stderr = on,
            "tty" => req.tty = on,
            _ => {}
        }
    }
    if req.tty {
        // A terminal merges stderr into stdout; CRI refuses both at once.
        req.stderr = false;
    }
    req
}

fn is_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE)
}

async fn stream(
    req: Request<Incoming>,
    runtime: &Arc<dyn Runtime>,
    kind: &str,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    if !is_upgrade(&req) {
        return Err(Failure::bad_request("Upgrade request required"));
    }
    let opts = stream_request(query);
    if !opts.stdin && !opts.stdout && !opts.stderr {
        return Err(Failure::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    if kind == "exec" && opts.command.is_empty() {
        return Err(Failure::bad_request(
            "you must specify at least one command",
        ));
    }
    let info = container_of(runtime, namespace, pod, container, false)?;
    if !matches!(info.state, ContainerState::Running) {
        return Err(Failure::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is not running"
        )));
    }
    let url = if kind == "exec" {
        runtime.exec_url(&info.id, &opts).await
    } else {
        runtime.attach_url(&info.id, &opts).await
    }
    .map_err(Failure::from_runtime)?;
    forward(req, &url, query).await
}

async fn port_forward(
    req: Request<Incoming>,
    runtime: &Arc<dyn Runtime>,
    namespace: &str,
    pod: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    if !is_upgrade(&req) {
        return Err(Failure::bad_request("Upgrade request required"));
    }
    let sandbox = sandbox_of(runtime, namespace, pod)?;
    let url = runtime
        .port_forward_url(&sandbox.id)
        .await
        .map_err(Failure::from_runtime)?;
    forward(req, &url, query).await
}

/// Splices the client's request to the runtime's streaming URL, keeping the client's query
/// (websocket port-forward names its ports there).
async fn forward(
    req: Request<Incoming>,
    url: &str,
    query: &str,
) -> Result<Response<Body>, Failure> {
    let target = if query.is_empty() || url.contains('?') {
        url.to_string()
    } else {
        format!("{url}?{query}")
    };
    tandem_netproxy::forward(req, &target)
        .await
        .map(|resp| resp.map(|b| b.map_err(std::io::Error::other).boxed()))
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error reaching the container runtime's streaming server: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_options_accept_both_spellings_and_tty_drops_stderr() {
        let r = stream_request("command=sh&command=-c&command=echo%20hi&input=1&output=1&error=1");
        assert_eq!(r.command, ["sh", "-c", "echo hi"]);
        assert!(r.stdin && r.stdout && r.stderr && !r.tty);
        let t = stream_request("command=sh&stdin=true&stdout=true&stderr=true&tty=true");
        assert!(t.tty && t.stdin && t.stdout && !t.stderr);
    }
}
