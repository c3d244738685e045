//! The background compactor, and finding etcd's compacted revision at connect.
//!
//! The compactor follows kube-apiserver's (`storage/etcd3/compact.go`): API servers sharing one
//! etcd take turns through the key [`COMPACT_REV_KEY`]. Its version is a logical clock (the
//! number of compaction rounds so far) and its value the revision the last round compacted.
//! Every interval, each server tries a transaction "the key's version is still the one I know →
//! write the revision I saw last round"; the one that succeeds compacts at that revision, the
//! others learn the new version and try again next interval. So one server compacts per
//! interval; if it dies, another takes over within two intervals. Each round compacts up to the
//! revision seen one interval earlier, so at least one interval of history stays for watchers
//! to resume from. The first round never compacts (there is no earlier revision yet).
//!
//! etcd does not say what its compacted revision is, so at connect the store finds it: a read
//! at revision `r` fails exactly when `r` is below the compaction, so a binary search over
//! `[1, current]` with count-only reads finds it (two reads when the compactor's record is
//! right).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbKeyValue, PbTxnOpResponse};
use etcd_client::{Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, TxnResponse};

use super::error::{self, EtcdError};
use super::{COMPACT_REV_KEY, CallError, Revisions, with_retries};
use crate::{Result, Revision, StoreError};

/// The revision a compactor record (the value of [`COMPACT_REV_KEY`]) names.
pub(super) fn parse_record(kv: &PbKeyValue) -> Result<Revision> {
    std::str::from_utf8(&kv.value)
        .ok()
        .and_then(|v| v.parse::<Revision>().ok())
        .ok_or_else(|| {
            EtcdError::BadResponse {
                op: "range",
                detail: format!("{COMPACT_REV_KEY} does not hold a revision"),
            }
            .into()
        })
}

/// Whether etcd can still serve a read at `revision`.
async fn readable(kv: &KvClient, revision: Revision, timeout: Duration) -> Result<bool> {
    let read = with_retries(timeout, "range", || {
        let mut kv = kv.clone();
        let options = GetOptions::new().with_revision(revision).with_count_only();
        async move { kv.get(COMPACT_REV_KEY, Some(options)).await }
    });
    match read.await {
        Ok(_) => Ok(true),
        Err(CallError::Etcd(_, e)) if error::is_compacted(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// etcd's compacted revision: the oldest revision it can still read (0 when nothing was ever
/// compacted away). `recorded` is the compactor's record, tried first; `timeout` bounds each read.
pub(super) async fn find_compacted(
    kv: &KvClient,
    current: Revision,
    recorded: Revision,
    timeout: Duration,
) -> Result<Revision> {
    if current <= 1 || readable(kv, 1, timeout).await? {
        return Ok(0);
    }
    // Invariant: `lo` is unreadable, `hi` is readable (the current revision always is).
    let (mut lo, mut hi) = (1, current);
    if recorded > lo && recorded < hi {
        if !readable(kv, recorded, timeout).await? {
            lo = recorded;
        } else if !readable(kv, recorded - 1, timeout).await? {
            return Ok(recorded);
        } else {
            hi = recorded - 1;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if readable(kv, mid, timeout).await? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}

/// Runs the compactor every `interval` until the task is aborted (when the store is dropped).
pub(super) async fn run(
    mut kv: KvClient,
    revisions: Arc<Revisions>,
    interval: Duration,
    timeout: Duration,
) {
    // The record's version as this server last knew it, and the revision seen last round.
    let (mut version, mut revision) = (0, 0);
    loop {
        tokio::time::sleep(interval).await;
        let round = tokio::time::timeout(
            timeout,
            compact_round(&mut kv, &revisions, version, revision),
        )
        .await;
        match round {
            Ok(Round {
                version: v,
                revision: r,
                error,
            }) => {
                (version, revision) = (v, r);
                if let Some(error) = error {
                    tracing::warn!(error = %error, "etcd compaction failed");
                }
            }
            Err(_) => tracing::warn!(?timeout, "etcd compaction round timed out"),
        }
    }
}

/// The outcome of one round: what to remember for the next one, and what failed.
struct Round {
    version: i64,
    revision: Revision,
    error: Option<StoreError>,
}

/// One round of kube-apiserver's scheme: take the turn if the record's version is still
/// `version`, then compact at `revision` (the one seen last round).
async fn compact_round(
    kv: &mut KvClient,
    revisions: &Revisions,
    version: i64,
    revision: Revision,
) -> Round {
    let unchanged = Round {
        version,
        revision,
        error: None,
    };
    let txn = Txn::new()
        .when([Compare::version(COMPACT_REV_KEY, CompareOp::Equal, version)])
        .and_then([TxnOp::put(COMPACT_REV_KEY, revision.to_string(), None)])
        .or_else([TxnOp::get(COMPACT_REV_KEY, None)]);
    let TxnResponse(answer) = match kv.txn(txn).await {
        Ok(answer) => answer,
        Err(source) => {
            return Round {
                error: Some(EtcdError::Request { op: "txn", source }.into()),
                ..unchanged
            };
        }
    };
    let Some(current) = answer.header.as_ref().map(|h| h.revision) else {
        return Round {
            error: Some(
                EtcdError::BadResponse {
                    op: "txn",
                    detail: "no response header".into(),
                }
                .into(),
            ),
            ..unchanged
        };
    };
    revisions.observe(current);
    if !answer.succeeded {
        // Another server took this turn: learn its clock (and what it compacted).
        let record = answer
            .responses
            .into_iter()
            .next()
            .and_then(|op| op.response)
            .and_then(|response| match response {
                PbTxnOpResponse::ResponseRange(range) => range.kvs.into_iter().next(),
                _ => None,
            });
        let theirs = record.as_ref().map_or(0, |kv| kv.version);
        if let Some(Ok(compacted)) = record.as_ref().map(parse_record) {
            revisions.observe_compacted(compacted);
        }
        return Round {
            version: theirs,
            revision: current,
            error: None,
        };
    }
    let next = Round {
        version: version + 1,
        revision: current,
        error: None,
    };
    if revision == 0 {
        return next;
    }
    match kv.compact(revision, None).await {
        Ok(_) => {
            revisions.observe_compacted(revision);
            tracing::debug!(revision, "etcd compacted");
            next
        }
        Err(e) if error::is_compacted(&e) => {
            revisions.observe_compacted(revision);
            next
        }
        Err(source) => Round {
            error: Some(
                EtcdError::Request {
                    op: "compact",
                    source,
                }
                .into(),
            ),
            ..next
        },
    }
}
