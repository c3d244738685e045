//! End-to-end: the built-in local-path provisioner (k3s' local-path-provisioner) with the stock
//! kubectl. On emulated nodes: the default StorageClass, a claim that stays Pending until a pod
//! uses it (WaitForFirstConsumer), its volume on the pod's node, emulated volumes said to be so
//! on Linux and Windows nodes, and a deleted claim taking its volume along. On a real Linux node
//! (`--linux-runtime cri`, root and the project's images, as e2e_cri.rs): data written by one pod
//! is read by the next, and deleting the claim removes the directory through the node's agent.
//!
//! The seed manifest `billing-data-pvc.yaml` is not used: it asks for `ReadWriteMany` SMB storage
//! (class `smb-csi`), which one directory on one node cannot offer.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn wait_class(s: &Server) -> Value {
    s.eventually("default StorageClass local-path", LONG, || {
        s.get_json(&["storageclass", "local-path"])
    })
}

fn claim_manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 128Mi}}}}\n"
    )
}

fn pod_manifest(name: &str, claim: &str, extra_spec: &str, image: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{extra_spec}  containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: IfNotPresent\n{command}    volumeMounts: [{{name: data, mountPath: /data}}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: {claim}}}\n"
    )
}

fn bound_volume(s: &Server, claim: &str) -> Value {
    let pvc = s.eventually(&format!("claim {claim} Bound"), LONG, || {
        let c = s.get_json(&["pvc", claim])?;
        (c["status"]["phase"] == "Bound").then_some(c)
    });
    let name = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
    s.get_json(&["pv", &name]).unwrap()
}

fn affinity_host(pv: &Value) -> String {
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        [0]
    .as_str()
    .unwrap_or_default()
    .to_string()
}

fn event_reasons(s: &Server, name: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={name}");
    s.get_json(&["events", "--field-selector", &selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn claims_wait_for_their_pod_bind_on_its_node_and_leave_with_their_volume() {
    let s = Server::start_up(None);
    let class = wait_class(&s);
    assert_eq!(class["provisioner"], "tandem.io/local-path");
    assert_eq!(class["volumeBindingMode"], "WaitForFirstConsumer");
    assert_eq!(class["reclaimPolicy"], "Delete");
    assert_eq!(
        class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );

    // The claim names no class: it gets the default one and waits for a consumer.
    s.create(&claim_manifest("data"));
    let pvc = s.get_json(&["pvc", "data"]).unwrap();
    assert_eq!(pvc["spec"]["storageClassName"], "local-path");
    s.eventually("WaitForFirstConsumer event", LONG, || {
        event_reasons(&s, "data")
            .iter()
            .any(|r| r == "WaitForFirstConsumer")
            .then_some(())
    });
    let pvc = s.get_json(&["pvc", "data"]).unwrap();
    assert_eq!(pvc["status"]["phase"], "Pending");
    let volumes = s.get_json(&["pv"]).unwrap();
    assert_eq!(volumes["items"].as_array().map(Vec::len), Some(0));

    // A Linux pod uses it: the claim binds to a volume on the pod's node.
    s.create(&pod_manifest(
        "writer",
        "data",
        "",
        "tandem.local/busybox:1",
        "",
    ));
    let pv = bound_volume(&s, "data");
    let pod = s.eventually("writer Running", LONG, || {
        let p = s.get_json(&["pod", "writer"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
    assert_eq!(affinity_host(&pv), node);
    let pvc = s.get_json(&["pvc", "data"]).unwrap();
    assert_eq!(
        pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
        node
    );
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        "tandem.io/local-path"
    );
    let path = pv["spec"]["hostPath"]["path"].as_str().unwrap();
    let uid = pvc["metadata"]["uid"].as_str().unwrap();
    assert!(
        path.ends_with(&format!("/pvc-{uid}_default_data")),
        "{path}"
    );
    let emulated = pv["metadata"]["annotations"]["local-path.tandem.dev/emulated"]
        .as_str()
        .unwrap_or_default();
    assert!(emulated.contains("emulated runtime (linux)"), "{pv}");
    let reasons = event_reasons(&s, "data");
    assert!(
        reasons.iter().any(|r| r == "ProvisioningSucceeded"),
        "{reasons:?}"
    );

    // A Windows pod's claim lands on its Windows node, emulated and said so.
    s.create(&claim_manifest("win-data"));
    s.create(&pod_manifest(
        "win",
        "win-data",
        "  nodeSelector: {kubernetes.io/os: windows}\n",
        "mcr.microsoft.com/windows/servercore:ltsc2019",
        "",
    ));
    let win_pv = bound_volume(&s, "win-data");
    assert_eq!(affinity_host(&win_pv), "windows-2019-1");
    let emulated = win_pv["metadata"]["annotations"]["local-path.tandem.dev/emulated"]
        .as_str()
        .unwrap_or_default();
    assert!(emulated.contains("emulated runtime (windows)"), "{win_pv}");

    // Deleting the pod and the claim deletes the volume (reclaim policy Delete).
    let pv_name = pv["metadata"]["name"].as_str().unwrap().to_string();
    s.kubectl(&["delete", "pod", "writer", "--wait=true"]).ok();
    s.kubectl(&["delete", "pvc", "data", "--wait=true"]).ok();
    s.eventually("volume deleted with its claim", LONG, || {
        s.get_json(&["pv", &pv_name]).is_none().then_some(())
    });
}

fn running(s: &Server, pod: &str) -> Value {
    s.eventually(&format!("{pod} Running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
}

#[test]
fn data_written_by_a_real_pod_is_read_by_the_next_and_goes_with_the_claim() {
    let s = Server::start_up_cri("linux=1", "10.246.0.0/16");
    s.eventually("node linux-1", LONG, || s.get_json(&["node", "linux-1"]));
    wait_class(&s);
    let root = s.data_dir().join("nodes").join("linux-1").join("storage");
    s.eventually("the node publishes its local-path root", LONG, || {
        let n = s.get_json(&["node", "linux-1"])?;
        (n["metadata"]["annotations"]["local-path.tandem.dev/root"] == root.display().to_string())
            .then_some(())
    });
    s.create(&claim_manifest("notes"));
    s.create(&pod_manifest(
        "writer",
        "notes",
        "  terminationGracePeriodSeconds: 1\n",
        "tandem.local/busybox:1",
        "    command: [\"sh\", \"-c\", \"echo kept-across-pods > /data/note.txt; sleep 600\"]\n",
    ));
    running(&s, "writer");
    let pv = bound_volume(&s, "notes");
    assert!(
        pv["metadata"]["annotations"]
            .get("local-path.tandem.dev/emulated")
            .is_none(),
        "{pv}"
    );
    let dir = PathBuf::from(pv["spec"]["hostPath"]["path"].as_str().unwrap());
    assert!(
        dir.starts_with(&root),
        "{} not under {}",
        dir.display(),
        root.display()
    );
    let file = dir.join("note.txt");
    s.eventually("the pod's file on the node", LONG, || {
        std::fs::read_to_string(&file)
            .ok()
            .filter(|t| t.contains("kept-across-pods"))
    });

    // The pod goes; another one reads what the first wrote.
    s.kubectl(&["delete", "pod", "writer", "--wait=true"]).ok();
    s.create(&pod_manifest(
        "reader",
        "notes",
        "  terminationGracePeriodSeconds: 1\n",
        "tandem.local/busybox:1",
        "    command: [\"sh\", \"-c\", \"cat /data/note.txt; sleep 600\"]\n",
    ));
    running(&s, "reader");
    s.eventually("the reader prints the writer's note", LONG, || {
        let out = s.kubectl(&["logs", "reader"]);
        (out.success() && out.stdout.contains("kept-across-pods")).then_some(())
    });

    // Deleting the claim: the agent removes the directory, then the volume is deleted.
    let pv_name = pv["metadata"]["name"].as_str().unwrap().to_string();
    s.kubectl(&["delete", "pod", "reader", "--wait=true"]).ok();
    s.kubectl(&["delete", "pvc", "notes", "--wait=true"]).ok();
    s.eventually("volume and directory gone", LONG, || {
        (s.get_json(&["pv", &pv_name]).is_none() && !dir.exists()).then_some(())
    });
    assert!(root.exists(), "the root stays");
}
