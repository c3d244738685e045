//! Create, read, update and delete with kube-rs' typed `Api`s, for namespaced and cluster-scoped
//! resources, `generateName`, `dryRun` and the defaults upstream applies on create.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{self, config_map, deployment, expect_status, from_json, pod};

#[tokio::test]
async fn config_map_create_get_replace_list_delete_round_trip() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");

    let created = api
        .create(
            &PostParams::default(),
            &config_map("settings", "mode", "fast"),
        )
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.name.as_deref(), Some("settings"));
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(
        meta.uid.as_deref().is_some_and(|u| !u.is_empty()),
        "uid set: {meta:?}"
    );
    assert!(
        meta.creation_timestamp.is_some(),
        "creationTimestamp set: {meta:?}"
    );
    let rv1: u64 = meta
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .expect("resourceVersion is decimal");

    let got = api.get("settings").await.unwrap();
    assert_eq!(got.data.as_ref().unwrap()["mode"], "fast");
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let mut changed = got.clone();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("mode".into(), "slow".into());
    let replaced = api
        .replace("settings", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.data.as_ref().unwrap()["mode"], "slow");
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "resourceVersion grows on update: {rv1} -> {rv2}");
    assert_eq!(
        replaced.metadata.uid, created.metadata.uid,
        "uid survives update"
    );
    assert_eq!(
        replaced.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );

    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert!(names.contains(&"settings".to_string()), "listed: {names:?}");
    assert!(
        list.metadata.resource_version.is_some(),
        "list has a resourceVersion"
    );

    api.delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let status = expect_status(api.get("settings").await, 404, "NotFound");
    assert_eq!(status.message, r#"configmaps "settings" not found"#);
}

#[tokio::test]
async fn pods_and_deployments_round_trip_through_typed_apis() {
    let s = common::start().await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let deploys: Api<Deployment> = Api::namespaced(s.client.clone(), "default");

    let p = pods
        .create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    assert_eq!(
        p.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("nginx")
    );
    assert_eq!(pods.get("web").await.unwrap().metadata.uid, p.metadata.uid);

    let d = deploys
        .create(&PostParams::default(), &deployment("api", 3))
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    let listed = deploys.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("api"));
}

#[tokio::test]
async fn nodes_are_cluster_scoped() {
    let s = common::start().await;
    let nodes: Api<Node> = Api::all(s.client.clone());
    let node: Node = from_json(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "node-1", "labels": { "kubernetes.io/os": "windows" } }
    }));
    let created = nodes.create(&PostParams::default(), &node).await.unwrap();
    assert_eq!(
        created.metadata.namespace, None,
        "a cluster-scoped object has no namespace"
    );

    let patched = nodes
        .patch(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "role": "worker" } } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.as_ref().unwrap()["role"], "worker");
    assert_eq!(
        patched.metadata.labels.as_ref().unwrap()["kubernetes.io/os"],
        "windows"
    );

    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect::<Vec<_>>(),
        vec!["node-1"]
    );

    nodes
        .delete("node-1", &DeleteParams::default())
        .await
        .unwrap();
    let status = expect_status(nodes.get("node-1").await, 404, "NotFound");
    assert_eq!(status.message, r#"nodes "node-1" not found"#);
}

#[tokio::test]
async fn namespaces_are_created_active_with_the_name_label_and_kubernetes_finalizer() {
    let s = common::start().await;
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    for initial in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        namespaces
            .get(initial)
            .await
            .unwrap_or_else(|e| panic!("initial namespace {initial} exists: {e}"));
    }

    let ns: Namespace = from_json(
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "team-a" } }),
    );
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Active")
    );
    assert_eq!(
        created
            .metadata
            .labels
            .as_ref()
            .map(|l| l["kubernetes.io/metadata.name"].as_str()),
        Some("team-a")
    );
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.finalizers.clone()),
        Some(vec!["kubernetes".to_string()])
    );

    let in_ns: Api<ConfigMap> = Api::namespaced(s.client.clone(), "team-a");
    in_ns
        .create(&PostParams::default(), &config_map("c", "k", "v"))
        .await
        .unwrap();
    assert_eq!(
        in_ns.get("c").await.unwrap().metadata.namespace.as_deref(),
        Some("team-a")
    );
}

#[tokio::test]
async fn generate_name_creates_a_unique_suffixed_name() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let mut template = pod("");
    template.metadata.name = None;
    template.metadata.generate_name = Some("web-".into());

    let a = api.create(&PostParams::default(), &template).await.unwrap();
    let b = api.create(&PostParams::default(), &template).await.unwrap();
    let (na, nb) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    for n in [&na, &nb] {
        assert!(
            n.starts_with("web-") && n.len() == "web-".len() + 5,
            "generated name {n:?} is the prefix plus 5 characters"
        );
    }
    assert_ne!(na, nb);
    assert_eq!(a.metadata.generate_name.as_deref(), Some("web-"));
    api.get(&na).await.unwrap();
}

#[tokio::test]
async fn dry_run_create_returns_the_object_but_stores_nothing() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };

    let returned = api.create(&dry, &pod("ghost")).await.unwrap();
    assert_eq!(returned.metadata.name.as_deref(), Some("ghost"));
    assert_eq!(
        returned.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Always"),
        "dry run still defaults"
    );

    expect_status(api.get("ghost").await, 404, "NotFound");
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A real create afterwards does not collide with the dry run.
    api.create(&PostParams::default(), &pod("ghost"))
        .await
        .unwrap();
}

#[tokio::test]
async fn dry_run_update_and_patch_leave_the_stored_object_unchanged() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &config_map("keep", "k", "v1"))
        .await
        .unwrap();

    let mut changed = created.clone();
    changed
        .data
        .as_mut()
        .unwrap()
        .insert("k".into(), "v2".into());
    let returned = api
        .replace(
            "keep",
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &changed,
        )
        .await
        .unwrap();
    assert_eq!(
        returned.data.as_ref().unwrap()["k"],
        "v2",
        "dry-run update returns the would-be object"
    );

    let patched = api
        .patch(
            "keep",
            &PatchParams {
                dry_run: true,
                ..Default::default()
            },
            &Patch::Merge(json!({ "data": { "k": "v3" } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.as_ref().unwrap()["k"], "v3");

    let stored = api.get("keep").await.unwrap();
    assert_eq!(stored.data.as_ref().unwrap()["k"], "v1");
    assert_eq!(
        stored.metadata.resource_version,
        created.metadata.resource_version
    );
}

#[tokio::test]
async fn dry_run_delete_keeps_the_object() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &config_map("keep", "k", "v1"))
        .await
        .unwrap();

    // As a query parameter (what kubectl sends).
    let resp = common::raw(
        &s.client,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/keep?dryRun=All",
        None,
        &[],
    )
    .await;
    assert_eq!(resp.code, 200, "{}", resp.text);
    assert!(
        api.get_opt("keep").await.unwrap().is_some(),
        "DELETE ?dryRun=All removed the object"
    );

    // In the DeleteOptions body (what kube-rs sends).
    api.delete(
        "keep",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        api.get_opt("keep").await.unwrap().is_some(),
        "DELETE with DeleteOptions.dryRun=[All] removed the object"
    );
}

#[tokio::test]
async fn pod_create_applies_upstream_defaults() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let p = api
        .create(&PostParams::default(), &pod("defaults"))
        .await
        .unwrap();
    let spec = p.spec.as_ref().unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(spec.enable_service_links, Some(true));
    assert!(
        spec.security_context.is_some(),
        "securityContext defaults to {{}}"
    );

    let c = &spec.containers[0];
    assert_eq!(
        c.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(
        c.image_pull_policy.as_deref(),
        Some("Always"),
        "an untagged image means :latest, pulled Always"
    );

    let status = p.status.as_ref().expect("a new pod has a status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));

    // A tagged image is pulled IfNotPresent.
    let mut tagged = pod("tagged");
    tagged.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
    let t = api.create(&PostParams::default(), &tagged).await.unwrap();
    assert_eq!(
        t.spec.unwrap().containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
}

#[tokio::test]
async fn deployment_create_applies_upstream_defaults() {
    let s = common::start().await;
    let api: Api<Deployment> = Api::namespaced(s.client.clone(), "default");
    let mut d = deployment("defaults", 2);
    d.spec.as_mut().unwrap().replicas = None;
    let created = api.create(&PostParams::default(), &d).await.unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1), "replicas defaults to 1");
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.progress_deadline_seconds, Some(600));
    let strategy =
        serde_json::to_value(spec.strategy.as_ref().expect("strategy defaulted")).unwrap();
    assert_eq!(
        strategy,
        json!({ "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": "25%", "maxSurge": "25%" } })
    );

    let pod_spec = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod_spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(
        pod_spec.containers[0].termination_message_policy.as_deref(),
        Some("File")
    );
}
