//! Failures of the etcd backend; they reach callers as [`StoreError::Backend`].
//!
//! etcd's own "compacted" and "future revision" answers (gRPC `OutOfRange` with etcd's fixed
//! messages, `mvcc.ErrCompacted` / `mvcc.ErrFutureRev` upstream) are not errors of this kind:
//! the backend turns them into [`StoreError::Compacted`] and [`StoreError::FutureRevision`].

use std::path::PathBuf;
use std::time::Duration;

use crate::StoreError;

/// What etcd answers when a read or watch asks for a revision older than its compaction
/// (`rpctypes.ErrGRPCCompacted`).
pub(super) const COMPACTED_MESSAGE: &str = "required revision has been compacted";
/// What etcd answers when a read or compaction asks for a revision it has not reached yet
/// (`rpctypes.ErrGRPCFutureRev`).
pub(super) const FUTURE_REVISION_MESSAGE: &str = "required revision is a future revision";

/// Why the etcd backend failed. Callers see it boxed inside [`StoreError::Backend`] and can
/// downcast to it for diagnostics.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint was given.
    #[error("no etcd endpoints given")]
    NoEndpoints,
    /// A certificate or key file named in the options could not be read.
    #[error("could not read {what} file {path}")]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The TLS options do not fit together (a certificate without its key, https without a CA).
    #[error("invalid etcd TLS options: {0}")]
    Tls(&'static str),
    /// The client could not be set up (bad endpoint URL, TLS configuration rejected).
    #[error("could not set up the etcd client for {endpoints}")]
    Client {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// No endpoint answered within the dial timeout.
    #[error("etcd at {endpoints} did not answer within {timeout:?}")]
    Unreachable {
        endpoints: String,
        timeout: Duration,
    },
    /// The first request to etcd failed (connection refused, TLS handshake, authentication).
    #[error("could not reach etcd at {endpoints}")]
    Connect {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A request failed (connection lost, no leader, request rejected).
    #[error("etcd {op} failed")]
    Request {
        op: &'static str,
        #[source]
        source: etcd_client::Error,
    },
    /// A request got no answer within the request timeout.
    #[error("etcd {op} got no answer within {timeout:?}")]
    Timeout { op: &'static str, timeout: Duration },
    /// etcd answered with something this backend cannot read: a missing field, a key that is not
    /// UTF-8, a transaction answer of the wrong shape.
    #[error("unexpected answer from etcd to {op}: {detail}")]
    BadResponse { op: &'static str, detail: String },
    /// etcd cancelled a watch for another reason than compaction (permission denied, leader
    /// lost, server shutting down).
    #[error("etcd cancelled the watch: {0}")]
    WatchCancelled(String),
    /// The watch stream was closed by etcd or the connection.
    #[error("etcd closed the watch stream")]
    WatchClosed,
}

impl From<EtcdError> for StoreError {
    fn from(e: EtcdError) -> Self {
        StoreError::Backend(Box::new(e))
    }
}

/// Whether `error` is etcd's answer for a revision below its compaction.
pub(super) fn is_compacted(error: &etcd_client::Error) -> bool {
    grpc_message_contains(error, COMPACTED_MESSAGE)
}

/// Whether `error` is etcd's answer for a revision above its current one.
pub(super) fn is_future_revision(error: &etcd_client::Error) -> bool {
    grpc_message_contains(error, FUTURE_REVISION_MESSAGE)
}

fn grpc_message_contains(error: &etcd_client::Error, needle: &str) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => status.message().contains(needle),
        _ => false,
    }
}
