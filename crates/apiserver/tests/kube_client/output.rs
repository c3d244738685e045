//! Alternative representations: `PartialObjectMetadata` (what kube's metadata watchers and
//! `list_metadata` ask for) and server-side `Table`s (what `kubectl get` asks for).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;

use crate::common::{self, labeled_pod, raw};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

#[tokio::test]
async fn list_metadata_returns_partial_object_metadata_only() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    for n in ["m1", "m2"] {
        api.create(&PostParams::default(), &labeled_pod(n, &[("app", "meta")]))
            .await
            .unwrap();
    }
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    let mut names: Vec<_> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, vec!["m1", "m2"]);
    for item in &list.items {
        assert_eq!(item.metadata.labels.as_ref().unwrap()["app"], "meta");
        assert!(item.metadata.uid.is_some() && item.metadata.resource_version.is_some());
    }

    let one = api.get_metadata("m1").await.unwrap();
    assert_eq!(
        one.types
            .as_ref()
            .map(|t| (t.api_version.as_str(), t.kind.as_str())),
        Some(("meta.k8s.io/v1", "PartialObjectMetadata"))
    );

    // The raw body has no spec or status.
    let resp = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods/m1",
        None,
        &[(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )],
    )
    .await;
    assert_eq!(resp.code, 200, "{}", resp.text);
    assert_eq!(resp.body["kind"], "PartialObjectMetadata");
    assert!(
        resp.body.get("spec").is_none() && resp.body.get("status").is_none(),
        "{}",
        resp.text
    );
}

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"]
        .as_array()
        .expect("columnDefinitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn table_list_of_pods_has_upstream_columns() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &labeled_pod("t1", &[]))
        .await
        .unwrap();

    let resp = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
        &[("accept", TABLE)],
    )
    .await;
    assert_eq!(resp.code, 200, "{}", resp.text);
    let t = &resp.body;
    assert_eq!(
        (t["apiVersion"].as_str(), t["kind"].as_str()),
        (Some("meta.k8s.io/v1"), Some("Table"))
    );
    assert_eq!(
        column_names(t),
        vec![
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
            "IP",
            "Node",
            "Nominated Node",
            "Readiness Gates"
        ]
    );
    assert!(
        t["metadata"]["resourceVersion"].is_string(),
        "the table carries the list's resourceVersion"
    );

    let rows = t["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    let cells = rows[0]["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 9);
    assert_eq!(cells[0], "t1");
    assert_eq!(cells[1], "0/1");
    assert_eq!(cells[2], "Pending");
    assert_eq!(cells[5], "<none>", "no pod IP yet");
    assert_eq!(cells[6], "<none>", "not scheduled");

    // By default each row carries the object's metadata, as kubectl expects.
    let object = &rows[0]["object"];
    assert_eq!(object["kind"], "PartialObjectMetadata");
    assert_eq!(object["metadata"]["name"], "t1");
}

#[tokio::test]
async fn table_get_of_one_pod_has_one_row() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let mut p = labeled_pod("t2", &[]);
    p.spec.as_mut().unwrap().node_name = Some("node-9".into());
    api.create(&PostParams::default(), &p).await.unwrap();

    let resp = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods/t2",
        None,
        &[("accept", TABLE)],
    )
    .await;
    assert_eq!(resp.code, 200, "{}", resp.text);
    assert_eq!(resp.body["kind"], "Table");
    let rows = resp.body["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["cells"][0], "t2");
    assert_eq!(rows[0]["cells"][6], "node-9");
}

#[tokio::test]
async fn table_with_include_object_none_omits_objects() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &labeled_pod("t3", &[]))
        .await
        .unwrap();
    let resp = raw(
        &s.client,
        "GET",
        "/api/v1/namespaces/default/pods?includeObject=None",
        None,
        &[("accept", TABLE)],
    )
    .await;
    assert_eq!(resp.code, 200, "{}", resp.text);
    let row = &resp.body["rows"][0];
    assert!(
        row.get("object").is_none_or(Value::is_null),
        "no object: {row}"
    );
}
