//! The kubelet prober's network checks (`pkg/probe/http`, `pkg/probe/tcp`), shared by every
//! runtime whose pods have an address: an `httpGet` probe succeeds on a status in 200..400, a
//! `tcpSocket` probe when the connection opens. An `HTTPS` probe does not verify the server's
//! certificate (the kubelet's `InsecureSkipVerify`), so a self-signed serving certificate passes.
//! Failure messages are the kubelet's, as its `Unhealthy` events show them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use rustls::pki_types::ServerName;
use tandem_netproxy::tls::AnyServerCert;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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
        let target = probe_target(host, spec, get);
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

/// The URL the kubelet names in a failed probe's message.
fn probe_target(host: &str, spec: &Container, get: &HTTPGetAction) -> String {
    let port = resolve_port(spec, &get.port).unwrap_or(0);
    let host = get.host.as_deref().unwrap_or(host);
    let scheme = if is_https(get) { "https" } else { "http" };
    format!("{scheme}://{host}:{port}{}", request_path(get))
}

fn is_https(get: &HTTPGetAction) -> bool {
    get.scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
}

fn request_path(get: &HTTPGetAction) -> String {
    let path = get.path.as_deref().unwrap_or("/");
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// An HTTP/1.1 GET as the kubelet's prober sends it (`User-Agent: kube-probe/1.33`), over TLS
/// without certificate verification for `scheme: HTTPS`; returns the status code.
pub async fn http_get(
    host: &str,
    spec: &Container,
    get: &HTTPGetAction,
    timeout: Duration,
) -> Result<u16, String> {
    let host = get.host.clone().unwrap_or_else(|| host.to_string());
    let port =
        resolve_port(spec, &get.port).ok_or_else(|| format!("unknown port {:?}", get.port))?;
    let path = request_path(get);
    let addr = format!("{host}:{port}");
    let work = async {
        let tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| format!("dial tcp {addr}: connect: {e}"))?;
        if !is_https(get) {
            return send_get(tcp, &addr, &path, get).await;
        }
        let name = ServerName::try_from(host.clone()).map_err(|e| format!("tls: {e}"))?;
        let tls = tls_connector()?
            .connect(name, tcp)
            .await
            .map_err(|e| format!("remote error: tls: {e}"))?;
        send_get(tls, &addr, &path, get).await
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => {
            Err("context deadline exceeded (Client.Timeout exceeded while awaiting headers)".into())
        }
    }
}

/// A TLS client that accepts any server certificate, as the kubelet's HTTPS prober does.
fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Writes the probe's request on `s` and reads the status code of the answer.
async fn send_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    addr: &str,
    path: &str,
    get: &HTTPGetAction,
) -> Result<u16, String> {
    {
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
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test set-up fails loudly")]
mod tests {
    use super::*;
    use rustls::pki_types::PrivateKeyDer;
    use tokio::net::TcpListener;

    /// A server on loopback answering every connection with `status`, over TLS with a
    /// self-signed certificate when `tls`.
    async fn server(tls: bool, status: u16) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cert = rcgen::generate_simple_self_signed(vec!["self-signed.test".into()]).unwrap();
        let key = PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                if tls {
                    if let Ok(mut s) = acceptor.accept(tcp).await {
                        let mut buf = [0u8; 512];
                        let _ = s.read(&mut buf).await;
                        let _ = s.write_all(answer.as_bytes()).await;
                        let _ = s.shutdown().await;
                    }
                } else {
                    let mut s = tcp;
                    let mut buf = [0u8; 512];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(answer.as_bytes()).await;
                }
            }
        });
        port
    }

    fn probe(scheme: &str, port: u16) -> (Container, Probe) {
        let get = HTTPGetAction {
            scheme: Some(scheme.into()),
            port: IntOrString::Int(port.into()),
            path: Some("readyz".into()),
            ..HTTPGetAction::default()
        };
        let probe = Probe {
            http_get: Some(get),
            ..Probe::default()
        };
        (Container::default(), probe)
    }

    #[tokio::test]
    async fn https_probe_accepts_a_self_signed_certificate() {
        let port = server(true, 200).await;
        let (c, p) = probe("HTTPS", port);
        let got = network_probe("127.0.0.1", &c, &p, Duration::from_secs(5)).await;
        assert!(matches!(got, ProbeResult::Success), "{got:?}");
    }

    #[tokio::test]
    async fn https_probe_reports_the_status_code_and_the_https_url() {
        let port = server(true, 503).await;
        let (c, p) = probe("HTTPS", port);
        let got = network_probe("127.0.0.1", &c, &p, Duration::from_secs(5)).await;
        match got {
            ProbeResult::Failure(m) => assert_eq!(m, "HTTP probe failed with statuscode: 503"),
            other => panic!("{other:?}"),
        }
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = closed.local_addr().unwrap().port();
        drop(closed);
        let (c, p) = probe("HTTPS", dead);
        match network_probe("127.0.0.1", &c, &p, Duration::from_secs(5)).await {
            ProbeResult::Failure(m) => assert!(
                m.starts_with(&format!(
                    "Get \"https://127.0.0.1:{dead}/readyz\": dial tcp"
                )),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn plain_http_probe_still_works() {
        let port = server(false, 204).await;
        let (c, p) = probe("HTTP", port);
        let got = network_probe("127.0.0.1", &c, &p, Duration::from_secs(5)).await;
        assert!(matches!(got, ProbeResult::Success), "{got:?}");
    }
}
