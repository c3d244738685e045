//! The single writer: group commit and compaction.
//!
//! One std thread owns the write connection. It blocks for the first queued request, drains up to
//! `max_batch` more that are already waiting, and applies them in ONE transaction, so concurrent
//! writers share one flush to disk. While the previous batch is still being flushed (see
//! [`super::durable`]), requests that arrive join the open transaction, up to `max_batch`, so the
//! batch grows with the disk's latency instead of the writer waiting for it. Each request's
//! precondition (exists / missing / expected revision) is checked inside that transaction, against
//! the state left by the requests before it in the batch, and each request gets its own result: a
//! failed precondition fails only that request and consumes no revision. After the commit the
//! batch goes to the syncer, which flushes the write-ahead log and only then publishes the new
//! current revision, broadcasts the batch's events to watchers, and answers the callers — in that
//! order, so a caller that sees its write acknowledged also sees it in reads and watches.
//!
//! Compaction runs on the same thread in chunks of [`COMPACT_CHUNK`] revisions, one transaction
//! each, with write batches served between chunks, so a large compaction never stalls writers for
//! long. It never goes past the published revision: readers may still need anything above it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use super::Revisions;
use super::durable::{Committed, Durability};
use super::error::{BatchFailure, SqliteError};
use crate::{Event, KeyValue, Result, Revision, StoreError};

/// Revisions compacted per transaction.
const COMPACT_CHUNK: Revision = 1_000;

/// How long the writer sleeps between looks for more requests while it holds a batch open for
/// the flush in flight to finish (the syncer wakes it earlier when the flush completes).
const JOIN_POLL: Duration = Duration::from_micros(200);

/// A batch of events committed together, in revision order.
pub(super) type EventBatch = Arc<[Event]>;

/// One write, as submitted by a caller.
pub(super) enum WriteOp {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Option<Revision>,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
}

/// What the writer thread is asked to do.
pub(super) enum Request {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<KeyValue>>,
    },
    /// Compact up to `revision`; `reply` (if any) is answered once the whole range is done.
    Compact {
        revision: Revision,
        reply: Option<oneshot::Sender<Result<()>>>,
    },
}

struct PendingCompaction {
    target: Revision,
    replies: Vec<oneshot::Sender<Result<()>>>,
}

/// A write waiting for its result.
type Pending = (WriteOp, oneshot::Sender<Result<KeyValue>>);

pub(super) struct Writer {
    conn: Connection,
    /// The database file, named in errors.
    path: PathBuf,
    requests: mpsc::Receiver<Request>,
    revisions: Arc<Revisions>,
    durable: Durability,
    /// The last revision committed to the database; ahead of the published one while the syncer
    /// flushes.
    committed: Revision,
    max_batch: usize,
    compaction: Option<PendingCompaction>,
}

/// The newest row of a key.
struct Latest {
    id: Revision,
    deleted: bool,
    create_revision: Revision,
    value: Vec<u8>,
}

impl Writer {
    pub(super) fn new(
        conn: Connection,
        path: PathBuf,
        requests: mpsc::Receiver<Request>,
        revisions: Arc<Revisions>,
        durable: Durability,
        max_batch: usize,
    ) -> Self {
        let committed = revisions.current.load(Ordering::SeqCst);
        Writer {
            conn,
            path,
            requests,
            revisions,
            durable,
            committed,
            max_batch: max_batch.max(1),
            compaction: None,
        }
    }

    /// Serves requests until every sender is gone and queued work is finished.
    pub(super) fn run(mut self) {
        loop {
            let mut batch = Vec::new();
            if self.compaction.is_none() {
                match self.requests.blocking_recv() {
                    Some(request) => batch.push(request),
                    None => break,
                }
            }
            while batch.len() < self.max_batch {
                match self.requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            let mut writes = Vec::with_capacity(batch.len());
            for request in batch {
                match request {
                    Request::Write { op, reply } => writes.push((op, reply)),
                    Request::Compact { revision, reply } => {
                        queue_compaction(&mut self.compaction, revision, reply)
                    }
                }
            }
            if !writes.is_empty() {
                self.commit_batch(writes);
            }
            if self.compaction.is_some() {
                self.compact_chunk();
            }
        }
        tracing::debug!("store writer stopped");
    }

    fn commit_batch(&mut self, mut writes: Vec<Pending>) {
        if let Some(e) = self.durable.failure() {
            for (_, reply) in writes {
                let _ = reply.send(Err(SqliteError::Sync(Arc::clone(&e)).into()));
            }
            return;
        }
        let base = self.committed;
        let applied = apply_batch(&mut self.conn, base, &mut writes, self.max_batch, || {
            // The previous batch is still being flushed: let requests that arrive meanwhile
            // share the next flush instead of waiting for a later one.
            while self.durable.busy() {
                match self.requests.try_recv() {
                    Ok(Request::Write { op, reply }) => return Some((op, reply)),
                    Ok(Request::Compact { revision, reply }) => {
                        queue_compaction(&mut self.compaction, revision, reply)
                    }
                    Err(TryRecvError::Empty) => self.durable.wait_idle(JOIN_POLL),
                    Err(TryRecvError::Disconnected) => return None,
                }
            }
            None
        });
        match applied {
            Ok((results, events, last)) => {
                self.committed = last;
                let replies = writes
                    .into_iter()
                    .map(|(_, reply)| reply)
                    .zip(results)
                    .collect();
                self.durable.hand_over(Committed {
                    last,
                    events,
                    replies,
                });
            }
            Err(e) => {
                // Nothing of the batch is stored (the transaction rolled back) and no revision
                // was used; the next batch starts afresh, so writes resume once the disk allows.
                let failure = BatchFailure::new(e, &self.path);
                let e = failure.error();
                tracing::error!(error = %e, source = %failure_source(&e), "store write batch failed");
                for (_, reply) in writes {
                    let _ = reply.send(Err(failure.error().into()));
                }
            }
        }
    }

    fn compact_chunk(&mut self) {
        let Some(pending) = &self.compaction else {
            return;
        };
        let from = self.revisions.compacted.load(Ordering::SeqCst);
        let target = pending
            .target
            .min(self.revisions.current.load(Ordering::SeqCst));
        if from < target {
            let to = target.min(from.saturating_add(COMPACT_CHUNK));
            match compact_range(&mut self.conn, from, to) {
                Ok(removed) => {
                    self.revisions.compacted.store(to, Ordering::SeqCst);
                    tracing::trace!(from, to, removed, "store compacted");
                    if to < target {
                        return;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "store compaction failed");
                    let e = Arc::new(e);
                    if let Some(pending) = self.compaction.take() {
                        for reply in pending.replies {
                            let _ = reply.send(Err(SqliteError::Batch(Arc::clone(&e)).into()));
                        }
                    }
                    return;
                }
            }
            // Freed pages are reused by later writes; a passive checkpoint moves the WAL's content
            // into the main file without waiting for readers, so the WAL can restart from its start.
            if let Err(e) = self
                .conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            {
                tracing::warn!(error = %e, "store WAL checkpoint failed");
            }
        }
        if let Some(pending) = self.compaction.take() {
            for reply in pending.replies {
                let _ = reply.send(Ok(()));
            }
        }
    }
}

/// The cause under a store error, for logs.
fn failure_source(e: &SqliteError) -> String {
    std::error::Error::source(e).map_or_else(String::new, ToString::to_string)
}

/// Applies `writes` in one transaction starting after revision `base`, then those `more` hands
/// out (appended to `writes`) until it returns `None` or the batch holds `max_batch`. Returns each
/// write's result, the events of the successful ones, and the last revision used. An `Err` means
/// the whole transaction was rolled back.
#[allow(clippy::type_complexity)]
fn apply_batch(
    conn: &mut Connection,
    base: Revision,
    writes: &mut Vec<Pending>,
    max_batch: usize,
    mut more: impl FnMut() -> Option<Pending>,
) -> rusqlite::Result<(Vec<Result<KeyValue>>, Vec<Event>, Revision)> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut next = base;
    let mut results = Vec::with_capacity(writes.len());
    let mut events = Vec::with_capacity(writes.len());
    loop {
        for (op, _) in &writes[results.len()..] {
            match apply(&tx, op, next + 1)? {
                Ok((kv, event)) => {
                    next += 1;
                    results.push(Ok(kv));
                    events.push(event);
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if writes.len() >= max_batch {
            break;
        }
        match more() {
            Some(write) => writes.push(write),
            None => break,
        }
    }
    tx.commit()?;
    Ok((results, events, next))
}

/// Adds a compaction request to the pending one (the larger target wins; every caller is
/// answered when it is done).
fn queue_compaction(
    pending: &mut Option<PendingCompaction>,
    revision: Revision,
    reply: Option<oneshot::Sender<Result<()>>>,
) {
    let pending = pending.get_or_insert(PendingCompaction {
        target: revision,
        replies: Vec::new(),
    });
    pending.target = pending.target.max(revision);
    pending.replies.extend(reply);
}

/// Applies one write at revision `rev` if its precondition holds. The outer `Result` is a database
/// failure (abort the batch), the inner one the caller's precondition failure.
fn apply(
    tx: &Transaction<'_>,
    op: &WriteOp,
    rev: Revision,
) -> rusqlite::Result<Result<(KeyValue, Event)>> {
    let key = match op {
        WriteOp::Create { key, .. } | WriteOp::Update { key, .. } | WriteOp::Delete { key, .. } => {
            key
        }
    };
    let latest = latest(tx, key)?;
    let prev_row = latest.as_ref().map_or(0, |l| l.id);
    let live = latest.filter(|l| !l.deleted).map(|l| KeyValue {
        key: key.clone(),
        value: Bytes::from(l.value),
        create_revision: l.create_revision,
        mod_revision: l.id,
    });
    let check = |expected: Option<Revision>| -> Result<KeyValue> {
        let Some(live) = live.clone() else {
            return Err(StoreError::NotFound(key.clone()));
        };
        match expected {
            Some(expected) if expected != live.mod_revision => Err(StoreError::Conflict {
                key: key.clone(),
                expected,
                actual: live.mod_revision,
            }),
            _ => Ok(live),
        }
    };
    Ok(Ok(match op {
        WriteOp::Create { value, .. } => {
            if live.is_some() {
                return Ok(Err(StoreError::AlreadyExists(key.clone())));
            }
            insert(tx, rev, key, true, false, rev, prev_row, value)?;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: rev,
                mod_revision: rev,
            };
            (kv.clone(), Event::Put { kv, prev: None })
        }
        WriteOp::Update {
            value, expected, ..
        } => {
            let prev = match check(*expected) {
                Ok(prev) => prev,
                Err(e) => return Ok(Err(e)),
            };
            insert(
                tx,
                rev,
                key,
                false,
                false,
                prev.create_revision,
                prev.mod_revision,
                value,
            )?;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: prev.create_revision,
                mod_revision: rev,
            };
            (
                kv.clone(),
                Event::Put {
                    kv,
                    prev: Some(prev),
                },
            )
        }
        WriteOp::Delete { expected, .. } => {
            let prev = match check(*expected) {
                Ok(prev) => prev,
                Err(e) => return Ok(Err(e)),
            };
            insert(
                tx,
                rev,
                key,
                false,
                true,
                prev.create_revision,
                prev.mod_revision,
                &[],
            )?;
            (
                prev.clone(),
                Event::Delete {
                    prev,
                    revision: rev,
                },
            )
        }
    }))
}

/// The newest row of a key, whatever its kind.
const SELECT_LATEST: &str =
    "SELECT id, deleted, create_revision, value FROM kv WHERE key = ?1 ORDER BY id DESC LIMIT 1";

fn latest(tx: &Transaction<'_>, key: &str) -> rusqlite::Result<Option<Latest>> {
    tx.prepare_cached(SELECT_LATEST)?
        .query_row([key.as_bytes()], |row| {
            Ok(Latest {
                id: row.get(0)?,
                deleted: row.get(1)?,
                create_revision: row.get(2)?,
                value: row.get(3)?,
            })
        })
        .optional()
}

#[allow(clippy::too_many_arguments)]
fn insert(
    tx: &Transaction<'_>,
    rev: Revision,
    key: &str,
    created: bool,
    deleted: bool,
    create_revision: Revision,
    prev_revision: Revision,
    value: &[u8],
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO kv (id, key, created, deleted, create_revision, prev_revision, value)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(rusqlite::params![
        rev,
        key.as_bytes(),
        created,
        deleted,
        create_revision,
        prev_revision,
        value
    ])?;
    Ok(())
}

/// Compacts revisions `(from, to]` in one transaction, given that everything up to `from` already
/// is: each row in the range supersedes its key's previous row, which goes; tombstones in the
/// range go too (with their previous row, by the first rule). The newest row at or below `to` of
/// every live key stays, so reads at `to` and watches after `to` are unaffected. Returns the number
/// of rows removed.
fn compact_range(conn: &mut Connection, from: Revision, to: Revision) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut removed = tx.execute(
        "DELETE FROM kv WHERE id IN
             (SELECT prev_revision FROM kv WHERE id > ?1 AND id <= ?2 AND prev_revision > 0)",
        [from, to],
    )?;
    removed += tx.execute(
        "DELETE FROM kv WHERE id > ?1 AND id <= ?2 AND deleted = 1",
        [from, to],
    )?;
    tx.execute(
        "UPDATE meta SET value = ?1 WHERE name = 'compact_revision'",
        [to],
    )?;
    tx.commit()?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use rusqlite::StatementStatus;

    use super::*;
    use crate::sqlite::schema;

    /// A cached statement must not be compiled again each time it is taken from the cache (see
    /// `schema::stable_query_plans`).
    #[test]
    fn cached_statements_are_not_recompiled_between_uses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut conn = Connection::open(dir.path().join("s.db")).expect("open");
        schema::configure_writer(&conn).expect("configure");
        schema::init(&mut conn).expect("init");
        let tx = conn.transaction().expect("begin");
        for rev in 1..=3 {
            latest(&tx, "/k").expect("select");
            insert(&tx, rev, "/k", rev == 1, false, 1, rev - 1, b"{}").expect("insert");
        }
        let stmt = tx.prepare_cached(SELECT_LATEST).expect("cached");
        assert_eq!(stmt.get_status(StatementStatus::Run), 3);
        assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
    }
}
