//! The streaming server's query parsing, and its TLS: who gets a connection, who gets a 403, and
//! that the API server's certificate reaches the handlers. Certificates come from a CA made here.

use std::net::Ipv4Addr;

use http_body_util::Empty;
use rcgen::{BasicConstraints, IsCa, Issuer};
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tandem_netproxy::tls::AnyServerCert;
use tokio::net::TcpStream;
use x509_parser::extensions::GeneralName;

use super::*;
use crate::clock::Clock;
use crate::config::NodeOs;
use crate::runtime::behaviour::StageFile;
use crate::runtime::emulated::{EmulatedConfig, EmulatedRuntime, PAUSE_IMAGE};

#[test]
fn stream_options_accept_both_spellings_and_tty_drops_stderr() {
    let r = stream_request("command=sh&command=-c&command=echo%20hi&input=1&output=1&error=1");
    assert_eq!(r.command, ["sh", "-c", "echo hi"]);
    assert!(r.stdin && r.stdout && r.stderr && !r.tty);
    let t = stream_request("command=sh&stdin=true&stdout=true&stderr=true&tty=true");
    assert!(t.tty && t.stdin && t.stdout && !t.stderr);
}

/// A cluster CA that issues client certificates, as the API server's PKI does.
struct TestCa {
    pem: String,
    key: KeyPair,
    params: CertificateParams,
}

/// A client certificate and its key.
type ClientCert = (CertificateDer<'static>, PrivateKeyDer<'static>);

impl TestCa {
    fn new() -> TestCa {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        let pem = params.self_signed(&key).expect("CA").pem();
        TestCa { pem, key, params }
    }

    /// A client certificate for user `cn` in groups `orgs`.
    fn issue(&self, cn: &str, orgs: &[&str]) -> ClientCert {
        let issuer = Issuer::new(self.params.clone(), &self.key);
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("sign");
        (
            cert.der().clone(),
            PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        )
    }
}

/// Starts the streaming server of node `node-a` on loopback, trusting `ca_pem`, over an emulated
/// runtime with no pods.
async fn start(ca_pem: &str) -> SocketAddr {
    start_serving(ca_pem, false).await
}

/// [`start`], with the node's stats and metrics endpoints when `with_stats`.
async fn start_serving(ca_pem: &str, with_stats: bool) -> SocketAddr {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let tls = tls_config(ca_pem, "node-a", &[loopback]).expect("TLS configuration");
    let listener = bind(SocketAddr::new(loopback, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let runtime = EmulatedRuntime::new(
        EmulatedConfig {
            os: NodeOs::Linux,
            windows_build: None,
            bandwidth: 100_000_000,
            pause_image: PAUSE_IMAGE.into(),
            preloaded_images: vec![],
            stages: StageFile::default(),
            state_dir: None,
            node_name: "node-a".into(),
            network: None,
            dns: Default::default(),
        },
        Clock::new(),
    )
    .expect("runtime");
    let runtime: Arc<dyn Runtime> = Arc::new(runtime);
    let stats = with_stats.then(|| {
        Arc::new(StatsSource::new(
            "node-a",
            runtime.clone(),
            crate::runtime::NodeResources::default(),
            Clock::new(),
        ))
    });
    tokio::spawn(serve_with_stats(listener, tls, runtime, stats));
    addr
}

/// Sends `method path` to the server over TLS, presenting `cert` if any, and returns the status
/// and the body as JSON; `Err` when the connection fails before an answer.
async fn request(
    addr: SocketAddr,
    cert: Option<ClientCert>,
    method: Method,
    path: &str,
) -> Result<(StatusCode, serde_json::Value), String> {
    let (code, _, body) = request_raw(addr, cert, method, path).await?;
    Ok((code, serde_json::from_slice(&body).unwrap_or_default()))
}

/// [`request`], returning the content type and the body as they came.
async fn request_raw(
    addr: SocketAddr,
    cert: Option<ClientCert>,
    method: Method,
    path: &str,
) -> Result<(StatusCode, String, Bytes), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)));
    let config = match cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(vec![cert], key)
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::IpAddress(addr.ip().into());
    let exchange = async {
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let code = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok((code, content_type, body))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("the server answered or closed in time")
}

#[tokio::test]
async fn a_connection_without_a_client_certificate_is_refused() {
    let ca = TestCa::new();
    let addr = start(&ca.pem).await;
    let result = request(addr, None, Method::GET, "/containerLogs/default/web/app").await;
    assert!(result.is_err(), "{result:?}");
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_even_with_the_api_servers_name() {
    let ca = TestCa::new();
    let addr = start(&ca.pem).await;
    let forged = TestCa::new().issue(APISERVER_CLIENT_CN, &[]);
    let result = request(
        addr,
        Some(forged),
        Method::GET,
        "/containerLogs/default/web/app",
    )
    .await;
    assert!(result.is_err(), "{result:?}");
}

#[tokio::test]
async fn another_user_of_the_cluster_ca_is_forbidden_with_the_kubelets_message() {
    let ca = TestCa::new();
    let addr = start(&ca.pem).await;
    let admin = || Some(ca.issue("admin", &["system:masters"]));

    let (code, status) = request(addr, admin(), Method::GET, "/containerLogs/default/web/app")
        .await
        .expect("an answer");
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["code"], 403);
    assert_eq!(
        status["message"],
        "Forbidden (user=admin, verb=get, resource=nodes, subresource=proxy)"
    );

    let (code, status) = request(
        addr,
        admin(),
        Method::POST,
        "/exec/default/web/app?command=ls",
    )
    .await
    .expect("an answer");
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        status["message"],
        "Forbidden (user=admin, verb=create, resource=nodes, subresource=proxy)"
    );
}

#[tokio::test]
async fn the_api_servers_certificate_reaches_the_handlers() {
    let ca = TestCa::new();
    let addr = start(&ca.pem).await;
    let (code, status) = request(
        addr,
        Some(ca.issue(APISERVER_CLIENT_CN, &[])),
        Method::GET,
        "/containerLogs/default/web/app",
    )
    .await
    .expect("an answer");
    assert_eq!(code, StatusCode::NOT_FOUND, "{status}");
    assert_eq!(status["message"], "pod \"web\" does not exist on this node");
}

#[test]
fn the_serving_certificate_names_the_node_and_its_addresses() {
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 7));
    let (der, _) = serving_certificate("node-a", &[ip]).expect("certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).expect("parses");
    let sans = cert
        .subject_alternative_name()
        .expect("valid extension")
        .expect("has SANs");
    let names: Vec<String> = sans
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => (*dns).to_string(),
            GeneralName::IPAddress([a, b, c, d]) => Ipv4Addr::new(*a, *b, *c, *d).to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["node-a", "127.0.3.7"]);
    assert_eq!(common_name(&der).as_deref(), Some("node-a"));
}

#[test]
fn a_cluster_ca_without_a_certificate_is_an_error() {
    let loopback = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    assert!(matches!(
        tls_config("", "node-a", &loopback),
        Err(TlsError::NoCaCertificate)
    ));
    assert!(tls_config(&TestCa::new().pem, "node-a", &loopback).is_ok());
}

#[tokio::test]
async fn the_api_server_reads_metrics_resource_metrics_and_the_summary() {
    let ca = TestCa::new();
    let addr = start_serving(&ca.pem, true).await;
    let apiserver = || Some(ca.issue(APISERVER_CLIENT_CN, &[]));

    let (code, content_type, body) =
        request_raw(addr, apiserver(), Method::GET, "/metrics/resource")
            .await
            .expect("an answer");
    let text = String::from_utf8_lossy(&body);
    assert_eq!(code, StatusCode::OK, "{text}");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(
        text.contains("\ntandem_resource_metrics_emulated 1\n"),
        "{text}"
    );
    assert!(text.contains("\nresource_scrape_error 0\n"), "{text}");
    assert!(
        text.contains("\n# TYPE node_cpu_usage_seconds_total counter\n"),
        "{text}"
    );

    let (code, summary) = request(addr, apiserver(), Method::GET, "/stats/summary")
        .await
        .expect("an answer");
    assert_eq!(code, StatusCode::OK, "{summary}");
    assert_eq!(summary["node"]["nodeName"], "node-a");
    assert_eq!(summary["pods"], serde_json::json!([]));

    let (code, _, body) = request_raw(addr, apiserver(), Method::GET, "/metrics")
        .await
        .expect("an answer");
    let text = String::from_utf8_lossy(&body);
    assert_eq!(code, StatusCode::OK, "{text}");
    assert!(
        text.contains("\nkubelet_node_name{node=\"node-a\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("\nkubelet_running_pods 0\n"), "{text}");
}

#[tokio::test]
async fn another_user_gets_403_on_metrics_and_stats_with_their_subresources() {
    let ca = TestCa::new();
    let addr = start_serving(&ca.pem, true).await;
    for (path, subresource) in [
        ("/metrics/resource", "metrics"),
        ("/metrics", "metrics"),
        ("/stats/summary", "stats"),
        ("/metricsx", "proxy"),
    ] {
        let (code, status) = request(
            addr,
            Some(ca.issue("system:node:node-b", &["system:nodes"])),
            Method::GET,
            path,
        )
        .await
        .expect("an answer");
        assert_eq!(code, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(
            status["message"],
            format!(
                "Forbidden (user=system:node:node-b, verb=get, resource=nodes, \
                 subresource={subresource})"
            ),
            "{path}"
        );
    }
}

#[tokio::test]
async fn without_a_stats_source_the_stats_paths_are_not_found() {
    let ca = TestCa::new();
    let addr = start(&ca.pem).await;
    let (code, _) = request(
        addr,
        Some(ca.issue(APISERVER_CLIENT_CN, &[])),
        Method::GET,
        "/stats/summary",
    )
    .await
    .expect("an answer");
    assert_eq!(code, StatusCode::NOT_FOUND);
}
