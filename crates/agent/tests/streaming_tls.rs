//! The API server and a node agent's streaming server over TLS, end to end: `pods/log` and
//! `pods/exec` (websocket `v4.channel.k8s.io`) through an in-process API server to an emulated
//! node's agent, which serves only the API server's client certificate.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, LogParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tandem_agent::NodeConfig;
use tandem_apiserver::ApiServer;
use tandem_test_support::{TestServer, within};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An emulated Linux node `node-a` on 127.0.0.1 whose agent trusts the server's CA, and a
/// running pod `web` on it.
async fn node_with_a_running_pod(server: &ApiServer, client: &Client) -> Api<Pod> {
    let mut cfg = NodeConfig::linux("node-a");
    cfg.internal_ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    cfg.image_bandwidth = 10_000_000_000;
    cfg.cluster_ca_pem = Some(server.pki.ca_pem.clone());
    tokio::spawn(tandem_agent::run(client.clone(), cfg));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "nginx:1.27"}]}
    }))
    .expect("pod fixture");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    within(20, "web Running", async {
        loop {
            let phase = pods.get("web").await.ok().and_then(|p| p.status?.phase);
            if phase.as_deref() == Some("Running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    pods
}

/// One websocket `v4.channel.k8s.io` exec through the API server (admin token, ALPN
/// `http/1.1`); returns what the command wrote to stdout.
async fn websocket_exec(server: &ApiServer, pod: &str, command: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(server.pki.ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(server.local_addr)
        .await
        .expect("connect");
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .expect("TLS");
    let request = format!(
        "GET /api/v1/namespaces/default/pods/{pod}/exec?command={command}&stdout=true HTTP/1.1\r\n\
         Host: {}\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
        server.local_addr,
        server.pki.admin_token()
    );
    stream.write_all(request.as_bytes()).await.expect("write");

    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        read_more(&mut stream, &mut buf).await;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut rest = buf.split_off(head_end);

    // Server frames are unmasked: FIN/opcode, length (7 bits, or 126 + 16 bits), payload whose
    // first byte is the channel (1 stdout, 3 the exec's status).
    let mut stdout = Vec::new();
    loop {
        while rest.len() < 2 {
            read_more(&mut stream, &mut rest).await;
        }
        let opcode = rest[0] & 0x0f;
        let (len, header) = match rest[1] & 0x7f {
            126 => {
                while rest.len() < 4 {
                    read_more(&mut stream, &mut rest).await;
                }
                (usize::from(u16::from_be_bytes([rest[2], rest[3]])), 4)
            }
            n => (usize::from(n), 2),
        };
        while rest.len() < header + len {
            read_more(&mut stream, &mut rest).await;
        }
        let payload: Vec<u8> = rest.drain(..header + len).skip(header).collect();
        match (opcode, payload.first()) {
            (0x8, _) => break,
            (0x2, Some(1)) => stdout.extend_from_slice(&payload[1..]),
            (0x2, Some(3)) if payload.len() > 1 => break,
            _ => {}
        }
    }
    String::from_utf8_lossy(&stdout).into_owned()
}

async fn read_more(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    let n = within(20, "bytes from the server", stream.read(&mut chunk))
        .await
        .expect("read");
    assert!(n > 0, "the connection closed early");
    buf.extend_from_slice(&chunk[..n]);
}

#[test]
fn the_agent_serves_the_user_the_api_server_presents() {
    assert_eq!(
        tandem_agent::server::APISERVER_CLIENT_CN,
        tandem_apiserver::node_proxy::kubelet_client::KUBELET_CLIENT_CN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_exec_reach_the_agent_through_the_api_server_over_tls() {
    let ts = TestServer::start().await.expect("server");
    let (server, client) = (&ts.server, ts.client.clone());
    let pods = node_with_a_running_pod(server, &client).await;

    // The emulated runtime keeps no logs off the pod network: its refusal is the agent's
    // answer, so the request went through TLS and authorization.
    let err = within(20, "logs", pods.logs("web", &LogParams::default()))
        .await
        .expect_err("emulated logs are refused");
    let kube::Error::Api(status) = err else {
        panic!("not an API error: {err:?}");
    };
    assert_eq!(status.code, 400, "{status:?}");
    assert!(
        status.message.contains("its runtime is emulated"),
        "{status:?}"
    );

    let out = within(20, "exec", websocket_exec(server, "web", "hostname")).await;
    assert!(out.contains("web"), "{out:?}");
}
