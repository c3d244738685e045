//! Watch streams: stored history first, then live batches, without gaps or duplicates.
//!
//! The order of operations in [`start`] is what makes the hand-over exact. The watcher subscribes
//! to the live broadcast *before* reading the current revision `upto`; the writer publishes a
//! revision before broadcasting its batch. So every batch with revisions above `upto` is broadcast
//! after the subscription and will be received, and every revision up to `upto` is committed and
//! readable from the database. The stream replays `(after, upto]` from the database, then takes
//! live events, skipping any at or below the last revision it has already covered.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::stream;
use tokio::sync::broadcast;

use super::read::{self, ReadPool};
use super::writer::EventBatch;
use crate::{Event, Result, Revision, StoreError, WatchStream};

/// Stored events read per database round trip during replay.
const HISTORY_PAGE: usize = 512;

/// Where a watcher is in its life.
enum Phase {
    /// Reading stored history up to `upto` from the database.
    Replay { upto: Revision },
    /// Following the live broadcast.
    Live,
    /// The stream has ended (after an error item, or because the store closed).
    Done,
}

struct Watcher {
    prefix: Arc<str>,
    reads: Arc<ReadPool>,
    live: broadcast::Receiver<EventBatch>,
    /// Every event up to this revision has been delivered or is in `pending`.
    covered: Revision,
    pending: VecDeque<Event>,
    phase: Phase,
}

/// Starts a watch of `prefix` for events after `after`. See the module docs for why the order of
/// the steps here matters.
pub(super) fn start(
    reads: Arc<ReadPool>,
    events: &broadcast::Sender<EventBatch>,
    prefix: &str,
    after: Revision,
) -> Result<WatchStream> {
    let live = events.subscribe();
    let compacted = reads.revisions.compacted.load(Ordering::SeqCst);
    if after < compacted {
        return Err(StoreError::Compacted {
            requested: after,
            compacted,
        });
    }
    let upto = reads.revisions.current.load(Ordering::SeqCst);
    let watcher = Watcher {
        prefix: Arc::from(prefix),
        reads,
        live,
        covered: after,
        pending: VecDeque::new(),
        phase: Phase::Replay { upto },
    };
    Ok(Box::pin(stream::unfold(watcher, Watcher::next)))
}

impl Watcher {
    async fn next(mut self) -> Option<(Result<Event>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            match self.phase {
                Phase::Done => return None,
                Phase::Replay { upto } if self.covered >= upto => self.phase = Phase::Live,
                Phase::Replay { upto } => {
                    let (prefix, after) = (Arc::clone(&self.prefix), self.covered);
                    let page = self
                        .reads
                        .run(move |conn, revisions| {
                            read::history(conn, revisions, &prefix, after, upto, HISTORY_PAGE)
                        })
                        .await;
                    match page {
                        Ok(page) => {
                            self.covered = page.scanned_to;
                            self.pending.extend(page.events);
                        }
                        Err(e) => return self.fail(e),
                    }
                }
                Phase::Live => match self.live.recv().await {
                    Ok(batch) => {
                        for event in batch.iter() {
                            if event.revision() > self.covered
                                && event.key().starts_with(&*self.prefix)
                            {
                                self.pending.push_back(event.clone());
                            }
                        }
                        if let Some(last) = batch.last() {
                            self.covered = self.covered.max(last.revision());
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        return self.fail(StoreError::WatchLagged);
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        return self.fail(StoreError::Closed);
                    }
                },
            }
        }
    }

    /// Ends the stream with `error` as its last item.
    fn fail(mut self, error: StoreError) -> Option<(Result<Event>, Self)> {
        self.phase = Phase::Done;
        self.pending.clear();
        Some((Err(error), self))
    }
}
