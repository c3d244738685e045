//! Events are served from the store, not the watch cache (as upstream's API server does by
//! default): list, pagination, field selectors, watch from a resourceVersion, streaming lists
//! and deletecollection must behave as for every other type.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;

use crate::common::{self, within};

fn event(name: &str, pod: &str, reason: &str) -> Event {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod},
        "reason": reason, "message": format!("{reason} for {pod}"), "type": "Normal",
        "source": {"component": "test"}, "count": 1
    }))
    .unwrap()
}

fn names(list: &[Event]) -> Vec<String> {
    list.iter()
        .map(|e| e.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn events_list_page_and_select_by_involved_object() {
    let s = common::start().await;
    let api: Api<Event> = Api::namespaced(s.client.clone(), "default");
    for (i, pod) in ["web-1", "web-2", "web-1", "db-1", "web-1"]
        .iter()
        .enumerate()
    {
        api.create(
            &PostParams::default(),
            &event(&format!("e{i}"), pod, "Started"),
        )
        .await
        .unwrap();
    }
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&all.items), ["e0", "e1", "e2", "e3", "e4"]);

    let selected = api
        .list(&ListParams::default().fields("involvedObject.name=web-1"))
        .await
        .unwrap();
    assert_eq!(names(&selected.items), ["e0", "e2", "e4"]);

    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["e0", "e1"]);
    let token = first.metadata.continue_.clone().expect("a continue token");
    // A write after the first page does not show in later pages: they are pinned to its revision.
    api.create(&PostParams::default(), &event("e5", "web-3", "Pulled"))
        .await
        .unwrap();
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&rest.items), ["e2", "e3", "e4"]);
    assert!(rest.metadata.continue_.is_none());
}

#[tokio::test]
async fn event_watch_from_a_list_revision_sees_creates_updates_and_deletes() {
    let s = common::start().await;
    let api: Api<Event> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &event("before", "web-1", "Pulled"))
        .await
        .unwrap();
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &event("after", "web-1", "Started"))
        .await
        .unwrap();
    api.patch(
        "after",
        &PatchParams::default(),
        &Patch::Merge(json!({"count": 2})),
    )
    .await
    .unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = within(10, "an event watch event", stream.try_next())
            .await
            .unwrap()
            .expect("the watch goes on");
        match ev {
            WatchEvent::Added(e) => seen.push(("ADDED", e.metadata.name.unwrap(), e.count)),
            WatchEvent::Modified(e) => seen.push(("MODIFIED", e.metadata.name.unwrap(), e.count)),
            WatchEvent::Deleted(e) => seen.push(("DELETED", e.metadata.name.unwrap(), e.count)),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("error event: {e:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "after".to_string(), Some(1)),
            ("MODIFIED", "after".to_string(), Some(2)),
            ("DELETED", "before".to_string(), Some(1)),
        ]
    );
}

#[tokio::test]
async fn event_watch_from_a_revision_in_the_future_answers_too_large() {
    let s = common::start().await;
    let api: Api<Event> = Api::namespaced(s.client.clone(), "default");
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), "999999999")
        .await
        .unwrap()
        .boxed();
    match within(10, "the too-large answer", stream.try_next()).await {
        Ok(Some(WatchEvent::Error(e))) => {
            assert_eq!(e.code, 504, "{e:?}");
            assert!(e.message.contains("Too large resource version"), "{e:?}");
        }
        other => panic!("expected an error event, got {other:?}"),
    }
}

#[tokio::test]
async fn runtime_watcher_on_events_lists_then_follows_and_deletecollection_empties_them() {
    let s = common::start().await;
    let api: Api<Event> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &event("old", "web-1", "Pulled"))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut initial = Vec::new();
    within(10, "the initial list", async {
        while let Some(ev) = stream.try_next().await.unwrap() {
            match ev {
                watcher::Event::InitApply(e) => initial.push(e.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(initial, ["old"]);
    api.create(&PostParams::default(), &event("new", "web-1", "Started"))
        .await
        .unwrap();
    let live = within(10, "a live event", async {
        loop {
            if let Some(watcher::Event::Apply(e)) = stream.try_next().await.unwrap() {
                return e.metadata.name.unwrap();
            }
        }
    })
    .await;
    assert_eq!(live, "new");

    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
