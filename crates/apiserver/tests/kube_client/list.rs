//! Lists: `limit`/`continue` pagination pinned to one revision, label and field selectors, and
//! `400` for selectors the server cannot parse.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use crate::common::{self, config_map, expect_status, labeled_pod};

async fn names_of_pages(
    api: &Api<ConfigMap>,
    lp: ListParams,
) -> (Vec<Vec<String>>, Vec<String>, Vec<Option<i64>>) {
    let mut pages = Vec::new();
    let mut rvs = Vec::new();
    let mut remaining = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..20 {
        let mut params = lp.clone();
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = api.list(&params).await.unwrap();
        pages.push(
            page.items
                .iter()
                .map(|c| c.metadata.name.clone().unwrap())
                .collect(),
        );
        rvs.push(page.metadata.resource_version.clone().unwrap_or_default());
        remaining.push(page.metadata.remaining_item_count);
        token = page.metadata.continue_.filter(|c| !c.is_empty());
        if token.is_none() {
            return (pages, rvs, remaining);
        }
    }
    panic!("pagination did not finish within 20 pages: {pages:?}");
}

async fn ten_config_maps(api: &Api<ConfigMap>) {
    for i in 0..10 {
        api.create(
            &PostParams::default(),
            &config_map(&format!("cm-{i:02}"), "k", "v"),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn paginated_list_returns_every_object_exactly_once_at_one_resource_version() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    ten_config_maps(&api).await;

    let (pages, rvs, remaining) = names_of_pages(&api, ListParams::default().limit(3)).await;
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![3, 3, 3, 1],
        "pages: {pages:?}"
    );
    let all: Vec<String> = pages.concat();
    let expected: Vec<String> = (0..10).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(all, expected, "every object once, in key order");
    assert!(
        rvs.iter().all(|rv| rv == &rvs[0] && !rv.is_empty()),
        "one resourceVersion for every page: {rvs:?}"
    );
    assert_eq!(
        remaining,
        vec![Some(7), Some(4), Some(1), None],
        "remainingItemCount"
    );
}

#[tokio::test]
async fn writes_between_pages_do_not_change_later_pages() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    ten_config_maps(&api).await;

    let first = api.list(&ListParams::default().limit(3)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    let pinned = first.metadata.resource_version.clone().unwrap();

    // Change the rest of the collection: delete one not yet returned, add one that sorts last,
    // modify one on a later page.
    api.delete("cm-05", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &config_map("cm-99", "k", "v"))
        .await
        .unwrap();
    let mut cm7 = api.get("cm-07").await.unwrap();
    cm7.data
        .as_mut()
        .unwrap()
        .insert("k".into(), "changed".into());
    api.replace("cm-07", &PostParams::default(), &cm7)
        .await
        .unwrap();

    let mut rest = Vec::new();
    let mut next = Some(token);
    for _ in 0..10 {
        let Some(t) = next.take() else { break };
        let page = api
            .list(&ListParams::default().limit(3).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(pinned.as_str()),
            "later pages keep the first page's revision"
        );
        for cm in &page.items {
            rest.push((
                cm.metadata.name.clone().unwrap(),
                cm.data.as_ref().unwrap()["k"].clone(),
            ));
        }
        next = page.metadata.continue_.filter(|c| !c.is_empty());
    }
    let names: Vec<&str> = rest.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "cm-03", "cm-04", "cm-05", "cm-06", "cm-07", "cm-08", "cm-09"
        ]
    );
    assert_eq!(rest[4].1, "v", "cm-07 as of the pinned revision");

    let fresh: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert!(
        fresh.contains(&"cm-99".to_string()) && !fresh.contains(&"cm-05".to_string()),
        "a new list sees the writes: {fresh:?}"
    );
}

#[tokio::test]
async fn paginated_list_with_a_label_selector_pages_over_matches_only() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    for i in 0..9 {
        let mut cm = config_map(&format!("cm-{i}"), "k", "v");
        cm.metadata.labels = Some(
            [(
                "parity".to_string(),
                if i % 2 == 0 { "even" } else { "odd" }.to_string(),
            )]
            .into(),
        );
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let (pages, _, _) =
        names_of_pages(&api, ListParams::default().labels("parity=even").limit(2)).await;
    assert_eq!(pages.concat(), vec!["cm-0", "cm-2", "cm-4", "cm-6", "cm-8"]);
    assert!(
        pages.iter().all(|p| p.len() <= 2),
        "no page exceeds the limit: {pages:?}"
    );
}

async fn pod_fixture(api: &Api<Pod>) {
    let fixtures: [(&str, &[(&str, &str)]); 4] = [
        ("p1", &[("app", "web"), ("env", "prod")]),
        ("p2", &[("app", "web"), ("env", "dev")]),
        ("p3", &[("app", "db"), ("env", "prod")]),
        ("p4", &[("app", "db")]),
    ];
    for (name, labels) in fixtures {
        api.create(&PostParams::default(), &labeled_pod(name, labels))
            .await
            .unwrap();
    }
    let mut scheduled = labeled_pod("p5", &[("app", "web"), ("tier", "front")]);
    scheduled.spec.as_mut().unwrap().node_name = Some("node-1".into());
    api.create(&PostParams::default(), &scheduled)
        .await
        .unwrap();
}

async fn names(api: &Api<Pod>, lp: &ListParams) -> Vec<String> {
    let mut v: Vec<String> = api
        .list(lp)
        .await
        .unwrap_or_else(|e| panic!("list {lp:?}: {e}"))
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    pod_fixture(&api).await;
    let cases: [(&str, &[&str]); 8] = [
        ("app=web", &["p1", "p2", "p5"]),
        ("app==web", &["p1", "p2", "p5"]),
        ("app!=web", &["p3", "p4"]),
        ("env in (prod,dev)", &["p1", "p2", "p3"]),
        ("env notin (prod)", &["p2", "p4", "p5"]),
        ("!env", &["p4", "p5"]),
        ("env", &["p1", "p2", "p3"]),
        ("app=web,env=prod", &["p1"]),
    ];
    for (selector, want) in cases {
        assert_eq!(
            names(&api, &ListParams::default().labels(selector)).await,
            want,
            "labelSelector={selector}"
        );
    }
}

#[tokio::test]
async fn field_selectors_filter_lists() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    pod_fixture(&api).await;
    let cases: [(&str, &[&str]); 6] = [
        ("spec.nodeName=", &["p1", "p2", "p3", "p4"]),
        ("spec.nodeName=node-1", &["p5"]),
        ("metadata.name=p3", &["p3"]),
        ("metadata.name!=p3", &["p1", "p2", "p4", "p5"]),
        ("status.phase=Pending", &["p1", "p2", "p3", "p4", "p5"]),
        ("metadata.namespace=default,spec.nodeName!=", &["p5"]),
    ];
    for (selector, want) in cases {
        assert_eq!(
            names(&api, &ListParams::default().fields(selector)).await,
            want,
            "fieldSelector={selector}"
        );
    }
    assert_eq!(
        names(
            &api,
            &ListParams::default()
                .labels("app=web")
                .fields("spec.nodeName=")
        )
        .await,
        vec!["p1", "p2"],
        "both selectors apply"
    );
}

#[tokio::test]
async fn all_namespaces_list_with_a_namespace_field_selector() {
    let s = common::start().await;
    common::namespace(&s.client, "other").await;
    Api::<ConfigMap>::namespaced(s.client.clone(), "default")
        .create(&PostParams::default(), &config_map("here", "k", "v"))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(s.client.clone(), "other")
        .create(&PostParams::default(), &config_map("there", "k", "v"))
        .await
        .unwrap();
    let all: Api<ConfigMap> = Api::all(s.client.clone());
    let mut everything: Vec<String> = all
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    everything.sort();
    assert!(
        everything.contains(&"here".to_string()) && everything.contains(&"there".to_string()),
        "{everything:?}"
    );
    let only: Vec<String> = all
        .list(&ListParams::default().fields("metadata.namespace=other"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(only, vec!["there"]);
}

#[tokio::test]
async fn invalid_label_selector_is_a_bad_request() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    for selector in ["app in (", "app=(web)", "=web"] {
        expect_status(
            api.list(&ListParams::default().labels(selector)).await,
            400,
            "BadRequest",
        );
    }
}

#[tokio::test]
async fn unsupported_or_malformed_field_selector_is_a_bad_request() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let status = expect_status(
        api.list(&ListParams::default().fields("spec.bogus=x"))
            .await,
        400,
        "BadRequest",
    );
    assert!(
        status
            .message
            .contains(r#"field label not supported: spec.bogus"#),
        "{}",
        status.message
    );
    expect_status(
        api.list(&ListParams::default().fields("metadata.name"))
            .await,
        400,
        "BadRequest",
    );
}
