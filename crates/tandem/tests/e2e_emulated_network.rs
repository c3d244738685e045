//! End-to-end: pods of emulated Windows nodes are on the network (issue 15). `tandem up` with a
//! Linux node on containerd and emulated Windows Server 2019 and 2022 nodes; the reference
//! guide's walkthrough (`win-webserver.yaml`) is applied with the stock kubectl and its Service
//! is reached by ClusterIP and NodePort from the host (this process) and by name from a real
//! pod; `kubectl exec`/`logs` into the emulated pods; the Windows data plane's rules; nothing
//! of the cluster's network is left after a stop, or after `kill -9` and a restart.
//!
//! The cluster has its own pod and service ranges and the DNS forwards nothing, so the test can
//! run beside the other real-container tests and sends no traffic off this machine.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::{Server, seed};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn start(cluster_cidr: &str, service_cidr: &str) -> Server {
    Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1,windows-2019=1,windows-2022=1",
        "--cluster-cidr",
        cluster_cidr,
        "--service-cidr",
        service_cidr,
        "--dns-upstream",
        "none",
    ])
}

/// One HTTP/1.0 GET of `/`: the status line, headers and body, or `None` when nothing answered.
fn http_get(addr: &str) -> Option<String> {
    let addr: SocketAddr = addr.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.starts_with("HTTP/1.").then_some(buf)
}

/// The pod named in an emulated stand-in's answer (`pod=NS/NAME;` in `X-Tandem-Emulated`).
fn answering_pod(response: &str) -> Option<String> {
    let header = response
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("x-tandem-emulated:"))?;
    let at = header.find("pod=")?;
    let rest = &header[at + 4..];
    Some(rest.split(';').next()?.trim().to_string())
}

fn backends(addr: &str, tries: usize) -> BTreeSet<String> {
    (0..tries)
        .filter_map(|_| http_get(addr))
        .filter_map(|r| answering_pod(&r))
        .collect()
}

fn items(s: &Server, args: &[&str]) -> Vec<Value> {
    s.get_json(args)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn node_address(s: &Server, node: &str) -> String {
    let n = s.get_json(&["node", node]).unwrap();
    n["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap()
        .to_string()
}

fn windows_node(s: &Server, build_prefix: &str) -> String {
    items(s, &["nodes"])
        .iter()
        .find(|n| {
            n["metadata"]["labels"]["node.kubernetes.io/windows-build"]
                .as_str()
                .is_some_and(|b| b.starts_with(build_prefix))
        })
        .and_then(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("a Windows node of build {build_prefix}"))
}

/// `kubectl exec POD -- ARGS`, tried once more when the first attempt fails or prints nothing:
/// under the full suite's parallel load one `ipconfig` in a CI run came back empty (not
/// reproduced alone; the first attempt's output is printed for the next look).
fn exec(s: &Server, pod: &str, args: &[&str]) -> common::Output {
    let mut full = vec!["exec", pod, "--"];
    full.extend_from_slice(args);
    let first = s.kubectl_full(&full, None, &[], Duration::from_secs(60));
    if first.success() && !first.stdout.trim().is_empty() {
        return first;
    }
    eprintln!("exec {args:?}, first attempt: {}", first.combined());
    s.kubectl_full(&full, None, &[], Duration::from_secs(60))
}

fn links() -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The bridges `tandem up` says its emulated nodes' pods are on.
fn emulated_bridges(s: &Server) -> Vec<String> {
    s.log()
        .lines()
        .filter_map(|l| {
            let at = l.find("pods reachable on bridge ")?;
            l[at + "pods reachable on bridge ".len()..]
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn the_walkthrough_web_server_on_an_emulated_windows_node_answers_by_service_ip_node_port_and_name()
{
    let s = start("10.243.0.0/16", "10.123.0.0/16");
    let out = s.kubectl(&["apply", "-f", &seed("win-webserver.yaml")]);
    assert!(out.success(), "{}", out.combined());
    let rollout = s.kubectl_full(
        &[
            "rollout",
            "status",
            "deployment/win-webserver",
            "--timeout=120s",
        ],
        None,
        &[],
        LONG,
    );
    assert!(rollout.success(), "{}\n{}", rollout.combined(), s.log());
    let win2019 = windows_node(&s, "10.0.17763");
    let pods = items(&s, &["pods", "-l", "app=win-webserver"]);
    assert_eq!(pods.len(), 2);
    let names: BTreeSet<String> = pods
        .iter()
        .map(|p| {
            assert_eq!(p["spec"]["nodeName"], win2019.as_str(), "{p}");
            let ip = p["status"]["podIP"].as_str().unwrap();
            assert!(ip.starts_with("10.243."), "{ip}");
            format!("default/{}", p["metadata"]["name"].as_str().unwrap())
        })
        .collect();

    // Each pod answers on its own address, saying it is emulated.
    let first = pods[0]["status"]["podIP"].as_str().unwrap();
    let direct = http_get(&format!("{first}:80")).expect("the pod answers on port 80");
    assert!(direct.contains("emulated by tandem"), "{direct}");
    assert!(direct.contains("10.0.17763"), "{direct}");

    // The Service by ClusterIP and by NodePort (the Windows node's address, and 127.0.0.1),
    // answered by both pods in turn.
    let svc = s.get_json(&["service", "win-webserver"]).unwrap();
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    let node_port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    s.eventually("both pods answer the ClusterIP", LONG, || {
        (backends(&format!("{cluster_ip}:80"), 20) == names).then_some(())
    });
    let win_address = node_address(&s, &win2019);
    for host in [win_address.as_str(), "127.0.0.1"] {
        let got = backends(&format!("{host}:{node_port}"), 20);
        assert_eq!(got, names, "NodePort on {host}");
    }

    // From a real Linux pod, by name.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"#,
    )
    .ok();
    s.eventually("client running", LONG, || {
        let p = s.get_json(&["pod", "client"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
    let by_name = exec(
        &s,
        "client",
        &[
            "wget",
            "-qO-",
            "-T",
            "5",
            "http://win-webserver.default.svc.cluster.local/",
        ],
    );
    assert!(by_name.success(), "{}", by_name.combined());
    assert!(
        by_name.stdout.contains("emulated by tandem"),
        "{}",
        by_name.stdout
    );

    // kubectl logs shows what the stand-in served.
    let pod = pods[0]["metadata"]["name"].as_str().unwrap();
    let logs = s.kubectl(&["logs", pod]);
    assert!(logs.success(), "{}", logs.combined());
    assert!(logs.stdout.contains("GET /"), "{}", logs.stdout);
    assert!(logs.stdout.contains("emulated"), "{}", logs.stdout);

    // kubectl port-forward reaches the pod's port.
    let mut forward = s.kubectl_stream(&["port-forward", pod, "18431:80"]);
    forward.wait_for("forwarding", LONG, |l| {
        l.contains("Forwarding from 127.0.0.1:18431")
    });
    let through = http_get("127.0.0.1:18431").expect("the forwarded port answers");
    assert_eq!(
        answering_pod(&through).as_deref(),
        Some(format!("default/{pod}").as_str())
    );
    drop(forward);

    // kubectl exec runs emulated Windows commands in the pod's network namespace, labelled.
    let curl = exec(&s, pod, &["curl.exe", "-s", "http://win-webserver"]);
    assert!(curl.success(), "{}", curl.combined());
    assert!(
        curl.stdout.contains("emulated by tandem"),
        "{}",
        curl.stdout
    );
    assert!(curl.stderr.contains("emulated"), "{}", curl.stderr);
    let ipconfig = exec(&s, pod, &["ipconfig"]);
    let pod_ip = pods[0]["status"]["podIP"].as_str().unwrap();
    assert!(ipconfig.stdout.contains(pod_ip), "{}", ipconfig.stdout);
    let hostname = exec(&s, pod, &["powershell.exe", "-Command", "hostname"]);
    assert_eq!(hostname.stdout.trim(), pod, "{}", hostname.combined());
    let unknown = exec(&s, pod, &["notepad.exe"]);
    assert!(!unknown.success());
    assert!(
        unknown.stderr.contains("not emulated"),
        "{}",
        unknown.stderr
    );

    // Windows DNS: one suffix, the namespace's; a name with a dot is fully qualified.
    let short = exec(&s, pod, &["Resolve-DnsName", "win-webserver"]);
    assert!(short.success(), "{}", short.combined());
    assert!(short.stdout.contains(&cluster_ip), "{}", short.stdout);
    let partial = exec(&s, pod, &["Resolve-DnsName", "win-webserver.default"]);
    assert!(!partial.success(), "{}", partial.combined());
    let full = exec(
        &s,
        pod,
        &["Resolve-DnsName", "win-webserver.default.svc.cluster.local"],
    );
    assert!(full.success(), "{}", full.combined());
    assert!(full.stdout.contains(&cluster_ip), "{}", full.stdout);

    // A NodePort is not reachable from the Windows node itself, but from another node's address.
    let own = exec(
        &s,
        pod,
        &[
            "curl.exe",
            "-s",
            "-m",
            "3",
            &format!("http://{win_address}:{node_port}/"),
        ],
    );
    assert!(!own.success(), "{}", own.combined());
    let win2022 = windows_node(&s, "10.0.20348");
    let other = node_address(&s, &win2022);
    let remote = exec(
        &s,
        pod,
        &[
            "curl.exe",
            "-s",
            "-m",
            "5",
            &format!("http://{other}:{node_port}/"),
        ],
    );
    assert!(remote.success(), "{}", remote.combined());

    // ICMP inside the pod network is answered; outside it is not (TCP would be).
    let inside = exec(&s, pod, &["ping", "-n", "1", &win_address]);
    assert!(inside.success(), "{}", inside.combined());
    assert!(inside.stdout.contains("Reply from"), "{}", inside.stdout);
    let outside = exec(&s, pod, &["ping", "-n", "1", "-w", "500", "192.0.2.1"]);
    assert!(!outside.success(), "{}", outside.combined());
    assert!(
        outside.stdout.contains("Request timed out"),
        "{}",
        outside.stdout
    );
}

#[test]
fn windows_pods_refuse_host_networking_and_warn_about_affinity_timeouts() {
    let s = start("10.246.0.0/16", "10.126.0.0/16");
    // ClusterFirstWithHostNet is accepted with upstream's warning; host networking is refused
    // by the Windows node, as a real one refuses it for a pod that is not HostProcess.
    let applied = s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: win-hostnet}
spec:
  os: {name: windows}
  nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: "10.0.17763"}
  hostNetwork: true
  dnsPolicy: ClusterFirstWithHostNet
  containers:
  - {name: c, image: "mcr.microsoft.com/windows/servercore:ltsc2019"}
"#,
    );
    assert!(applied.success(), "{}", applied.combined());
    assert!(
        applied
            .stderr
            .contains("ClusterFirstWithHostNet is not supported on Windows"),
        "{}",
        applied.stderr
    );
    s.eventually("the Windows node refuses host networking", LONG, || {
        let events = items(
            &s,
            &[
                "events",
                "--field-selector",
                "involvedObject.name=win-hostnet",
            ],
        );
        events
            .iter()
            .any(|e| {
                e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("hostNetwork is not supported on Windows"))
            })
            .then_some(())
    });
    let service = s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Service
metadata: {name: sticky}
spec:
  selector: {app: sticky}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
  ports: [{port: 80}]
"#,
    );
    assert!(service.success(), "{}", service.combined());
    s.eventually("the Windows nodes' affinity warning", LONG, || {
        let events = items(
            &s,
            &["events", "--field-selector", "involvedObject.name=sticky"],
        );
        events
            .iter()
            .any(|e| e["reason"] == "SessionAffinityTimeoutIgnored")
            .then_some(())
    });
}

#[test]
fn emulated_pod_networks_are_gone_after_a_stop_and_after_kill_9_and_a_restart() {
    let mut s = start("10.247.0.0/16", "10.127.0.0/16");
    let bridges = s.eventually("both Windows nodes on bridges", LONG, || {
        let b = emulated_bridges(&s);
        (b.len() == 2).then_some(b)
    });
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: "10.0.17763"}
  containers:
  - name: web
    image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019
"#,
    )
    .ok();
    let ip = s.eventually("the IIS pod answers", LONG, || {
        let p = s.get_json(&["pod", "web"])?;
        let ip = p["status"]["podIP"].as_str()?.to_string();
        http_get(&format!("{ip}:80")).map(|_| ip)
    });
    let attached = |bridge: &str| -> usize {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "master", bridge])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    assert_eq!(bridges.iter().map(|b| attached(b)).sum::<usize>(), 1);

    // kill -9: the pod's namespace and veth go with the process; a restart puts the pod back.
    s.kill9();
    s.eventually("the pod's veth gone with the process", LONG, || {
        (bridges.iter().map(|b| attached(b)).sum::<usize>() == 0).then_some(())
    });
    s.restart();
    s.eventually("the IIS pod answers again", LONG, || {
        http_get(&format!("{ip}:80"))
    });

    // A stop removes the bridges and the Windows nodes' proxy tables.
    s.terminate();
    let left = links();
    for b in &bridges {
        assert!(
            !left.contains(b.as_str()),
            "{b} left behind:
{left}"
        );
    }
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    for b in &bridges {
        assert!(
            !tables.contains(b.as_str()),
            "table of {b} left behind:
{tables}"
        );
    }
}

#[test]
fn pods_of_an_emulated_linux_node_answer_with_linux_semantics() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=2",
        "--cluster-cidr",
        "10.248.0.0/16",
        "--service-cidr",
        "10.128.0.0/16",
        "--dns-upstream",
        "none",
    ]);
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: emu}
spec:
  nodeSelector: {kubernetes.io/hostname: linux-2}
  containers:
  - name: app
    image: tandem.local/busybox:1
    ports: [{containerPort: 8080}, {containerPort: 5353, protocol: UDP}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
"#,
    )
    .ok();
    let ip = s.eventually("the emulated Linux pod is Ready", LONG, || {
        let p = s.get_json(&["pod", "emu"])?;
        let ready = p["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then(|| p["status"]["podIP"].as_str().map(str::to_string))?
    });
    let answer = http_get(&format!("{ip}:8080")).expect("the stand-in answers");
    assert!(answer.contains("emulated by tandem"), "{answer}");
    assert!(!answer.contains("Windows build"), "{answer}");
    // Linux resolver semantics: a partly qualified name resolves through the search list.
    let lookup = exec(&s, "emu", &["nslookup", "kubernetes.default"]);
    assert!(lookup.success(), "{}", lookup.combined());
    assert!(lookup.stdout.contains("10.128.0.1"), "{}", lookup.stdout);
    let unknown = exec(&s, "emu", &["vi"]);
    assert_eq!(unknown.status.code(), Some(127), "{}", unknown.combined());
}
