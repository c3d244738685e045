#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]
//! `pods/log`, `pods/exec` and `pods/portforward` go through the API server to the node agent of
//! the pod's node, here a fake agent on loopback that, like tandem's, serves TLS only to client
//! certificates of the cluster CA: logs with kube-rs, upgrades with a raw TLS HTTP/1.1 client
//! offering only `http/1.1` in ALPN, as kubectl's SPDY dialer does.

#[path = "common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{AsyncBufReadExt, TryStreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, LogParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::{Value, json};
use tandem_apiserver::node_proxy::kubelet_client::KUBELET_CLIENT_CN;
use tandem_apiserver::pki::subject_identity;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

use common::{TestServer, expect_status, from_json, raw, within};

type AgentBody = BoxBody<Bytes, hyper::Error>;

/// A request the fake agent received.
#[derive(Debug, Clone)]
struct Seen {
    path_and_query: String,
    authorization: bool,
    /// The subject CN of the client certificate the request came with.
    user: String,
}

/// A node agent that serves `/containerLogs` (five lines per container, honouring `tailLines`,
/// and with `follow` a sixth line once the test releases it), `/exec` and `/portForward` (101 and
/// an echo), and JSON `Status` errors for the pods named `gone` and `emulated`. It speaks TLS
/// with a self-signed certificate and requires a client certificate signed by the CA it is
/// given.
struct FakeAgent {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
}

/// The fake agent's TLS: a self-signed serving certificate for 127.0.0.1, client certificates
/// of `client_ca_pem` required.
fn agent_tls(client_ca_pem: &str) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let serving = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = PrivatePkcs8KeyDer::from(serving.signing_key.serialize_der());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![serving.cert.der().clone()], key.into())
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

impl FakeAgent {
    /// Starts an agent that trusts client certificates of `client_ca_pem`.
    async fn start(client_ca_pem: &str) -> FakeAgent {
        let acceptor = tokio_rustls::TlsAcceptor::from(agent_tls(client_ca_pem));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(Notify::new());
        let (s, r) = (seen.clone(), release.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (s, r, acceptor) = (s.clone(), r.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let user = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| subject_identity(chain.first()?))
                        .map(|(cn, _)| cn)
                        .unwrap_or_default();
                    let service = hyper::service::service_fn(move |req| {
                        let (s, r, user) = (s.clone(), r.clone(), user.clone());
                        async move { Ok::<_, Infallible>(agent(req, s, r, user).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeAgent {
            addr,
            seen,
            release,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A response body fed through a channel, so the agent decides when each chunk is written.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

fn text(code: u16, content_type: &'static str, body: String) -> Response<AgentBody> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)).map_err(|n| match n {}).boxed())
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Response<AgentBody> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    text(code, "application/json", body.to_string())
}

async fn agent(
    mut req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
    user: String,
) -> Response<AgentBody> {
    let path_and_query = req.uri().path_and_query().unwrap().to_string();
    seen.lock().unwrap().push(Seen {
        path_and_query,
        authorization: req.headers().contains_key(header::AUTHORIZATION),
        user,
    });
    let path: Vec<String> = req.uri().path().split('/').map(str::to_string).collect();
    let query = req.uri().query().unwrap_or_default().to_string();
    let param = |key: &str| {
        query
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    match path
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["", "containerLogs", _, "gone", _] => status(
            404,
            "NotFound",
            "pod default/gone is not running on this node",
        ),
        ["", "containerLogs", _, "plain-error", _] => {
            text(500, "text/plain", "runtime exploded".into())
        }
        ["", "containerLogs", _, _, container] => {
            let lines: Vec<String> = ["one", "two", "three", "four", "five"]
                .iter()
                .map(|l| format!("{container} {l}\n"))
                .collect();
            let tail = param("tailLines")
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(lines.len())
                .min(lines.len());
            let mut lines = lines[lines.len() - tail..].to_vec();
            let follow = param("follow").as_deref() == Some("true");
            let last = format!("{container} six\n");
            let (tx, rx) = mpsc::channel(8);
            tokio::spawn(async move {
                for line in lines.drain(..) {
                    let _ = tx.send(Bytes::from(line)).await;
                }
                if follow {
                    release.notified().await;
                    let _ = tx.send(Bytes::from(last)).await;
                }
            });
            Response::builder()
                .header(header::CONTENT_TYPE, "text/plain")
                .body(ChannelBody(rx).boxed())
                .unwrap()
        }
        ["", "exec", _, "emulated", _] => status(
            400,
            "BadRequest",
            "node runs the emulated runtime: containers have no processes to exec into",
        ),
        ["", "exec" | "attach", _, _, _] | ["", "portForward", _, _] => {
            let protocol = req
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .map(|v| v.trim().to_string())
                .unwrap_or_default();
            let upgrade = req.headers().get(header::UPGRADE).cloned();
            let on_upgrade = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                let Ok(upgraded) = on_upgrade.await else {
                    return;
                };
                let mut io = TokioIo::new(upgraded);
                let mut buf = [0u8; 256];
                while let Ok(n) = io.read(&mut buf).await {
                    if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            let mut resp = Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "Upgrade")
                .header(
                    header::UPGRADE,
                    upgrade.unwrap_or(HeaderValue::from_static("websocket")),
                );
            if !protocol.is_empty() {
                resp = resp.header("sec-websocket-protocol", protocol);
            }
            resp.body(Full::new(Bytes::new()).map_err(|n| match n {}).boxed())
                .unwrap()
        }
        _ => status(404, "NotFound", "no such path on the agent"),
    }
}

/// Registers a node whose agent listens at `addr`, as tandem's agent reports itself.
async fn node(s: &TestServer, name: &str, addr: SocketAddr) {
    let node: Node = from_json(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "does-not-resolve.invalid"},
                {"type": "InternalIP", "address": addr.ip().to_string()},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": addr.port()}},
        }
    }));
    Api::<Node>::all(s.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

/// Creates a pod in `default` with the given containers, bound to `node` if any.
async fn pod(s: &TestServer, name: &str, node: Option<&str>, spec: Value) {
    let mut spec = spec;
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    let pod: Pod = from_json(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec
    }));
    Api::<Pod>::namespaced(s.client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
}

fn one_container() -> Value {
    json!({"containers": [{"name": "app", "image": "busybox"}]})
}

/// A server, a fake agent and a node `node-a` served by it.
async fn cluster() -> (TestServer, FakeAgent) {
    let s = common::start().await;
    let agent = FakeAgent::start(&s.server.pki.ca_pem).await;
    node(&s, "node-a", agent.addr).await;
    (s, agent)
}

/// A response read off a raw connection: status code, head, and body (decoded when chunked).
struct RawReply {
    code: u16,
    head: String,
    body: Vec<u8>,
}

impl RawReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Opens a TLS connection to the API server offering only `http/1.1`, sends
/// `method path` as an upgrade request with the admin token and `headers`, and reads the
/// response head. A non-101 response's body is read too; after a 101 the stream is returned for
/// the upgraded protocol.
async fn upgrade(
    s: &TestServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (RawReply, impl AsyncRead + AsyncWrite + Unpin) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(s.server.pki.ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(s.server.local_addr).await.unwrap();
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));

    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\n",
        s.server.local_addr,
        s.server.pki.admin_token()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();

    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 1024];
        let n = within(10, "response head", stream.read(&mut chunk))
            .await
            .unwrap();
        assert!(n > 0, "connection closed before the response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let code = head[9..12].parse().unwrap();
    let mut reply = RawReply {
        code,
        head,
        body: buf[head_end..].to_vec(),
    };
    if code != 101 {
        read_body(&mut reply, &mut stream).await;
    }
    (reply, stream)
}

/// Reads more bytes of a response into `buf`.
async fn read_more(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 1024];
    let n = within(10, "response body", stream.read(&mut chunk))
        .await
        .unwrap();
    assert!(n > 0, "connection closed inside the body");
    buf.extend_from_slice(&chunk[..n]);
}

/// Reads the rest of a non-101 response body: by `Content-Length`, else chunked.
async fn read_body(reply: &mut RawReply, stream: &mut (impl AsyncRead + Unpin)) {
    if let Some(len) = reply.header("content-length") {
        let len: usize = len.parse().unwrap();
        while reply.body.len() < len {
            read_more(stream, &mut reply.body).await;
        }
        return;
    }
    assert_eq!(reply.header("transfer-encoding"), Some("chunked"));
    while !reply.body.windows(5).any(|w| w == b"0\r\n\r\n") {
        read_more(stream, &mut reply.body).await;
    }
    let mut decoded = Vec::new();
    let mut rest = &reply.body[..];
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        if size == 0 {
            break;
        }
        decoded.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        rest = &rest[line_end + 2 + size + 2..];
    }
    reply.body = decoded;
}

fn body_json(reply: &RawReply) -> Value {
    serde_json::from_slice(&reply.body).unwrap()
}

#[tokio::test]
async fn logs_come_from_the_nodes_agent_with_the_query_options() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");

    let lp = LogParams {
        tail_lines: Some(2),
        timestamps: true,
        ..LogParams::default()
    };
    let logs = within(10, "logs", pods.logs("web", &lp)).await.unwrap();
    assert_eq!(logs, "app four\napp five\n");
    let seen = agent.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path_and_query,
        "/containerLogs/default/web/app?tailLines=2&timestamps=true"
    );
    assert!(
        !seen[0].authorization,
        "the client's credentials reached the agent"
    );
    assert_eq!(seen[0].user, KUBELET_CLIENT_CN);

    let all = pods.logs("web", &LogParams::default()).await.unwrap();
    assert_eq!(all.lines().count(), 5);
}

#[tokio::test]
async fn log_stream_delivers_lines_while_the_agent_is_still_writing() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");

    let lp = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let mut lines = within(10, "log stream", pods.log_stream("web", &lp))
        .await
        .unwrap()
        .lines();
    for expected in ["one", "two", "three", "four", "five"] {
        let line = within(10, "a log line", lines.try_next()).await.unwrap();
        assert_eq!(line.as_deref(), Some(format!("app {expected}").as_str()));
    }
    // The agent holds its sixth line until now: the lines above came through as they were
    // written, not when the agent's response ended.
    agent.release.notify_one();
    let line = within(10, "the held line", lines.try_next()).await.unwrap();
    assert_eq!(line.as_deref(), Some("app six"));
    let end = within(10, "end of stream", lines.try_next()).await.unwrap();
    assert_eq!(end, None);
    assert_eq!(
        agent.seen()[0].path_and_query,
        "/containerLogs/default/web/app?follow=true"
    );
}

#[tokio::test]
async fn container_is_required_when_the_pod_has_several_and_must_exist() {
    let (s, agent) = cluster().await;
    pod(
        &s,
        "multi",
        Some("node-a"),
        json!({
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}],
        }),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");

    let status = expect_status(
        pods.logs("multi", &LogParams::default()).await,
        400,
        "BadRequest",
    );
    assert_eq!(
        status.message,
        "a container name must be specified for pod multi, choose one of: [setup a b]"
    );
    let lp = |c: &str| LogParams {
        container: Some(c.to_string()),
        ..LogParams::default()
    };
    let status = expect_status(pods.logs("multi", &lp("c")).await, 400, "BadRequest");
    assert_eq!(status.message, "container c is not valid for pod multi");
    assert!(agent.seen().is_empty());

    assert_eq!(
        pods.logs("multi", &lp("b")).await.unwrap().lines().count(),
        5
    );
    assert_eq!(
        pods.logs("multi", &lp("setup")).await.unwrap(),
        "setup one\nsetup two\nsetup three\nsetup four\nsetup five\n"
    );
}

#[tokio::test]
async fn log_options_are_validated_before_anything_else() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;
    let path = "/api/v1/namespaces/default/pods/web/log";

    let r = raw(&s.client, "GET", &format!("{path}?tailLines=-1"), None, &[]).await;
    assert_eq!((r.code, r.body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        r.body["message"],
        r#"PodLogOptions "web" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"#
    );
    assert_eq!(r.body["details"]["kind"], "PodLogOptions");
    assert_eq!(r.body["details"]["causes"][0]["field"], "tailLines");

    let r = raw(
        &s.client,
        "GET",
        &format!("{path}?limitBytes=ten"),
        None,
        &[],
    )
    .await;
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (400, Some("BadRequest"))
    );
    assert_eq!(
        r.body["message"],
        r#"strconv.ParseInt: parsing "ten": invalid syntax"#
    );

    let r = raw(&s.client, "POST", path, Some(b"{}".to_vec()), &[]).await;
    assert_eq!(r.code, 405);
    assert!(agent.seen().is_empty());
}

#[tokio::test]
async fn a_pod_without_a_node_has_no_logs_and_cannot_be_execed() {
    let (s, _agent) = cluster().await;
    pod(&s, "pending", None, one_container()).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");

    let r = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods/pending/log",
        None,
        &[],
    )
    .await;
    assert_eq!((r.code, r.text.as_str()), (204, ""));
    assert_eq!(
        pods.logs("pending", &LogParams::default()).await.unwrap(),
        ""
    );

    let (reply, _) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/pending/exec?command=ls&stdout=true",
        &[("Upgrade", "SPDY/3.1")],
    )
    .await;
    assert_eq!(reply.code, 400);
    assert_eq!(
        body_json(&reply)["message"],
        "pod pending does not have a host assigned"
    );
}

#[tokio::test]
async fn a_missing_node_is_not_found() {
    let (s, _agent) = cluster().await;
    pod(&s, "orphan", Some("ghost"), one_container()).await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        pods.logs("orphan", &LogParams::default()).await,
        404,
        "NotFound",
    );
    assert_eq!(status.message, r#"nodes "ghost" not found"#);
}

#[tokio::test]
async fn exec_upgrades_through_the_api_server_and_bytes_flow_both_ways() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;

    let (reply, mut stream) = upgrade(
        &s,
        "GET",
        "/api/v1/namespaces/default/pods/web/exec?command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&stderr=false&tty=false",
        &[
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
        ],
    )
    .await;
    assert_eq!(reply.code, 101, "{}", reply.head);
    assert_eq!(reply.header("upgrade"), Some("websocket"));
    assert_eq!(
        reply.header("sec-websocket-protocol"),
        Some("v4.channel.k8s.io")
    );
    assert!(reply.body.is_empty());

    stream.write_all(b"hello through the splice").await.unwrap();
    let mut echoed = [0u8; 24];
    within(10, "echo", stream.read_exact(&mut echoed))
        .await
        .unwrap();
    assert_eq!(&echoed, b"hello through the splice");

    let seen = agent.seen();
    assert_eq!(
        seen[0].path_and_query,
        "/exec/default/web/app?command=sh&command=-c&command=echo+hi&stdin=true&stdout=true"
    );
    assert!(
        !seen[0].authorization,
        "the client's credentials reached the agent"
    );
    assert_eq!(seen[0].user, KUBELET_CLIENT_CN);
}

#[tokio::test]
async fn portforward_names_its_ports_as_the_kubelet_reads_them_and_attach_resolves_the_container() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;

    let (reply, mut stream) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/web/portforward?ports=8080&ports=9090",
        &[
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "portforward.k8s.io"),
        ],
    )
    .await;
    assert_eq!(reply.code, 101, "{}", reply.head);
    assert_eq!(reply.header("upgrade"), Some("SPDY/3.1"));
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    within(10, "echo", stream.read_exact(&mut echoed))
        .await
        .unwrap();
    assert_eq!(&echoed, b"ping");

    let (reply, _) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/web/attach?stdin=1&stdout=1&tty=1",
        &[("Upgrade", "SPDY/3.1")],
    )
    .await;
    assert_eq!(reply.code, 101, "{}", reply.head);

    let paths: Vec<String> = agent.seen().into_iter().map(|s| s.path_and_query).collect();
    assert_eq!(
        paths,
        [
            // The API's `ports` become the kubelet's one `port` parameter (upstream `streamParams`).
            "/portForward/default/web?port=8080,9090",
            "/attach/default/web/app?stdin=true&stdout=true&tty=true",
        ]
    );
}

#[tokio::test]
async fn exec_needs_an_upgrade_and_a_command() {
    let (s, agent) = cluster().await;
    pod(&s, "web", Some("node-a"), one_container()).await;

    let r = raw(
        &s.client,
        "POST",
        "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true",
        None,
        &[],
    )
    .await;
    assert_eq!(
        (r.code, r.body["reason"].as_str()),
        (400, Some("BadRequest"))
    );
    assert_eq!(r.body["message"], "Upgrade request required");

    let (reply, _) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/web/exec?stdout=true",
        &[("Upgrade", "SPDY/3.1")],
    )
    .await;
    assert_eq!(reply.code, 400);
    assert_eq!(
        body_json(&reply)["message"],
        "you must specify at least one command for the container"
    );
    assert!(agent.seen().is_empty());
}

#[tokio::test]
async fn the_agents_error_status_passes_through_with_its_code() {
    let (s, agent) = cluster().await;
    pod(&s, "emulated", Some("node-a"), one_container()).await;
    pod(&s, "gone", Some("node-a"), one_container()).await;
    pod(&s, "plain-error", Some("node-a"), one_container()).await;

    // A refused upgrade comes back as the agent wrote it, so kubectl's websocket attempt fails
    // as an upgrade failure and it retries with SPDY.
    let (reply, _) = upgrade(
        &s,
        "GET",
        "/api/v1/namespaces/default/pods/emulated/exec?command=ls&stdout=true",
        &[
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
        ],
    )
    .await;
    assert_eq!(reply.code, 400, "{}", reply.head);
    let body = body_json(&reply);
    assert_eq!(
        (body["code"].as_u64(), body["message"].as_str()),
        (
            Some(400),
            Some("node runs the emulated runtime: containers have no processes to exec into")
        )
    );

    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        pods.logs("gone", &LogParams::default()).await,
        404,
        "NotFound",
    );
    assert_eq!(
        status.message,
        "pod default/gone is not running on this node"
    );

    // A body that is not a Status is wrapped as upstream's response checker does.
    let status = expect_status(
        pods.logs("plain-error", &LogParams::default()).await,
        500,
        "InternalError",
    );
    assert_eq!(status.message, "Internal error occurred: runtime exploded");
    assert_eq!(agent.seen().len(), 3);
}

#[tokio::test]
async fn an_unreachable_agent_is_a_server_error() {
    let s = common::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    node(&s, "node-down", closed).await;
    pod(&s, "lost", Some("node-down"), one_container()).await;

    let r = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods/lost/log",
        None,
        &[],
    )
    .await;
    assert_eq!(r.code, 500);
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "Get \"https://{closed}/containerLogs/default/lost/app\": dial tcp {closed}: "
        )),
        "{message}"
    );

    let (reply, _) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/lost/exec?command=ls&stdout=true",
        &[("Upgrade", "SPDY/3.1")],
    )
    .await;
    assert_eq!(reply.code, 500);
    let body = body_json(&reply);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("error dialing backend: dial tcp {closed}: ")),
        "{message}"
    );
}

#[tokio::test]
async fn an_agent_that_does_not_trust_the_cluster_ca_gets_no_request() {
    let s = common::start().await;
    let other_ca = rcgen::generate_simple_self_signed(vec!["other-ca".to_string()]).unwrap();
    let agent = FakeAgent::start(&other_ca.cert.pem()).await;
    node(&s, "node-b", agent.addr).await;
    pod(&s, "web", Some("node-b"), one_container()).await;

    let r = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods/web/log",
        None,
        &[],
    )
    .await;
    assert_eq!(r.code, 500, "{}", r.text);
    let (reply, _) = upgrade(
        &s,
        "POST",
        "/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=true",
        &[("Upgrade", "SPDY/3.1")],
    )
    .await;
    assert_eq!(reply.code, 500, "{}", reply.head);
    assert!(agent.seen().is_empty());
}
