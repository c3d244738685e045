//! Failures come back as `metav1.Status` with upstream's code, reason, message and causes, which is
//! what kube-rs turns into `kube::Error::Api`; and updates are optimistic (compare-and-swap on
//! `resourceVersion`).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use crate::common::{
    self, config_map, deployment, expect_status, from_json, labeled_pod, pod, raw,
};

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts_and_leaves_the_object_unchanged() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let original = api
        .create(&PostParams::default(), &config_map("cas", "k", "v1"))
        .await
        .unwrap();

    let mut first = original.clone();
    first.data.as_mut().unwrap().insert("k".into(), "v2".into());
    let current = api
        .replace("cas", &PostParams::default(), &first)
        .await
        .unwrap();

    let mut stale = original.clone();
    stale
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), "stale".into());
    let status = expect_status(
        api.replace("cas", &PostParams::default(), &stale).await,
        409,
        "Conflict",
    );
    assert_eq!(
        status.message,
        r#"Operation cannot be fulfilled on configmaps "cas": the object has been modified; please apply your changes to the latest version and try again"#
    );
    let details = status.details.expect("conflict details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("cas", "configmaps")
    );

    let stored = api.get("cas").await.unwrap();
    assert_eq!(stored.data.as_ref().unwrap()["k"], "v2");
    assert_eq!(
        stored.metadata.resource_version,
        current.metadata.resource_version
    );
}

#[tokio::test]
async fn get_of_a_missing_pod_is_not_found() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(api.get("x").await, 404, "NotFound");
    assert_eq!(status.message, r#"pods "x" not found"#);
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Failure)
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("x", "pods")
    );
    assert_eq!(
        api.get_opt("x").await.unwrap(),
        None,
        "get_opt maps 404 to None"
    );
}

#[tokio::test]
async fn creating_an_existing_name_is_already_exists() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &pod("dup"))
        .await
        .unwrap();
    let status = expect_status(
        api.create(&PostParams::default(), &pod("dup")).await,
        409,
        "AlreadyExists",
    );
    assert_eq!(status.message, r#"pods "dup" already exists"#);
}

#[tokio::test]
async fn pod_without_containers_is_invalid_with_a_cause_on_spec_containers() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let empty: Pod = from_json(
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "empty" }, "spec": { "containers": [] } }),
    );
    let status = expect_status(
        api.create(&PostParams::default(), &empty).await,
        422,
        "Invalid",
    );
    assert!(
        status.message.starts_with(r#"Pod "empty" is invalid: "#),
        "message: {}",
        status.message
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("empty", "Pod")
    );
    let cause = details
        .causes
        .iter()
        .find(|c| c.field == "spec.containers")
        .unwrap_or_else(|| panic!("a cause on spec.containers: {:?}", details.causes));
    assert_eq!(cause.reason, "FieldValueRequired");
    assert_eq!(cause.message, "Required value");
    expect_status(api.get("empty").await, 404, "NotFound");
}

#[tokio::test]
async fn bad_label_value_is_invalid_with_a_cause_on_metadata_labels() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        api.create(
            &PostParams::default(),
            &labeled_pod("badlabel", &[("app", "not a valid value!")]),
        )
        .await,
        422,
        "Invalid",
    );
    let causes = status.details.expect("details").causes;
    let cause = causes
        .iter()
        .find(|c| c.field == "metadata.labels")
        .unwrap_or_else(|| panic!("a cause on metadata.labels: {causes:?}"));
    assert_eq!(cause.reason, "FieldValueInvalid");
    assert!(
        cause
            .message
            .starts_with(r#"Invalid value: "not a valid value!""#),
        "cause message: {}",
        cause.message
    );
}

#[tokio::test]
async fn wrong_typed_field_is_a_bad_request() {
    let s = common::start().await;
    let mut d = serde_json::to_value(deployment("typed", 1)).unwrap();
    d["spec"]["replicas"] = json!("three");

    // Through kube's dynamic API.
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    let dynamic: Api<DynamicObject> = Api::namespaced_with(s.client.clone(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(d.clone()).unwrap();
    let status = expect_status(
        dynamic.create(&PostParams::default(), &obj).await,
        400,
        "BadRequest",
    );
    assert!(
        status.message.contains("replicas"),
        "the message names the field: {}",
        status.message
    );

    // And as a raw request.
    let resp = raw(
        &s.client,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        Some(serde_json::to_vec(&d).unwrap()),
        &[],
    )
    .await;
    assert_eq!(resp.code, 400, "{}", resp.text);
    assert_eq!(resp.body["kind"], "Status");
    assert_eq!(resp.body["reason"], "BadRequest");

    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    expect_status(api.get("typed").await, 404, "NotFound");
}

#[tokio::test]
async fn malformed_json_body_is_a_bad_request() {
    let s = common::start().await;
    let resp = raw(
        &s.client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(b"{\"metadata\": ".to_vec()),
        &[],
    )
    .await;
    assert_eq!(resp.code, 400, "{}", resp.text);
    assert_eq!(resp.body["reason"], "BadRequest");
}

#[tokio::test]
async fn creating_into_a_missing_namespace_is_not_found() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "nope");
    let status = expect_status(
        api.create(&PostParams::default(), &pod("p")).await,
        404,
        "NotFound",
    );
    assert_eq!(status.message, r#"namespaces "nope" not found"#);
}

#[tokio::test]
async fn body_name_different_from_url_name_is_a_bad_request() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("right", "k", "v"))
        .await
        .unwrap();
    let mut other = created.clone();
    other.metadata.name = Some("wrong".into());
    let status = expect_status(
        api.replace("right", &PostParams::default(), &other).await,
        400,
        "BadRequest",
    );
    assert_eq!(
        status.message,
        "the name of the object (wrong) does not match the name on the URL (right)"
    );
}

#[tokio::test]
async fn body_namespace_different_from_url_namespace_is_a_bad_request() {
    let s = common::start().await;
    let mut cm = config_map("elsewhere", "k", "v");
    cm.metadata.namespace = Some("kube-system".into());
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        api.create(&PostParams::default(), &cm).await,
        400,
        "BadRequest",
    );
    assert_eq!(
        status.message,
        "the namespace of the provided object does not match the namespace sent on the request"
    );
}

#[tokio::test]
async fn update_of_a_missing_object_is_not_found() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let mut cm = config_map("absent", "k", "v");
    cm.metadata.resource_version = Some("5".into());
    let status = expect_status(
        api.replace("absent", &PostParams::default(), &cm).await,
        404,
        "NotFound",
    );
    assert_eq!(status.message, r#"configmaps "absent" not found"#);
}

#[tokio::test]
async fn unknown_resource_path_is_not_found() {
    let s = common::start().await;
    let resp = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        None,
        &[],
    )
    .await;
    assert_eq!(resp.code, 404, "{}", resp.text);
    assert_eq!(resp.body["kind"], "Status");
    assert_eq!(resp.body["reason"], "NotFound");
}

#[tokio::test]
async fn pod_update_changing_an_immutable_field_is_invalid() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let mut p = api
        .create(&PostParams::default(), &pod("immutable"))
        .await
        .unwrap();
    p.spec.as_mut().unwrap().containers[0].name = "renamed".into();
    let status = expect_status(
        api.replace("immutable", &PostParams::default(), &p).await,
        422,
        "Invalid",
    );
    assert!(
        status
            .message
            .contains("pod updates may not change fields other than"),
        "{}",
        status.message
    );
    assert_eq!(
        api.get("immutable").await.unwrap().spec.unwrap().containers[0].name,
        "app"
    );
}

/// The `ephemeralcontainers` subresource applies the pod OS rules as upstream's
/// `ValidatePodEphemeralContainersUpdate` does (it validates the whole pod spec): a Linux-only
/// field in a Windows pod's debug container is Forbidden, and the pod keeps its containers.
#[tokio::test]
async fn ephemeral_container_of_a_windows_pod_may_not_set_linux_only_fields() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let mut windows = pod("iis");
    windows.spec.as_mut().unwrap().os = Some(k8s_openapi::api::core::v1::PodOS {
        name: "windows".into(),
    });
    let created = api.create(&PostParams::default(), &windows).await.unwrap();

    let mut with_debug = serde_json::to_value(&created).unwrap();
    with_debug["spec"]["ephemeralContainers"] = json!([{
        "name": "debugger", "image": "busybox",
        "securityContext": {"privileged": true, "runAsUser": 0},
    }]);
    let status = expect_status(
        api.replace_subresource(
            "ephemeralcontainers",
            "iis",
            &PostParams::default(),
            &with_debug,
        )
        .await,
        422,
        "Invalid",
    );
    for field in ["privileged", "runAsUser"] {
        let expected = format!(
            "spec.ephemeralContainers[0].securityContext.{field}: Forbidden: cannot be set for a windows pod"
        );
        assert!(status.message.contains(&expected), "{}", status.message);
    }
    let stored = api.get("iis").await.unwrap();
    assert!(stored.spec.unwrap().ephemeral_containers.is_none());

    // Without them the same debug container is accepted.
    with_debug["spec"]["ephemeralContainers"][0]
        .as_object_mut()
        .unwrap()
        .remove("securityContext");
    let updated = api
        .replace_subresource(
            "ephemeralcontainers",
            "iis",
            &PostParams::default(),
            &with_debug,
        )
        .await
        .unwrap();
    assert_eq!(
        updated.spec.unwrap().ephemeral_containers.unwrap()[0].name,
        "debugger"
    );
}
