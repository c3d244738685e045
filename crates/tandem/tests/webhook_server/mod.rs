//! A real admission webhook server for the end-to-end tests: HTTPS on loopback with a
//! certificate from its own CA (for `127.0.0.1`, `localhost` and a Service name), HTTP/1.1 with
//! keep-alive, answering each AdmissionReview with what the test's handler decides and keeping
//! every review it received.
#![allow(dead_code, reason = "each test binary uses its own part")]

pub mod conversion;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

/// What the handler answers to one review.
pub enum Answer {
    Allow,
    /// Allowed with warnings.
    AllowWarn(Vec<String>),
    /// Denied with a code and message.
    Deny(u16, String),
    /// Allowed with this JSONPatch (a JSON array).
    Patch(Value),
    /// Wait before answering allowed (a slow webhook).
    Slow(Duration),
    /// An answer that is not an AdmissionReview.
    Garbage,
}

type Handler = dyn Fn(&str, &Value) -> Answer + Send + Sync;

/// A running webhook server; stops accepting when dropped.
pub struct WebhookServer {
    pub port: u16,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
    reviews: Arc<Mutex<Vec<(String, Value)>>>,
    stop: Arc<AtomicBool>,
}

impl WebhookServer {
    /// Starts a server whose certificate also names `service_dns` (`NAME.NAMESPACE.svc`).
    pub fn start(
        service_dns: &str,
        handler: impl Fn(&str, &Value) -> Answer + Send + Sync + 'static,
    ) -> WebhookServer {
        let (config, ca_pem) = tls_config(service_dns);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind webhook");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        {
            let (reviews, stop) = (reviews.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((tcp, _)) => {
                            let (config, handler, reviews, stop) = (
                                config.clone(),
                                handler.clone(),
                                reviews.clone(),
                                stop.clone(),
                            );
                            thread::spawn(move || serve(tcp, config, &*handler, &reviews, &stop));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        WebhookServer {
            port,
            ca_pem,
            reviews,
            stop,
        }
    }

    /// The CA as a `caBundle` value.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes())
    }

    /// The `https://127.0.0.1:PORT/PATH` URL of a path.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The reviews received so far on `path` (the request target without its query).
    pub fn reviews(&self, path: &str) -> Vec<Value> {
        self.reviews
            .lock()
            .expect("reviews")
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Serves one connection: requests one after another until the client closes it.
fn serve(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    handler: &Handler,
    reviews: &Mutex<Vec<(String, Value)>>,
    stop: &AtomicBool,
) {
    let _ = tcp.set_nonblocking(false);
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(60)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Some((path, body)) = read_request(&mut tls) else {
            return;
        };
        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        reviews
            .lock()
            .expect("reviews")
            .push((path.clone(), review.clone()));
        let uid = review["request"]["uid"].clone();
        let api_version = review["apiVersion"].clone();
        let mut response = json!({"uid": uid, "allowed": true});
        match handler(&path, &review) {
            Answer::Allow => {}
            Answer::AllowWarn(w) => response["warnings"] = json!(w),
            Answer::Deny(code, message) => {
                response["allowed"] = json!(false);
                response["status"] = json!({"code": code, "message": message});
            }
            Answer::Patch(patch) => {
                response["patchType"] = json!("JSONPatch");
                response["patch"] = json!(
                    base64::engine::general_purpose::STANDARD
                        .encode(serde_json::to_vec(&patch).expect("patch"))
                );
            }
            Answer::Slow(d) => thread::sleep(d),
            Answer::Garbage => response = Value::Null,
        }
        let answer = if response.is_null() {
            b"{\"hello\": \"world\"}".to_vec()
        } else {
            serde_json::to_vec(
                &json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response}),
            )
            .expect("answer")
        };
        if !write_json(&mut tls, &answer) {
            return;
        }
    }
}

/// A TLS configuration with a certificate for `127.0.0.1`, `localhost` and `service_dns`,
/// signed by a fresh CA; returns it with the CA in PEM.
pub fn tls_config(service_dns: &str) -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), service_dns.to_string()])
        .expect("server params");
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().expect("ip")));
    let cert = params.signed_by(&key, &issuer).expect("server cert");
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let private = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("tls versions")
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .expect("tls config"),
    );
    (config, ca_cert.pem())
}

/// Reads one HTTP/1.1 request from `tls`: its path (without the query) and body; `None` when
/// the client closed the connection.
pub fn read_request<S: Read + Write>(tls: &mut S) -> Option<(String, Vec<u8>)> {
    let mut reader = BufReader::new(tls);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return None;
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_string();
    let path = target.split('?').next().unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((path, body))
}

/// Writes a 200 answer with a JSON body; false when the connection is gone.
pub fn write_json<S: Write>(tls: &mut S, answer: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        answer.len()
    );
    let ok = tls.write_all(head.as_bytes()).is_ok() && tls.write_all(answer).is_ok();
    ok && tls.flush().is_ok()
}
