//! End-to-end: Pod Security Admission (issue 35) through the stock kubectl. Namespaces labelled
//! at each level refuse and warn with upstream's messages; a Windows pod passes `restricted`
//! without the Linux-only fields, a HostProcess pod is refused by `baseline`; workload templates
//! get warnings; raising a namespace's enforce level with `--dry-run=server` names the existing
//! pods that would violate it; bad labels are a 422 naming the label; an
//! `--admission-control-config-file` sets cluster defaults and exemptions.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use common::{Output, Server};

/// `out`, after checking that the command succeeded.
#[track_caller]
fn succeeded(out: Output) -> Output {
    assert!(out.success(), "{}", out.combined());
    out
}

const ADMISSION_CONFIG: &str = r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: baseline, enforce-version: latest}
    exemptions: {namespaces: [exempt]}
"#;

const NAMESPACES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: locked, labels: {pod-security.kubernetes.io/enforce: restricted}}
---
apiVersion: v1
kind: Namespace
metadata: {name: warned, labels: {pod-security.kubernetes.io/enforce: privileged, pod-security.kubernetes.io/warn: restricted}}
---
apiVersion: v1
kind: Namespace
metadata: {name: exempt}
---
apiVersion: v1
kind: Namespace
metadata: {name: plain}
"#;

fn bare_pod(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  containers: [{{name: c, image: tandem.local/busybox:1}}]\n"
    )
}

const HARDENED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hardened, namespace: locked}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: c
    image: tandem.local/busybox:1
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"#;

const WINDOWS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: iis, namespace: locked}
spec:
  os: {name: windows}
  securityContext: {runAsNonRoot: true, windowsOptions: {runAsUserName: ContainerUser}}
  containers: [{name: iis, image: mcr.microsoft.com/windows/servercore/iis:windowsservercore-ltsc2022}]
"#;

const HOST_PROCESS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: hpc, namespace: plain}
spec:
  os: {name: windows}
  hostNetwork: true
  securityContext: {windowsOptions: {hostProcess: true, runAsUserName: "NT AUTHORITY\\SYSTEM"}}
  containers: [{name: agent, image: mcr.microsoft.com/windows/nanoserver:ltsc2022}]
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: locked}
spec:
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: tandem.local/busybox:1}]
"#;

const RESTRICTED_BARE: &str = "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

#[test]
fn pod_security_levels_refuse_warn_and_report_with_upstreams_messages() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(&config, ADMISSION_CONFIG).unwrap();
    let s = Server::start_with(&[
        "server",
        "--admission-control-config-file",
        config.to_str().unwrap(),
    ]);
    s.kubectl_stdin(&["apply", "-f", "-"], NAMESPACES).ok();

    // restricted: a bare pod is refused with upstream's message.
    let refused = s.kubectl_stdin(&["apply", "-f", "-"], &bare_pod("locked", "bare"));
    assert!(!refused.success(), "{}", refused.combined());
    assert!(
        refused.stderr.contains(&format!(
            "pods \"bare\" is forbidden: violates PodSecurity \"restricted:latest\": {RESTRICTED_BARE}"
        )),
        "{}",
        refused.stderr
    );
    // … a hardened one and a Windows pod without the Linux-only fields are admitted.
    s.kubectl_stdin(&["apply", "-f", "-"], HARDENED).ok();
    s.kubectl_stdin(&["apply", "-f", "-"], WINDOWS).ok();
    // A workload's template only warns (enforce's level is also warn's).
    let deployment = succeeded(s.kubectl_stdin(&["apply", "-f", "-"], DEPLOYMENT));
    assert!(
        deployment.stderr.contains(
            "Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"web\" must set"
        ),
        "{}",
        deployment.stderr
    );

    // The cluster default (baseline) holds in an unlabelled namespace: HostProcess is refused.
    let hpc = s.kubectl_stdin(&["apply", "-f", "-"], HOST_PROCESS);
    assert!(!hpc.success(), "{}", hpc.combined());
    assert!(
        hpc.stderr.contains("pods \"hpc\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true), hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)"),
        "{}",
        hpc.stderr
    );
    // … except in the exempt namespace.
    s.kubectl_stdin(
        &["apply", "-f", "-"],
        &HOST_PROCESS.replace("namespace: plain", "namespace: exempt"),
    )
    .ok();

    // warn: admitted with upstream's warning.
    let warned = succeeded(s.kubectl_stdin(&["apply", "-f", "-"], &bare_pod("warned", "bare")));
    assert!(
        warned.stderr.contains(&format!(
            "Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_BARE}"
        )),
        "{}",
        warned.stderr
    );
    s.kubectl_stdin(&["apply", "-f", "-"], &bare_pod("warned", "bare-2"))
        .ok();

    // Raising the enforce level, dry run: the existing pods that would violate it.
    let dry = succeeded(s.kubectl(&[
        "label",
        "namespace",
        "warned",
        "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted",
        "--dry-run=server",
    ]));
    assert!(
        dry.stderr.contains("Warning: existing pods in namespace \"warned\" violate the new PodSecurity enforce level \"restricted:latest\""),
        "{}",
        dry.stderr
    );
    assert!(
        dry.stderr.contains(&format!(
            "Warning: bare (and 1 other pod): {RESTRICTED_BARE}"
        )),
        "{}",
        dry.stderr
    );
    let ns = s.get_json(&["namespace", "warned"]).unwrap();
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged",
        "a dry run changes nothing"
    );

    // A bad level is a 422 naming the label; the namespace keeps its labels.
    let bad = s.kubectl(&[
        "label",
        "namespace",
        "plain",
        "pod-security.kubernetes.io/enforce=strict",
    ]);
    assert!(!bad.success(), "{}", bad.combined());
    assert!(
        bad.stderr.contains("metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
        "{}",
        bad.stderr
    );
    // Status writes are never checked: the refused pod's namespace still takes them.
    let status = s.kubectl(&[
        "patch",
        "pod",
        "hardened",
        "-n",
        "locked",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"message":"checked"}}"#,
    ]);
    assert!(status.success(), "{}", status.combined());
}
