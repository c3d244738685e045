//! The `Store` contract: behaviour every backend must show, written against the trait only.
//!
//! Each check in [`suite`] is generic over a [`Harness`], which knows how to open (and reopen) one
//! backend's store. The `contract_tests!` macro turns every check into a `#[tokio::test]` for a
//! harness; a new backend adds a harness and one macro invocation.
//!
//! The etcd harness starts a real etcd (module `etcd_server`) for every check, so that revisions
//! start from a fresh cluster as the checks expect; without `etcd` on `PATH` its checks are
//! skipped (failed when `CI` is set).

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod etcd_server;

use bytes::Bytes;
use futures::StreamExt;
use tandem_store::etcd::{EtcdOptions, EtcdStore};
use tandem_store::sqlite::{SqliteOptions, SqliteStore};
use tandem_store::{Event, KeyValue, Store, StoreError, WatchStream};

/// Opens one backend's store, possibly several times in sequence over the same data.
trait Harness: Sized + Send + Sync + 'static {
    /// A new, empty store location.
    fn fresh() -> Self;
    /// Opens the store at this location. Every clone of an earlier handle must have been dropped.
    fn open(&self) -> Arc<dyn Store>;
    /// Environment variables that let a child process reach this location through `from_env`.
    fn child_env(&self) -> Vec<(String, String)>;
    /// The location named by `child_env`, when running as such a child.
    fn from_env() -> Option<Self>;
    /// Why this backend cannot be tested on this machine (its checks are then skipped).
    fn unavailable() -> Option<String> {
        None
    }
}

const CHILD_DB_ENV: &str = "TANDEM_STORE_CONTRACT_CHILD_DB";

struct SqliteHarness {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Harness for SqliteHarness {
    fn fresh() -> Self {
        let dir = tempfile::tempdir().unwrap();
        SqliteHarness {
            path: dir.path().join("store.db"),
            _dir: Some(dir),
        }
    }

    fn open(&self) -> Arc<dyn Store> {
        // No background compactor: the contract tests compact explicitly.
        let options = SqliteOptions {
            compaction_interval: None,
            ..SqliteOptions::default()
        };
        Arc::new(SqliteStore::open(&self.path, options).unwrap())
    }

    fn child_env(&self) -> Vec<(String, String)> {
        vec![(CHILD_DB_ENV.to_owned(), self.path.display().to_string())]
    }

    fn from_env() -> Option<Self> {
        let path = std::env::var_os(CHILD_DB_ENV)?;
        Some(SqliteHarness {
            path: PathBuf::from(path),
            _dir: None,
        })
    }
}

const CHILD_ETCD_ENV: &str = "TANDEM_STORE_CONTRACT_CHILD_ETCD";

/// A real etcd per location; `open` connects a new client to it. The process is killed when the
/// harness is dropped.
struct EtcdHarness {
    endpoint: String,
    _server: Option<etcd_server::EtcdServer>,
}

impl Harness for EtcdHarness {
    fn fresh() -> Self {
        let server = etcd_server::EtcdServer::start();
        EtcdHarness {
            endpoint: server.client_url.clone(),
            _server: Some(server),
        }
    }

    fn open(&self) -> Arc<dyn Store> {
        // No background compactor: the contract tests compact explicitly (and its record
        // would take revisions).
        let options = EtcdOptions {
            endpoints: vec![self.endpoint.clone()],
            compaction_interval: None,
            dial_timeout: Duration::from_secs(10),
            ..EtcdOptions::default()
        };
        let store = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(EtcdStore::connect(options))
        });
        Arc::new(store.unwrap())
    }

    fn child_env(&self) -> Vec<(String, String)> {
        vec![(CHILD_ETCD_ENV.to_owned(), self.endpoint.clone())]
    }

    fn from_env() -> Option<Self> {
        Some(EtcdHarness {
            endpoint: std::env::var(CHILD_ETCD_ENV).ok()?,
            _server: None,
        })
    }

    fn unavailable() -> Option<String> {
        etcd_server::find_etcd().err()
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next watch item, failing the test instead of hanging if none comes.
async fn next_event(stream: &mut WatchStream) -> Event {
    match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch event within 20 s"),
    }
}

fn keys(items: &[KeyValue]) -> Vec<&str> {
    items.iter().map(|kv| kv.key.as_str()).collect()
}

mod suite {
    use super::*;

    pub async fn create_then_get_returns_value_and_revisions<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let before = s.current_revision();
        let kv = s.create("/a", b("one")).await.unwrap();
        assert_eq!(kv.key, "/a");
        assert_eq!(kv.value, b("one"));
        assert!(kv.mod_revision > before);
        assert_eq!(kv.create_revision, kv.mod_revision);
        assert_eq!(s.current_revision(), kv.mod_revision);
        assert_eq!(s.get("/a").await.unwrap(), Some(kv));
    }

    pub async fn get_of_missing_key_returns_none<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        assert_eq!(s.get("/missing").await.unwrap(), None);
        s.create("/missing-not", b("x")).await.unwrap();
        assert_eq!(s.get("/missing").await.unwrap(), None);
    }

    pub async fn create_of_existing_key_fails_with_already_exists<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let kv = s.create("/a", b("one")).await.unwrap();
        let err = s.create("/a", b("two")).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::AlreadyExists(k) if k == "/a"),
            "{err:?}"
        );
        assert_eq!(s.get("/a").await.unwrap(), Some(kv));
    }

    pub async fn update_with_matching_revision_replaces_value_and_keeps_create_revision<
        H: Harness,
    >() {
        let h = H::fresh();
        let s = h.open();
        let v1 = s.create("/a", b("one")).await.unwrap();
        let v2 = s
            .update("/a", b("two"), Some(v1.mod_revision))
            .await
            .unwrap();
        assert_eq!(v2.value, b("two"));
        assert_eq!(v2.create_revision, v1.create_revision);
        assert!(v2.mod_revision > v1.mod_revision);
        assert_eq!(s.current_revision(), v2.mod_revision);
        assert_eq!(s.get("/a").await.unwrap(), Some(v2));
    }

    pub async fn update_with_stale_revision_conflicts_and_keeps_value<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let v1 = s.create("/a", b("one")).await.unwrap();
        let v2 = s
            .update("/a", b("two"), Some(v1.mod_revision))
            .await
            .unwrap();
        let err = s
            .update("/a", b("three"), Some(v1.mod_revision))
            .await
            .unwrap_err();
        match err {
            StoreError::Conflict {
                key,
                expected,
                actual,
            } => {
                assert_eq!(key, "/a");
                assert_eq!(expected, v1.mod_revision);
                assert_eq!(actual, v2.mod_revision);
            }
            other => panic!("expected Conflict, got {other:?}"),
        }
        assert_eq!(s.get("/a").await.unwrap(), Some(v2));
    }

    pub async fn update_of_missing_or_deleted_key_fails_with_not_found<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let err = s.update("/never", b("x"), None).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(k) if k == "/never"),
            "{err:?}"
        );
        let kv = s.create("/gone", b("x")).await.unwrap();
        s.delete("/gone", None).await.unwrap();
        let err = s
            .update("/gone", b("y"), Some(kv.mod_revision))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(k) if k == "/gone"),
            "{err:?}"
        );
        assert_eq!(s.get("/gone").await.unwrap(), None);
    }

    pub async fn unconditional_update_and_delete_ignore_the_revision<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        s.create("/a", b("one")).await.unwrap();
        s.update("/a", b("two"), None).await.unwrap();
        let v3 = s.update("/a", b("three"), None).await.unwrap();
        assert_eq!(s.get("/a").await.unwrap(), Some(v3.clone()));
        assert_eq!(s.delete("/a", None).await.unwrap(), v3);
        assert_eq!(s.get("/a").await.unwrap(), None);
    }

    pub async fn delete_returns_deleted_value_and_key_disappears<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let kv = s.create("/d/a", b("one")).await.unwrap();
        s.create("/d/b", b("two")).await.unwrap();
        let deleted = s.delete("/d/a", Some(kv.mod_revision)).await.unwrap();
        assert_eq!(deleted, kv);
        assert!(s.current_revision() > kv.mod_revision);
        assert_eq!(s.get("/d/a").await.unwrap(), None);
        assert_eq!(
            keys(&s.list("/d/", None, None, None).await.unwrap().items),
            ["/d/b"]
        );
        assert_eq!(s.count("/d/").await.unwrap(), 1);
    }

    pub async fn delete_with_stale_revision_conflicts_and_keeps_key<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let v1 = s.create("/a", b("one")).await.unwrap();
        let v2 = s.update("/a", b("two"), None).await.unwrap();
        let err = s.delete("/a", Some(v1.mod_revision)).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Conflict { expected, actual, .. } if *expected == v1.mod_revision && *actual == v2.mod_revision),
            "{err:?}"
        );
        assert_eq!(s.get("/a").await.unwrap(), Some(v2));
    }

    pub async fn delete_of_missing_key_fails_with_not_found<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let err = s.delete("/never", None).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(k) if k == "/never"),
            "{err:?}"
        );
        s.create("/once", b("x")).await.unwrap();
        s.delete("/once", None).await.unwrap();
        let err = s.delete("/once", None).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::NotFound(k) if k == "/once"),
            "{err:?}"
        );
    }

    pub async fn recreate_after_delete_starts_a_new_create_revision<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let first = s.create("/a", b("one")).await.unwrap();
        s.delete("/a", None).await.unwrap();
        let second = s.create("/a", b("two")).await.unwrap();
        assert!(second.create_revision > first.create_revision);
        assert_eq!(second.create_revision, second.mod_revision);
        assert_eq!(s.get("/a").await.unwrap(), Some(second));
    }

    pub async fn failed_writes_do_not_consume_revisions<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let kv = s.create("/a", b("one")).await.unwrap();
        let before = s.current_revision();
        assert!(s.create("/a", b("again")).await.is_err());
        assert!(
            s.update("/a", b("stale"), Some(kv.mod_revision - 1))
                .await
                .is_err()
        );
        assert!(s.update("/missing", b("x"), None).await.is_err());
        assert!(s.delete("/missing", None).await.is_err());
        assert_eq!(s.current_revision(), before);
        let next = s.create("/b", b("two")).await.unwrap();
        assert_eq!(next.mod_revision, before + 1);
    }

    pub async fn list_returns_only_keys_under_prefix_in_byte_order<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        // Inserted out of order; includes neighbours of the prefix and non-ASCII keys.
        for key in [
            "/r/b", "/r0", "/q", "/r/é", "/r/a/x", "/r/Z", "/r/~", "/r/a", "/r", "/s/a",
        ] {
            s.create(key, b(key)).await.unwrap();
        }
        let list = s.list("/r/", None, None, None).await.unwrap();
        assert_eq!(
            keys(&list.items),
            ["/r/Z", "/r/a", "/r/a/x", "/r/b", "/r/~", "/r/é"]
        );
        assert!(!list.more);
        assert_eq!(list.revision, s.current_revision());
        for kv in &list.items {
            assert_eq!(kv.value, b(&kv.key));
        }
        let exact = s.list("/r/a/x", None, None, None).await.unwrap();
        assert_eq!(keys(&exact.items), ["/r/a/x"]);
        assert!(
            s.list("/t/", None, None, None)
                .await
                .unwrap()
                .items
                .is_empty()
        );
    }

    pub async fn list_with_empty_prefix_returns_every_key<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        for key in ["b", "a", "/x", "\u{7f}", "é"] {
            s.create(key, b(key)).await.unwrap();
        }
        let list = s.list("", None, None, None).await.unwrap();
        assert_eq!(keys(&list.items), ["/x", "a", "b", "\u{7f}", "é"]);
        assert_eq!(s.count("").await.unwrap(), 5);
    }

    pub async fn list_pagination_with_start_after_and_limit_is_complete<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let mut expected = Vec::new();
        for i in 0..25 {
            let key = format!("/p/{i:03}");
            s.create(&key, b(&key)).await.unwrap();
            expected.push(key);
        }
        s.create("/pz", b("outside")).await.unwrap();
        let pinned = s.current_revision();

        let mut seen = Vec::new();
        let mut start_after: Option<String> = None;
        for page in 0.. {
            assert!(page < 10, "pagination does not terminate");
            let list = s
                .list("/p/", start_after.as_deref(), Some(7), Some(pinned))
                .await
                .unwrap();
            assert_eq!(list.revision, pinned);
            assert!(list.items.len() <= 7);
            seen.extend(list.items.iter().map(|kv| kv.key.clone()));
            // Writes between pages must not show up in pages pinned to the first page's revision.
            s.create(&format!("/p/{:03}-late", page * 3), b("late"))
                .await
                .unwrap();
            s.update("/p/024", b("changed"), None).await.unwrap();
            if !list.more {
                assert_eq!(
                    list.items.last().map(|kv| kv.value.clone()),
                    Some(b("/p/024"))
                );
                break;
            }
            assert_eq!(list.items.len(), 7);
            start_after = list.items.last().map(|kv| kv.key.clone());
        }
        assert_eq!(seen, expected);

        // A limit that exactly fits reports no more.
        let all = s.list("/p/0", None, Some(100), Some(pinned)).await.unwrap();
        assert_eq!(all.items.len(), 25);
        assert!(!all.more);
        let exact = s.list("/p/", None, Some(25), Some(pinned)).await.unwrap();
        assert!(!exact.more);
        let short = s.list("/p/", None, Some(24), Some(pinned)).await.unwrap();
        assert!(short.more);
    }

    pub async fn list_at_old_revision_sees_old_values<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let a1 = s.create("/o/a", b("a1")).await.unwrap();
        let b1 = s.create("/o/b", b("b1")).await.unwrap();
        let old = s.current_revision();
        s.update("/o/a", b("a2"), None).await.unwrap();
        s.delete("/o/b", None).await.unwrap();
        s.create("/o/c", b("c1")).await.unwrap();
        s.delete("/o/c", None).await.unwrap();
        let c2 = s.create("/o/c", b("c2")).await.unwrap();

        let then = s.list("/o/", None, None, Some(old)).await.unwrap();
        assert_eq!(then.revision, old);
        assert_eq!(then.items, vec![a1, b1]);

        let now = s.list("/o/", None, None, None).await.unwrap();
        assert_eq!(keys(&now.items), ["/o/a", "/o/c"]);
        assert_eq!(now.items[0].value, b("a2"));
        assert_eq!(now.items[1], c2);

        let before_anything = s.list("/o/", None, None, Some(old - 2)).await.unwrap();
        assert!(before_anything.items.is_empty());
    }

    pub async fn list_at_future_revision_fails_with_future_revision<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        s.create("/a", b("x")).await.unwrap();
        let current = s.current_revision();
        let err = s
            .list("/", None, None, Some(current + 5))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::FutureRevision { requested, current: c } if requested == current + 5 && c == current),
            "{err:?}"
        );
    }

    pub async fn list_below_compacted_revision_fails_with_compacted<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let first = s.create("/a", b("1")).await.unwrap();
        for i in 2..6 {
            s.update("/a", b(&i.to_string()), None).await.unwrap();
        }
        let target = s.current_revision() - 1;
        s.compact(target).await.unwrap();
        assert_eq!(s.compacted_revision(), target);
        let err = s
            .list("/", None, None, Some(first.mod_revision))
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Compacted { requested, compacted } if requested == first.mod_revision && compacted == target),
            "{err:?}"
        );
        // The compacted revision itself can still be read.
        let at = s.list("/", None, None, Some(target)).await.unwrap();
        assert_eq!(at.items.len(), 1);
        assert_eq!(at.items[0].value, b("4"));
    }

    pub async fn count_counts_live_keys_under_prefix<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        for i in 0..10 {
            s.create(&format!("/c/{i}"), b("x")).await.unwrap();
        }
        s.create("/c0", b("outside")).await.unwrap();
        s.update("/c/1", b("y"), None).await.unwrap();
        s.delete("/c/2", None).await.unwrap();
        s.delete("/c/3", None).await.unwrap();
        s.create("/c/3", b("again")).await.unwrap();
        assert_eq!(s.count("/c/").await.unwrap(), 9);
        assert_eq!(s.count("/none/").await.unwrap(), 0);
    }

    pub async fn watch_from_revision_replays_history_then_live_without_gaps<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        for i in 0..20 {
            s.create(&format!("/w/{i:02}"), b("v")).await.unwrap();
        }
        let from = s.current_revision() - 10;
        let mut stream = s.watch("/w/", from).unwrap();
        // Live writes race with the replay of history.
        let writer = Arc::clone(&s);
        let live = tokio::spawn(async move {
            for i in 0..50 {
                writer
                    .update(&format!("/w/{:02}", i % 20), b(&format!("live{i}")), None)
                    .await
                    .unwrap();
            }
        });
        let mut revisions = Vec::new();
        for _ in 0..60 {
            revisions.push(next_event(&mut stream).await.revision());
        }
        live.await.unwrap();
        let expected: Vec<i64> = (from + 1..=from + 60).collect();
        assert_eq!(revisions, expected);
        assert_eq!(s.current_revision(), from + 60);
    }

    pub async fn watch_filters_by_prefix<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let start = s.current_revision();
        s.create("/f/a", b("1")).await.unwrap();
        s.create("/g/a", b("2")).await.unwrap();
        s.create("/f0", b("3")).await.unwrap();
        let mut stream = s.watch("/f/", start).unwrap();
        s.create("/g/b", b("4")).await.unwrap();
        s.create("/f/b", b("5")).await.unwrap();
        let first = next_event(&mut stream).await;
        let second = next_event(&mut stream).await;
        assert_eq!((first.key(), second.key()), ("/f/a", "/f/b"));
    }

    pub async fn watch_reports_previous_values_of_updates_and_deletes<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let start = s.current_revision();
        let v1 = s.create("/e/a", b("1")).await.unwrap();
        let v2 = s.update("/e/a", b("2"), None).await.unwrap();
        s.delete("/e/a", None).await.unwrap();
        let expected_history = vec![
            Event::Put {
                kv: v1.clone(),
                prev: None,
            },
            Event::Put {
                kv: v2.clone(),
                prev: Some(v1.clone()),
            },
            Event::Delete {
                prev: v2.clone(),
                revision: v2.mod_revision + 1,
            },
        ];

        let mut replay = s.watch("/e/", start).unwrap();
        let mut live = s.watch("/e/", s.current_revision()).unwrap();
        let mut replayed = Vec::new();
        for _ in 0..3 {
            replayed.push(next_event(&mut replay).await);
        }
        assert_eq!(replayed, expected_history);

        let w1 = s.create("/e/a", b("3")).await.unwrap();
        let w2 = s
            .update("/e/a", b("4"), Some(w1.mod_revision))
            .await
            .unwrap();
        s.delete("/e/a", Some(w2.mod_revision)).await.unwrap();
        let expected_live = vec![
            Event::Put {
                kv: w1.clone(),
                prev: None,
            },
            Event::Put {
                kv: w2.clone(),
                prev: Some(w1.clone()),
            },
            Event::Delete {
                prev: w2.clone(),
                revision: w2.mod_revision + 1,
            },
        ];
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(next_event(&mut live).await);
        }
        assert_eq!(seen, expected_live);
        // The replaying watcher carries on into the same live events.
        for event in expected_live {
            assert_eq!(next_event(&mut replay).await, event);
        }
    }

    pub async fn watch_sees_concurrent_writes_in_revision_order<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let mut stream = s.watch("/cw/", s.current_revision()).unwrap();
        let mut tasks = Vec::new();
        for t in 0..8 {
            let s = Arc::clone(&s);
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    s.create(&format!("/cw/{t}/{i}"), b("x")).await.unwrap();
                }
            }));
        }
        let mut keys = BTreeSet::new();
        let mut last = 0;
        for _ in 0..200 {
            let event = next_event(&mut stream).await;
            assert!(event.revision() > last, "revisions out of order");
            last = event.revision();
            keys.insert(event.key().to_owned());
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(keys.len(), 200);
    }

    pub async fn watch_after_compaction_fails_with_compacted<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        let start = s.current_revision();
        for i in 0..10 {
            s.create(&format!("/k/{i}"), b("v")).await.unwrap();
            s.update(&format!("/k/{i}"), b("w"), None).await.unwrap();
        }
        s.delete("/k/0", None).await.unwrap();
        let target = s.current_revision() - 3;
        s.compact(target).await.unwrap();
        let err = s
            .watch("/k/", start)
            .err()
            .expect("watch before the compacted revision must fail");
        assert!(
            matches!(err, StoreError::Compacted { requested, compacted } if requested == start && compacted == target),
            "{err:?}"
        );
        // Watching from exactly the compacted revision works: history after it is intact.
        let mut stream = s.watch("/k/", target).unwrap();
        for offset in 1..=3 {
            assert_eq!(next_event(&mut stream).await.revision(), target + offset);
        }
        let kv = s.create("/k/new", b("n")).await.unwrap();
        assert_eq!(next_event(&mut stream).await.revision(), kv.mod_revision);
    }

    pub async fn compaction_keeps_the_latest_value_of_every_live_key<H: Harness>() {
        let h = H::fresh();
        let s = h.open();
        for i in 0..20 {
            s.create(&format!("/cp/{i:02}"), b("0")).await.unwrap();
        }
        for round in 1..5 {
            for i in 0..20 {
                s.update(&format!("/cp/{i:02}"), b(&round.to_string()), None)
                    .await
                    .unwrap();
            }
        }
        for i in (0..20).step_by(3) {
            s.delete(&format!("/cp/{i:02}"), None).await.unwrap();
        }
        let before = s.list("/cp/", None, None, None).await.unwrap();
        let current = s.current_revision();
        s.compact(current).await.unwrap();
        assert_eq!(s.compacted_revision(), current);
        assert_eq!(s.current_revision(), current);
        let after = s.list("/cp/", None, None, None).await.unwrap();
        assert_eq!(after, before);
        assert_eq!(s.count("/cp/").await.unwrap(), before.items.len());
        for kv in &before.items {
            assert_eq!(s.get(&kv.key).await.unwrap().as_ref(), Some(kv));
        }
        // Compacting again, or to an older revision, is a no-op.
        s.compact(current).await.unwrap();
        s.compact(current - 10).await.unwrap();
        assert_eq!(s.compacted_revision(), current);
        // Deleted keys can be created again, and writes continue from the same revision.
        let kv = s.create("/cp/00", b("new")).await.unwrap();
        assert_eq!(kv.mod_revision, current + 1);
        let err = s.compact(current + 100).await.unwrap_err();
        assert!(matches!(err, StoreError::FutureRevision { .. }), "{err:?}");
    }

    pub async fn concurrent_creates_all_get_distinct_revisions<H: Harness>() {
        const TASKS: usize = 64;
        const PER_TASK: usize = 50;
        let h = H::fresh();
        let s = h.open();
        let start = s.current_revision();
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let s = Arc::clone(&s);
            tasks.push(tokio::spawn(async move {
                let mut revisions = Vec::with_capacity(PER_TASK);
                for i in 0..PER_TASK {
                    let kv = s
                        .create(&format!("/cc/{t:02}/{i:02}"), b("x"))
                        .await
                        .unwrap();
                    assert_eq!(kv.create_revision, kv.mod_revision);
                    revisions.push(kv.mod_revision);
                }
                revisions
            }));
        }
        let mut all = BTreeSet::new();
        for task in tasks {
            for revision in task.await.unwrap() {
                assert!(all.insert(revision), "revision {revision} handed out twice");
            }
        }
        assert_eq!(all.len(), TASKS * PER_TASK);
        assert!(*all.first().unwrap() > start);
        assert_eq!(s.current_revision(), *all.last().unwrap());
        assert_eq!(s.count("/cc/").await.unwrap(), TASKS * PER_TASK);
    }

    pub async fn concurrent_compare_and_swap_loses_no_increment<H: Harness>() {
        const TASKS: usize = 16;
        const PER_TASK: usize = 20;
        let h = H::fresh();
        let s = h.open();
        s.create("/counter", b("0")).await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let s = Arc::clone(&s);
            tasks.push(tokio::spawn(async move {
                let mut conflicts = 0usize;
                for _ in 0..PER_TASK {
                    loop {
                        assert!(conflicts < 100_000, "compare-and-swap never succeeds");
                        let kv = s.get("/counter").await.unwrap().unwrap();
                        let n: usize = std::str::from_utf8(&kv.value).unwrap().parse().unwrap();
                        match s
                            .update("/counter", b(&(n + 1).to_string()), Some(kv.mod_revision))
                            .await
                        {
                            Ok(_) => break,
                            Err(StoreError::Conflict { .. }) => conflicts += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let kv = s.get("/counter").await.unwrap().unwrap();
        assert_eq!(kv.value, b(&(TASKS * PER_TASK).to_string()));
    }

    pub async fn reopen_resumes_revisions<H: Harness>() {
        let h = H::fresh();
        let (before, last) = {
            let s = h.open();
            s.create("/r/a", b("1")).await.unwrap();
            s.create("/r/b", b("2")).await.unwrap();
            let last = s.update("/r/a", b("3"), None).await.unwrap();
            (s.list("/r/", None, None, None).await.unwrap(), last)
        };
        let s = h.open();
        assert_eq!(s.current_revision(), last.mod_revision);
        assert_eq!(s.list("/r/", None, None, None).await.unwrap(), before);
        let next = s.create("/r/c", b("4")).await.unwrap();
        assert_eq!(next.mod_revision, last.mod_revision + 1);
        let err = s.create("/r/a", b("dup")).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists(_)), "{err:?}");
    }

    pub async fn reopen_remembers_compacted_revision<H: Harness>() {
        let h = H::fresh();
        let current = {
            let s = h.open();
            s.create("/rc/a", b("1")).await.unwrap();
            s.update("/rc/a", b("2"), None).await.unwrap();
            s.create("/rc/b", b("3")).await.unwrap();
            // The newest write is a deletion: compacting it away must not rewind revisions.
            s.delete("/rc/b", None).await.unwrap();
            let current = s.current_revision();
            s.compact(current).await.unwrap();
            current
        };
        let s = h.open();
        assert_eq!(s.compacted_revision(), current);
        assert_eq!(s.current_revision(), current);
        assert!(matches!(
            s.watch("/rc/", current - 1),
            Err(StoreError::Compacted { .. })
        ));
        let list = s.list("/rc/", None, None, None).await.unwrap();
        assert_eq!(keys(&list.items), ["/rc/a"]);
        assert_eq!(
            s.create("/rc/b", b("4")).await.unwrap().mod_revision,
            current + 1
        );
    }

    /// Parent side: runs a child process writing keys, kills it with SIGKILL mid-stream, and checks
    /// that every write the child saw acknowledged is in the reopened store.
    pub async fn acknowledged_writes_survive_kill_9<H: Harness>(child_test: &str) {
        const WANTED_ACKS: usize = 1_000;
        let h = H::fresh();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
            .envs(h.child_env())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut acked = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.len() < WANTED_ACKS {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => acked.extend(line.strip_prefix("ACK ").map(str::to_owned)),
                Err(_) => break,
            }
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        // Acks printed before the kill but not yet read count too.
        reader.join().unwrap();
        acked.extend(
            lines
                .try_iter()
                .filter_map(|line| line.strip_prefix("ACK ").map(str::to_owned)),
        );
        if acked.len() < WANTED_ACKS {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
            }
            panic!(
                "child stopped after {} acks ({status}): {stderr}",
                acked.len()
            );
        }

        let s = h.open();
        for key in &acked {
            let kv = s.get(key).await.unwrap();
            assert_eq!(
                kv.map(|kv| kv.value),
                Some(b(key)),
                "acknowledged write of {key} was lost"
            );
        }
    }

    /// Child side: writes from several tasks until killed (bounded in count and time), printing
    /// `ACK <key>` for every write whose future resolved `Ok`.
    pub async fn write_and_ack_until_killed<H: Harness>(h: H) {
        let s = h.open();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut tasks = Vec::new();
        for t in 0..8 {
            let s = Arc::clone(&s);
            tasks.push(tokio::spawn(async move {
                for i in 0..20_000 {
                    if Instant::now() > deadline {
                        break;
                    }
                    let key = format!("/kill9/{t}/{i:05}");
                    s.create(&key, b(&key)).await.unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {key}").unwrap();
                    out.flush().unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
}

/// Generates one `#[tokio::test]` per contract check for a harness.
macro_rules! contract_tests {
    ($harness:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                if let Some(reason) = <$harness as Harness>::unavailable() {
                    eprintln!("skipped: {reason}");
                    return;
                }
                suite::$name::<$harness>().await;
            }
        )*
    };
}

mod sqlite {
    use super::*;

    contract_tests!(SqliteHarness;
        create_then_get_returns_value_and_revisions,
        get_of_missing_key_returns_none,
        create_of_existing_key_fails_with_already_exists,
        update_with_matching_revision_replaces_value_and_keeps_create_revision,
        update_with_stale_revision_conflicts_and_keeps_value,
        update_of_missing_or_deleted_key_fails_with_not_found,
        unconditional_update_and_delete_ignore_the_revision,
        delete_returns_deleted_value_and_key_disappears,
        delete_with_stale_revision_conflicts_and_keeps_key,
        delete_of_missing_key_fails_with_not_found,
        recreate_after_delete_starts_a_new_create_revision,
        failed_writes_do_not_consume_revisions,
        list_returns_only_keys_under_prefix_in_byte_order,
        list_with_empty_prefix_returns_every_key,
        list_pagination_with_start_after_and_limit_is_complete,
        list_at_old_revision_sees_old_values,
        list_at_future_revision_fails_with_future_revision,
        list_below_compacted_revision_fails_with_compacted,
        count_counts_live_keys_under_prefix,
        watch_from_revision_replays_history_then_live_without_gaps,
        watch_filters_by_prefix,
        watch_reports_previous_values_of_updates_and_deletes,
        watch_sees_concurrent_writes_in_revision_order,
        watch_after_compaction_fails_with_compacted,
        compaction_keeps_the_latest_value_of_every_live_key,
        concurrent_creates_all_get_distinct_revisions,
        concurrent_compare_and_swap_loses_no_increment,
        reopen_resumes_revisions,
        reopen_remembers_compacted_revision,
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acknowledged_writes_survive_kill_9() {
        suite::acknowledged_writes_survive_kill_9::<SqliteHarness>("sqlite::kill_9_child_writer")
            .await;
    }

    /// The child process of `acknowledged_writes_survive_kill_9`; does nothing when run normally.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_9_child_writer() {
        if let Some(h) = SqliteHarness::from_env() {
            suite::write_and_ack_until_killed(h).await;
        }
    }
}

mod etcd {
    use super::*;

    contract_tests!(EtcdHarness;
        create_then_get_returns_value_and_revisions,
        get_of_missing_key_returns_none,
        create_of_existing_key_fails_with_already_exists,
        update_with_matching_revision_replaces_value_and_keeps_create_revision,
        update_with_stale_revision_conflicts_and_keeps_value,
        update_of_missing_or_deleted_key_fails_with_not_found,
        unconditional_update_and_delete_ignore_the_revision,
        delete_returns_deleted_value_and_key_disappears,
        delete_with_stale_revision_conflicts_and_keeps_key,
        delete_of_missing_key_fails_with_not_found,
        recreate_after_delete_starts_a_new_create_revision,
        failed_writes_do_not_consume_revisions,
        list_returns_only_keys_under_prefix_in_byte_order,
        list_with_empty_prefix_returns_every_key,
        list_pagination_with_start_after_and_limit_is_complete,
        list_at_old_revision_sees_old_values,
        list_at_future_revision_fails_with_future_revision,
        list_below_compacted_revision_fails_with_compacted,
        count_counts_live_keys_under_prefix,
        watch_from_revision_replays_history_then_live_without_gaps,
        watch_filters_by_prefix,
        watch_reports_previous_values_of_updates_and_deletes,
        watch_sees_concurrent_writes_in_revision_order,
        watch_after_compaction_fails_with_compacted,
        compaction_keeps_the_latest_value_of_every_live_key,
        concurrent_creates_all_get_distinct_revisions,
        concurrent_compare_and_swap_loses_no_increment,
        reopen_resumes_revisions,
        reopen_remembers_compacted_revision,
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn acknowledged_writes_survive_kill_9() {
        if EtcdHarness::unavailable().is_some() {
            return;
        }
        suite::acknowledged_writes_survive_kill_9::<EtcdHarness>("etcd::kill_9_child_writer").await;
    }

    /// The child process of `acknowledged_writes_survive_kill_9`; does nothing when run normally.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_9_child_writer() {
        if let Some(h) = EtcdHarness::from_env() {
            suite::write_and_ack_until_killed(h).await;
        }
    }
}
