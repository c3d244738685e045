//! The kubelet prober's network checks (`pkg/probe/http`, `pkg/probe/tcp`), shared by every
//! runtime whose pods have an address: an `httpGet` probe succeeds on a status in 200..400, a
//! `tcpSocket` probe when the connection opens. Failure messages are the kubelet's, as its
//! `Unhealthy` events show them.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ProbeResult;

/// Runs an `httpGet` or `tcpSocket` probe against `host` (the pod's address); `Success` for a
/// probe with neither (exec probes are the runtime's own; gRPC is refused).
pub async fn network_probe(
    host: &str,
    spec: &Container,
    probe: &Probe,
    timeout: Duration,
) -> ProbeResult {
    if let Some(get) = &probe.http_get {
        let target = probe_target(host, spec, &get.port, get.path.as_deref());
        return match http_get(host, spec, get, timeout).await {
            Ok(code) if (200..400).contains(&code) => ProbeResult::Success,
            Ok(code) => ProbeResult::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Err(e) => ProbeResult::Failure(format!("Get \"{target}\": {e}")),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = resolve_port(spec, &tcp.port) else {
            return ProbeResult::Failure(format!("unknown port {:?}", tcp.port));
        };
        let addr = format!("{}:{port}", tcp.host.clone().unwrap_or(host.to_string()));
        return match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => ProbeResult::Success,
            Ok(Err(e)) => ProbeResult::Failure(format!("dial tcp {addr}: connect: {e}")),
            Err(_) => ProbeResult::Failure(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if probe.grpc.is_some() {
        return ProbeResult::Failure("gRPC probes are not supported by tandem yet".into());
    }
    ProbeResult::Success
}

/// A port number, or a named container port looked up in the container's ports.
pub fn resolve_port(spec: &Container, port: &IntOrString) -> Option<i32> {
    match port {
        IntOrString::Int(p) => Some(*p),
        IntOrString::String(name) => name.parse().ok().or_else(|| {
            spec.ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
        }),
    }
}

fn probe_target(host: &str, spec: &Container, port: &IntOrString, path: Option<&str>) -> String {
    let port = resolve_port(spec, port).unwrap_or(0);
    let path = path.unwrap_or("/");
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    format!("http://{host}:{port}{path}")
}

/// An HTTP/1.1 GET as the kubelet's prober sends it (`User-Agent: kube-probe/1.33`); returns
/// the status code. HTTPS is not supported.
pub async fn http_get(
    host: &str,
    spec: &Container,
    get: &HTTPGetAction,
    timeout: Duration,
) -> Result<u16, String> {
    if get.scheme.as_deref() == Some("HTTPS") {
        return Err("HTTPS probes are not supported by tandem yet".into());
    }
    let host = get.host.clone().unwrap_or_else(|| host.to_string());
    let port =
        resolve_port(spec, &get.port).ok_or_else(|| format!("unknown port {:?}", get.port))?;
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let addr = format!("{host}:{port}");
    let work = async {
        let mut s = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("dial tcp {addr}: connect: {e}"))?;
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for h in get.http_headers.iter().flatten() {
            req.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = vec![0u8; 256];
        let mut got = 0;
        while got < 12 {
            let n = s
                .read(&mut buf[got..])
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        let head = String::from_utf8_lossy(&buf[..got]);
        head.split(' ')
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| "malformed HTTP response".to_string())
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => {
            Err("context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into())
        }
    }
}
