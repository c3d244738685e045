//! End-to-end: kubectl commands that change objects (label, annotate, patch, edit, scale, delete,
//! wait, taint, cordon) and namespace deletion.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::time::Duration;

use common::{Server, configmap, deployment, node, pod};

const SETTLE: Duration = Duration::from_secs(30);

fn jsonpath(s: &Server, args: &[&str], path: &str) -> String {
    let mut full = vec!["get"];
    full.extend_from_slice(args);
    let expr = format!("jsonpath={path}");
    full.extend_from_slice(&["-o", &expr]);
    s.kubectl(&full).ok().to_string()
}

#[test]
fn label_adds_overwrites_and_removes_labels() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    let out = s.kubectl(&["label", "cm", "cfg", "tier=web"]);
    assert_eq!(out.ok().trim(), "configmap/cfg labeled");
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.labels.tier}"),
        "web"
    );
    let clash = s.kubectl(&["label", "cm", "cfg", "tier=db"]);
    assert!(
        clash.err().contains("already has a value (web)"),
        "{}",
        clash.stderr
    );
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.labels.tier}"),
        "web"
    );
    s.kubectl(&["label", "cm", "cfg", "tier=db", "--overwrite"])
        .ok();
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.labels.tier}"),
        "db"
    );
    let removed = s.kubectl(&["label", "cm", "cfg", "tier-"]);
    assert_eq!(removed.ok().trim(), "configmap/cfg unlabeled");
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.metadata.labels}"), "");
    let invalid = s.kubectl(&["label", "cm", "cfg", "bad key=x"]);
    invalid.err();
}

#[test]
fn invalid_label_value_sent_in_a_patch_is_rejected_and_nothing_changes() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    let rv = jsonpath(&s, &["cm", "cfg"], "{.metadata.resourceVersion}");
    // kubectl label validates values client-side; a patch reaches the server's validation.
    let out = s.kubectl(&[
        "patch",
        "cm",
        "cfg",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":"-not-valid-"}}}"#,
    ]);
    let err = out.err();
    assert!(err.contains("is invalid"), "{err}");
    assert!(
        err.contains("metadata.labels"),
        "the cause should name metadata.labels: {err}"
    );
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.resourceVersion}"),
        rv
    );
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.metadata.labels}"), "");
}

#[test]
fn annotate_adds_overwrites_and_removes_annotations() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    let out = s.kubectl(&["annotate", "cm", "cfg", "owner=team-a"]);
    assert_eq!(out.ok().trim(), "configmap/cfg annotated");
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.annotations.owner}"),
        "team-a"
    );
    let clash = s.kubectl(&["annotate", "cm", "cfg", "owner=team-b"]);
    assert!(
        clash.err().contains("already has a value (team-a)"),
        "{}",
        clash.stderr
    );
    s.kubectl(&["annotate", "cm", "cfg", "owner=team-b", "--overwrite"])
        .ok();
    assert_eq!(
        jsonpath(&s, &["cm", "cfg"], "{.metadata.annotations.owner}"),
        "team-b"
    );
    s.kubectl(&["annotate", "cm", "cfg", "owner-"]).ok();
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.metadata.annotations}"), "");
}

#[test]
fn patch_applies_json_merge_and_strategic_patches() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    let out = s.kubectl(&[
        "patch", "cm", "cfg", "--type", "json", "-p",
        r#"[{"op":"replace","path":"/data/key","value":"from-json"},{"op":"add","path":"/data/extra","value":"x"}]"#,
    ]);
    assert_eq!(out.ok().trim(), "configmap/cfg patched");
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.data.key}"), "from-json");
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.data.extra}"), "x");

    s.kubectl(&[
        "patch",
        "cm",
        "cfg",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"extra":null,"merged":"m"}}"#,
    ])
    .ok();
    let data = s.get_json(&["cm", "cfg"]).unwrap()["data"].clone();
    assert_eq!(data, serde_json::json!({"key": "from-json", "merged": "m"}));

    // Strategic merge patch merges the containers list by name...
    s.create(&deployment("web", 1));
    s.kubectl(&[
        "patch", "deploy", "web", "--type", "strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.36"}]}}}}"#,
    ])
    .ok();
    let images = jsonpath(
        &s,
        &["deploy", "web"],
        "{.spec.template.spec.containers[*].image}",
    );
    assert_eq!(
        images, "busybox:1.36 nginx:1.25",
        "strategic merge keeps both containers"
    );
    s.kubectl(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.26"}]}}}}"#,
    ])
    .ok();
    let images = jsonpath(
        &s,
        &["deploy", "web"],
        "{.spec.template.spec.containers[*].image}",
    );
    assert!(
        images.contains("nginx:1.26") && images.contains("busybox:1.36"),
        "{images}"
    );
    // ...while a merge patch replaces the list wholesale.
    s.kubectl(&[
        "patch",
        "deploy",
        "web",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"only","image":"redis:7"}]}}}}"#,
    ])
    .ok();
    let names = jsonpath(
        &s,
        &["deploy", "web"],
        "{.spec.template.spec.containers[*].name}",
    );
    assert_eq!(names, "only");
    // Strategic $patch: delete removes one element by its merge key.
    s.kubectl(&[
        "patch", "deploy", "web", "--type", "strategic", "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"more","image":"redis:7"},{"name":"only","$patch":"delete"}]}}}}"#,
    ])
    .ok();
    let names = jsonpath(
        &s,
        &["deploy", "web"],
        "{.spec.template.spec.containers[*].name}",
    );
    assert_eq!(names, "more");
}

#[test]
fn edit_saves_the_editors_change() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    let editor = "sed -i -e s/key:\\ value/key:\\ edited/";
    let out = s.kubectl_env(&["edit", "cm", "cfg"], &[("KUBE_EDITOR", editor)]);
    assert_eq!(out.ok().trim(), "configmap/cfg edited", "{}", out.stderr);
    assert_eq!(jsonpath(&s, &["cm", "cfg"], "{.data.key}"), "edited");
    // EDITOR is honoured too, and an edit that changes nothing is reported as such.
    let out = s.kubectl_env(&["edit", "cm", "cfg"], &[("EDITOR", "true")]);
    let all = out.combined();
    assert!(out.success(), "{all}");
    assert!(all.contains("Edit cancelled, no changes made."), "{all}");
}

#[test]
fn scale_sets_replicas_through_the_scale_subresource() {
    let s = Server::start();
    s.create(&deployment("web", 2));
    let out = s.kubectl(&["scale", "deploy", "web", "--replicas=4"]);
    assert_eq!(out.ok().trim(), "deployment.apps/web scaled");
    assert_eq!(jsonpath(&s, &["deploy", "web"], "{.spec.replicas}"), "4");
    let stale = s.kubectl(&[
        "scale",
        "deploy",
        "web",
        "--current-replicas=2",
        "--replicas=1",
    ]);
    stale.err();
    assert_eq!(jsonpath(&s, &["deploy", "web"], "{.spec.replicas}"), "4");
    let scale = s
        .kubectl(&[
            "get",
            "--raw",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
        ])
        .json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"]["selector"], "app=web");
}

#[test]
fn describe_shows_the_objects_details() {
    let s = Server::start();
    s.create(&pod("web-1", None));
    let out = s.kubectl(&["describe", "pod", "web-1"]);
    let text = out.ok();
    for want in [
        "Name:",
        "web-1",
        "Namespace:",
        "default",
        "Containers:",
        "registry.k8s.io/pause:3.9",
        "Status:",
        "Pending",
    ] {
        assert!(text.contains(want), "describe pod lacks {want}:\n{text}");
    }
    s.create(&deployment("web", 3));
    let out = s.kubectl(&["describe", "deploy", "web"]);
    let text = out.ok();
    for want in [
        "Name:",
        "Selector:",
        "app=web",
        "Replicas:",
        "3 desired",
        "StrategyType:",
        "RollingUpdate",
        "nginx:1.25",
    ] {
        assert!(
            text.contains(want),
            "describe deployment lacks {want}:\n{text}"
        );
    }
    s.create(&node("win-node-1"));
    let out = s.kubectl(&["describe", "node", "win-node-1"]);
    let text = out.ok();
    for want in [
        "Name:",
        "win-node-1",
        "Labels:",
        "kubernetes.io/os=windows",
        "Taints:",
    ] {
        assert!(text.contains(want), "describe node lacks {want}:\n{text}");
    }
}

#[test]
fn delete_with_wait_returns_once_the_object_is_gone() {
    let s = Server::start();
    s.create(&configmap("cfg", &[]));
    s.create(&pod("unbound", None));
    let out = s.kubectl(&["delete", "cm", "cfg", "--wait=true", "--timeout=45s"]);
    assert_eq!(out.ok().trim(), "configmap \"cfg\" deleted");
    assert!(s.get_json(&["cm", "cfg"]).is_none());
    // A pod no node has accepted is deleted at once (upstream skips graceful deletion for it).
    let out = s.kubectl(&["delete", "pod", "unbound", "--wait=true", "--timeout=45s"]);
    assert_eq!(out.ok().trim(), "pod \"unbound\" deleted");
    assert!(s.get_json(&["pod", "unbound"]).is_none());
    let missing = s.kubectl(&["delete", "cm", "cfg"]);
    assert!(missing.err().contains("NotFound"), "{}", missing.stderr);
    s.kubectl(&["delete", "cm", "cfg", "--ignore-not-found"])
        .ok();
}

#[test]
fn delete_keeps_an_object_with_a_finalizer_until_the_finalizer_is_removed() {
    let s = Server::start();
    s.create("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers:\n  - example.com/hold\n");
    s.kubectl(&["delete", "cm", "held", "--wait=false"]).ok();
    let held = s
        .get_json(&["cm", "held"])
        .expect("still there while finalizer is set");
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    s.kubectl(&[
        "patch",
        "cm",
        "held",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .ok();
    s.eventually("finalized configmap to be gone", SETTLE, || {
        s.get_json(&["cm", "held"]).is_none().then_some(())
    });
}

/// Creates Deployment `web` and a hand-made ReplicaSet `web-rs` owned by it; returns the RS uid.
fn deployment_with_dependent(s: &Server) -> String {
    s.create(&deployment("web", 1));
    let uid = jsonpath(s, &["deploy", "web"], "{.metadata.uid}");
    assert!(!uid.is_empty());
    s.create(&format!(
        r#"apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-rs
  labels:
    app: web
  ownerReferences:
  - apiVersion: apps/v1
    kind: Deployment
    name: web
    uid: {uid}
    controller: true
    blockOwnerDeletion: true
spec:
  replicas: 0
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.25
"#
    ));
    jsonpath(s, &["rs", "web-rs"], "{.metadata.uid}")
}

#[test]
fn delete_with_background_cascade_removes_dependents() {
    let s = Server::start();
    deployment_with_dependent(&s);
    let out = s.kubectl(&[
        "delete",
        "deploy",
        "web",
        "--cascade=background",
        "--timeout=45s",
    ]);
    assert!(
        out.ok().contains("deployment.apps \"web\" deleted"),
        "{}",
        out.stdout
    );
    assert!(s.get_json(&["deploy", "web"]).is_none());
    s.eventually(
        "the dependent ReplicaSet to be garbage-collected",
        SETTLE,
        || s.get_json(&["rs", "web-rs"]).is_none().then_some(()),
    );
}

#[test]
fn delete_with_foreground_cascade_removes_dependents_before_the_owner() {
    let s = Server::start();
    deployment_with_dependent(&s);
    let out = s.kubectl(&[
        "delete",
        "deploy",
        "web",
        "--cascade=foreground",
        "--wait=false",
    ]);
    out.ok();
    // The owner is either already gone or waits, marked for deletion with the foreground finalizer.
    if let Some(d) = s.get_json(&["deploy", "web"]) {
        assert!(d["metadata"]["deletionTimestamp"].is_string(), "{d}");
        let finalizers = d["metadata"]["finalizers"].to_string();
        assert!(finalizers.contains("foregroundDeletion"), "{d}");
    }
    s.eventually("owner and dependent to be gone", SETTLE, || {
        let rs_gone = s.get_json(&["rs", "web-rs"]).is_none();
        let deploy = s.get_json(&["deploy", "web"]);
        // While the dependent exists, the owner must still exist.
        assert!(
            rs_gone || deploy.is_some(),
            "owner removed before its blocking dependent"
        );
        (rs_gone && deploy.is_none()).then_some(())
    });
}

#[test]
fn delete_with_orphan_cascade_keeps_dependents_without_owner_reference() {
    let s = Server::start();
    let rs_uid = deployment_with_dependent(&s);
    let out = s.kubectl(&[
        "delete",
        "deploy",
        "web",
        "--cascade=orphan",
        "--timeout=45s",
    ]);
    out.ok();
    s.eventually("the owner to be gone", SETTLE, || {
        s.get_json(&["deploy", "web"]).is_none().then_some(())
    });
    let rs = s
        .get_json(&["rs", "web-rs"])
        .expect("orphaned ReplicaSet survives");
    assert_eq!(rs["metadata"]["uid"], rs_uid.as_str());
    let refs = &rs["metadata"]["ownerReferences"];
    assert!(
        refs.is_null() || refs.as_array().is_some_and(|a| a.is_empty()),
        "the orphan's ownerReference should be removed: {rs}"
    );
}

#[test]
fn wait_for_condition_returns_when_the_status_condition_is_set() {
    let s = Server::start();
    s.create(&pod("x", None));
    let mut wait = s.kubectl_stream(&["wait", "--for=condition=Ready", "pod/x", "--timeout=45s"]);
    let out = s.kubectl(&[
        "patch",
        "pod",
        "x",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    assert_eq!(out.ok().trim(), "pod/x patched");
    let line = wait.wait_for("condition met", Duration::from_secs(60), |l| {
        l.contains("condition met")
    });
    assert_eq!(line.trim(), "pod/x condition met");
    let status = wait
        .wait_exit(Duration::from_secs(30))
        .expect("kubectl wait exits");
    assert!(status.success(), "{status}");
    // The status subresource does not let a spec change through.
    let spec = s.kubectl(&[
        "patch",
        "pod",
        "x",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"activeDeadlineSeconds":5}}"#,
    ]);
    spec.ok();
    assert_eq!(
        jsonpath(&s, &["pod", "x"], "{.spec.activeDeadlineSeconds}"),
        ""
    );
}

#[test]
fn wait_for_condition_times_out_when_the_condition_never_holds() {
    let s = Server::start();
    s.create(&pod("never", None));
    let out = s.kubectl(&["wait", "--for=condition=Ready", "pod/never", "--timeout=2s"]);
    assert!(
        out.err().contains("timed out waiting for the condition"),
        "{}",
        out.stderr
    );
}

#[test]
fn wait_for_delete_returns_when_the_object_is_deleted() {
    let s = Server::start();
    s.create(&configmap("doomed", &[]));
    let mut wait = s.kubectl_stream(&["wait", "--for=delete", "configmap/doomed", "--timeout=45s"]);
    s.kubectl(&["delete", "cm", "doomed", "--wait=false"]).ok();
    let status = wait
        .wait_exit(Duration::from_secs(60))
        .expect("kubectl wait exits");
    assert!(
        status.success(),
        "kubectl wait --for=delete failed: {status}; output {:?}",
        wait.seen()
    );
}

#[test]
fn taint_adds_and_removes_node_taints() {
    let s = Server::start();
    s.create(&node("win-node-1"));
    let out = s.kubectl(&["taint", "nodes", "win-node-1", "os=windows:NoSchedule"]);
    assert_eq!(out.ok().trim(), "node/win-node-1 tainted");
    let taints = s.get_json(&["node", "win-node-1"]).unwrap()["spec"]["taints"].clone();
    assert_eq!(
        taints,
        serde_json::json!([{"key": "os", "value": "windows", "effect": "NoSchedule"}])
    );
    let again = s.kubectl(&["taint", "nodes", "win-node-1", "os=linux:NoSchedule"]);
    again.err();
    s.kubectl(&[
        "taint",
        "nodes",
        "win-node-1",
        "os=linux:NoSchedule",
        "--overwrite",
    ])
    .ok();
    assert_eq!(
        jsonpath(&s, &["node", "win-node-1"], "{.spec.taints[0].value}"),
        "linux"
    );
    let out = s.kubectl(&["taint", "nodes", "win-node-1", "os:NoSchedule-"]);
    assert_eq!(out.ok().trim(), "node/win-node-1 untainted");
    assert_eq!(jsonpath(&s, &["node", "win-node-1"], "{.spec.taints}"), "");
    // An invalid effect is refused.
    s.kubectl(&["taint", "nodes", "win-node-1", "os=windows:Sometimes"])
        .err();
}

#[test]
fn cordon_and_uncordon_toggle_node_schedulability() {
    let s = Server::start();
    s.create(&node("win-node-1"));
    let out = s.kubectl(&["cordon", "win-node-1"]);
    assert_eq!(out.ok().trim(), "node/win-node-1 cordoned");
    assert_eq!(
        jsonpath(&s, &["node", "win-node-1"], "{.spec.unschedulable}"),
        "true"
    );
    let table = s.kubectl(&["get", "node", "win-node-1"]);
    assert!(
        table.ok().contains("SchedulingDisabled"),
        "{}",
        table.stdout
    );
    let again = s.kubectl(&["cordon", "win-node-1"]);
    assert!(again.ok().contains("already cordoned"), "{}", again.stdout);
    let out = s.kubectl(&["uncordon", "win-node-1"]);
    assert_eq!(out.ok().trim(), "node/win-node-1 uncordoned");
    assert_eq!(
        jsonpath(&s, &["node", "win-node-1"], "{.spec.unschedulable}"),
        ""
    );
    let table = s.kubectl(&["get", "node", "win-node-1"]);
    assert!(
        !table.ok().contains("SchedulingDisabled"),
        "{}",
        table.stdout
    );
}

#[test]
fn namespace_from_a_manifest_holds_objects_and_deleting_it_removes_them() {
    let s = Server::start();
    let out = s.kubectl_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\n{}---\n{}---\n{}",
            configmap("cfg", &[]).replacen("metadata:\n", "metadata:\n  namespace: team\n", 1),
            pod("worker", None).replacen("metadata:\n", "metadata:\n  namespace: team\n", 1),
            deployment("web", 1).replacen("metadata:\n", "metadata:\n  namespace: team\n", 1),
        ),
    );
    let text = out.ok();
    assert!(text.contains("namespace/team created"), "{text}");
    assert!(s.get_json(&["cm", "cfg", "-n", "team"]).is_some());
    assert_eq!(jsonpath(&s, &["ns", "team"], "{.status.phase}"), "Active");

    let out = s.kubectl(&["delete", "namespace", "team", "--timeout=45s"]);
    assert!(
        out.ok().contains("namespace \"team\" deleted"),
        "{}",
        out.stdout
    );
    s.eventually("namespace team to be gone", SETTLE, || {
        s.get_json(&["ns", "team"]).is_none().then_some(())
    });
    for kind in ["cm", "pods", "deployments"] {
        let left = s.kubectl(&["get", kind, "-n", "team", "-o", "name"]);
        assert_eq!(left.ok().trim(), "", "{kind} left in deleted namespace");
    }
    // The name can be reused, and starts empty.
    s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n",
    )
    .ok();
    assert!(s.get_json(&["cm", "cfg", "-n", "team"]).is_none());
}

#[test]
fn terminating_namespace_refuses_new_objects_until_it_is_gone() {
    let s = Server::start();
    s.kubectl_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: held\n",
    )
    .ok();
    // A finalizer on content keeps the namespace Terminating while we probe it.
    s.kubectl_stdin(
        &["create", "-n", "held", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pinned\n  finalizers:\n  - example.com/hold\n",
    )
    .ok();
    s.kubectl(&["delete", "ns", "held", "--wait=false"]).ok();
    s.eventually("namespace to be Terminating", SETTLE, || {
        (jsonpath(&s, &["ns", "held"], "{.status.phase}") == "Terminating").then_some(())
    });
    let refused = s.kubectl_stdin(
        &["create", "-n", "held", "-f", "-"],
        &configmap("late", &[]),
    );
    let err = refused.err();
    assert!(
        err.contains("Forbidden") && err.contains("being terminated"),
        "{err}"
    );
    s.kubectl(&[
        "patch",
        "cm",
        "pinned",
        "-n",
        "held",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .ok();
    s.eventually("namespace held to be gone", SETTLE, || {
        s.get_json(&["ns", "held"]).is_none().then_some(())
    });
}

#[test]
fn creating_into_a_missing_namespace_is_refused() {
    let s = Server::start();
    let out = s.kubectl_stdin(
        &["create", "-n", "nowhere", "-f", "-"],
        &configmap("cfg", &[]),
    );
    let err = out.err();
    assert!(
        err.contains("NotFound") && err.contains("namespaces \"nowhere\" not found"),
        "{err}"
    );
}
