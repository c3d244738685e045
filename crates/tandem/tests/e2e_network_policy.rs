//! End-to-end: NetworkPolicy is enforced on the node with real containers. `tandem up
//! --linux-runtime cri` with busybox web servers and client pods; connections between pods are
//! tried with busybox `wget` from inside the pods, and from the host (the node) to check that
//! the node's own traffic (probes) always passes, as upstream semantics and most CNIs have it.
//! The enforcement's nftables table (`inet tandem-netpol-<bridge>`) is removed when tandem
//! stops. Traffic goes only between pods of this cluster and from the host to them.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::Server;

const LONG: Duration = Duration::from_secs(120);
/// How long a policy change may take to reach the kernel and show in a connection attempt.
const CONVERGE: Duration = Duration::from_secs(45);

/// Busybox web servers `web` (app=web) and `db` (app=db), and clients `client` (role=client)
/// and `other` (role=other), all on the Linux node.
const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo web > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /index.html, port: http}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: db, labels: {app: db}}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo db > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, labels: {role: client}}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Pod
metadata: {name: other, labels: {role: other}}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"#;

const DEFAULT_DENY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny}
spec:
  podSelector: {}
  policyTypes: [Ingress]
"#;

const ALLOW_CLIENT: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-client}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: http}]
"#;

const CLIENT_EGRESS_DENY: &str = r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: client-egress-deny}
spec:
  podSelector: {matchLabels: {role: client}}
  policyTypes: [Egress]
"#;

/// A pod on the emulated Windows node that the `web-from-client` policy selects.
const WINDOWS_WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: iis, labels: {app: web}}
spec:
  nodeSelector: {kubernetes.io/os: windows}
  tolerations: [{key: os, operator: Equal, value: windows, effect: NoSchedule}]
  containers:
  - name: iis
    image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019
    ports: [{containerPort: 80}]
"#;

fn start() -> Server {
    Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1,windows-2019=1",
        "--cluster-cidr",
        "10.254.0.0/16",
        "--service-cidr",
        "10.134.0.0/16",
        "--dns-upstream",
        "none",
        "--emulated-pod-network",
        "off",
        "--ingress=false",
    ])
}

fn pod_ip(s: &Server, pod: &str) -> String {
    s.eventually(&format!("{pod} running with an address"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        if p["status"]["phase"] != "Running" {
            return None;
        }
        p["status"]["podIP"].as_str().map(str::to_string)
    })
}

fn ready(s: &Server, pod: &str) -> bool {
    s.get_json(&["pod", pod])
        .and_then(|p| p["status"]["conditions"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether `from` (a pod) gets the page of the web server at `ip`.
fn reaches(s: &Server, from: &str, ip: &str) -> bool {
    let url = format!("http://{ip}:8080/index.html");
    let out = s.kubectl_full(
        &["exec", from, "--", "wget", "-qO-", "-T", "3", &url],
        None,
        &[],
        Duration::from_secs(30),
    );
    out.success() && !out.stdout.trim().is_empty()
}

/// Waits until `from` → `ip` is allowed (`true`) or blocked (`false`), then checks it stays so
/// on a second try.
#[track_caller]
fn expect(s: &Server, from: &str, ip: &str, allowed: bool) {
    let what = format!(
        "{from} -> {ip}:8080 {}",
        if allowed { "allowed" } else { "blocked" }
    );
    s.eventually(&what, CONVERGE, || {
        (reaches(s, from, ip) == allowed).then_some(())
    });
    assert_eq!(reaches(s, from, ip), allowed, "{what} did not hold");
}

/// One HTTP/1.0 GET from the host (the node itself); the body, or `None`.
fn host_get(ip: &str) -> Option<String> {
    let addr: SocketAddr = format!("{ip}:8080").parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /index.html HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.trim().to_string())
}

/// The enforcement's table, from the line `tandem up` prints.
fn netpol_table(s: &Server) -> String {
    let log = s.log();
    let marker = "nftables table inet ";
    let at = log
        .find(marker)
        .unwrap_or_else(|| panic!("tandem up names its NetworkPolicy table:\n{log}"));
    log[at + marker.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `nft list table inet TABLE`, or `None` when there is no such table.
fn listing(table: &str) -> Option<String> {
    let out = Command::new("nft")
        .args(["list", "table", "inet", table])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn apply(s: &Server, manifest: &str) {
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
}

#[test]
fn network_policies_isolate_pods_on_the_real_node() {
    let mut s = start();
    apply(&s, PODS);
    let web = pod_ip(&s, "web");
    let db = pod_ip(&s, "db");
    let client = pod_ip(&s, "client");
    pod_ip(&s, "other");
    assert!(web.starts_with("10.254."), "{web}");
    let table = netpol_table(&s);
    assert!(table.starts_with("tandem-netpol-"), "{table}");
    s.eventually("the NetworkPolicy table in the kernel", LONG, || {
        listing(&table)
    });

    // No policy: everything flows.
    expect(&s, "client", &web, true);
    expect(&s, "other", &web, true);
    expect(&s, "client", &db, true);

    // Default deny for ingress in the namespace: pods no longer reach each other, but the
    // node still does (the readiness probe keeps passing, and so does a GET from the host).
    apply(&s, DEFAULT_DENY);
    expect(&s, "client", &web, false);
    expect(&s, "other", &web, false);
    expect(&s, "client", &db, false);
    assert_eq!(
        host_get(&web).as_deref(),
        Some("web"),
        "the node reaches its pod"
    );
    // Every pod has the same verdict: they share one chain.
    let list = listing(&table).unwrap();
    assert!(list.contains(&format!("{web} : jump ingress-")), "{list}");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        ready(&s, "web"),
        "probes from the node pass under default deny"
    );

    // A rule for the web server: clients (by pod selector, on the named port) get in, others
    // stay out.
    apply(&s, ALLOW_CLIENT);
    expect(&s, "client", &web, true);
    expect(&s, "other", &web, false);
    expect(&s, "client", &db, false);

    // Egress isolation of the client blocks what the web server's ingress would allow; removing
    // it opens the way again.
    apply(&s, CLIENT_EGRESS_DENY);
    expect(&s, "client", &web, false);
    let list = listing(&table).unwrap();
    assert!(
        list.contains(&format!("{client} : jump egress-{client}")),
        "{list}"
    );
    s.kubectl(&["delete", "networkpolicy", "client-egress-deny"])
        .ok();
    expect(&s, "client", &web, true);

    // ipBlock with except: the db accepts the pod range except the client's address.
    s.kubectl(&["delete", "networkpolicy", "default-deny"]).ok();
    expect(&s, "client", &db, true);
    apply(
        &s,
        &format!(
            r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: db-from-range}}
spec:
  podSelector: {{matchLabels: {{app: db}}}}
  ingress:
  - from: [{{ipBlock: {{cidr: 10.254.0.0/16, except: [{client}/32]}}}}]
    ports: [{{protocol: TCP, port: 8080}}]
"#
        ),
    );
    expect(&s, "client", &db, false);
    expect(&s, "other", &db, true);
    // `web-from-client` still isolates the web server.
    expect(&s, "other", &web, false);

    // The emulated Windows node does not enforce: a policy selecting a pod there says so.
    apply(&s, WINDOWS_WEB);
    let event = s.eventually("a NetworkPolicyNotEnforced event", LONG, || {
        let out = s.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=web-from-client,reason=NetworkPolicyNotEnforced",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        (!out.stdout.trim().is_empty()).then_some(out.stdout)
    });
    assert!(
        event.contains("windows-2019-1") && event.contains("emulated Windows node"),
        "{event}"
    );

    // Stopping tandem removes the table: the node's pods are no longer isolated.
    s.terminate();
    assert!(listing(&table).is_none(), "{table} left behind");
}
