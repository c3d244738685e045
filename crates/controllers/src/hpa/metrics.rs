//! Where the HorizontalPodAutoscaler controller reads pod usage: the `metrics.k8s.io/v1beta1`
//! PodMetrics of a namespace and label selector, as upstream's REST metrics client
//! (`pkg/controller/podautoscaler/metrics/client.go`, `resourceMetricsClient.GetResourceMetric`)
//! reads them. [`MetricsSource`] is the seam: the controller uses [`RestMetrics`] against the
//! API server; tests hand in figures of their own.

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
    fn selectors_are_percent_encoded() {
        assert_eq!(
            encode("app=web,tier in (a,b)"),
            "app%3Dweb%2Ctier%20in%20%28a%2Cb%29"
        );
    }
}
