//! Behaviour specific to the etcd backend, against real etcd servers (module `etcd_server`):
//! several stores on one etcd, compaction by another store, the coordinated background
//! compactor, a slow watcher, an unreachable etcd, and a 3-member cluster losing its leader.
//! The `Store` contract itself is in `contract.rs`. Without `etcd` on `PATH` these tests are
//! skipped (failed when `CI` is set).

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod etcd_server;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use tandem_store::etcd::{COMPACT_REV_KEY, EtcdError, EtcdOptions, EtcdStore};
use tandem_store::{Event, Store, StoreError, WatchStream};

use self::etcd_server::EtcdServer;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn options(endpoints: &[&EtcdServer]) -> EtcdOptions {
    EtcdOptions {
        endpoints: endpoints.iter().map(|s| s.client_url.clone()).collect(),
        compaction_interval: None,
        dial_timeout: Duration::from_secs(10),
        ..EtcdOptions::default()
    }
}

async fn connect(endpoints: &[&EtcdServer]) -> EtcdStore {
    EtcdStore::connect(options(endpoints)).await.unwrap()
}

/// The next watch item, failing the test instead of hanging if none comes.
async fn next_item(stream: &mut WatchStream) -> Result<Event, StoreError> {
    match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
        Ok(Some(item)) => item,
        Ok(None) => panic!("watch ended without an error"),
        Err(_) => panic!("no watch item within 20 s"),
    }
}

/// Waits (bounded) until `done` holds, polling every 20 ms.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_etcd_see_each_others_writes() {
    if etcd_server::etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let writer = connect(&[&etcd]).await;
    let reader = connect(&[&etcd]).await;
    let start = reader.current_revision();

    let kv = writer.create("/registry/pods/ns/a", b("1")).await.unwrap();
    // The quorum read is exact at once; the local revision catches up through the follower.
    assert_eq!(reader.latest_revision().await.unwrap(), kv.mod_revision);
    let updated = writer
        .update("/registry/pods/ns/a", b("2"), Some(kv.mod_revision))
        .await
        .unwrap();
    eventually("the reader's current revision advancing", || {
        reader.current_revision() == updated.mod_revision
    })
    .await;
    assert!(start < kv.mod_revision);
    assert_eq!(
        reader.get("/registry/pods/ns/a").await.unwrap(),
        Some(updated.clone())
    );

    // Optimistic concurrency holds across the two: the reader's stale update conflicts.
    let err = reader
        .update("/registry/pods/ns/a", b("3"), Some(kv.mod_revision))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { actual, .. } if actual == updated.mod_revision),
        "{err:?}"
    );
    // The reader's watch sees the writer's changes, with previous values.
    let mut watch = reader.watch("/registry/pods/", start).unwrap();
    assert_eq!(
        next_item(&mut watch).await.unwrap(),
        Event::Put {
            kv: kv.clone(),
            prev: None
        }
    );
    assert_eq!(
        next_item(&mut watch).await.unwrap(),
        Event::Put {
            kv: updated.clone(),
            prev: Some(kv)
        }
    );
    let deleted = writer
        .delete("/registry/pods/ns/a", Some(updated.mod_revision))
        .await
        .unwrap();
    assert_eq!(
        next_item(&mut watch).await.unwrap(),
        Event::Delete {
            prev: deleted,
            revision: updated.mod_revision + 1
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_by_another_store_makes_old_watches_and_lists_fail_with_compacted() {
    if etcd_server::etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let compactor = connect(&[&etcd]).await;
    let other = connect(&[&etcd]).await;
    let start = other.current_revision();
    for i in 0..10 {
        compactor.create(&format!("/c/{i}"), b("v")).await.unwrap();
    }
    let target = compactor.current_revision() - 2;
    compactor.compact(target).await.unwrap();
    // `other` has not heard of the compaction (it writes no record): etcd tells it.
    assert!(other.compacted_revision() < target);
    let mut watch = other.watch("/c/", start).unwrap();
    let err = next_item(&mut watch).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Compacted { requested, compacted } if requested == start && compacted == target),
        "{err:?}"
    );
    assert_eq!(other.compacted_revision(), target);
    assert!(
        watch.next().await.is_none(),
        "the stream ends after its error"
    );
    let err = other
        .list("/c/", None, None, Some(start + 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    // From the compacted revision on, history is intact.
    let mut watch = other.watch("/c/", target).unwrap();
    for offset in 1..=2 {
        assert_eq!(
            next_item(&mut watch).await.unwrap().revision(),
            target + offset
        );
    }
    // A new client finds the compacted revision when it connects.
    assert_eq!(connect(&[&etcd]).await.compacted_revision(), target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_compactors_of_two_stores_compact_once_per_interval() {
    if etcd_server::etcd_binary().is_none() {
        return;
    }
    const INTERVAL: Duration = Duration::from_millis(500);
    let etcd = EtcdServer::start();
    let began = Instant::now();
    let with_compactor = || EtcdOptions {
        compaction_interval: Some(INTERVAL),
        ..options(&[&etcd])
    };
    let first = EtcdStore::connect(with_compactor()).await.unwrap();
    let second = EtcdStore::connect(with_compactor()).await.unwrap();
    let start = first.current_revision();
    // Writes while the compactors run, so each round has history to remove.
    for i in 0..5 {
        first.create(&format!("/bc/{i}"), b("0")).await.unwrap();
    }
    for round in 0..12 {
        let writer = if round % 2 == 0 { &first } else { &second };
        for i in 0..5 {
            writer
                .update(&format!("/bc/{i}"), b(&round.to_string()), None)
                .await
                .unwrap();
        }
        tokio::time::sleep(INTERVAL / 2).await;
    }
    // Both stores learn the compaction: one did it, the other read the record.
    eventually("both stores knowing of a compaction", || {
        first.compacted_revision() > start && second.compacted_revision() > start
    })
    .await;

    let mut client = etcd_client::Client::connect([etcd.client_url.as_str()], None)
        .await
        .unwrap();
    let answer = client.get(COMPACT_REV_KEY, None).await.unwrap();
    let rounds = answer.kvs()[0].version();
    let elapsed = began.elapsed();
    let intervals = (elapsed.as_millis() / INTERVAL.as_millis()) as i64;
    // Each compaction round bumps the record's version once. Uncoordinated, two stores would
    // make about two rounds per interval; taking turns, they make at most one.
    assert!(rounds >= 2, "only {rounds} compaction rounds");
    assert!(
        rounds <= intervals + 1,
        "{rounds} compaction rounds in {intervals} intervals"
    );
    let recorded: i64 = answer.kvs()[0].value_str().unwrap().parse().unwrap();
    assert!(recorded > start);
    let err = first.watch("/bc/", start).err().unwrap();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_that_does_not_read_ends_with_watch_lagged_after_its_buffer() {
    if etcd_server::etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let store = EtcdStore::connect(EtcdOptions {
        watch_buffer: 4,
        ..options(&[&etcd])
    })
    .await
    .unwrap();
    let start = store.current_revision();
    let mut watch = store.watch("/lag/", start).unwrap();
    for i in 0..50 {
        store.create(&format!("/lag/{i:02}"), b("x")).await.unwrap();
    }
    // The buffered events come first, in order and without gaps, then the lag. etcd sends
    // watch events after it acknowledges the writes, so some may still be on their way when
    // this starts reading and pass through the room the reads make: what is bounded is what
    // the channel holds (four), not how many get through before the lag, so the check is that
    // the watch lagged before the last write reached it.
    let last = start + 50;
    let mut expected = start + 1;
    loop {
        match next_item(&mut watch).await {
            Ok(event) => {
                assert_eq!(event.revision(), expected);
                expected += 1;
            }
            Err(StoreError::WatchLagged) => break,
            Err(e) => panic!("expected WatchLagged, got {e:?}"),
        }
        assert!(
            expected <= last,
            "every event got through: the watch never lagged"
        );
    }
    assert!(watch.next().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_an_unreachable_etcd_fails_with_a_clear_error() {
    // No etcd needed: nothing listens on this port.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let connect = EtcdStore::connect(EtcdOptions {
        endpoints: vec![endpoint.clone()],
        dial_timeout: Duration::from_secs(2),
        compaction_interval: None,
        ..EtcdOptions::default()
    });
    let err = match tokio::time::timeout(Duration::from_secs(30), connect).await {
        Ok(result) => result.err().expect("connecting to nothing must fail"),
        Err(_) => panic!("connect did not give up within 30 s"),
    };
    let StoreError::Backend(source) = &err else {
        panic!("expected Backend, got {err:?}")
    };
    assert!(
        matches!(
            source.downcast_ref::<EtcdError>(),
            Some(EtcdError::Unreachable { .. } | EtcdError::Connect { .. })
        ),
        "{source:?}"
    );
    assert!(
        source.to_string().contains(&endpoint),
        "message does not name the endpoint: {source}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_options_that_do_not_fit_are_refused_before_connecting() {
    let refused = |options: EtcdOptions| async move {
        match EtcdStore::connect(options).await {
            Err(StoreError::Backend(source)) => source.to_string(),
            Err(other) => panic!("expected Backend, got {other:?}"),
            Ok(_) => panic!("connect must fail"),
        }
    };
    let https = EtcdOptions {
        endpoints: vec!["https://127.0.0.1:1".to_owned()],
        ..EtcdOptions::default()
    };
    assert!(refused(https.clone()).await.contains("CA file"));
    let cert_without_key = EtcdOptions {
        ca_file: Some("/nonexistent/ca.pem".into()),
        cert_file: Some("/nonexistent/cert.pem".into()),
        ..https.clone()
    };
    assert!(refused(cert_without_key).await.contains("key"));
    let missing_ca = EtcdOptions {
        ca_file: Some("/nonexistent/ca.pem".into()),
        ..https
    };
    assert!(refused(missing_ca).await.contains("/nonexistent/ca.pem"));
    assert!(
        refused(EtcdOptions::default())
            .await
            .contains("no etcd endpoints")
    );
}

/// Creates `key`, retrying while the cluster elects a new leader. An `AlreadyExists` on a retry
/// means an earlier attempt was applied although its answer was lost: the write is there.
async fn create_through_failover(store: &EtcdStore, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.create(key, b(key)).await {
            Ok(_) | Err(StoreError::AlreadyExists(_)) => return,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{key} not written within 30 s: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_member_cluster_keeps_serving_when_its_leader_is_killed() {
    if etcd_server::etcd_binary().is_none() {
        return;
    }
    let mut members = etcd_server::start_cluster(3);
    let store = connect(&members.iter().collect::<Vec<_>>()).await;
    let start = store.current_revision();
    let mut keys = Vec::new();
    for i in 0..30 {
        let key = format!("/ha/before/{i:02}");
        store.create(&key, b(&key)).await.unwrap();
        keys.push(key);
    }

    // Kill the leader (the member whose id is the leader id it reports), as a crash would.
    let mut leader = None;
    for (index, member) in members.iter().enumerate() {
        let mut client = etcd_client::Client::connect([member.client_url.as_str()], None)
            .await
            .unwrap();
        let status = client.status().await.unwrap();
        let header = status.header().unwrap();
        if status.leader() == header.member_id() {
            leader = Some(index);
        }
    }
    let leader = leader.expect("one member reports itself as leader");
    members[leader].kill();

    for i in 0..30 {
        let key = format!("/ha/after/{i:02}");
        create_through_failover(&store, &key).await;
        keys.push(key);
    }
    // Every acknowledged write is there, read back through the surviving members...
    let list = store.list("/ha/", None, None, None).await.unwrap();
    let mut listed: Vec<String> = list.items.iter().map(|kv| kv.key.clone()).collect();
    keys.sort();
    listed.sort();
    assert_eq!(listed, keys);
    for kv in &list.items {
        assert_eq!(kv.value, b(&kv.key));
    }
    // ... and in the history a new watch replays.
    let mut watch = store.watch("/ha/", start).unwrap();
    let mut seen = Vec::new();
    while seen.len() < keys.len() {
        seen.push(next_item(&mut watch).await.unwrap().key().to_owned());
    }
    seen.sort();
    assert_eq!(seen, keys);
}
