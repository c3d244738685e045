//! Patches of every kind kube-rs sends (merge, JSON, strategic merge, server-side apply) and the
//! status, scale and binding subresources.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::{self, config_map, deployment, expect_status, labeled_pod, pod, raw};

fn json_patch(v: Value) -> Patch<()> {
    Patch::Json(serde_json::from_value::<json_patch::Patch>(v).expect("valid JSON patch"))
}

fn container_images(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn merge_patch_sets_and_removes_fields() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &labeled_pod("m", &[("a", "1"), ("b", "2")]),
    )
    .await
    .unwrap();
    let patched = api
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "a": "10", "b": null, "c": "3" } } })),
        )
        .await
        .unwrap();
    let labels = patched.metadata.labels.unwrap();
    assert_eq!(labels.get("a").map(String::as_str), Some("10"));
    assert_eq!(labels.get("b"), None, "null removes a key");
    assert_eq!(labels.get("c").map(String::as_str), Some("3"));
}

#[tokio::test]
async fn json_patch_applies_operations_in_order() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &config_map("j", "k", "v"))
        .await
        .unwrap();
    let patched = api
        .patch(
            "j",
            &PatchParams::default(),
            &json_patch(json!([
                { "op": "add", "path": "/data/extra", "value": "x" },
                { "op": "replace", "path": "/data/k", "value": "w" },
                { "op": "add", "path": "/metadata/labels", "value": { "via": "json-patch" } },
            ])),
        )
        .await
        .unwrap();
    let data = patched.data.unwrap();
    assert_eq!((data["k"].as_str(), data["extra"].as_str()), ("w", "x"));
    assert_eq!(patched.metadata.labels.unwrap()["via"], "json-patch");
}

#[tokio::test]
async fn json_patch_with_a_failing_test_operation_changes_nothing() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("t", "k", "v"))
        .await
        .unwrap();
    let result = api
        .patch("t", &PatchParams::default(), &json_patch(json!([{ "op": "test", "path": "/data/k", "value": "other" }, { "op": "replace", "path": "/data/k", "value": "changed" }])))
        .await;
    let status = common::api_error(result);
    assert_eq!(
        status.code, 422,
        "a failed JSON patch test is 422 Unprocessable Entity: {status:?}"
    );
    let stored = api.get("t").await.unwrap();
    assert_eq!(stored.data.unwrap()["k"], "v");
    assert_eq!(
        stored.metadata.resource_version,
        created.metadata.resource_version
    );
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("smp", 1))
        .await
        .unwrap();

    let add = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "sidecar", "image": "busybox" }] } } } });
    let d = api
        .patch("smp", &PatchParams::default(), &Patch::Strategic(add))
        .await
        .unwrap();
    let mut got = container_images(&d);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("app".into(), "nginx".into()),
            ("sidecar".into(), "busybox".into())
        ],
        "a new name is added, the existing one kept"
    );

    let change = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "app", "image": "nginx:1.27" }] } } } });
    let d = api
        .patch("smp", &PatchParams::default(), &Patch::Strategic(change))
        .await
        .unwrap();
    let mut got = container_images(&d);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("app".into(), "nginx:1.27".into()),
            ("sidecar".into(), "busybox".into())
        ],
        "an existing name is merged in place"
    );

    let delete = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "sidecar", "$patch": "delete" }] } } } });
    let d = api
        .patch("smp", &PatchParams::default(), &Patch::Strategic(delete))
        .await
        .unwrap();
    assert_eq!(
        container_images(&d),
        vec![("app".into(), "nginx:1.27".into())],
        "$patch: delete removes by name"
    );

    // A merge patch replaces the whole list instead.
    let replace = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "only", "image": "redis" }] } } } });
    let d = api
        .patch("smp", &PatchParams::default(), &Patch::Merge(replace))
        .await
        .unwrap();
    assert_eq!(container_images(&d), vec![("only".into(), "redis".into())]);
}

#[tokio::test]
async fn server_side_apply_creates_then_updates_and_records_the_manager() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let apply = |data: Value| {
        Patch::Apply(
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "ssa" }, "data": data }),
        )
    };

    let created = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr"),
            &apply(json!({ "a": "1", "b": "2" })),
        )
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap()["a"], "1");
    let managed = created
        .metadata
        .managed_fields
        .clone()
        .expect("managedFields recorded");
    let entry = managed
        .iter()
        .find(|m| m.manager.as_deref() == Some("mgr"))
        .unwrap_or_else(|| panic!("an entry for mgr: {managed:?}"));
    assert_eq!(entry.operation.as_deref(), Some("Apply"));
    assert_eq!(entry.fields_type.as_deref(), Some("FieldsV1"));
    let owned = serde_json::to_value(&entry.fields_v1).unwrap();
    assert!(
        owned.pointer("/f:data/f:a").is_some() && owned.pointer("/f:data/f:b").is_some(),
        "mgr owns data.a and data.b: {owned}"
    );

    let updated = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr"),
            &apply(json!({ "a": "10" })),
        )
        .await
        .unwrap();
    let data = updated.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("10"));
    assert_eq!(
        data.get("b"),
        None,
        "a field the manager stops applying is removed"
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_on_another_managers_field_unless_forced() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let apply = |v: &str| {
        Patch::Apply(
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "owned" }, "data": { "key": v } }),
        )
    };
    api.patch("owned", &PatchParams::apply("first"), &apply("one"))
        .await
        .unwrap();

    let status = expect_status(
        api.patch("owned", &PatchParams::apply("second"), &apply("two"))
            .await,
        409,
        "Conflict",
    );
    assert!(
        status.message.contains(r#"conflict with "first""#),
        "the message names the owner: {}",
        status.message
    );
    let causes = status.details.expect("details").causes;
    assert!(
        causes
            .iter()
            .any(|c| c.reason == "FieldManagerConflict" && c.field == ".data.key"),
        "causes: {causes:?}"
    );
    assert_eq!(api.get("owned").await.unwrap().data.unwrap()["key"], "one");

    // Applying the same value is not a conflict (shared ownership).
    api.patch("owned", &PatchParams::apply("second"), &apply("one"))
        .await
        .unwrap();

    let forced = api
        .patch(
            "owned",
            &PatchParams::apply("second").force(),
            &apply("two"),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["key"], "two");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            serde_json::to_value(&m.fields_v1)
                .unwrap()
                .pointer("/f:data/f:key")
                .is_some()
        })
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(
        managers,
        vec!["second"],
        "forcing takes the field away from the first manager"
    );
}

#[tokio::test]
async fn create_with_a_field_manager_is_recorded_as_an_update_in_managed_fields() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..Default::default()
            },
            &config_map("mf", "k", "v"),
        )
        .await
        .unwrap();
    let managed = created.metadata.managed_fields.clone().unwrap_or_default();
    assert!(
        managed
            .iter()
            .any(|m| m.manager.as_deref() == Some("creator")
                && m.operation.as_deref() == Some("Update")),
        "{managed:?}"
    );
}

#[tokio::test]
async fn a_patch_that_changes_nothing_does_not_write() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("noop", "k", "v"))
        .await
        .unwrap();
    let same = api
        .patch(
            "noop",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "k": "v" } })),
        )
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version, created.metadata.resource_version,
        "a patch that changes nothing does not write"
    );
}

#[tokio::test]
async fn status_patch_changes_only_status_and_main_resource_ignores_status() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("st", 2))
        .await
        .unwrap();

    let both =
        json!({ "spec": { "replicas": 7 }, "status": { "replicas": 2, "observedGeneration": 1 } });
    let after = api
        .patch_status("st", &PatchParams::default(), &Patch::Merge(&both))
        .await
        .unwrap();
    assert_eq!(
        after.spec.as_ref().unwrap().replicas,
        Some(2),
        "the status subresource ignores spec"
    );
    assert_eq!(after.status.as_ref().unwrap().replicas, Some(2));

    let main = json!({ "spec": { "replicas": 3 }, "status": { "replicas": 99 } });
    let after = api
        .patch("st", &PatchParams::default(), &Patch::Merge(&main))
        .await
        .unwrap();
    assert_eq!(after.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        after.status.as_ref().unwrap().replicas,
        Some(2),
        "the main resource ignores status"
    );

    let status_view = api.get_status("st").await.unwrap();
    assert_eq!(status_view.status.unwrap().replicas, Some(2));
}

#[tokio::test]
async fn deployment_generation_starts_at_one_and_bumps_only_on_spec_changes() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &deployment("gen", 2))
        .await
        .unwrap();
    assert_eq!(
        created.metadata.generation,
        Some(1),
        "generation starts at 1"
    );

    let labelled = api
        .patch(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "x": "y" } } })),
        )
        .await
        .unwrap();
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "a metadata change does not bump generation"
    );
    let status = api
        .patch_status(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "observedGeneration": 1 } })),
        )
        .await
        .unwrap();
    assert_eq!(
        status.metadata.generation,
        Some(1),
        "a status change does not bump generation"
    );
    let spec = api
        .patch(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 4 } })),
        )
        .await
        .unwrap();
    assert_eq!(
        spec.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_replicas() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("sc", 2))
        .await
        .unwrap();

    let scale = api.get_scale("sc").await.unwrap();
    assert_eq!(scale.metadata.name.as_deref(), Some("sc"));
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=sc")
    );

    let patched = api
        .patch_scale(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().replicas, Some(5));
    assert_eq!(api.get("sc").await.unwrap().spec.unwrap().replicas, Some(5));

    let mut scale = api.get_scale("sc").await.unwrap();
    scale.spec.as_mut().unwrap().replicas = Some(0);
    let replaced = api
        .replace_scale("sc", &PostParams::default(), &scale)
        .await
        .unwrap();
    assert_eq!(replaced.spec.unwrap().replicas, Some(0));
    assert_eq!(api.get("sc").await.unwrap().spec.unwrap().replicas, Some(0));
}

#[tokio::test]
async fn binding_sets_node_name_once_and_a_second_bind_conflicts() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &pod("b")).await.unwrap();
    let binding = |node: &str| {
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": { "name": "b" },
            "target": { "apiVersion": "v1", "kind": "Node", "name": node }
        }))
        .unwrap()
    };

    let resp = raw(
        &s.client,
        "POST",
        "/api/v1/namespaces/default/pods/b/binding",
        Some(binding("node-1")),
        &[],
    )
    .await;
    assert_eq!(resp.code, 201, "{}", resp.text);
    assert_eq!(resp.body["kind"], "Status");
    assert_eq!(resp.body["status"], "Success");
    assert_eq!(
        api.get("b")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("node-1")
    );

    let again = raw(
        &s.client,
        "POST",
        "/api/v1/namespaces/default/pods/b/binding",
        Some(binding("node-2")),
        &[],
    )
    .await;
    assert_eq!(again.code, 409, "{}", again.text);
    assert_eq!(again.body["reason"], "Conflict");
    assert_eq!(
        again.body["message"],
        r#"Operation cannot be fulfilled on pods/binding "b": pod b is already assigned to node "node-1""#
    );
    assert_eq!(
        api.get("b")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("node-1")
    );
}

#[tokio::test]
async fn binding_a_missing_pod_is_not_found() {
    let s = common::start().await;
    let body = serde_json::to_vec(&json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "ghost" }, "target": { "kind": "Node", "name": "node-1" } })).unwrap();
    let resp = raw(
        &s.client,
        "POST",
        "/api/v1/namespaces/default/pods/ghost/binding",
        Some(body),
        &[],
    )
    .await;
    assert_eq!(resp.code, 404, "{}", resp.text);
    assert_eq!(resp.body["reason"], "NotFound");
}

#[tokio::test]
async fn server_side_apply_merges_list_entries_owned_by_different_managers() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    let with_container = |name: &str, image: &str| {
        let mut d = serde_json::to_value(deployment("ssa-d", 1)).unwrap();
        d["spec"]["template"]["spec"]["containers"] = json!([{ "name": name, "image": image }]);
        Patch::Apply(d)
    };
    api.patch(
        "ssa-d",
        &PatchParams::apply("app-owner"),
        &with_container("app", "nginx"),
    )
    .await
    .unwrap();
    let d = api
        .patch(
            "ssa-d",
            &PatchParams::apply("sidecar-injector"),
            &with_container("sidecar", "envoy"),
        )
        .await
        .unwrap();
    let mut got = container_images(&d);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("app".into(), "nginx".into()),
            ("sidecar".into(), "envoy".into())
        ],
        "containers are a map keyed by name"
    );
}
