//! Watch streams over etcd watches, and the revision follower.
//!
//! A store watch is one etcd watch (its own gRPC stream) of the prefix's key range from
//! `after + 1`, with previous values, as kube-apiserver's `storage/etcd3/watcher.go` opens them.
//! etcd replays its history and then sends live events, in revision order, without gaps or
//! duplicates; a task forwards them into a bounded channel. A watcher that lets the channel fill
//! up gets the events already buffered and then `WatchLagged` (the etcd watch is dropped at
//! once, so memory stays bounded); it must resume or re-list, as with the SQLite backend.
//!
//! etcd reports a start revision older than its compaction by cancelling the watch with
//! `compact_revision` set; that becomes [`StoreError::Compacted`]. An update or delete event
//! without its previous value (etcd could not read it: compacted meanwhile) is treated the same
//! way, as kube-apiserver's watcher refuses such events too.
//!
//! The revision follower is one more etcd watch, of the whole keyspace, that keeps the store's
//! current revision up to date with writes made by other clients of the same etcd, and learns
//! other servers' compactions from their compactor records.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbEvent, PbWatchResponse};
use etcd_client::{GetOptions, KvClient, WatchClient, WatchOptions, WatchResponse};
use futures::stream;
use tokio::sync::mpsc;

use super::error::EtcdError;
use super::{COMPACT_REV_KEY, Revisions, compactor, key_value, prefix_end};
use crate::{Event, Result, Revision, StoreError, WatchStream};

/// etcd's event types (`mvccpb.Event_EventType`).
const PUT: i32 = 0;
const DELETE: i32 = 1;

/// How long the revision follower waits before re-watching after a failure.
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// Everything a watch task needs; it owns no reference to the store.
pub(super) struct WatchRequest {
    pub client: WatchClient,
    pub revisions: Arc<Revisions>,
    pub prefix: String,
    pub after: Revision,
    /// Events buffered for the consumer before it is dropped with `WatchLagged`.
    pub buffer: usize,
    /// Bound on opening the etcd watch.
    pub timeout: Duration,
    /// Fires (closes) when the store is dropped.
    pub shutdown: tokio::sync::watch::Receiver<()>,
}

/// Starts forwarding the etcd watch described by `request`; the stream ends after its first
/// error item.
pub(super) fn start(request: WatchRequest) -> WatchStream {
    let (events, received) = mpsc::channel(request.buffer);
    tokio::spawn(forward(request, events));
    Box::pin(stream::unfold(received, |mut received| async move {
        received.recv().await.map(|item| (item, received))
    }))
}

/// Why forwarding stopped.
enum Stop {
    /// The stream ends with this error.
    Fail(StoreError),
    /// The consumer dropped the stream; nobody is left to tell.
    Gone,
}

async fn forward(mut request: WatchRequest, events: mpsc::Sender<Result<Event>>) {
    let error = match run(&mut request, &events).await {
        Stop::Fail(error) => error,
        Stop::Gone => return,
    };
    // After a lag this waits for the consumer to drain one slot (or to drop the stream); the
    // etcd watch is already gone, so nothing else is held meanwhile.
    let _ = events.send(Err(error)).await;
}

async fn run(request: &mut WatchRequest, events: &mpsc::Sender<Result<Event>>) -> Stop {
    let start = if request.prefix.is_empty() {
        vec![0]
    } else {
        request.prefix.as_bytes().to_vec()
    };
    let options = WatchOptions::new()
        .with_range(prefix_end(request.prefix.as_bytes()))
        .with_start_revision(request.after + 1)
        .with_prev_key();
    let client = &request.client;
    let open = super::with_retries(request.timeout, "watch", || {
        let (mut client, start, options) = (client.clone(), start.clone(), options.clone());
        async move { client.watch(start, Some(options)).await }
    });
    let mut stream = tokio::select! {
        opened = open => match opened {
            Ok(stream) => stream,
            Err(error) => return Stop::Fail(error.into()),
        },
        () = events.closed() => return Stop::Gone,
        _ = request.shutdown.changed() => return Stop::Fail(StoreError::Closed),
    };
    let mut last = request.after;
    loop {
        let message = tokio::select! {
            message = stream.message() => message,
            () = events.closed() => return Stop::Gone,
            _ = request.shutdown.changed() => return Stop::Fail(StoreError::Closed),
        };
        let WatchResponse(response) = match message {
            Ok(Some(response)) => response,
            Ok(None) => return Stop::Fail(EtcdError::WatchClosed.into()),
            Err(source) => {
                return Stop::Fail(
                    EtcdError::Request {
                        op: "watch",
                        source,
                    }
                    .into(),
                );
            }
        };
        if let Some(stop) = deliver(request, response, &mut last, events) {
            return stop;
        }
    }
}

/// Hands one etcd watch response's events to the consumer; `Some` when the stream must stop.
fn deliver(
    request: &WatchRequest,
    response: PbWatchResponse,
    last: &mut Revision,
    events: &mpsc::Sender<Result<Event>>,
) -> Option<Stop> {
    if response.compact_revision > 0 {
        request
            .revisions
            .observe_compacted(response.compact_revision);
        return Some(Stop::Fail(StoreError::Compacted {
            requested: request.after,
            compacted: response.compact_revision,
        }));
    }
    if response.canceled {
        return Some(Stop::Fail(
            EtcdError::WatchCancelled(response.cancel_reason).into(),
        ));
    }
    for raw in response.events {
        let event = match event(raw) {
            Ok(event) => event,
            Err(Unreadable::MissingPrev(revision)) => {
                // etcd could not read the previous value at `revision - 1`: it has compacted
                // at least up to `revision`.
                request.revisions.observe_compacted(revision);
                return Some(Stop::Fail(StoreError::Compacted {
                    requested: request.after,
                    compacted: revision,
                }));
            }
            Err(Unreadable::Bad(error)) => return Some(Stop::Fail(error)),
        };
        // etcd promises order; a stream that breaks it must not reach the watch cache.
        if event.revision() < *last {
            return Some(Stop::Fail(bad_event(format!(
                "event at revision {} after one at {}",
                event.revision(),
                *last
            ))));
        }
        *last = event.revision();
        request.revisions.observe(*last);
        match events.try_send(Ok(event)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Some(Stop::Fail(StoreError::WatchLagged));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Some(Stop::Gone),
        }
    }
    None
}

/// Why an etcd event could not become a store event.
enum Unreadable {
    /// An update or delete at this revision came without its previous value.
    MissingPrev(Revision),
    /// Anything else: a missing key-value, a key that is not UTF-8, an unknown type.
    Bad(StoreError),
}

impl From<StoreError> for Unreadable {
    fn from(e: StoreError) -> Self {
        Unreadable::Bad(e)
    }
}

/// Converts one etcd event.
fn event(raw: PbEvent) -> std::result::Result<Event, Unreadable> {
    let kv = raw
        .kv
        .ok_or_else(|| bad_event("an event without its key"))?;
    let revision = kv.mod_revision;
    // A put of version 1 creates the key: there is no previous value to expect.
    let prev = if raw.r#type == PUT && kv.version == 1 {
        None
    } else {
        let prev = raw.prev_kv.ok_or(Unreadable::MissingPrev(revision))?;
        Some(key_value(prev, "watch")?)
    };
    match (raw.r#type, prev) {
        (PUT, prev) => Ok(Event::Put {
            kv: key_value(kv, "watch")?,
            prev,
        }),
        (DELETE, Some(prev)) => Ok(Event::Delete { prev, revision }),
        (other, _) => Err(bad_event(format!("an event of unknown type {other}")).into()),
    }
}

fn bad_event(detail: impl Into<String>) -> StoreError {
    EtcdError::BadResponse {
        op: "watch",
        detail: detail.into(),
    }
    .into()
}

/// Watches the whole keyspace from `from + 1` for as long as the store lives (it is aborted on
/// drop), advancing the current revision with every event and the compacted revision with every
/// compactor record. Re-watches after failures; after a compaction overtook it, resumes from the
/// current revision (the revisions it skipped are committed, so only the latest matters).
pub(super) async fn follow_revisions(
    mut client: WatchClient,
    mut kv: KvClient,
    revisions: Arc<Revisions>,
    from: Revision,
) {
    let mut after = from;
    loop {
        let failure = follow(&mut client, &revisions, &mut after).await;
        match failure {
            Follow::Compacted => {
                let latest = kv
                    .get(COMPACT_REV_KEY, Some(GetOptions::new().with_count_only()))
                    .await
                    .ok()
                    .and_then(|answer| answer.0.header.map(|h| h.revision));
                if let Some(latest) = latest {
                    revisions.observe(latest);
                    after = after.max(latest);
                }
            }
            Follow::Failed(error) => {
                tracing::warn!(error = %error, after, "etcd revision follower failed; re-watching");
            }
        }
        tokio::time::sleep(FOLLOW_RETRY).await;
    }
}

enum Follow {
    Compacted,
    Failed(StoreError),
}

async fn follow(client: &mut WatchClient, revisions: &Revisions, after: &mut Revision) -> Follow {
    let options = WatchOptions::new()
        .with_range(vec![0])
        .with_start_revision(*after + 1);
    let mut stream = match client.watch(vec![0], Some(options)).await {
        Ok(stream) => stream,
        Err(source) => {
            return Follow::Failed(
                EtcdError::Request {
                    op: "watch",
                    source,
                }
                .into(),
            );
        }
    };
    loop {
        let WatchResponse(response) = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return Follow::Failed(EtcdError::WatchClosed.into()),
            Err(source) => {
                return Follow::Failed(
                    EtcdError::Request {
                        op: "watch",
                        source,
                    }
                    .into(),
                );
            }
        };
        if response.compact_revision > 0 {
            revisions.observe_compacted(response.compact_revision);
            return Follow::Compacted;
        }
        if response.canceled {
            return Follow::Failed(EtcdError::WatchCancelled(response.cancel_reason).into());
        }
        for event in &response.events {
            let Some(kv) = &event.kv else { continue };
            revisions.observe(kv.mod_revision);
            *after = (*after).max(kv.mod_revision);
            if event.r#type == PUT
                && kv.key == COMPACT_REV_KEY.as_bytes()
                && let Ok(recorded) = compactor::parse_record(kv)
            {
                revisions.observe_compacted(recorded);
            }
        }
        if let Some(header) = &response.header {
            revisions.observe(header.revision);
        }
    }
}
