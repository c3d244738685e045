//! The on-disk layout: a kine-style MVCC log, one row per revision.
//!
//! `kv.id` is the revision. A create writes a row with `created = 1`, an update a row with
//! `created = 0`, a delete a tombstone with `deleted = 1` and an empty value. `prev_revision` points
//! at the key's previous row (any kind; 0 for the first row of a key), which is what compaction
//! walks: every row `r` in a compacted range supersedes the row `r.prev_revision`.
//!
//! Keys are stored as BLOBs so that SQLite compares them with `memcmp`, i.e. in byte order, and so
//! that range bounds that are not valid UTF-8 (a prefix with its last byte incremented) compare
//! correctly. Binding a bound as TEXT against BLOB keys would silently match nothing: SQLite orders
//! every TEXT value before every BLOB.

use std::fs::File;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension};

use super::error::SqliteError;
use crate::Revision;

/// Bumped when the layout changes incompatibly; a newer file is refused rather than misread.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv (
    id              INTEGER PRIMARY KEY,
    key             BLOB    NOT NULL,
    created         INTEGER NOT NULL,
    deleted         INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER NOT NULL,
    value           BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_key_id ON kv (key, id);
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES ('compact_revision', 0);
";

/// Reads the compacted revision recorded in `meta`. Inside a read transaction, this is also the
/// statement that pins the transaction's snapshot.
pub(super) const SELECT_COMPACT_REVISION: &str =
    "SELECT value FROM meta WHERE name = 'compact_revision'";

/// Pragmas for the single write connection: WAL, with commits that do not wait for the disk
/// (`synchronous=NORMAL`): the syncer (`durable`) flushes the log before any commit is
/// acknowledged. SQLite itself still syncs around checkpoints, so the database file never holds
/// anything the log could lose.
pub(super) fn configure_writer(conn: &Connection) -> Result<(), SqliteError> {
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SqliteError::NoWal(mode));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // The WAL is checkpointed every 1,000 pages (SQLite's default, ~4 MiB) and then reused from
    // its start; when a burst or a long reader made it grow past 16 MiB, it is truncated back.
    conn.pragma_update(None, "journal_size_limit", 16 * 1024 * 1024)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    stable_query_plans(conn)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

/// Turns on SQLite's query planner stability guarantee, so that a statement's plan never depends
/// on the values bound to it.
///
/// Without it, planning `key = ?1 ORDER BY id DESC` weighs `key = ?1` as a possible boolean test
/// and marks `?1` as plan-relevant; `sqlite3_clear_bindings` then expires the statement, and the
/// statement cache clears bindings each time a statement is returned to it. Every cached
/// statement was therefore compiled again on every use: about a quarter of the writer thread's
/// CPU and of each read (`perf` on `tandem bench scheduler`, under `sqlite3Reprepare`). The
/// plans themselves do not change: no statistics are gathered, so there is nothing values could
/// choose between.
fn stable_query_plans(conn: &Connection) -> Result<(), SqliteError> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// Opens the write-ahead log (`<db>-wal`) for the syncer to flush. It exists once the database
/// is in WAL mode and [`init`] has written to it, and keeps its inode while any connection is open
/// (SQLite truncates it, never replaces it).
pub(super) fn open_wal(db: &Path) -> Result<File, SqliteError> {
    let mut path = db.as_os_str().to_owned();
    path.push("-wal");
    let path = PathBuf::from(path);
    File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| SqliteError::Wal { path, source })
}

/// Pragmas for read connections: they never write, and wait briefly on the rare lock (WAL recovery).
pub(super) fn configure_reader(conn: &Connection) -> Result<(), SqliteError> {
    conn.pragma_update(None, "query_only", true)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    stable_query_plans(conn)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

/// Creates the tables on a new file, checks the version of an existing one, and returns the
/// revisions to resume from: `(current, compacted)`.
///
/// The current revision is the larger of the newest row and the compacted revision: compaction may
/// have removed the newest row when it was a deletion tombstone, but never compacts past a revision
/// that was written.
pub(super) fn init(conn: &mut Connection) -> Result<(Revision, Revision), SqliteError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(SqliteError::SchemaVersion {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    tx.execute_batch(SCHEMA)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    let newest: Option<Revision> = tx
        .query_row("SELECT MAX(id) FROM kv", [], |row| row.get(0))
        .optional()?
        .flatten();
    let compacted: Revision = tx.query_row(SELECT_COMPACT_REVISION, [], |row| row.get(0))?;
    tx.commit()?;
    Ok((newest.unwrap_or(0).max(compacted), compacted))
}
