//! End-to-end `kubectl debug` on `tandem up --linux-runtime cri`: ephemeral containers added
//! through `pods/<name>/ephemeralcontainers` (upstream `EphemeralContainersREST`) start in the
//! running pod's sandbox, share the target container's PID namespace (`--target`), report
//! `status.ephemeralContainerStatuses`, and serve exec, logs and attach like any container.
//! Removing one is refused with upstream's `ValidatePodEphemeralContainersUpdate` message.
//! `kubectl debug node/NAME` creates a pod that runs on that node. Needs root and the images
//! `scripts/build-images.sh` builds, as e2e_cri does.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);
const IMAGE: &str = "tandem.local/busybox:1";

const TARGET_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: target}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: tandem.local/busybox:1
    imagePullPolicy: Never
    command: ["sleep", "3600"]
"#;

fn start() -> Server {
    Server::start_up_with(&[
        "--linux-runtime",
        "cri",
        "--nodes",
        "linux=1",
        "--cluster-cidr",
        "10.251.0.0/16",
        "--service-cidr",
        "10.135.0.0/16",
        "--ingress=false",
    ])
}

/// The status of ephemeral container `name` of pod `pod` once it has a `state.running`.
fn wait_ephemeral_running(s: &Server, pod: &str, name: &str) -> Value {
    s.eventually(&format!("ephemeral container {name} running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        let st = p["status"]["ephemeralContainerStatuses"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)?
            .clone();
        st["state"]["running"].is_object().then_some(st)
    })
}

#[test]
fn kubectl_debug_runs_ephemeral_containers_in_the_targets_pid_namespace() {
    let s = start();
    s.eventually("the Linux node on containerd", LONG, || {
        let out = s.kubectl(&["get", "nodes", "-o", "wide"]);
        out.stdout.contains("containerd://").then_some(())
    });
    s.kubectl_stdin(&["apply", "-f", "-"], TARGET_POD).ok();
    s.eventually("the target pod running", LONG, || {
        let p = s.get_json(&["pod", "target"])?;
        (p["status"]["phase"] == "Running").then_some(())
    });

    // Non-interactive: the debug container keeps running; exec and logs reach it by name.
    s.kubectl(&[
        "debug",
        "target",
        &format!("--image={IMAGE}"),
        "--target=app",
        "--container=dbg",
        "--",
        "sh",
        "-c",
        "echo debugger-up; sleep 1000",
    ])
    .ok();
    let st = wait_ephemeral_running(&s, "target", "dbg");
    assert!(
        st["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://"),
        "{st}"
    );
    assert_eq!(st["ready"], false, "ephemeral containers are never ready");
    let ps = s.kubectl(&["exec", "target", "-c", "dbg", "--", "ps"]);
    assert!(
        ps.ok().contains("sleep 3600"),
        "ps in the debug container shows the target's processes:\n{}",
        ps.stdout
    );
    s.eventually("the debug container's log", Duration::from_secs(30), || {
        let logs = s.kubectl(&["logs", "target", "-c", "dbg"]);
        logs.stdout.contains("debugger-up").then_some(())
    });
    // The pod itself stays Running and ready: ephemeral containers do not count.
    let pod = s.get_json(&["pod", "target"]).unwrap();
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(
        pod["status"]["containerStatuses"].as_array().unwrap().len(),
        1
    );

    // Existing ephemeral containers cannot be removed (PUT of the subresource).
    let mut pod = s.get_json(&["pod", "target"]).unwrap();
    pod["spec"]["ephemeralContainers"] = Value::Array(Vec::new());
    let file = s.write_file("no-ephemeral.json", &pod.to_string());
    let refused = s.kubectl(&[
        "replace",
        "--raw",
        "/api/v1/namespaces/default/pods/target/ephemeralcontainers",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(!refused.success(), "{}", refused.combined());
    assert!(
        refused
            .stderr
            .contains(r#"existing ephemeral containers "dbg" may not be removed"#),
        "{}",
        refused.stderr
    );
    // Nor changed.
    let mut pod = s.get_json(&["pod", "target"]).unwrap();
    pod["spec"]["ephemeralContainers"][0]["image"] = Value::from("tandem.local/other:1");
    let file = s.write_file("changed-ephemeral.json", &pod.to_string());
    let refused = s.kubectl(&[
        "replace",
        "--raw",
        "/api/v1/namespaces/default/pods/target/ephemeralcontainers",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(
        refused
            .stderr
            .contains(r#"existing ephemeral containers "dbg" may not be changed"#),
        "{}",
        refused.stderr
    );

    // A node debug pod runs on the node it names.
    let node = s
        .get_json(&["nodes", "-l", "kubernetes.io/os=linux"])
        .and_then(|l| l["items"][0]["metadata"]["name"].as_str().map(String::from))
        .unwrap();
    s.kubectl(&[
        "debug",
        &format!("node/{node}"),
        &format!("--image={IMAGE}"),
        "--",
        "true",
    ])
    .ok();
    let debug_pod = s.eventually("the node debugger pod succeeded", LONG, || {
        let l = s.get_json(&["pods"])?;
        l["items"]
            .as_array()?
            .iter()
            .find(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("node-debugger-{node}-")))
                    && p["status"]["phase"] == "Succeeded"
            })
            .cloned()
    });
    assert_eq!(debug_pod["spec"]["nodeName"], node.as_str());
    assert_eq!(
        debug_pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        0
    );

    // Interactive: a debug container with stdin, attached to; stdin reaches its shell and the
    // output comes back. (`kubectl debug -i` attaches the same way once it has seen the
    // container running on a watch; see the report about protobuf watch events.)
    s.kubectl(&[
        "debug",
        "target",
        "-i",
        "--attach=false",
        &format!("--image={IMAGE}"),
        "--target=app",
        "--container=dbg-it",
        "--",
        "sh",
    ])
    .ok();
    wait_ephemeral_running(&s, "target", "dbg-it");
    let attached = std::process::Command::new("sh")
        .args([
            "-c",
            "(printf 'ps\\necho hi-from-debug\\n'; sleep 6) | timeout 60 kubectl attach -i target -c dbg-it",
        ])
        .env("KUBECONFIG", s.kubeconfig())
        .env("HOME", s.dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&attached.stdout);
    let err = String::from_utf8_lossy(&attached.stderr);
    assert!(text.contains("hi-from-debug"), "{text}\n{err}");
    assert!(
        text.contains("sleep 3600"),
        "the debug shell sees the target's processes: {text}\n{err}"
    );
}
