//! End-to-end on `tandem up --linux-runtime cri`: real Linux pods on tandem's private containerd,
//! driven by the stock kubectl (issue 7). Needs root and the packages and images the test command
//! installs and builds (`scripts/install-deps.sh`, `scripts/build-images.sh`).
//!
//! Each test runs its own cluster with its own pod network, so they can run in parallel.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, Stopped};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

const WEB: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {greeting: "hello from a configmap", "index.html": "<h1>served by tandem</h1>\n"}
---
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {token: s3cr3t}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: httpd
        image: tandem.local/busybox:1
        imagePullPolicy: Never
        command: ["httpd", "-f", "-v", "-p", "8080", "-h", "/www"]
        ports: [{name: http, containerPort: 8080}]
        env:
        - {name: LITERAL, value: "plain value"}
        - name: GREETING
          valueFrom: {configMapKeyRef: {name: web-config, key: greeting}}
        - name: TOKEN
          valueFrom: {secretKeyRef: {name: web-secret, key: token}}
        - name: MY_POD
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: MY_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
        readinessProbe:
          httpGet: {path: /index.html, port: http}
          periodSeconds: 1
        resources:
          limits: {cpu: 500m, memory: 64Mi}
        volumeMounts:
        - {name: site, mountPath: /www}
        - {name: scratch, mountPath: /scratch}
      volumes:
      - name: site
        configMap: {name: web-config, items: [{key: index.html, path: index.html}]}
      - name: scratch
        emptyDir: {}
"#;

fn pods(s: &Server, selector: &str) -> Vec<Value> {
    s.get_json(&["pods", "-l", selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_secs(3)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split(' ').nth(1)?.parse().ok()?;
    Some((code, buf))
}

/// Waits until the node has registered.
fn wait_for_node(s: &Server, name: &str) {
    s.eventually(
        &format!("node {name} registered"),
        Duration::from_secs(60),
        || s.get_json(&["node", name]).map(|_| ()),
    );
}

/// Waits until the pod's phase is Running and returns it.
fn wait_running(s: &Server, pod: &str) -> Value {
    s.eventually(&format!("{pod} running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
}

fn in_cidr(ip: &str, prefix: &str) -> bool {
    ip.starts_with(prefix)
}

#[test]
fn web_deployment_serves_from_real_pods_with_exec_logs_and_port_forward() {
    let s = Server::start_up_cri("linux=1,windows-2022=1", "10.231.0.0/16");
    s.eventually(
        "the Linux node on containerd",
        Duration::from_secs(60),
        || {
            let out = s.kubectl(&["get", "nodes", "-o", "wide"]);
            out.stdout.contains("containerd://").then_some(())
        },
    );
    s.kubectl_stdin(&["apply", "-f", "-"], WEB).ok();
    s.kubectl_full(
        &["rollout", "status", "deployment/web", "--timeout=120s"],
        None,
        &[],
        LONG,
    )
    .ok();
    let running = pods(&s, "app=web");
    assert_eq!(running.len(), 2);
    for p in &running {
        let ip = p["status"]["podIP"].as_str().unwrap();
        assert!(
            in_cidr(ip, "10.231.0."),
            "pod IP {ip} comes from the node's podCIDR 10.231.0.0/24"
        );
        let (code, body) = http_get(&format!("{ip}:8080"), "/index.html")
            .unwrap_or_else(|| panic!("no HTTP answer from the pod at {ip}:8080"));
        assert_eq!(code, 200);
        assert!(body.contains("served by tandem"), "{body}");
    }
    let pod = running[0]["metadata"]["name"].as_str().unwrap().to_string();
    let ip = running[0]["status"]["podIP"].as_str().unwrap().to_string();

    // Environment from literals, a ConfigMap, a Secret and the downward API.
    let env = s.kubectl(&[
        "exec",
        &pod,
        "--",
        "sh",
        "-c",
        "echo \"$LITERAL|$GREETING|$TOKEN|$MY_POD|$MY_IP\"",
    ]);
    assert_eq!(
        env.ok().trim(),
        format!("plain value|hello from a configmap|s3cr3t|{pod}|{ip}")
    );
    // Exit codes of exec travel back.
    let failed = s.kubectl(&[
        "exec",
        &pod,
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
    ]);
    assert_eq!(failed.status.code(), Some(7), "{}", failed.combined());
    assert!(failed.stdout.contains("out") && failed.stderr.contains("err"));
    // stdin goes in.
    let stdin = s.kubectl_stdin(
        &["exec", "-i", &pod, "--", "sh", "-c", "tr a-z A-Z"],
        "shout\n",
    );
    assert_eq!(stdin.ok().trim(), "SHOUT");
    // The memory limit is the container's cgroup limit.
    let limit = s.kubectl(&[
        "exec",
        &pod,
        "--",
        "cat",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]);
    assert_eq!(limit.ok().trim(), (64 * 1024 * 1024).to_string());

    // httpd -v logs every request on stderr: the probes' and ours.
    let logs = s.kubectl(&["logs", &pod]);
    assert!(logs.ok().contains("response:200"), "{}", logs.stdout);
    let tail = s.kubectl(&["logs", &pod, "--tail=1", "-c", "httpd"]);
    assert_eq!(tail.ok().lines().count(), 1);

    // Port-forward: a local port reaches the pod.
    let mut pf = s.kubectl_stream(&["port-forward", &format!("pod/{pod}"), ":8080"]);
    let line = pf.wait_for("the forwarding line", Duration::from_secs(30), |l| {
        l.starts_with("Forwarding from 127.0.0.1:")
    });
    let port: u16 = line
        .trim_start_matches("Forwarding from 127.0.0.1:")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (code, body) = s.eventually(
        "an answer through port-forward",
        Duration::from_secs(20),
        || http_get(&format!("127.0.0.1:{port}"), "/index.html"),
    );
    assert_eq!(code, 200);
    assert!(body.contains("served by tandem"));
    drop(pf);

    // Exec into an emulated node's pod runs the emulated command set, labelled as such; what it
    // does not emulate fails and says so.
    let win = r#"
apiVersion: v1
kind: Pod
metadata: {name: win}
spec:
  nodeSelector: {kubernetes.io/os: windows}
  tolerations: [{key: os, operator: Equal, value: windows, effect: NoSchedule}]
  containers: [{name: iis, image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022}]
"#;
    s.kubectl_stdin(&["apply", "-f", "-"], win).ok();
    wait_running(&s, "win");
    let hostname = s.kubectl(&["exec", "win", "--", "cmd", "/c", "hostname"]);
    assert_eq!(hostname.ok().trim(), "win", "{}", hostname.combined());
    assert!(
        hostname.stderr.contains("emulated by tandem"),
        "{}",
        hostname.combined()
    );
    let refused = s.kubectl(&["exec", "win", "--", "iisreset"]);
    assert!(
        refused.err().contains("not emulated"),
        "{}",
        refused.combined()
    );
}

#[test]
fn restarts_keep_previous_logs_and_deletion_is_graceful() {
    let s = Server::start_up_cri("linux=1", "10.232.0.0/16");
    wait_for_node(&s, "linux-1");
    let pods = r#"
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers:
  - name: main
    image: tandem.local/busybox:1
    command: ["sh", "-c", "echo attempt-output; sleep 1; exit 3"]
---
apiVersion: v1
kind: Pod
metadata: {name: graceful}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: tandem.local/busybox:1
    command: ["sh", "-c", "trap 'echo got TERM; sleep 2; exit 0' TERM; while true; do sleep 0.2; done"]
---
apiVersion: v1
kind: Pod
metadata: {name: missing-image}
spec:
  containers: [{name: main, image: tandem.local/not-built:1}]
---
apiVersion: v1
kind: Pod
metadata: {name: unready}
spec:
  containers:
  - name: main
    image: tandem.local/busybox:1
    command: ["sh", "-c", "touch /tmp/ready; sleep 600"]
    readinessProbe:
      exec: {command: ["cat", "/tmp/ready"]}
      periodSeconds: 1
"#;
    s.kubectl_stdin(&["apply", "-f", "-"], pods).ok();

    // A container that exits is restarted; the previous instance's log stays readable.
    s.eventually("crasher restarted", LONG, || {
        let p = s.get_json(&["pod", "crasher"])?;
        (p["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 1).then_some(())
    });
    let previous = s.kubectl(&["logs", "crasher", "--previous"]);
    assert!(
        previous.ok().contains("attempt-output"),
        "{}",
        previous.combined()
    );
    let p = s.get_json(&["pod", "crasher"]).unwrap();
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{p}");

    // An image no registry can deliver: ErrImagePull, then ImagePullBackOff.
    let reason = s.eventually("a pull failure", LONG, || {
        let p = s.get_json(&["pod", "missing-image"])?;
        let r = p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
            .as_str()?
            .to_string();
        matches!(r.as_str(), "ErrImagePull" | "ImagePullBackOff").then_some(r)
    });
    assert!(!reason.is_empty());

    // A readiness failure takes the pod out of Ready without restarting it.
    s.eventually("unready pod Ready", LONG, || {
        let p = s.get_json(&["pod", "unready"])?;
        (p["status"]["containerStatuses"][0]["ready"] == true).then_some(())
    });
    s.kubectl(&["exec", "unready", "--", "rm", "/tmp/ready"])
        .ok();
    s.eventually("unready pod not Ready", Duration::from_secs(30), || {
        let p = s.get_json(&["pod", "unready"])?;
        (p["status"]["containerStatuses"][0]["ready"] == false).then_some(())
    });
    let p = s.get_json(&["pod", "unready"]).unwrap();
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);

    // An image pinned by the digest name the node lists in `status.images` is the image already
    // on the node: it runs on this offline node instead of failing to pull (issue 22).
    let node = s.get_json(&["node", "linux-1"]).unwrap();
    let pinned = node["status"]["images"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["names"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .find(|n| n.starts_with("tandem.local/busybox@sha256:"))
        .unwrap_or_else(|| panic!("no digest name for busybox in {}", node["status"]["images"]))
        .to_string();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: pinned}}\nspec:\n  containers:\n  - name: main\n    image: {pinned}\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"600\"]\n"
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &pod).ok();
    let p = wait_running(&s, "pinned");
    assert_eq!(
        p["status"]["containerStatuses"][0]["image"],
        pinned.as_str(),
        "{p}"
    );

    // Deletion sends SIGTERM and waits for the process: the trap's 2 s are honoured, and the
    // pod is gone well before the 20 s grace period.
    wait_running(&s, "graceful");
    let started = Instant::now();
    s.kubectl_full(
        &["delete", "pod", "graceful", "--wait=true"],
        None,
        &[],
        LONG,
    )
    .ok();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "deletion took {took:?}"
    );
}

#[test]
fn volumes_attach_follow_tty_and_liveness_on_real_containers() {
    let s = Server::start_up_cri("linux=1", "10.233.0.0/16");
    wait_for_node(&s, "linux-1");
    let host_dir = s.dir().join("host-data");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("from-host.txt"), "host file\n").unwrap();
    let pv_dir = s.dir().join("pv-data");
    let manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: creds}}
stringData: {{password: hunter2}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: local-pv}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  hostPath: {{path: {pv}, type: DirectoryOrCreate}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: claim}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  volumeName: local-pv
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: volumes, labels: {{tier: test}}}}
spec:
  containers:
  - name: main
    image: tandem.local/busybox:1
    command: ["sh", "-c", "echo written-by-pod > /claim/out.txt; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.5; done"]
    volumeMounts:
    - {{name: secret, mountPath: /secret, readOnly: true}}
    - {{name: info, mountPath: /info}}
    - {{name: both, mountPath: /both}}
    - {{name: host, mountPath: /host}}
    - {{name: claim, mountPath: /claim}}
  volumes:
  - name: secret
    secret: {{secretName: creds}}
  - name: info
    downwardAPI: {{items: [{{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}]}}
  - name: both
    projected:
      sources:
      - secret: {{name: creds, items: [{{key: password, path: pw}}]}}
      - downwardAPI: {{items: [{{path: name, fieldRef: {{fieldPath: metadata.name}}}}]}}
  - name: host
    hostPath: {{path: {host}, type: Directory}}
  - name: claim
    persistentVolumeClaim: {{claimName: claim}}
---
apiVersion: v1
kind: Pod
metadata: {{name: attachable}}
spec:
  containers:
  - name: main
    image: tandem.local/busybox:1
    stdin: true
    command: ["sh", "-c", "while read line; do echo \"got $line\"; done"]
---
apiVersion: v1
kind: Pod
metadata: {{name: unhealthy}}
spec:
  containers:
  - name: main
    image: tandem.local/busybox:1
    command: ["sh", "-c", "touch /tmp/alive; sleep 600"]
    livenessProbe:
      exec: {{command: ["cat", "/tmp/alive"]}}
      periodSeconds: 1
      failureThreshold: 2
"#,
        pv = pv_dir.display(),
        host = host_dir.display()
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &manifests).ok();
    for pod in ["volumes", "attachable", "unhealthy"] {
        wait_running(&s, pod);
    }

    // Every volume kind shows up in the container with its content.
    let read = |cmd: &str| {
        s.kubectl(&["exec", "volumes", "--", "sh", "-c", cmd])
            .ok()
            .trim()
            .to_string()
    };
    assert_eq!(read("cat /secret/password"), "hunter2");
    assert_eq!(read("cat /info/labels"), "tier=\"test\"");
    assert_eq!(
        read("cat /both/pw; echo; cat /both/name"),
        "hunter2\nvolumes"
    );
    assert_eq!(read("cat /host/from-host.txt"), "host file");
    let denied = s.kubectl(&["exec", "volumes", "--", "sh", "-c", "echo x > /secret/new"]);
    assert!(!denied.success(), "a readOnly mount refuses writes");
    s.eventually(
        "the pod's write on the PVC's hostPath",
        Duration::from_secs(10),
        || {
            let text = std::fs::read_to_string(pv_dir.join("out.txt")).ok()?;
            (text.trim() == "written-by-pod").then_some(())
        },
    );

    // logs -f streams new lines as they are written; --since limits to recent ones.
    let mut follow = s.kubectl_stream(&["logs", "-f", "volumes"]);
    let first = follow.wait_for("a tick", Duration::from_secs(20), |l| {
        l.starts_with("tick-")
    });
    let n: u64 = first.trim_start_matches("tick-").parse().unwrap();
    follow.wait_for("a later tick", Duration::from_secs(20), |l| {
        l.trim_start_matches("tick-")
            .parse::<u64>()
            .is_ok_and(|m| m >= n + 3)
    });
    drop(follow);
    let recent = s.kubectl(&["logs", "volumes", "--since=2s"]);
    let lines = recent.ok().lines().count();
    assert!(
        (1..=8).contains(&lines),
        "--since=2s keeps the last few ticks, got {lines} lines"
    );

    // attach: stdin reaches the main process, its output comes back. stdin stays open a
    // little after the line so the answer arrives before kubectl hangs up.
    let attached = std::process::Command::new("sh")
        .args([
            "-c",
            "(echo hello; sleep 6) | timeout 30 kubectl attach -i attachable -v=6",
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&attached.stdout);
    assert!(
        text.contains("got hello"),
        "{text}\n{}",
        String::from_utf8_lossy(&attached.stderr)
    );

    // exec -it with a real terminal: `script` gives kubectl a pty; the shell sees a tty and
    // its exit code comes back.
    let kubeconfig = s.kubeconfig();
    let tty = std::process::Command::new("script")
        .args([
            "-qec",
            &format!(
                "kubectl --kubeconfig {} exec -it volumes -- sh -c 'tty; exit 4'",
                kubeconfig.display()
            ),
            "/dev/null",
        ])
        .env("HOME", s.dir())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&tty.stdout);
    assert!(out.contains("/dev/pts/"), "the shell has a terminal: {out}");
    assert_eq!(tty.status.code(), Some(4), "{out}");

    // A failing liveness probe restarts the container.
    s.kubectl(&["exec", "unhealthy", "--", "rm", "/tmp/alive"])
        .ok();
    s.eventually("the unhealthy container restarted", LONG, || {
        let p = s.get_json(&["pod", "unhealthy"])?;
        (p["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 1).then_some(())
    });
    let events = s.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=unhealthy",
    ]);
    assert!(
        events.ok().contains("Liveness probe failed"),
        "{}",
        events.stdout
    );
}

#[test]
fn up_falls_back_to_emulated_and_says_why_when_images_are_missing() {
    let s = Server::start_up_with(&[
        "--linux-runtime",
        "auto",
        "--nodes",
        "linux=1",
        "--images-dir",
        "/nonexistent/tandem-images",
    ]);
    s.eventually(
        "the Linux node on the emulated runtime",
        Duration::from_secs(60),
        || {
            let n = s.get_json(&["node", "linux-1"])?;
            n["status"]["nodeInfo"]["containerRuntimeVersion"]
                .as_str()?
                .starts_with("emulated://")
                .then_some(())
        },
    );
    let log = s.log();
    assert!(
        log.contains("real containers unavailable") && log.contains("scripts/build-images.sh"),
        "{log}"
    );
}

/// How many MASQUERADE rules in `nat POSTROUTING` have `cidr` as their source.
fn masquerade_rules(cidr: &str) -> usize {
    let out = std::process::Command::new("iptables")
        .args(["-w", "5", "-t", "nat", "-S", "POSTROUTING"])
        .output()
        .expect("iptables runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("-s {cidr}")) && l.contains("MASQUERADE"))
        .count()
}

#[test]
fn standalone_agent_joins_with_real_containers_and_cleans_up_on_sigterm() {
    let s = Server::start();
    let state = s.dir().join("agent-state");
    let log = std::fs::File::create(s.dir().join("agent.log")).unwrap();
    let mut agent = Stopped(
        std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args([
                "agent",
                "--kubeconfig",
                &s.kubeconfig().display().to_string(),
                "--hostname-override",
                "real-1",
                "--container-runtime",
                "cri",
                "--pod-cidr",
                "10.235.0.0/24",
                "--node-ip",
                "127.0.0.1",
                "--state-dir",
                &state.display().to_string(),
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    s.eventually("node real-1 on containerd", Duration::from_secs(60), || {
        let n = s.get_json(&["node", "real-1"])?;
        n["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()?
            .starts_with("containerd://")
            .then_some(())
    });
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: hello}
spec:
  nodeName: real-1
  containers:
  - {name: main, image: tandem.local/busybox:1, command: ["sh", "-c", "echo hello from real-1; sleep 600"]}
"#;
    s.kubectl_stdin(&["apply", "-f", "-"], pod).ok();
    s.eventually("hello logs", LONG, || {
        let out = s.kubectl(&["logs", "hello"]);
        out.stdout.contains("hello from real-1").then_some(())
    });
    let ip = s.get_json(&["pod", "hello"]).unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(in_cidr(&ip, "10.235.0."), "{ip}");

    // One masquerade rule covers the node's pod CIDR (not a chain per pod).
    assert_eq!(
        masquerade_rules("10.235.0.0/24"),
        1,
        "one NAT rule for the pod CIDR while the node runs"
    );

    // SIGTERM: the agent removes its pods and stops its containerd.
    let exited = agent.terminate(Duration::from_secs(60));
    assert!(exited, "the agent stops on SIGTERM");
    assert_eq!(
        masquerade_rules("10.235.0.0/24"),
        0,
        "the NAT rule goes with the node"
    );
    let config = state.join("containerd").join("config.toml");
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    let still = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .any(|l| l.contains(&config.display().to_string()));
    assert!(!still, "containerd stopped with the agent");
}

#[test]
fn kill_9_and_restart_readopts_running_containers() {
    let mut s = Server::start_up_cri("linux=1", "10.237.0.0/16");
    wait_for_node(&s, "linux-1");
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: survivor}
spec:
  containers:
  - {name: web, image: tandem.local/busybox:1, command: ["httpd", "-f", "-p", "80", "-h", "/var/www"]}
"#;
    s.kubectl_stdin(&["apply", "-f", "-"], pod).ok();
    let before = wait_running(&s, "survivor");
    let id = before["status"]["containerStatuses"][0]["containerID"].clone();
    let ip = before["status"]["podIP"].as_str().unwrap().to_string();

    // No clean shutdown: containerd and the pod keep running; the next start adopts them.
    s.restart();
    s.eventually("the node Ready again", Duration::from_secs(60), || {
        let n = s.get_json(&["node", "linux-1"])?;
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let after = s.get_json(&["pod", "survivor"]).unwrap();
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(after["status"]["containerStatuses"][0]["containerID"], id);
    assert_eq!(after["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(after["status"]["podIP"], ip.as_str());
    let (code, _) = http_get(&format!("{ip}:80"), "/").expect("the pod still serves");
    assert_eq!(code, 200);
}

/// A websocket through the API server as kube-rs and the Python client open one: a raw TLS
/// connection with the admin token, the upgrade, then masked frames out and channel frames in.
struct RawWs {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

impl RawWs {
    /// Opens `path` (with its query) offering `protocol`; returns the status line and, after a
    /// 101, the connection.
    fn open(s: &Server, path: &str, protocol: &str) -> (String, Option<RawWs>) {
        use std::sync::Arc;
        let pki = s.data_dir().join("pki");
        let mut roots = rustls::RootCertStore::empty();
        let ca = std::fs::read_to_string(pki.join("ca.crt")).unwrap();
        use rustls::pki_types::pem::PemObject;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let token = std::fs::read_to_string(pki.join("tokens.csv")).unwrap();
        let token = token.split(',').next().unwrap().trim().to_string();
        let url = s.url();
        let addr = url.trim_start_matches("https://").to_string();
        let tcp = TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(tls), name).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        write!(
            stream,
            "GET {path} HTTP/1.1\r\n\
             Host: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
        )
        .unwrap();
        let mut data = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break data.len(),
                Ok(n) => data.extend_from_slice(&chunk[..n]),
            }
        };
        let status = String::from_utf8_lossy(&data[..head_end])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        if !status.contains(" 101 ") {
            return (status, None);
        }
        let buf = data[head_end..].to_vec();
        (status, Some(RawWs { stream, buf }))
    }

    /// Sends one masked binary message.
    fn send(&mut self, payload: &[u8]) {
        let mask = [0x37u8, 0xfa, 0x21, 0x3d];
        let mut frame = vec![0x82];
        assert!(payload.len() < 126, "small messages only");
        frame.push(0x80 | payload.len() as u8);
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).unwrap();
    }

    /// `(channel, payload)` of every binary message until the server closes (or 10 s pass
    /// without data).
    fn frames(mut self) -> Vec<(u8, Vec<u8>)> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
            if self.closed() {
                break;
            }
        }
        let rest = &self.buf;
        let mut frames = Vec::new();
        let mut i = 0;
        while i + 2 <= rest.len() {
            let opcode = rest[i] & 0x0f;
            let mut len = usize::from(rest[i + 1] & 0x7f);
            i += 2;
            if len == 126 {
                len = usize::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
                i += 2;
            }
            let payload = &rest[i..(i + len).min(rest.len())];
            i += len;
            if opcode == 2 && !payload.is_empty() {
                frames.push((payload[0], payload[1..].to_vec()));
            }
        }
        frames
    }

    /// Whether a close frame has arrived.
    fn closed(&self) -> bool {
        let rest = &self.buf;
        let mut i = 0;
        while i + 2 <= rest.len() {
            let opcode = rest[i] & 0x0f;
            let mut len = usize::from(rest[i + 1] & 0x7f);
            i += 2;
            if len == 126 {
                if i + 2 > rest.len() {
                    return false;
                }
                len = usize::from(u16::from_be_bytes([rest[i], rest[i + 1]]));
                i += 2;
            }
            if opcode == 8 {
                return true;
            }
            i += len;
        }
        false
    }
}

/// The exec query of `command` with the given streams.
fn exec_path(pod: &str, command: &[&str], stdin: bool) -> String {
    let mut query = String::new();
    for c in command {
        let enc: String = c
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        query.push_str(&format!("command={enc}&"));
    }
    if stdin {
        query.push_str("stdin=true&");
    }
    format!("/api/v1/namespaces/default/pods/{pod}/exec?{query}stdout=true&stderr=true")
}

/// One exec over a websocket offering `protocol`, without stdin: the status line and the
/// channel frames.
fn websocket_exec(
    s: &Server,
    pod: &str,
    command: &[&str],
    protocol: &str,
) -> (String, Vec<(u8, Vec<u8>)>) {
    let (status, ws) = RawWs::open(s, &exec_path(pod, command, false), protocol);
    (status, ws.map(RawWs::frames).unwrap_or_default())
}

/// The bytes of one channel.
fn channel(frames: &[(u8, Vec<u8>)], channel: u8) -> Vec<u8> {
    frames
        .iter()
        .filter(|(c, _)| *c == channel)
        .flat_map(|(_, p)| p.clone())
        .collect()
}

/// A websocket port-forward (`v4.channel.k8s.io`, `ports=` as the Python client sends it) to
/// `port` of `pod`, one HTTP/1.0 request through it; returns the status line and what came
/// back on the data channel after its port header.
fn websocket_port_forward_get(s: &Server, pod: &str, port: u16) -> (String, String) {
    let path = format!("/api/v1/namespaces/default/pods/{pod}/portforward?ports={port}");
    let (status, ws) = RawWs::open(s, &path, "v4.channel.k8s.io");
    let Some(mut ws) = ws else {
        return (status, String::new());
    };
    ws.send(b"\x00GET / HTTP/1.0\r\nHost: pod\r\n\r\n");
    let frames = ws.frames();
    let data = channel(&frames, 0);
    // Each channel opens with the port, little-endian.
    assert_eq!(data.get(..2), Some(&port.to_le_bytes()[..]), "{frames:?}");
    (status, String::from_utf8_lossy(&data[2..]).into_owned())
}

#[test]
fn websocket_v4_exec_works_for_kube_rs_and_python_style_clients() {
    let s = Server::start_up_cri("linux=1,windows-2022=1", "10.239.0.0/16");
    wait_for_node(&s, "linux-1");
    wait_for_node(&s, "windows-2022-1");
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  containers: [{name: main, image: tandem.local/busybox:1, command: ["sleep", "600"]}]
"#;
    s.kubectl_stdin(&["apply", "-f", "-"], pod).ok();
    wait_running(&s, "shell");
    let (status, frames) = websocket_exec(
        &s,
        "shell",
        &["sh", "-c", "echo hi; exit 3"],
        "v4.channel.k8s.io",
    );
    assert!(status.contains(" 101 "), "{status}");
    let stdout: Vec<u8> = frames
        .iter()
        .filter(|(c, _)| *c == 1)
        .flat_map(|(_, p)| p.clone())
        .collect();
    assert_eq!(String::from_utf8_lossy(&stdout), "hi\n");
    let error = frames
        .iter()
        .find(|(c, p)| *c == 3 && p.starts_with(b"{"))
        .map(|(_, p)| serde_json::from_slice::<Value>(p).unwrap())
        .expect("a status frame on channel 3");
    assert_eq!(error["reason"], "NonZeroExitCode");
    assert_eq!(error["details"]["causes"][0]["message"], "3");
    // v5 alone (client-go's only websocket protocol since 1.30): the agent speaks it to the
    // client and SPDY to containerd, and the close signal ends the command's stdin.
    let (status, ws) = RawWs::open(
        &s,
        &exec_path("shell", &["wc", "-c"], true),
        "v5.channel.k8s.io",
    );
    assert!(status.contains(" 101 "), "{status}");
    let mut ws = ws.unwrap();
    ws.send(b"\x00twelve bytes");
    ws.send(&[255, 0]);
    let frames = ws.frames();
    assert_eq!(
        String::from_utf8_lossy(&channel(&frames, 1)).trim(),
        "12",
        "{frames:?}"
    );
    let error: Value = serde_json::from_slice(&channel(&frames, 3)).unwrap();
    assert_eq!(error["status"], "Success");
    // Offered v5 then v4, v5 wins.
    let (status, frames) = websocket_exec(
        &s,
        "shell",
        &["sh", "-c", "echo v5; exit 4"],
        "v5.channel.k8s.io, v4.channel.k8s.io",
    );
    assert!(status.contains(" 101 "), "{status}");
    assert_eq!(channel(&frames, 1), b"v5\n");
    let error: Value = serde_json::from_slice(&channel(&frames, 3)).unwrap();
    assert_eq!(error["details"]["causes"][0]["message"], "4");

    // Port-forward over websocket channels, on the real pod and on an emulated Windows pod.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  containers:
  - name: httpd
    image: tandem.local/busybox:1
    command: ["sh", "-c", "mkdir -p /www && echo real pod > /www/index.html && httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: iis}
spec:
  nodeSelector: {kubernetes.io/os: windows}
  tolerations: [{key: os, value: windows, effect: NoSchedule}]
  containers:
  - name: iis
    image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022
    ports: [{containerPort: 80}]
"#,
    )
    .ok();
    wait_running(&s, "web");
    wait_running(&s, "iis");
    let (status, body) = websocket_port_forward_get(&s, "web", 8080);
    assert!(status.contains(" 101 "), "{status}");
    assert!(
        body.contains("200 OK") && body.contains("real pod"),
        "{body}"
    );
    let (status, body) = websocket_port_forward_get(&s, "iis", 80);
    assert!(status.contains(" 101 "), "{status}");
    assert!(
        body.contains("200 OK") && body.contains("emulated"),
        "{body}"
    );

    // Stopping with sessions still open leaves no process behind: not containerd, not a shim
    // (each names the private containerd's socket, under the data dir), not a container.
    let (status, open_exec) = RawWs::open(
        &s,
        &exec_path("shell", &["sh", "-c", "echo stay; exec sleep 300"], true),
        "v5.channel.k8s.io",
    );
    assert!(status.contains(" 101 "), "{status}");
    let data_dir = s.data_dir().display().to_string();
    let mut s = s;
    s.terminate();
    drop(open_exec);
    let ps = std::process::Command::new("ps")
        .args(["-eo", "pid,args"])
        .output()
        .unwrap();
    let left: Vec<String> = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.contains(&data_dir))
        .map(str::to_string)
        .collect();
    assert!(
        left.is_empty(),
        "processes of the stopped cluster remain: {left:#?}"
    );
}
