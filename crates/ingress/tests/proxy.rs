//! The reverse proxy on loopback without an API server: a routing table built from objects,
//! the HTTP and HTTPS listeners of `tandem_ingress::server`, and small backends in this process
//! that echo what they received. Checks what ingress-nginx / Traefik users rely on: forwarding
//! with the client's Host and X-Forwarded-* headers, round-robin over endpoints, 404, 503, 502
//! for a refused endpoint, and the certificate chosen by SNI.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::json;
use tandem_ingress::routing::RoutingTable;
use tandem_ingress::server::{self, Routes};
use tandem_ingress::tls::{self, SniResolver, TlsTable};
use tandem_netproxy::Forwarder;
use tandem_netproxy::tls::AnyServerCert;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A backend on `127.0.0.N:port` that answers `NAME` then each request header as `name: value`.
async fn backend(ip: [u8; 4], port: u16, name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::from((ip, port)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                    let mut text = format!("{name}\n");
                    for (k, v) in req.headers() {
                        text.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
                    }
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from(text),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    addr
}

fn objects(port: u16) -> (Vec<Ingress>, Vec<Service>, Vec<EndpointSlice>) {
    let ingress: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "site", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"rules": [
            {"host": "web.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
            {"host": "down.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "down", "port": {"number": 80}}}}]}},
            {"host": "refused.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "refused", "port": {"number": 80}}}}]}}
        ]}
    }))
    .unwrap();
    let svc = |name: &str| -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": 80}]}
        }))
        .unwrap()
    };
    let slice = |svc: &str, ips: &[&str], port: u16| -> EndpointSlice {
        let endpoints: Vec<_> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": svc, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": port}]
        }))
        .unwrap()
    };
    // Nothing listens on 127.0.0.1:1: the connection is refused.
    (
        vec![ingress],
        vec![svc("web"), svc("down"), svc("refused")],
        vec![
            slice("web", &["127.0.0.1", "127.0.0.2"], port),
            slice("refused", &["127.0.0.1"], 1),
        ],
    )
}

/// Starts the proxy's HTTP listener on the table of [`objects`] with backends `a` and `b`.
async fn proxy() -> SocketAddr {
    let a = backend([127, 0, 0, 1], 0, "a").await;
    backend([127, 0, 0, 2], a.port(), "b").await;
    let (ingresses, services, slices) = objects(a.port());
    let table = RoutingTable::build(
        &ingresses.iter().collect::<Vec<_>>(),
        &services.iter().collect::<Vec<_>>(),
        &slices.iter().collect::<Vec<_>>(),
        None,
    );
    let routes = Routes::default();
    routes.set(table);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server::serve_http(listener, routes, Forwarder::new().keep_host());
    addr
}

/// One HTTP/1.0 request; the status and body.
async fn get(addr: SocketAddr, host: &str, extra: &str) -> (u16, String) {
    let work = async {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET /x?y=1 HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .unwrap()
}

#[tokio::test]
async fn requests_reach_the_endpoints_round_robin_with_forwarded_headers() {
    let addr = proxy().await;
    let (status, body) = get(addr, "web.example.com", "X-Forwarded-For: 198.51.100.4\r\n").await;
    assert_eq!(status, 200, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    for want in [
        "host: web.example.com",
        "x-forwarded-for: 198.51.100.4, 127.0.0.1",
        "x-forwarded-proto: http",
        "x-forwarded-host: web.example.com",
        &format!("x-forwarded-port: {}", addr.port()),
        "x-real-ip: 127.0.0.1",
    ] {
        assert!(lines.contains(&want), "{want} in:\n{body}");
    }
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (_, body) = get(addr, "web.example.com", "").await;
        seen.push(body.lines().next().unwrap().to_string());
    }
    assert_eq!(seen, ["b", "a", "b", "a"]);
}

#[tokio::test]
async fn unknown_host_is_404_no_endpoints_503_refused_endpoint_502() {
    let addr = proxy().await;
    assert_eq!(get(addr, "nobody.example.com", "").await.0, 404);
    assert_eq!(get(addr, "down.example.com", "").await.0, 503);
    assert_eq!(get(addr, "refused.example.com", "").await.0, 502);
}

#[tokio::test]
async fn https_presents_the_certificate_of_the_sni_name_and_routes_the_request() {
    let a = backend([127, 0, 0, 1], 0, "a").await;
    backend([127, 0, 0, 2], a.port(), "b").await;
    let (mut ingresses, services, slices) = objects(a.port());
    ingresses[0].spec.as_mut().unwrap().tls = Some(vec![
        serde_json::from_value(json!({"hosts": ["web.example.com"], "secretName": "web-tls"}))
            .unwrap(),
    ]);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["web.example.com".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "web-tls", "namespace": "default"},
        "type": "kubernetes.io/tls",
        "stringData": {}
    }))
    .unwrap();
    let secret = Secret {
        data: Some(
            [
                (
                    "tls.crt".to_string(),
                    k8s_openapi::ByteString(cert.pem().into_bytes()),
                ),
                (
                    "tls.key".to_string(),
                    k8s_openapi::ByteString(key.serialize_pem().into_bytes()),
                ),
            ]
            .into(),
        ),
        ..secret
    };
    let refs: Vec<&Ingress> = ingresses.iter().collect();
    let routes = Routes::default();
    routes.set(RoutingTable::build(
        &refs,
        &services.iter().collect::<Vec<_>>(),
        &slices.iter().collect::<Vec<_>>(),
        None,
    ));
    let (table, problems) = TlsTable::build(&refs, &[&secret], tls::fake_certificate().unwrap());
    assert!(problems.is_empty(), "{problems:?}");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server::serve_https(
        listener,
        server::tls_server_config(SniResolver::new(table)),
        routes,
        Forwarder::new().keep_host(),
    );

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
            .with_no_client_auth(),
    );
    let connector = tokio_rustls::TlsConnector::from(config);
    for (sni, ours) in [("web.example.com", true), ("other.example.com", false)] {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
        let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
            .await
            .unwrap()
            .unwrap();
        let served = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        assert_eq!(served == *cert.der(), ours, "{sni}");
        tls.write_all(format!("GET / HTTP/1.0\r\nHost: {sni}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1);
        if ours {
            assert_eq!(status, Some("200"), "{text}");
            assert!(text.contains("x-forwarded-proto: https"), "{text}");
        } else {
            assert_eq!(status, Some("404"), "{text}");
        }
    }
}
