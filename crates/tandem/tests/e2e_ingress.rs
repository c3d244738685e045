//! End-to-end: the built-in ingress controller (`tandem_ingress`) on the real Linux node of
//! `tandem up --linux-runtime cri`, serving networking.k8s.io/v1 Ingresses of the default class
//! `tandem` as ingress-nginx / k3s' Traefik would: host and path routing to busybox web servers
//! in real pods, 404 for hosts no rule names, 503 for a Service without ready endpoints,
//! X-Forwarded-* headers (seen by a CGI script in the pod), TLS with a `kubectl create secret
//! tls` certificate chosen by SNI (the default "fake" certificate otherwise), the node's
//! InternalIP in `status.loadBalancer`, and Ingresses of another class left alone.
//!
//! The cluster has its own pod and service ranges, and the ingress listens on 127.0.0.1 at
//! 18080/18443 only; clients are this process over loopback. The cluster DNS forwards nothing.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Server;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tandem_netproxy::tls::AnyServerCert;

const LONG: Duration = Duration::from_secs(120);
const HTTP: &str = "127.0.0.1:18080";
const HTTPS: &str = "127.0.0.1:18443";

fn start() -> Server {
    Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1",
        "--cluster-cidr",
        "10.253.0.0/16",
        "--service-cidr",
        "10.133.0.0/16",
        "--dns-upstream",
        "none",
        "--emulated-pod-network",
        "off",
        "--ingress-http-port",
        "18080",
        "--ingress-https-port",
        "18443",
        "--ingress-bind-address",
        "127.0.0.1",
    ])
}

/// A Deployment `name` of busybox web servers on port 8080 running `setup` first.
fn web(name: &str, setup: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: tandem.local/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", {setup:?}]
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /, port: http}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: 80, targetPort: http}}]
"#
    )
}

/// `web` answers `/` with "web" and runs `/cgi-bin/env`, which prints the request's environment
/// (the headers as `HTTP_*`); `api` answers `/api/` with "api".
fn workloads() -> String {
    let web_setup = "mkdir -p /www/cgi-bin && echo web > /www/index.html && \
        printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\nenv\\n' > /www/cgi-bin/env && \
        chmod +x /www/cgi-bin/env && exec httpd -f -p 8080 -h /www";
    let api_setup = "mkdir -p /www/api && echo api > /www/api/index.html && \
        echo up > /www/index.html && exec httpd -f -p 8080 -h /www";
    format!(
        "{}\n---\n{}\n---\n{}",
        web("web", web_setup),
        web("api", api_setup),
        r#"
apiVersion: v1
kind: Service
metadata: {name: down}
spec:
  selector: {app: nothing-has-this-label}
  ports: [{name: http, port: 80}]
"#
    )
}

const INGRESS: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: site}
spec:
  tls:
  - hosts: [web.example.com]
    secretName: web-tls
  rules:
  - host: web.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
  - host: down.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: down, port: {number: 80}}}}
"#;

/// An IngressClass of another controller, an Ingress of that class, then one of ours: once
/// ours routes, the controller has seen the foreign one (one watch, in order).
const FOREIGN: &str = r#"
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: other}
spec: {controller: example.com/other-controller}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: foreign}
spec:
  ingressClassName: other
  rules:
  - host: foreign.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"#;

const MARKER: &str = r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: marker
  annotations: {kubernetes.io/ingress.class: tandem}
spec:
  rules:
  - host: marker.example.com
    http:
      paths:
      - {path: /, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}
"#;

/// A response's status code and body.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: String,
}

/// Splits an HTTP/1.x response (close-delimited: the request was HTTP/1.0).
fn parse(raw: &[u8]) -> Option<Reply> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Reply {
        status,
        body: body.to_string(),
    })
}

fn request_text(host: &str, path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n")
}

/// Reads until the peer closes; a TLS peer that closes without `close_notify` ends it too.
fn read_all(r: &mut impl Read) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    buf
}

/// One plain-HTTP request to the ingress; `None` when nothing answered in a few seconds.
fn get(host: &str, path: &str, extra: &str) -> Option<Reply> {
    get_at(HTTP, host, path, extra)
}

/// As [`get`], to the ingress listening at `ingress`.
fn get_at(ingress: &str, host: &str, path: &str, extra: &str) -> Option<Reply> {
    let addr: SocketAddr = ingress.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(request_text(host, path, extra).as_bytes())
        .ok()?;
    parse(&read_all(&mut s))
}

/// One HTTPS request with SNI `sni`: the certificate the ingress presented, and the reply.
fn get_tls(sni: &str, path: &str, extra: &str) -> Option<(Vec<u8>, Reply)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from(sni.to_string()).ok()?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let addr: SocketAddr = HTTPS.parse().ok()?;
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(request_text(sni, path, extra).as_bytes())
        .ok()?;
    let raw = read_all(&mut tls);
    let cert = tls.conn.peer_certificates()?.first()?.as_ref().to_vec();
    Some((cert, parse(&raw)?))
}

/// A self-signed certificate and key for `web.example.com` made with the openssl CLI, as PEM
/// files in the server's scratch dir.
fn make_certificate(s: &Server) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = s.dir().join("web.crt");
    let key = s.dir().join("web.key");
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=web.example.com"])
        .args(["-addext", "subjectAltName=DNS:web.example.com"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn rollout(s: &Server, name: &str) {
    let out = s.kubectl_full(
        &[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=120s",
        ],
        None,
        &[],
        LONG,
    );
    assert!(out.success(), "{}\n{}", out.combined(), s.log());
}

fn node_internal_ip(s: &Server) -> String {
    let nodes = s.get_json(&["nodes"]).unwrap();
    let node = &nodes["items"][0];
    node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap()
        .to_string()
}

fn lb_ips(s: &Server, ingress: &str) -> Vec<String> {
    s.get_json(&["ingress", ingress])
        .and_then(|i| i["status"]["loadBalancer"]["ingress"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["ip"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn ingress_routes_hosts_and_paths_to_pods_over_http_and_tls_and_reports_the_node_address() {
    let s = start();
    let log = s.eventually("tandem up reports the ingress controller", LONG, || {
        let log = s.log();
        log.contains("ingress controller:").then_some(log)
    });
    assert!(
        log.contains("ingress controller: IngressClass tandem (default) on http://127.0.0.1:18080"),
        "tandem up says where the ingress listens:\n{log}"
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &workloads()).ok();
    let (cert, key) = make_certificate(&s);
    s.kubectl(&[
        "create",
        "secret",
        "tls",
        "web-tls",
        &format!("--cert={}", cert.display()),
        &format!("--key={}", key.display()),
    ])
    .ok();
    rollout(&s, "web");
    rollout(&s, "api");

    // The controller made its class, the cluster's default.
    let class = s.eventually("IngressClass tandem exists", LONG, || {
        s.get_json(&["ingressclass", "tandem"])
    });
    assert_eq!(class["spec"]["controller"], "tandem.io/ingress");
    assert_eq!(
        class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"],
        "true"
    );

    // No class named: the DefaultIngressClass admission plugin names the default class (ours),
    // while the legacy annotation is left to speak for itself.
    s.kubectl_stdin(&["apply", "-f", "-"], INGRESS).ok();
    let site = s.get_json(&["ingress", "site"]).unwrap();
    assert_eq!(site["spec"]["ingressClassName"], "tandem", "{site}");
    let home = s.eventually("web.example.com / answers from the web pod", LONG, || {
        get("web.example.com", "/", "").filter(|r| r.status == 200)
    });
    assert_eq!(home.body.trim(), "web");
    let api = get("web.example.com", "/api/index.html", "").unwrap();
    assert_eq!((api.status, api.body.trim()), (200, "api"));
    // Host matching ignores case and port.
    let upper = get("WEB.example.com:18080", "/api/", "").unwrap();
    assert_eq!((upper.status, upper.body.trim()), (200, "api"));
    // `/apis` is not under the `/api` prefix: it goes to `/` (the web pod has no such file).
    assert_eq!(get("web.example.com", "/apis", "").unwrap().status, 404);
    assert!(
        !get("web.example.com", "/apis", "")
            .unwrap()
            .body
            .contains("404 page not found"),
        "the web pod answered /apis, not the ingress"
    );

    let unknown = get("unknown.example.com", "/", "").unwrap();
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let down = get("down.example.com", "/", "").unwrap();
    assert_eq!(down.status, 503, "{down:?}");

    // The backend sees the client's Host and the proxy's X-Forwarded-* headers.
    let env = get(
        "web.example.com",
        "/cgi-bin/env",
        "X-Forwarded-For: 203.0.113.9\r\n",
    )
    .unwrap();
    assert_eq!(env.status, 200, "{env:?}");
    for line in [
        "HTTP_HOST=web.example.com",
        "HTTP_X_FORWARDED_FOR=203.0.113.9, 127.0.0.1",
        "HTTP_X_FORWARDED_PROTO=http",
        "HTTP_X_FORWARDED_HOST=web.example.com",
        "HTTP_X_FORWARDED_PORT=18080",
        "HTTP_X_REAL_IP=127.0.0.1",
    ] {
        assert!(
            env.body.lines().any(|l| l == line),
            "{line} in:\n{}",
            env.body
        );
    }

    // TLS: the Secret's certificate for its host, the default certificate otherwise.
    let ours = CertificateDer::from_pem_file(&cert).unwrap();
    let (served, reply) = s.eventually("HTTPS with the Secret's certificate", LONG, || {
        get_tls("web.example.com", "/", "").filter(|(c, _)| c.as_slice() == ours.as_ref())
    });
    assert_eq!(served, ours.as_ref());
    assert_eq!((reply.status, reply.body.trim()), (200, "web"));
    let (_, env) = get_tls("web.example.com", "/cgi-bin/env", "").unwrap();
    assert!(
        env.body
            .lines()
            .any(|l| l == "HTTP_X_FORWARDED_PROTO=https"),
        "{}",
        env.body
    );
    let (fake, reply) = get_tls("unknown.example.com", "/", "").unwrap();
    assert_ne!(fake, ours.as_ref());
    let needle = b"Kubernetes Ingress Controller Fake Certificate";
    assert!(fake.windows(needle.len()).any(|w| w == needle));
    assert_eq!(reply.status, 404);

    // The node's InternalIP in the status.
    let ip = node_internal_ip(&s);
    s.eventually("status.loadBalancer names the node", LONG, || {
        (lb_ips(&s, "site") == [ip.clone()]).then_some(())
    });

    // Another controller's Ingress is left alone: no route, no status.
    s.kubectl_stdin(&["apply", "-f", "-"], FOREIGN).ok();
    s.kubectl_stdin(&["apply", "-f", "-"], MARKER).ok();
    s.eventually(
        "the marker Ingress (legacy annotation) routes",
        LONG,
        || get("marker.example.com", "/", "").filter(|r| r.status == 200),
    );
    assert_eq!(get("foreign.example.com", "/", "").unwrap().status, 404);
    let marker = s.get_json(&["ingress", "marker"]).unwrap();
    assert!(marker["spec"].get("ingressClassName").is_none(), "{marker}");
    s.eventually("the marker Ingress has its status", LONG, || {
        (lb_ips(&s, "marker") == [ip.clone()]).then_some(())
    });
    assert!(lb_ips(&s, "foreign").is_empty());
}

/// The walkthrough's Windows web server (the seed `win-webserver.yaml`: two IIS-style pods on the
/// Windows Server 2019 node, emulated) reached by name from the host through the ingress on the
/// real Linux node: an Ingress without a class (the default class takes it) routes
/// `win.example.com` to the Service, and the emulated stand-ins answer, saying so.
#[test]
fn walkthrough_windows_web_server_is_reached_by_name_through_the_ingress() {
    const WIN_HTTP: &str = "127.0.0.1:18082";
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1,windows-2019=1",
        "--cluster-cidr",
        "10.255.0.0/16",
        "--service-cidr",
        "10.136.0.0/16",
        "--dns-upstream",
        "none",
        "--ingress-http-port",
        "18082",
        "--ingress-https-port",
        "18445",
        "--ingress-bind-address",
        "127.0.0.1",
    ]);
    s.kubectl(&["apply", "-f", &common::seed("win-webserver.yaml")])
        .ok();
    s.kubectl(&[
        "rollout",
        "status",
        "deployment/win-webserver",
        "--timeout=120s",
    ])
    .ok();
    s.kubectl(&[
        "create",
        "ingress",
        "win",
        "--rule=win.example.com/*=win-webserver:80",
    ])
    .ok();
    let ingress = s.get_json(&["ingress", "win"]).unwrap();
    assert_eq!(ingress["spec"]["ingressClassName"], "tandem", "{ingress}");
    let reply = s.eventually(
        "the Windows web server answers through the ingress",
        LONG,
        || get_at(WIN_HTTP, "win.example.com", "/", "").filter(|r| r.status == 200),
    );
    assert!(
        reply.body.contains("emulated by tandem"),
        "the emulated stand-in answers and says so: {reply:?}"
    );
    // Both replicas serve: the ingress balances over the Service's endpoints.
    let pods: std::collections::BTreeSet<String> = (0..20)
        .filter_map(|_| get_at(WIN_HTTP, "win.example.com", "/", ""))
        .filter_map(|r| {
            let at = r.body.find("win-webserver-")?;
            Some(
                r.body[at..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    assert!(
        !pods.is_empty(),
        "the answers name the pod that served them"
    );
    assert_eq!(
        get_at(WIN_HTTP, "other.example.com", "/", "").map(|r| r.status),
        Some(404)
    );
}
