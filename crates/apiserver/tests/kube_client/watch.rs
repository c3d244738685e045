//! Watches: resumption from a resourceVersion, `410 Gone` when too old, kube-runtime's `watcher`
//! (paged list then watch, and streaming lists), selectors, bookmarks and timeouts.

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use serde_json::json;

use crate::common::{self, config_map, labeled_pod, pod, within};

/// The next non-bookmark event, failing the test after 10 s.
async fn next_event<K, S>(stream: &mut S) -> WatchEvent<K>
where
    S: Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    within(10, "a watch event", async {
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Bookmark(_))) => continue,
                Some(Ok(ev)) => return ev,
                Some(Err(e)) => panic!("watch stream error: {e}"),
                None => panic!("watch stream ended"),
            }
        }
    })
    .await
}

/// `(type, name, resourceVersion, data.k)` of a config map event.
fn describe(ev: &WatchEvent<ConfigMap>) -> (&'static str, String, u64, Option<String>) {
    let (kind, cm) = match ev {
        WatchEvent::Added(o) => ("ADDED", o),
        WatchEvent::Modified(o) => ("MODIFIED", o),
        WatchEvent::Deleted(o) => ("DELETED", o),
        WatchEvent::Bookmark(_) => panic!("bookmark"),
        WatchEvent::Error(e) => panic!("error event: {e:?}"),
    };
    let rv = cm
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap();
    (
        kind,
        cm.metadata.name.clone().unwrap_or_default(),
        rv,
        cm.data.as_ref().and_then(|d| d.get("k").cloned()),
    )
}

fn pod_event(ev: &WatchEvent<Pod>) -> (&'static str, String) {
    match ev {
        WatchEvent::Added(o) => ("ADDED", o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => ("MODIFIED", o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Deleted(o) => ("DELETED", o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Bookmark(_) => ("BOOKMARK", String::new()),
        WatchEvent::Error(e) => panic!("error event: {e:?}"),
    }
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_later_changes_in_order_then_follows() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let start_rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    api.create(&PostParams::default(), &config_map("a", "k", "1"))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "k": "2" } })),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    let mut stream = api
        .watch(&WatchParams::default(), &start_rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_event(&mut stream).await));
    }
    assert_eq!(
        seen.iter()
            .map(|(k, n, _, d)| (*k, n.as_str(), d.as_deref()))
            .collect::<Vec<_>>(),
        vec![
            ("ADDED", "a", Some("1")),
            ("MODIFIED", "a", Some("2")),
            ("DELETED", "a", Some("2"))
        ]
    );
    let start: u64 = start_rv.parse().unwrap();
    assert!(
        seen[0].2 > start && seen[0].2 < seen[1].2 && seen[1].2 < seen[2].2,
        "resourceVersions increase: {seen:?}"
    );

    // Then live changes.
    api.create(&PostParams::default(), &config_map("b", "k", "live"))
        .await
        .unwrap();
    let live = describe(&next_event(&mut stream).await);
    assert_eq!((live.0, live.1.as_str()), ("ADDED", "b"));
    assert!(live.2 > seen[2].2);
}

#[tokio::test]
async fn watch_started_now_sees_only_later_changes() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &config_map("before", "k", "v"))
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
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    api.create(&PostParams::default(), &config_map("after", "k", "v"))
        .await
        .unwrap();
    let ev = describe(&next_event(&mut stream).await);
    assert_eq!(
        (ev.0, ev.1.as_str()),
        ("ADDED", "after"),
        "the object created before the watch's revision is not replayed"
    );
}

/// A restarted server loads the store's recent history into its watch cache, so a client whose
/// watch was cut by the restart resumes from its last resourceVersion (as it would from etcd)
/// instead of getting `410 Gone` and relisting.
#[tokio::test]
async fn watch_from_a_revision_before_a_restart_resumes_from_the_stored_history() {
    let dir = tempfile::tempdir().unwrap();
    let rvs: Vec<u64> = common::with_server_then_stop(dir.path(), |client| async move {
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let mut rvs = Vec::new();
        for i in 0..5 {
            let cm = api
                .create(
                    &PostParams::default(),
                    &config_map(&format!("old-{i}"), "k", "v"),
                )
                .await
                .unwrap();
            rvs.push(cm.metadata.resource_version.unwrap().parse().unwrap());
        }
        rvs
    });
    let last_rv = rvs[4];

    let (_server, client) = common::start_at(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        5,
        "state survived the restart"
    );

    let mut resumed = api
        .watch(&WatchParams::default(), &rvs[0].to_string())
        .await
        .unwrap()
        .boxed();
    for (i, rv) in rvs.iter().enumerate().skip(1) {
        let ev = describe(&next_event(&mut resumed).await);
        assert_eq!(
            (ev.0, ev.1, ev.2),
            ("ADDED", format!("old-{i}"), *rv),
            "the changes after the watch's revision, in order"
        );
    }

    // kube-runtime's watcher recovers from the 410 by re-listing.
    let current = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    assert!(current.parse::<u64>().unwrap() >= last_rv);
    let mut stream = api
        .watch(&WatchParams::default(), &current)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &config_map("new", "k", "v"))
        .await
        .unwrap();
    assert_eq!(describe(&next_event(&mut stream).await).1, "new");
}

/// Drives a `watcher` until `InitDone`, returning the names delivered by `InitApply`.
async fn initial_names<S>(stream: &mut S) -> Vec<String>
where
    S: Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    within(10, "the watcher's initial list", async {
        match stream.try_next().await.unwrap() {
            Some(watcher::Event::Init) => {}
            other => panic!("expected Init first, got {other:?}"),
        }
        let mut names = Vec::new();
        loop {
            match stream.try_next().await.unwrap() {
                Some(watcher::Event::InitApply(p)) => names.push(p.metadata.name.unwrap()),
                Some(watcher::Event::InitDone) => return names,
                other => panic!("expected InitApply or InitDone, got {other:?}"),
            }
        }
    })
    .await
}

async fn next_live<S>(stream: &mut S) -> watcher::Event<Pod>
where
    S: Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    within(10, "a live watcher event", async {
        stream.try_next().await.unwrap().expect("watcher ended")
    })
    .await
}

async fn watcher_lists_then_follows(config: watcher::Config) {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    for n in ["a", "b", "c"] {
        api.create(&PostParams::default(), &pod(n)).await.unwrap();
    }
    let mut stream = watcher(api.clone(), config).boxed();
    let mut names = initial_names(&mut stream).await;
    names.sort();
    assert_eq!(names, vec!["a", "b", "c"]);

    api.create(&PostParams::default(), &pod("d")).await.unwrap();
    match next_live(&mut stream).await {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("d")),
        other => panic!("expected Apply(d), got {other:?}"),
    }
    api.delete("b", &DeleteParams::default()).await.unwrap();
    match next_live(&mut stream).await {
        watcher::Event::Delete(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("expected Delete(b), got {other:?}"),
    }
}

#[tokio::test]
async fn runtime_watcher_lists_then_follows_live_changes() {
    watcher_lists_then_follows(watcher::Config::default()).await;
}

#[tokio::test]
async fn runtime_watcher_with_paged_initial_list_sees_every_object() {
    watcher_lists_then_follows(watcher::Config::default().page_size(1)).await;
}

#[tokio::test]
async fn runtime_watcher_with_streaming_lists_gets_initial_events_then_follows() {
    watcher_lists_then_follows(watcher::Config::default().streaming_lists()).await;
}

#[tokio::test]
async fn send_initial_events_ends_the_initial_state_with_a_marked_bookmark() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    for n in ["x", "y"] {
        api.create(&PostParams::default(), &config_map(n, "k", "v"))
            .await
            .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .unwrap()
        .boxed();
    let mut added = Vec::new();
    let bookmark = within(10, "the initial-events-end bookmark", async {
        loop {
            match stream.try_next().await.unwrap().expect("stream ended") {
                WatchEvent::Added(cm) => added.push(cm.metadata.name.unwrap()),
                WatchEvent::Bookmark(b) => return b,
                other => panic!("unexpected event before the bookmark: {other:?}"),
            }
        }
    })
    .await;
    added.sort();
    assert_eq!(added, vec!["x", "y"]);
    assert_eq!(
        bookmark
            .metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    assert!(
        bookmark.metadata.resource_version.parse::<u64>().is_ok(),
        "bookmark carries a resourceVersion"
    );
    assert_eq!(bookmark.types.kind, "ConfigMap");

    api.create(&PostParams::default(), &config_map("z", "k", "v"))
        .await
        .unwrap();
    let ev = describe(&next_event(&mut stream).await);
    assert_eq!((ev.0, ev.1.as_str()), ("ADDED", "z"));
}

#[tokio::test]
async fn label_selector_watch_turns_a_relabel_into_deleted_and_added() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=web"), &rv)
        .await
        .unwrap()
        .boxed();

    api.create(
        &PostParams::default(),
        &labeled_pod("other", &[("app", "db")]),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &labeled_pod("p", &[("app", "web")]))
        .await
        .unwrap();
    assert_eq!(
        pod_event(&next_event(&mut stream).await),
        ("ADDED", "p".into()),
        "the non-matching pod is not seen"
    );

    let relabel = |v: &str| Patch::Merge(json!({ "metadata": { "labels": { "app": v } } }));
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { "touched": "yes" } } })),
    )
    .await
    .unwrap();
    assert_eq!(
        pod_event(&next_event(&mut stream).await),
        ("MODIFIED", "p".into())
    );

    let moved = api
        .patch("p", &PatchParams::default(), &relabel("db"))
        .await
        .unwrap();
    let deleted = match next_event(&mut stream).await {
        WatchEvent::Deleted(p) => p,
        other => panic!("expected DELETED, got {other:?}"),
    };
    assert_eq!(
        deleted.metadata.resource_version, moved.metadata.resource_version,
        "the DELETED event has the relabel's resourceVersion"
    );
    api.patch("p", &PatchParams::default(), &relabel("web"))
        .await
        .unwrap();
    assert_eq!(
        pod_event(&next_event(&mut stream).await),
        ("ADDED", "p".into())
    );

    // Upstream's cacher (cacheWatcher.convertToWatchEvent) sends the previous object, the one
    // that matched, stamped with the new resourceVersion.
    assert_eq!(
        deleted.metadata.labels.unwrap()["app"],
        "web",
        "the DELETED event carries the last matching state"
    );
}

#[tokio::test]
async fn field_selector_watch_sees_only_the_named_object() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().fields("metadata.name=wanted"), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &config_map("unwanted", "k", "v"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &config_map("wanted", "k", "v"))
        .await
        .unwrap();
    let ev = describe(&next_event(&mut stream).await);
    assert_eq!((ev.0, ev.1.as_str()), ("ADDED", "wanted"));
}

#[tokio::test]
async fn namespaced_watch_sees_only_its_namespace_and_all_namespaces_watch_sees_both() {
    let s = common::start().await;
    common::namespace(&s.client, "other").await;
    let default: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let other: Api<ConfigMap> = Api::namespaced(s.client.clone(), "other");
    let all: Api<ConfigMap> = Api::all(s.client.clone());
    let rv = all
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut ns_stream = default
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut all_stream = all
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    other
        .create(&PostParams::default(), &config_map("in-other", "k", "v"))
        .await
        .unwrap();
    default
        .create(&PostParams::default(), &config_map("in-default", "k", "v"))
        .await
        .unwrap();

    assert_eq!(describe(&next_event(&mut ns_stream).await).1, "in-default");
    assert_eq!(describe(&next_event(&mut all_stream).await).1, "in-other");
    assert_eq!(describe(&next_event(&mut all_stream).await).1, "in-default");
}

#[tokio::test]
async fn watch_with_bookmarks_allowed_streams_events() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    // kube's default WatchParams ask for bookmarks (allowWatchBookmarks=true); without them too.
    for params in [
        WatchParams::default(),
        WatchParams::default().disable_bookmarks(),
    ] {
        let rv = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let mut stream = api.watch(&params, &rv).await.unwrap().boxed();
        let name = format!("bm-{}", rv);
        api.create(&PostParams::default(), &config_map(&name, "k", "v"))
            .await
            .unwrap();
        assert_eq!(describe(&next_event(&mut stream).await).1, name);
    }
}

#[tokio::test]
async fn watch_ends_after_timeout_seconds() {
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    let mut stream = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    within(15, "the watch to end after timeoutSeconds=1", async {
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                panic!("watch error: {e}");
            }
        }
    })
    .await;
}

#[tokio::test]
async fn reflector_store_converges_to_the_server_state() {
    use kube::runtime::{WatchStreamExt, reflector};
    let s = common::start().await;
    let api: Api<ConfigMap> = Api::namespaced(s.client.clone(), "default");
    api.create(&PostParams::default(), &config_map("r1", "k", "v"))
        .await
        .unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let task = tokio::spawn(
        reflector(writer, watcher(api.clone(), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    within(10, "the reflector's first sync", reader.wait_until_ready())
        .await
        .unwrap();
    assert_eq!(reader.state().len(), 1);

    api.create(&PostParams::default(), &config_map("r2", "k", "v"))
        .await
        .unwrap();
    api.delete("r1", &DeleteParams::default()).await.unwrap();
    within(10, "the reflector to see r2 and lose r1", async {
        loop {
            let mut names: Vec<String> = reader
                .state()
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            names.sort();
            if names == ["r2"] {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watcher_over_partial_object_metadata_streams_metadata_only() {
    let s = common::start().await;
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    api.create(
        &PostParams::default(),
        &labeled_pod("meta-a", &[("app", "m")]),
    )
    .await
    .unwrap();
    // kube 5 makes metadata-only requests for `Api<PartialObjectMeta<K>>`.
    let meta_api: Api<kube::core::PartialObjectMeta<Pod>> =
        Api::namespaced(s.client.clone(), "default");
    let mut stream = watcher(meta_api, watcher::Config::default()).boxed();
    let names = within(10, "the metadata watcher's initial list", async {
        let mut names = Vec::new();
        loop {
            match stream.try_next().await.unwrap().expect("stream ended") {
                watcher::Event::Init => {}
                watcher::Event::InitApply(m) => names.push(m.metadata.name.unwrap()),
                watcher::Event::InitDone => return names,
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(names, vec!["meta-a"]);
    api.create(&PostParams::default(), &pod("meta-b"))
        .await
        .unwrap();
    match within(10, "a live metadata event", stream.try_next())
        .await
        .unwrap()
        .expect("stream ended")
    {
        watcher::Event::Apply(m) => assert_eq!(m.metadata.name.as_deref(), Some("meta-b")),
        other => panic!("expected Apply(meta-b), got {other:?}"),
    }
}
