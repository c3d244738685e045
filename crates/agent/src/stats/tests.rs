//! The stats of an emulated node end to end inside the agent: declared usage integrated on
//! tokio's paused clock, the Summary and the resource metrics written from one snapshot and read
//! back, and the kubelet metrics of a pod's start.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::*;
use crate::config::{NodeOs, Resources};
use crate::runtime::SandboxConfig;
use crate::runtime::behaviour::StageFile;
use crate::runtime::emulated::{EmulatedConfig, EmulatedRuntime, PAUSE_IMAGE};

const GI: i64 = 1024 * 1024 * 1024;
const MI: u64 = 1024 * 1024;

fn emulated_runtime(clock: Clock) -> Arc<dyn Runtime> {
    let rt = EmulatedRuntime::new(
        EmulatedConfig {
            os: NodeOs::Windows,
            windows_build: None,
            bandwidth: 100_000_000,
            pause_image: PAUSE_IMAGE.into(),
            preloaded_images: vec![],
            stages: StageFile::default(),
            state_dir: None,
            node_name: "node-a".into(),
            network: None,
            dns: Default::default(),
        },
        clock,
    )
    .expect("runtime");
    Arc::new(rt)
}

/// 4 cores and 8 GiB, of which 500m and 1 GiB are reserved.
fn node() -> NodeResources {
    NodeResources {
        capacity: Resources {
            cpu_millis: 4000,
            memory: 8 * GI,
            ephemeral_storage: 0,
            pods: 110,
        },
        allocatable: Resources {
            cpu_millis: 3500,
            memory: 7 * GI,
            ephemeral_storage: 0,
            pods: 110,
        },
    }
}

fn pod(annotations: serde_json::Value, phase: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-1", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": phase}
    }))
    .expect("pod")
}

/// Runs the pod's one container on `runtime`.
async fn run(runtime: &Arc<dyn Runtime>, pod: &Pod) {
    let sb = runtime
        .run_sandbox(&SandboxConfig {
            pod_uid: "uid-1".into(),
            namespace: "shop".into(),
            name: "web".into(),
            pod: pod.clone(),
            ip: None,
        })
        .await
        .expect("sandbox");
    let container = Container {
        name: "app".into(),
        image: Some("busybox".into()),
        ..Container::default()
    };
    let c = runtime
        .create_container(&sb.id, pod, &container, 0)
        .await
        .expect("create");
    runtime.start_container(&c.id).await.expect("start");
}

fn container_cpu(s: &Snapshot) -> u64 {
    s.pods[0].containers[0].stats.cpu_core_nanos
}

fn node_cpu(s: &Snapshot) -> u64 {
    s.node.as_ref().expect("node figures").cpu_core_nanos
}

#[tokio::test(start_paused = true)]
async fn emulated_counters_grow_at_the_annotated_rate_and_follow_a_live_change() {
    let clock = Clock::new();
    let runtime = emulated_runtime(clock);
    let source = StatsSource::new("node-a", runtime.clone(), node(), clock);
    let p = pod(
        serde_json::json!({"metrics.tandem.io/emulated-cpu": "300m", "metrics.tandem.io/emulated-memory": "64Mi"}),
        "Pending",
    );
    source.pod_applied(&p);
    run(&runtime, &p).await;

    let first = source.snapshot().await;
    assert!(first.emulated);
    assert_eq!(first.error, None);
    assert_eq!(first.pods.len(), 1);
    assert_eq!(
        (
            first.pods[0].namespace.as_str(),
            first.pods[0].name.as_str()
        ),
        ("shop", "web")
    );
    let app = &first.pods[0].containers[0];
    assert_eq!(app.stats.name, "app");
    assert_eq!(app.stats.memory_working_set_bytes, 64 * MI);
    assert_eq!(app.nano_cores, Some(300_000_000));
    let node_figures = first.node.clone().expect("node figures");
    // Reservations (1 GiB) plus the pod.
    assert_eq!(node_figures.memory_working_set_bytes, GI as u64 + 64 * MI);
    assert_eq!(first.node_nano_cores, Some(800_000_000));

    tokio::time::advance(Duration::from_secs(10)).await;
    let second = source.snapshot().await;
    assert_eq!(
        container_cpu(&second) - container_cpu(&first),
        3_000_000_000
    );
    // 500m reserved + 300m of the pod for 10 s.
    assert_eq!(node_cpu(&second) - node_cpu(&first), 8_000_000_000);

    // `kubectl annotate --overwrite` to a whole core, seen 5 s later; sampled 5 s after that.
    tokio::time::advance(Duration::from_secs(5)).await;
    source.pod_applied(&pod(
        serde_json::json!({"metrics.tandem.io/emulated-cpu": "1", "metrics.tandem.io/emulated-memory": "64Mi"}),
        "Running",
    ));
    tokio::time::advance(Duration::from_secs(5)).await;
    let third = source.snapshot().await;
    assert_eq!(
        container_cpu(&third) - container_cpu(&second),
        1_500_000_000 + 5_000_000_000
    );
    assert_eq!(third.pods[0].containers[0].nano_cores, Some(1_000_000_000));
}

#[tokio::test(start_paused = true)]
async fn without_annotations_an_emulated_container_uses_half_its_requests() {
    let clock = Clock::new();
    let runtime = emulated_runtime(clock);
    let source = StatsSource::new("node-a", runtime.clone(), node(), clock);
    let mut p = pod(serde_json::json!({}), "Pending");
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].resources = serde_json::from_value(
            serde_json::json!({"requests": {"cpu": "200m", "memory": "100Mi"}}),
        )
        .ok();
    }
    source.pod_applied(&p);
    run(&runtime, &p).await;
    let s = source.snapshot().await;
    assert_eq!(s.pods[0].containers[0].nano_cores, Some(100_000_000));
    assert_eq!(s.pods[0].memory_working_set_bytes(), 50 * MI);
}

#[tokio::test(start_paused = true)]
async fn the_summary_carries_upstream_field_names_and_units() {
    let clock = Clock::new();
    let runtime = emulated_runtime(clock);
    let source = StatsSource::new("node-a", runtime.clone(), node(), clock);
    let p = pod(
        serde_json::json!({"metrics.tandem.io/emulated-cpu": "250m", "metrics.tandem.io/emulated-memory": "32Mi"}),
        "Pending",
    );
    source.pod_applied(&p);
    run(&runtime, &p).await;
    tokio::time::advance(Duration::from_secs(4)).await;
    let (content_type, body) = source
        .respond(Endpoint::Summary, "")
        .await
        .expect("summary");
    assert_eq!(content_type, "application/json");
    let summary: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(summary["node"]["nodeName"], "node-a");
    assert!(summary["node"]["startTime"].is_string(), "{summary}");
    assert_eq!(summary["node"]["cpu"]["usageNanoCores"], 750_000_000);
    assert_eq!(
        summary["node"]["memory"]["workingSetBytes"],
        GI as u64 + 32 * MI
    );
    let pod = &summary["pods"][0];
    assert_eq!(
        pod["podRef"],
        serde_json::json!({"name": "web", "namespace": "shop", "uid": "uid-1"})
    );
    assert!(pod["startTime"].is_string());
    let app = &pod["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["cpu"]["usageNanoCores"], 250_000_000);
    // 250m for 4 s.
    assert_eq!(app["cpu"]["usageCoreNanoSeconds"], 1_000_000_000);
    assert_eq!(app["memory"]["workingSetBytes"], 32 * MI);
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 1_000_000_000);
    assert_eq!(pod["memory"]["workingSetBytes"], 32 * MI);
    // It reads back as the typed Summary.
    let typed: summary::Summary = serde_json::from_value(summary).expect("typed");
    assert_eq!(
        typed.pods[0].containers[0].cpu.usage_nano_cores,
        Some(250_000_000)
    );
}

/// The samples of a text-format body: name, labels, value (timestamps, which the kubelet's
/// resource metrics carry, left out).
fn parse_samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    tandem_core::metrics::text::parse(text)
        .expect("the text format")
        .into_iter()
        .map(|s| (s.name, s.labels, s.value))
        .collect()
}

fn value(
    samples: &[(String, BTreeMap<String, String>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

#[tokio::test(start_paused = true)]
async fn resource_metrics_read_back_with_the_kubelets_names_labels_and_types() {
    let clock = Clock::new();
    let runtime = emulated_runtime(clock);
    let source = StatsSource::new("node-a", runtime.clone(), node(), clock);
    let p = pod(
        serde_json::json!({"metrics.tandem.io/emulated-cpu": "300m", "metrics.tandem.io/emulated-memory": "64Mi"}),
        "Pending",
    );
    source.pod_applied(&p);
    run(&runtime, &p).await;
    tokio::time::advance(Duration::from_secs(10)).await;

    let (content_type, body) = source
        .respond(Endpoint::ResourceMetrics, "*/*")
        .await
        .expect("metrics");
    assert_eq!(content_type, exposition::TEXT_CONTENT_TYPE);
    let text = String::from_utf8(body).expect("UTF-8");
    for (family, kind) in [
        ("node_cpu_usage_seconds_total", "counter"),
        ("node_memory_working_set_bytes", "gauge"),
        ("container_cpu_usage_seconds_total", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_start_time_seconds", "gauge"),
        ("pod_cpu_usage_seconds_total", "counter"),
        ("pod_memory_working_set_bytes", "gauge"),
        ("resource_scrape_error", "gauge"),
        ("tandem_resource_metrics_emulated", "gauge"),
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {family} {kind}\n")),
            "{family} {kind}:\n{text}"
        );
    }
    assert!(!text.contains("# EOF"), "{text}");
    let help = text
        .lines()
        .find(|l| l.starts_with("# HELP tandem_resource_metrics_emulated "))
        .expect("help");
    assert!(help.contains("emulated"), "{help}");

    let samples = parse_samples(&text);
    let c = [("container", "app"), ("namespace", "shop"), ("pod", "web")];
    assert_eq!(
        value(&samples, "container_cpu_usage_seconds_total", &c),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "container_memory_working_set_bytes", &c),
        Some((64 * MI) as f64)
    );
    let started = value(&samples, "container_start_time_seconds", &c).expect("start time");
    let now = clock
        .now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    assert!(
        (now.as_secs_f64() - 10.0 - started).abs() < 1.0,
        "{started}"
    );
    let p = [("namespace", "shop"), ("pod", "web")];
    assert_eq!(
        value(&samples, "pod_cpu_usage_seconds_total", &p),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "pod_memory_working_set_bytes", &p),
        Some((64 * MI) as f64)
    );
    // 500m reserved + 300m for 10 s (the runtime started when the test did).
    assert_eq!(
        value(&samples, "node_cpu_usage_seconds_total", &[]),
        Some(8.0)
    );
    assert_eq!(
        value(&samples, "node_memory_working_set_bytes", &[]),
        Some((GI as u64 + 64 * MI) as f64)
    );
    assert_eq!(value(&samples, "resource_scrape_error", &[]), Some(0.0));
    assert_eq!(
        value(&samples, "tandem_resource_metrics_emulated", &[]),
        Some(1.0)
    );

    // OpenMetrics when asked for.
    let (content_type, body) = source
        .respond(Endpoint::ResourceMetrics, "application/openmetrics-text")
        .await
        .expect("metrics");
    assert_eq!(content_type, exposition::OPENMETRICS_CONTENT_TYPE);
    assert!(String::from_utf8(body).expect("UTF-8").ends_with("# EOF\n"));
}

#[tokio::test(start_paused = true)]
async fn kubelet_metrics_count_pods_containers_operations_and_the_start_duration() {
    let clock = Clock::new();
    let runtime = emulated_runtime(clock);
    let source = StatsSource::new("node-a", runtime, node(), clock);
    let instrumented = source.instrumented_runtime();
    let pending = pod(serde_json::json!({}), "Pending");
    source.pod_applied(&pending);
    run(&instrumented, &pending).await;
    tokio::time::advance(Duration::from_millis(3_500)).await;
    source.pod_applied(&pod(serde_json::json!({}), "Running"));
    // A later update of a running pod is no second start.
    source.pod_applied(&pod(serde_json::json!({}), "Running"));

    let (_, body) = source
        .respond(Endpoint::Metrics, "")
        .await
        .expect("metrics");
    let text = String::from_utf8(body).expect("UTF-8");
    let samples = parse_samples(&text);
    assert_eq!(
        value(&samples, "kubelet_node_name", &[("node", "node-a")]),
        Some(1.0)
    );
    assert_eq!(value(&samples, "kubelet_running_pods", &[]), Some(1.0));
    let state = |s| {
        value(
            &samples,
            "kubelet_running_containers",
            &[("container_state", s)],
        )
    };
    assert_eq!(state("running"), Some(1.0));
    assert_eq!(state("exited"), Some(0.0));
    assert_eq!(
        value(&samples, "kubelet_pod_start_duration_seconds_count", &[]),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "kubelet_pod_start_duration_seconds_sum", &[]),
        Some(3.5)
    );
    let bucket = |le| {
        value(
            &samples,
            "kubelet_pod_start_duration_seconds_bucket",
            &[("le", le)],
        )
    };
    assert_eq!(bucket("3.0"), Some(0.0));
    assert_eq!(bucket("4.0"), Some(1.0));
    let op = |o| {
        value(
            &samples,
            "kubelet_runtime_operations_total",
            &[("operation_type", o)],
        )
    };
    assert_eq!(op("run_podsandbox"), Some(1.0));
    assert_eq!(op("create_container"), Some(1.0));
    assert_eq!(op("start_container"), Some(1.0));
    assert!(
        text.contains("\n# TYPE kubelet_runtime_operations_total counter\n"),
        "{text}"
    );
    assert!(
        text.contains("\n# TYPE kubelet_pod_start_duration_seconds histogram\n"),
        "{text}"
    );
    let process_start = value(&samples, "process_start_time_seconds", &[]).expect("start");
    assert!(process_start > 1.0e9, "{process_start}");
}

#[test]
fn a_cpu_rate_is_taken_over_at_least_a_second() {
    let mut samples = HashMap::new();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    assert_eq!(StatsSource::rate(&mut samples, "c".into(), t0, 0), None);
    // 0.5 s later: a rate against t0, but t0 stays the reference.
    let half = t0 + Duration::from_millis(500);
    assert_eq!(
        StatsSource::rate(&mut samples, "c".into(), half, 250_000_000),
        Some(500_000_000)
    );
    let two = t0 + Duration::from_secs(2);
    assert_eq!(
        StatsSource::rate(&mut samples, "c".into(), two, 2_000_000_000),
        Some(1_000_000_000)
    );
    // A counter that went back (a restarted container) gives no rate and starts over.
    assert_eq!(
        StatsSource::rate(&mut samples, "c".into(), two + Duration::from_secs(1), 5),
        None
    );
    assert_eq!(
        StatsSource::rate(
            &mut samples,
            "c".into(),
            two + Duration::from_secs(2),
            100_000_005
        ),
        Some(100_000_000)
    );
}
