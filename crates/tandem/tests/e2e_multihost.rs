//! End-to-end on `tandem up --multi-host` (issue 33): two Linux hosts with real containers and
//! one emulated Windows host, each a network namespace of its own with its own `tandem agent`,
//! linked by the VXLAN pod network. One cluster serves every check, in order: pod to pod across
//! hosts both ways, a Service and cluster DNS from each host, a NodePort on the host without
//! the endpoint, a NetworkPolicy enforced on one host against pods of another, a host cut off
//! (its link down: `Unknown`, tainted unreachable, its pods evicted after the short
//! `--default-unreachable-toleration-seconds` of this cluster) and restored, and a clean
//! machine after stop.
//! Needs root and the packages and images the test command installs and builds; traffic goes
//! only to addresses in the namespaces tandem makes.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(180);
const UNDERLAY: &str = "172.30.251.0/24";
const L1: &str = "linux-1";
const L2: &str = "linux-2";
const W1: &str = "windows-2022-1";

fn pod(name: &str, node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: mh, host: {node}}}}}
spec:
  nodeName: {node}
  containers:
  - name: web
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo served by {name} > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{{containerPort: 8080}}]
"#
    )
}

const SERVICES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: mh}
spec:
  selector: {app: mh}
  ports: [{port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: only-one}
spec:
  type: NodePort
  selector: {app: mh, host: linux-1}
  ports: [{port: 8080, targetPort: 8080}]
"#;

/// Whether this process runs as root (`/proc/self` belongs to the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

const POLICY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: friends-only}
spec:
  podSelector: {matchLabels: {host: linux-1}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: friend}}}]
"#;

fn ip_cmd(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn http_get(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

fn pod_ip(s: &Server, name: &str) -> String {
    s.eventually(&format!("{name} running with an IP"), LONG, || {
        let p = s.get_json(&["pod", name])?;
        (p["status"]["phase"] == "Running")
            .then(|| p["status"]["podIP"].as_str().map(str::to_string))
            .flatten()
    })
}

fn ready(node: &Value) -> Option<&str> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
}

/// `wget` from inside `pod`, retried (bounded) until it answers with `want`.
fn fetch_from(s: &Server, pod: &str, url: &str, want: &str) {
    s.eventually(&format!("{pod} gets {want} from {url}"), LONG, || {
        let out = s.kubectl(&["exec", pod, "--", "wget", "-q", "-T", "3", "-O", "-", url]);
        out.stdout.contains(want).then_some(())
    });
}

#[test]
fn pods_services_and_node_ports_span_hosts_and_a_lost_host_comes_back() {
    if !is_root() {
        eprintln!("skipped: --multi-host needs root");
        return;
    }
    let mut s = Server::start_up_with(&[
        "--multi-host",
        "--multi-host-underlay",
        UNDERLAY,
        "--pod-network-backend",
        "vxlan",
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=2,windows-2022=1",
        "--cluster-cidr",
        "10.236.0.0/16",
        // A short toleration so that a lost host's pods are evicted within the test. The
        // grace period stays upstream's 40s: with 10 s lease renewals on this busy 2-core
        // machine a shorter one marked healthy hosts Unknown (and their pods NotReady).
        "--default-unreachable-toleration-seconds",
        "5",
    ]);
    for node in [L1, L2, W1] {
        s.eventually(&format!("node {node} Ready"), LONG, || {
            let n = s.get_json(&["node", node])?;
            (ready(&n) == Some("True")).then_some(())
        });
        assert!(
            ip_cmd(&["netns", "list"]).contains(&format!("tandem-{node}")),
            "each node is a host of its own"
        );
    }
    // The Linux hosts publish their VXLAN devices for each other.
    for node in [L1, L2] {
        let n = s.get_json(&["node", node]).unwrap();
        let mac = &n["metadata"]["annotations"]["node.tandem.dev/pod-network-vtep-mac"];
        assert!(mac.as_str().is_some_and(|m| m.len() == 17), "{n}");
        let runtime = n["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap();
        assert!(runtime.starts_with("containerd://"), "{runtime}");
    }

    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &(pod("a", L1) + "---" + &pod("b", L2)),
    )
    .ok();
    s.kubectl_stdin(&["apply", "-f", "-"], SERVICES).ok();
    let ip_a = pod_ip(&s, "a");
    let ip_b = pod_ip(&s, "b");
    assert!(
        ip_a.starts_with("10.236.0.") && ip_b.starts_with("10.236.1."),
        "{ip_a} {ip_b}"
    );

    // Pod to pod across hosts, both ways, through the tunnel.
    fetch_from(&s, "a", &format!("http://{ip_b}:8080/"), "served by b");
    fetch_from(&s, "b", &format!("http://{ip_a}:8080/"), "served by a");
    // A Service with an endpoint on each host, by cluster DNS name, from each host.
    for from in ["a", "b"] {
        for target in ["served by a", "served by b"] {
            fetch_from(
                &s,
                from,
                "http://mh.default.svc.cluster.local:8080/",
                target,
            );
        }
    }
    // The NodePort of a Service whose only endpoint is on linux-1, on linux-2's address.
    let port = s
        .get_json(&["service", "only-one"])
        .and_then(|v| v["spec"]["ports"][0]["nodePort"].as_u64())
        .unwrap();
    let l2 = s.get_json(&["node", L2]).unwrap();
    let l2_ip = l2["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap()
        .to_string();
    assert!(l2_ip.starts_with("172.30.251."), "{l2_ip}");
    s.eventually(
        "the NodePort on the host without the endpoint",
        LONG,
        || http_get(&format!("{l2_ip}:{port}")).filter(|b| b.contains("served by a")),
    );

    // NetworkPolicy across hosts: only pods labelled role=friend may reach a; the policy is
    // enforced on linux-1 and sees linux-2's pods by their own addresses (no masquerade).
    let friend = pod("c", L2).replace("host: linux-2}", "host: linux-2, role: friend}");
    s.kubectl_stdin(&["apply", "-f", "-"], &friend).ok();
    pod_ip(&s, "c");
    s.kubectl_stdin(&["apply", "-f", "-"], POLICY).ok();
    fetch_from(&s, "c", &format!("http://{ip_a}:8080/"), "served by a");
    s.eventually("b refused by the policy on the other host", LONG, || {
        let out = s.kubectl(&[
            "exec",
            "b",
            "--",
            "wget",
            "-q",
            "-T",
            "2",
            "-O",
            "-",
            &format!("http://{ip_a}:8080/"),
        ]);
        (!out.success()).then_some(())
    });
    fetch_from(&s, "c", &format!("http://{ip_a}:8080/"), "served by a");
    s.kubectl(&["delete", "networkpolicy", "friends-only"]);
    fetch_from(&s, "b", &format!("http://{ip_a}:8080/"), "served by a");

    // linux-2 cut off: Unknown after the grace period, tainted unreachable, its pods evicted
    // after their 5 s toleration; back when its link is up again.
    let b_tolerations = s.get_json(&["pod", "b"]).unwrap()["spec"]["tolerations"].clone();
    assert!(
        b_tolerations
            .to_string()
            .contains(r#""tolerationSeconds":5"#),
        "{b_tolerations}"
    );
    let cut = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("tandem-{L2}"),
            "ip",
            "link",
            "set",
            "eth0",
            "down",
        ])
        .status()
        .unwrap();
    assert!(cut.success());
    s.eventually("linux-2 Unknown and tainted unreachable", LONG, || {
        let n = s.get_json(&["node", L2])?;
        let tainted = n["spec"]["taints"]
            .as_array()?
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unreachable");
        (ready(&n) == Some("Unknown") && tainted).then_some(())
    });
    s.eventually("b evicted from the lost host", LONG, || {
        match s.get_json(&["pod", "b"]) {
            None => Some(()),
            Some(p) => p["metadata"]["deletionTimestamp"].is_string().then_some(()),
        }
    });
    let up = Command::new("ip")
        .args([
            "netns",
            "exec",
            &format!("tandem-{L2}"),
            "ip",
            "link",
            "set",
            "eth0",
            "up",
        ])
        .status()
        .unwrap();
    assert!(up.success());
    s.eventually("linux-2 Ready again", LONG, || {
        let n = s.get_json(&["node", L2])?;
        (ready(&n) == Some("True")).then_some(())
    });
    // A new pod there is reachable across hosts again.
    s.kubectl_stdin(&["apply", "-f", "-"], &pod("d", L2)).ok();
    let ip_d = pod_ip(&s, "d");
    fetch_from(&s, "a", &format!("http://{ip_d}:8080/"), "served by d");

    // Stop: nothing of the hosts is left on the machine.
    s.terminate();
    let netns = ip_cmd(&["netns", "list"]);
    for node in [L1, L2, W1] {
        assert!(!netns.contains(&format!("tandem-{node}")), "{netns}");
    }
    let links = ip_cmd(&["-o", "link", "show"]);
    assert!(
        !links.contains("tdmu") && !links.contains("tdmh"),
        "{links}"
    );
    assert!(!ip_cmd(&["-o", "addr", "show"]).contains("172.30.251."));
}
