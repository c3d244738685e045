//! A real CRD conversion webhook server for the end-to-end tests: HTTPS on loopback (the
//! admission server's certificate set-up), answering each ConversionReview by converting every
//! object with the test's function, or with one of the wrong answers a test asks for, and
//! keeping every review it received. `stop` takes it down (new connections are refused).

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{read_request, tls_config, write_json};

/// How the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Converts every object.
    Convert,
    /// Answers with another uid.
    WrongUid,
    /// Leaves the last object out.
    WrongCount,
}

type Convert = dyn Fn(&Value, &str) -> Value + Send + Sync;

struct Shared {
    mode: Mutex<Mode>,
    reviews: Mutex<Vec<Value>>,
    stop: AtomicBool,
    convert: Box<Convert>,
}

/// A running conversion webhook server; stops when dropped.
pub struct ConversionServer {
    pub port: u16,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
    shared: Arc<Shared>,
}

impl ConversionServer {
    /// Starts a server converting each object with `convert(object, desiredAPIVersion)`.
    pub fn start(convert: impl Fn(&Value, &str) -> Value + Send + Sync + 'static) -> Self {
        let (config, ca_pem) = tls_config("convert.webhook-test.svc");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind conversion webhook");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Convert),
            reviews: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            convert: Box::new(convert),
        });
        let accepting = shared.clone();
        thread::spawn(move || {
            // The listener closes when this thread ends: later connections are refused.
            while !accepting.stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        let (config, shared) = (config.clone(), accepting.clone());
                        thread::spawn(move || serve(tcp, config, &shared));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ConversionServer {
            port,
            ca_pem,
            shared,
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

    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().expect("mode") = mode;
    }

    /// The reviews received so far.
    pub fn reviews(&self) -> Vec<Value> {
        self.shared.reviews.lock().expect("reviews").clone()
    }

    /// Takes the server down: open connections close, new ones are refused.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for ConversionServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(tcp: TcpStream, config: Arc<rustls::ServerConfig>, shared: &Shared) {
    let _ = tcp.set_nonblocking(false);
    // Short reads, so a connection left idle notices `stop` soon.
    let _ = tcp.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Some((_path, body)) = read_or_wait(&mut tls, shared) else {
            return;
        };
        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        shared.reviews.lock().expect("reviews").push(review.clone());
        let request = &review["request"];
        let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
        let mut converted: Vec<Value> = request["objects"]
            .as_array()
            .map(|objects| {
                objects
                    .iter()
                    .map(|o| (shared.convert)(o, desired))
                    .collect()
            })
            .unwrap_or_default();
        let mut uid = request["uid"].clone();
        match *shared.mode.lock().expect("mode") {
            Mode::Convert => {}
            Mode::WrongUid => uid = json!("not-the-request-uid"),
            Mode::WrongCount => {
                converted.pop();
            }
        }
        let answer = json!({
            "apiVersion": review["apiVersion"], "kind": "ConversionReview",
            "response": {"uid": uid, "result": {"status": "Success"}, "convertedObjects": converted},
        });
        if !write_json(&mut tls, &serde_json::to_vec(&answer).expect("answer")) {
            return;
        }
    }
}

/// The next request, waiting through read timeouts until one comes, the client leaves or the
/// server stops.
fn read_or_wait(
    tls: &mut rustls::StreamOwned<rustls::ServerConnection, TcpStream>,
    shared: &Shared,
) -> Option<(String, Vec<u8>)> {
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        // Wait for the request's first byte with short timeouts (nothing is half read when one
        // passes), then read the request with a long one.
        let mut probe = [0u8; 1];
        match tls.sock.peek(&mut probe) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return None,
        }
        let _ = tls.sock.set_read_timeout(Some(Duration::from_secs(10)));
        let request = read_request(tls);
        let _ = tls.sock.set_read_timeout(Some(Duration::from_millis(200)));
        return request;
    }
}
