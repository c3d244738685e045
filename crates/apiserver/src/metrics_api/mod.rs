//! `metrics.k8s.io/v1beta1`, served by the API server itself as metrics-server serves it behind
//! the aggregator (k3s ships metrics-server by default; tandem builds it in): `NodeMetrics` and
//! `PodMetrics`, read-only (`get`, `list`), from what [`scrape`] reads off every node agent's
//! `/metrics/resource` each `--metric-resolution`.
//!
//! What follows metrics-server (`pkg/api`):
//! - lists go over the Nodes and Pods the server knows, filtered by `labelSelector` (and, for
//!   pods, `fieldSelector`), and leave out what has no metrics yet; a `get` of something
//!   without metrics is a 404 (`podmetrics.metrics.k8s.io "default/web" not found` for pods,
//!   the namespace included, as metrics-server names it);
//! - an object's metadata is its Node's or Pod's name, namespace and labels with
//!   `creationTimestamp` the time of the answer; `timestamp` is when the newest point was taken
//!   and `window` the time between the two points the rate comes from;
//! - CPU is a quantity of nanocores, memory of bytes in binary units, as metrics-server's
//!   `resource.NewScaledQuantity(…, -9)` and `resource.NewQuantity(…, BinarySI)` print them;
//! - tables (`kubectl get nodemetrics`) have metrics-server's columns: Name, CPU, Memory,
//!   Window.
//!
//! One addition: figures from an emulated node (its agent says so with
//! `tandem_resource_metrics_emulated 1`) are declared by the emulated runtime, not measured, and
//! every answer that holds some carries a `Warning` header naming those nodes, which `kubectl
//! top` prints.

pub mod scrape;
pub mod store;

/// The Prometheus text-format reader the scraper decodes agents' answers with (its home is
/// `tandem_core::metrics::text`).
pub use tandem_core::metrics::text;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use tandem_core::registry::ResourceType;

use crate::error::{ApiError, ApiResult};
use crate::output::Format;
use crate::request::{ResourceRequest, Verb};
use crate::rest::{Ctx, Filter, Reply};
use crate::state::State;
use store::{MetricsStore, PodUsage, Usage};

/// The API group and version.
pub const GROUP: &str = "metrics.k8s.io";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// metrics-server's `--metric-resolution` default.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(15);

/// The scraped figures, shared by the scraper and the handlers.
#[derive(Debug, Default)]
pub struct MetricsApi {
    pub store: std::sync::Mutex<MetricsStore>,
}

/// Serves a `metrics.k8s.io` request (`rt` is `nodes` or `pods` of the group).
pub fn serve(
    state: &State,
    ctx: &mut Ctx,
    rt: &ResourceType,
    rr: &ResourceRequest,
) -> ApiResult<Reply> {
    if rr.subresource.is_some() {
        return Err(ApiError::no_route());
    }
    let now = SystemTime::now();
    let mut emulated_nodes = BTreeSet::new();
    let table = matches!(ctx.format, Format::Table { .. });
    let value = match (rt.plural.as_str(), rr.verb, rr.name.as_deref()) {
        ("nodes", Verb::Get, Some(name)) => {
            let node =
                cached(state, "nodes", None, name).ok_or_else(|| not_found("nodemetrics", name))?;
            let item = node_metrics(state, &node, now, &mut emulated_nodes)
                .ok_or_else(|| not_found("nodemetrics", name))?;
            if table { to_table(ctx, &[item]) } else { item }
        }
        ("nodes", Verb::List, None) => {
            let node_rt = state.resource("", "v1", "nodes")?;
            let filter = Filter::labels_only(&ctx.query)?;
            let items: Vec<Value> = objects(state, &node_rt, None, &filter)
                .into_iter()
                .filter_map(|n| node_metrics(state, &n, now, &mut emulated_nodes))
                .collect();
            if table {
                to_table(ctx, &items)
            } else {
                list("NodeMetricsList", items)
            }
        }
        ("pods", Verb::Get, Some(name)) => {
            let ns = rr.namespace.as_deref().unwrap_or("");
            let missing = || not_found("podmetrics", &format!("{ns}/{name}"));
            let pod = cached(state, "pods", Some(ns), name).ok_or_else(missing)?;
            let usage = pod_usage(state, ns, name).ok_or_else(missing)?;
            let item = pod_metrics(&pod, &usage, now, &mut emulated_nodes);
            if table { to_table(ctx, &[item]) } else { item }
        }
        ("pods", Verb::List, None) => {
            let pod_rt = state.resource("", "v1", "pods")?;
            let filter = Filter::from_query(&pod_rt, &ctx.query)?;
            let usages = state
                .metrics
                .store
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pods();
            let items: Vec<Value> = objects(state, &pod_rt, rr.namespace.as_deref(), &filter)
                .into_iter()
                .filter_map(|p| {
                    let key = (
                        str_at(&p, "/metadata/namespace").to_string(),
                        str_at(&p, "/metadata/name").to_string(),
                    );
                    let usage = usages.get(&key)?;
                    Some(pod_metrics(&p, usage, now, &mut emulated_nodes))
                })
                .collect();
            if table {
                to_table(ctx, &items)
            } else {
                list("PodMetricsList", items)
            }
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({:?} {})",
                rr.verb, rr.resource
            )));
        }
    };
    if !emulated_nodes.is_empty() {
        let names: Vec<&str> = emulated_nodes.iter().map(String::as_str).collect();
        ctx.warnings.push(format!(
            "metrics of node(s) {} are emulated: declared by tandem's emulated runtime, not measured",
            names.join(", ")
        ));
    }
    if table {
        // Already a Table: sent as it is rather than printed again.
        let bytes = serde_json::to_vec(&value).map_err(|e| ApiError::internal(e.to_string()))?;
        return Ok(Reply::Raw(200, bytes.into(), "application/json"));
    }
    Ok(Reply::Value(200, value))
}

/// metrics-server's 404: its storages name their group resources `nodemetrics` and
/// `podmetrics` (not the URL's `nodes`/`pods`), and a pod by `namespace/name`.
fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError {
        details: Some(json!({"name": name, "group": GROUP, "kind": resource})),
        ..ApiError::new(
            404,
            "NotFound",
            format!("{resource}.{GROUP} \"{name}\" not found"),
        )
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The cached objects of `rt` in `ns` (or everywhere) that `filter` accepts, judged on the
/// cache's kept labels and fields before any object is parsed.
fn objects(state: &State, rt: &ResourceType, ns: Option<&str>, filter: &Filter) -> Vec<Value> {
    state
        .cache
        .snapshot(rt, &rt.namespace_prefix(ns), |o| filter.accepts(rt, o))
        .items
        .iter()
        .map(|o| o.value().into_owned())
        .collect()
}

/// One cached object of core v1 `plural`.
fn cached(state: &State, plural: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let rt = state.resource("", "v1", plural).ok()?;
    state
        .cache
        .get(&rt, &rt.key(ns, name))
        .map(|o| o.value().into_owned())
}

fn pod_usage(state: &State, ns: &str, name: &str) -> Option<PodUsage> {
    state
        .metrics
        .store
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pods()
        .remove(&(ns.to_string(), name.to_string()))
}

fn metadata(obj: &Value, now: SystemTime) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(str_at(obj, "/metadata/name")));
    if let Some(ns) = obj.pointer("/metadata/namespace") {
        meta.insert("namespace".into(), ns.clone());
    }
    meta.insert("creationTimestamp".into(), json!(rfc3339(now)));
    if let Some(labels) = obj.pointer("/metadata/labels").filter(|l| l.is_object()) {
        meta.insert("labels".into(), labels.clone());
    }
    Value::Object(meta)
}

fn node_metrics(
    state: &State,
    node: &Value,
    now: SystemTime,
    emulated_nodes: &mut BTreeSet<String>,
) -> Option<Value> {
    let name = str_at(node, "/metadata/name");
    let (usage, emulated) = state
        .metrics
        .store
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .node(name)?;
    if emulated {
        emulated_nodes.insert(name.to_string());
    }
    Some(json!({
        "kind": "NodeMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(node, now),
        "timestamp": rfc3339(usage.timestamp),
        "window": go_duration(usage.window),
        "usage": usage_json(&usage),
    }))
}

fn pod_metrics(
    pod: &Value,
    usage: &PodUsage,
    now: SystemTime,
    emulated_nodes: &mut BTreeSet<String>,
) -> Value {
    if usage.emulated {
        emulated_nodes.insert(usage.node.clone());
    }
    let containers: Vec<Value> = usage
        .containers
        .iter()
        .map(|(name, u)| json!({"name": name, "usage": usage_json(u)}))
        .collect();
    json!({
        "kind": "PodMetrics",
        "apiVersion": API_VERSION,
        "metadata": metadata(pod, now),
        "timestamp": rfc3339(usage.timestamp),
        "window": go_duration(usage.window),
        "containers": containers,
    })
}

fn usage_json(u: &Usage) -> Value {
    json!({"cpu": cpu_quantity(u.cpu_nanocores), "memory": memory_quantity(u.memory_bytes)})
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": API_VERSION, "metadata": {}, "items": items})
}

fn rfc3339(t: SystemTime) -> String {
    tandem_core::time::format_rfc3339(tandem_core::time::unix(t).0)
}

/// Nanocores as `resource.NewScaledQuantity(n, -9)` prints them canonically: the largest of
/// `n`, `u`, `m` or whole cores that keeps the number whole.
pub fn cpu_quantity(nanocores: u64) -> String {
    if nanocores == 0 {
        return "0".into();
    }
    for (divisor, suffix) in [(1_000_000_000, ""), (1_000_000, "m"), (1_000, "u")] {
        if nanocores.is_multiple_of(divisor) {
            return format!("{}{suffix}", nanocores / divisor);
        }
    }
    format!("{nanocores}n")
}

/// Bytes as `resource.NewQuantity(b, BinarySI)` prints them: the largest power of 1024 that
/// divides them, else plain bytes.
pub fn memory_quantity(bytes: u64) -> String {
    if bytes == 0 {
        return "0".into();
    }
    let mut value = bytes;
    let mut suffixes = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].iter();
    let mut suffix = "";
    while value.is_multiple_of(1024) {
        let Some(next) = suffixes.next() else { break };
        value /= 1024;
        suffix = next;
    }
    format!("{value}{suffix}")
}

/// A duration as Go's `time.Duration.String()` writes it (`15s`, `1m0.5s`, `250ms`).
pub fn go_duration(d: Duration) -> String {
    tandem_core::time::format_duration(d)
}

/// metrics-server's table: Name, CPU, Memory, Window (a pod's figures summed).
fn to_table(ctx: &Ctx, items: &[Value]) -> Value {
    let beta = matches!(ctx.format, Format::Table { beta: true });
    let column = |name: &str, format: &str, description: &str| json!({"name": name, "type": "string", "format": format, "description": description, "priority": 0});
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let (cpu, memory) = match item.get("containers").and_then(Value::as_array) {
                Some(cs) => cs.iter().fold((0u64, 0u64), |(c, m), container| {
                    (
                        c + parse_cpu(str_at(container, "/usage/cpu")),
                        m + parse_memory(str_at(container, "/usage/memory")),
                    )
                }),
                None => (
                    parse_cpu(str_at(item, "/usage/cpu")),
                    parse_memory(str_at(item, "/usage/memory")),
                ),
            };
            json!({
                "cells": [
                    str_at(item, "/metadata/name"),
                    cpu_quantity(cpu),
                    memory_quantity(memory),
                    str_at(item, "/window"),
                ],
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": if beta { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" },
                    "metadata": item.get("metadata").cloned().unwrap_or(Value::Null),
                },
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": if beta { "meta.k8s.io/v1beta1" } else { "meta.k8s.io/v1" },
        "metadata": {},
        "columnDefinitions": [
            column("Name", "name", "Name of the resource"),
            column("CPU", "", "CPU usage"),
            column("Memory", "", "Memory usage"),
            column("Window", "", "Interval over which the usage is measured"),
        ],
        "rows": rows,
    })
}

fn parse_cpu(q: &str) -> u64 {
    tandem_core::validation::quantity::Quantity::parse(q)
        .map(|q| u64::try_from(q.nanos()).unwrap_or(0))
        .unwrap_or(0)
}

fn parse_memory(q: &str) -> u64 {
    tandem_core::validation::quantity::Quantity::parse(q)
        .map(|q| u64::try_from(q.nanos() / 1_000_000_000).unwrap_or(0))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_prints_as_metrics_server_prints_nanocores() {
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(1_500), "1500n");
        assert_eq!(cpu_quantity(3_000), "3u");
        assert_eq!(cpu_quantity(123_456_789), "123456789n");
    }

    #[test]
    fn memory_prints_in_binary_units() {
        assert_eq!(memory_quantity(0), "0");
        assert_eq!(memory_quantity(1000), "1000");
        assert_eq!(memory_quantity(16 * 1024 * 1024), "16Mi");
        assert_eq!(memory_quantity(12345 * 1024), "12345Ki");
        assert_eq!(memory_quantity(3 << 30), "3Gi");
    }

    #[test]
    fn windows_print_as_go_durations() {
        assert_eq!(go_duration(Duration::from_secs(15)), "15s");
        assert_eq!(go_duration(Duration::from_millis(15_003)), "15.003s");
        assert_eq!(go_duration(Duration::from_millis(90_500)), "1m30.5s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn table_cells_sum_a_pods_containers() {
        let ctx = Ctx::internal("test");
        let pod = json!({
            "metadata": {"name": "web", "namespace": "default"},
            "window": "15s",
            "containers": [
                {"name": "a", "usage": {"cpu": "100m", "memory": "1Mi"}},
                {"name": "b", "usage": {"cpu": "150m", "memory": "1Mi"}},
            ],
        });
        let table = to_table(&ctx, &[pod]);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["web", "250m", "2Mi", "15s"])
        );
        assert_eq!(table["columnDefinitions"][1]["name"], "CPU");
    }
}
