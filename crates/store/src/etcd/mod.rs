//! The etcd v3 backend: every key is the etcd key of the same bytes, every revision is etcd's.
//!
//! This is how kube-apiserver's `storage/etcd3` store uses etcd, and tandem follows it so that
//! resourceVersions are etcd revisions: a create is a transaction "create revision is 0 → put";
//! an update or delete is "modification revision is the expected one → put/delete (with the
//! previous value), else read the key" so a failed condition tells `NotFound` from `Conflict`
//! without a second round trip; lists are ranges at a revision, with a limit. Watches are etcd
//! watches from `after + 1` with previous values (module `watch`). History is compacted by a
//! background compactor coordinated through etcd itself, as kube-apiserver's is (module
//! `compactor`).
//!
//! Revisions known locally: [`Store::current_revision`] is synchronous, so the store keeps the
//! newest revision it has seen in an atomic, advanced by every response header and by a
//! background watch of the whole keyspace (so writes by another tandem server on the same etcd
//! advance it too, a moment later). [`Store::latest_revision`] asks etcd (a quorum read) and is
//! exact. The compacted revision is learnt at connect (a search with reads at old revisions),
//! from this store's compactions, and from other servers' compactor records seen by the
//! background watch.
//!
//! Durability: etcd answers a write only after its raft log entry is committed on a quorum and
//! applied (each member fsyncs its log before acknowledging); a write's future resolves `Ok`
//! only after that answer.

mod compactor;
mod error;
mod watch;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::proto::{PbKeyValue, PbRangeResponse, PbResponseHeader, PbTxnOpResponse};
use etcd_client::{
    Certificate, Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions,
    GetOptions, Identity, KvClient, PutOptions, TlsOptions, Txn, TxnOp, TxnResponse, WatchClient,
};
use tokio::task::JoinHandle;

pub use self::error::EtcdError;
use crate::{KeyValue, ListResult, Result, Revision, Store, StoreError, WatchStream};

/// The key through which API servers sharing one etcd take turns compacting it; its value is the
/// last compacted revision and its version counts compaction rounds. kube-apiserver's name
/// (`compactRevKey` in `storage/etcd3/compact.go`), outside the `/registry/` keyspace.
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// Largest message accepted from etcd: a list without a limit or a watch batch can exceed
/// tonic's 4 MiB default. kube-apiserver raises gRPC's limit the same way (`MaxCallRecvMsgSize`
/// of `math.MaxInt32`).
const MAX_MESSAGE_BYTES: usize = i32::MAX as usize;

/// Longest wait for one TCP (and TLS) connection to a member; a request whose connection fails
/// is retried (see [`with_retries`]), likely on another member.
const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach etcd and how the store behaves on it. `Default` suits the API server except for
/// `endpoints`, which must be set.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Client URLs of the etcd members, e.g. `http://127.0.0.1:2379` or `https://10.0.0.1:2379`
    /// (kube-apiserver's `--etcd-servers`). Requests are balanced over the members that answer.
    pub endpoints: Vec<String>,
    /// PEM file of the CA that signed the etcd servers' certificates (`--etcd-cafile`); required
    /// for `https` endpoints (no system roots are loaded).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate presented to etcd (`--etcd-certfile`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file` (`--etcd-keyfile`).
    pub key_file: Option<PathBuf>,
    /// How long [`EtcdStore::connect`] waits for etcd to answer before failing. Default 20 s, as
    /// kube-apiserver's etcd client dial timeout.
    pub dial_timeout: Duration,
    /// How long one request may wait for an answer before failing with a timeout (a write that
    /// timed out may still have been applied). Default 30 s.
    pub request_timeout: Duration,
    /// How often the background compactor runs (kube-apiserver's `--etcd-compaction-interval`,
    /// default 5 minutes); each round compacts up to the revision seen by the previous round, so
    /// one to two intervals of history are kept. `None` disables it (then only explicit
    /// [`Store::compact`] calls, or etcd's own `--auto-compaction-*`, remove history).
    pub compaction_interval: Option<Duration>,
    /// Watch events buffered for a slow watcher before its stream ends with `WatchLagged`.
    /// Default 1,024.
    pub watch_buffer: usize,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            endpoints: Vec::new(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            dial_timeout: Duration::from_secs(20),
            request_timeout: Duration::from_secs(30),
            compaction_interval: Some(Duration::from_secs(5 * 60)),
            watch_buffer: 1_024,
        }
    }
}

/// The revisions this store has learnt; reading them is one atomic load. Both only grow.
#[derive(Debug, Default)]
pub(crate) struct Revisions {
    current: AtomicI64,
    compacted: AtomicI64,
}

impl Revisions {
    /// Records a revision etcd reported (a response header, a watch event).
    fn observe(&self, revision: Revision) {
        self.current.fetch_max(revision, Ordering::SeqCst);
    }

    /// Records that etcd has compacted at least up to `revision`.
    fn observe_compacted(&self, revision: Revision) {
        self.compacted.fetch_max(revision, Ordering::SeqCst);
    }

    fn current(&self) -> Revision {
        self.current.load(Ordering::SeqCst)
    }

    fn compacted(&self) -> Revision {
        self.compacted.load(Ordering::SeqCst)
    }
}

/// The etcd [`Store`] backend.
///
/// Cheap to clone: clones share one gRPC connection pool, the revision follower and the
/// compactor, which stop when the last clone is dropped. Several `EtcdStore`s, in one process or
/// in several tandem servers, may use one etcd at the same time: etcd orders their writes.
///
/// Pitfall: a write whose future is dropped, or that fails with a timeout or a lost connection,
/// may still have been applied by etcd; only an `Ok` result promises that it was.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    kv: KvClient,
    watch: WatchClient,
    /// The endpoints, joined, for messages.
    endpoints: String,
    request_timeout: Duration,
    watch_buffer: usize,
    revisions: Arc<Revisions>,
    /// Dropped with the store: watch streams then end with `Closed`.
    shutdown: tokio::sync::watch::Sender<()>,
    /// The revision follower and the compactor; aborted with the store.
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl EtcdStore {
    /// Connects to etcd and checks that it answers within `options.dial_timeout`; learns the
    /// current and compacted revisions; starts the revision follower and, when
    /// `options.compaction_interval` is set, the compactor. Must run inside a tokio runtime,
    /// which the store's background tasks then use.
    pub async fn connect(options: EtcdOptions) -> Result<EtcdStore> {
        if options.endpoints.is_empty() {
            return Err(EtcdError::NoEndpoints.into());
        }
        let endpoints = options.endpoints.join(",");
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(options.dial_timeout.min(CONNECT_ATTEMPT_TIMEOUT))
            // kube-apiserver's keepalive (30 s, 10 s) finds dead connections under idle watches;
            // etcd refuses pings more often than every 5 s.
            .with_keep_alive(Duration::from_secs(30), Duration::from_secs(10))
            // A member cut off from its cluster answers "no leader" at once instead of serving
            // stale watches, as kube-apiserver's `WithRequireLeader` contexts do.
            .with_require_leader(true);
        if let Some(tls) = tls_options(&options)? {
            connect = connect.with_tls(tls);
        }
        let client = tokio::time::timeout(
            options.dial_timeout,
            Client::connect(&options.endpoints, Some(connect)),
        )
        .await
        .map_err(|_| EtcdError::Unreachable {
            endpoints: endpoints.clone(),
            timeout: options.dial_timeout,
        })?
        .map_err(|source| EtcdError::Client {
            endpoints: endpoints.clone(),
            source,
        })?;
        let kv = client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let watch = client
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES);

        // The first request proves etcd answers (an etcd still starting gets until the dial
        // timeout), and reads the compactor's record.
        let probe = with_retries(options.dial_timeout, "range", || {
            let mut kv = kv.clone();
            async move { kv.get(COMPACT_REV_KEY, None).await }
        })
        .await
        .map_err(|e| match e {
            CallError::Etcd(_, source) => EtcdError::Connect {
                endpoints: endpoints.clone(),
                source,
            },
            CallError::Timeout(..) => EtcdError::Unreachable {
                endpoints: endpoints.clone(),
                timeout: options.dial_timeout,
            },
        })?
        .0;
        let current = header_revision(probe.header.as_ref(), "range")?;
        let recorded = match probe.kvs.first() {
            Some(kv) => compactor::parse_record(kv)?,
            None => 0,
        };
        let compacted = tokio::time::timeout(
            options.request_timeout,
            compactor::find_compacted(&kv, current, recorded, options.request_timeout),
        )
        .await
        .map_err(|_| EtcdError::Timeout {
            op: "search for the compacted revision",
            timeout: options.request_timeout,
        })??;
        tracing::info!(%endpoints, current, compacted, "connected to etcd");

        let revisions = Arc::new(Revisions::default());
        revisions.observe(current);
        revisions.observe_compacted(compacted);
        let (shutdown, _) = tokio::sync::watch::channel(());
        let mut tasks = vec![tokio::spawn(watch::follow_revisions(
            watch.clone(),
            kv.clone(),
            Arc::clone(&revisions),
            current,
        ))];
        if let Some(interval) = options.compaction_interval {
            tasks.push(tokio::spawn(compactor::run(
                kv.clone(),
                Arc::clone(&revisions),
                interval,
                options.request_timeout,
            )));
        }
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                kv,
                watch,
                endpoints,
                request_timeout: options.request_timeout,
                watch_buffer: options.watch_buffer.max(1),
                revisions,
                shutdown,
                tasks,
            }),
        })
    }

    /// The endpoints this store was connected to, comma-separated.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// Runs a range request (see [`with_retries`]).
    async fn range(
        &self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> std::result::Result<PbRangeResponse, CallError> {
        let key = key.into();
        let answer = with_retries(self.inner.request_timeout, "range", || {
            let (mut kv, key, options) = (self.inner.kv.clone(), key.clone(), options.clone());
            async move { kv.get(key, options).await }
        })
        .await?;
        Ok(answer.0)
    }

    /// Runs a transaction and returns its parts, recording the revision it ran at.
    async fn txn(&self, op: &'static str, txn: Txn) -> Result<TxnAnswer> {
        let TxnResponse(answer) = with_retries(self.inner.request_timeout, op, || {
            let (mut kv, txn) = (self.inner.kv.clone(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await?;
        let revision = header_revision(answer.header.as_ref(), op)?;
        self.inner.revisions.observe(revision);
        let first = answer
            .responses
            .into_iter()
            .next()
            .and_then(|op| op.response);
        Ok(TxnAnswer {
            succeeded: answer.succeeded,
            revision,
            first,
        })
    }

    /// A failed conditional update or delete: the key is gone, or it changed.
    fn condition_failed(
        &self,
        op: &'static str,
        key: &str,
        expected: Option<Revision>,
        answer: Option<PbTxnOpResponse>,
    ) -> StoreError {
        let Some(PbTxnOpResponse::ResponseRange(range)) = answer else {
            return bad_response(op, "the failed transaction did not read the key");
        };
        match (range.kvs.first(), expected) {
            (None, _) => StoreError::NotFound(key.to_owned()),
            (Some(found), Some(expected)) => StoreError::Conflict {
                key: key.to_owned(),
                expected,
                actual: found.mod_revision,
            },
            // Unconditional writes only fail when the key is missing.
            (Some(_), None) => bad_response(op, "the key exists but the transaction failed"),
        }
    }
}

/// Runs a request, made anew by `request` for each attempt, within `timeout`. Attempts that
/// failed to connect (a member is down: the client balances requests over all endpoints, dead
/// ones included) never reached etcd, so they are retried, after a short backoff, and likely on
/// another member; any other failure is final, since a write may have been applied. When
/// `timeout` passes after failed connects, the last connect error is the answer.
pub(crate) async fn with_retries<T, F, Fut>(
    timeout: Duration,
    op: &'static str,
    mut request: F,
) -> std::result::Result<T, CallError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut unsent = None;
    let attempts = async {
        let mut backoff = Duration::from_millis(10);
        loop {
            match request().await {
                Err(e) if never_sent(&e) => {
                    tracing::debug!(error = %e, op, "etcd request could not connect; retrying");
                    unsent = Some(e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    };
    match tokio::time::timeout(timeout, attempts).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(source)) => Err(CallError::Etcd(op, source)),
        Err(_) => Err(match unsent {
            Some(source) => CallError::Etcd(op, source),
            None => CallError::Timeout(op, timeout),
        }),
    }
}

/// Whether a request failed while connecting, before anything was sent.
fn never_sent(error: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = error else {
        return false;
    };
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<tonic::ConnectError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// What the first operation of a transaction's chosen branch answered.
struct TxnAnswer {
    succeeded: bool,
    revision: Revision,
    first: Option<PbTxnOpResponse>,
}

/// A request that failed before any answer could be read.
pub(crate) enum CallError {
    Etcd(&'static str, etcd_client::Error),
    Timeout(&'static str, Duration),
}

impl From<CallError> for StoreError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Etcd(op, source) => EtcdError::Request { op, source }.into(),
            CallError::Timeout(op, timeout) => EtcdError::Timeout { op, timeout }.into(),
        }
    }
}

/// Reads the TLS files named in `options` (kube-apiserver's `--etcd-cafile/--etcd-certfile/
/// --etcd-keyfile`); `None` when none is named.
fn tls_options(options: &EtcdOptions) -> Result<Option<TlsOptions>> {
    let https = options.endpoints.iter().any(|e| e.starts_with("https://"));
    if options.ca_file.is_none() && options.cert_file.is_none() && options.key_file.is_none() {
        if https {
            return Err(EtcdError::Tls("https endpoints need a CA file").into());
        }
        return Ok(None);
    }
    if !https {
        return Err(EtcdError::Tls("TLS files were given but no endpoint is https").into());
    }
    let Some(ca) = &options.ca_file else {
        return Err(EtcdError::Tls("https endpoints need a CA file").into());
    };
    let identity = match (&options.cert_file, &options.key_file) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(EtcdError::Tls("a client certificate and its key go together").into());
        }
    };
    let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca, "CA")?));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(
            read(cert, "client certificate")?,
            read(key, "client key")?,
        ));
    }
    Ok(Some(tls))
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| {
        EtcdError::ReadFile {
            what,
            path: path.to_owned(),
            source,
        }
        .into()
    })
}

/// The revision in a response header, which etcd always sends.
fn header_revision(header: Option<&PbResponseHeader>, op: &'static str) -> Result<Revision> {
    header
        .map(|h| h.revision)
        .ok_or_else(|| bad_response(op, "no response header"))
}

fn bad_response(op: &'static str, detail: impl Into<String>) -> StoreError {
    EtcdError::BadResponse {
        op,
        detail: detail.into(),
    }
    .into()
}

/// An etcd key-value as the store's; keys must be UTF-8 (tandem writes only such keys).
fn key_value(kv: PbKeyValue, op: &'static str) -> Result<KeyValue> {
    let key = String::from_utf8(kv.key)
        .map_err(|e| bad_response(op, format!("key is not UTF-8: {e}")))?;
    Ok(KeyValue {
        key,
        value: Bytes::from(kv.value),
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    })
}

/// The first key after every key starting with `prefix` (etcd's `GetPrefixRangeEnd`); `\0`
/// (meaning "to the end") when there is none.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// The etcd range `[start, end)` of the keys under `prefix` strictly after `start_after`.
fn key_range(prefix: &str, start_after: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    // etcd refuses an empty key; `\0` is the smallest key there is.
    let mut start = if prefix.is_empty() {
        vec![0]
    } else {
        prefix.as_bytes().to_vec()
    };
    if let Some(after) = start_after {
        let mut next = after.as_bytes().to_vec();
        next.push(0);
        start = start.max(next);
    }
    (start, prefix_end(prefix.as_bytes()))
}

#[async_trait::async_trait]
impl Store for EtcdStore {
    fn current_revision(&self) -> Revision {
        self.inner.revisions.current()
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.revisions.compacted()
    }

    /// A quorum read (a linearizable count of one key) whose header carries the cluster's
    /// current revision, including writes by other servers not yet seen by this one.
    async fn latest_revision(&self) -> Result<Revision> {
        let answer = self
            .range(COMPACT_REV_KEY, Some(GetOptions::new().with_count_only()))
            .await?;
        let revision = header_revision(answer.header.as_ref(), "range")?;
        self.inner.revisions.observe(revision);
        Ok(revision)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let answer = self.range(key, None).await?;
        self.inner
            .revisions
            .observe(header_revision(answer.header.as_ref(), "range")?);
        answer
            .kvs
            .into_iter()
            .next()
            .map(|kv| key_value(kv, "range"))
            .transpose()
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: Option<usize>,
        revision: Option<Revision>,
    ) -> Result<ListResult> {
        let (start, end) = key_range(prefix, start_after);
        let mut options = GetOptions::new().with_range(end);
        if let Some(limit) = limit {
            // One more than asked tells whether more remain (etcd's limit 0 means none).
            options = options.with_limit(i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1);
        }
        if let Some(revision) = revision {
            options = options.with_revision(revision);
        }
        let answer = match self.range(start, Some(options)).await {
            Ok(answer) => answer,
            Err(CallError::Etcd(_, e)) if error::is_compacted(&e) => {
                let requested = revision.unwrap_or_default();
                // etcd says only that `requested` is gone: the compaction is at least one newer.
                self.inner.revisions.observe_compacted(requested + 1);
                return Err(StoreError::Compacted {
                    requested,
                    compacted: self.compacted_revision(),
                });
            }
            Err(CallError::Etcd(_, e)) if error::is_future_revision(&e) => {
                return Err(StoreError::FutureRevision {
                    requested: revision.unwrap_or_default(),
                    current: self.current_revision(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let at = header_revision(answer.header.as_ref(), "range")?;
        self.inner.revisions.observe(at);
        let mut items = answer
            .kvs
            .into_iter()
            .map(|kv| key_value(kv, "range"))
            .collect::<Result<Vec<_>>>()?;
        let more = limit.is_some_and(|l| items.len() > l);
        if let Some(l) = limit {
            items.truncate(l);
        }
        Ok(ListResult {
            items,
            revision: revision.unwrap_or(at),
            more,
        })
    }

    async fn count(&self, prefix: &str) -> Result<usize> {
        let (start, end) = key_range(prefix, None);
        let options = GetOptions::new().with_range(end).with_count_only();
        let answer = self.range(start, Some(options)).await?;
        self.inner
            .revisions
            .observe(header_revision(answer.header.as_ref(), "range")?);
        usize::try_from(answer.count).map_err(|_| bad_response("range", "negative count"))
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.to_vec(), None)]);
        let answer = self.txn("create", txn).await?;
        if !answer.succeeded {
            return Err(StoreError::AlreadyExists(key.to_owned()));
        }
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: answer.revision,
            mod_revision: answer.revision,
        })
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<KeyValue> {
        // "Exists" is checked on its own: a missing key's modification revision compares as 0.
        let mut when = vec![Compare::create_revision(key, CompareOp::Greater, 0)];
        when.extend(expected.map(|r| Compare::mod_revision(key, CompareOp::Equal, r)));
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::put(
                key,
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = self.txn("update", txn).await?;
        if !answer.succeeded {
            return Err(self.condition_failed("update", key, expected, answer.first));
        }
        let Some(PbTxnOpResponse::ResponsePut(put)) = answer.first else {
            return Err(bad_response("update", "no put answer"));
        };
        let prev = put
            .prev_kv
            .ok_or_else(|| bad_response("update", "no previous value"))?;
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: prev.create_revision,
            mod_revision: answer.revision,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        let mut when = vec![Compare::create_revision(key, CompareOp::Greater, 0)];
        when.extend(expected.map(|r| Compare::mod_revision(key, CompareOp::Equal, r)));
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::delete(
                key,
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = self.txn("delete", txn).await?;
        if !answer.succeeded {
            return Err(self.condition_failed("delete", key, expected, answer.first));
        }
        let Some(PbTxnOpResponse::ResponseDeleteRange(deleted)) = answer.first else {
            return Err(bad_response("delete", "no delete answer"));
        };
        let prev = deleted
            .prev_kvs
            .into_iter()
            .next()
            .ok_or_else(|| bad_response("delete", "no previous value"))?;
        key_value(prev, "delete")
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let compacted = self.compacted_revision();
        if after < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted,
            });
        }
        Ok(watch::start(watch::WatchRequest {
            client: self.inner.watch.clone(),
            revisions: Arc::clone(&self.inner.revisions),
            prefix: prefix.to_owned(),
            after,
            buffer: self.inner.watch_buffer,
            timeout: self.inner.request_timeout,
            shutdown: self.inner.shutdown.subscribe(),
        }))
    }

    /// Compacts etcd's history at `revision` and waits until etcd has removed it from its
    /// database (a physical compaction). A revision at or below the compacted one is a no-op;
    /// one above the current revision fails with `FutureRevision`. Unlike the background
    /// compactor this writes no record, so it consumes no revision.
    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= self.compacted_revision() {
            return Ok(());
        }
        let compacted = with_retries(self.inner.request_timeout, "compact", || {
            let mut kv = self.inner.kv.clone();
            async move {
                kv.compact(revision, Some(CompactionOptions::new().with_physical()))
                    .await
            }
        });
        match compacted.await {
            Ok(answer) => {
                if let Some(header) = answer.0.header.as_ref() {
                    self.inner.revisions.observe(header.revision);
                }
                self.inner.revisions.observe_compacted(revision);
                Ok(())
            }
            // Someone compacted this far already.
            Err(CallError::Etcd(_, e)) if error::is_compacted(&e) => {
                self.inner.revisions.observe_compacted(revision);
                Ok(())
            }
            Err(CallError::Etcd(_, e)) if error::is_future_revision(&e) => {
                Err(StoreError::FutureRevision {
                    requested: revision,
                    current: self.latest_revision().await?,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_end(b""), [0]);
    }

    #[test]
    fn key_range_starts_after_start_after_but_never_before_the_prefix() {
        assert_eq!(key_range("/p/", None), (b"/p/".to_vec(), b"/p0".to_vec()));
        assert_eq!(
            key_range("/p/", Some("/p/007")),
            (b"/p/007\0".to_vec(), b"/p0".to_vec())
        );
        assert_eq!(
            key_range("/p/", Some("/a")),
            (b"/p/".to_vec(), b"/p0".to_vec())
        );
        assert_eq!(key_range("", None), (vec![0], vec![0]));
    }
}
