//! Where the HorizontalPodAutoscaler controller reads its metrics, as upstream's REST metrics
//! client (`pkg/controller/podautoscaler/metrics/client.go`) reads them: pod usage from the
//! `metrics.k8s.io/v1beta1` PodMetrics of a namespace and label selector
//! (`resourceMetricsClient`); Pods and Object metrics from `custom.metrics.k8s.io` (v1beta2, or
//! v1beta1 where only that is served: `customMetricsClient`); External metrics from
//! `external.metrics.k8s.io/v1beta1` (`externalMetricsClient`). The last two are served by an
//! aggregated adapter of the user's (prometheus-adapter, KEDA …). [`MetricsSource`] is the seam:
//! the controller uses [`RestMetrics`] against the API server; tests hand in figures of their
//! own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tandem_core::validation::quantity::Quantity;

use super::replicas::{PodSamples, Sample, milli};

/// One pod's measured usage: per container, per resource, in milli-units.
#[derive(Debug, Clone, PartialEq)]
pub struct PodUsage {
    pub timestamp: Timestamp,
    pub window: Duration,
    pub containers: BTreeMap<String, BTreeMap<String, i64>>,
}

/// Why usage could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The metrics API answered with an error (not served, forbidden, …).
    #[error("unable to fetch metrics from resource metrics API: {0}")]
    Api(String),
    /// The answer had no PodMetrics.
    #[error("no metrics returned from resource metrics API")]
    Empty,
}

/// A source of pod usage.
pub trait MetricsSource: Send + Sync {
    /// The usage of the pods of `namespace` matching `selector` (a label selector string), by
    /// pod name.
    fn pod_usage<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<HashMap<String, PodUsage>, MetricsError>>;
}

/// What names the object of an Object metric (an HPA's `describedObject`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

/// A source of custom and external metrics; each answer is in milli-units, errors read as
/// upstream's metrics clients write them.
pub trait CustomMetricsSource: Send + Sync {
    /// A Pods metric: `metric` of each pod of `namespace` matching `selector`, by pod name
    /// (`GetRawMetric`).
    fn pods_metric<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<PodSamples, String>>;

    /// An Object metric: `metric` of one object (`GetObjectMetric`).
    fn object_metric<'a>(
        &'a self,
        namespace: &'a str,
        object: &'a DescribedObject,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<i64, String>>;

    /// An External metric: every series of `metric` matching `metric_selector`
    /// (`GetExternalMetric`).
    fn external_metric<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<i64>, String>>;
}

/// A shared source of custom and external metrics.
pub type SharedCustomMetrics = Arc<dyn CustomMetricsSource>;

/// A shared metrics source.
pub type SharedMetrics = Arc<dyn MetricsSource>;

/// Reads `PodMetrics` from the API server's `metrics.k8s.io/v1beta1`.
#[derive(Clone)]
pub struct RestMetrics {
    client: kube::Client,
}

impl RestMetrics {
    pub fn new(client: kube::Client) -> Self {
        RestMetrics { client }
    }
}

/// Parses a Go duration as metrics-server writes `window` (`15s`, `1m0s`, `500ms`); zero when
/// it does not parse.
fn go_duration(s: &str) -> Duration {
    tandem_core::time::parse_go_duration_std(s).unwrap_or_default()
}

/// The usage of a `PodMetricsList` (JSON), by pod name.
pub fn parse_pod_metrics_list(list: &Value) -> HashMap<String, PodUsage> {
    let mut out = HashMap::new();
    for item in list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = item.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let timestamp = item
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let window = go_duration(item.get("window").and_then(Value::as_str).unwrap_or(""));
        let mut containers = BTreeMap::new();
        for c in item
            .get("containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let cname = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let usage: BTreeMap<String, i64> = c
                .get("usage")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(r, q)| {
                    let q = q.as_str().and_then(Quantity::parse)?;
                    Some((r.clone(), milli(q)))
                })
                .collect();
            containers.insert(cname, usage);
        }
        out.insert(
            name.to_string(),
            PodUsage {
                timestamp,
                window,
                containers,
            },
        );
    }
    out
}

/// Per-pod samples of `resource` (summed over containers, or of one `container`), as
/// upstream's `getPodMetrics` / `getContainerMetrics`: a pod with a container lacking the
/// resource, or without the named container, has no sample.
pub fn samples(
    usage: &HashMap<String, PodUsage>,
    resource: &str,
    container: Option<&str>,
) -> PodSamples {
    let mut out = PodSamples::new();
    for (pod, u) in usage {
        if u.containers.is_empty() {
            continue;
        }
        let value = match container {
            Some(c) => u.containers.get(c).and_then(|r| r.get(resource)).copied(),
            None => u
                .containers
                .values()
                .map(|r| r.get(resource).copied())
                .sum::<Option<i64>>(),
        };
        if let Some(value) = value {
            out.insert(
                pod.clone(),
                Sample {
                    value,
                    timestamp: u.timestamp,
                    window: u.window,
                },
            );
        }
    }
    out
}

impl MetricsSource for RestMetrics {
    fn pod_usage<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
    ) -> BoxFuture<'a, Result<HashMap<String, PodUsage>, MetricsError>> {
        Box::pin(async move {
            let mut url = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods");
            if !selector.is_empty() {
                url.push_str("?labelSelector=");
                url.push_str(&encode(selector));
            }
            let req = http::Request::get(url)
                .body(Vec::new())
                .map_err(|e| MetricsError::Api(e.to_string()))?;
            let list: Value = self
                .client
                .request(req)
                .await
                .map_err(|e| MetricsError::Api(api_error(&e)))?;
            let usage = parse_pod_metrics_list(&list);
            if usage.is_empty() {
                return Err(MetricsError::Empty);
            }
            Ok(usage)
        })
    }
}

/// The window of a custom metric without `windowSeconds` (upstream's
/// `metricServerDefaultMetricWindow`).
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// The samples of a custom `MetricValueList` (v1beta1 or v1beta2: both carry
/// `describedObject`, `timestamp`, `windowSeconds` and `value`), by described object name.
pub fn parse_metric_value_list(list: &Value) -> Result<PodSamples, String> {
    let mut out = PodSamples::new();
    for item in list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = item
            .pointer("/describedObject/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let value = metric_value(item)?;
        let timestamp = item
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok())
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let window = item
            .get("windowSeconds")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_WINDOW, Duration::from_secs);
        out.insert(
            name.to_string(),
            Sample {
                value,
                timestamp,
                window,
            },
        );
    }
    Ok(out)
}

/// An item's `value` quantity in milli-units.
fn metric_value(item: &Value) -> Result<i64, String> {
    let raw = item.get("value").and_then(Value::as_str).unwrap_or("");
    Quantity::parse(raw)
        .map(milli)
        .ok_or_else(|| format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {raw:?}"))
}

/// The values of an `ExternalMetricValueList`, in milli-units.
pub fn parse_external_metric_list(list: &Value) -> Result<Vec<i64>, String> {
    list.get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(metric_value)
        .collect()
}

/// The custom metrics API's path segment for objects of `kind` (`services`, or
/// `ingresses.networking.k8s.io` outside the core group), as upstream's REST mapper names them.
pub fn custom_metrics_resource(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl RestMetrics {
    /// GETs `path` (after `/apis/GROUP/VERSION`) from the first of `versions` that is served;
    /// a 404 from an earlier version falls through to the next, and the first error is kept.
    async fn get_first(&self, group: &str, versions: &[&str], path: &str) -> Result<Value, String> {
        let mut first_error = None;
        for version in versions {
            let req = http::Request::get(format!("/apis/{group}/{version}{path}"))
                .body(Vec::new())
                .map_err(|e| e.to_string())?;
            match self.client.request::<Value>(req).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let not_found = matches!(&e, kube::Error::Api(s) if s.code == 404);
                    first_error.get_or_insert(api_error(&e));
                    if !not_found {
                        break;
                    }
                }
            }
        }
        Err(first_error.unwrap_or_default())
    }

    async fn custom(&self, path: &str) -> Result<Value, String> {
        self.get_first("custom.metrics.k8s.io", &["v1beta2", "v1beta1"], path)
            .await
            .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))
    }
}

/// `?labelSelector=…&metricLabelSelector=…`, each only when set.
fn selector_query(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

impl CustomMetricsSource for RestMetrics {
    fn pods_metric<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<PodSamples, String>> {
        Box::pin(async move {
            let query = selector_query(&[
                ("labelSelector", selector),
                ("metricLabelSelector", metric_selector),
            ]);
            let list = self
                .custom(&format!(
                    "/namespaces/{namespace}/pods/*/{}{query}",
                    encode(metric)
                ))
                .await?;
            let samples = parse_metric_value_list(&list)
                .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))?;
            if samples.is_empty() {
                return Err("no metrics returned from custom metrics API".into());
            }
            Ok(samples)
        })
    }

    fn object_metric<'a>(
        &'a self,
        namespace: &'a str,
        object: &'a DescribedObject,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let (group, version) = tandem_core::registry::split_api_version(&object.api_version);
            let query = selector_query(&[("metricLabelSelector", metric_selector)]);
            let metric = encode(metric);
            // A Namespace's metrics live under the root-scoped `namespaces/NAME/metrics/…`.
            let path = if object.kind == "Namespace" && group.is_empty() {
                format!("/namespaces/{}/metrics/{metric}{query}", object.name)
            } else {
                let gvk = kube::core::GroupVersionKind::gvk(group, version, &object.kind);
                let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk)
                    .await
                    .map_err(|_| {
                        format!(
                            "unable to map kind {} in group {group:?} to a resource",
                            object.kind
                        )
                    })?;
                format!(
                    "/namespaces/{namespace}/{}/{}/{metric}{query}",
                    custom_metrics_resource(&ar.plural, &ar.group),
                    object.name
                )
            };
            let list = self.custom(&path).await?;
            let items = list
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if items.len() != 1 {
                return Err(format!(
                    "unable to fetch metrics from custom metrics API: the custom metrics API server returned {} results when we asked for exactly one",
                    items.len()
                ));
            }
            metric_value(&items[0])
                .map_err(|e| format!("unable to fetch metrics from custom metrics API: {e}"))
        })
    }

    fn external_metric<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let query = selector_query(&[("labelSelector", metric_selector)]);
            let list = self
                .get_first(
                    "external.metrics.k8s.io",
                    &["v1beta1"],
                    &format!("/namespaces/{namespace}/{}{query}", encode(metric)),
                )
                .await
                .map_err(|e| format!("unable to fetch metrics from external metrics API: {e}"))?;
            let values = parse_external_metric_list(&list)
                .map_err(|e| format!("unable to fetch metrics from external metrics API: {e}"))?;
            if values.is_empty() {
                return Err("no metrics returned from external metrics API".into());
            }
            Ok(values)
        })
    }
}

/// An API error as upstream's client prints it: the Status message, or the error.
fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_metrics_list_parses_into_milli_samples() {
        let list = json!({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "items": [
            {"metadata": {"name": "a", "namespace": "default"}, "timestamp": "2024-01-01T00:00:00Z", "window": "15s",
             "containers": [{"name": "c1", "usage": {"cpu": "250m", "memory": "64Mi"}},
                            {"name": "c2", "usage": {"cpu": "1", "memory": "1Mi"}}]},
            {"metadata": {"name": "b", "namespace": "default"}, "timestamp": "2024-01-01T00:00:00Z", "window": "1m0s",
             "containers": [{"name": "c1", "usage": {"memory": "1Mi"}}]}]});
        let usage = parse_pod_metrics_list(&list);
        assert_eq!(usage["a"].window, Duration::from_secs(15));
        assert_eq!(usage["b"].window, Duration::from_secs(60));
        let cpu = samples(&usage, "cpu", None);
        assert_eq!(cpu["a"].value, 1250);
        // b lacks cpu in a container: no sample, as upstream drops the pod.
        assert!(!cpu.contains_key("b"));
        let c1 = samples(&usage, "cpu", Some("c1"));
        assert_eq!(c1["a"].value, 250);
        assert_eq!(
            samples(&usage, "memory", Some("c2"))["a"].value,
            1_048_576_000
        );
    }

    #[test]
    fn custom_and_external_metric_lists_parse_into_milli_values() {
        let list = json!({"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "items": [
            {"describedObject": {"kind": "Pod", "namespace": "default", "name": "a", "apiVersion": "/v1"},
             "metric": {"name": "requests"}, "timestamp": "2024-01-01T00:00:00Z", "windowSeconds": 30, "value": "1500m"},
            {"describedObject": {"kind": "Pod", "namespace": "default", "name": "b", "apiVersion": "/v1"},
             "metricName": "requests", "timestamp": "2024-01-01T00:00:00Z", "value": "2"}]});
        let samples = parse_metric_value_list(&list).unwrap_or_default();
        assert_eq!(samples["a"].value, 1500);
        assert_eq!(samples["a"].window, Duration::from_secs(30));
        assert_eq!(samples["b"].value, 2000);
        assert_eq!(samples["b"].window, DEFAULT_WINDOW);
        let bad = json!({"items": [{"describedObject": {"name": "a"}, "value": "lots"}]});
        assert!(parse_metric_value_list(&bad).is_err());
        let external = json!({"kind": "ExternalMetricValueList", "items": [
            {"metricName": "queue", "metricLabels": {"q": "a"}, "timestamp": "2024-01-01T00:00:00Z", "value": "30"},
            {"metricName": "queue", "metricLabels": {"q": "b"}, "timestamp": "2024-01-01T00:00:00Z", "value": "250m"}]});
        assert_eq!(
            parse_external_metric_list(&external).unwrap_or_default(),
            vec![30_000, 250]
        );
        assert_eq!(custom_metrics_resource("services", ""), "services");
        assert_eq!(
            custom_metrics_resource("ingresses", "networking.k8s.io"),
            "ingresses.networking.k8s.io"
        );
        assert_eq!(
            selector_query(&[("labelSelector", "app=web"), ("metricLabelSelector", "")]),
            "?labelSelector=app%3Dweb"
        );
        assert_eq!(selector_query(&[("labelSelector", "")]), "");
    }

    #[test]
    fn selectors_are_percent_encoded() {
        assert_eq!(
            encode("app=web,tier in (a,b)"),
            "app%3Dweb%2Ctier%20in%20%28a%2Cb%29"
        );
    }
}
