//! The proxy between a real hyper client and a tiny backend, through a front server whose only
//! job is to call [`forward`], as the API server and the agent do.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

use super::*;

type TestBody = BoxBody<Bytes, hyper::Error>;

fn full(text: &'static str) -> TestBody {
    Full::new(Bytes::from_static(text.as_bytes()))
        .map_err(|never| match never {})
        .boxed()
}

/// Serves `handler` over HTTP/1.1 with upgrades on an ephemeral loopback port.
async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<TestBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    addr
}

/// What the backend saw and controls the test holds.
#[derive(Default)]
struct Backend {
    /// `METHOD uri host` of every request.
    seen: Mutex<Vec<String>>,
    /// Request headers of the last upgrade request.
    upgrade_headers: Mutex<Option<HeaderMap>>,
    /// Released by the test once the first chunk of `/stream` went through the proxy.
    release_second_chunk: Notify,
    /// Signalled when the echo session ends (the proxy passed the client's close on).
    echo_ended: Notify,
}

async fn backend(state: Arc<Backend>, mut req: Request<Incoming>) -> Response<TestBody> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_string();
    state
        .seen
        .lock()
        .expect("lock")
        .push(format!("{} {} {host}", req.method(), req.uri()));
    match req.uri().path() {
        "/stream" => {
            let (tx, rx) = mpsc::channel(4);
            let state = state.clone();
            tokio::spawn(async move {
                let _ = tx.send(Bytes::from_static(b"first\n")).await;
                state.release_second_chunk.notified().await;
                let _ = tx.send(Bytes::from_static(b"second\n")).await;
            });
            Response::builder()
                .header("x-backend", "yes")
                .header(header::CONTENT_TYPE, "text/plain")
                .body(ChannelBody(rx).boxed())
                .expect("response")
        }
        "/echo" if is_upgrade_request(req.headers()) => {
            *state.upgrade_headers.lock().expect("lock") = Some(req.headers().clone());
            let protocol = req
                .headers()
                .get("sec-websocket-protocol")
                .cloned()
                .unwrap_or(HeaderValue::from_static("none"));
            let on_upgrade = hyper::upgrade::on(&mut req);
            let state = state.clone();
            tokio::spawn(async move {
                let Ok(upgraded) = on_upgrade.await else {
                    return;
                };
                let mut io = TokioIo::new(upgraded);
                let mut buf = [0u8; 64];
                loop {
                    match io.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if io.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = io.shutdown().await;
                state.echo_ended.notify_one();
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(header::CONNECTION, "Upgrade")
                .header(header::UPGRADE, "tandem-echo")
                .header("sec-websocket-protocol", protocol)
                .header("x-stream-protocol-version", "v4.channel.k8s.io")
                .body(full(""))
                .expect("response")
        }
        "/forbidden" => Response::builder()
            .status(StatusCode::FORBIDDEN)
            .header(header::CONTENT_TYPE, "application/json")
            .body(full(r#"{"kind":"Status","code":403,"message":"v5 only"}"#))
            .expect("response"),
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(full("no such path"))
            .expect("response"),
    }
}

/// A response body fed chunk by chunk through a channel, so a test decides when each arrives.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(Frame::data(b))))
    }
}

/// A front server that forwards every request to `backend`, keeping path and query, and
/// answers 502 when forwarding fails.
async fn front(backend: SocketAddr) -> SocketAddr {
    front_with(Forwarder::default(), format!("http://{backend}")).await
}

/// [`front`] with a given forwarder and backend base URL (`https://…` for a TLS backend).
async fn front_with(forwarder: Forwarder, base: String) -> SocketAddr {
    serve(move |req: Request<Incoming>| {
        let (forwarder, base) = (forwarder.clone(), base.clone());
        async move {
            let target = format!(
                "{base}{}",
                req.uri()
                    .path_and_query()
                    .map(|p| p.as_str())
                    .unwrap_or("/")
            );
            match forwarder.forward(req, &target).await {
                Ok(resp) => resp.map(|b| b.boxed()),
                Err(e) => Response::builder()
                    .status(StatusCode::BAD_GATEWAY)
                    .body(
                        Full::new(Bytes::from(e.to_string()))
                            .map_err(|never| match never {})
                            .boxed(),
                    )
                    .expect("response"),
            }
        }
    })
    .await
}

/// A plain HTTP/1.1 client connection (with upgrades) to `addr`.
async fn client(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn.with_upgrades());
    sender
}

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn plain_get_is_forwarded_with_its_query_and_streams_the_body() {
    let state = Arc::new(Backend::default());
    let st = state.clone();
    let backend_addr = serve(move |req| backend(st.clone(), req)).await;
    let front_addr = front(backend_addr).await;

    let mut sender = client(front_addr).await;
    let req = Request::get("/stream?follow=true&tailLines=2")
        .header(header::HOST, "front.example")
        .header("x-client", "kept")
        .body(Empty::new())
        .expect("request");
    let resp = within("response", sender.send_request(req))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-backend"], "yes");

    // The first chunk arrives while the backend still holds the second: the body streams.
    let mut body = resp.into_body();
    let first = within("first chunk", body.frame())
        .await
        .expect("a frame")
        .expect("no error");
    assert_eq!(first.into_data().expect("data"), "first\n");
    state.release_second_chunk.notify_one();
    let rest = within("rest of body", body.collect())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(rest, "second\n");

    let seen = state.seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [format!(
            "GET /stream?follow=true&tailLines=2 127.0.0.1:{}",
            backend_addr.port()
        )]
    );
}

#[tokio::test]
async fn upgrade_returns_the_backends_101_and_splices_bytes_both_ways() {
    let state = Arc::new(Backend::default());
    let st = state.clone();
    let backend_addr = serve(move |req| backend(st.clone(), req)).await;
    let front_addr = front(backend_addr).await;

    let mut sender = client(front_addr).await;
    let req = Request::post("/echo?command=sh")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .header("sec-websocket-protocol", "v4.channel.k8s.io")
        .header("keep-alive", "timeout=5")
        .body(Empty::new())
        .expect("request");
    let resp = within("101", sender.send_request(req))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(resp.headers()[header::UPGRADE], "tandem-echo");
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "v4.channel.k8s.io"
    );
    assert_eq!(
        resp.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );

    let seen = state
        .upgrade_headers
        .lock()
        .expect("lock")
        .clone()
        .expect("backend saw the upgrade");
    assert_eq!(seen[header::CONNECTION], "Upgrade");
    assert_eq!(seen[header::UPGRADE], "SPDY/3.1");
    assert_eq!(seen["x-stream-protocol-version"], "v4.channel.k8s.io");
    assert!(seen.get("keep-alive").is_none(), "hop-by-hop header leaked");

    let upgraded = within("client upgrade", hyper::upgrade::on(resp))
        .await
        .expect("upgraded");
    let mut io = TokioIo::new(upgraded);
    io.write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 4];
    within("echo", io.read_exact(&mut buf)).await.expect("read");
    assert_eq!(&buf, b"ping");
    io.write_all(b"second message").await.expect("write");
    let mut buf = [0u8; 14];
    within("second echo", io.read_exact(&mut buf))
        .await
        .expect("read");
    assert_eq!(&buf, b"second message");

    // Closing the client's side ends the backend's session, which closes the client's read side.
    io.shutdown().await.expect("shutdown");
    within("backend session end", state.echo_ended.notified()).await;
    let mut rest = Vec::new();
    within("end of stream", io.read_to_end(&mut rest))
        .await
        .expect("read to end");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn backend_error_answer_to_an_upgrade_is_passed_through() {
    let state = Arc::new(Backend::default());
    let st = state.clone();
    let backend_addr = serve(move |req| backend(st.clone(), req)).await;
    let front_addr = front(backend_addr).await;

    let mut sender = client(front_addr).await;
    let req = Request::get("/forbidden")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header("sec-websocket-protocol", "v5.channel.k8s.io")
        .body(Empty::new())
        .expect("request");
    let resp = within("response", sender.send_request(req))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, r#"{"kind":"Status","code":403,"message":"v5 only"}"#);
}

#[tokio::test]
async fn unreachable_backend_is_a_dial_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let req = Request::get("/")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let err = forward(req, &format!("http://{addr}/containerLogs/ns/p/c"))
        .await
        .expect_err("nothing listens there");
    assert!(err.is_dial(), "{err:?}");
    assert_eq!(err.to_string(), format!("dial tcp {addr}"));
    assert!(StdError::source(&err).is_some());
}

#[tokio::test]
async fn only_http_and_https_urls_are_targets_and_https_needs_tls() {
    for target in ["ftp://127.0.0.1:1/x", "/relative", "http:///nohost"] {
        let req = Request::get("/")
            .body(Empty::<Bytes>::new())
            .expect("request");
        let err = forward(req, target).await.expect_err(target);
        assert!(
            matches!(err, ProxyError::InvalidTarget(_)),
            "{target}: {err:?}"
        );
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let req = Request::get("/")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let err = forward(req, &format!("https://{addr}/x"))
        .await
        .expect_err("no TLS configuration");
    assert!(matches!(err, ProxyError::TlsNotConfigured(_)), "{err:?}");
}

/// A CA, and a serving and a client certificate it signed, for the TLS tests.
struct TestPki {
    ca: rustls::pki_types::CertificateDer<'static>,
    server: (
        rustls::pki_types::CertificateDer<'static>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    client: (
        rustls::pki_types::CertificateDer<'static>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
}

impl TestPki {
    fn new() -> TestPki {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let issuer = rcgen::Issuer::new(ca, &ca_key);
        let leaf = |sans: Vec<String>, purpose| {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params = rcgen::CertificateParams::new(sans).expect("params");
            params.extended_key_usages = vec![purpose];
            let cert = params.signed_by(&key, &issuer).expect("sign");
            let key = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
            (cert.der().clone(), key.into())
        };
        TestPki {
            server: leaf(
                vec!["127.0.0.1".into()],
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            ),
            client: leaf(Vec::new(), rcgen::ExtendedKeyUsagePurpose::ClientAuth),
            ca: ca_cert.der().clone(),
        }
    }

    fn roots(&self) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("CA");
        Arc::new(roots)
    }

    /// A server configuration that requires a client certificate this CA signed.
    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots(),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.server.0.clone()], self.server.1.clone_key())
            .expect("server config");
        Arc::new(config)
    }

    /// A client configuration that trusts `roots` and presents this PKI's client certificate.
    fn client_config(&self, roots: Arc<rustls::RootCertStore>) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![self.client.0.clone()], self.client.1.clone_key())
            .expect("client config");
        Arc::new(config)
    }
}

/// Serves `handler` over TLS with `config`, HTTP/1.1 with upgrades.
async fn serve_tls<F, Fut>(config: Arc<rustls::ServerConfig>, handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<TestBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (handler, acceptor) = (handler.clone(), acceptor.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_backend_gets_requests_and_upgrades_inside_tls_with_the_client_certificate() {
    let pki = TestPki::new();
    let state = Arc::new(Backend::default());
    let st = state.clone();
    let backend_addr = serve_tls(pki.server_config(), move |req| backend(st.clone(), req)).await;
    let forwarder = Forwarder::new().with_tls(pki.client_config(pki.roots()));
    let front_addr = front_with(forwarder, format!("https://{backend_addr}")).await;

    let mut sender = client(front_addr).await;
    let req = Request::get("/forbidden")
        .body(Empty::new())
        .expect("request");
    let resp = within("response", sender.send_request(req))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);

    let mut sender = client(front_addr).await;
    let req = Request::post("/echo")
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "SPDY/3.1")
        .body(Empty::new())
        .expect("request");
    let resp = within("101", sender.send_request(req))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let upgraded = within("client upgrade", hyper::upgrade::on(resp))
        .await
        .expect("upgraded");
    let mut io = TokioIo::new(upgraded);
    io.write_all(b"through tls").await.expect("write");
    let mut buf = [0u8; 11];
    within("echo", io.read_exact(&mut buf)).await.expect("read");
    assert_eq!(&buf, b"through tls");
    assert_eq!(state.seen.lock().expect("lock").len(), 2);
}

#[tokio::test]
async fn an_https_backend_the_client_configuration_does_not_trust_is_a_dial_error() {
    let pki = TestPki::new();
    let backend_addr = serve_tls(pki.server_config(), |_req| async {
        Response::new(full(""))
    })
    .await;
    let stranger = TestPki::new();
    let forwarder = Forwarder::new().with_tls(pki.client_config(stranger.roots()));
    let req = Request::get("/")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let err = forwarder
        .forward(req, &format!("https://{backend_addr}/x"))
        .await
        .expect_err("untrusted server certificate");
    assert!(matches!(err, ProxyError::Tls { .. }), "{err:?}");
    assert!(err.is_dial());
    assert_eq!(
        err.to_string(),
        format!("tls handshake with {backend_addr}")
    );
}

#[test]
fn hop_by_hop_headers_are_dropped_and_upgrade_kept_only_for_upgrades() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONNECTION,
        HeaderValue::from_static("Upgrade, X-Private"),
    );
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert("x-private", HeaderValue::from_static("1"));
    headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    headers.insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    headers.insert("sec-websocket-key", HeaderValue::from_static("abc"));

    let mut upgrade = headers.clone();
    strip_hop_by_hop(&mut upgrade, true);
    assert_eq!(upgrade[header::CONNECTION], "Upgrade");
    assert_eq!(upgrade[header::UPGRADE], "websocket");
    assert_eq!(upgrade["sec-websocket-key"], "abc");
    for gone in ["x-private", "keep-alive", "transfer-encoding"] {
        assert!(upgrade.get(gone).is_none(), "{gone} kept");
    }

    let mut plain = headers;
    strip_hop_by_hop(&mut plain, false);
    for gone in [
        "connection",
        "upgrade",
        "x-private",
        "keep-alive",
        "transfer-encoding",
    ] {
        assert!(plain.get(gone).is_none(), "{gone} kept");
    }
    assert_eq!(plain["sec-websocket-key"], "abc");
}

#[test]
fn upgrade_requests_are_recognised_like_upstream() {
    let mut headers = HeaderMap::new();
    assert!(!is_upgrade_request(&headers));
    headers.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, UPGRADE"),
    );
    assert!(is_upgrade_request(&headers));
}
