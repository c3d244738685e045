//! The SQLite backend: an MVCC log in one file, written by one group-committing writer thread.
//!
//! The on-disk layout and its invariants are in the `schema` module (kine-style, one row per
//! revision); group commit and compaction in `writer`; snapshot reads in `read`; the
//! history-then-live hand-over of watches in `watch`.
//!
//! Durability: the file is in WAL mode, and a write's future resolves `Ok` only after the
//! transaction holding it has committed and the write-ahead log has been flushed to disk
//! (`fdatasync`, by the syncer thread of `durable`), so acknowledged writes survive `kill -9` and
//! power loss (as far as the disk honours fsync).
//!
//! Disk faults: a batch whose pages cannot be written (the file system is full or has turned
//! read-only) is rolled back and each of its writes fails with [`SqliteError::DiskFull`] or
//! [`SqliteError::ReadOnly`]; nothing acknowledged is touched, reads go on, and the next batch
//! tries again, so writes resume once space returns. A failed flush of the log is different:
//! what the kernel could not write may be gone, so the store refuses every write until it is
//! opened again ([`SqliteError::Sync`]); opening recovers the log from what reached the disk.

mod durable;
mod error;
mod read;
mod schema;
mod watch;
mod writer;

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{broadcast, mpsc, oneshot};

use self::durable::Durability;
pub use self::error::SqliteError;
use self::read::ReadPool;
use self::writer::{EventBatch, Request, WriteOp, Writer};
use crate::{KeyValue, ListResult, Result, Revision, Store, StoreError, WatchStream};

/// Tuning of a [`SqliteStore`]. `Default` suits the API server.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// How many revisions of history the background compactor keeps behind the current one. A
    /// watch or list can resume from any revision in that window; older ones get `Compacted`
    /// (HTTP 410 at the API). Default 10,000.
    pub history_revisions: i64,
    /// How often the background compactor runs; `None` disables it (then only explicit
    /// [`Store::compact`] calls remove history, and the file grows with every write). Default 5 s.
    pub compaction_interval: Option<Duration>,
    /// Most writes committed in one transaction (one fsync). Default 256.
    pub max_batch: usize,
    /// Writes that may wait for the writer before callers are slowed down. Default 4,096.
    pub queue_depth: usize,
    /// Read connections kept open for reuse. Reads beyond this many at once open extra connections
    /// that are closed afterwards. Default 4.
    pub read_connections: usize,
    /// Committed batches a watcher may fall behind before its stream ends with `WatchLagged`
    /// (it then resumes from the database). The channel keeps the last this many batches alive
    /// even after every watcher has read them, so this bounds memory too: under load a batch
    /// holds hundreds of writes with their previous values. Default 128.
    pub watch_buffer: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            history_revisions: 10_000,
            compaction_interval: Some(Duration::from_secs(5)),
            max_batch: 256,
            queue_depth: 4_096,
            read_connections: 4,
            watch_buffer: 128,
        }
    }
}

/// The revisions every part of the store agrees on; reading them is one atomic load.
pub(crate) struct Revisions {
    /// The newest committed revision; published by the writer after each commit.
    current: AtomicI64,
    /// The newest compacted revision; published by the writer after each compaction chunk.
    compacted: AtomicI64,
}

/// The embedded [`Store`] backend: one SQLite file (plus its `-wal` and `-shm` companions and a
/// `.lock` file beside it).
///
/// Cheap to clone: clones share one writer thread, one read pool and one watch broadcast. The
/// store shuts down when the last clone is dropped; that drop waits for queued writes to commit.
/// Watch streams outlive the store only to report `Closed`.
///
/// Only one `SqliteStore` may have a file open at a time, across processes: [`SqliteStore::open`]
/// takes an exclusive lock on `<path>.lock` and fails with [`SqliteError::Locked`] otherwise.
/// Two writers assigning revisions independently would corrupt the history.
///
/// Pitfall: a write whose future is dropped before it resolves may still commit (it is already
/// queued); only an `Ok` result promises that it did.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    revisions: Arc<Revisions>,
    reads: Arc<ReadPool>,
    events: broadcast::Sender<EventBatch>,
    /// `None` only while dropping.
    writes: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    /// Dropping this sender wakes and stops the compactor.
    stop_compactor: Option<std::sync::mpsc::Sender<()>>,
    compactor: Option<JoinHandle<()>>,
    /// Held (and locked) for the store's lifetime; released by the OS if the process dies.
    _lock: File,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, resuming from its last revision and
    /// compacted revision. The parent directory must exist.
    ///
    /// Starts the writer thread and, when `options.compaction_interval` is set, the compactor
    /// thread. Blocking (file I/O); call it before serving, or from `spawn_blocking`.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore> {
        let lock = lock_file(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags)?;
        schema::configure_writer(&conn)?;
        let (current, compacted) = schema::init(&mut conn)?;
        tracing::info!(path = %path.display(), current, compacted, "store opened");

        let revisions = Arc::new(Revisions {
            current: AtomicI64::new(current),
            compacted: AtomicI64::new(compacted),
        });
        let (events, _) = broadcast::channel(options.watch_buffer.max(1));
        let (writes, requests) = mpsc::channel(options.queue_depth.max(1));
        let durable = Durability::start(
            schema::open_wal(path)?,
            Arc::clone(&revisions),
            events.clone(),
        )?;
        let writer = Writer::new(
            conn,
            path.to_owned(),
            requests,
            Arc::clone(&revisions),
            durable,
            options.max_batch,
        );
        let writer = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| SqliteError::Spawn("store writer", e))?;

        let mut inner = Inner {
            path: path.to_owned(),
            reads: Arc::new(ReadPool::new(
                path.to_owned(),
                options.read_connections,
                Arc::clone(&revisions),
            )),
            revisions,
            events,
            writes: Some(writes),
            writer: Some(writer),
            stop_compactor: None,
            compactor: None,
            _lock: lock,
        };
        if let Some(interval) = options.compaction_interval {
            // On failure `inner` drops here, which stops the writer cleanly.
            let (stop, stopped) = std::sync::mpsc::channel();
            let compactor = Compactor {
                interval,
                keep: options.history_revisions.max(0),
                revisions: Arc::clone(&inner.revisions),
                writes: inner.writes.clone().ok_or(StoreError::Closed)?,
                stopped,
            };
            inner.compactor = Some(
                std::thread::Builder::new()
                    .name("store-compactor".into())
                    .spawn(move || compactor.run())
                    .map_err(|e| SqliteError::Spawn("store compactor", e))?,
            );
            inner.stop_compactor = Some(stop);
        }
        Ok(SqliteStore {
            inner: Arc::new(inner),
        })
    }

    /// The database file this store was opened on.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    async fn write(&self, op: WriteOp) -> Result<KeyValue> {
        let (reply, result) = oneshot::channel();
        let writes = self.inner.writes.as_ref().ok_or(StoreError::Closed)?;
        writes
            .send(Request::Write { op, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        result.await.map_err(|_| StoreError::Closed)?
    }
}

/// Takes the exclusive lock on `<path>.lock`, creating the file if needed.
fn lock_file(path: &Path) -> Result<File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|source| SqliteError::LockFile {
            path: lock_path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(SqliteError::Locked(path.to_owned()).into()),
        Err(TryLockError::Error(source)) => Err(SqliteError::LockFile {
            path: lock_path,
            source,
        }
        .into()),
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The compactor holds a request sender: stop it first, or the writer would never see its
        // channel close.
        drop(self.stop_compactor.take());
        if let Some(compactor) = self.compactor.take() {
            let _ = compactor.join();
        }
        drop(self.writes.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The background compactor: every `interval`, asks the writer to compact everything older than
/// the newest `keep` revisions.
struct Compactor {
    interval: Duration,
    keep: Revision,
    revisions: Arc<Revisions>,
    writes: mpsc::Sender<Request>,
    stopped: std::sync::mpsc::Receiver<()>,
}

impl Compactor {
    fn run(self) {
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            self.stopped.recv_timeout(self.interval)
        {
            let target = self.revisions.current.load(Ordering::SeqCst) - self.keep;
            if target <= self.revisions.compacted.load(Ordering::SeqCst) {
                continue;
            }
            if self
                .writes
                .blocking_send(Request::Compact {
                    revision: target,
                    reply: None,
                })
                .is_err()
            {
                break;
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn current_revision(&self) -> Revision {
        self.inner.revisions.current.load(Ordering::SeqCst)
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.revisions.compacted.load(Ordering::SeqCst)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_owned();
        self.inner
            .reads
            .run(move |conn, revisions| read::get(conn, revisions, &key))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
        revision: Option<Revision>,
    ) -> Result<ListResult> {
        let prefix = prefix.to_owned();
        let start_after = start_after.map(str::to_owned);
        self.inner
            .reads
            .run(move |conn, revisions| {
                read::list(
                    conn,
                    revisions,
                    &prefix,
                    start_after.as_deref(),
                    limit,
                    revision,
                )
            })
            .await
    }

    async fn count(&self, prefix: &str) -> Result<usize> {
        let prefix = prefix.to_owned();
        self.inner
            .reads
            .run(move |conn, revisions| read::count(conn, revisions, &prefix))
            .await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write(WriteOp::Create {
            key: key.to_owned(),
            value,
        })
        .await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<KeyValue> {
        self.write(WriteOp::Update {
            key: key.to_owned(),
            value,
            expected,
        })
        .await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        self.write(WriteOp::Delete {
            key: key.to_owned(),
            expected,
        })
        .await
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        watch::start(
            Arc::clone(&self.inner.reads),
            &self.inner.events,
            prefix,
            after,
        )
    }

    /// Compacts history at or below `revision`, in chunks between write batches; resolves once
    /// done. A revision at or below the compacted one is a no-op; one above the current revision
    /// fails with `FutureRevision`.
    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.current_revision();
        if revision > current {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current,
            });
        }
        if revision <= self.compacted_revision() {
            return Ok(());
        }
        let (reply, result) = oneshot::channel();
        let writes = self.inner.writes.as_ref().ok_or(StoreError::Closed)?;
        writes
            .send(Request::Compact {
                revision,
                reply: Some(reply),
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        result.await.map_err(|_| StoreError::Closed)?
    }
}
