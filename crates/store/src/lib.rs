//! Revisioned key-value store behind the tandem API server.
//!
//! The model is etcd's: one global, strictly increasing revision; every write (create, update,
//! delete) gets the next revision; each key remembers the revision that created it and the one that
//! last modified it; writes can be made conditional on the current modification revision
//! (compare-and-swap); history is kept for watches until compacted. The API server maps the
//! revision to `metadata.resourceVersion`.
//!
//! Backends: [`sqlite::SqliteStore`] (the embedded default) and [`etcd::EtcdStore`] (etcd v3, for
//! several API servers on one datastore). Every backend passes the contract suite in
//! `tests/contract.rs`.

use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;

pub mod etcd;
pub mod sqlite;

/// A store revision. Revision 0 means "nothing written yet"; the first write gets revision 1.
pub type Revision = i64;

/// One key at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// The revision of the write that created this key (since its last deletion).
    pub create_revision: Revision,
    /// The revision of the last write to this key.
    pub mod_revision: Revision,
}

/// What a watch reports. Events arrive in revision order; a batch committed together arrives in the
/// order its writes were submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A create (when `prev` is `None`) or update.
    Put {
        kv: KeyValue,
        prev: Option<KeyValue>,
    },
    /// A deletion at `revision`; `prev` is the value that was deleted.
    Delete { prev: KeyValue, revision: Revision },
}

impl Event {
    /// The revision at which this event happened.
    pub fn revision(&self) -> Revision {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
        }
    }
    /// The key the event is about.
    pub fn key(&self) -> &str {
        match self {
            Event::Put { kv, .. } => &kv.key,
            Event::Delete { prev, .. } => &prev.key,
        }
    }
}

/// The result of a (possibly paginated) range read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListResult {
    /// Keys in ascending byte order.
    pub items: Vec<KeyValue>,
    /// The revision the read was served at (the store's current revision unless one was asked for).
    pub revision: Revision,
    /// True when `limit` cut the result and more keys remain after the last item.
    pub more: bool,
}

/// Failures a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {0:?} already exists")]
    AlreadyExists(String),
    #[error("key {0:?} not found")]
    NotFound(String),
    /// A conditional write found another modification revision than expected.
    #[error("key {key:?} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        key: String,
        expected: Revision,
        actual: Revision,
    },
    /// The requested revision is older than the oldest one kept.
    #[error("revision {requested} has been compacted; oldest available is {compacted}")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    /// The requested revision is newer than the current one.
    #[error("revision {requested} is in the future; current is {current}")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    /// The watcher fell too far behind and its stream was closed; it must re-list.
    #[error("watcher fell behind and was dropped")]
    WatchLagged,
    #[error("store backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("store is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A stream of watch events; an `Err` item ends the stream.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

/// The storage contract. All methods are safe to call concurrently; writes are durable (they
/// survive `kill -9` of the process) once the returned future resolves `Ok`.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// The latest committed revision.
    fn current_revision(&self) -> Revision;

    /// The oldest revision a watch or list may ask for; older ones fail with `Compacted`.
    fn compacted_revision(&self) -> Revision;

    /// The datastore's latest committed revision, asked of it now: unlike [`current_revision`],
    /// it includes writes made by other servers sharing the datastore that this one has not yet
    /// seen. Consistent reads wait for this revision, as upstream's consistent reads from the
    /// watch cache wait for etcd's current revision. A store that is the only writer of its data
    /// answers with [`current_revision`].
    ///
    /// [`current_revision`]: Store::current_revision
    async fn latest_revision(&self) -> Result<Revision> {
        Ok(self.current_revision())
    }

    /// Reads one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads the keys starting with `prefix`, in ascending key order, strictly after `start_after`
    /// (when given), at most `limit` of them (when given), as of `revision` (when given, else now).
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
        revision: Option<Revision>,
    ) -> Result<ListResult>;

    /// Counts the keys under `prefix` at the current revision.
    async fn count(&self, prefix: &str) -> Result<usize>;

    /// Creates `key`; fails with `AlreadyExists` if it is present.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replaces `key`'s value if its modification revision is `expected` (any revision when `None`);
    /// fails with `NotFound` or `Conflict`.
    async fn update(&self, key: &str, value: Bytes, expected: Option<Revision>)
    -> Result<KeyValue>;

    /// Deletes `key` if its modification revision is `expected` (any when `None`), returning the
    /// deleted value; fails with `NotFound` or `Conflict`.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue>;

    /// Streams every event under `prefix` with a revision greater than `after`, first the stored
    /// history, then live events, without gaps or duplicates. Fails with `Compacted` when `after` is
    /// older than the compacted revision.
    fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;

    /// Drops history at or below `revision` (never the latest value of a live key).
    async fn compact(&self, revision: Revision) -> Result<()>;
}
