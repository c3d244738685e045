//! The resource metrics kept between scrapes, as metrics-server's `pkg/storage` keeps them: per
//! node and per container the last two cumulative points, the rate being the CPU time used
//! between them over the time between them (the `window`), the memory being the newest working
//! set.
//!
//! What follows metrics-server:
//! - a point no newer than the last one is ignored; a counter that went backwards (a restarted
//!   container or node) drops the older point, so no negative rate is ever reported;
//! - a container seen for the first time, whose start time lies before the first point, counts
//!   its start as a previous point of zero CPU time, so a new pod has metrics after one scrape;
//! - a pod is reported only when every container it reported has a rate;
//! - a node or pod missing from a scrape is forgotten.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// One cumulative reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub at: SystemTime,
    /// Cumulative CPU time in core-seconds.
    pub cpu_seconds: f64,
    pub memory_bytes: f64,
    /// The container's (or node's) start, when reported.
    pub started: Option<SystemTime>,
}

/// What a rate over two points gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// When the newer point was taken.
    pub timestamp: SystemTime,
    /// The time between the two points.
    pub window: Duration,
    /// CPU in nanocores.
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

#[derive(Debug, Clone, Default)]
struct Series {
    prev: Option<Point>,
    last: Option<Point>,
}

impl Series {
    fn push(&mut self, p: Point) {
        match self.last {
            Some(last) if p.at <= last.at => {}
            Some(last) if p.cpu_seconds < last.cpu_seconds => {
                self.prev = None;
                self.last = Some(p);
            }
            last => {
                self.prev = last;
                self.last = Some(p);
            }
        }
        if self.prev.is_none()
            && let Some(started) = p.started
            && started < p.at
        {
            self.prev = Some(Point {
                at: started,
                cpu_seconds: 0.0,
                memory_bytes: 0.0,
                started: Some(started),
            });
        }
    }

    fn usage(&self) -> Option<Usage> {
        let (prev, last) = (self.prev?, self.last?);
        let window = last.at.duration_since(prev.at).ok()?;
        if window.is_zero() || last.cpu_seconds < prev.cpu_seconds {
            return None;
        }
        let rate = (last.cpu_seconds - prev.cpu_seconds) / window.as_secs_f64();
        Some(Usage {
            timestamp: last.at,
            window,
            cpu_nanocores: (rate * 1e9).round() as u64,
            memory_bytes: last.memory_bytes.max(0.0) as u64,
        })
    }
}

/// One node's scrape: its own point and its containers' by (namespace, pod, container).
#[derive(Debug, Clone, Default)]
pub struct NodeScrape {
    pub node: Option<Point>,
    pub containers: BTreeMap<(String, String, String), Point>,
    /// The node said its figures are emulated (`tandem_resource_metrics_emulated 1`).
    pub emulated: bool,
}

#[derive(Debug, Default)]
struct NodeState {
    node: Series,
    containers: HashMap<(String, String, String), Series>,
    emulated: bool,
}

/// A pod's usage, container by container.
#[derive(Debug, Clone, PartialEq)]
pub struct PodUsage {
    pub timestamp: SystemTime,
    pub window: Duration,
    pub containers: Vec<(String, Usage)>,
    pub node: String,
    pub emulated: bool,
}

/// Everything the API serves, by node.
#[derive(Debug, Default)]
pub struct MetricsStore {
    nodes: HashMap<String, NodeState>,
}

impl MetricsStore {
    /// Records a scrape of `node`.
    pub fn record(&mut self, node: &str, scrape: NodeScrape) {
        let state = self.nodes.entry(node.to_string()).or_default();
        state.emulated = scrape.emulated;
        match scrape.node {
            Some(p) => state.node.push(p),
            None => state.node = Series::default(),
        }
        state
            .containers
            .retain(|key, _| scrape.containers.contains_key(key));
        for (key, point) in scrape.containers {
            state.containers.entry(key).or_default().push(point);
        }
    }

    /// Forgets every node not in `keep` (deleted nodes, nodes that failed to answer).
    pub fn retain_nodes(&mut self, keep: impl Fn(&str) -> bool) {
        self.nodes.retain(|name, _| keep(name));
    }

    /// The node's usage and whether it is emulated.
    pub fn node(&self, name: &str) -> Option<(Usage, bool)> {
        let state = self.nodes.get(name)?;
        Some((state.node.usage()?, state.emulated))
    }

    /// The usage of every pod with a rate for each of its containers, by (namespace, name).
    pub fn pods(&self) -> BTreeMap<(String, String), PodUsage> {
        let mut incomplete = std::collections::HashSet::new();
        let mut pods: BTreeMap<(String, String), PodUsage> = BTreeMap::new();
        for (node, state) in &self.nodes {
            for ((ns, pod, container), series) in &state.containers {
                let key = (ns.clone(), pod.clone());
                let Some(usage) = series.usage() else {
                    incomplete.insert(key);
                    continue;
                };
                let entry = pods.entry(key).or_insert_with(|| PodUsage {
                    timestamp: usage.timestamp,
                    window: usage.window,
                    containers: Vec::new(),
                    node: node.clone(),
                    emulated: state.emulated,
                });
                // The pod's timestamp and window are its newest container's, as metrics-server
                // reports the pod's latest point.
                if usage.timestamp > entry.timestamp {
                    entry.timestamp = usage.timestamp;
                    entry.window = usage.window;
                }
                entry.containers.push((container.clone(), usage));
            }
        }
        pods.retain(|key, _| !incomplete.contains(key));
        for pod in pods.values_mut() {
            pod.containers.sort_by(|a, b| a.0.cmp(&b.0));
        }
        pods
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn point(secs: u64, cpu: f64, mem: f64) -> Point {
        Point {
            at: at(secs),
            cpu_seconds: cpu,
            memory_bytes: mem,
            started: None,
        }
    }

    fn scrape(node: Point, containers: &[(&str, &str, Point)]) -> NodeScrape {
        NodeScrape {
            node: Some(node),
            containers: containers
                .iter()
                .map(|(pod, c, p)| (("default".into(), pod.to_string(), c.to_string()), *p))
                .collect(),
            emulated: false,
        }
    }

    #[test]
    fn a_node_has_a_rate_after_its_second_point() {
        let mut store = MetricsStore::default();
        store.record("n1", scrape(point(0, 100.0, 1e9), &[]));
        assert_eq!(store.node("n1"), None);
        store.record("n1", scrape(point(15, 103.0, 2e9), &[]));
        let (usage, emulated) = store.node("n1").unwrap();
        assert!(!emulated);
        assert_eq!(usage.cpu_nanocores, 200_000_000, "3 core-seconds over 15 s");
        assert_eq!(usage.memory_bytes, 2_000_000_000);
        assert_eq!(usage.window, Duration::from_secs(15));
        assert_eq!(usage.timestamp, at(15));
    }

    #[test]
    fn stale_points_are_ignored_and_a_reset_counter_starts_over() {
        let mut store = MetricsStore::default();
        store.record("n1", scrape(point(0, 10.0, 1.0), &[]));
        store.record("n1", scrape(point(10, 20.0, 1.0), &[]));
        store.record("n1", scrape(point(10, 99.0, 1.0), &[]));
        assert_eq!(store.node("n1").unwrap().0.cpu_nanocores, 1_000_000_000);
        store.record("n1", scrape(point(20, 5.0, 1.0), &[]));
        assert_eq!(store.node("n1"), None, "the counter went back: no rate yet");
        store.record("n1", scrape(point(30, 10.0, 1.0), &[]));
        assert_eq!(store.node("n1").unwrap().0.cpu_nanocores, 500_000_000);
    }

    #[test]
    fn a_new_container_counts_from_its_start() {
        let mut store = MetricsStore::default();
        let mut p = point(20, 1.0, 64.0);
        p.started = Some(at(10));
        store.record("n1", scrape(point(20, 0.0, 0.0), &[("web", "c", p)]));
        let pods = store.pods();
        let pod = &pods[&("default".to_string(), "web".to_string())];
        assert_eq!(pod.containers[0].1.cpu_nanocores, 100_000_000);
        assert_eq!(pod.window, Duration::from_secs(10));
        assert_eq!(pod.node, "n1");
    }

    #[test]
    fn a_pod_is_reported_only_when_every_container_has_a_rate() {
        let mut store = MetricsStore::default();
        store.record(
            "n1",
            scrape(point(0, 0.0, 0.0), &[("web", "a", point(0, 1.0, 1.0))]),
        );
        store.record(
            "n1",
            scrape(
                point(10, 0.0, 0.0),
                &[
                    ("web", "a", point(10, 2.0, 1.0)),
                    ("web", "b", point(10, 1.0, 1.0)),
                ],
            ),
        );
        assert!(store.pods().is_empty(), "container b has one point only");
        store.record(
            "n1",
            scrape(
                point(20, 0.0, 0.0),
                &[
                    ("web", "a", point(20, 3.0, 1.0)),
                    ("web", "b", point(20, 2.0, 1.0)),
                ],
            ),
        );
        let pods = store.pods();
        let names: Vec<&str> = pods
            .values()
            .next()
            .unwrap()
            .containers
            .iter()
            .map(|c| c.0.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn what_a_scrape_no_longer_shows_is_forgotten() {
        let mut store = MetricsStore::default();
        store.record(
            "n1",
            scrape(point(0, 0.0, 0.0), &[("web", "a", point(0, 1.0, 1.0))]),
        );
        store.record(
            "n1",
            scrape(point(10, 1.0, 0.0), &[("web", "a", point(10, 2.0, 1.0))]),
        );
        assert_eq!(store.pods().len(), 1);
        store.record("n1", scrape(point(20, 2.0, 0.0), &[]));
        assert!(store.pods().is_empty());
        store.retain_nodes(|n| n != "n1");
        assert_eq!(store.node("n1"), None);
    }
}
