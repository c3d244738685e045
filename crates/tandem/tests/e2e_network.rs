//! End-to-end: Services carry traffic and have names (issue 14). `tandem up --linux-runtime cri`
//! with real pods; the service proxy programs nftables and the cluster DNS answers on the
//! kube-dns address. Checked from the host (curl-like HTTP from this process) and from inside
//! pods with the stock kubectl and the project's busybox (`wget`, `nslookup`).
//!
//! Each test runs its own cluster with its own pod range, service range and node ports, so they
//! can run in parallel beside the other real-container tests. The cluster DNS forwards nothing
//! (`--dns-upstream none`): tests send no traffic off this machine.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn start(cluster_cidr: &str, service_cidr: &str) -> Server {
    Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1,windows-2019=1",
        "--cluster-cidr",
        cluster_cidr,
        "--service-cidr",
        service_cidr,
        "--dns-upstream",
        "none",
        // The Windows node's pods stay off the network here: these tests check what the proxy
        // does with endpoints it cannot reach (e2e_emulated_network covers them on it).
        "--emulated-pod-network",
        "off",
    ])
}

/// A Deployment of `replicas` busybox web servers labelled `app=NAME` whose page is their pod
/// name, so a client can tell which backend answered.
fn web(name: &str, replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{kubernetes.io/os: linux}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: tandem.local/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /index.html, port: http}}
          periodSeconds: 1
"#
    )
}

const CLIENT: &str = r#"
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
"#;

/// One HTTP/1.0 GET; the body, or `None` when nothing answered within a few seconds.
fn http_get(addr: &str) -> Option<String> {
    let addr: SocketAddr = addr.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /index.html HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.trim().to_string())
}

/// Which backends answer `addr` over `tries` requests.
fn backends(addr: &str, tries: usize) -> BTreeSet<String> {
    (0..tries).filter_map(|_| http_get(addr)).collect()
}

fn pod_names(s: &Server, selector: &str) -> BTreeSet<String> {
    s.get_json(&["pods", "-l", selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

fn svc(s: &Server, name: &str) -> Value {
    s.get_json(&["service", name])
        .unwrap_or_else(|| panic!("service {name} exists"))
}

fn cluster_ip(s: &Server, name: &str) -> String {
    svc(s, name)["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .to_string()
}

fn rollout(s: &Server, name: &str) {
    let out = s.kubectl_full(
        &[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=120s",
        ],
        None,
        &[],
        LONG,
    );
    assert!(out.success(), "{}\n{}", out.combined(), s.log());
}

fn wait_running(s: &Server, pod: &str) {
    s.eventually(&format!("{pod} running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        (p["status"]["phase"] == "Running").then_some(())
    });
}

/// `kubectl exec client -- ARGS`.
fn exec(s: &Server, args: &[&str]) -> common::Output {
    let mut full = vec!["exec", "client", "--"];
    full.extend_from_slice(args);
    s.kubectl_full(&full, None, &[], Duration::from_secs(30))
}

/// The nftables table of this cluster's proxy, from the log line `tandem up` prints.
fn proxy_table(s: &Server) -> String {
    let log = s.log();
    let at = log
        .find("nftables table ip ")
        .unwrap_or_else(|| panic!("tandem up names its nftables table:\n{log}"));
    log[at + "nftables table ip ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn nft_tables() -> String {
    let out = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn services_answer_by_cluster_ip_node_port_load_balancer_and_name() {
    let mut s = start("10.241.0.0/16", "10.121.0.0/16");
    let manifest = format!(
        "{}\n---\n{}\n---\n{}",
        web("web", 2),
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http, nodePort: 31501}]
---
apiVersion: v1
kind: Service
metadata: {name: web-lb}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 18081, targetPort: 8080, nodePort: 31502}]
"#,
        CLIENT
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &manifest).ok();
    rollout(&s, "web");
    wait_running(&s, "client");
    let pods = pod_names(&s, "app=web");
    assert_eq!(pods.len(), 2);
    // The proxy subresources reach the same servers through the API server: the service's
    // port by name picks a ready backend, a pod's port reaches that pod, and a node's proxy
    // reaches its agent.
    let via_service = s.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/web:http/proxy/",
    ]);
    let answered = via_service.ok().trim().to_string();
    assert!(pods.contains(&answered), "{answered} not in {pods:?}");
    let first = pods.iter().next().unwrap();
    let via_pod = s.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/pods/{first}:8080/proxy/index.html"),
    ]);
    assert_eq!(via_pod.ok().trim(), first.as_str());
    let missing = s.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/services/web:nope/proxy/",
    ]);
    assert!(
        missing
            .err()
            .contains("no service port \"nope\" found for service \"web\""),
        "{}",
        missing.stderr
    );
    let linux = s.kubectl(&["get", "nodes", "-l", "kubernetes.io/os=linux", "-o", "name"]);
    let node = linux.ok().trim().trim_start_matches("node/").to_string();
    let health = s.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/healthz"),
    ]);
    assert_eq!(health.ok().trim(), "ok");
    // Real containers are not reported as emulated.
    let started = s.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=Started",
        "-o",
        "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ]);
    assert!(
        started.ok().contains("Started container httpd"),
        "{}",
        started.stdout
    );
    assert!(!started.stdout.contains("emulated"), "{}", started.stdout);

    // The cluster has the `kubernetes` and `kube-dns` Services on the range's first and tenth
    // addresses, with endpoints.
    assert_eq!(cluster_ip(&s, "kubernetes"), "10.121.0.1");
    let dns = s
        .get_json(&["-n", "kube-system", "service", "kube-dns"])
        .unwrap();
    assert_eq!(dns["spec"]["clusterIP"], "10.121.0.10");
    let slices = s
        .get_json(&[
            "-n",
            "kube-system",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=kube-dns",
        ])
        .unwrap();
    assert!(
        !slices["items"].as_array().unwrap().is_empty(),
        "kube-dns has an EndpointSlice"
    );

    // From the host: the ClusterIP reaches both ready pods in turn.
    let ip = cluster_ip(&s, "web");
    assert!(ip.starts_with("10.121."), "{ip}");
    let seen = s.eventually("both backends behind the ClusterIP", LONG, || {
        let seen = backends(&format!("{ip}:80"), 30);
        (seen == pods).then_some(seen)
    });
    assert_eq!(seen, pods);

    // NodePort on 127.0.0.1 and on the node's InternalIP.
    let node = s.get_json(&["node", "linux-1"]).unwrap();
    let node_ip = node["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap()
        .to_string();
    for addr in ["127.0.0.1:31501".to_string(), format!("{node_ip}:31501")] {
        let body = s.eventually(
            &format!("an answer on {addr}"),
            Duration::from_secs(20),
            || http_get(&addr),
        );
        assert!(pods.contains(&body), "{addr} answered {body:?}");
    }

    // LoadBalancer: the built-in load balancer publishes the node's address and serves the port.
    let lb_ip = s.eventually("web-lb's ingress address", Duration::from_secs(30), || {
        svc(&s, "web-lb")["status"]["loadBalancer"]["ingress"][0]["ip"]
            .as_str()
            .map(str::to_string)
    });
    assert_eq!(lb_ip, node_ip);
    let table = s.kubectl(&["get", "svc", "web-lb"]);
    assert!(
        table.ok().contains(&node_ip),
        "EXTERNAL-IP shown: {}",
        table.stdout
    );
    let body = s.eventually(
        "an answer on the load balancer",
        Duration::from_secs(20),
        || http_get(&format!("{lb_ip}:18081")),
    );
    assert!(pods.contains(&body));

    // From a pod: the resolv.conf of ClusterFirst, and the Service by every form of its name.
    let resolv = exec(&s, &["cat", "/etc/resolv.conf"]);
    let resolv = resolv.ok();
    assert!(resolv.contains("nameserver 10.121.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("ndots:5"), "{resolv}");
    for name in [
        "web",
        "web.default",
        "web.default.svc",
        "web.default.svc.cluster.local",
    ] {
        let out = exec(
            &s,
            &[
                "wget",
                "-qO-",
                "-T",
                "5",
                &format!("http://{name}/index.html"),
            ],
        );
        assert!(
            out.success() && pods.contains(out.stdout.trim()),
            "wget http://{name}: {}",
            out.combined()
        );
    }
    // A name that does not exist fails fast.
    let started = Instant::now();
    let out = exec(&s, &["wget", "-qO-", "-T", "5", "http://no-such-service/"]);
    assert!(!out.success(), "{}", out.combined());
    assert!(out.stderr.contains("bad address"), "{}", out.combined());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an unknown name took {:?}",
        started.elapsed()
    );
    // The API server through the `kubernetes` Service (a TCP connection; TLS needs a client
    // that busybox lacks).
    let out = exec(
        &s,
        &[
            "sh",
            "-c",
            "echo | nc -w 5 kubernetes.default.svc.cluster.local 443",
        ],
    );
    assert!(
        out.success(),
        "kubernetes Service from a pod: {}",
        out.combined()
    );

    // Stopping tandem removes the proxy's table and the pods' bridge.
    let table = proxy_table(&s);
    assert!(nft_tables().contains(&table), "{table} while running");
    s.terminate();
    assert!(
        !nft_tables().contains(&table),
        "{table} left behind: {}",
        nft_tables()
    );
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let bridge = table.trim_start_matches("tandem-");
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains(bridge),
        "bridge {bridge} left behind"
    );
}

const RECORDS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: tandem.local/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: docs}
spec:
  type: ExternalName
  externalName: docs.example.com
---
apiVersion: v1
kind: Service
metadata: {name: sticky}
spec:
  selector: {app: web}
  sessionAffinity: ClientIP
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: nobody}
spec:
  selector: {app: nothing-has-this-label}
  ports: [{port: 80, targetPort: 8080}]
"#;

const WINDOWS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: iis}
spec:
  replicas: 1
  selector: {matchLabels: {app: iis}}
  template:
    metadata: {labels: {app: iis}}
    spec:
      nodeSelector: {kubernetes.io/os: windows}
      tolerations: [{key: os, operator: Equal, value: windows, effect: NoSchedule}]
      containers:
      - name: iis
        image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2019
        ports: [{containerPort: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: iis}
spec:
  selector: {app: iis}
  ports: [{port: 80}]
"#;

#[test]
fn dns_records_affinity_scale_down_and_refused_connections() {
    let s = start("10.242.0.0/16", "10.122.0.0/16");
    let manifest = format!(
        "{}\n---\n{}\n---\n{}\n---\n{}",
        web("web", 2),
        RECORDS,
        CLIENT,
        r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
"#
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &manifest).ok();
    rollout(&s, "web");
    wait_running(&s, "client");
    s.eventually("db-1 ready", LONG, || {
        let p = s.get_json(&["pod", "db-1"])?;
        let ready = p["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    let db_ips: BTreeSet<String> = ["db-0", "db-1"]
        .iter()
        .map(|p| {
            s.get_json(&["pod", p]).unwrap()["status"]["podIP"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();

    // Headless: the ready pods' addresses; StatefulSet pods by hostname; SRV for named ports.
    let out = exec(&s, &["nslookup", "db.default.svc.cluster.local"]);
    for ip in &db_ips {
        assert!(
            out.stdout.contains(ip.as_str()),
            "headless answer lacks {ip}: {}",
            out.combined()
        );
    }
    let db0 = s.get_json(&["pod", "db-0"]).unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let out = exec(&s, &["nslookup", "db-0.db.default.svc.cluster.local"]);
    assert!(
        out.stdout.contains(&db0),
        "db-0's own record: {}",
        out.combined()
    );
    let out = exec(
        &s,
        &[
            "nslookup",
            "-type=SRV",
            "_pg._tcp.db.default.svc.cluster.local",
        ],
    );
    assert!(
        out.stdout.contains("db-0.db.default.svc.cluster.local")
            && out.stdout.contains("db-1.db.default.svc.cluster.local")
            && out.stdout.contains(" 8080 "),
        "SRV records name each pod with its endpoint port: {}",
        out.combined()
    );
    // ExternalName is a CNAME.
    let out = exec(
        &s,
        &["nslookup", "-type=CNAME", "docs.default.svc.cluster.local"],
    );
    assert!(
        out.stdout.contains("docs.example.com"),
        "CNAME: {}",
        out.combined()
    );
    // A ClusterIP's PTR record names the Service.
    let web_ip = cluster_ip(&s, "web");
    let out = exec(&s, &["nslookup", &web_ip]);
    assert!(
        out.stdout.contains("web.default.svc.cluster.local"),
        "PTR of {web_ip}: {}",
        out.combined()
    );
    // An unknown name in the cluster domain: NXDOMAIN.
    let out = exec(&s, &["nslookup", "nothing.default.svc.cluster.local"]);
    assert!(
        out.combined().contains("NXDOMAIN") || out.combined().contains("can't find"),
        "{}",
        out.combined()
    );

    // ClientIP affinity: one client always reaches the same backend.
    let sticky = cluster_ip(&s, "sticky");
    let seen = s.eventually(
        "the sticky Service answers",
        Duration::from_secs(30),
        || {
            let seen = backends(&format!("{sticky}:80"), 12);
            (!seen.is_empty()).then_some(seen)
        },
    );
    assert_eq!(
        seen.len(),
        1,
        "ClientIP affinity sent one client to {seen:?}"
    );

    // No backend: the connection is refused at once, not left to time out.
    let nobody: SocketAddr = format!("{}:80", cluster_ip(&s, "nobody")).parse().unwrap();
    let started = Instant::now();
    let err = TcpStream::connect_timeout(&nobody, Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // Endpoints on the emulated Windows node get no traffic, and the Service says why.
    s.kubectl_stdin(&["apply", "-f", "-"], WINDOWS).ok();
    let nothing: SocketAddr = format!("{}:80", cluster_ip(&s, "iis")).parse().unwrap();
    let event = s.eventually("an EndpointsNotReachable event", LONG, || {
        let out = s.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=iis,reason=EndpointsNotReachable",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        (!out.stdout.trim().is_empty()).then_some(out.stdout)
    });
    assert!(
        event.contains("windows-2019-1") && event.contains("emulated"),
        "{event}"
    );
    let err = TcpStream::connect_timeout(&nothing, Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");

    // Scale down: the removed pod gets no more traffic.
    let web = format!("{web_ip}:80");
    s.eventually("both web backends", LONG, || {
        (backends(&web, 30).len() == 2).then_some(())
    });
    s.kubectl(&["scale", "deployment/web", "--replicas=1"]).ok();
    let left = s.eventually("one web pod left", LONG, || {
        let names = pod_names(&s, "app=web");
        (names.len() == 1).then_some(names)
    });
    s.eventually(
        "only the remaining pod answers",
        Duration::from_secs(30),
        || (backends(&web, 20) == left).then_some(()),
    );

    // Hairpin: the remaining pod reaches itself through its own Service.
    let me = left.iter().next().unwrap();
    let out = s.kubectl_full(
        &[
            "exec",
            me,
            "--",
            "wget",
            "-qO-",
            "-T",
            "5",
            "http://web/index.html",
        ],
        None,
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(out.stdout.trim(), me, "hairpin: {}", out.combined());
}

/// A ServiceAccount allowed to list pods in `default`, and a pod running as it with this
/// machine's kubectl (a static binary) mounted: kubectl in a pod uses in-cluster configuration —
/// the `kubernetes` Service from the environment, the mounted token and `ca.crt`.
fn in_cluster_manifest(kubectl: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: reader}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: pod-reader}}
rules: [{{apiGroups: [""], resources: [pods], verbs: [get, list]}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader-reads-pods}}
subjects: [{{kind: ServiceAccount, name: reader}}]
roleRef: {{kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  serviceAccountName: reader
  nodeSelector: {{kubernetes.io/os: linux}}
  terminationGracePeriodSeconds: 1
  volumes: [{{name: kubectl, hostPath: {{path: {kubectl}, type: File}}}}]
  containers:
  - name: sh
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    env: [{{name: HOME, value: /tmp}}]
    volumeMounts: [{{name: kubectl, mountPath: /usr/local/bin/kubectl, readOnly: true}}]
"#
    )
}

#[test]
fn a_pod_calls_the_api_with_its_mounted_token_and_gets_what_its_role_allows() {
    let kubectl = std::fs::canonicalize(
        String::from_utf8(
            Command::new("which")
                .arg("kubectl")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim(),
    )
    .unwrap();
    let s = start("10.249.0.0/16", "10.129.0.0/16");
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &in_cluster_manifest(kubectl.to_str().unwrap()),
    )
    .ok();
    wait_running(&s, "client");
    // The mounted files: a token, the cluster's CA and the namespace.
    let ca = std::fs::read_to_string(s.data_dir().join("pki/ca.crt")).unwrap();
    let mounted = exec(
        &s,
        &[
            "cat",
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        ],
    );
    assert_eq!(mounted.ok().trim(), ca.trim());
    let ns = exec(
        &s,
        &[
            "cat",
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
        ],
    );
    assert_eq!(ns.ok().trim(), "default");

    // kubectl inside the pod: in-cluster configuration, the CA verified.
    // Each attempt is bounded by busybox's `timeout` (kubectl flags such as --request-timeout
    // would turn in-cluster configuration off): the Service's rules may still be on their way.
    let pods = s.eventually("the pod lists pods", LONG, || {
        let out = exec(
            &s,
            &["timeout", "10", "kubectl", "get", "pods", "-o", "name"],
        );
        if !out.success() {
            eprintln!("in-cluster kubectl: {}", out.combined());
        }
        out.success().then_some(out)
    });
    assert!(pods.stdout.contains("pod/client"), "{}", pods.stdout);
    let who = exec(
        &s,
        &[
            "kubectl",
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(who.ok().trim(), "system:serviceaccount:default:reader");
    let secrets = exec(&s, &["kubectl", "get", "secrets"]);
    assert!(
        secrets.err().contains(
            "secrets is forbidden: User \"system:serviceaccount:default:reader\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
        ),
        "{}",
        secrets.combined()
    );
    let other_ns = exec(&s, &["kubectl", "get", "pods", "-n", "kube-system"]);
    assert!(
        other_ns.err().contains("in the namespace \"kube-system\""),
        "{}",
        other_ns.combined()
    );
}
