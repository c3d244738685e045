//! Behaviour specific to the SQLite backend: locking, watch buffer overflow, bounded file size
//! under churn, the background compactor. The `Store` contract itself is in `contract.rs`.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use tandem_store::sqlite::{SqliteError, SqliteOptions, SqliteStore};
use tandem_store::{Store, StoreError};

fn manual_compaction() -> SqliteOptions {
    SqliteOptions {
        compaction_interval: None,
        ..SqliteOptions::default()
    }
}

/// Size of the database file plus its WAL.
fn disk_size(db: &Path) -> u64 {
    let wal = db.with_file_name(format!("{}-wal", db.file_name().unwrap().to_string_lossy()));
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    size(db) + size(&wal)
}

#[tokio::test]
async fn second_open_of_the_same_file_fails_with_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let first = SqliteStore::open(&path, manual_compaction()).unwrap();
    let err = SqliteStore::open(&path, manual_compaction())
        .err()
        .expect("second open must fail");
    let StoreError::Backend(source) = err else {
        panic!("expected Backend, got {err:?}")
    };
    assert!(
        matches!(
            source.downcast_ref::<SqliteError>(),
            Some(SqliteError::Locked(_))
        ),
        "{source:?}"
    );
    // Dropping the store releases the lock.
    drop(first);
    SqliteStore::open(&path, manual_compaction()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_that_falls_behind_the_buffer_ends_with_watch_lagged() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        watch_buffer: 4,
        ..manual_compaction()
    };
    let store = SqliteStore::open(&dir.path().join("store.db"), options).unwrap();
    let mut stream = store.watch("/", store.current_revision()).unwrap();
    // Each awaited write is its own batch: 20 batches overflow a buffer of 4.
    for i in 0..20 {
        store
            .create(&format!("/k{i}"), Bytes::from_static(b"v"))
            .await
            .unwrap();
    }
    let item = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap();
    assert!(
        matches!(item, Some(Err(StoreError::WatchLagged))),
        "{item:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap();
    assert!(end.is_none(), "stream must end after WatchLagged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_ends_with_closed_when_the_store_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.db"), manual_compaction()).unwrap();
    let mut stream = store.watch("/", 0).unwrap();
    drop(store);
    let item = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap();
    assert!(matches!(item, Some(Err(StoreError::Closed))), "{item:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_file_stays_bounded_under_update_churn_of_a_fixed_key_set() {
    const KEYS: usize = 20;
    const UPDATES_PER_ROUND: usize = 2_000;
    const KEEP: i64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let store = Arc::new(SqliteStore::open(&path, manual_compaction()).unwrap());
    let value = Bytes::from(vec![b'x'; 1024]);
    for k in 0..KEYS {
        store
            .create(&format!("/lease/{k}"), value.clone())
            .await
            .unwrap();
    }
    let mut sizes = Vec::new();
    for _round in 0..8 {
        let mut tasks = Vec::new();
        for k in 0..KEYS {
            let (store, value) = (Arc::clone(&store), value.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..UPDATES_PER_ROUND / KEYS {
                    store
                        .update(&format!("/lease/{k}"), value.clone(), None)
                        .await
                        .unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        store
            .compact(store.current_revision() - KEEP)
            .await
            .unwrap();
        sizes.push((std::fs::metadata(&path).unwrap().len(), disk_size(&path)));
    }
    // 8 rounds wrote ~16 MiB of values; without compaction the file would hold all of it. With
    // it, freed pages are reused, so later rounds must not need more room than the early ones.
    // (The WAL's size depends on checkpoint timing, hence the looser bound on the total.)
    let max = |rounds: &[(u64, u64)], pick: fn(&(u64, u64)) -> u64| {
        rounds.iter().map(pick).max().unwrap()
    };
    let (early, late) = (&sizes[..3], &sizes[5..]);
    assert!(
        max(late, |s| s.0) <= max(early, |s| s.0) * 3 / 2,
        "database file keeps growing: {sizes:?}"
    );
    assert!(
        max(late, |s| s.1) <= max(early, |s| s.1) * 2,
        "database and WAL keep growing: {sizes:?}"
    );
    assert_eq!(store.count("/lease/").await.unwrap(), KEYS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_compactor_keeps_only_the_configured_history() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions {
        history_revisions: 50,
        compaction_interval: Some(Duration::from_millis(20)),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open(&dir.path().join("store.db"), options).unwrap();
    store
        .create("/event", Bytes::from_static(b"0"))
        .await
        .unwrap();
    for i in 1..300 {
        store
            .update("/event", Bytes::from(i.to_string()), None)
            .await
            .unwrap();
    }
    let target = store.current_revision() - 50;
    // Poll (bounded) until the compactor has caught up; no assertion on how long it took.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.compacted_revision() < target && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.compacted_revision(), target);
    assert!(matches!(
        store.watch("/", target - 1),
        Err(StoreError::Compacted { .. })
    ));
    let mut stream = store.watch("/", target).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.revision(), target + 1);
    assert_eq!(
        store.get("/event").await.unwrap().unwrap().value,
        Bytes::from("299")
    );
}

/// Throughput figures, not a test: `cargo test --release -p tandem-store --test sqlite -- --ignored
/// --nocapture measure`. Uses a durable file in the system temp dir (override with
/// `TANDEM_STORE_BENCH_DIR`).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "measurement, prints figures"]
async fn measure_create_throughput_and_list_latency() {
    const CLIENTS: usize = 32;
    const PER_CLIENT: usize = 1_000;
    let base = std::env::var_os("TANDEM_STORE_BENCH_DIR").map(std::path::PathBuf::from);
    let dir = match &base {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("store.db"), SqliteOptions::default()).unwrap(),
    );
    let value = Bytes::from(vec![b'v'; 256]);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (store, value) = (Arc::clone(&store), value.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_CLIENT {
                store
                    .create(&format!("/bench/{c:02}/{i:05}"), value.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let creates = CLIENTS * PER_CLIENT;
    println!(
        "creates: {creates} by {CLIENTS} clients in {elapsed:.2?} = {:.0}/s",
        creates as f64 / elapsed.as_secs_f64()
    );

    let small = Bytes::from(vec![b's'; 100]);
    for i in 0..10_000 {
        store
            .create(&format!("/list/{i:05}"), small.clone())
            .await
            .ok();
    }
    for _ in 0..3 {
        let started = Instant::now();
        let list = store.list("/list/", None, None, None).await.unwrap();
        println!(
            "list of {} values of 100 B: {:.2?}",
            list.items.len(),
            started.elapsed()
        );
    }
    let started = Instant::now();
    let page = store
        .list("/list/", Some("/list/05000"), Some(500), None)
        .await
        .unwrap();
    println!(
        "list page of {}: {:.2?}",
        page.items.len(),
        started.elapsed()
    );
    let started = Instant::now();
    for i in 0..1_000 {
        store.get(&format!("/list/{i:05}")).await.unwrap();
    }
    println!("get: {:.1?} each (sequential)", started.elapsed() / 1_000);
}
