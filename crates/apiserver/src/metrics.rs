//! Prometheus metrics of the API server and the process it runs in, served at `/metrics`.
//!
//! The families and labels are upstream's (`k8s.io/apiserver/pkg/endpoints/metrics`):
//! `apiserver_request_total` and `apiserver_request_duration_seconds` are recorded once per
//! resource request as `MonitorRequest` records them — the verb as `CanonicalVerb`/`CleanVerb`
//! report it (LIST for a collection GET, WATCH, APPLY for a server-side apply PATCH, CONNECT for
//! `log`/`exec`/`attach`/`portforward`/`proxy`, DELETE for a collection delete too), the scope
//! as the installer's `requestScope` (`resource` with a name or for a POST, `namespace`,
//! `cluster`) and the dry-run value as `cleanDryRun`. A watch is recorded when it ends, as
//! upstream's handler returns only then, and is counted meanwhile in
//! `apiserver_longrunning_requests` and `apiserver_registered_watchers`. The health checks are
//! recorded as upstream's `healthz` handlers record themselves (`subresource` = the path, no
//! component). Requests refused by authentication or authorization are not recorded, as
//! upstream's filters refuse them before the instrumented handler.
//!
//! Differences from upstream, stated: `apiserver_current_inflight_requests` is the number in
//! flight when scraped (upstream reports the highest of the last second), and
//! `apiserver_storage_objects` counts the watch cache's objects when scraped, so Events (never
//! cached) are not in it.
//!
//! One [`prometheus_client::registry::Registry`] per process holds every component's families
//! (the API server's, the scheduler's and the controllers' work queues); the API server encodes
//! it on each scrape. prometheus-client writes OpenMetrics 1.0.0; the Prometheus text format
//! 0.0.4, which upstream serves unless OpenMetrics is asked for (`expfmt.Negotiate`), is derived
//! from it by `tandem_core::metrics::exposition::openmetrics_to_text`, as the node agent's is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
pub use tandem_core::metrics::exposition::ExpositionFormat;
use tandem_core::metrics::exposition::openmetrics_to_text;

use crate::request::{ResourceRequest, Verb};

/// Upstream's `apiserver_request_duration_seconds` buckets.
const REQUEST_DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// Upstream's `component` label of requests served by the API handlers.
const APISERVER_COMPONENT: &str = "apiserver";

/// The labels of `apiserver_request_duration_seconds` (and, with `code`, of
/// `apiserver_request_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    dry_run: &'static str,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: &'static str,
    component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LongRunningLabels {
    verb: &'static str,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: &'static str,
    component: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatcherLabels {
    group: String,
    version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestKindLabel {
    request_kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

/// The labels of `apiserver_admission_webhook_admission_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    name: String,
    /// `admit` (mutating) or `validating`.
    r#type: &'static str,
    operation: &'static str,
    rejected: &'static str,
}

/// The labels of `apiserver_admission_webhook_rejection_count`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookRejectionLabels {
    name: String,
    r#type: &'static str,
    operation: &'static str,
    /// `calling_webhook_error` or `no_error` (a denial), as upstream.
    error_type: &'static str,
    rejection_code: u16,
}

/// The labels of `apiserver_validating_admission_policy_check_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyCheckLabels {
    policy: String,
    policy_binding: String,
    /// `no_error`, `invalid_error`, …
    error_type: &'static str,
    /// `allow`, `deny`, `warn`, `audit`.
    enforcement_action: &'static str,
}

/// Upstream's webhook latency buckets (`webhookAdmissionDurationBuckets`).
fn webhook_duration_histogram() -> Histogram {
    Histogram::new([0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0])
}

fn request_duration_histogram() -> Histogram {
    Histogram::new(REQUEST_DURATION_BUCKETS)
}

/// The API server's metric families; cheap to clone (one reference count).
#[derive(Clone, Debug)]
pub struct ApiMetrics(Arc<Families>);

#[derive(Debug)]
struct Families {
    requests: Family<(RequestLabels, CodeLabel), Counter>,
    durations: Family<RequestLabels, Histogram, fn() -> Histogram>,
    inflight_read_only: Gauge,
    inflight_mutating: Gauge,
    longrunning: Family<LongRunningLabels, Gauge>,
    watchers: Family<WatcherLabels, Gauge>,
    storage_objects: Family<ResourceLabel, Gauge>,
    flow_control: crate::flowcontrol::FlowControlMetrics,
    webhook_durations: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    /// A gauge that only grows: prometheus-client names every counter `…_total`, and
    /// upstream's family is `apiserver_admission_webhook_rejection_count` without the suffix.
    webhook_rejections: Family<WebhookRejectionLabels, Gauge>,
    policy_checks: Family<PolicyCheckLabels, Counter>,
}

impl ApiMetrics {
    /// Registers the API server's families in `registry`.
    pub fn new(registry: &mut Registry) -> ApiMetrics {
        let requests = Family::default();
        registry.register(
            "apiserver_request",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        let durations = Family::new_with_constructor(request_duration_histogram as fn() -> _);
        registry.register(
            "apiserver_request_duration_seconds",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        let inflight = Family::<RequestKindLabel, Gauge>::default();
        registry.register(
            "apiserver_current_inflight_requests",
            "[STABLE] Number of requests of this apiserver in flight per request kind when scraped (upstream: the highest in the last second)",
            inflight.clone(),
        );
        let inflight_read_only = inflight.get_or_create_owned(&RequestKindLabel {
            request_kind: "readOnly",
        });
        let inflight_mutating = inflight.get_or_create_owned(&RequestKindLabel {
            request_kind: "mutating",
        });
        let longrunning = Family::default();
        registry.register(
            "apiserver_longrunning_requests",
            "[STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way",
            longrunning.clone(),
        );
        let watchers = Family::default();
        registry.register(
            "apiserver_registered_watchers",
            "[ALPHA] Number of currently registered watchers for a given resources",
            watchers.clone(),
        );
        let storage_objects = Family::default();
        registry.register(
            "apiserver_storage_objects",
            "[STABLE] Number of stored objects at the time of last check split by kind (tandem: the watch cache's objects when scraped)",
            storage_objects.clone(),
        );
        let flow_control = crate::flowcontrol::FlowControlMetrics::new(registry);
        let webhook_durations =
            Family::new_with_constructor(webhook_duration_histogram as fn() -> _);
        registry.register(
            "apiserver_admission_webhook_admission_duration_seconds",
            "[STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit)",
            webhook_durations.clone(),
        );
        let webhook_rejections = Family::default();
        registry.register(
            "apiserver_admission_webhook_rejection_count",
            "[ALPHA] Admission webhook rejection count, identified by name and broken out for each admission type (validating or admit) and operation. Additional labels specify an error type (calling_webhook_error or apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection code if the webhook rejects the request with an HTTP status code (honored by the apiserver when the code is greater or equal to 400). Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
            webhook_rejections.clone(),
        );
        let policy_checks = Family::default();
        registry.register(
            "apiserver_validating_admission_policy_check",
            "[BETA] Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.",
            policy_checks.clone(),
        );
        ApiMetrics(Arc::new(Families {
            webhook_durations,
            webhook_rejections,
            policy_checks,
            flow_control,
            requests,
            durations,
            inflight_read_only,
            inflight_mutating,
            longrunning,
            watchers,
            storage_objects,
        }))
    }

    /// The API Priority and Fairness families (see `flowcontrol`).
    pub fn flow_control(&self) -> &crate::flowcontrol::FlowControlMetrics {
        &self.0.flow_control
    }

    /// Starts measuring a resource request. `content_type` and `dry_run` are the request's
    /// `Content-Type` header and `dryRun` query parameter.
    pub fn start(
        &self,
        rr: &ResourceRequest,
        method: &http::Method,
        content_type: Option<&str>,
        dry_run: Option<&str>,
        started: Instant,
    ) -> RequestMeasure {
        let verb = reported_verb(rr, method, content_type);
        let long_running = matches!(verb, "WATCH" | "CONNECT");
        let inflight = (!long_running).then(|| {
            let gauge = if matches!(rr.verb, Verb::Get | Verb::List) {
                &self.0.inflight_read_only
            } else {
                &self.0.inflight_mutating
            };
            gauge.inc();
            gauge.clone()
        });
        RequestMeasure {
            metrics: self.clone(),
            labels: RequestLabels {
                verb,
                dry_run: clean_dry_run(dry_run),
                group: rr.group.clone(),
                version: rr.version.clone(),
                resource: rr.resource.clone(),
                subresource: rr.subresource.clone().unwrap_or_default(),
                scope: scope(rr, method),
                component: APISERVER_COMPONENT,
            },
            started,
            inflight,
        }
    }

    /// Records a health check (`/healthz`, `/livez`, `/readyz` and their subpaths), as upstream's
    /// instrumented healthz handlers do: verb GET, the path as subresource, no component.
    pub fn record_health_check(&self, path: &str, code: u16, elapsed: Duration) {
        let labels = RequestLabels {
            verb: "GET",
            dry_run: "",
            group: String::new(),
            version: String::new(),
            resource: String::new(),
            subresource: path.to_string(),
            scope: "",
            component: "",
        };
        self.0
            .durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.0
            .requests
            .get_or_create(&(labels, CodeLabel { code }))
            .inc();
    }

    /// Records one admission webhook call: its latency, and a rejection (a denial with its
    /// code, or a failed call with code 0) when there was one.
    pub fn observe_webhook(
        &self,
        name: &str,
        kind: &'static str,
        operation: &'static str,
        outcome: WebhookOutcome,
        elapsed: Duration,
    ) {
        let rejected = !matches!(outcome, WebhookOutcome::Allowed);
        self.0
            .webhook_durations
            .get_or_create(&WebhookLabels {
                name: name.to_string(),
                r#type: kind,
                operation,
                rejected: if rejected { "true" } else { "false" },
            })
            .observe(elapsed.as_secs_f64());
        let (error_type, rejection_code) = match outcome {
            WebhookOutcome::Allowed => return,
            WebhookOutcome::Denied(code) => ("no_error", code.min(600)),
            WebhookOutcome::CallFailed => ("calling_webhook_error", 0),
        };
        self.0
            .webhook_rejections
            .get_or_create(&WebhookRejectionLabels {
                name: name.to_string(),
                r#type: kind,
                operation,
                error_type,
                rejection_code,
            })
            .inc();
    }

    /// Counts one ValidatingAdmissionPolicy check (`enforcement_action`: `allow`, `deny`,
    /// `warn` or `audit`; `error_type`: `no_error` or `invalid_error`).
    pub fn count_policy_check(
        &self,
        policy: &str,
        binding: &str,
        error_type: &'static str,
        enforcement_action: &'static str,
    ) {
        self.0
            .policy_checks
            .get_or_create(&PolicyCheckLabels {
                policy: policy.to_string(),
                policy_binding: binding.to_string(),
                error_type,
                enforcement_action,
            })
            .inc();
    }

    /// Sets `apiserver_storage_objects` to `counts` (group-resource, objects).
    pub fn set_storage_objects(&self, counts: impl IntoIterator<Item = (String, usize)>) {
        for (resource, n) in counts {
            self.0
                .storage_objects
                .get_or_create(&ResourceLabel { resource })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

/// How a webhook call ended, for its metrics.
#[derive(Debug, Clone, Copy)]
pub enum WebhookOutcome {
    Allowed,
    /// Denied with this HTTP code.
    Denied(u16),
    /// Not answered (unreachable, timed out, malformed answer).
    CallFailed,
}

/// One resource request being measured: [`RequestMeasure::finish`] records it.
#[must_use = "a request is recorded by finish"]
pub struct RequestMeasure {
    metrics: ApiMetrics,
    labels: RequestLabels,
    started: Instant,
    /// The in-flight gauge this request holds up (none for long-running requests).
    inflight: Option<Gauge>,
}

impl RequestMeasure {
    /// Whether the request is a watch, recorded when its response ends.
    pub fn is_watch(&self) -> bool {
        self.labels.verb == "WATCH"
    }

    /// Records the request as answered with `code` now.
    pub fn finish(mut self, code: u16) {
        self.record(code);
    }

    /// For a watch answered with a stream: counts it as long-running and as a registered
    /// watcher of `kind` until the returned guard is dropped (with the response body), and
    /// records it then, as upstream records a watch when its handler returns.
    pub fn watching(self, kind: &str, code: u16) -> WatchGuard {
        let long = LongRunningLabels {
            verb: self.labels.verb,
            group: self.labels.group.clone(),
            version: self.labels.version.clone(),
            resource: self.labels.resource.clone(),
            subresource: self.labels.subresource.clone(),
            scope: self.labels.scope,
            component: self.labels.component,
        };
        let longrunning = self.metrics.0.longrunning.get_or_create_owned(&long);
        longrunning.inc();
        let watcher = self.metrics.0.watchers.get_or_create_owned(&WatcherLabels {
            group: self.labels.group.clone(),
            version: self.labels.version.clone(),
            kind: kind.to_string(),
        });
        watcher.inc();
        WatchGuard {
            measure: Some(self),
            code,
            gauges: [longrunning, watcher],
        }
    }

    fn record(&mut self, code: u16) {
        if let Some(g) = self.inflight.take() {
            g.dec();
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        self.metrics
            .0
            .durations
            .get_or_create(&self.labels)
            .observe(elapsed);
        // The label set moves into the counter's key; it is not needed afterwards.
        let labels = std::mem::replace(
            &mut self.labels,
            RequestLabels {
                verb: "",
                dry_run: "",
                group: String::new(),
                version: String::new(),
                resource: String::new(),
                subresource: String::new(),
                scope: "",
                component: "",
            },
        );
        self.metrics
            .0
            .requests
            .get_or_create(&(labels, CodeLabel { code }))
            .inc();
    }
}

impl Drop for RequestMeasure {
    fn drop(&mut self) {
        // A measure dropped unfinished (the handler's future was cancelled) frees its slot.
        if let Some(g) = self.inflight.take() {
            g.dec();
        }
    }
}

/// Held by a watch's response body: see [`RequestMeasure::watching`].
pub struct WatchGuard {
    measure: Option<RequestMeasure>,
    code: u16,
    gauges: [Gauge; 2],
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        for g in &self.gauges {
            g.dec();
        }
        if let Some(mut m) = self.measure.take() {
            m.record(self.code);
        }
    }
}

/// The verb as upstream reports it (`CanonicalVerb` then `cleanVerb`).
fn reported_verb(
    rr: &ResourceRequest,
    method: &http::Method,
    content_type: Option<&str>,
) -> &'static str {
    if matches!(
        rr.subresource.as_deref(),
        Some("log" | "exec" | "portforward" | "attach" | "proxy")
    ) {
        return "CONNECT";
    }
    match rr.verb {
        Verb::Watch => "WATCH",
        Verb::Get => "GET",
        Verb::List => "LIST",
        Verb::Create => "POST",
        Verb::Update => "PUT",
        Verb::Patch
            if content_type.is_some_and(|ct| {
                ct.split(';')
                    .next()
                    .is_some_and(|t| t.trim().starts_with("application/apply-patch"))
            }) =>
        {
            "APPLY"
        }
        Verb::Patch => "PATCH",
        // Upstream reports the method: a collection delete is a DELETE too.
        Verb::Delete | Verb::DeleteCollection => {
            if method == http::Method::DELETE {
                "DELETE"
            } else {
                "other"
            }
        }
    }
}

/// The installer's `requestScope`: `resource` for a named object or a POST, `namespace` for a
/// namespace's collection, `cluster` otherwise.
fn scope(rr: &ResourceRequest, method: &http::Method) -> &'static str {
    if rr.name.is_some() || method == http::Method::POST {
        "resource"
    } else if rr.namespace.is_some() {
        "namespace"
    } else {
        "cluster"
    }
}

/// Upstream's `cleanDryRun`: empty without the parameter, `All` (the one valid value), else
/// `invalid`.
fn clean_dry_run(dry_run: Option<&str>) -> &'static str {
    match dry_run {
        None => "",
        Some("All") => "All",
        Some(_) => "invalid",
    }
}

/// The metrics the API server serves at `/metrics`: the process's registry, and the API server's
/// own families in it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    registry: Arc<Registry>,
    pub api: ApiMetrics,
}

impl ServerMetrics {
    /// Serves `registry`, in which `api` is registered (see [`ApiMetrics::new`]).
    pub fn new(registry: Registry, api: ApiMetrics) -> ServerMetrics {
        ServerMetrics {
            registry: Arc::new(registry),
            api,
        }
    }

    /// A registry of the API server's and the process's families alone (an API server started
    /// without the rest of the control plane).
    pub fn standalone() -> ServerMetrics {
        let mut registry = Registry::default();
        let api = ApiMetrics::new(&mut registry);
        register_process_metrics(&mut registry);
        ServerMetrics::new(registry, api)
    }

    /// The registry encoded in `format`.
    pub fn encode(&self, format: ExpositionFormat) -> Result<String, std::fmt::Error> {
        let mut om = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut om, &self.registry)?;
        Ok(match format {
            ExpositionFormat::OpenMetrics => om,
            ExpositionFormat::Text => openmetrics_to_text(&om),
        })
    }
}

/// Registers client_golang's process collector's `process_start_time_seconds` and
/// `process_resident_memory_bytes`, read from `/proc` on each scrape.
pub fn register_process_metrics(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector {
        fallback_start: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    }));
}

#[derive(Debug)]
struct ProcessCollector {
    /// When the collector was made, for systems without `/proc`.
    fallback_start: f64,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let start = process_start_time().unwrap_or(self.fallback_start);
        let gauge = ConstGauge::new(start);
        gauge.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            None,
            MetricType::Gauge,
        )?)?;
        if let Some(rss) = resident_memory_bytes() {
            let gauge = ConstGauge::new(i64::try_from(rss).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                None,
                MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

/// `AT_PAGESZ` and `AT_CLKTCK` from the process's auxiliary vector (what `sysconf` reads).
fn auxv_value(key: usize) -> Option<usize> {
    let bytes = std::fs::read("/proc/self/auxv").ok()?;
    let width = std::mem::size_of::<usize>();
    bytes.chunks_exact(2 * width).find_map(|pair| {
        let (k, v) = pair.split_at(width);
        let k = usize::from_ne_bytes(k.try_into().ok()?);
        let v = usize::from_ne_bytes(v.try_into().ok()?);
        (k == key).then_some(v)
    })
}

const AT_PAGESZ: usize = 6;
const AT_CLKTCK: usize = 17;

/// Resident pages (`/proc/self/statm`'s second field) times the page size.
fn resident_memory_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    static PAGE_SIZE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let page = *PAGE_SIZE.get_or_init(|| auxv_value(AT_PAGESZ).map_or(4096, |p| p as u64));
    Some(pages.saturating_mul(page))
}

/// The process's start (`/proc/self/stat`'s 22nd field, clock ticks after `/proc/stat`'s boot
/// time), as client_golang's process collector computes it, in seconds since the Unix epoch.
fn process_start_time() -> Option<f64> {
    use tandem_core::metrics::process;
    static START: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = process::boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        let hz = auxv_value(AT_CLKTCK)
            .filter(|h| *h > 0)
            .map_or(process::USER_HZ, |h| h as u64);
        let start = process::start_time(&stat, boot, hz)?;
        Some(
            start
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs_f64(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Query, parse_resource_path};

    fn rr(method: &http::Method, path_and_query: &str) -> ResourceRequest {
        let (path, q) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        parse_resource_path(method, path, &Query::parse(Some(q))).expect("a resource path")
    }

    fn scrape(m: &ServerMetrics) -> String {
        m.encode(ExpositionFormat::Text).expect("encodes")
    }

    #[test]
    fn verbs_are_reported_as_upstream_reports_them() {
        let cases = [
            ("GET", "/api/v1/namespaces/d/pods", None, "LIST"),
            ("GET", "/api/v1/namespaces/d/pods/p", None, "GET"),
            ("GET", "/api/v1/pods?watch=true", None, "WATCH"),
            ("GET", "/api/v1/watch/namespaces/d/pods", None, "WATCH"),
            ("POST", "/api/v1/namespaces/d/pods", None, "POST"),
            ("PUT", "/api/v1/namespaces/d/pods/p", None, "PUT"),
            (
                "PATCH",
                "/api/v1/namespaces/d/pods/p",
                Some("application/merge-patch+json"),
                "PATCH",
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/d/deployments/w",
                Some("application/apply-patch+yaml"),
                "APPLY",
            ),
            ("DELETE", "/api/v1/namespaces/d/pods/p", None, "DELETE"),
            ("DELETE", "/api/v1/namespaces/d/pods", None, "DELETE"),
            ("GET", "/api/v1/namespaces/d/pods/p/log", None, "CONNECT"),
            ("POST", "/api/v1/namespaces/d/pods/p/exec", None, "CONNECT"),
            ("GET", "/api/v1/nodes/n1/proxy/metrics", None, "CONNECT"),
        ];
        for (method, path, ct, want) in cases {
            let m = http::Method::from_bytes(method.as_bytes()).expect("method");
            assert_eq!(
                reported_verb(&rr(&m, path), &m, ct),
                want,
                "{method} {path}"
            );
        }
    }

    #[test]
    fn scopes_follow_the_installers_request_scope() {
        let get = http::Method::GET;
        let post = http::Method::POST;
        assert_eq!(
            scope(&rr(&post, "/api/v1/namespaces/d/pods"), &post),
            "resource"
        );
        assert_eq!(
            scope(&rr(&get, "/api/v1/namespaces/d/pods"), &get),
            "namespace"
        );
        assert_eq!(scope(&rr(&get, "/api/v1/pods"), &get), "cluster");
        assert_eq!(scope(&rr(&get, "/api/v1/nodes"), &get), "cluster");
        assert_eq!(scope(&rr(&get, "/api/v1/nodes/n1"), &get), "resource");
        assert_eq!(clean_dry_run(Some("All")), "All");
        assert_eq!(clean_dry_run(Some("Some")), "invalid");
        assert_eq!(clean_dry_run(None), "");
    }

    #[test]
    fn a_recorded_create_appears_in_request_total_and_duration_with_upstream_labels() {
        let m = ServerMetrics::standalone();
        let post = http::Method::POST;
        let req = rr(&post, "/apis/apps/v1/namespaces/d/deployments");
        m.api
            .start(&req, &post, Some("application/json"), None, Instant::now())
            .finish(201);
        m.api
            .start(&req, &post, None, Some("All"), Instant::now())
            .finish(201);
        let text = scrape(&m);
        assert!(
            text.contains("# TYPE apiserver_request_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_total{verb="POST",dry_run="",group="apps",version="v1",resource="deployments",subresource="",scope="resource",component="apiserver",code="201"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_total{verb="POST",dry_run="All",group="apps",version="v1",resource="deployments",subresource="",scope="resource",component="apiserver",code="201"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE apiserver_request_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_request_duration_seconds_bucket{le="60.0",verb="POST",dry_run="",group="apps",version="v1",resource="deployments",subresource="",scope="resource",component="apiserver"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"le="0.005""#), "{text}");
        // Both in-flight kinds are reported, and nothing is left in flight.
        assert!(
            text.contains(r#"apiserver_current_inflight_requests{request_kind="mutating"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_current_inflight_requests{request_kind="readOnly"} 0"#),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn a_request_in_flight_is_counted_until_it_finishes() {
        let m = ServerMetrics::standalone();
        let get = http::Method::GET;
        let measure = m.api.start(
            &rr(&get, "/api/v1/namespaces/d/pods/p"),
            &get,
            None,
            None,
            Instant::now(),
        );
        assert!(
            scrape(&m)
                .contains(r#"apiserver_current_inflight_requests{request_kind="readOnly"} 1"#)
        );
        measure.finish(404);
        let text = scrape(&m);
        assert!(
            text.contains(r#"apiserver_current_inflight_requests{request_kind="readOnly"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"scope="resource",component="apiserver",code="404"} 1"#));
    }

    #[test]
    fn a_watch_is_long_running_and_registered_until_its_body_is_dropped() {
        let m = ServerMetrics::standalone();
        let get = http::Method::GET;
        let measure = m.api.start(
            &rr(&get, "/api/v1/namespaces/d/pods?watch=1"),
            &get,
            None,
            None,
            Instant::now(),
        );
        assert!(measure.is_watch());
        let guard = measure.watching("Pod", 200);
        let text = scrape(&m);
        assert!(
            text.contains(r#"apiserver_longrunning_requests{verb="WATCH",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_registered_watchers{group="",version="v1",kind="Pod"} 1"#),
            "{text}"
        );
        assert!(
            !text.contains(r#"verb="WATCH",dry_run"#),
            "recorded only at the end"
        );
        drop(guard);
        let text = scrape(&m);
        assert!(
            text.contains(r#"apiserver_registered_watchers{group="",version="v1",kind="Pod"} 0"#)
        );
        assert!(
            text.contains(r#"apiserver_request_total{verb="WATCH",dry_run="",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="200"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn storage_objects_and_process_figures_are_reported() {
        let m = ServerMetrics::standalone();
        m.api
            .set_storage_objects([("pods".to_string(), 3), ("deployments.apps".to_string(), 1)]);
        let text = scrape(&m);
        assert!(
            text.contains(r#"apiserver_storage_objects{resource="pods"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"apiserver_storage_objects{resource="deployments.apps"} 1"#),
            "{text}"
        );
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let start = value("process_start_time_seconds");
        assert!(
            start > 1.0e9 && start <= now + 1.0,
            "start {start}, now {now}"
        );
        assert!(value("process_resident_memory_bytes") > 1_000_000.0);
    }

    #[test]
    fn openmetrics_exposition_keeps_its_own_counter_form_and_eof() {
        let m = ServerMetrics::standalone();
        let get = http::Method::GET;
        m.api
            .start(&rr(&get, "/api/v1/nodes"), &get, None, None, Instant::now())
            .finish(200);
        let om = m.encode(ExpositionFormat::OpenMetrics).expect("encodes");
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE apiserver_request counter\n"), "{om}");
        assert!(
            om.contains("\napiserver_request_total{verb=\"LIST\""),
            "{om}"
        );
    }
}
