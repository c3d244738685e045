//! Bounds on the requests the API server serves at once, and who waits when they are reached:
//! the essence of kube-apiserver's API Priority and Fairness (`k8s.io/apiserver/pkg/util/
//! flowcontrol`, the `WithPriorityAndFairness` filter) and, with it switched off, the older
//! max-in-flight filter (`WithMaxInFlightLimit`).
//!
//! With priority and fairness (the default, as upstream's `--enable-priority-and-fairness`), the
//! server's concurrency limit is `--max-requests-inflight` + `--max-mutating-requests-inflight`
//! (400 + 200 by default). Each request is classified by the first matching FlowSchema of
//! upstream's mandatory and suggested configuration (`system:masters` exempt, node agents'
//! Node and Lease writes at `node-high`, leader election at `leader-election`, the scheduler,
//! the controller manager and kube-system ServiceAccounts at `workload-high`, other
//! ServiceAccounts at `workload-low`, everyone else at `global-default`). Each priority level
//! owns `ceil(limit × nominalConcurrencyShares / Σ shares)` seats, so a flood at one level never
//! takes another level's seats. A request that finds its level full waits in one of the
//! level's queues, chosen by shuffle sharding of its flow (the user, or the namespace for the
//! controller manager and scheduler) as upstream deals a hand of queues and takes the shortest;
//! a freed seat goes to the next queue in round-robin order, so one abusive flow cannot starve
//! another. A request whose queue is full, or that waited longer than the queue wait (upstream:
//! a quarter of the request timeout, 15 s), gets `429 TooManyRequests` with `Retry-After: 1`.
//!
//! Without priority and fairness, read-only and mutating requests have separate bounds (0 is
//! unbounded), nothing waits, and `system:masters` is never refused, as `WithMaxInFlightLimit`.
//!
//! Long-running requests (watches; `log`, `exec`, `attach`, `portforward` and `proxy`
//! subresources) are not counted, as upstream's `BasicLongRunningRequestCheck` decides (upstream
//! holds a seat while a watch initialises; tandem's watch start is served from the cache).
//!
//! Simplifications, stated: every request costs one seat (upstream's work estimator charges
//! wide LISTs more); levels do not lend or borrow seats; the FlowSchema and
//! PriorityLevelConfiguration objects are built in, not served by the API; the 429 body is a
//! `Status` whose message is upstream's plain-text body.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::oneshot;

use crate::auth::UserInfo;
use crate::auth::authz::Attributes;
use crate::error::ApiError;

/// Upstream's `--max-requests-inflight` default.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// Upstream's `--max-mutating-requests-inflight` default.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;
/// How long a request may wait for a seat: upstream's a quarter of the 60 s request timeout.
pub const DEFAULT_QUEUE_WAIT: Duration = Duration::from_secs(15);
/// The `Retry-After` upstream's filters send with a 429.
pub const RETRY_AFTER_SECONDS: i64 = 1;

/// The response headers naming the matched FlowSchema and priority level (by UID, as upstream,
/// so that the names an administrator chose are not shown).
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// The server's flow-control flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowControlConfig {
    /// `--max-requests-inflight`: with priority and fairness, summed with the mutating bound into
    /// the server's concurrency limit; without, the bound on read-only requests (0: none).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight`: as above, for mutating requests.
    pub max_mutating_requests_inflight: usize,
    /// `--enable-priority-and-fairness`.
    pub priority_and_fairness: bool,
    /// How long a request may wait in its level's queue before a 429 (tandem's
    /// `--flow-control-queue-wait`; zero refuses at once instead of queuing).
    pub queue_wait: Duration,
}

impl Default for FlowControlConfig {
    fn default() -> Self {
        FlowControlConfig {
            max_requests_inflight: DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            priority_and_fairness: true,
            queue_wait: DEFAULT_QUEUE_WAIT,
        }
    }
}

/// Whether a request is long-running and so outside the bounds (upstream's
/// `BasicLongRunningRequestCheck` with verbs `watch`, `proxy` and the subresources `attach`,
/// `exec`, `proxy`, `log`, `portforward`).
pub fn is_long_running(attrs: &Attributes) -> bool {
    attrs.resource_request
        && (matches!(attrs.verb.as_str(), "watch" | "proxy")
            || matches!(
                attrs.subresource.as_str(),
                "attach" | "exec" | "proxy" | "log" | "portforward"
            ))
}

/// Whether upstream's filters count a request as mutating (any verb but get, list and watch).
pub fn is_mutating(attrs: &Attributes) -> bool {
    !matches!(attrs.verb.as_str(), "get" | "list" | "watch")
}

/// How a FlowSchema splits its requests into flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Distinguisher {
    ByUser,
    ByNamespace,
    None,
}

/// A built-in FlowSchema: a name, the priority level its requests go to, and its rule.
struct FlowSchema {
    name: &'static str,
    level: &'static str,
    distinguisher: Distinguisher,
    matches: fn(&UserInfo, &Attributes) -> bool,
}

const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
const KUBE_SYSTEM_SA_PREFIX: &str = "system:serviceaccount:kube-system:";

fn is_leader_election_object(a: &Attributes) -> bool {
    a.resource_request
        && matches!(a.verb.as_str(), "get" | "create" | "update")
        && ((a.api_group.is_empty() && matches!(a.resource.as_str(), "endpoints" | "configmaps"))
            || (a.api_group == "coordination.k8s.io" && a.resource == "leases"))
}

/// Upstream's mandatory and suggested FlowSchemas (`k8s.io/apiserver/pkg/apis/flowcontrol/
/// bootstrap`), in order of matching precedence. The `probes` schema is left out: `/healthz`,
/// `/livez` and `/readyz` are answered before authentication and never counted.
static FLOW_SCHEMAS: &[FlowSchema] = &[
    FlowSchema {
        name: "exempt",
        level: "exempt",
        distinguisher: Distinguisher::None,
        matches: |u, _| u.in_group(crate::auth::MASTERS),
    },
    FlowSchema {
        name: "system-leader-election",
        level: "leader-election",
        distinguisher: Distinguisher::ByUser,
        matches: |u, a| {
            (matches!(
                u.name.as_str(),
                "system:kube-controller-manager" | "system:kube-scheduler"
            ) || u.name.starts_with(KUBE_SYSTEM_SA_PREFIX))
                && a.namespace == "kube-system"
                && is_leader_election_object(a)
        },
    },
    FlowSchema {
        name: "workload-leader-election",
        level: "leader-election",
        distinguisher: Distinguisher::ByUser,
        matches: |u, a| {
            u.name.starts_with(KUBE_SYSTEM_SA_PREFIX)
                && a.resource_request
                && a.api_group == "coordination.k8s.io"
                && a.resource == "leases"
                && matches!(a.verb.as_str(), "get" | "create" | "update")
        },
    },
    FlowSchema {
        name: "system-node-high",
        level: "node-high",
        distinguisher: Distinguisher::ByUser,
        matches: |u, a| {
            u.in_group(crate::auth::NODES)
                && a.resource_request
                && ((a.api_group.is_empty() && a.resource == "nodes")
                    || (a.api_group == "coordination.k8s.io" && a.resource == "leases"))
        },
    },
    FlowSchema {
        name: "system-nodes",
        level: "system",
        distinguisher: Distinguisher::ByUser,
        matches: |u, _| u.in_group(crate::auth::NODES),
    },
    FlowSchema {
        name: "kube-controller-manager",
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |u, _| u.name == "system:kube-controller-manager",
    },
    FlowSchema {
        name: "kube-scheduler",
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |u, _| u.name == "system:kube-scheduler",
    },
    FlowSchema {
        name: "kube-system-service-accounts",
        level: "workload-high",
        distinguisher: Distinguisher::ByNamespace,
        matches: |u, _| u.name.starts_with(KUBE_SYSTEM_SA_PREFIX),
    },
    FlowSchema {
        name: "service-accounts",
        level: "workload-low",
        distinguisher: Distinguisher::ByUser,
        matches: |u, _| {
            u.in_group("system:serviceaccounts") || u.name.starts_with(SERVICE_ACCOUNT_PREFIX)
        },
    },
    FlowSchema {
        name: "global-default",
        level: "global-default",
        distinguisher: Distinguisher::ByUser,
        matches: |u, _| {
            u.in_group(crate::auth::AUTHENTICATED) || u.in_group("system:unauthenticated")
        },
    },
    FlowSchema {
        name: "catch-all",
        level: "catch-all",
        distinguisher: Distinguisher::ByUser,
        matches: |_, _| true,
    },
];

/// A built-in priority level: upstream's suggested `nominalConcurrencyShares` and queuing.
struct LevelSpec {
    name: &'static str,
    /// `None`: exempt (never limited).
    shares: Option<usize>,
    queues: usize,
    hand_size: usize,
    queue_length_limit: usize,
}

static LEVELS: &[LevelSpec] = &[
    LevelSpec {
        name: "exempt",
        shares: None,
        queues: 0,
        hand_size: 0,
        queue_length_limit: 0,
    },
    LevelSpec {
        name: "system",
        shares: Some(30),
        queues: 64,
        hand_size: 6,
        queue_length_limit: 50,
    },
    LevelSpec {
        name: "node-high",
        shares: Some(40),
        queues: 64,
        hand_size: 6,
        queue_length_limit: 50,
    },
    LevelSpec {
        name: "leader-election",
        shares: Some(10),
        queues: 16,
        hand_size: 4,
        queue_length_limit: 50,
    },
    LevelSpec {
        name: "workload-high",
        shares: Some(40),
        queues: 128,
        hand_size: 6,
        queue_length_limit: 50,
    },
    LevelSpec {
        name: "workload-low",
        shares: Some(100),
        queues: 128,
        hand_size: 6,
        queue_length_limit: 50,
    },
    LevelSpec {
        name: "global-default",
        shares: Some(20),
        queues: 128,
        hand_size: 6,
        queue_length_limit: 50,
    },
    // Upstream's catch-all rejects rather than queues.
    LevelSpec {
        name: "catch-all",
        shares: Some(5),
        queues: 0,
        hand_size: 0,
        queue_length_limit: 0,
    },
];

/// A deterministic UID for a built-in object (a name-based UUID in a tandem namespace).
fn builtin_uid(kind: &str, name: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("tandem.flowcontrol/{kind}/{name}").as_bytes(),
    );
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    uuid::Builder::from_sha1_bytes(bytes)
        .into_uuid()
        .to_string()
}

static FLOW_SCHEMA_UIDS: LazyLock<Vec<String>> = LazyLock::new(|| {
    FLOW_SCHEMAS
        .iter()
        .map(|fs| builtin_uid("FlowSchema", fs.name))
        .collect()
});

/// Which FlowSchema matched a request, its priority level and its flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// Index into the FlowSchemas (or, without priority and fairness, 0).
    schema: usize,
    /// Index into the server's levels.
    level: usize,
    /// The flow distinguisher (user name or namespace; empty for none).
    pub flow: String,
}

/// One level's seats and queues.
struct Level {
    name: &'static str,
    uid: String,
    /// `None`: unlimited.
    seats: Option<usize>,
    queues: usize,
    hand_size: usize,
    queue_length_limit: usize,
    state: Mutex<LevelState>,
    dispatched: AtomicU64,
    rejected: AtomicU64,
}

#[derive(Default)]
struct LevelState {
    executing: usize,
    waiting: usize,
    queues: Vec<VecDeque<Waiter>>,
    /// The queue the next freed seat looks at first (round robin).
    cursor: usize,
    next_id: u64,
}

struct Waiter {
    id: u64,
    granted: oneshot::Sender<()>,
}

impl Level {
    fn lock(&self) -> MutexGuard<'_, LevelState> {
        // A poisoned lock means a panic while counting; the counts are still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes a waiter; whether it was still queued.
    fn remove(state: &mut LevelState, queue: usize, id: u64) -> bool {
        let Some(q) = state.queues.get_mut(queue) else {
            return false;
        };
        match q.iter().position(|w| w.id == id) {
            Some(i) => {
                q.remove(i);
                state.waiting -= 1;
                true
            }
            None => false,
        }
    }

    /// Frees one seat: hands it to the next waiter in round-robin order over the queues, or
    /// returns it.
    fn release(&self) {
        let mut st = self.lock();
        let n = st.queues.len();
        for step in 0..n {
            let qi = (st.cursor + step) % n;
            while let Some(w) = st.queues[qi].pop_front() {
                st.waiting -= 1;
                if w.granted.send(()).is_ok() {
                    st.cursor = (qi + 1) % n;
                    return;
                }
            }
        }
        st.executing = st.executing.saturating_sub(1);
    }
}

/// Why a request was refused (upstream's `reason` label of
/// `apiserver_flowcontrol_rejected_requests_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The level has no queues (or queuing is off) and no free seat.
    ConcurrencyLimit,
    /// The chosen queue is at its length limit.
    QueueFull,
    /// The request waited the whole queue wait.
    TimeOut,
}

impl Rejection {
    fn label(self) -> &'static str {
        match self {
            Rejection::ConcurrencyLimit => "concurrency-limit",
            Rejection::QueueFull => "queue-full",
            Rejection::TimeOut => "time-out",
        }
    }

    /// The `429 TooManyRequests` Status: upstream's message, `details.retryAfterSeconds` (and so
    /// a `Retry-After` header, see `server::error_response`).
    pub fn to_api_error(self) -> ApiError {
        let mut e = ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        );
        e.details = Some(json!({ "retryAfterSeconds": RETRY_AFTER_SECONDS }));
        e
    }
}

/// The flow-control metric families (upstream's `apiserver_flowcontrol_*`).
#[derive(Clone, Debug, Default)]
pub struct FlowControlMetrics {
    inflight: Family<SchemaLabels, Gauge>,
    inqueue: Family<SchemaLabels, Gauge>,
    dispatched: Family<SchemaLabels, Counter>,
    rejected: Family<RejectedLabels, Counter>,
    nominal_seats: Family<LevelLabel, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SchemaLabels {
    priority_level: &'static str,
    flow_schema: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectedLabels {
    priority_level: &'static str,
    flow_schema: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabel {
    priority_level: &'static str,
}

impl FlowControlMetrics {
    /// Registers the families in `registry`.
    pub fn new(registry: &mut Registry) -> FlowControlMetrics {
        let m = FlowControlMetrics::default();
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "[BETA] Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            m.inflight.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "[BETA] Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            m.inqueue.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_dispatched_requests",
            "[BETA] Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "[BETA] Number of requests rejected by API Priority and Fairness subsystem",
            m.rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_nominal_limit_seats",
            "[BETA] Nominal number of execution seats configured for each priority level",
            m.nominal_seats.clone(),
        );
        m
    }
}

/// The server's flow control: classification, seats and queues. Shared by every connection.
pub struct FlowControl {
    config: FlowControlConfig,
    levels: Vec<Level>,
    metrics: Option<FlowControlMetrics>,
}

impl std::fmt::Debug for FlowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowControl")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The index of the exempt level, in both modes.
const EXEMPT: usize = 0;

impl FlowControl {
    /// Builds the levels of `config`, exporting their metrics into `metrics` when given.
    pub fn new(config: FlowControlConfig, metrics: Option<FlowControlMetrics>) -> FlowControl {
        let level = |name: &'static str,
                     seats: Option<usize>,
                     queues: usize,
                     hand_size: usize,
                     queue_length_limit: usize| {
            let queues = if config.queue_wait.is_zero() {
                0
            } else {
                queues
            };
            Level {
                name,
                uid: builtin_uid("PriorityLevelConfiguration", name),
                seats,
                queues,
                hand_size: hand_size.min(queues),
                queue_length_limit,
                state: Mutex::new(LevelState {
                    queues: (0..queues).map(|_| VecDeque::new()).collect(),
                    ..LevelState::default()
                }),
                dispatched: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
            }
        };
        let levels = if config.priority_and_fairness {
            let limit =
                (config.max_requests_inflight + config.max_mutating_requests_inflight).max(1);
            let total_shares: usize = LEVELS.iter().filter_map(|l| l.shares).sum();
            LEVELS
                .iter()
                .map(|spec| {
                    // Upstream's nominal concurrency limit: ceil(limit × shares / Σ shares).
                    let seats = spec
                        .shares
                        .map(|s| (limit * s).div_ceil(total_shares).max(1));
                    level(
                        spec.name,
                        seats,
                        spec.queues,
                        spec.hand_size,
                        spec.queue_length_limit,
                    )
                })
                .collect()
        } else {
            let bound = |n: usize| (n > 0).then_some(n);
            vec![
                level("exempt", None, 0, 0, 0),
                level("readOnly", bound(config.max_requests_inflight), 0, 0, 0),
                level(
                    "mutating",
                    bound(config.max_mutating_requests_inflight),
                    0,
                    0,
                    0,
                ),
            ]
        };
        if let Some(m) = &metrics {
            for l in &levels {
                if let Some(seats) = l.seats {
                    m.nominal_seats
                        .get_or_create(&LevelLabel {
                            priority_level: l.name,
                        })
                        .set(i64::try_from(seats).unwrap_or(i64::MAX));
                }
            }
        }
        FlowControl {
            config,
            levels,
            metrics,
        }
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &FlowControlConfig {
        &self.config
    }

    /// Classifies a (short-running) request by the first matching FlowSchema, or, without
    /// priority and fairness, as read-only or mutating (`system:masters` exempt).
    pub fn classify(&self, user: &UserInfo, attrs: &Attributes) -> Classification {
        if !self.config.priority_and_fairness {
            let level = if user.in_group(crate::auth::MASTERS) {
                EXEMPT
            } else if is_mutating(attrs) {
                2
            } else {
                1
            };
            return Classification {
                schema: 0,
                level,
                flow: String::new(),
            };
        }
        let (schema, fs) = FLOW_SCHEMAS
            .iter()
            .enumerate()
            .find(|(_, fs)| (fs.matches)(user, attrs))
            .unwrap_or((
                FLOW_SCHEMAS.len() - 1,
                &FLOW_SCHEMAS[FLOW_SCHEMAS.len() - 1],
            ));
        let level = self
            .levels
            .iter()
            .position(|l| l.name == fs.level)
            .unwrap_or(self.levels.len() - 1);
        let flow = match fs.distinguisher {
            Distinguisher::ByUser => user.name.clone(),
            Distinguisher::ByNamespace => attrs.namespace.clone(),
            Distinguisher::None => String::new(),
        };
        Classification {
            schema,
            level,
            flow,
        }
    }

    /// The names of a classification's FlowSchema and priority level.
    pub fn names(&self, c: &Classification) -> (&'static str, &'static str) {
        (self.schema_name(c), self.levels[c.level].name)
    }

    fn schema_name(&self, c: &Classification) -> &'static str {
        if self.config.priority_and_fairness {
            FLOW_SCHEMAS[c.schema].name
        } else {
            ""
        }
    }

    /// The UIDs upstream sends in `X-Kubernetes-PF-FlowSchema-UID` and
    /// `X-Kubernetes-PF-PriorityLevel-UID` (none without priority and fairness).
    pub fn uids(&self, c: &Classification) -> Option<(&str, &str)> {
        self.config.priority_and_fairness.then(|| {
            (
                FLOW_SCHEMA_UIDS[c.schema].as_str(),
                self.levels[c.level].uid.as_str(),
            )
        })
    }

    fn labels(&self, c: &Classification) -> SchemaLabels {
        SchemaLabels {
            priority_level: self.levels[c.level].name,
            flow_schema: self.schema_name(c),
        }
    }

    /// Takes a seat for a classified request, waiting in its queue if the level is full.
    /// Dropping the returned future while it waits leaves the queue.
    pub async fn acquire(self: &Arc<Self>, c: &Classification) -> Result<Permit, Rejection> {
        let level = &self.levels[c.level];
        let labels = self.labels(c);
        let Some(seats) = level.seats else {
            return Ok(self.permit(c, false, labels));
        };
        let (queue, id, rx) = {
            let mut st = level.lock();
            if st.executing < seats && st.waiting == 0 {
                st.executing += 1;
                drop(st);
                return Ok(self.permit(c, true, labels));
            }
            if level.queues == 0 {
                drop(st);
                return Err(self.reject(c, Rejection::ConcurrencyLimit, labels));
            }
            let queue = shuffle_shard(&c.flow, level.queues, level.hand_size, |q| {
                st.queues[q].len()
            });
            if st.queues[queue].len() >= level.queue_length_limit {
                drop(st);
                return Err(self.reject(c, Rejection::QueueFull, labels));
            }
            let id = st.next_id;
            st.next_id += 1;
            let (tx, rx) = oneshot::channel();
            st.queues[queue].push_back(Waiter { id, granted: tx });
            st.waiting += 1;
            (queue, id, rx)
        };
        let inqueue = self
            .metrics
            .as_ref()
            .map(|m| m.inqueue.get_or_create_owned(&labels));
        if let Some(g) = &inqueue {
            g.inc();
        }
        let mut queued = Queued {
            level,
            queue,
            id,
            rx,
            settled: false,
        };
        let granted = tokio::time::timeout(self.config.queue_wait, &mut queued.rx).await;
        if let Some(g) = &inqueue {
            g.dec();
        }
        let seated = match granted {
            Ok(Ok(())) => true,
            // Timed out (or the sender vanished): still queued means refused; gone from the
            // queue means a seat was handed over meanwhile.
            _ => !Level::remove(&mut level.lock(), queue, id),
        };
        // Either way the seat and queue accounting is done: the drop must not redo it.
        queued.settled = true;
        drop(queued);
        if seated {
            Ok(self.permit(c, true, labels))
        } else {
            Err(self.reject(c, Rejection::TimeOut, labels))
        }
    }

    fn permit(self: &Arc<Self>, c: &Classification, seated: bool, labels: SchemaLabels) -> Permit {
        let level = &self.levels[c.level];
        level.dispatched.fetch_add(1, Ordering::Relaxed);
        let gauge = self.metrics.as_ref().map(|m| {
            m.dispatched.get_or_create(&labels).inc();
            let g = m.inflight.get_or_create_owned(&labels);
            g.inc();
            g
        });
        Permit {
            fc: self.clone(),
            level: c.level,
            seated,
            gauge,
        }
    }

    fn reject(&self, c: &Classification, why: Rejection, labels: SchemaLabels) -> Rejection {
        self.levels[c.level]
            .rejected
            .fetch_add(1, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.rejected
                .get_or_create(&RejectedLabels {
                    priority_level: labels.priority_level,
                    flow_schema: labels.flow_schema,
                    reason: why.label(),
                })
                .inc();
        }
        why
    }

    /// A snapshot of every level: seats, executing and waiting requests, and the totals
    /// dispatched and rejected so far.
    pub fn levels(&self) -> Vec<LevelStats> {
        self.levels
            .iter()
            .map(|l| {
                let st = l.lock();
                LevelStats {
                    name: l.name,
                    seats: l.seats,
                    executing: st.executing,
                    waiting: st.waiting,
                    dispatched: l.dispatched.load(Ordering::Relaxed),
                    rejected: l.rejected.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// One level's figures (see [`FlowControl::levels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelStats {
    pub name: &'static str,
    /// `None`: exempt or unbounded.
    pub seats: Option<usize>,
    pub executing: usize,
    pub waiting: usize,
    pub dispatched: u64,
    pub rejected: u64,
}

/// A request waiting in a queue. Dropped unseated (the request was cancelled, or timed out) it
/// leaves the queue; if a seat was handed to it meanwhile, the seat is passed on.
struct Queued<'a> {
    level: &'a Level,
    queue: usize,
    id: u64,
    rx: oneshot::Receiver<()>,
    /// Set once the wait's outcome is accounted for (seated, or refused and dequeued).
    settled: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let removed = Level::remove(&mut self.level.lock(), self.queue, self.id);
        if !removed {
            // Handed a seat (under the lock, while this receiver lived) that is not wanted.
            self.level.release();
        }
    }
}

/// A seat held by an executing request; dropping it frees the seat for the next waiter.
pub struct Permit {
    fc: Arc<FlowControl>,
    level: usize,
    seated: bool,
    gauge: Option<Gauge>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(g) = &self.gauge {
            g.dec();
        }
        if self.seated {
            self.fc.levels[self.level].release();
        }
    }
}

/// Upstream's shuffle sharding: the flow's hash deals a hand of `hand_size` distinct queues out
/// of `queues`; the shortest of the hand is taken.
fn shuffle_shard(
    flow: &str,
    queues: usize,
    hand_size: usize,
    len: impl Fn(usize) -> usize,
) -> usize {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    flow.hash(&mut hasher);
    let mut h = hasher.finish();
    let mut hand: Vec<usize> = Vec::with_capacity(hand_size);
    let mut remaining: Vec<usize> = (0..queues).collect();
    for _ in 0..hand_size.max(1).min(queues) {
        let n = remaining.len() as u64;
        let pick = (h % n) as usize;
        h /= n;
        hand.push(remaining.swap_remove(pick));
    }
    hand.into_iter().min_by_key(|q| len(*q)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::authenticated(name, "", groups.iter().map(|g| g.to_string()).collect())
    }

    fn attrs(verb: &str, group: &str, resource: &str, ns: &str) -> Attributes {
        Attributes::resource(verb, group, resource, ns, "")
    }

    fn names(fc: &FlowControl, u: &UserInfo, a: &Attributes) -> (&'static str, &'static str) {
        fc.names(&fc.classify(u, a))
    }

    fn small(total: usize, wait: Duration) -> Arc<FlowControl> {
        Arc::new(FlowControl::new(
            FlowControlConfig {
                max_requests_inflight: total,
                max_mutating_requests_inflight: 0,
                priority_and_fairness: true,
                queue_wait: wait,
            },
            None,
        ))
    }

    #[test]
    fn requests_are_classified_as_upstreams_suggested_flow_schemas() {
        let fc = FlowControl::new(FlowControlConfig::default(), None);
        let admin = user("admin", &["system:masters"]);
        let node = user("system:node:n1", &["system:nodes"]);
        let sched = user("system:kube-scheduler", &[]);
        let kcm = user("system:kube-controller-manager", &[]);
        let ks_sa = user(
            "system:serviceaccount:kube-system:coredns",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
            ],
        );
        let sa = user(
            "system:serviceaccount:default:app",
            &["system:serviceaccounts", "system:serviceaccounts:default"],
        );
        let alice = user("alice", &[]);
        let list_pods = attrs("list", "", "pods", "default");
        let lease = attrs("update", "coordination.k8s.io", "leases", "kube-node-lease");
        assert_eq!(names(&fc, &admin, &list_pods), ("exempt", "exempt"));
        assert_eq!(names(&fc, &node, &lease), ("system-node-high", "node-high"));
        assert_eq!(
            names(&fc, &node, &attrs("patch", "", "nodes/status", "")),
            ("system-node-high", "node-high")
        );
        assert_eq!(names(&fc, &node, &list_pods), ("system-nodes", "system"));
        assert_eq!(
            names(&fc, &sched, &attrs("create", "", "pods/binding", "default")),
            ("kube-scheduler", "workload-high")
        );
        assert_eq!(
            names(
                &fc,
                &sched,
                &attrs("update", "coordination.k8s.io", "leases", "kube-system")
            ),
            ("system-leader-election", "leader-election")
        );
        assert_eq!(
            names(&fc, &kcm, &list_pods),
            ("kube-controller-manager", "workload-high")
        );
        assert_eq!(
            names(&fc, &ks_sa, &list_pods),
            ("kube-system-service-accounts", "workload-high")
        );
        assert_eq!(
            names(&fc, &sa, &list_pods),
            ("service-accounts", "workload-low")
        );
        assert_eq!(
            names(&fc, &alice, &list_pods),
            ("global-default", "global-default")
        );
        assert_eq!(
            names(&fc, &UserInfo::default(), &list_pods),
            ("catch-all", "catch-all")
        );
    }

    #[test]
    fn flows_are_users_or_namespaces_as_the_schema_says() {
        let fc = FlowControl::new(FlowControlConfig::default(), None);
        let alice = user("alice", &[]);
        let sched = user("system:kube-scheduler", &[]);
        let a = attrs("list", "", "pods", "team-a");
        assert_eq!(fc.classify(&alice, &a).flow, "alice");
        assert_eq!(fc.classify(&sched, &a).flow, "team-a");
    }

    #[test]
    fn watches_and_streaming_subresources_are_long_running() {
        assert!(is_long_running(&attrs("watch", "", "pods", "default")));
        for sub in [
            "pods/log",
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "pods/proxy",
        ] {
            assert!(is_long_running(&attrs("get", "", sub, "default")), "{sub}");
        }
        assert!(!is_long_running(&attrs("list", "", "pods", "default")));
        assert!(!is_long_running(&attrs(
            "create",
            "",
            "pods/binding",
            "default"
        )));
    }

    #[test]
    fn levels_get_seats_in_proportion_to_their_shares() {
        let fc = FlowControl::new(FlowControlConfig::default(), None);
        let seats: Vec<(&str, Option<usize>)> =
            fc.levels().iter().map(|l| (l.name, l.seats)).collect();
        // 600 seats over 245 shares, rounded up as upstream.
        assert_eq!(
            seats,
            vec![
                ("exempt", None),
                ("system", Some(74)),
                ("node-high", Some(98)),
                ("leader-election", Some(25)),
                ("workload-high", Some(98)),
                ("workload-low", Some(245)),
                ("global-default", Some(49)),
                ("catch-all", Some(13)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_the_seats_waits_and_then_is_refused_with_a_timeout() {
        let fc = small(2, Duration::from_secs(15));
        let alice = user("alice", &[]);
        let c = fc.classify(&alice, &attrs("list", "", "pods", "default"));
        // 2 seats over 245 shares: global-default has 1.
        let held = fc.acquire(&c).await.expect("first seat");
        let started = tokio::time::Instant::now();
        let second = fc.acquire(&c).await;
        assert!(matches!(second, Err(Rejection::TimeOut)));
        assert_eq!(started.elapsed(), Duration::from_secs(15));
        drop(held);
        let again = fc.acquire(&c).await;
        assert!(again.is_ok());
        let stats = &fc.levels()[6];
        assert_eq!(
            (stats.name, stats.executing, stats.waiting),
            ("global-default", 1, 0)
        );
        assert_eq!(stats.rejected, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_request_gets_the_seat_freed_before_its_wait_ends() {
        let fc = small(2, Duration::from_secs(15));
        let c = fc.classify(&user("alice", &[]), &attrs("list", "", "pods", "default"));
        let held = fc.acquire(&c).await.expect("first seat");
        let fc2 = fc.clone();
        let c2 = c.clone();
        let waiter = tokio::spawn(async move { fc2.acquire(&c2).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(fc.levels()[6].waiting, 1);
        drop(held);
        assert_eq!(waiter.await.ok(), Some(Ok(())));
        let stats = &fc.levels()[6];
        assert_eq!((stats.executing, stats.waiting, stats.rejected), (0, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_queue_wait_a_full_level_refuses_at_once() {
        let fc = small(2, Duration::ZERO);
        let c = fc.classify(&user("alice", &[]), &attrs("list", "", "pods", "default"));
        let _held = fc.acquire(&c).await.expect("first seat");
        assert!(matches!(
            fc.acquire(&c).await,
            Err(Rejection::ConcurrencyLimit)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_at_one_level_leaves_other_levels_their_seats() {
        let fc = small(2, Duration::ZERO);
        let flood = fc.classify(&user("alice", &[]), &attrs("list", "", "pods", "default"));
        let node = fc.classify(
            &user("system:node:n1", &["system:nodes"]),
            &attrs("update", "coordination.k8s.io", "leases", "kube-node-lease"),
        );
        let _held = fc.acquire(&flood).await.expect("first seat");
        assert!(fc.acquire(&flood).await.is_err());
        assert!(fc.acquire(&node).await.is_ok());
        let admin = fc.classify(
            &user("admin", &["system:masters"]),
            &attrs("list", "", "pods", ""),
        );
        let exempt: Vec<Permit> = futures::future::join_all((0..10).map(|_| fc.acquire(&admin)))
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("exempt requests are never refused");
        assert_eq!(exempt.len(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn freed_seats_go_round_robin_across_flows_so_a_heavy_user_cannot_starve_a_light_one() {
        let fc = small(2, Duration::from_secs(60));
        let a = |who: &str| fc.classify(&user(who, &[]), &attrs("list", "", "pods", "default"));
        let (heavy, light) = (a("heavy"), a("light"));
        let held = fc.acquire(&heavy).await.expect("first seat");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Forty of the heavy user's requests queue first, then one of the light user's.
        for i in 0..41 {
            let (fc, order) = (fc.clone(), order.clone());
            let c = if i < 40 { heavy.clone() } else { light.clone() };
            tasks.push(tokio::spawn(async move {
                if let Ok(p) = fc.acquire(&c).await {
                    order.lock().map(|mut o| o.push(c.flow.clone())).ok();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    drop(p);
                }
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(held);
        for t in tasks {
            let _ = t.await;
        }
        let order = order.lock().map(|o| o.clone()).unwrap_or_default();
        let light_at = order.iter().position(|f| f == "light");
        // The heavy flow spreads over the queues of its hand (6, the shortest first), as
        // upstream's shuffle sharding does; freed seats visit the queues in turn, so the light
        // user waits for at most one turn of each of those queues, not for the forty requests.
        assert_eq!(order.len(), 41);
        assert!(matches!(light_at, Some(0..=6)), "{order:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_leaves_the_queue_and_loses_no_seat() {
        let fc = small(2, Duration::from_secs(15));
        let c = fc.classify(&user("alice", &[]), &attrs("list", "", "pods", "default"));
        let held = fc.acquire(&c).await.expect("first seat");
        let waiting = fc.acquire(&c);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), waiting)
                .await
                .is_err()
        );
        assert_eq!(fc.levels()[6].waiting, 0);
        drop(held);
        assert_eq!(fc.levels()[6].executing, 0);
        assert!(fc.acquire(&c).await.is_ok());
    }

    #[test]
    fn without_priority_and_fairness_reads_and_writes_have_their_own_bounds() {
        let fc = Arc::new(FlowControl::new(
            FlowControlConfig {
                max_requests_inflight: 1,
                max_mutating_requests_inflight: 1,
                priority_and_fairness: false,
                queue_wait: Duration::ZERO,
            },
            None,
        ));
        let alice = user("alice", &[]);
        let read = fc.classify(&alice, &attrs("list", "", "pods", "default"));
        let write = fc.classify(&alice, &attrs("create", "", "pods", "default"));
        let admin = fc.classify(
            &user("admin", &["system:masters"]),
            &attrs("create", "", "pods", ""),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let _r = fc.acquire(&read).await.expect("read seat");
            let _w = fc.acquire(&write).await.expect("write seat");
            assert!(fc.acquire(&read).await.is_err());
            assert!(fc.acquire(&write).await.is_err());
            assert!(fc.acquire(&admin).await.is_ok());
        });
        assert!(fc.uids(&read).is_none());
    }

    #[test]
    fn the_429_is_upstreams_too_many_requests_with_retry_after() {
        let e = Rejection::QueueFull.to_api_error();
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        assert_eq!(e.message, "Too many requests, please try again later.");
        assert_eq!(e.details, Some(json!({"retryAfterSeconds": 1})));
    }

    #[test]
    fn uids_are_stable_and_distinct() {
        let fc = FlowControl::new(FlowControlConfig::default(), None);
        let a = fc.classify(&user("alice", &[]), &attrs("list", "", "pods", "default"));
        let n = fc.classify(
            &user("system:node:n", &["system:nodes"]),
            &attrs("get", "", "pods", ""),
        );
        let (fs_a, pl_a) = fc.uids(&a).expect("uids");
        let (fs_n, pl_n) = fc.uids(&n).expect("uids");
        assert_ne!(fs_a, fs_n);
        assert_ne!(pl_a, pl_n);
        assert_eq!(fs_a, builtin_uid("FlowSchema", "global-default"));
        assert!(uuid::Uuid::parse_str(fs_a).is_ok());
    }
}
