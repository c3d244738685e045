//! Making committed batches durable before anyone learns of them.
//!
//! The writer commits with `synchronous=NORMAL`, which in WAL mode writes a transaction's frames
//! to the `-wal` file without waiting for the disk. A second thread, the syncer, then calls
//! `fdatasync` on that file and only afterwards publishes the batch's revision, broadcasts its
//! events and answers its callers, in commit order. So a write is still acknowledged only once it
//! is on disk (it survives `kill -9` and power loss as with `synchronous=FULL`), but the writer no
//! longer waits for the disk: while one flush is in flight it applies the next requests, and one
//! flush covers every batch committed before it started. Under load most of the writer's time was
//! spent waiting in `fsync` (`perf sched` on `tandem bench scheduler`).
//!
//! Rows that are committed but not yet durable are invisible to readers, which never look past
//! the published revision. If a flush fails, nothing after it is ever acknowledged: the batches
//! waiting for it and every later write fail, as the kernel may have dropped the pages it could
//! not write (retrying `fsync` would report success for data that is gone).

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{broadcast, oneshot};

use super::Revisions;
use super::error::SqliteError;
use super::writer::EventBatch;
use crate::{Event, KeyValue, Result, Revision};

/// One committed transaction waiting to become durable.
pub(super) struct Committed {
    /// Its last revision.
    pub(super) last: Revision,
    /// The events of its successful writes, in revision order.
    pub(super) events: Vec<Event>,
    /// Each caller with its result (a failed precondition is answered at the same time).
    pub(super) replies: Vec<(oneshot::Sender<Result<KeyValue>>, Result<KeyValue>)>,
}

/// How many handed-over batches are not yet durable; the writer waits on it.
#[derive(Default)]
struct InFlight {
    batches: Mutex<usize>,
    changed: Condvar,
}

/// The writer's side of the syncer thread.
pub(super) struct Durability {
    batches: Option<mpsc::Sender<Committed>>,
    in_flight: Arc<InFlight>,
    failure: Arc<OnceLock<Arc<std::io::Error>>>,
    thread: Option<JoinHandle<()>>,
}

impl Durability {
    /// Starts the syncer for the WAL file `wal`.
    pub(super) fn start(
        wal: File,
        revisions: Arc<Revisions>,
        events: broadcast::Sender<EventBatch>,
    ) -> std::result::Result<Durability, SqliteError> {
        let (tx, rx) = mpsc::channel();
        let in_flight = Arc::new(InFlight::default());
        let failure = Arc::new(OnceLock::new());
        let syncer = Syncer {
            wal,
            revisions,
            events,
            batches: rx,
            in_flight: Arc::clone(&in_flight),
            failure: Arc::clone(&failure),
        };
        let thread = std::thread::Builder::new()
            .name("store-syncer".into())
            .spawn(move || syncer.run())
            .map_err(|e| SqliteError::Spawn("store syncer", e))?;
        Ok(Durability {
            batches: Some(tx),
            in_flight,
            failure,
            thread: Some(thread),
        })
    }

    /// Whether an earlier batch is still being made durable.
    pub(super) fn busy(&self) -> bool {
        *self.lock() > 0
    }

    /// Waits until no batch is being made durable, or `at_most` has passed.
    pub(super) fn wait_idle(&self, at_most: Duration) {
        let guard = self.lock();
        if *guard > 0 {
            let _ = self.in_flight.changed.wait_timeout(guard, at_most);
        }
    }

    /// The flush failure, if one happened; no write can be acknowledged after it.
    pub(super) fn failure(&self) -> Option<Arc<std::io::Error>> {
        self.failure.get().cloned()
    }

    /// Hands a committed batch over to be made durable and acknowledged.
    pub(super) fn hand_over(&self, batch: Committed) {
        *self.lock() += 1;
        let sent = match &self.batches {
            Some(batches) => batches.send(batch).map_err(|mpsc::SendError(b)| b),
            None => Err(batch),
        };
        if let Err(batch) = sent {
            // The syncer is gone (it only stops when this side is dropped): nothing can be made
            // durable any more.
            *self.lock() -= 1;
            for (reply, _) in batch.replies {
                let _ = reply.send(Err(crate::StoreError::Closed));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.in_flight
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Durability {
    /// Lets the syncer finish what was handed over, then stops it.
    fn drop(&mut self) {
        drop(self.batches.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Syncer {
    wal: File,
    revisions: Arc<Revisions>,
    events: broadcast::Sender<EventBatch>,
    batches: mpsc::Receiver<Committed>,
    in_flight: Arc<InFlight>,
    failure: Arc<OnceLock<Arc<std::io::Error>>>,
}

impl Syncer {
    fn run(self) {
        while let Ok(first) = self.batches.recv() {
            // Everything queued was committed before this flush starts, so it covers them all.
            let group: Vec<Committed> = std::iter::once(first)
                .chain(self.batches.try_iter())
                .collect();
            let count = group.len();
            let synced = match self.failure.get() {
                Some(e) => Err(Arc::clone(e)),
                None => self.wal.sync_data().map_err(Arc::new),
            };
            match synced {
                Ok(()) => {
                    for batch in group {
                        self.acknowledge(batch);
                    }
                }
                Err(e) => {
                    if self.failure.set(Arc::clone(&e)).is_ok() {
                        tracing::error!(error = %e, "store could not flush its write-ahead log; refusing further writes");
                    }
                    for batch in group {
                        for (reply, _) in batch.replies {
                            let _ = reply.send(Err(SqliteError::Sync(Arc::clone(&e)).into()));
                        }
                    }
                }
            }
            let mut in_flight = self
                .in_flight
                .batches
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            *in_flight = in_flight.saturating_sub(count);
            drop(in_flight);
            self.in_flight.changed.notify_all();
        }
    }

    /// Publishes a durable batch: the revision first, then the events, then the answers, so a
    /// caller that sees its write acknowledged also sees it in reads and watches.
    fn acknowledge(&self, batch: Committed) {
        self.revisions.current.store(batch.last, Ordering::SeqCst);
        if !batch.events.is_empty() {
            // No receivers is not an error: nobody is watching.
            let _ = self.events.send(batch.events.into());
        }
        for (reply, result) in batch.replies {
            // The caller may have given up waiting; the write stands regardless.
            let _ = reply.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicI64;

    use bytes::Bytes;

    use super::*;
    use crate::StoreError;

    fn revisions() -> Arc<Revisions> {
        Arc::new(Revisions {
            current: AtomicI64::new(0),
            compacted: AtomicI64::new(0),
        })
    }

    fn batch(last: Revision) -> (Committed, oneshot::Receiver<Result<KeyValue>>) {
        let kv = KeyValue {
            key: format!("/k/{last}"),
            value: Bytes::from_static(b"{}"),
            create_revision: last,
            mod_revision: last,
        };
        let (reply, answer) = oneshot::channel();
        let batch = Committed {
            last,
            events: vec![Event::Put {
                kv: kv.clone(),
                prev: None,
            }],
            replies: vec![(reply, Ok(kv))],
        };
        (batch, answer)
    }

    #[tokio::test]
    async fn batches_are_published_and_answered_in_commit_order_after_the_flush() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wal = File::create(dir.path().join("db-wal")).expect("wal");
        let revs = revisions();
        let (events, mut watch) = broadcast::channel(16);
        let durable = Durability::start(wal, Arc::clone(&revs), events).expect("start");
        let (first, first_answer) = batch(1);
        let (second, second_answer) = batch(2);
        durable.hand_over(first);
        durable.hand_over(second);
        assert_eq!(
            first_answer
                .await
                .expect("answered")
                .expect("ok")
                .mod_revision,
            1
        );
        assert_eq!(
            second_answer
                .await
                .expect("answered")
                .expect("ok")
                .mod_revision,
            2
        );
        assert_eq!(revs.current.load(Ordering::SeqCst), 2);
        for expected in [1, 2] {
            let published = watch.recv().await.expect("events");
            assert_eq!(published[0].revision(), expected);
        }
        durable.wait_idle(Duration::from_secs(5));
        assert!(!durable.busy());
    }

    /// `fsync` of a character device fails (EINVAL), standing in for a disk that cannot write.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_failed_flush_acknowledges_nothing_then_or_later() {
        let wal = File::open("/dev/null").expect("/dev/null");
        let revs = revisions();
        let (events, _) = broadcast::channel(16);
        let durable = Durability::start(wal, Arc::clone(&revs), events).expect("start");
        let (first, answer) = batch(1);
        durable.hand_over(first);
        let refused = answer.await.expect("answered");
        assert!(
            matches!(&refused, Err(StoreError::Backend(_))),
            "{refused:?}"
        );
        assert!(durable.failure().is_some());
        let (second, answer) = batch(2);
        durable.hand_over(second);
        assert!(answer.await.expect("answered").is_err());
        assert_eq!(revs.current.load(Ordering::SeqCst), 0, "nothing published");
    }
}
