//! Failures of the SQLite backend; they reach callers as [`StoreError::Backend`].

use std::path::PathBuf;
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
    /// The write-ahead log could not be flushed to disk. Every write from then on fails: the
    /// kernel may have dropped what it could not write.
    #[error("could not flush the write-ahead log to disk")]
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
