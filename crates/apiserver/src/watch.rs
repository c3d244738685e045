//! WATCH: a stream of `WatchEvent`s from the watch cache, with upstream's resourceVersion semantics
//! (`k8s.io/apiserver/pkg/storage/cacher` and `endpoints/handlers/watch.go`): synthetic ADDED
//! events for the current state when no resourceVersion (or "0") is given, resumption after a given
//! one, `410 Gone` as an ERROR event when it is too old, BOOKMARK events when asked, the
//! `sendInitialEvents` streaming list with its `k8s.io/initial-events-end` bookmark, and
//! `timeoutSeconds`.
//!
//! Each watch runs as one task with a bounded queue of encoded events ([`Outbox`]), handed a few
//! at a time to the response body as the client reads. A watcher that stops reading fills it;
//! after [`BLOCKED_WATCHER_TIMEOUT`] without room its watch ends and the queue is dropped
//! (upstream's `cacheWatcher` is likewise stopped when its input buffer stays full, "Forcing
//! watcher close due to unresponsiveness"), so it no longer holds events it has not read, nor
//! pins the cache's broadcast. The client resumes from the last resourceVersion it saw. On server
//! shutdown every watch ends the same way ([`crate::cache::Cache::end_watches`]): the stream gets
//! its final chunk instead of a dropped connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{Value, json};
use tandem_core::registry::ResourceType;
use tandem_store::{Event as StoreEvent, Revision, StoreError};
use tokio::sync::{broadcast, mpsc, watch};

use crate::cache::{CacheEvent, EventType, Object, WatchStartError};
use crate::error::{ApiError, ApiResult};
use crate::output::{self, Format, IncludeObject};
use crate::rest::{Ctx, Filter};
use crate::state::State;

/// How often a watcher that allows bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(15);

/// Encoded events a watch task queues for a client that is not reading, at most (count and
/// bytes, whichever bound is reached first). A watch stays blocked, not cut off, while this holds.
const WATCHER_BUFFER: usize = 256;
const WATCHER_BUFFER_BYTES: usize = 1024 * 1024;

/// Events handed to the response body ahead of the client: small, because what sits there is
/// released only when the client reads or goes away, even after the watch was cut off.
const HANDED_OVER: usize = 4;

/// How long a watch waits for room in a full buffer before it ends the stream.
pub const BLOCKED_WATCHER_TIMEOUT: Duration = Duration::from_secs(5);

/// A watch's outgoing events: a bounded queue owned by the watch task, drained into the
/// response body's channel as the client reads. Cutting a watcher off drops the queue, so a
/// client that stops reading holds at most [`HANDED_OVER`] events of the server's memory.
struct Outbox {
    tx: mpsc::Sender<Bytes>,
    queue: Queue,
}

/// The events not yet handed to the body, and their size.
#[derive(Default)]
struct Queue {
    lines: std::collections::VecDeque<Bytes>,
    bytes: usize,
}

impl Queue {
    fn pop(&mut self) -> Option<Bytes> {
        let line = self.lines.pop_front()?;
        self.bytes -= line.len();
        Some(line)
    }

    fn full(&self) -> bool {
        self.lines.len() >= WATCHER_BUFFER || self.bytes >= WATCHER_BUFFER_BYTES
    }

    fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Hands queued events to the body while its channel has room; `false`: the client is gone.
    fn flush(&mut self, tx: &mpsc::Sender<Bytes>) -> bool {
        while let Some(line) = self.pop() {
            match tx.try_send(line) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(line)) => {
                    self.bytes += line.len();
                    self.lines.push_front(line);
                    return true;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        true
    }

    /// Waits until the body has room, hands it the oldest event and what else fits; for a
    /// `select!` arm guarded by a non-empty queue. `false`: the client is gone.
    async fn send_next(&mut self, tx: &mpsc::Sender<Bytes>) -> bool {
        let Ok(permit) = tx.reserve().await else {
            return false;
        };
        if let Some(line) = self.pop() {
            permit.send(line);
        }
        self.flush(tx)
    }
}

impl Outbox {
    fn new(tx: mpsc::Sender<Bytes>) -> Outbox {
        Outbox {
            tx,
            queue: Queue::default(),
        }
    }

    /// Queues one encoded event. `false` means the watch must end: the client has gone, its
    /// queue stayed full for [`BLOCKED_WATCHER_TIMEOUT`], or `deadline` (the watch's
    /// `timeoutSeconds`) passed while waiting.
    async fn push(&mut self, line: Bytes, deadline: tokio::time::Instant) -> bool {
        self.queue.bytes += line.len();
        self.queue.lines.push_back(line);
        if !self.queue.flush(&self.tx) {
            return false;
        }
        let until = deadline.min(tokio::time::Instant::now() + BLOCKED_WATCHER_TIMEOUT);
        while self.queue.full() {
            match tokio::time::timeout_at(until, self.queue.send_next(&self.tx)).await {
                Ok(true) => {}
                Ok(false) => return false,
                Err(_) => {
                    if tokio::time::Instant::now() < deadline {
                        tracing::info!(
                            queued = self.queue.lines.len(),
                            "ending a watch whose client has not read for {BLOCKED_WATCHER_TIMEOUT:?}"
                        );
                    }
                    return false;
                }
            }
        }
        true
    }
}

/// Resolves once the server shuts down ([`crate::cache::Cache::closing`]).
async fn server_closing(closing: &mut watch::Receiver<bool>) {
    loop {
        if *closing.borrow_and_update() {
            return;
        }
        if closing.changed().await.is_err() {
            // The cache is gone: nothing will ever close this watch this way.
            std::future::pending::<()>().await;
        }
    }
}

struct Encoder {
    rt: Arc<ResourceType>,
    /// The custom resource version's printer columns, for Tables.
    custom: Option<Arc<crate::crds::CustomVersion>>,
    format: Format,
    include: IncludeObject,
    columns_sent: bool,
}

impl Encoder {
    fn event(&mut self, kind: &str, obj: &Object) -> Bytes {
        match self.format {
            Format::Json | Format::Yaml | Format::Protobuf { .. } => {
                let mut b = BytesMut::with_capacity(obj.json.len() + 32);
                b.put_slice(b"{\"type\":\"");
                b.put_slice(kind.as_bytes());
                b.put_slice(b"\",\"object\":");
                b.put_slice(&obj.json);
                b.put_slice(b"}\n");
                b.freeze()
            }
            Format::Table { beta } => {
                let t = output::table(
                    &self.rt,
                    self.custom.as_ref().map(|c| c.columns.as_slice()),
                    &[&*obj.value()],
                    Some(obj.rv),
                    None,
                    self.include,
                    beta,
                    !self.columns_sent,
                );
                self.columns_sent = true;
                line(&json!({"type": kind, "object": t}))
            }
            Format::Metadata { beta } => {
                line(&json!({"type": kind, "object": output::partial_metadata(&obj.value(), beta)}))
            }
        }
    }

    fn bookmark(&self, rv: i64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = match self.format {
            Format::Table { beta } => {
                json!({"kind": "Table", "apiVersion": if beta { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" }, "metadata": meta, "columnDefinitions": [], "rows": []})
            }
            Format::Metadata { beta } => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": if beta { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" }, "metadata": meta})
            }
            _ => {
                json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta})
            }
        };
        line(&json!({"type": "BOOKMARK", "object": object}))
    }
}

fn line(v: &Value) -> Bytes {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// An ERROR watch event carrying a Status.
pub fn error_event(e: &ApiError) -> Bytes {
    line(&json!({"type": "ERROR", "object": e.status()}))
}

/// Starts a watch; returns the receiver of encoded event lines.
pub async fn start(
    state: Arc<State>,
    ctx: &Ctx,
    rt: Arc<ResourceType>,
    ns: Option<String>,
) -> ApiResult<mpsc::Receiver<Bytes>> {
    let q = &ctx.query;
    let filter = Filter::for_request(&state, &rt, q)?;
    let send_initial = q.bool("sendInitialEvents");
    let bookmarks = q.bool("allowWatchBookmarks");
    if send_initial && !bookmarks {
        return Err(ApiError::invalid(
            &rt,
            "",
            &[tandem_core::field::FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            )],
        ));
    }
    let timeout = q
        .int("timeoutSeconds")
        .map_err(ApiError::bad_request)?
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64))
        .unwrap_or(Duration::from_secs(1800));
    let from = match q.get("resourceVersion") {
        None | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(HANDED_OVER);
    if let Some(from) = from
        && from > state.cache.revision()
        && !state.cache.wait_for(from, Duration::from_secs(3)).await
    {
        let e = ApiError::timeout(format!(
            "Too large resource version: {from}, current: {}",
            state.cache.revision()
        ));
        let _ = tx.send(error_event(&e)).await;
        return Ok(rx);
    }
    let prefix = rt.namespace_prefix(ns.as_deref());
    let mut enc = Encoder {
        custom: state.registry.custom(&rt),
        rt: rt.clone(),
        format: ctx.format,
        include: IncludeObject::parse(q.get("includeObject")),
        columns_sent: false,
    };
    if !crate::cache::caches(&rt) {
        let watch = StoreWatch {
            rt,
            prefix,
            filter,
            from,
            send_initial,
            bookmarks,
            timeout,
        };
        return watch.start(state, enc, tx, rx).await;
    }
    let sub = match state.cache.subscribe(&rt, &prefix, from, send_initial) {
        Ok(s) => s,
        Err(WatchStartError::TooOld(rv)) => {
            let e = ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                state.cache.revision()
            ));
            let _ = tx.send(error_event(&e)).await;
            return Ok(rx);
        }
    };
    let mut closing = state.cache.closing();
    let by_webhook = state.converts_by_webhook(&rt);
    tokio::spawn(async move {
        let mut out = Outbox::new(tx);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_rv = sub.revision;
        let initial = match state.items_at_request_version(&rt, sub.initial).await {
            Ok(initial) => initial,
            Err(e) => {
                out.push(error_event(&e), deadline).await;
                return;
            }
        };
        for obj in &initial {
            if filter.accepts(&rt, obj) && !out.push(enc.event("ADDED", obj), deadline).await {
                return;
            }
        }
        if send_initial && !out.push(enc.bookmark(sub.revision, true), deadline).await {
            return;
        }
        for ev in &sub.backlog {
            last_rv = ev.rv();
            let ev = match at_request_version(&state, &rt, &filter, ev, by_webhook).await {
                Ok(ev) => ev,
                Err(e) => {
                    out.push(error_event(&e), deadline).await;
                    return;
                }
            };
            if let Some(b) = translate(&rt, &filter, &ev, &mut enc)
                && !out.push(b, deadline).await
            {
                return;
            }
        }
        let mut live = sub.live;
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        let type_prefix = rt.key_prefix();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = out.tx.closed() => return,
                sent = out.queue.send_next(&out.tx), if !out.queue.is_empty() => if !sent { return },
                _ = server_closing(&mut closing) => return,
                _ = ticker.tick(), if bookmarks => {
                    let rv = state.cache.revision().max(last_rv);
                    if !out.push(enc.bookmark(rv, false), deadline).await { return; }
                }
                msg = live.recv() => match msg {
                    Ok(ev) => {
                        if ev.rv() <= last_rv || *ev.type_prefix != *type_prefix || !ev.object.key.starts_with(&prefix) {
                            continue;
                        }
                        last_rv = ev.rv();
                        let ev = match at_request_version(&state, &rt, &filter, &ev, by_webhook).await {
                            Ok(ev) => ev,
                            Err(e) => {
                                out.push(error_event(&e), deadline).await;
                                return;
                            }
                        };
                        if let Some(b) = translate(&rt, &filter, &ev, &mut enc)
                            && !out.push(b, deadline).await { return; }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::gone(format!("too old resource version: {last_rv} ({})", state.cache.revision()));
                        out.push(error_event(&e), deadline).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    Ok(rx)
}

/// `ev` with its objects at the version `rt` serves, when `by_webhook` (a custom resource
/// whose CRD converts with a webhook): the object, and the previous one when selectors may
/// make the watcher see it (a DELETED for an object that stops matching). Otherwise `ev` as
/// it is.
async fn at_request_version(
    state: &State,
    rt: &ResourceType,
    filter: &Filter,
    ev: &Arc<CacheEvent>,
    by_webhook: bool,
) -> ApiResult<Arc<CacheEvent>> {
    if !by_webhook {
        return Ok(ev.clone());
    }
    let mut objects = vec![ev.object.clone()];
    let with_prev = !filter.is_empty() && ev.prev.is_some();
    if let Some(prev) = ev.prev.as_ref().filter(|_| with_prev) {
        objects.push(prev.clone());
    }
    let mut converted = state
        .items_at_request_version(rt, objects)
        .await?
        .into_iter();
    let object = converted.next().unwrap_or_else(|| ev.object.clone());
    let prev = if with_prev {
        converted.next()
    } else {
        ev.prev.clone()
    };
    Ok(Arc::new(CacheEvent {
        type_prefix: ev.type_prefix.clone(),
        kind: ev.kind,
        object,
        prev,
    }))
}

/// A watch of a type the cache does not keep ([`crate::cache::caches`]: events), fed by the
/// store's own watch: the initial objects, when asked for, from a store list at the current
/// revision, then the store's changes after it, with the same selector semantics as a cached
/// watch. A revision older than the store's history is `410 Gone`, as is a watcher that falls
/// behind the store's buffer.
struct StoreWatch {
    rt: Arc<ResourceType>,
    prefix: String,
    filter: Filter,
    from: Option<Revision>,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
}

impl StoreWatch {
    async fn start(
        self,
        state: Arc<State>,
        mut enc: Encoder,
        tx: mpsc::Sender<Bytes>,
        rx: mpsc::Receiver<Bytes>,
    ) -> ApiResult<mpsc::Receiver<Bytes>> {
        let (initial, after) = match self.from {
            Some(from) if !self.send_initial => (Vec::new(), from),
            _ => {
                let rev = state.store.current_revision();
                let (items, _, _) = state
                    .list_from_store(&self.rt, &self.prefix, None, None, rev, &self.filter)
                    .await?;
                (items, rev)
            }
        };
        let mut stream = match state.store.watch(&self.prefix, after) {
            Ok(stream) => stream,
            Err(StoreError::Compacted { .. }) => {
                let e = ApiError::gone(format!(
                    "too old resource version: {after} ({})",
                    state.store.current_revision()
                ));
                let _ = tx.send(error_event(&e)).await;
                return Ok(rx);
            }
            Err(e) => return Err(e.into()),
        };
        let type_prefix: Arc<str> = Arc::from(self.rt.key_prefix());
        let mut closing = state.cache.closing();
        tokio::spawn(async move {
            let StoreWatch {
                rt,
                filter,
                send_initial,
                bookmarks,
                timeout,
                ..
            } = self;
            let mut out = Outbox::new(tx);
            let deadline = tokio::time::Instant::now() + timeout;
            for obj in &initial {
                if !out.push(enc.event("ADDED", obj), deadline).await {
                    return;
                }
            }
            if send_initial && !out.push(enc.bookmark(after, true), deadline).await {
                return;
            }
            let mut last_rv = after;
            let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return,
                    _ = out.tx.closed() => return,
                sent = out.queue.send_next(&out.tx), if !out.queue.is_empty() => if !sent { return },
                    _ = server_closing(&mut closing) => return,
                    _ = ticker.tick(), if bookmarks => {
                        if !out.push(enc.bookmark(last_rv, false), deadline).await { return; }
                    }
                    item = stream.next() => match item {
                        Some(Ok(ev)) => {
                            last_rv = ev.revision();
                            if let Some(cev) = cache_event(&type_prefix, &ev)
                                && let Some(b) = translate(&rt, &filter, &cev, &mut enc)
                                && !out.push(b, deadline).await { return; }
                        }
                        Some(Err(_)) => {
                            let e = ApiError::gone(format!("too old resource version: {last_rv} ({})", state.store.current_revision()));
                            out.push(error_event(&e), deadline).await;
                            return;
                        }
                        None => return,
                    }
                }
            }
        });
        Ok(rx)
    }
}

/// A store change as a cache event, for [`translate`]; `None` for a value that is not JSON.
pub(crate) fn cache_event(type_prefix: &Arc<str>, ev: &StoreEvent) -> Option<CacheEvent> {
    let (kind, object, prev) = match ev {
        StoreEvent::Put { kv, prev } => {
            let prev = prev.as_ref().and_then(Object::from_kv).map(Arc::new);
            let kind = if prev.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            (kind, Object::from_kv(kv)?, prev)
        }
        StoreEvent::Delete { prev, revision } => (
            EventType::Deleted,
            Object::from_stored(&prev.key, &prev.value, *revision)?,
            Object::from_kv(prev).map(Arc::new),
        ),
    };
    Some(CacheEvent {
        type_prefix: type_prefix.clone(),
        kind,
        object: Arc::new(object),
        prev,
    })
}

/// Turns a cache event into what this watcher sees: a MODIFIED object that stops matching the
/// selectors is a DELETED, one that starts matching is an ADDED (upstream cacher semantics).
fn translate(
    rt: &ResourceType,
    filter: &Filter,
    ev: &CacheEvent,
    enc: &mut Encoder,
) -> Option<Bytes> {
    let now = filter.accepts(rt, &ev.object);
    match ev.kind {
        EventType::Added => now.then(|| enc.event("ADDED", &ev.object)),
        EventType::Deleted => {
            let before = ev
                .prev
                .as_ref()
                .map(|p| filter.accepts(rt, p))
                .unwrap_or(now);
            before.then(|| enc.event("DELETED", &ev.object))
        }
        EventType::Modified => {
            let before = ev
                .prev
                .as_ref()
                .map(|p| filter.accepts(rt, p))
                .unwrap_or(true);
            match (before, now) {
                (true, true) => Some(enc.event("MODIFIED", &ev.object)),
                (false, true) => Some(enc.event("ADDED", &ev.object)),
                (true, false) => {
                    // Upstream's cacher sends the last state the watcher saw (the old object),
                    // stamped with the resourceVersion of the change that made it leave.
                    let prev = ev.prev.as_ref()?;
                    let mut value = prev.to_value()?;
                    crate::cache::set_resource_version(&mut value, ev.rv());
                    let json = bytes::Bytes::from(serde_json::to_vec(&value).ok()?);
                    Some(enc.event(
                        "DELETED",
                        &Object::with_value(prev.key.clone(), ev.rv(), value, json),
                    ))
                }
                (false, false) => None,
            }
        }
    }
}
