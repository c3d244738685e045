//! End-to-end: discovery, version and schema commands of the stock kubectl.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use common::Server;

#[test]
fn kubectl_version_reports_client_and_server() {
    let s = Server::start();
    let out = s.kubectl(&["version", "-o", "json"]);
    let v = out.json();
    let server = &v["serverVersion"];
    assert!(
        server["major"].as_str().is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(
        server["minor"].as_str().is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(
        server["gitVersion"]
            .as_str()
            .is_some_and(|g| g.starts_with('v')),
        "{v}"
    );
    let text = s.kubectl(&["version"]);
    assert!(text.ok().contains("Server Version:"), "{}", text.stdout);
}

#[test]
fn api_resources_lists_core_apps_and_windows_resources_with_short_names() {
    let s = Server::start();
    let out = s.kubectl(&["api-resources"]);
    let table = out.ok();
    let row = |name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("api-resources has no {name} row:\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let pods = row("pods");
    assert!(pods.contains(&"po".to_string()), "{pods:?}");
    assert!(
        pods.contains(&"Pod".to_string()) && pods.contains(&"true".to_string()),
        "{pods:?}"
    );
    let deploy = row("deployments");
    assert!(deploy.contains(&"deploy".to_string()), "{deploy:?}");
    assert!(deploy.contains(&"apps/v1".to_string()), "{deploy:?}");
    let gmsa = row("gmsacredentialspecs");
    assert!(gmsa.contains(&"windows.k8s.io/v1".to_string()), "{gmsa:?}");
    assert!(
        gmsa.contains(&"false".to_string()),
        "gmsacredentialspecs are cluster-scoped: {gmsa:?}"
    );
    for (name, short) in [
        ("services", "svc"),
        ("nodes", "no"),
        ("namespaces", "ns"),
        ("configmaps", "cm"),
        ("replicasets", "rs"),
        ("daemonsets", "ds"),
        ("statefulsets", "sts"),
        ("persistentvolumeclaims", "pvc"),
        ("cronjobs", "cj"),
        ("ingresses", "ing"),
        ("networkpolicies", "netpol"),
        ("poddisruptionbudgets", "pdb"),
        ("priorityclasses", "pc"),
        ("storageclasses", "sc"),
    ] {
        let r = row(name);
        assert!(
            r.contains(&short.to_string()),
            "{name} lacks short name {short}: {r:?}"
        );
    }
    for name in [
        "jobs",
        "runtimeclasses",
        "leases",
        "endpointslices",
        "secrets",
        "serviceaccounts",
        "ingressclasses",
        "csidrivers",
        "csinodes",
        "csistoragecapacities",
        "volumeattachments",
        "apiservices",
        "mutatingwebhookconfigurations",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "validatingwebhookconfigurations",
    ] {
        row(name);
    }
    // Short names resolve in ordinary commands.
    s.kubectl(&["get", "po"]).ok();
    s.kubectl(&["get", "deploy"]).ok();
}

#[test]
fn api_resources_filters_by_group_and_verbs() {
    let s = Server::start();
    let out = s.kubectl(&["api-resources", "--api-group=apps", "-o", "name"]);
    let names: Vec<&str> = out.ok().lines().collect();
    for r in [
        "deployments.apps",
        "replicasets.apps",
        "daemonsets.apps",
        "statefulsets.apps",
    ] {
        assert!(names.contains(&r), "{r} missing from {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("pods")), "{names:?}");
    let namespaced = s.kubectl(&["api-resources", "--namespaced=false", "-o", "name"]);
    let names: Vec<&str> = namespaced.ok().lines().collect();
    assert!(
        names.contains(&"nodes") && names.contains(&"namespaces"),
        "{names:?}"
    );
    assert!(!names.contains(&"pods"), "{names:?}");
}

#[test]
fn api_versions_lists_every_served_group_version() {
    let s = Server::start();
    let out = s.kubectl(&["api-versions"]);
    let versions: Vec<&str> = out.ok().lines().collect();
    for gv in [
        "v1",
        "apps/v1",
        "batch/v1",
        "node.k8s.io/v1",
        "coordination.k8s.io/v1",
        "discovery.k8s.io/v1",
        "events.k8s.io/v1",
        "networking.k8s.io/v1",
        "policy/v1",
        "scheduling.k8s.io/v1",
        "storage.k8s.io/v1",
        "apiregistration.k8s.io/v1",
        "admissionregistration.k8s.io/v1",
        "windows.k8s.io/v1",
    ] {
        assert!(
            versions.contains(&gv),
            "{gv} missing from api-versions: {versions:?}"
        );
    }
}

#[test]
fn cluster_info_names_the_control_plane_url() {
    let s = Server::start();
    let out = s.kubectl(&["cluster-info"]);
    let text = out.ok();
    assert!(text.contains("is running at"), "{text}");
    assert!(
        text.contains(&s.url()),
        "cluster-info should name {}: {text}",
        s.url()
    );
}

#[test]
fn explain_pod_spec_os_describes_the_field_and_its_type() {
    let s = Server::start();
    let out = s.kubectl(&["explain", "pod.spec.os"]);
    let text = out.ok();
    assert!(text.contains("os"), "{text}");
    assert!(
        text.contains("PodOS") || text.contains("<Object>"),
        "type missing: {text}"
    );
    assert!(
        text.contains("name"),
        "the `name` subfield should be listed: {text}"
    );
    let deep = s.kubectl(&["explain", "pod.spec.os.name"]);
    let deep = deep.ok();
    assert!(deep.contains("<string>"), "{deep}");
    let recursive = s.kubectl(&["explain", "deployments.spec.strategy", "--recursive"]);
    assert!(
        recursive.ok().contains("rollingUpdate"),
        "{}",
        recursive.stdout
    );
}

#[test]
fn health_endpoints_answer_ok() {
    let s = Server::start();
    for path in ["/readyz", "/livez", "/healthz"] {
        let out = s.kubectl(&["get", "--raw", path]);
        assert_eq!(out.ok().trim(), "ok", "{path}");
    }
    let openapi = s.kubectl(&["get", "--raw", "/openapi/v3"]);
    assert!(openapi.json()["paths"].is_object(), "{}", openapi.stdout);
}

#[test]
fn builtin_namespaces_exist_and_are_active() {
    let s = Server::start();
    let out = s.kubectl(&["get", "namespaces", "-o", "json"]);
    let v = out.json();
    let items = v["items"].as_array().expect("items");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let item = items
            .iter()
            .find(|i| i["metadata"]["name"] == ns)
            .unwrap_or_else(|| panic!("namespace {ns} missing: {v}"));
        assert_eq!(item["status"]["phase"], "Active", "namespace {ns}: {item}");
    }
    let table = s.kubectl(&["get", "namespace", "default"]);
    let row = table.ok().lines().nth(1).unwrap_or_default().to_string();
    assert!(
        row.contains("Active"),
        "STATUS column should say Active: {}",
        table.stdout
    );
}
