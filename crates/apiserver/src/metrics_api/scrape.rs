//! The scraper: every `--metric-resolution` it reads each node agent's `/metrics/resource` as
//! metrics-server's scraper reads the kubelet's (`pkg/scraper`), over the API server's own
//! kubelet client (TLS as `kube-apiserver-kubelet-client`, see `node_proxy::kubelet_client`),
//! and records the points in the [`MetricsStore`].
//!
//! As metrics-server: nodes are scraped concurrently, each with a timeout (its
//! `--kubelet-request-timeout`, 10 s, but never longer than the resolution); a node that fails
//! is logged and left out until it answers again; samples are dated by their timestamps (the
//! kubelet's and tandem's agents write them), and one without is dated halfway between the
//! request and its response.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use http::{Method, Request};
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;

use super::store::{NodeScrape, Point};
use super::text::{self, Sample};
use crate::state::State;

/// metrics-server's `--kubelet-request-timeout` default.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many nodes are scraped at once.
const CONCURRENCY: usize = 16;

/// The most of a response body read (a node with thousands of containers stays well below).
const MAX_BODY: usize = 16 << 20;

/// Scrapes every `resolution` until the task is dropped.
pub async fn run(state: Arc<State>, resolution: Duration) {
    let mut tick = tokio::time::interval(resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        scrape_all(&state, resolution.min(REQUEST_TIMEOUT)).await;
    }
}

/// One round over every node.
pub async fn scrape_all(state: &Arc<State>, timeout: Duration) {
    let Ok(rt) = state.resource("", "v1", "nodes") else {
        return;
    };
    let nodes: Vec<(String, Value)> = state
        .cache
        .snapshot(&rt, &rt.key_prefix(), |_| true)
        .items
        .iter()
        .filter_map(|o| {
            let v = o.value();
            let name = v.pointer("/metadata/name")?.as_str()?.to_string();
            Some((name, v.into_owned()))
        })
        .collect();
    let results: Vec<(String, Option<NodeScrape>)> = futures::stream::iter(nodes)
        .map(|(name, node)| async move {
            let scrape = scrape_node(state, &name, &node, timeout).await;
            (name, scrape)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let answered: HashSet<String> = results
        .iter()
        .filter(|(_, s)| s.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    let mut store = state
        .metrics
        .store
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for (name, scrape) in results {
        if let Some(scrape) = scrape {
            store.record(&name, scrape);
        }
    }
    store.retain_nodes(|n| answered.contains(n));
}

async fn scrape_node(
    state: &State,
    name: &str,
    node: &Value,
    timeout: Duration,
) -> Option<NodeScrape> {
    let address = match crate::node_proxy::node_agent_address(node) {
        Ok(a) => a,
        Err(e) => {
            tracing::debug!(node = name, error = %e.message, "node not scraped: no address");
            return None;
        }
    };
    let url = address.url("/metrics/resource", "");
    let sent = SystemTime::now();
    let body = match tokio::time::timeout(timeout, fetch(state, &url)).await {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => {
            tracing::info!(node = name, %url, error = %e, "failed to scrape node");
            return None;
        }
        Err(_) => {
            tracing::info!(node = name, %url, ?timeout, "failed to scrape node: timed out");
            return None;
        }
    };
    // The agent computed its figures between the request and the response: the midpoint is the
    // best guess of when, which keeps the rate of a short first window unbiased.
    let received = SystemTime::now();
    let taken = sent + received.duration_since(sent).unwrap_or_default() / 2;
    match text::parse(&body) {
        Ok(samples) => Some(decode(&samples, taken)),
        Err(e) => {
            tracing::info!(node = name, error = %e, "failed to decode the node's resource metrics");
            None
        }
    }
}

async fn fetch(state: &State, url: &str) -> Result<String, String> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(url)
        .header(http::header::ACCEPT, "text/plain;version=0.0.4")
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = state
        .kubelet_client
        .forward(req, url)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
        return Err(format!("request failed, status: {status}: {text}"));
    }
    String::from_utf8(body.to_vec()).map_err(|_| "the body is not UTF-8".to_string())
}

fn at(sample: &Sample, received: SystemTime) -> SystemTime {
    sample
        .timestamp_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
        .unwrap_or(received)
}

fn seconds(v: f64) -> Option<SystemTime> {
    (v.is_finite() && v > 0.0).then(|| UNIX_EPOCH + Duration::from_secs_f64(v))
}

/// The node's and containers' points in a `/metrics/resource` body. A sample that is not a
/// finite number is left out, as metrics-server drops it.
pub fn decode(samples: &[Sample], received: SystemTime) -> NodeScrape {
    let mut scrape = NodeScrape::default();
    let mut node_cpu = None;
    let mut node_mem = None;
    let blank = |t: SystemTime| Point {
        at: t,
        cpu_seconds: f64::NAN,
        memory_bytes: f64::NAN,
        started: None,
    };
    for s in samples {
        if !s.value.is_finite() {
            continue;
        }
        let container_key = || {
            (
                s.label("namespace").to_string(),
                s.label("pod").to_string(),
                s.label("container").to_string(),
            )
        };
        match s.name.as_str() {
            "node_cpu_usage_seconds_total" => node_cpu = Some((s.value, at(s, received))),
            "node_memory_working_set_bytes" => node_mem = Some(s.value),
            "tandem_resource_metrics_emulated" => scrape.emulated = s.value == 1.0,
            "container_cpu_usage_seconds_total" => {
                let p = scrape
                    .containers
                    .entry(container_key())
                    .or_insert_with(|| blank(at(s, received)));
                p.cpu_seconds = s.value;
                p.at = at(s, received);
            }
            "container_memory_working_set_bytes" => {
                let p = scrape
                    .containers
                    .entry(container_key())
                    .or_insert_with(|| blank(at(s, received)));
                p.memory_bytes = s.value;
            }
            "container_start_time_seconds" => {
                let p = scrape
                    .containers
                    .entry(container_key())
                    .or_insert_with(|| blank(at(s, received)));
                p.started = seconds(s.value);
            }
            _ => {}
        }
    }
    scrape.containers.retain(|(ns, pod, c), p| {
        !ns.is_empty()
            && !pod.is_empty()
            && !c.is_empty()
            && p.cpu_seconds.is_finite()
            && p.memory_bytes.is_finite()
    });
    if let (Some((cpu, t)), Some(mem)) = (node_cpu, node_mem) {
        scrape.node = Some(Point {
            at: t,
            cpu_seconds: cpu,
            memory_bytes: mem,
            started: None,
        });
    }
    scrape
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn a_resource_metrics_body_decodes_into_node_and_container_points() {
        let body = "\
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1800000000000
node_memory_working_set_bytes 2.5e+08 1800000000000
container_cpu_usage_seconds_total{container=\"web\",namespace=\"shop\",pod=\"web-0\"} 0.75
container_memory_working_set_bytes{container=\"web\",namespace=\"shop\",pod=\"web-0\"} 1.6777216e+07
container_start_time_seconds{container=\"web\",namespace=\"shop\",pod=\"web-0\"} 1.7999999e+09
container_cpu_usage_seconds_total{container=\"half\",namespace=\"shop\",pod=\"web-0\"} 1
tandem_resource_metrics_emulated 1
resource_scrape_error 0
";
        let received = UNIX_EPOCH + Duration::from_secs(1_800_000_001);
        let scrape = decode(&text::parse(body).unwrap(), received);
        assert!(scrape.emulated);
        let node = scrape.node.unwrap();
        assert_eq!(node.cpu_seconds, 12.5);
        assert_eq!(node.memory_bytes, 2.5e8);
        assert_eq!(node.at, UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        assert_eq!(
            scrape.containers.len(),
            1,
            "a container without memory is left out"
        );
        let key = ("shop".to_string(), "web-0".to_string(), "web".to_string());
        let web = scrape.containers[&key];
        assert_eq!(web.cpu_seconds, 0.75);
        assert_eq!(web.memory_bytes, 16_777_216.0);
        assert_eq!(web.at, received, "no timestamp: the time the response came");
        assert!(web.started.is_some());
    }

    #[test]
    fn a_node_without_both_node_figures_has_no_node_point() {
        let scrape = decode(
            &text::parse("node_cpu_usage_seconds_total 1\n").unwrap(),
            SystemTime::now(),
        );
        assert!(scrape.node.is_none());
        assert!(!scrape.emulated);
    }
}
