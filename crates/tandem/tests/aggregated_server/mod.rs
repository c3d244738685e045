//! A real aggregated API server for the end-to-end tests: HTTPS on loopback with a certificate
//! for `SERVICE.NAMESPACE.svc` from its own CA, requiring a client certificate from the front
//! proxy's CA (what an extension server reads from
//! `kube-system/extension-apiserver-authentication`), and answering with the identity the
//! front-proxy headers name. It serves `wardle.example.com/v1alpha1` flunders (discovery, list,
//! get, a short watch), `metrics.k8s.io/v1beta1` pod metrics, and as a custom metrics adapter
//! (prometheus-adapter, KEDA) would, `custom.metrics.k8s.io/v1beta2` (a Service `web`'s
//! `requests`: 150) and `external.metrics.k8s.io/v1beta1` (`queue_depth`, two series 20 and 10
//! for `queue=a`); it records every request's path and headers.
#![allow(dead_code, reason = "each test binary uses its own part")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

/// One request as the server saw it: path with query, and headers (lower-case names).
#[derive(Debug, Clone)]
pub struct Seen {
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// A running aggregated server; stops accepting when dropped.
pub struct AggregatedServer {
    pub port: u16,
    pub ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl AggregatedServer {
    /// Starts a server named `service_dns` that accepts clients signed by `client_ca_pem`.
    pub fn start(service_dns: &str, client_ca_pem: &str) -> AggregatedServer {
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca_params, &ca_key);
        let key = KeyPair::generate().expect("server key");
        let params = CertificateParams::new(vec![service_dns.to_string()]).expect("server params");
        let cert = params.signed_by(&key, &issuer).expect("server cert");
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let private = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
            roots.add(c.expect("client ca")).expect("add client ca");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("client verifier");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("tls versions")
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, private)
                .expect("tls config"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (seen, stop) = (seen.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((tcp, _)) => {
                            let (config, seen) = (config.clone(), seen.clone());
                            thread::spawn(move || serve(tcp, config, &seen));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        AggregatedServer {
            port,
            ca_pem: ca_cert.pem(),
            seen,
            stop,
        }
    }

    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes())
    }

    /// The requests seen so far whose target starts with `prefix`.
    pub fn seen(&self, prefix: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| s.target.starts_with(prefix))
            .cloned()
            .collect()
    }
}

impl Drop for AggregatedServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

const WARDLE: &str = "/apis/wardle.example.com/v1alpha1";
const METRICS: &str = "/apis/metrics.k8s.io/v1beta1";
const CUSTOM: &str = "/apis/custom.metrics.k8s.io/v1beta2";
const EXTERNAL: &str = "/apis/external.metrics.k8s.io/v1beta1";

/// The custom and external metrics APIs' answers, `None` for other paths.
fn metrics_adapter(path: &str, query: &str) -> Option<Value> {
    let resources = |gv: &str, kind: &str| {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
            {"name": "*", "singularName": "", "namespaced": true, "kind": kind, "verbs": ["get"]}]})
    };
    if path == CUSTOM {
        return Some(resources(
            "custom.metrics.k8s.io/v1beta2",
            "MetricValueList",
        ));
    }
    if path == EXTERNAL {
        return Some(resources(
            "external.metrics.k8s.io/v1beta1",
            "ExternalMetricValueList",
        ));
    }
    if let Some(rest) = path.strip_prefix(&format!("{CUSTOM}/namespaces/")) {
        let parts: Vec<&str> = rest.split('/').collect();
        let [ns, "services", "web", "requests"] = parts.as_slice() else {
            return Some(json!({"kind": "MetricValueList",
                "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": []}));
        };
        return Some(json!({"kind": "MetricValueList",
            "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {}, "items": [
            {"describedObject": {"kind": "Service", "namespace": ns, "name": "web", "apiVersion": "/v1"},
             "metric": {"name": "requests", "selector": null},
             "timestamp": "2026-01-01T00:00:00Z", "windowSeconds": 60, "value": "150"}]}));
    }
    if let Some(rest) = path.strip_prefix(&format!("{EXTERNAL}/namespaces/")) {
        let wanted = rest.ends_with("/queue_depth") && query.contains("labelSelector=queue%3Da");
        let items = if wanted {
            json!([
                {"metricName": "queue_depth", "metricLabels": {"queue": "a", "shard": "1"},
                 "timestamp": "2026-01-01T00:00:00Z", "value": "20"},
                {"metricName": "queue_depth", "metricLabels": {"queue": "a", "shard": "2"},
                 "timestamp": "2026-01-01T00:00:00Z", "value": "10"}])
        } else {
            json!([])
        };
        return Some(json!({"kind": "ExternalMetricValueList",
            "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": {}, "items": items}));
    }
    None
}

fn flunder(ns: &str, name: &str, user: &str, groups: &str) -> Value {
    json!({
        "apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"seen-by": user, "seen-groups": groups}},
        "spec": {"reference": "tandem"},
    })
}

/// The answer to one request: status, content type, body; `None` body for a watch.
fn answer(method: &str, target: &str, headers: &[(String, String)]) -> (u16, Option<Vec<u8>>) {
    let user = headers
        .iter()
        .find(|(k, _)| k == "x-remote-user")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let groups: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k == "x-remote-group")
        .map(|(_, v)| v.as_str())
        .collect();
    let groups = groups.join(",");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let body = |v: Value| Some(serde_json::to_vec(&v).expect("json"));
    if let Some(v) = metrics_adapter(path, query) {
        return (200, body(v));
    }
    if path == WARDLE {
        return (
            200,
            body(json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "wardle.example.com/v1alpha1", "resources": [
                {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
                 "verbs": ["get", "list", "watch"], "shortNames": ["fl"]},
                {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder",
                 "verbs": ["get"]}]})),
        );
    }
    if path == METRICS {
        return (
            200,
            body(json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "metrics.k8s.io/v1beta1", "resources": [
                {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]}]})),
        );
    }
    if let Some(rest) = path.strip_prefix(&format!("{METRICS}/namespaces/")) {
        let ns = rest.split('/').next().unwrap_or_default();
        return (
            200,
            body(
                json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
                "items": [{"metadata": {"name": "from-my-metrics-server", "namespace": ns,
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "timestamp": "2026-01-01T00:00:00Z", "window": "15s",
                    "containers": [{"name": "c", "usage": {"cpu": "7m", "memory": "12Mi"}}]}]}),
            ),
        );
    }
    let Some(rest) = path.strip_prefix(&format!("{WARDLE}/namespaces/")) else {
        return (
            404,
            body(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404}),
            ),
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", [ns, "flunders"])
            if query
                .split('&')
                .any(|q| q == "watch=true" || q == "watch=1") =>
        {
            let _ = ns;
            (200, None)
        }
        ("GET", [ns, "flunders"]) => (
            200,
            body(
                json!({"kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1",
                "metadata": {"resourceVersion": "7"}, "items": [flunder(ns, "first", &user, &groups)]}),
            ),
        ),
        ("GET", [ns, "flunders", "first"]) => (200, body(flunder(ns, "first", &user, &groups))),
        ("GET", [_, "flunders", name]) => (
            404,
            body(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("flunders.wardle.example.com \"{name}\" not found"),
                "reason": "NotFound", "details": {"name": name, "group": "wardle.example.com", "kind": "flunders"},
                "code": 404}),
            ),
        ),
        _ => (
            405,
            body(
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "method not allowed", "reason": "MethodNotAllowed", "code": 405}),
            ),
        ),
    }
}

fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, seen: &Mutex<Vec<Seen>>) {
    let _ = tcp.set_nonblocking(false);
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    loop {
        let mut reader = BufReader::new(&mut tls);
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = request_line.split_whitespace();
        let method = words.next().unwrap_or("GET").to_string();
        let target = words.next().unwrap_or("/").to_string();
        let mut headers = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    length = v.trim().parse().unwrap_or(0);
                }
                headers.push((k, v.trim().to_string()));
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        drop(reader);
        seen.lock().expect("seen").push(Seen {
            target: target.clone(),
            headers: headers.clone(),
        });
        match answer(&method, &target, &headers) {
            (code, Some(body)) => {
                let head = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if tls.write_all(head.as_bytes()).is_err() || tls.write_all(&body).is_err() {
                    return;
                }
                let _ = tls.flush();
            }
            (code, None) => {
                // A watch: two events, a line each, then the end of the stream.
                let head = format!(
                    "HTTP/1.1 {code} OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                );
                let _ = tls.write_all(head.as_bytes());
                for name in ["first", "second"] {
                    let event =
                        json!({"type": "ADDED", "object": flunder("default", name, "", "")});
                    let _ = tls.write_all(format!("{event}\n").as_bytes());
                    let _ = tls.flush();
                    thread::sleep(Duration::from_millis(200));
                }
                tls.conn.send_close_notify();
                let _ = tls.flush();
                return;
            }
        }
    }
}
