//! Failures of the SQLite backend; they reach callers as [`StoreError::Backend`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::StoreError;

/// Why the SQLite backend failed. Callers see it boxed inside [`StoreError::Backend`] and can
/// downcast to it for diagnostics.
#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    /// A statement failed (I/O error, disk full, corrupt file, ...).
    #[error("sqlite call failed")]
    Sqlite(#[from] rusqlite::Error),
    /// A whole group-commit batch failed; every request in it gets this same cause.
    #[error("write batch failed and was rolled back")]
    Batch(#[source] Arc<rusqlite::Error>),
    /// The file system holding the database has no space left: the batch was rolled back and
    /// nothing of it is stored. Writes succeed again once space is freed.
    #[error("no space left on device for database {path}")]
    DiskFull {
        path: PathBuf,
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// The file system holding the database is read-only (mounted so, or remounted read-only
    /// after an error): the batch was rolled back. Reads still work.
    #[error("read-only file system holds database {path}")]
    ReadOnly {
        path: PathBuf,
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// The write-ahead log could not be flushed to disk. Every write from then on fails until the
    /// store is opened again (a restart), which recovers the log from what reached the disk: the
    /// kernel may have dropped what it could not write, and a later successful flush would
    /// acknowledge writes that depend on it.
    #[error("could not flush the write-ahead log to disk; writes are refused until restart")]
    Sync(#[source] Arc<std::io::Error>),
    /// The write-ahead log `<db>-wal` could not be opened for flushing.
    #[error("could not open write-ahead log {path}")]
    Wal {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `<db>.lock` file beside the database could not be created or locked.
    #[error("could not use lock file {path}")]
    LockFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Another store (in this process or another one) has the database open for writing.
    #[error("database {0} is already open by another store")]
    Locked(PathBuf),
    /// WAL mode is required for concurrent reads and group commit (it fails on some network
    /// file systems).
    #[error("database refused WAL journal mode (got {0:?})")]
    NoWal(String),
    /// The file was written by a newer tandem.
    #[error("database schema version {found} is newer than supported version {supported}")]
    SchemaVersion { found: i64, supported: i64 },
    /// A stored key is not UTF-8; only possible if the file was written by something else.
    #[error("stored key is not valid UTF-8")]
    KeyEncoding(#[source] std::string::FromUtf8Error),
    /// The writer or compactor thread could not be started.
    #[error("could not start the {0} thread")]
    Spawn(&'static str, #[source] std::io::Error),
    /// A read on the blocking thread pool panicked or was cancelled (runtime shutting down).
    #[error("blocking read task failed")]
    Join(#[source] tokio::task::JoinError),
}

/// Why a batch was rolled back; every request in it is answered with [`BatchFailure::error`].
pub(super) struct BatchFailure {
    condition: DiskCondition,
    path: PathBuf,
    source: Arc<rusqlite::Error>,
}

/// The disk condition behind a failed batch, when there is one.
enum DiskCondition {
    Full,
    ReadOnly,
    Other,
}

impl BatchFailure {
    /// Names the failure for the disk condition behind it (SQLite reports a read-only file
    /// system as a generic I/O error, so the database file is probed for it).
    pub(super) fn new(e: rusqlite::Error, db: &Path) -> BatchFailure {
        let condition = match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => DiskCondition::Full,
            Some(rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::ReadOnly)
                if on_read_only_file_system(db) =>
            {
                DiskCondition::ReadOnly
            }
            _ => DiskCondition::Other,
        };
        BatchFailure {
            condition,
            path: db.to_owned(),
            source: Arc::new(e),
        }
    }

    /// The error one request of the batch gets.
    pub(super) fn error(&self) -> SqliteError {
        let (path, source) = (self.path.clone(), Arc::clone(&self.source));
        match self.condition {
            DiskCondition::Full => SqliteError::DiskFull { path, source },
            DiskCondition::ReadOnly => SqliteError::ReadOnly { path, source },
            DiskCondition::Other => SqliteError::Batch(source),
        }
    }
}

/// Whether opening `db` for writing fails because its file system is read-only.
fn on_read_only_file_system(db: &Path) -> bool {
    matches!(
        std::fs::File::options().append(true).open(db),
        Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem
    )
}

impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        StoreError::Backend(Box::new(e))
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        SqliteError::Sqlite(e).into()
    }
}
