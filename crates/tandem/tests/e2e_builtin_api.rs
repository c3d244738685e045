//! End-to-end: the built-in groups beyond the workload API (networking, policy, scheduling,
//! storage, apiregistration) are served as upstream serves them, and what charts and kubectl
//! build on them works: `kubectl apply --prune` with its default allowlist, the typed `kubectl
//! create` generators (sent as protobuf), the objects every cluster starts with.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use common::Server;

#[test]
fn system_priority_classes_exist_from_the_first_start() {
    let s = Server::start();
    let v = s
        .get_json(&["priorityclass", "system-node-critical"])
        .expect("system-node-critical exists");
    assert_eq!(v["value"], 2_000_001_000, "{v}");
    let v = s
        .get_json(&["pc", "system-cluster-critical"])
        .expect("system-cluster-critical exists");
    assert_eq!(v["value"], 2_000_000_000, "{v}");
}

#[test]
fn every_served_group_version_has_an_available_local_api_service() {
    let s = Server::start();
    let list = s
        .get_json(&["apiservices"])
        .expect("apiservices are listed");
    let items = list["items"].as_array().unwrap();
    let names: Vec<&str> = items
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    for name in [
        "v1.",
        "v1.apps",
        "v1.networking.k8s.io",
        "v1.policy",
        "v1.scheduling.k8s.io",
        "v1.storage.k8s.io",
        "v1.apiregistration.k8s.io",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    for item in items {
        assert!(item["spec"]["service"].is_null(), "local: {item}");
        let conditions = item["status"]["conditions"].as_array().unwrap();
        assert!(
            conditions.iter().any(|c| c["type"] == "Available"
                && c["status"] == "True"
                && c["reason"] == "Local"),
            "{item}"
        );
    }
    let apps = items
        .iter()
        .find(|i| i["metadata"]["name"] == "v1.apps")
        .unwrap();
    assert_eq!(apps["spec"]["group"], "apps");
    assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
    assert_eq!(apps["spec"]["versionPriority"], 15);
}

#[test]
fn typed_generators_create_the_new_kinds() {
    let s = Server::start();
    s.kubectl(&["create", "priorityclass", "high", "--value=1000"])
        .ok();
    s.kubectl(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=1",
    ])
    .ok();
    s.kubectl(&["create", "ingress", "web", "--rule=web.example.com/=web:80"])
        .ok();
    let pc = s.get_json(&["priorityclass", "high"]).unwrap();
    assert_eq!(pc["value"], 1000, "{pc}");
    let pdb = s.get_json(&["pdb", "web"]).unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1, "{pdb}");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app"], "web");
    let ing = s.get_json(&["ingress", "web"]).unwrap();
    let rule = &ing["spec"]["rules"][0];
    assert_eq!(rule["host"], "web.example.com", "{ing}");
    assert_eq!(
        rule["http"]["paths"][0]["backend"]["service"]["name"], "web",
        "{ing}"
    );
    // The same objects read back in protobuf, the form kubectl's generators sent them in.
    let out = s.kubectl(&[
        "get",
        "--raw",
        "/apis/networking.k8s.io/v1/namespaces/default/ingresses/web",
    ]);
    assert!(out.ok().contains("web.example.com"), "{}", out.stdout);
}

#[test]
fn apply_prune_with_the_default_allowlist_removes_what_left_the_manifests() {
    let s = Server::start();
    let both = format!(
        "{}---\n{}",
        common::configmap("keep", &[("app", "prune-test")]),
        common::configmap("drop", &[("app", "prune-test")])
    );
    let file = s.write_file("both.yaml", &both);
    s.kubectl(&[
        "apply",
        "--prune",
        "-l",
        "app=prune-test",
        "-f",
        file.to_str().unwrap(),
    ])
    .ok();
    assert!(s.get_json(&["configmap", "drop"]).is_some());
    let one = s.write_file(
        "one.yaml",
        &common::configmap("keep", &[("app", "prune-test")]),
    );
    let out = s.kubectl(&[
        "apply",
        "--prune",
        "-l",
        "app=prune-test",
        "-f",
        one.to_str().unwrap(),
    ]);
    let text = out.ok();
    assert!(text.contains("configmap/drop pruned"), "{text}");
    assert!(s.get_json(&["configmap", "drop"]).is_none());
    assert!(s.get_json(&["configmap", "keep"]).is_some());
}
