//! End-to-end: the emulated SMB CSI driver `smb.csi.k8s.io` (kubernetes-csi/csi-driver-smb as a
//! cluster would install it) with the stock kubectl. On `tandem up`'s emulated nodes: the
//! CSIDriver and the `smb-csi` class are installed and say they are emulated, every node's
//! CSINode lists the driver, the seed claim `billing-data-pvc.yaml` (ReadWriteMany, 50Gi)
//! binds at once to a CSI volume with no node affinity, Windows pods on both Windows nodes
//! mount it and run, a larger request expands it, and deleting the claim deletes the volume
//! and its share directory. A user's own `smb-csi` class survives the installer. On a
//! real Linux node (`--linux-runtime cri`, root and the project's images, as e2e_cri.rs): two
//! pods share the claim's files for real.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Server, seed};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(120);

fn wait_installed(s: &Server) -> (Value, Value) {
    let class = s.eventually("StorageClass smb-csi", LONG, || {
        s.get_json(&["storageclass", "smb-csi"])
    });
    let driver = s.eventually("CSIDriver smb.csi.k8s.io", LONG, || {
        s.get_json(&["csidriver", "smb.csi.k8s.io"])
    });
    (class, driver)
}

fn bound_volume(s: &Server, claim: &str) -> (Value, Value) {
    let pvc = s.eventually(&format!("claim {claim} Bound"), LONG, || {
        let c = s.get_json(&["pvc", claim])?;
        (c["status"]["phase"] == "Bound").then_some(c)
    });
    let name = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
    (pvc, s.get_json(&["pv", &name]).unwrap())
}

fn running(s: &Server, pod: &str) -> Value {
    s.eventually(&format!("{pod} Running"), LONG, || {
        let p = s.get_json(&["pod", pod])?;
        (p["status"]["phase"] == "Running").then_some(p)
    })
}

fn events_of(s: &Server, name: &str) -> Vec<(String, String)> {
    let selector = format!("involvedObject.name={name}");
    s.get_json(&["events", "--field-selector", &selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pod_manifest(name: &str, claim: &str, extra_spec: &str, image: &str, command: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{extra_spec}  containers:\n  - name: main\n    image: {image}\n    imagePullPolicy: IfNotPresent\n{command}    volumeMounts: [{{name: data, mountPath: /data}}]\n  volumes:\n  - name: data\n    persistentVolumeClaim: {{claimName: {claim}}}\n"
    )
}

/// The directory standing in for a provisioned volume (`<share root>/<server>/<share>/<subDir>`).
fn share_directory(driver: &Value, pv: &Value) -> PathBuf {
    let root = driver["metadata"]["annotations"]["smb.csi.tandem.dev/share-root"]
        .as_str()
        .unwrap();
    let sub_dir = pv["spec"]["csi"]["volumeAttributes"]["subDir"]
        .as_str()
        .unwrap();
    PathBuf::from(root)
        .join("tandem-emulated-smb/share")
        .join(sub_dir)
}

#[test]
fn the_seed_smb_claim_binds_read_write_many_and_windows_pods_mount_it() {
    let s = Server::start_up(None);
    let (class, driver) = wait_installed(&s);
    assert_eq!(class["provisioner"], "smb.csi.k8s.io");
    assert_eq!(class["parameters"]["source"], "//tandem-emulated-smb/share");
    assert_eq!(class["volumeBindingMode"], "Immediate");
    assert_eq!(class["reclaimPolicy"], "Delete");
    assert_eq!(class["allowVolumeExpansion"], true);
    assert!(
        class["metadata"]["annotations"]
            .get("storageclass.kubernetes.io/is-default-class")
            .is_none(),
        "{class}"
    );
    assert_eq!(driver["spec"]["attachRequired"], false);
    assert_eq!(
        driver["spec"]["volumeLifecycleModes"],
        serde_json::json!(["Persistent"])
    );
    let root = driver["metadata"]["annotations"]["smb.csi.tandem.dev/share-root"]
        .as_str()
        .unwrap();
    assert_eq!(
        PathBuf::from(root),
        std::path::absolute(s.data_dir().join("smb-share")).unwrap()
    );
    let describe = s.kubectl(&["describe", "csidriver", "smb.csi.k8s.io"]);
    assert!(describe.ok().contains("emulated"), "{}", describe.ok());

    // Every node, Windows included, registers the driver in its CSINode.
    for node in ["linux-1", "windows-2019-1", "windows-2022-1"] {
        s.eventually(&format!("CSINode {node} lists the driver"), LONG, || {
            let c = s.get_json(&["csinode", node])?;
            let drivers = c["spec"]["drivers"].as_array()?;
            drivers
                .iter()
                .any(|d| d["name"] == "smb.csi.k8s.io" && d["nodeID"] == node)
                .then_some(())
        });
    }

    // The walkthrough's claim binds at once (Immediate), ReadWriteMany, 50Gi.
    let out = s.kubectl(&["apply", "-f", &seed("billing-data-pvc.yaml")]);
    assert!(out.success(), "{}", out.combined());
    let (pvc, pv) = bound_volume(&s, "billing-data");
    assert_eq!(
        pvc["status"]["accessModes"],
        serde_json::json!(["ReadWriteMany"])
    );
    assert_eq!(pvc["status"]["capacity"]["storage"], "50Gi");
    let uid = pvc["metadata"]["uid"].as_str().unwrap();
    let pv_name = format!("pvc-{uid}");
    assert_eq!(pv["metadata"]["name"], pv_name.as_str());
    assert_eq!(pv["spec"]["csi"]["driver"], "smb.csi.k8s.io");
    assert_eq!(
        pv["spec"]["csi"]["volumeHandle"],
        format!("tandem-emulated-smb/share#{pv_name}")
    );
    assert_eq!(
        pv["spec"]["accessModes"],
        serde_json::json!(["ReadWriteMany"])
    );
    assert!(pv["spec"].get("nodeAffinity").is_none(), "{pv}");
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
        "smb.csi.k8s.io"
    );
    let describe = s.kubectl(&["describe", "pv", &pv_name]);
    assert!(
        describe.ok().contains("smb.csi.tandem.dev/emulated"),
        "{}",
        describe.ok()
    );
    let events = events_of(&s, "billing-data");
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "ProvisioningSucceeded" && m.contains("emulated")),
        "{events:?}"
    );
    let dir = share_directory(&driver, &pv);
    assert!(dir.is_dir(), "{} was not created", dir.display());

    // Windows pods on both Windows nodes use the shared claim at once.
    let mut nodes = Vec::new();
    for (pod, node, tag) in [
        ("billing-2019", "windows-2019-1", "ltsc2019"),
        ("billing-2022", "windows-2022-1", "ltsc2022"),
    ] {
        s.create(&pod_manifest(
            pod,
            "billing-data",
            &format!(
                "  nodeSelector: {{kubernetes.io/os: windows, kubernetes.io/hostname: {node}}}\n"
            ),
            &format!("mcr.microsoft.com/windows/nanoserver:{tag}"),
            "",
        ));
    }
    for pod in ["billing-2019", "billing-2022"] {
        let p = running(&s, pod);
        nodes.push(p["spec"]["nodeName"].as_str().unwrap().to_string());
    }
    assert_eq!(nodes, ["windows-2019-1", "windows-2022-1"]);

    // The class allows expansion: a larger request grows the volume, then the claim's status.
    let out = s.kubectl(&[
        "patch",
        "pvc",
        "billing-data",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"60Gi"}}}}"#,
    ]);
    assert!(out.success(), "{}", out.combined());
    s.eventually("claim capacity 60Gi", LONG, || {
        let c = s.get_json(&["pvc", "billing-data"])?;
        (c["status"]["capacity"]["storage"] == "60Gi").then_some(())
    });
    let pv = s.get_json(&["pv", &pv_name]).unwrap();
    assert_eq!(pv["spec"]["capacity"]["storage"], "60Gi");

    // Deleting the pods and the claim deletes the volume and its directory (reclaim Delete).
    s.kubectl(&[
        "delete",
        "pod",
        "billing-2019",
        "billing-2022",
        "--wait=true",
    ])
    .ok();
    let out = s.kubectl(&["delete", "pvc", "billing-data", "--wait=true"]);
    assert!(out.success(), "{}", out.combined());
    s.eventually("volume deleted with its claim", LONG, || {
        s.get_json(&["pv", &pv_name]).is_none().then_some(())
    });
    assert!(!dir.exists(), "{} outlived its volume", dir.display());
}

#[test]
fn a_users_own_smb_class_survives_a_restart_and_is_used() {
    let mut s = Server::start();
    wait_installed(&s);
    // The user's class of that name, with a share and onDelete of their own.
    let own = "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: smb-csi}\nprovisioner: smb.csi.k8s.io\nparameters: {source: //nas/team, onDelete: retain}\nreclaimPolicy: Delete\nvolumeBindingMode: Immediate\n";
    let out = s.kubectl(&["delete", "storageclass", "smb-csi"]);
    assert!(out.success(), "{}", out.combined());
    s.create(own);
    // The installer runs again at start and leaves the user's class alone.
    s.restart();
    let (class, driver) = wait_installed(&s);
    assert_eq!(class["parameters"]["source"], "//nas/team", "{class}");
    let out = s.kubectl(&["apply", "-f", &seed("billing-data-pvc.yaml")]);
    assert!(out.success(), "{}", out.combined());
    let (_, pv) = bound_volume(&s, "billing-data");
    let pv_name = pv["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(
        pv["spec"]["csi"]["volumeAttributes"],
        serde_json::json!({"source": "//nas/team", "onDelete": "retain", "subDir": pv_name})
    );
    let root = driver["metadata"]["annotations"]["smb.csi.tandem.dev/share-root"]
        .as_str()
        .unwrap();
    let dir = PathBuf::from(root).join("nas/team").join(&pv_name);
    assert!(dir.is_dir(), "{}", dir.display());
    // onDelete: retain keeps the directory when the volume goes.
    let out = s.kubectl(&["delete", "pvc", "billing-data", "--wait=true"]);
    assert!(out.success(), "{}", out.combined());
    s.eventually("volume deleted with its claim", LONG, || {
        s.get_json(&["pv", &pv_name]).is_none().then_some(())
    });
    assert!(dir.is_dir(), "retained directory {} removed", dir.display());
}

#[test]
fn two_real_pods_share_the_claims_files() {
    let s = Server::start_up_cri("linux=1", "10.157.0.0/16");
    s.eventually("node linux-1", LONG, || s.get_json(&["node", "linux-1"]));
    let (_, driver) = wait_installed(&s);
    let out = s.kubectl(&["apply", "-f", &seed("billing-data-pvc.yaml")]);
    assert!(out.success(), "{}", out.combined());
    let (_, pv) = bound_volume(&s, "billing-data");
    let dir = share_directory(&driver, &pv);
    let spec = "  terminationGracePeriodSeconds: 1\n  nodeSelector: {kubernetes.io/os: linux}\n";
    s.create(&pod_manifest(
        "writer",
        "billing-data",
        spec,
        "tandem.local/busybox:1",
        "    command: [\"sh\", \"-c\", \"echo shared-between-pods > /data/note.txt; sleep 600\"]\n",
    ));
    running(&s, "writer");
    s.create(&pod_manifest(
        "reader",
        "billing-data",
        spec,
        "tandem.local/busybox:1",
        "    command: [\"sh\", \"-c\", \"while ! cat /data/note.txt; do sleep 1; done; echo from-reader > /data/reply.txt; sleep 600\"]\n",
    ));
    running(&s, "reader");
    // Both run at once: the reader sees the writer's file, and the writer's mount sees the
    // reader's answer.
    s.eventually("the reader prints the writer's note", LONG, || {
        let out = s.kubectl(&["logs", "reader"]);
        (out.success() && out.stdout.contains("shared-between-pods")).then_some(())
    });
    s.eventually("the writer sees the reader's file", LONG, || {
        let out = s.kubectl(&["exec", "writer", "--", "cat", "/data/reply.txt"]);
        (out.success() && out.stdout.contains("from-reader")).then_some(())
    });
    assert!(dir.join("note.txt").is_file(), "{}", dir.display());

    let pv_name = pv["metadata"]["name"].as_str().unwrap().to_string();
    s.kubectl(&["delete", "pod", "writer", "reader", "--wait=true"])
        .ok();
    s.kubectl(&["delete", "pvc", "billing-data", "--wait=true"])
        .ok();
    s.eventually("volume and directory gone", LONG, || {
        (s.get_json(&["pv", &pv_name]).is_none() && !dir.exists()).then_some(())
    });
}
