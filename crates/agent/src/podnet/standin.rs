//! The stand-in that answers an emulated container's ports, from inside its pod's network
//! namespace, and says plainly that it is emulated.
//!
//! No process runs in an emulated pod, so nothing of the workload can answer. The stand-in makes
//! the pod's network behave as a running container's would as far as reachability goes:
//! - TCP: a connection is accepted. When the client speaks HTTP/1.x, every request gets a short
//!   `200 OK` (keep-alive honoured) whose body and `X-Tandem-Emulated` header name the pod,
//!   container, image, node and (on Windows) the build; anything else is echoed back.
//! - UDP: every datagram is echoed to its sender.
//!
//! Listeners are opened in the pod's namespace by the [`NsWorker`] and served by tandem's own
//! tokio runtime: a pod costs a few tasks and sockets, never a process or a thread. Each request
//! is written to the container's log (CRI log format), so `kubectl logs` shows what was served.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::AbortHandle;

use super::netns::{NetNs, NsWorker};
use crate::runtime::prober::resolve_port;

/// A port the stand-in answers.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Port {
    Tcp(u16),
    Udp(u16),
}

impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Port::Tcp(p) => write!(f, "{p}/TCP"),
            Port::Udp(p) => write!(f, "{p}/UDP"),
        }
    }
}

/// Images whose real containers listen on a port without declaring it: the IIS images serve
/// port 80 (Microsoft's `servercore/iis` runs `ServiceMonitor.exe w3svc`).
const IMAGE_PORTS: [(&str, u16); 2] = [
    ("mcr.microsoft.com/windows/servercore/iis", 80),
    ("mcr.microsoft.com/dotnet/framework/aspnet", 80),
];

/// The ports an emulated container answers, from what is known about the real one:
/// - its declared `ports` (TCP and UDP; SCTP is not emulated);
/// - the ports its `httpGet`/`tcpSocket` probes check (named ports resolved);
/// - `http://*:N/` and `http://+:N/` listener prefixes in its command and arguments (the
///   `System.Net.HttpListener` web servers of the Windows walkthrough declare no port);
/// - the port of the IIS and ASP.NET images (80).
pub fn ports_of(container: &Container) -> BTreeSet<Port> {
    let mut out = BTreeSet::new();
    for p in container.ports.iter().flatten() {
        let Ok(n) = u16::try_from(p.container_port) else {
            continue;
        };
        match p.protocol.as_deref() {
            None | Some("TCP") => out.insert(Port::Tcp(n)),
            Some("UDP") => out.insert(Port::Udp(n)),
            _ => false,
        };
    }
    let probes: [&Option<Probe>; 3] = [
        &container.liveness_probe,
        &container.readiness_probe,
        &container.startup_probe,
    ];
    for probe in probes.into_iter().flatten() {
        let port = probe
            .http_get
            .as_ref()
            .map(|h| &h.port)
            .or(probe.tcp_socket.as_ref().map(|t| &t.port));
        if let Some(n) = port
            .and_then(|p| resolve_port(container, p))
            .and_then(|n| u16::try_from(n).ok())
        {
            out.insert(Port::Tcp(n));
        }
    }
    let words = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten());
    for word in words {
        for prefix in ["http://*:", "http://+:"] {
            let mut rest = word.as_str();
            while let Some(at) = rest.find(prefix) {
                rest = &rest[at + prefix.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(n) = digits.parse::<u16>() {
                    out.insert(Port::Tcp(n));
                }
            }
        }
    }
    let image = container.image.as_deref().unwrap_or_default();
    for (repo, port) in IMAGE_PORTS {
        if image == repo || image.starts_with(&format!("{repo}:")) {
            out.insert(Port::Tcp(port));
        }
    }
    out.retain(|p| !matches!(p, Port::Tcp(0) | Port::Udp(0)));
    out
}

/// What the stand-in says about itself.
#[derive(Clone, Debug)]
pub struct Identity {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub image: String,
    pub node: String,
    /// `10.0.17763.5820` on a Windows node.
    pub windows_build: Option<String>,
}

impl Identity {
    fn header(&self) -> String {
        let mut h = format!(
            "pod={}/{}; container={}; image={}; node={}",
            self.namespace, self.pod, self.container, self.image, self.node
        );
        if let Some(b) = &self.windows_build {
            h.push_str(&format!("; windows-build={b}"));
        }
        h
    }

    fn body(&self, method: &str, path: &str, port: u16) -> String {
        let os = match &self.windows_build {
            Some(b) => format!(", Windows build {b}"),
            None => String::new(),
        };
        format!(
            "emulated by tandem: no process runs in this container.\npod {}/{}, container {}, image {}, node {}{os}\nanswered {method} {path} on port {port}\n",
            self.namespace, self.pod, self.container, self.image, self.node
        )
    }
}

/// A container's log file in the CRI format, appended to by the stand-in.
#[derive(Debug)]
pub struct ContainerLog {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl ContainerLog {
    /// A log that keeps nothing (a runtime without a state directory).
    pub fn discard() -> ContainerLog {
        ContainerLog {
            path: PathBuf::new(),
            file: Mutex::new(None),
        }
    }

    /// Opens (creating) the log at `path`.
    pub fn open(path: &Path) -> io::Result<ContainerLog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(ContainerLog {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one stdout line.
    pub fn line(&self, text: &str) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        let stamp = tandem_core::time::format_rfc3339(secs);
        let stamp = format!("{}.{:09}Z", stamp.trim_end_matches('Z'), now.subsec_nanos());
        let mut guard = match self.file.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(f) = guard.as_mut() {
            let _ = f.write_all(format!("{stamp} stdout F {text}\n").as_bytes());
        }
    }
}

/// The running stand-in of one container; dropping it closes every listener and connection.
#[derive(Debug, Default)]
pub struct StandIn {
    tasks: Vec<AbortHandle>,
    pub ports: Vec<Port>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Opens `ports` in `ns` and serves them until the returned [`StandIn`] is dropped. A port that
/// cannot be opened (two containers of a pod declaring it) is logged and skipped, as a real
/// second listener would fail to bind.
pub async fn start(
    worker: &NsWorker,
    ns: &Arc<NetNs>,
    ports: &BTreeSet<Port>,
    who: Identity,
    log: Arc<ContainerLog>,
) -> StandIn {
    let who = Arc::new(who);
    let mut standin = StandIn::default();
    for &port in ports {
        let opened = match port {
            Port::Tcp(n) => {
                worker
                    .run_in(ns, move || {
                        let l = std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, n))?;
                        l.set_nonblocking(true)?;
                        Ok(Opened::Tcp(l))
                    })
                    .await
            }
            Port::Udp(n) => {
                worker
                    .run_in(ns, move || {
                        let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, n))?;
                        s.set_nonblocking(true)?;
                        Ok(Opened::Udp(s))
                    })
                    .await
            }
        };
        let task = match opened {
            Ok(Opened::Tcp(l)) => match tokio::net::TcpListener::from_std(l) {
                Ok(l) => tokio::spawn(serve_tcp(l, who.clone(), log.clone())),
                Err(e) => {
                    log.line(&format!("emulated stand-in: cannot serve {port}: {e}"));
                    continue;
                }
            },
            Ok(Opened::Udp(s)) => match tokio::net::UdpSocket::from_std(s) {
                Ok(s) => tokio::spawn(serve_udp(s, log.clone())),
                Err(e) => {
                    log.line(&format!("emulated stand-in: cannot serve {port}: {e}"));
                    continue;
                }
            },
            Err(e) => {
                log.line(&format!("emulated stand-in: cannot listen on {port}: {e}"));
                continue;
            }
        };
        standin.tasks.push(task.abort_handle());
        standin.ports.push(port);
    }
    let list: Vec<String> = standin.ports.iter().map(Port::to_string).collect();
    log.line(&format!(
        "emulated by tandem: no process runs; a stand-in answers {}",
        if list.is_empty() {
            "no port (the container declares none)".to_string()
        } else {
            format!("port(s) {}", list.join(", "))
        }
    ));
    standin
}

enum Opened {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

async fn serve_tcp(listener: tokio::net::TcpListener, who: Arc<Identity>, log: Arc<ContainerLog>) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        tokio::spawn(serve_connection(
            stream,
            peer,
            port,
            who.clone(),
            log.clone(),
        ));
    }
}

/// How long a connection may stay idle, and how much one request head may take.
const IDLE: Duration = Duration::from_secs(60);
const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1024 * 1024;
const MAX_REQUESTS: usize = 100_000;

const METHODS: [&str; 9] = [
    "GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT ",
];

async fn serve_connection(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    port: u16,
    who: Arc<Identity>,
    log: Arc<ContainerLog>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut served = 0usize;
    loop {
        // Read until a request head is complete (or the client is not speaking HTTP).
        let head_end = loop {
            if let Some(end) = find_head_end(&buf) {
                break Some(end);
            }
            let looks_http = METHODS
                .iter()
                .any(|m| buf.starts_with(m.as_bytes()) || m.as_bytes().starts_with(&buf));
            if !buf.is_empty() && !looks_http {
                break None;
            }
            if buf.len() > MAX_HEAD {
                return;
            }
            match tokio::time::timeout(IDLE, stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let Some(end) = head_end else {
            echo(stream, buf, peer, port, &log).await;
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default().to_string();
        let mut parts = request_line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or("/").to_string();
        let version = parts.next().unwrap_or("HTTP/1.0").to_string();
        let mut length = 0usize;
        let mut close = version == "HTTP/1.0";
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("connection") {
                if v.eq_ignore_ascii_case("close") {
                    close = true;
                } else if v.eq_ignore_ascii_case("keep-alive") {
                    close = false;
                }
            }
        }
        if length > MAX_BODY {
            return;
        }
        while buf.len() < length {
            match tokio::time::timeout(IDLE, stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..length);
        let body = who.body(&method, &path, port);
        let mut response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nX-Tandem-Emulated: {}\r\nContent-Length: {}\r\n{}\r\n",
            who.header(),
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if method != "HEAD" {
            response.push_str(&body);
        }
        log.line(&format!(
            "emulated stand-in: {peer} {method} {path} {version} on port {port} -> 200"
        ));
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
        served += 1;
        if close || served >= MAX_REQUESTS {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Echoes a non-HTTP TCP stream until the client closes it or stays idle.
async fn echo(
    mut stream: tokio::net::TcpStream,
    first: Vec<u8>,
    peer: SocketAddr,
    port: u16,
    log: &ContainerLog,
) {
    log.line(&format!(
        "emulated stand-in: {peer} connected to TCP port {port} (not HTTP: echoing)"
    ));
    if stream.write_all(&first).await.is_err() {
        return;
    }
    let mut chunk = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(IDLE, stream.read(&mut chunk)).await {
        if n == 0 || stream.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

async fn serve_udp(socket: tokio::net::UdpSocket, log: Arc<ContainerLog>) {
    let port = socket.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut buf = vec![0u8; 2048];
    let mut logged = 0u32;
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if logged < 1000 {
            logged += 1;
            log.line(&format!(
                "emulated stand-in: {peer} sent {n} bytes to UDP port {port} (echoed)"
            ));
        }
        let _ = socket.send_to(&buf[..n], peer).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(json: serde_json::Value) -> Container {
        serde_json::from_value(json).expect("container")
    }

    #[test]
    fn the_walkthrough_web_server_answers_port_80_from_its_listener_prefix() {
        let c = container(serde_json::json!({
            "name": "windowswebserver",
            "image": "mcr.microsoft.com/windows/servercore:ltsc2019",
            "command": ["powershell.exe", "-command",
                "$listener = New-Object System.Net.HttpListener ; $listener.Prefixes.Add('http://*:80/') ; $listener.Start()"]
        }));
        assert_eq!(ports_of(&c), BTreeSet::from([Port::Tcp(80)]));
    }

    #[test]
    fn declared_ports_probe_ports_and_iis_images_are_answered() {
        let c = container(serde_json::json!({
            "name": "iis",
            "image": "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019",
            "ports": [{"containerPort": 53, "protocol": "UDP"}, {"name": "admin", "containerPort": 8172}],
            "readinessProbe": {"httpGet": {"port": "admin", "path": "/"}},
            "livenessProbe": {"tcpSocket": {"port": 9000}}
        }));
        assert_eq!(
            ports_of(&c),
            BTreeSet::from([
                Port::Udp(53),
                Port::Tcp(80),
                Port::Tcp(8172),
                Port::Tcp(9000)
            ])
        );
    }

    #[test]
    fn sctp_and_out_of_range_ports_are_not_emulated() {
        let c = container(serde_json::json!({
            "name": "c", "image": "busybox",
            "ports": [{"containerPort": 99999}, {"containerPort": 7, "protocol": "SCTP"}]
        }));
        assert!(ports_of(&c).is_empty());
    }
}
