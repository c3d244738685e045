//! End-to-end: Windows-aware admission through the stock kubectl (issue 3) — RuntimeClass
//! scheduling merged into pods, gMSA credential specs filled in, upstream's pod OS refusals, and
//! the warnings kubectl prints for what Windows nodes cannot honour.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::{Server, seed};
use serde_json::Value;

fn pods_with_label(s: &Server, selector: &str) -> Vec<Value> {
    s.get_json(&["pods", "-l", selector])
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn runtime_class_scheduling_is_merged_into_the_iis_pods() {
    let s = Server::start();
    s.kubectl(&["apply", "-f", &seed("runtimeClasses.yml")])
        .ok();
    s.kubectl(&["apply", "-f", &seed("iis-2019.yaml")]).ok();
    // The Deployment controller creates the pod; admission merges the RuntimeClass into it.
    let pod = s.eventually("an iis-2019 pod", Duration::from_secs(60), || {
        pods_with_label(&s, "app=iis-2019").into_iter().next()
    });
    let selector = &pod["spec"]["nodeSelector"];
    assert_eq!(selector["kubernetes.io/os"], "windows", "{pod}");
    assert_eq!(
        selector["node.kubernetes.io/windows-build"], "10.0.17763",
        "{pod}"
    );
    assert_eq!(selector["kubernetes.io/arch"], "amd64", "{pod}");
    let tolerations = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "os" && t["value"] == "windows" && t["effect"] == "NoSchedule"),
        "the RuntimeClass toleration is merged: {tolerations:?}"
    );
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/not-ready" && t["tolerationSeconds"] == 300),
        "default tolerations are added: {tolerations:?}"
    );
}

#[test]
fn missing_runtime_class_is_refused_and_nothing_is_stored() {
    let s = Server::start();
    let out = s.kubectl_stdin(
        &["apply", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: norc}\nspec:\n  runtimeClassName: nope\n  containers: [{name: c, image: busybox}]\n",
    );
    assert!(!out.success(), "{}", out.combined());
    assert!(
        out.stderr.contains("RuntimeClass \"nope\" not found"),
        "{}",
        out.stderr
    );
    assert!(s.get_json(&["pod", "norc"]).is_none());
}

#[test]
fn gmsa_pod_carries_the_credential_spec_content() {
    let s = Server::start();
    s.kubectl(&["apply", "-f", &seed("gmsa-billing.yaml")]).ok();
    let pod = s.get_json(&["pod", "billing-worker"]).expect("pod exists");
    let filled = pod["spec"]["securityContext"]["windowsOptions"]["gmsaCredentialSpec"]
        .as_str()
        .unwrap_or_default();
    let spec: Value = serde_json::from_str(filled).unwrap_or(Value::Null);
    let stored = s
        .get_json(&["gmsacredentialspec", "billing-gmsa"])
        .expect("spec exists");
    assert_eq!(
        spec, stored["credspec"],
        "the pod carries the named spec's credspec"
    );
}

#[test]
fn windows_pod_with_privileged_container_is_refused_with_422_naming_the_field() {
    let s = Server::start();
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: winpriv}\nspec:\n  os: {name: windows}\n  containers: [{name: c, image: mcr.microsoft.com/windows/nanoserver:ltsc2022, securityContext: {privileged: true}}]\n";
    let (out, codes) = s.kubectl_codes(&["apply", "-f", "-"], Some(manifest));
    assert!(!out.success(), "{}", out.combined());
    assert!(codes.contains(&422), "codes {codes:?}");
    assert!(
        out.stderr.contains("spec.containers[0].securityContext.privileged: Forbidden: cannot be set for a windows pod"),
        "{}",
        out.stderr
    );
    assert!(
        s.get_json(&["pod", "winpriv"]).is_none(),
        "nothing is stored"
    );
}

#[test]
fn linux_pod_with_windows_options_is_refused() {
    let s = Server::start();
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: linwin}\nspec:\n  os: {name: linux}\n  securityContext: {windowsOptions: {runAsUserName: ContainerUser}}\n  containers: [{name: c, image: busybox}]\n";
    let (out, codes) = s.kubectl_codes(&["apply", "-f", "-"], Some(manifest));
    assert!(codes.contains(&422), "codes {codes:?}: {}", out.stderr);
    assert!(out.stderr.contains("spec.securityContext.windowsOptions: Forbidden: windows options cannot be set for a linux pod"), "{}", out.stderr);
    assert!(
        s.get_json(&["pod", "linwin"]).is_none(),
        "nothing is stored"
    );
}

#[test]
fn windows_pod_with_subpath_is_accepted_with_a_warning() {
    let s = Server::start();
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: winsub}\nspec:\n  os: {name: windows}\n  nodeSelector: {kubernetes.io/os: windows, node.kubernetes.io/windows-build: 10.0.20348}\n  containers:\n  - name: c\n    image: mcr.microsoft.com/windows/servercore:ltsc2022\n    volumeMounts: [{name: v, mountPath: 'C:\\data', subPath: x}]\n  volumes: [{name: v, emptyDir: {}}]\n";
    let out = s.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(
        out.stdout.contains("pod/winsub created"),
        "{}",
        out.combined()
    );
    assert!(
        out.stderr
            .contains("Warning: spec.containers[0].volumeMounts[0].subPath"),
        "kubectl prints the warning: {}",
        out.stderr
    );
    assert!(s.get_json(&["pod", "winsub"]).is_some());
}

#[test]
fn workload_selecting_windows_without_spec_os_is_warned() {
    let s = Server::start();
    let out = s.kubectl(&["apply", "-f", &seed("win-webserver.yaml")]);
    assert!(out.success(), "{}", out.combined());
    assert!(
        out.stderr
            .contains("Warning: spec.template.spec.os.name: the pod selects Windows nodes"),
        "{}",
        out.stderr
    );
}
