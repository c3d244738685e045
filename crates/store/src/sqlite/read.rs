//! Reads: a small pool of read-only connections, used from blocking threads.
//!
//! Every read runs in its own read transaction so it sees one WAL snapshot. The revision a read is
//! served at is decided with [`Snapshot::begin`], which is the only subtle part: see there.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, Transaction};

use super::Revisions;
use super::error::SqliteError;
use super::schema;
use crate::{Event, KeyValue, ListResult, Result, Revision, StoreError};

/// Read-only connections to the database, reused across reads. Opening a connection is cheap but
/// not free (schema parse, statement cache), so up to `max_idle` are kept.
pub(super) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
    pub(super) revisions: Arc<Revisions>,
}

impl ReadPool {
    pub(super) fn new(path: PathBuf, max_idle: usize, revisions: Arc<Revisions>) -> Self {
        ReadPool {
            path,
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
            revisions,
        }
    }

    /// Runs `f` with a pooled connection on tokio's blocking pool, off the async workers.
    pub(super) async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Revisions) -> Result<T> + Send + 'static,
    {
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || pool.with_connection(f))
            .await
            .map_err(SqliteError::Join)?
    }

    fn with_connection<T>(
        &self,
        f: impl FnOnce(&mut Connection, &Revisions) -> Result<T>,
    ) -> Result<T> {
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.open()?,
        };
        let result = f(&mut conn, &self.revisions);
        // A connection is returned even after a failed read: the read transaction was rolled back
        // when it dropped, and SQLite connections stay usable after statement errors.
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
        result
    }

    fn open(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        schema::configure_reader(&conn)?;
        Ok(conn)
    }
}

/// A read transaction and the revisions it may serve.
pub(super) struct Snapshot<'c> {
    tx: Transaction<'c>,
    /// The newest revision fully contained in this snapshot.
    pub(super) current: Revision,
    /// The compacted revision as of this snapshot.
    pub(super) compacted: Revision,
}

impl<'c> Snapshot<'c> {
    /// Starts a read transaction and decides which revision it represents.
    ///
    /// The published current revision is read *before* the snapshot is pinned: the writer publishes
    /// a revision only after its commit, so every row up to it is in the snapshot. Reading it after
    /// pinning could name a revision whose rows the snapshot lacks. The compacted revision is read
    /// from the snapshot itself; if compaction overtook the published revision in the meantime, the
    /// snapshot contains every write up to the compacted revision (compaction commits after them),
    /// so serving at the compacted revision is both possible and required (older rows are gone).
    pub(super) fn begin(conn: &'c mut Connection, revisions: &Revisions) -> Result<Self> {
        let published = revisions.current.load(Ordering::SeqCst);
        let tx = conn.transaction()?;
        let compacted: Revision = tx
            .prepare_cached(schema::SELECT_COMPACT_REVISION)?
            .query_row([], |row| row.get(0))?;
        Ok(Snapshot {
            tx,
            current: published.max(compacted),
            compacted,
        })
    }

    /// Resolves an optional requested revision against this snapshot.
    pub(super) fn revision(&self, requested: Option<Revision>) -> Result<Revision> {
        match requested {
            None => Ok(self.current),
            Some(r) if r > self.current => Err(StoreError::FutureRevision {
                requested: r,
                current: self.current,
            }),
            Some(r) if r < self.compacted => Err(StoreError::Compacted {
                requested: r,
                compacted: self.compacted,
            }),
            Some(r) => Ok(r),
        }
    }
}

/// The byte range of keys a read covers: `[lower, upper)` or `(lower, upper)`.
struct KeyRange {
    lower: Vec<u8>,
    lower_inclusive: bool,
    upper: Option<Vec<u8>>,
}

impl KeyRange {
    /// Keys starting with `prefix`, strictly after `start_after` when given.
    fn new(prefix: &str, start_after: Option<&str>) -> Self {
        let upper = prefix_end(prefix.as_bytes());
        match start_after {
            Some(after) if after.as_bytes() >= prefix.as_bytes() => KeyRange {
                lower: after.as_bytes().to_vec(),
                lower_inclusive: false,
                upper,
            },
            _ => KeyRange {
                lower: prefix.as_bytes().to_vec(),
                lower_inclusive: true,
                upper,
            },
        }
    }

    /// The SQL condition on `{table}.key`, using the `:lo` and `:hi` parameters.
    fn condition(&self, table: &str) -> String {
        let op = if self.lower_inclusive { ">=" } else { ">" };
        match self.upper {
            Some(_) => format!("{table}.key {op} :lo AND {table}.key < :hi"),
            None => format!("{table}.key {op} :lo"),
        }
    }

    fn params<'a>(
        &'a self,
        rest: &[(&'a str, &'a dyn rusqlite::ToSql)],
    ) -> Vec<(&'a str, &'a dyn rusqlite::ToSql)> {
        let mut params: Vec<(&str, &dyn rusqlite::ToSql)> = vec![(":lo", &self.lower)];
        if let Some(upper) = &self.upper {
            params.push((":hi", upper));
        }
        params.extend_from_slice(rest);
        params
    }
}

/// The smallest byte string greater than every string starting with `prefix`, or `None` when
/// there is none (empty prefix, or all bytes 0xFF).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

fn key_from_blob(blob: Vec<u8>) -> Result<String> {
    String::from_utf8(blob).map_err(|e| SqliteError::KeyEncoding(e).into())
}

/// Reads `key` at the current revision.
pub(super) fn get(
    conn: &mut Connection,
    revisions: &Revisions,
    key: &str,
) -> Result<Option<KeyValue>> {
    let snapshot = Snapshot::begin(conn, revisions)?;
    let mut stmt = snapshot.tx.prepare_cached(
        "SELECT id, deleted, create_revision, value FROM kv WHERE key = ?1 AND id <= ?2 ORDER BY id DESC LIMIT 1",
    )?;
    let mut rows = stmt.query(rusqlite::params![key.as_bytes(), snapshot.current])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    if row.get::<_, bool>(1)? {
        return Ok(None);
    }
    Ok(Some(KeyValue {
        key: key.to_owned(),
        value: Bytes::from(row.get::<_, Vec<u8>>(3)?),
        create_revision: row.get(2)?,
        mod_revision: row.get(0)?,
    }))
}

/// Lists live keys under `prefix` after `start_after`, at `revision` (or the current one).
pub(super) fn list(
    conn: &mut Connection,
    revisions: &Revisions,
    prefix: &str,
    start_after: Option<&str>,
    limit: Option<usize>,
    revision: Option<Revision>,
) -> Result<ListResult> {
    let snapshot = Snapshot::begin(conn, revisions)?;
    let at = snapshot.revision(revision)?;
    let range = KeyRange::new(prefix, start_after);
    // One extra row tells whether more remain. SQLite treats a negative LIMIT as none.
    let fetch: i64 = limit.map_or(-1, |l| {
        i64::try_from(l).unwrap_or(i64::MAX - 1).saturating_add(1)
    });
    // Walks the (key, id) index in key order and keeps each key's newest row at or below `at`
    // (one index seek per row). Unlike a GROUP BY subquery joined back to `kv`, this needs no
    // temporary sort, so a page costs in proportion to its size, not to the whole prefix.
    let sql = format!(
        "SELECT kv.key, kv.id, kv.create_revision, kv.value
         FROM kv
         WHERE {} AND kv.id <= :rev
           AND kv.id = (SELECT MAX(n.id) FROM kv AS n WHERE n.key = kv.key AND n.id <= :rev)
           AND kv.deleted = 0
         ORDER BY kv.key
         LIMIT :limit",
        range.condition("kv")
    );
    let mut stmt = snapshot.tx.prepare_cached(&sql)?;
    let params = range.params(&[(":rev", &at), (":limit", &fetch)]);
    let mut rows = stmt.query(params.as_slice())?;
    let mut items = Vec::new();
    while let Some(row) = rows.next()? {
        items.push(KeyValue {
            key: key_from_blob(row.get(0)?)?,
            mod_revision: row.get(1)?,
            create_revision: row.get(2)?,
            value: Bytes::from(row.get::<_, Vec<u8>>(3)?),
        });
    }
    let more = limit.is_some_and(|l| items.len() > l);
    if let Some(l) = limit {
        items.truncate(l);
    }
    Ok(ListResult {
        items,
        revision: at,
        more,
    })
}

/// Counts live keys under `prefix` at the current revision.
pub(super) fn count(conn: &mut Connection, revisions: &Revisions, prefix: &str) -> Result<usize> {
    let snapshot = Snapshot::begin(conn, revisions)?;
    let range = KeyRange::new(prefix, None);
    let sql = format!(
        "SELECT COUNT(*)
         FROM (SELECT MAX(id) AS id FROM kv WHERE {} AND id <= :rev GROUP BY key) AS latest
         JOIN kv ON kv.id = latest.id
         WHERE kv.deleted = 0",
        range.condition("kv")
    );
    let mut stmt = snapshot.tx.prepare_cached(&sql)?;
    let params = range.params(&[(":rev", &snapshot.current)]);
    let n: i64 = stmt.query_row(params.as_slice(), |row| row.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// One page of stored history for a watch.
pub(super) struct HistoryPage {
    pub(super) events: Vec<Event>,
    /// Every event under the prefix with a revision up to this one has been read.
    pub(super) scanned_to: Revision,
}

/// Reads up to `page` events under `prefix` with revisions in `(after, upto]`, oldest first.
/// Fails with `Compacted` if compaction has already removed part of that range.
pub(super) fn history(
    conn: &mut Connection,
    revisions: &Revisions,
    prefix: &str,
    after: Revision,
    upto: Revision,
    page: usize,
) -> Result<HistoryPage> {
    let snapshot = Snapshot::begin(conn, revisions)?;
    if after < snapshot.compacted {
        return Err(StoreError::Compacted {
            requested: after,
            compacted: snapshot.compacted,
        });
    }
    let range = KeyRange::new(prefix, None);
    let sql = format!(
        "SELECT kv.id, kv.key, kv.created, kv.deleted, kv.create_revision, kv.value,
                p.id, p.create_revision, p.value
         FROM kv LEFT JOIN kv AS p ON p.id = kv.prev_revision
         WHERE kv.id > :after AND kv.id <= :upto AND {}
         ORDER BY kv.id
         LIMIT :limit",
        range.condition("kv")
    );
    let limit = i64::try_from(page).unwrap_or(i64::MAX);
    let mut stmt = snapshot.tx.prepare_cached(&sql)?;
    let params = range.params(&[(":after", &after), (":upto", &upto), (":limit", &limit)]);
    let mut rows = stmt.query(params.as_slice())?;
    let mut events = Vec::new();
    while let Some(row) = rows.next()? {
        let id: Revision = row.get(0)?;
        let key = key_from_blob(row.get(1)?)?;
        let created: bool = row.get(2)?;
        let deleted: bool = row.get(3)?;
        let create_revision: Revision = row.get(4)?;
        let prev_id: Option<Revision> = row.get(6)?;
        let prev = match prev_id {
            Some(prev_id) => Some(KeyValue {
                key: key.clone(),
                value: Bytes::from(row.get::<_, Vec<u8>>(8)?),
                create_revision: row.get(7)?,
                mod_revision: prev_id,
            }),
            None => None,
        };
        let event = if deleted {
            // A tombstone's previous row is the live value it deleted; compaction keeps it for as
            // long as the tombstone itself is kept.
            let prev = prev.unwrap_or_else(|| KeyValue {
                key: key.clone(),
                value: Bytes::new(),
                create_revision,
                mod_revision: id,
            });
            Event::Delete { prev, revision: id }
        } else {
            let kv = KeyValue {
                key,
                value: Bytes::from(row.get::<_, Vec<u8>>(5)?),
                create_revision,
                mod_revision: id,
            };
            Event::Put {
                kv,
                prev: if created { None } else { prev },
            }
        };
        events.push(event);
    }
    let scanned_to = if events.len() >= page {
        events.last().map_or(upto, Event::revision)
    } else {
        upto
    };
    Ok(HistoryPage { events, scanned_to })
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"/a/"), Some(b"/a0".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
