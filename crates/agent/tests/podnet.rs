//! The pod network of an emulated node, against the kernel (needs root; skipped without it):
//! namespaces, veth pairs and addresses that the host reaches, stand-ins that answer from
//! inside a pod, a pod reaching another, cleanup on detach and shutdown. Traffic goes only to
//! addresses in namespaces this test creates, on a pod range of its own.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tandem_agent::podnet::standin::{ContainerLog, Identity, Port};
use tandem_agent::podnet::{EmulatedNetwork, NetworkSpec, netns};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn links() -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn who(pod: &str) -> Identity {
    Identity {
        namespace: "default".into(),
        pod: pod.into(),
        container: "web".into(),
        image: "mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022".into(),
        node: "podnet-test".into(),
        windows_build: Some("10.0.20348.1".into()),
    }
}

async fn get(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::other("connect timed out"))??;
    s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(3), s.read_to_string(&mut out))
        .await
        .map_err(|_| std::io::Error::other("read timed out"))??;
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_reachable_addresses_and_stand_ins_and_leave_nothing_behind() {
    if !netns::can_manage_networks() {
        eprintln!("skipped: needs CAP_NET_ADMIN and CAP_SYS_ADMIN");
        return;
    }
    let spec = NetworkSpec {
        node_name: "podnet-test".into(),
        pod_cidr: "10.250.7.0/24".into(),
        cluster_cidr: Some("10.250.0.0/16".into()),
        windows: true,
    };
    let net = EmulatedNetwork::start(&spec).await.unwrap();
    assert!(links().contains(net.bridge()));
    let mut pods = Vec::new();
    for i in 0..5u8 {
        let ip = Ipv4Addr::new(10, 250, 7, 10 + i);
        let pod = net.attach(&format!("sandbox-{i}"), ip).await.unwrap();
        assert_eq!(pod.ip, ip);
        pods.push(pod);
    }
    // Attaching again is idempotent.
    let again = net
        .attach("sandbox-0", Ipv4Addr::new(10, 250, 7, 10))
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&again, &pods[0]));
    assert_eq!(net.pod_count(), 5);

    // A stand-in answers from inside the pod; the host reaches it on the pod's address.
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(ContainerLog::open(&dir.path().join("web.log")).unwrap());
    pods[0]
        .start_standin(
            "c0",
            &BTreeSet::from([Port::Tcp(80), Port::Udp(53)]),
            who("web-0"),
            log.clone(),
        )
        .await;
    let answer = get("10.250.7.10:80".parse().unwrap()).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(
        answer.contains("X-Tandem-Emulated: pod=default/web-0"),
        "{answer}"
    );
    assert!(answer.contains("Windows build 10.0.20348.1"), "{answer}");
    assert!(
        answer.contains("answered GET /hello on port 80"),
        "{answer}"
    );
    let logged = std::fs::read_to_string(dir.path().join("web.log")).unwrap();
    assert!(logged.contains(" stdout F emulated stand-in: "), "{logged}");
    assert!(
        logged.contains("GET /hello HTTP/1.0 on port 80 -> 200"),
        "{logged}"
    );

    // Another pod reaches it from its own namespace: TCP, and UDP echo.
    let from_pod = pods[1]
        .tcp_connect("10.250.7.10:80".parse().unwrap(), Duration::from_secs(3))
        .await;
    assert!(from_pod.is_ok(), "{from_pod:?}");
    let udp = pods[1].udp_socket().await.unwrap();
    udp.send_to(b"ping", "10.250.7.10:53").await.unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = tokio::time::timeout(Duration::from_secs(3), udp.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&buf[..n], b"ping");
    // ICMP within the pod network is answered; outside it, a Windows pod gets no answer.
    let echo = pods[1]
        .icmp_echo(Ipv4Addr::new(10, 250, 7, 10), 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(echo.is_some());
    let outside = pods[1]
        .icmp_echo(Ipv4Addr::new(192, 0, 2, 1), 1, Duration::from_millis(100))
        .await;
    assert_eq!(
        outside.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::PermissionDenied)
    );

    // A stopped stand-in refuses connections again; a detached pod's veth is gone.
    pods[0].stop_standin("c0");
    assert!(get("10.250.7.10:80".parse().unwrap()).await.is_err());
    let veth = pods[2].host_if.clone();
    assert!(links().contains(&veth));
    net.detach("sandbox-2").await;
    assert!(!links().contains(&veth));

    let veths: Vec<String> = pods.iter().map(|p| p.host_if.clone()).collect();
    net.shutdown().await;
    drop(pods);
    drop(again);
    let left = links();
    assert!(!left.contains(net.bridge()), "{left}");
    for v in veths {
        assert!(!left.contains(&v), "{v} left behind: {left}");
    }
}
