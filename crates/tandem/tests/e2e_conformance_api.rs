//! End-to-end: behaviours of the Kubernetes conformance list (docs/conformance.md) that are plain
//! API lifecycles — create, read, list by label, patch, replace, delete, deletecollection — and
//! the refusals that go with them, sent as raw requests to one control plane.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;
mod raw_api;

use std::time::Duration;

use common::Server;
use raw_api::{Api, Reply};
use serde_json::{Value, json};

const MERGE: &str = "application/merge-patch+json";

fn api(s: &Server) -> Api {
    Api::new(&s.data_dir(), &s.url()).unwrap()
}

#[track_caller]
fn expect(reply: Reply, code: u16) -> Value {
    assert_eq!(reply.code, code, "{}", reply.body);
    reply.json()
}

/// The names in a list answer.
fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Create three labelled objects at `collection` (a list path) from `make(name)`, read one,
/// list them by label, merge-patch one's labels, replace (PUT) it with a new annotation, delete
/// one, then deletecollection by label: the steps the conformance lifecycle tests take.
fn lifecycle(api: &Api, collection: &str, make: impl Fn(&str) -> Value) {
    let mut watch = api.connect(Duration::from_secs(10)).unwrap();
    let code = watch
        .start_stream(&format!(
            "{collection}?watch=1&labelSelector=suite%3Dlifecycle"
        ))
        .unwrap();
    assert_eq!(code, 200);
    for name in ["lc-a", "lc-b", "lc-c"] {
        let mut obj = make(name);
        obj["metadata"]["labels"] = json!({"suite": "lifecycle"});
        let created = expect(
            api.request("POST", collection, Some(&obj.to_string()))
                .unwrap(),
            201,
        );
        assert_eq!(created["metadata"]["name"], name);
    }
    // The watch sees the three arrive.
    let mut added = Vec::new();
    let mut pending = Vec::new();
    while added.len() < 3 {
        let chunk = watch.next_chunk().unwrap().expect("the watch stays open");
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            if event["type"] == "ADDED" {
                added.push(
                    event["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                );
            }
        }
    }
    added.sort();
    assert_eq!(added, ["lc-a", "lc-b", "lc-c"]);
    let item = |name: &str| format!("{collection}/{name}");
    let got = expect(api.request("GET", &item("lc-a"), None).unwrap(), 200);
    assert_eq!(got["metadata"]["labels"]["suite"], "lifecycle");

    let listed = expect(
        api.request(
            "GET",
            &format!("{collection}?labelSelector=suite%3Dlifecycle"),
            None,
        )
        .unwrap(),
        200,
    );
    assert_eq!(names(&listed), ["lc-a", "lc-b", "lc-c"]);
    // Namespaced kinds list across namespaces too.
    if let Some((group, rest)) = collection.split_once("/namespaces/default/") {
        let all = expect(
            api.request(
                "GET",
                &format!("{group}/{rest}?labelSelector=suite%3Dlifecycle"),
                None,
            )
            .unwrap(),
            200,
        );
        assert_eq!(names(&all), ["lc-a", "lc-b", "lc-c"]);
    }

    let patched = expect(
        api.request_as(
            "PATCH",
            &item("lc-a"),
            MERGE,
            &json!({"metadata": {"labels": {"patched": "yes"}}}).to_string(),
        )
        .unwrap(),
        200,
    );
    assert_eq!(patched["metadata"]["labels"]["patched"], "yes");
    assert_eq!(patched["metadata"]["labels"]["suite"], "lifecycle");

    // Replace (PUT) a fresh copy with a new annotation; a controller writing the object's status
    // meanwhile makes a try conflict, so read again and retry (a few times at most).
    let mut replaced = None;
    for _ in 0..5 {
        let mut replacement = expect(api.request("GET", &item("lc-a"), None).unwrap(), 200);
        replacement["metadata"]["annotations"] = json!({"replaced": "true"});
        let reply = api
            .request("PUT", &item("lc-a"), Some(&replacement.to_string()))
            .unwrap();
        match reply.code {
            200 => {
                replaced = Some(reply.json());
                break;
            }
            409 => continue,
            code => panic!("replace answered {code}: {}", reply.body),
        }
    }
    let replaced = replaced.expect("a replace goes through");
    assert_eq!(replaced["metadata"]["annotations"]["replaced"], "true");
    assert_ne!(
        replaced["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );
    // A replace from a stale copy (the patched one) conflicts.
    let stale = api
        .request("PUT", &item("lc-a"), Some(&patched.to_string()))
        .unwrap();
    assert_eq!(stale.code, 409, "{}", stale.body);

    expect(api.request("DELETE", &item("lc-b"), None).unwrap(), 200);
    let gone = api.request("GET", &item("lc-b"), None).unwrap();
    assert_eq!(gone.code, 404, "{}", gone.body);

    expect(
        api.request(
            "DELETE",
            &format!("{collection}?labelSelector=suite%3Dlifecycle"),
            None,
        )
        .unwrap(),
        200,
    );
    let listed = expect(
        api.request(
            "GET",
            &format!("{collection}?labelSelector=suite%3Dlifecycle"),
            None,
        )
        .unwrap(),
        200,
    );
    assert!(names(&listed).is_empty(), "{listed}");

    // The same watch saw the changes and every deletion.
    let mut modified = false;
    let mut deleted = Vec::new();
    while deleted.len() < 3 {
        let chunk = watch.next_chunk().unwrap().expect("the watch stays open");
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            let name = event["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            match event["type"].as_str() {
                Some("MODIFIED") if name == "lc-a" => modified = true,
                Some("DELETED") => deleted.push(name.to_string()),
                _ => {}
            }
        }
    }
    assert!(modified, "no MODIFIED event for the patched object");
    deleted.sort();
    assert_eq!(deleted, ["lc-a", "lc-b", "lc-c"]);
}

#[test]
fn conformance_api_lifecycles_and_refusals() {
    let s = Server::start();
    let api = api(&s);

    // [sig-node] PodTemplates: lifecycle, replace, delete a collection.
    lifecycle(&api, "/api/v1/namespaces/default/podtemplates", |name| {
        json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
               "template": {"spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1"}]}}})
    });
    // [sig-node] Lease API.
    lifecycle(
        &api,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        |name| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
               "spec": {"holderIdentity": "suite", "leaseDurationSeconds": 30}})
        },
    );
    // [sig-network] Services: delete a collection.
    lifecycle(&api, "/api/v1/namespaces/default/services", |name| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"ports": [{"port": 80}], "selector": {"app": name}}})
    });
    // [sig-scheduling] LimitRange: list, patch and delete by collection.
    lifecycle(&api, "/api/v1/namespaces/default/limitranges", |name| {
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name},
               "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}})
    });
    // [sig-api-machinery] ResourceQuota lifecycle.
    lifecycle(&api, "/api/v1/namespaces/default/resourcequotas", |name| {
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
               "spec": {"hard": {"pods": "10"}}})
    });

    // [sig-storage] CSIStorageCapacity: the same lifecycle.
    lifecycle(
        &api,
        "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
        |name| {
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
               "metadata": {"name": name}, "storageClassName": "standard", "capacity": "1Gi"})
        },
    );

    // [sig-apps] list and delete collections of workloads (no replicas: there are no nodes).
    let template = json!({"metadata": {"labels": {"app": "lc"}},
                          "spec": {"containers": [{"name": "c", "image": "tandem.local/busybox:1"}]}});
    let workload = |kind: &str, name: &str| {
        let mut spec = json!({"selector": {"matchLabels": {"app": "lc"}}, "template": template});
        if kind != "DaemonSet" {
            spec["replicas"] = json!(0);
        }
        if kind == "StatefulSet" {
            spec["serviceName"] = json!("lc");
        }
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})
    };
    for (plural, kind) in [
        ("daemonsets", "DaemonSet"),
        ("replicasets", "ReplicaSet"),
        ("statefulsets", "StatefulSet"),
    ] {
        lifecycle(
            &api,
            &format!("/apis/apps/v1/namespaces/default/{plural}"),
            |name| workload(kind, name),
        );
    }
    // [sig-apps] PodDisruptionBudgets across namespaces, deleted by collection.
    lifecycle(
        &api,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        |name| {
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}})
        },
    );
    // [sig-auth] ServiceAccounts lifecycle.
    lifecycle(
        &api,
        "/api/v1/namespaces/default/serviceaccounts",
        |name| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
    );

    // [sig-api-machinery] Discovery: every group's preferred version is one of its versions.
    let groups = expect(api.request("GET", "/apis", None).unwrap(), 200);
    let groups = groups["groups"].as_array().unwrap();
    assert!(groups.len() > 10, "{groups:?}");
    for group in groups {
        let preferred = &group["preferredVersion"]["groupVersion"];
        let versions: Vec<&Value> = group["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["groupVersion"])
            .collect();
        assert!(versions.contains(&preferred), "{group}");
    }

    // [sig-api-machinery] Namespaces: patch a Namespace.
    expect(
        api.request(
            "POST",
            "/api/v1/namespaces",
            Some(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "patched"}})
                    .to_string(),
            ),
        )
        .unwrap(),
        201,
    );
    expect(
        api.request_as(
            "PATCH",
            "/api/v1/namespaces/patched",
            MERGE,
            &json!({"metadata": {"labels": {"testLabel": "testValue"}}}).to_string(),
        )
        .unwrap(),
        200,
    );
    let ns = expect(
        api.request("GET", "/api/v1/namespaces/patched", None)
            .unwrap(),
        200,
    );
    assert_eq!(ns["metadata"]["labels"]["testLabel"], "testValue");

    // [sig-node] ConfigMap / Secrets: an empty key is refused with its field path.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "empty-key"},
                    "data": {"": "value"}});
    let refused = api
        .request(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&cm.to_string()),
        )
        .unwrap();
    assert_eq!(refused.code, 422, "{}", refused.body);
    assert!(refused.body.contains("data[]"), "{}", refused.body);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "empty-key"},
                        "data": {"": "dmFsdWU="}});
    let refused = api
        .request(
            "POST",
            "/api/v1/namespaces/default/secrets",
            Some(&secret.to_string()),
        )
        .unwrap();
    assert_eq!(refused.code, 422, "{}", refused.body);
    assert!(refused.body.contains("data[]"), "{}", refused.body);

    // [sig-storage] ConfigMap / Secrets immutable: data cannot change, nor can the mark be
    // removed; labels can change and the object can be deleted.
    for (collection, kind, data) in [
        ("configmaps", "ConfigMap", json!({"k": "v"})),
        ("secrets", "Secret", json!({"k": "dg=="})),
    ] {
        let path = format!("/api/v1/namespaces/default/{collection}");
        let obj = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "frozen"},
                         "data": data, "immutable": true});
        expect(
            api.request("POST", &path, Some(&obj.to_string())).unwrap(),
            201,
        );
        let item = format!("{path}/frozen");
        let changed = api
            .request_as(
                "PATCH",
                &item,
                MERGE,
                &json!({"data": {"k": "dw=="}}).to_string(),
            )
            .unwrap();
        assert_eq!(changed.code, 422, "{}", changed.body);
        assert!(
            changed
                .body
                .contains("field is immutable when `immutable` is set"),
            "{}",
            changed.body
        );
        let unmarked = api
            .request_as(
                "PATCH",
                &item,
                MERGE,
                &json!({"immutable": false}).to_string(),
            )
            .unwrap();
        assert_eq!(unmarked.code, 422, "{}", unmarked.body);
        let labelled = expect(
            api.request_as(
                "PATCH",
                &item,
                MERGE,
                &json!({"metadata": {"labels": {"still": "mutable"}}}).to_string(),
            )
            .unwrap(),
            200,
        );
        assert_eq!(labelled["metadata"]["labels"]["still"], "mutable");
        expect(api.request("DELETE", &item, None).unwrap(), 200);
    }

    // [sig-scheduling] PriorityClass endpoints: mutable fields change, the value does not.
    let pc = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": "suite-priority"}, "value": 1000});
    expect(
        api.request(
            "POST",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            Some(&pc.to_string()),
        )
        .unwrap(),
        201,
    );
    let item = "/apis/scheduling.k8s.io/v1/priorityclasses/suite-priority";
    let described = expect(
        api.request_as(
            "PATCH",
            item,
            MERGE,
            &json!({"description": "patched"}).to_string(),
        )
        .unwrap(),
        200,
    );
    assert_eq!(described["description"], "patched");
    let revalued = api
        .request_as("PATCH", item, MERGE, &json!({"value": 2000}).to_string())
        .unwrap();
    assert_eq!(revalued.code, 422, "{}", revalued.body);
}
