//! `/metrics/resource`: the kubelet's resource metrics (`pkg/kubelet/metrics/collectors/
//! resource_metrics.go`), the figures metrics-server scrapes for `kubectl top` and the HPA.
//! Names, types and labels are the kubelet's (issue 21, contract 1):
//!
//! - `node_cpu_usage_seconds_total` (counter, core-seconds), `node_memory_working_set_bytes`;
//! - `container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`,
//!   `container_start_time_seconds`, labelled `container`, `namespace`, `pod`;
//! - `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes`, labelled `namespace`, `pod`;
//! - `resource_scrape_error`: 1 when the runtime could not give every figure;
//! - tandem's `tandem_resource_metrics_emulated`: 1 when the figures are declared by the
//!   emulated usage model ([`super::emulated`]) rather than measured.
//!
//! Written by a prometheus-client [`Collector`] over one [`Snapshot`] per scrape. Unlike the
//! kubelet, samples carry no explicit timestamp (prometheus-client writes none): a scraper
//! takes its own scrape time, which is when the snapshot was taken.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::Snapshot;
use super::exposition;

fn seconds(core_nanos: u64) -> f64 {
    core_nanos as f64 / 1e9
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The resource metrics of one [`Snapshot`].
#[derive(Debug)]
pub struct ResourceCollector {
    snapshot: Snapshot,
}

impl ResourceCollector {
    pub fn new(snapshot: Snapshot) -> ResourceCollector {
        ResourceCollector { snapshot }
    }
}

impl Collector for ResourceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.snapshot;

        let family = encoder.encode_descriptor(
            "node_cpu_usage_seconds",
            "Cumulative CPU time used by the node, in core-seconds",
            None,
            MetricType::Counter,
        )?;
        if let Some(node) = &s.node {
            ConstCounter::new(seconds(node.cpu_core_nanos)).encode(family)?;
        }
        let family = encoder.encode_descriptor(
            "node_memory_working_set_bytes",
            "The node's current working set, in bytes",
            None,
            MetricType::Gauge,
        )?;
        if let Some(node) = &s.node {
            ConstGauge::new(node.memory_working_set_bytes as f64).encode(family)?;
        }

        let containers = || {
            s.pods.iter().flat_map(|p| {
                p.containers.iter().map(move |c| {
                    let labels = [
                        ("container", c.stats.name.as_str()),
                        ("namespace", p.namespace.as_str()),
                        ("pod", p.name.as_str()),
                    ];
                    (labels, c)
                })
            })
        };
        let mut family = encoder.encode_descriptor(
            "container_cpu_usage_seconds",
            "Cumulative CPU time used by the container, in core-seconds",
            None,
            MetricType::Counter,
        )?;
        for (labels, c) in containers() {
            ConstCounter::new(seconds(c.stats.cpu_core_nanos))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "container_memory_working_set_bytes",
            "The container's current working set, in bytes",
            None,
            MetricType::Gauge,
        )?;
        for (labels, c) in containers() {
            ConstGauge::new(c.stats.memory_working_set_bytes as f64)
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "container_start_time_seconds",
            "When the container started, in seconds since the Unix epoch",
            None,
            MetricType::Gauge,
        )?;
        for (labels, c) in containers() {
            if let Some(started) = c.stats.started_at {
                ConstGauge::new(unix_seconds(started)).encode(family.encode_family(&labels)?)?;
            }
        }

        let mut family = encoder.encode_descriptor(
            "pod_cpu_usage_seconds",
            "Cumulative CPU time used by the pod's containers, in core-seconds",
            None,
            MetricType::Counter,
        )?;
        for p in &s.pods {
            let labels = [
                ("namespace", p.namespace.as_str()),
                ("pod", p.name.as_str()),
            ];
            ConstCounter::new(seconds(p.cpu_core_nanos()))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "pod_memory_working_set_bytes",
            "The current working set of the pod's containers, in bytes",
            None,
            MetricType::Gauge,
        )?;
        for p in &s.pods {
            let labels = [
                ("namespace", p.namespace.as_str()),
                ("pod", p.name.as_str()),
            ];
            ConstGauge::new(p.memory_working_set_bytes() as f64)
                .encode(family.encode_family(&labels)?)?;
        }

        let family = encoder.encode_descriptor(
            "resource_scrape_error",
            "1 when some figures could not be read from the container runtime, 0 otherwise",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(s.error.is_some())).encode(family)?;
        let family = encoder.encode_descriptor(
            "tandem_resource_metrics_emulated",
            "1 when this node's figures are emulated: declared by the pods' \
             metrics.tandem.io/emulated-cpu and emulated-memory annotations (or half their \
             requests) and the node's reservations, not measured; 0 when measured",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(s.emulated)).encode(family)?;
        Ok(())
    }
}

/// The resource metrics of `snapshot` for a scraper that sent `accept`.
pub fn encode(snapshot: Snapshot, accept: &str) -> Result<(&'static str, String), std::fmt::Error> {
    if let Some(error) = &snapshot.error {
        tracing::debug!(node = %snapshot.node_name, %error, "resource metrics are incomplete");
    }
    let node_at = snapshot.node.as_ref().map(|n| n.timestamp);
    let pods_at = snapshot.pods.iter().filter_map(|p| p.timestamp()).max();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ResourceCollector::new(snapshot)));
    let (content_type, body) = exposition::encode(&registry, accept)?;
    if content_type != exposition::TEXT_CONTENT_TYPE {
        return Ok((content_type, body));
    }
    Ok((content_type, with_timestamps(&body, node_at, pods_at)))
}

/// Dates the samples as the kubelet's resource metrics are dated (text format 0.0.4 allows a
/// timestamp in milliseconds after each value; prometheus-client writes none): `node_*` at the
/// node's reading, `pod_*` and `container_*` at the runtime's. A scraper then takes rates over
/// the time between readings, not between its requests (metrics-server does).
fn with_timestamps(text: &str, node_at: Option<SystemTime>, pods_at: Option<SystemTime>) -> String {
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
    };
    let (node_ms, pods_ms) = (node_at.and_then(ms), pods_at.and_then(ms));
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for line in text.lines() {
        out.push_str(line);
        let stamp = if line.starts_with('#') {
            None
        } else if line.starts_with("node_") {
            node_ms
        } else if line.starts_with("pod_") || line.starts_with("container_") {
            pods_ms
        } else {
            None
        };
        if let Some(ms) = stamp {
            out.push(' ');
            out.push_str(&ms.to_string());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod timestamp_tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn samples_are_dated_by_the_reading_they_come_from() {
        let text = "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 1.5\ncontainer_cpu_usage_seconds_total{container=\"c\",namespace=\"n\",pod=\"p\"} 0.5\nresource_scrape_error 0\n";
        let node = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let pods = UNIX_EPOCH + Duration::from_millis(1_800_000_000_456);
        assert_eq!(
            with_timestamps(text, Some(node), Some(pods)),
            "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 1.5 1800000000123\ncontainer_cpu_usage_seconds_total{container=\"c\",namespace=\"n\",pod=\"p\"} 0.5 1800000000456\nresource_scrape_error 0\n"
        );
        assert_eq!(with_timestamps(text, None, None), text);
    }
}
