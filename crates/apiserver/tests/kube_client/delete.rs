//! Deletion: immediate for unscheduled pods, graceful for scheduled ones, held by finalizers,
//! preconditions, propagation policies and deletecollection.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use serde_json::json;

use crate::common::{self, config_map, deployment, expect_status, labeled_pod, pod};

#[tokio::test]
async fn unscheduled_pod_is_deleted_immediately() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &pod("now"))
        .await
        .unwrap();
    let result = api.delete("now", &DeleteParams::default()).await.unwrap();
    let returned = result.left().expect("delete returns the deleted pod");
    assert_eq!(returned.metadata.name.as_deref(), Some("now"));
    expect_status(api.get("now").await, 404, "NotFound");
}

#[tokio::test]
async fn scheduled_pod_is_deleted_gracefully_and_stays_terminating() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let mut p = pod("graceful");
    p.spec.as_mut().unwrap().node_name = Some("node-1".into());
    let created = api.create(&PostParams::default(), &p).await.unwrap();

    let returned = api
        .delete("graceful", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the pod, still present");
    assert!(
        returned.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp set: {:?}",
        returned.metadata
    );
    assert_eq!(
        returned.metadata.deletion_grace_period_seconds,
        Some(30),
        "the pod's terminationGracePeriodSeconds"
    );

    let stored = api.get("graceful").await.unwrap();
    assert!(
        stored.metadata.deletion_timestamp.is_some(),
        "the pod is Terminating until the node confirms"
    );
    assert!(stored.metadata.resource_version != created.metadata.resource_version);

    // A second delete with gracePeriodSeconds=0 (what a kubelet or `--force` sends) removes it.
    api.delete(
        "graceful",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    expect_status(api.get("graceful").await, 404, "NotFound");
}

#[tokio::test]
async fn object_with_a_finalizer_stays_until_the_finalizer_is_removed() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let mut cm = config_map("held", "k", "v");
    cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();

    api.delete("held", &DeleteParams::default()).await.unwrap();
    let stored = api.get("held").await.unwrap();
    assert!(
        stored.metadata.deletion_timestamp.is_some(),
        "marked for deletion"
    );
    assert_eq!(
        stored.metadata.finalizers,
        Some(vec!["example.com/hold".to_string()])
    );

    // New finalizers cannot be added once deletion started, but other changes are allowed.
    let more = Patch::Merge(
        json!({ "metadata": { "finalizers": ["example.com/hold", "example.com/new"] } }),
    );
    let status = expect_status(
        api.patch("held", &PatchParams::default(), &more).await,
        422,
        "Invalid",
    );
    assert!(
        status
            .message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        status.message
    );
    let touched = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "seen": "yes" } } })),
        )
        .await
        .unwrap();
    assert!(touched.metadata.deletion_timestamp.is_some());

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .unwrap();
    expect_status(api.get("held").await, 404, "NotFound");
}

#[tokio::test]
async fn finalizer_removed_by_update_deletes_the_object() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let mut cm = config_map("held2", "k", "v");
    cm.metadata.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("held2", &DeleteParams::default()).await.unwrap();

    let mut current = api.get("held2").await.unwrap();
    current.metadata.finalizers = Some(vec!["example.com/b".into()]);
    api.replace("held2", &PostParams::default(), &current)
        .await
        .unwrap();
    assert!(api.get("held2").await.is_ok(), "one finalizer left");

    let mut current = api.get("held2").await.unwrap();
    current.metadata.finalizers = None;
    api.replace("held2", &PostParams::default(), &current)
        .await
        .unwrap();
    expect_status(api.get("held2").await, 404, "NotFound");
}

#[tokio::test]
async fn delete_with_a_mismatched_uid_precondition_conflicts() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &config_map("pre", "k", "v"))
        .await
        .unwrap();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let status = expect_status(api.delete("pre", &dp).await, 409, "Conflict");
    assert!(
        status.message.contains(
            "Precondition failed: UID in precondition: 00000000-0000-0000-0000-000000000000"
        ),
        "{}",
        status.message
    );
    api.get("pre").await.unwrap();
}

#[tokio::test]
async fn delete_of_a_missing_object_is_not_found() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        api.delete("absent", &DeleteParams::default()).await,
        404,
        "NotFound",
    );
    assert_eq!(status.message, r#"configmaps "absent" not found"#);
}

#[tokio::test]
async fn foreground_deletion_adds_the_foreground_finalizer() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("fg", 1))
        .await
        .unwrap();
    api.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let stored = api.get("fg").await.unwrap();
    assert!(stored.metadata.deletion_timestamp.is_some());
    assert_eq!(
        stored.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
}

#[tokio::test]
async fn delete_collection_with_a_label_selector_removes_only_matches() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    for (name, app) in [
        ("a", "web"),
        ("b", "web"),
        ("c", "web"),
        ("d", "db"),
        ("e", "db"),
    ] {
        api.create(&PostParams::default(), &labeled_pod(name, &[("app", app)]))
            .await
            .unwrap();
    }
    let result = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=web"),
        )
        .await
        .unwrap();
    if let Some(list) = result.left() {
        let mut deleted: Vec<_> = list
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        deleted.sort();
        assert_eq!(
            deleted,
            vec!["a", "b", "c"],
            "the response lists what was deleted"
        );
    }
    let mut left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    left.sort();
    assert_eq!(left, vec!["d", "e"]);
}

#[tokio::test]
async fn orphan_propagation_adds_the_orphan_finalizer() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &deployment("orph", 1))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    api.delete("orph", &dp).await.unwrap();
    let stored = api.get("orph").await.unwrap();
    assert!(stored.metadata.deletion_timestamp.is_some());
    assert_eq!(stored.metadata.finalizers, Some(vec!["orphan".to_string()]));
}
