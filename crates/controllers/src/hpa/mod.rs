//! The HorizontalPodAutoscaler controller — upstream's `pkg/controller/podautoscaler`
//! (`HorizontalController.reconcileAutoscaler`, `computeReplicasForMetrics`,
//! `normalizeDesiredReplicas[WithBehaviors]`, `setStatus`).
//!
//! Every `sync_period` (upstream's `--horizontal-pod-autoscaler-sync-period`, 15 s) each HPA is
//! reconciled: the target's `scale` subresource is read (any kind that serves one, found through
//! discovery as upstream's REST mapper finds it), its pods are listed by the scale's selector,
//! their usage is read from `metrics.k8s.io` ([`metrics`]), each Resource or ContainerResource
//! metric proposes a replica count ([`replicas`]), the largest proposal is stabilized and
//! rate-limited ([`behavior`]), clamped to min/max, and the scale is written when it changes
//! (`SuccessfulRescale`). The status carries `currentReplicas`, `desiredReplicas`,
//! `currentMetrics`, `lastScaleTime` and the `AbleToScale`, `ScalingActive` and
//! `ScalingLimited` conditions with upstream's reasons and messages.
//!
//! Pods, Object and External metrics are read from `custom.metrics.k8s.io` and
//! `external.metrics.k8s.io`, which an aggregated adapter of the user's serves (tandem serves
//! neither itself): without one they fail as upstream fails when that API is missing. Time comes from the
//! controller's [`Clock`](crate::clock::Clock), so tests move the stabilization windows with a
//! fake clock.

pub mod behavior;
pub mod metrics;
pub mod replicas;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, ExternalMetricStatus, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerCondition, MetricSpec, MetricStatus, MetricValueStatus,
    ObjectMetricStatus, PodsMetricStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as LabelSelectorSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Map, Value};
use tandem_core::selector::LabelSelector;

use crate::clock::{self, SharedClock};
use crate::events::{self, EventType};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;
use behavior::History;
use metrics::{DescribedObject, MetricsError, PodUsage, SharedCustomMetrics, SharedMetrics};
use replicas::Calculator;

const COMPONENT: &str = "horizontal-pod-autoscaler";

/// How the controller keeps time and reads usage: upstream's controller-manager flags.
#[derive(Clone)]
pub struct HpaOptions {
    pub clock: SharedClock,
    /// `--horizontal-pod-autoscaler-sync-period`: how often every HPA is reconciled.
    pub sync_period: Duration,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`: the down-scale window of HPAs
    /// without one of their own.
    pub downscale_stabilization: Duration,
    /// Tolerance, CPU initialization period and initial readiness delay.
    pub calculator: Calculator,
    /// Where pod usage comes from; `None` reads `metrics.k8s.io` through the client.
    pub metrics: Option<SharedMetrics>,
    /// Where Pods, Object and External metrics come from; `None` reads
    /// `custom.metrics.k8s.io` and `external.metrics.k8s.io` through the client.
    pub custom_metrics: Option<SharedCustomMetrics>,
}

impl Default for HpaOptions {
    fn default() -> Self {
        HpaOptions {
            clock: clock::system(),
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
            calculator: Calculator::default(),
            metrics: None,
            custom_metrics: None,
        }
    }
}

struct Ctx {
    client: kube::Client,
    hpas: Informer<HorizontalPodAutoscaler>,
    pods: Informer<Pod>,
    queue: WorkQueue,
    options: HpaOptions,
    metrics: SharedMetrics,
    custom_metrics: SharedCustomMetrics,
    history: Mutex<HashMap<String, History>>,
}

/// Runs the HorizontalPodAutoscaler controller until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>, options: HpaOptions) {
    let metrics = options
        .metrics
        .clone()
        .unwrap_or_else(|| Arc::new(metrics::RestMetrics::new(client.clone())));
    let custom_metrics = options
        .custom_metrics
        .clone()
        .unwrap_or_else(|| Arc::new(metrics::RestMetrics::new(client.clone())));
    let ctx = Arc::new(Ctx {
        hpas: Informer::start(client.clone()),
        pods,
        client,
        queue: WorkQueue::named("horizontalpodautoscaler"),
        options,
        metrics,
        custom_metrics,
        history: Mutex::new(HashMap::new()),
    });
    let mut events = ctx.hpas.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.hpas, &ctx.pods]).await;
    ctx.queue.run_workers_for(
        2,
        "horizontal-pod-autoscaler",
        &ctx,
        |ctx, key| async move { sync(&ctx, &key).await },
    );
    let mut resync = tokio::time::interval(ctx.options.sync_period);
    loop {
        tokio::select! {
            _ = resync.tick() => {
                ctx.queue.add_keys(&ctx.hpas.list());
            }
            Some(change) = events.recv() => {
                // New HPAs and changed specs are looked at now; the controller's own status
                // writes wait for the next period, as upstream's rate-limited queue makes them.
                let changed = match (&change.old, &change.new) {
                    (Some(old), Some(new)) => old.spec != new.spec,
                    _ => true,
                };
                if changed && let Some(hpa) = change.new.as_ref().or(change.old.as_ref()) {
                    ctx.queue.add(queue_key(hpa.as_ref()));
                }
            }
            else => return,
        }
    }
}

async fn sync(ctx: &Ctx, key: &str) -> Result<Option<Duration>, kube::Error> {
    let (ns, name) = split_key(key);
    let Some(hpa) = ctx.hpas.get(ns, name) else {
        lock(&ctx.history).remove(key);
        return Ok(None);
    };
    let mut hpa = (*hpa).clone();
    let original = hpa.status.clone();
    if let Err(e) = reconcile(ctx, key, &mut hpa).await {
        tracing::debug!(hpa = key, error = %e, "horizontal pod autoscaler sync failed");
    }
    if hpa.status != original {
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), ns);
        match api.replace_status(name, &PostParams::default(), &hpa).await {
            Ok(_) => {}
            // Changed meanwhile (or gone): the next period sees the new state.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Upstream `setCondition`: sets or updates a condition; the transition time moves only when
/// the status changes.
fn set_condition(
    hpa: &mut HorizontalPodAutoscaler,
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let st = hpa.status.get_or_insert_with(Default::default);
    let conditions = st.conditions.get_or_insert_with(Vec::new);
    let status = if status { "True" } else { "False" }.to_string();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(Time(now));
            }
            c.status = status;
            c.reason = Some(reason.to_string());
            c.message = Some(message);
        }
        None => conditions.push(HorizontalPodAutoscalerCondition {
            type_: type_.to_string(),
            status,
            reason: Some(reason.to_string()),
            message: Some(message),
            last_transition_time: Some(Time(now)),
        }),
    }
}

/// Upstream `setStatus`: replicas and metrics (conditions and the last scale time kept).
fn set_status(
    hpa: &mut HorizontalPodAutoscaler,
    current: i32,
    desired: i32,
    metrics: Option<Vec<MetricStatus>>,
    rescaled_at: Option<Timestamp>,
) {
    let st = hpa.status.get_or_insert_with(Default::default);
    st.current_replicas = Some(current);
    st.desired_replicas = desired;
    st.current_metrics = metrics.filter(|m| !m.is_empty());
    if let Some(at) = rescaled_at {
        st.last_scale_time = Some(Time(at));
    }
}

async fn event(ctx: &Ctx, hpa: &HorizontalPodAutoscaler, warning: bool, reason: &str, msg: &str) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    events::record(&ctx.client, COMPONENT, hpa, type_, reason, msg).await;
}

/// A quantity of `milli` milli-units as upstream's `NewMilliQuantity(…, DecimalSI).String()`
/// writes it: `250m`, `2`, `52428800`, `1M`.
pub fn milli_quantity(milli: i64) -> String {
    if milli % 1000 != 0 {
        return format!("{milli}m");
    }
    let mut n = milli / 1000;
    let mut suffix = "";
    for s in ["k", "M", "G", "T", "P", "E"] {
        if n != 0 && n % 1000 == 0 {
            n /= 1000;
            suffix = s;
        } else {
            break;
        }
    }
    format!("{n}{suffix}")
}

/// The scale of the target and the API to write it back through.
async fn target_scale(
    ctx: &Ctx,
    hpa: &HorizontalPodAutoscaler,
) -> Result<(Scale, Api<DynamicObject>), String> {
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let spec = hpa.spec.clone().unwrap_or_default();
    let target = &spec.scale_target_ref;
    let (group, version) =
        tandem_core::registry::split_api_version(target.api_version.as_deref().unwrap_or(""));
    let gvk = GroupVersionKind::gvk(group, version, &target.kind);
    let (ar, _) = kube::discovery::pinned_kind(&ctx.client, &gvk)
        .await
        .map_err(|_| format!("no matches for kind {:?} in group {:?}", target.kind, group))?;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ar);
    let scale = api.get_scale(&target.name).await.map_err(|e| match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    })?;
    Ok((scale, api))
}

/// One metric's proposal.
struct Proposal {
    replicas: i32,
    metric: String,
    status: MetricStatus,
}

/// A metric that could not be computed: the `ScalingActive` reason and the error.
struct MetricFailure {
    reason: &'static str,
    error: String,
}

struct MetricInput<'a> {
    namespace: &'a str,
    selector: &'a str,
    spec_replicas: i32,
    status_replicas: i32,
    pods: &'a [&'a Pod],
    usage: &'a Result<HashMap<String, PodUsage>, String>,
    now: Timestamp,
}

/// Upstream `computeStatusForResourceMetricGeneric` for one Resource or ContainerResource
/// metric.
fn resource_metric(
    calc: &Calculator,
    input: &MetricInput<'_>,
    resource: &str,
    container: Option<&str>,
    target: &k8s_openapi::api::autoscaling::v2::MetricTarget,
) -> Result<(i32, String, MetricValueStatus), String> {
    let samples = |what: &str| -> Result<replicas::PodSamples, String> {
        let usage = input.usage.as_ref().map_err(|e| {
            format!("failed to get {resource} {what}: unable to get metrics for resource {resource}: {e}")
        })?;
        Ok(metrics::samples(usage, resource, container))
    };
    if let Some(avg) = &target.average_value {
        let target_milli = quantity_milli(Some(avg)).unwrap_or(0);
        let (replicas, usage) = calc
            .raw_resource_replicas(
                input.spec_replicas,
                target_milli,
                resource,
                input.pods,
                samples("usage")?,
                input.now,
            )
            .map_err(|e| format!("failed to get {resource} usage: {e}"))?;
        return Ok((
            replicas,
            format!("{resource} resource"),
            MetricValueStatus {
                average_value: Some(Quantity(milli_quantity(usage))),
                ..Default::default()
            },
        ));
    }
    let Some(utilization) = target.average_utilization else {
        return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".to_string());
    };
    let p = calc
        .resource_replicas(
            input.spec_replicas,
            utilization,
            resource,
            container,
            input.pods,
            samples("utilization")?,
            input.now,
        )
        .map_err(|e| format!("failed to get {resource} utilization: {e}"))?;
    let name = if container.is_some() {
        format!("{resource} container resource utilization (percentage of request)")
    } else {
        format!("{resource} resource utilization (percentage of request)")
    };
    Ok((
        p.replicas,
        name,
        MetricValueStatus {
            average_utilization: Some(p.utilization),
            average_value: Some(Quantity(milli_quantity(p.raw_average))),
            value: None,
        },
    ))
}

/// A metric's label selector (`metric.selector`) in the text form the metrics APIs take.
fn metric_selector(selector: Option<&LabelSelectorSpec>) -> String {
    selector
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| LabelSelector::from_json(&v).ok())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Pods that are Running and Ready (upstream `getReadyPodsCount`).
fn ready_pods(pods: &[&Pod]) -> usize {
    pods.iter()
        .filter(|p| {
            let status = p.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .count()
}

fn quantity_milli(q: Option<&Quantity>) -> Option<i64> {
    q.map(|q| tandem_core::validation::quantity::Quantity::parse(&q.0).map_or(0, replicas::milli))
}

/// The target of an Object or External metric: the whole usage against a `Value`, or per
/// replica against an `AverageValue` (in milli-units).
enum WholeTarget {
    Value(i64),
    AverageValue(i64),
}

/// `Value` wins when both are set, as upstream checks it first.
fn whole_metric_target(
    target: &k8s_openapi::api::autoscaling::v2::MetricTarget,
    source: &str,
) -> Result<WholeTarget, String> {
    match (
        quantity_milli(target.value.as_ref()),
        quantity_milli(target.average_value.as_ref()),
    ) {
        (Some(v), _) => Ok(WholeTarget::Value(v)),
        (None, Some(a)) => Ok(WholeTarget::AverageValue(a)),
        (None, None) => Err(format!(
            "invalid {source} metric source: neither a value target nor an average value target was set"
        )),
    }
}

/// Replicas and current value of an Object or External metric whose whole usage is `usage`:
/// upstream's `getUsageRatioReplicaCount` for a `Value`, the per-pod variants for an
/// `AverageValue`.
fn whole_metric_replicas(
    ctx: &Ctx,
    input: &MetricInput<'_>,
    usage: i64,
    target: WholeTarget,
) -> (i32, MetricValueStatus) {
    let calc = &ctx.options.calculator;
    match target {
        WholeTarget::Value(target) => (
            calc.usage_ratio_replicas(
                input.spec_replicas,
                usage as f64 / target.max(1) as f64,
                ready_pods(input.pods),
            ),
            MetricValueStatus {
                value: Some(Quantity(milli_quantity(usage))),
                ..Default::default()
            },
        ),
        WholeTarget::AverageValue(target) => {
            let (replicas, per_pod) = calc.per_pod_replicas(input.status_replicas, usage, target);
            (
                replicas,
                MetricValueStatus {
                    average_value: Some(Quantity(milli_quantity(per_pod))),
                    ..Default::default()
                },
            )
        }
    }
}

/// Upstream `computeStatusForPodsMetric`: a custom metric of every pod against an average.
async fn pods_metric(
    ctx: &Ctx,
    input: &MetricInput<'_>,
    spec: &MetricSpec,
) -> Result<Proposal, String> {
    let source = spec
        .pods
        .as_ref()
        .ok_or("invalid pods metric source: pods is not set")?;
    let name = &source.metric.name;
    let target = quantity_milli(source.target.average_value.as_ref())
        .ok_or("invalid pods metric source: an average value target must be set")?;
    let samples = ctx
        .custom_metrics
        .pods_metric(
            input.namespace,
            input.selector,
            name,
            &metric_selector(source.metric.selector.as_ref()),
        )
        .await
        .map_err(|e| format!("unable to get metric {name}: {e}"))?;
    let (replicas, usage) = ctx.options.calculator.raw_resource_replicas(
        input.spec_replicas,
        target,
        "",
        input.pods,
        samples,
        input.now,
    )?;
    Ok(Proposal {
        replicas,
        metric: format!("pods metric {name}"),
        status: MetricStatus {
            type_: "Pods".into(),
            pods: Some(PodsMetricStatus {
                metric: source.metric.clone(),
                current: MetricValueStatus {
                    average_value: Some(Quantity(milli_quantity(usage))),
                    ..Default::default()
                },
            }),
            ..Default::default()
        },
    })
}

/// Upstream `computeStatusForObjectMetric`: one object's metric, as a whole (`Value`) or per
/// pod (`AverageValue`).
async fn object_metric(
    ctx: &Ctx,
    input: &MetricInput<'_>,
    spec: &MetricSpec,
) -> Result<Proposal, String> {
    let source = spec
        .object
        .as_ref()
        .ok_or("invalid object metric source: object is not set")?;
    let name = &source.metric.name;
    let described = &source.described_object;
    let object = DescribedObject {
        api_version: described.api_version.clone().unwrap_or_default(),
        kind: described.kind.clone(),
        name: described.name.clone(),
    };
    let target = whole_metric_target(&source.target, "object")?;
    let usage = ctx
        .custom_metrics
        .object_metric(
            input.namespace,
            &object,
            name,
            &metric_selector(source.metric.selector.as_ref()),
        )
        .await
        .map_err(|e| {
            format!(
                "unable to get metric {name}: {} on {} {}/{e}",
                object.kind, input.namespace, object.name
            )
        })?;
    let (replicas, current) = whole_metric_replicas(ctx, input, usage, target);
    Ok(Proposal {
        replicas,
        metric: format!("{} metric {name}", object.kind),
        status: MetricStatus {
            type_: "Object".into(),
            object: Some(ObjectMetricStatus {
                described_object: described.clone(),
                metric: source.metric.clone(),
                current,
            }),
            ..Default::default()
        },
    })
}

/// Upstream `computeStatusForExternalMetric`: the sum of every series of a metric from outside
/// the cluster, as a whole (`Value`) or per pod (`AverageValue`).
async fn external_metric(
    ctx: &Ctx,
    input: &MetricInput<'_>,
    spec: &MetricSpec,
) -> Result<Proposal, String> {
    let source = spec
        .external
        .as_ref()
        .ok_or("invalid external metric source: external is not set")?;
    let name = &source.metric.name;
    let selector = metric_selector(source.metric.selector.as_ref());
    let target = whole_metric_target(&source.target, "external")?;
    let usage: i64 = ctx
        .custom_metrics
        .external_metric(input.namespace, name, &selector)
        .await
        .map_err(|e| {
            format!(
                "unable to get external metric {}/{name}/{selector}: {e}",
                input.namespace
            )
        })?
        .iter()
        .fold(0i64, |sum, v| sum.saturating_add(*v));
    let (replicas, current) = whole_metric_replicas(ctx, input, usage, target);
    Ok(Proposal {
        replicas,
        metric: format!("external metric {name}({selector})"),
        status: MetricStatus {
            type_: "External".into(),
            external: Some(ExternalMetricStatus {
                metric: source.metric.clone(),
                current,
            }),
            ..Default::default()
        },
    })
}

/// Upstream `computeReplicasForMetric` for one metric spec.
async fn compute_metric(
    ctx: &Ctx,
    input: &MetricInput<'_>,
    spec: &MetricSpec,
) -> Result<Proposal, MetricFailure> {
    let calc = &ctx.options.calculator;
    match (
        spec.type_.as_str(),
        &spec.resource,
        &spec.container_resource,
    ) {
        ("Resource", Some(r), _) => resource_metric(calc, input, &r.name, None, &r.target)
            .map(|(replicas, metric, current)| Proposal {
                replicas,
                metric,
                status: MetricStatus {
                    type_: "Resource".into(),
                    resource: Some(ResourceMetricStatus {
                        name: r.name.clone(),
                        current,
                    }),
                    ..Default::default()
                },
            })
            .map_err(|error| MetricFailure {
                reason: "FailedGetResourceMetric",
                error,
            }),
        ("ContainerResource", _, Some(r)) => {
            resource_metric(calc, input, &r.name, Some(&r.container), &r.target)
                .map(|(replicas, metric, current)| Proposal {
                    replicas,
                    metric,
                    status: MetricStatus {
                        type_: "ContainerResource".into(),
                        container_resource: Some(ContainerResourceMetricStatus {
                            name: r.name.clone(),
                            container: r.container.clone(),
                            current,
                        }),
                        ..Default::default()
                    },
                })
                .map_err(|error| MetricFailure {
                    reason: "FailedGetContainerResourceMetric",
                    error,
                })
        }
        ("Pods", ..) => pods_metric(ctx, input, spec)
            .await
            .map_err(|error| MetricFailure {
                reason: "FailedGetPodsMetric",
                error,
            }),
        ("Object", ..) => object_metric(ctx, input, spec)
            .await
            .map_err(|error| MetricFailure {
                reason: "FailedGetObjectMetric",
                error,
            }),
        ("External", ..) => {
            external_metric(ctx, input, spec)
                .await
                .map_err(|error| MetricFailure {
                    reason: "FailedGetExternalMetric",
                    error,
                })
        }
        (other, ..) => Err(MetricFailure {
            reason: "InvalidMetricSourceType",
            error: format!("unknown metric source type {other:?}"),
        }),
    }
}

fn labels_map(labels: Option<&BTreeMap<String, String>>) -> Map<String, Value> {
    labels
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Upstream `computeReplicasForMetrics`: the largest proposal across metrics; `Err` when every
/// metric failed, or some failed and the rest would scale down.
async fn compute_replicas(
    ctx: &Ctx,
    hpa: &mut HorizontalPodAutoscaler,
    scale: &Scale,
    now: Timestamp,
) -> Result<(i32, String, Vec<MetricStatus>), (String, Vec<MetricStatus>)> {
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let selector = scale
        .status
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    if selector.is_empty() {
        let msg = "selector is required";
        event(ctx, hpa, true, "SelectorRequired", msg).await;
        set_condition(
            hpa,
            "ScalingActive",
            false,
            "InvalidSelector",
            "the HPA target's scale is missing a selector".into(),
            now,
        );
        return Err((msg.to_string(), Vec::new()));
    }
    let parsed = match LabelSelector::parse(&selector) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            event(ctx, hpa, true, "InvalidSelector", &msg).await;
            set_condition(
                hpa,
                "ScalingActive",
                false,
                "InvalidSelector",
                msg.clone(),
                now,
            );
            return Err((msg, Vec::new()));
        }
    };
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(&ns)
        .into_iter()
        .filter(|p| parsed.matches(&labels_map(p.metadata.labels.as_ref())))
        .collect();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let usage = ctx
        .metrics
        .pod_usage(&ns, &selector)
        .await
        .map_err(|e: MetricsError| e.to_string());
    let spec_replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
    let input = MetricInput {
        namespace: &ns,
        selector: &selector,
        spec_replicas,
        status_replicas,
        pods: &pod_refs,
        usage: &usage,
        now,
    };
    let specs = hpa
        .spec
        .as_ref()
        .and_then(|s| s.metrics.clone())
        .unwrap_or_default();
    let mut statuses = Vec::with_capacity(specs.len());
    let (mut replicas, mut metric) = (0, String::new());
    let mut invalid = 0usize;
    let mut first_failure: Option<MetricFailure> = None;
    for spec in &specs {
        match compute_metric(ctx, &input, spec).await {
            Ok(p) => {
                if replicas == 0 || p.replicas > replicas {
                    replicas = p.replicas;
                    metric = p.metric;
                }
                statuses.push(p.status);
            }
            Err(f) => {
                // Upstream leaves an empty status in the failed metric's place.
                statuses.push(MetricStatus::default());
                event(ctx, hpa, true, f.reason, &f.error).await;
                invalid += 1;
                first_failure.get_or_insert(f);
            }
        }
    }
    if let Some(f) = first_failure
        && (invalid >= specs.len() || replicas < spec_replicas)
    {
        set_condition(
            hpa,
            "ScalingActive",
            false,
            f.reason,
            format!(
                "the HPA was unable to compute the replica count: {}",
                f.error
            ),
            now,
        );
        // The statuses of the metrics that worked still go into the status.
        let statuses = statuses
            .into_iter()
            .filter(|s| !s.type_.is_empty())
            .collect();
        return Err((
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                f.error
            ),
            statuses,
        ));
    }
    set_condition(
        hpa,
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {metric}"),
        now,
    );
    let statuses = statuses
        .into_iter()
        .filter(|s| !s.type_.is_empty())
        .collect();
    Ok((replicas, metric, statuses))
}

/// Upstream `reconcileAutoscaler`.
async fn reconcile(ctx: &Ctx, key: &str, hpa: &mut HorizontalPodAutoscaler) -> Result<(), String> {
    let now = ctx.options.clock.now();
    let spec = hpa.spec.clone().unwrap_or_default();
    let reference = format!(
        "{}/{}/{}",
        spec.scale_target_ref.kind,
        hpa.metadata.namespace.as_deref().unwrap_or(""),
        spec.scale_target_ref.name
    );
    let (scale, api) = match target_scale(ctx, hpa).await {
        Ok(s) => s,
        Err(e) => {
            event(ctx, hpa, true, "FailedGetScale", &e).await;
            set_condition(
                hpa,
                "AbleToScale",
                false,
                "FailedGetScale",
                format!("the HPA controller was unable to get the target's current scale: {e}"),
                now,
            );
            return Err(format!(
                "failed to query scale subresource for {reference}: {e}"
            ));
        }
    };
    set_condition(
        hpa,
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
        now,
    );
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    lock(&ctx.history)
        .entry(key.to_string())
        .or_default()
        .record_initial(current, now);
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut metric_statuses = None;
    let (desired, reason, rescale) = if current == 0 && min != 0 {
        set_condition(
            hpa,
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
            now,
        );
        (0, String::new(), false)
    } else if current > max {
        (
            max,
            "Current number of replicas above Spec.MaxReplicas".to_string(),
            true,
        )
    } else if current < min {
        (
            min,
            "Current number of replicas below Spec.MinReplicas".to_string(),
            true,
        )
    } else {
        let (proposed, metric, statuses) = match compute_replicas(ctx, hpa, &scale, now).await {
            Ok(r) => r,
            Err((e, statuses)) => {
                let desired = hpa.status.as_ref().map_or(0, |s| s.desired_replicas);
                set_status(hpa, current, desired, Some(statuses), None);
                event(ctx, hpa, true, "FailedComputeMetricsReplicas", &e).await;
                return Err(format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {e}"
                ));
            }
        };
        metric_statuses = Some(statuses);
        let reason = if proposed > current {
            format!("{metric} above target")
        } else if proposed < current {
            "All metrics below target".to_string()
        } else {
            String::new()
        };
        let desired = normalize(ctx, key, hpa, current, proposed, min, now);
        (desired, reason, desired != current)
    };
    if rescale {
        let mut new_scale = scale.clone();
        new_scale.spec.get_or_insert_with(Default::default).replicas = Some(desired);
        if let Err(e) = api
            .replace_scale(
                &spec.scale_target_ref.name,
                &PostParams::default(),
                &new_scale,
            )
            .await
        {
            let e = match e {
                kube::Error::Api(s) => s.message,
                other => other.to_string(),
            };
            event(
                ctx,
                hpa,
                true,
                "FailedRescale",
                &format!("New size: {desired}; reason: {reason}; error: {e}"),
            )
            .await;
            set_condition(
                hpa,
                "AbleToScale",
                false,
                "FailedUpdateScale",
                format!("the HPA controller was unable to update the target scale: {e}"),
                now,
            );
            let keep = hpa.status.as_ref().map_or(0, |s| s.desired_replicas);
            set_status(hpa, current, keep, metric_statuses, None);
            return Err(format!("failed to rescale {reference}: {e}"));
        }
        set_condition(
            hpa,
            "AbleToScale",
            true,
            "SucceededRescale",
            format!("the HPA controller was able to update the target scale to {desired}"),
            now,
        );
        event(
            ctx,
            hpa,
            false,
            "SuccessfulRescale",
            &format!("New size: {desired}; reason: {reason}"),
        )
        .await;
        lock(&ctx.history)
            .entry(key.to_string())
            .or_default()
            .store_scale_event(spec.behavior.as_ref(), current, desired, now);
        set_status(hpa, current, desired, metric_statuses, Some(now));
    } else {
        set_status(hpa, current, current, metric_statuses, None);
    }
    Ok(())
}

/// Upstream `normalizeDesiredReplicas` / `normalizeDesiredReplicasWithBehaviors`: stabilize,
/// then limit, setting `AbleToScale` and `ScalingLimited`.
fn normalize(
    ctx: &Ctx,
    key: &str,
    hpa: &mut HorizontalPodAutoscaler,
    current: i32,
    proposed: i32,
    min: i32,
    now: Timestamp,
) -> i32 {
    let spec = hpa.spec.clone().unwrap_or_default();
    let max = spec.max_replicas;
    let mut all = lock(&ctx.history);
    let history = all.entry(key.to_string()).or_default();
    let (stabilized, stabilized_reason, (desired, limit)) = match spec.behavior.clone() {
        None => {
            let s = history.stabilize(proposed, ctx.options.downscale_stabilization, now);
            (
                s,
                (
                    "ScaleDownStabilized",
                    "recent recommendations were higher than current one, applying the highest recent recommendation",
                ),
                behavior::convert_with_rules(current, s, min, max),
            )
        }
        Some(mut b) => {
            // Upstream `maybeInitScaleDownStabilizationWindow`: a scale-down rule without a
            // window uses the controller's.
            let flag_window =
                i32::try_from(ctx.options.downscale_stabilization.as_secs()).unwrap_or(i32::MAX);
            if let Some(down) = b.scale_down.as_mut()
                && down.stabilization_window_seconds.is_none()
            {
                down.stabilization_window_seconds = Some(flag_window);
            }
            let window = |r: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>,
                          default: i32| {
                Duration::from_secs(
                    u64::try_from(
                        r.and_then(|r| r.stabilization_window_seconds)
                            .unwrap_or(default),
                    )
                    .unwrap_or(0),
                )
            };
            let up = window(b.scale_up.as_ref(), 0);
            let down = window(b.scale_down.as_ref(), flag_window);
            let (s, reason) = history.stabilize_with_behavior(current, proposed, up, down, now);
            let limited =
                behavior::convert_with_behavior_rate(history, current, s, min, max, &b, now);
            (s, reason, limited)
        }
    };
    drop(all);
    if stabilized != proposed {
        set_condition(
            hpa,
            "AbleToScale",
            true,
            stabilized_reason.0,
            stabilized_reason.1.to_string(),
            now,
        );
    } else {
        set_condition(
            hpa,
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size".into(),
            now,
        );
    }
    set_condition(
        hpa,
        "ScalingLimited",
        desired != stabilized,
        limit.0,
        limit.1.to_string(),
        now,
    );
    desired
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milli_quantities_print_as_upstream() {
        assert_eq!(milli_quantity(250), "250m");
        assert_eq!(milli_quantity(2000), "2");
        assert_eq!(milli_quantity(1500), "1500m");
        assert_eq!(milli_quantity(52_428_800_000), "52428800");
        assert_eq!(milli_quantity(1_000_000_000), "1M");
        assert_eq!(milli_quantity(0), "0");
    }

    #[test]
    fn conditions_move_their_transition_time_only_on_a_status_change() {
        let mut hpa = HorizontalPodAutoscaler::default();
        let t0 = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let t1 = Timestamp::from_second(1_700_000_100).unwrap_or(Timestamp::UNIX_EPOCH);
        set_condition(&mut hpa, "AbleToScale", true, "A", "a".into(), t0);
        set_condition(&mut hpa, "AbleToScale", true, "B", "b".into(), t1);
        let c = &hpa
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()[0];
        assert_eq!(
            (
                c.reason.as_deref(),
                c.last_transition_time.as_ref().map(|t| t.0)
            ),
            (Some("B"), Some(t0))
        );
        set_condition(&mut hpa, "AbleToScale", false, "C", "c".into(), t1);
        let c = &hpa
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()[0];
        assert_eq!(c.last_transition_time.as_ref().map(|t| t.0), Some(t1));
    }
}
