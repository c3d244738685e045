//! HorizontalPodAutoscaler controller against a real API server, with a fake clock and fake
//! pod metrics; only the HPA controller runs, so the test plays the ReplicaSet's pods.
//! Also the autoscaling/v1 ⇄ v2 conversion and validation of the API.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::json;
use tandem_controllers::clock::FakeClock;
use tandem_controllers::hpa::metrics::{
    CustomMetricsSource, DescribedObject, MetricsError, MetricsSource, PodUsage,
};
use tandem_controllers::hpa::replicas::{PodSamples, Sample};
use tandem_controllers::hpa::{self, HpaOptions};
use tandem_controllers::informer::Informer;

/// Pod CPU usage (milli-cores) the test sets; every pod of the namespace reports it.
#[derive(Default)]
struct FakeMetrics {
    cpu: Mutex<i64>,
    pods: Mutex<Vec<String>>,
}

impl MetricsSource for FakeMetrics {
    fn pod_usage<'a>(
        &'a self,
        _namespace: &'a str,
        _selector: &'a str,
    ) -> BoxFuture<'a, Result<HashMap<String, PodUsage>, MetricsError>> {
        let cpu = *self.cpu.lock().unwrap_or_else(|p| p.into_inner());
        let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Box::pin(async move {
            if pods.is_empty() {
                return Err(MetricsError::Empty);
            }
            Ok(pods
                .into_iter()
                .map(|p| {
                    let containers = BTreeMap::from([(
                        "c".to_string(),
                        BTreeMap::from([("cpu".to_string(), cpu)]),
                    )]);
                    (
                        p,
                        PodUsage {
                            timestamp: Timestamp::now(),
                            window: Duration::from_secs(15),
                            containers,
                        },
                    )
                })
                .collect())
        })
    }
}

/// Custom and external metrics as an adapter would serve them, by namespace: every pod of
/// `pods` reports 30; the Service `web` 150; the external `queue` series 50 and 30 (only for
/// the selector `queue=a`); namespace `missing` has nothing. Records what was asked.
#[derive(Default)]
struct FakeCustomMetrics {
    asked: Mutex<Vec<String>>,
}

impl FakeCustomMetrics {
    fn record(&self, what: String) {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what);
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl CustomMetricsSource for FakeCustomMetrics {
    fn pods_metric<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
        metric: &'a str,
        _metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<PodSamples, String>> {
        self.record(format!("pods {namespace} {selector} {metric}"));
        Box::pin(async move {
            if namespace != "pods" {
                return Err("no metrics returned from custom metrics API".into());
            }
            let sample = Sample {
                value: 30_000,
                timestamp: Timestamp::now(),
                window: Duration::from_secs(60),
            };
            Ok(PodSamples::from([
                ("web-a".to_string(), sample),
                ("web-b".to_string(), sample),
            ]))
        })
    }

    fn object_metric<'a>(
        &'a self,
        namespace: &'a str,
        object: &'a DescribedObject,
        metric: &'a str,
        _metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<i64, String>> {
        self.record(format!(
            "object {namespace} {} {} {} {metric}",
            object.api_version, object.kind, object.name
        ));
        Box::pin(async move {
            if namespace == "object" && object.kind == "Service" && object.name == "web" {
                Ok(150_000)
            } else {
                Err("the server could not find the requested resource".into())
            }
        })
    }

    fn external_metric<'a>(
        &'a self,
        namespace: &'a str,
        metric: &'a str,
        metric_selector: &'a str,
    ) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        self.record(format!("external {namespace} {metric} {metric_selector}"));
        Box::pin(async move {
            if namespace == "external" && metric_selector == "queue=a" {
                Ok(vec![50_000, 30_000])
            } else {
                Err("no metrics returned from external metrics API".into())
            }
        })
    }
}

/// A ReplicaSet `web` with `replicas` and two Running, Ready pods (started 10 minutes ago)
/// requesting 100m each.
async fn workload(client: &Client, ns: &str, replicas: i32) -> Result<()> {
    common::create::<ReplicaSet>(
        client,
        ns,
        json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    )
    .await?;
    let started = (Timestamp::now() - SignedDuration::from_mins(10)).to_string();
    for name in ["web-a", "web-b"] {
        common::create::<Pod>(
            client,
            ns,
            json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "100m"}}}]}}),
        )
        .await?;
        Api::<Pod>::namespaced(client.clone(), ns)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": {
                "phase": "Running", "startTime": started,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}]}})))
            .await?;
    }
    Ok(())
}

async fn rs_replicas(client: &Client, ns: &str) -> Result<i32> {
    let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    Ok(rs.spec.and_then(|s| s.replicas).unwrap_or(0))
}

async fn wait_replicas(client: &Client, ns: &str, want: i32) -> Result<()> {
    common::wait_for(20, &format!("ReplicaSet scaled to {want}"), || async {
        Ok((rs_replicas(client, ns).await? == want).then_some(()))
    })
    .await
}

async fn condition(client: &Client, ns: &str, type_: &str) -> Result<Option<(String, String)>> {
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    Ok(hpa
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason.unwrap_or_default())))
}

async fn event_messages(client: &Client, ns: &str, reason: &str) -> Result<Vec<String>> {
    Ok(Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect())
}

#[tokio::test]
async fn hpa_scales_up_on_cpu_and_down_after_the_stabilization_window() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let client = s.client.clone();
    common::namespace(&client, "hpa").await?;
    workload(&client, "hpa", 2).await?;
    let metrics = Arc::new(FakeMetrics::default());
    *metrics.pods.lock().unwrap_or_else(|p| p.into_inner()) = vec!["web-a".into(), "web-b".into()];
    *metrics.cpu.lock().unwrap_or_else(|p| p.into_inner()) = 200;
    let clock = FakeClock::new(Timestamp::now());
    tokio::spawn(hpa::run(
        client.clone(),
        Informer::<Pod>::start(client.clone()),
        HpaOptions {
            clock: Arc::new(clock.clone()),
            sync_period: Duration::from_millis(200),
            metrics: Some(metrics.clone()),
            ..HpaOptions::default()
        },
    ));
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "hpa",
        json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
            "minReplicas": 1, "maxReplicas": 6,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50}}}]}}),
    )
    .await?;

    // 200 % of the request against a 50 % target: 8 wanted, at most double (4) at once.
    wait_replicas(&client, "hpa", 4).await?;
    common::wait_for(10, "the scale-up event", || async {
        let rescales = event_messages(&client, "hpa", "SuccessfulRescale").await?;
        Ok(rescales
            .iter()
            .any(|m| {
                m == "New size: 4; reason: cpu resource utilization (percentage of request) above target"
            })
            .then_some(()))
    })
    .await?;
    // Then up to the maximum, limited there.
    wait_replicas(&client, "hpa", 6).await?;
    common::wait_for(10, "ScalingLimited TooManyReplicas", || async {
        Ok((condition(&client, "hpa", "ScalingLimited").await?
            == Some(("True".into(), "TooManyReplicas".into())))
        .then_some(()))
    })
    .await?;
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), "hpa")
        .get("web")
        .await?;
    let status = hpa.status.unwrap_or_default();
    assert_eq!(status.desired_replicas, 6);
    let cpu = status.current_metrics.unwrap_or_default();
    assert_eq!(
        cpu[0]
            .resource
            .as_ref()
            .and_then(|r| r.current.average_utilization),
        Some(200)
    );
    assert!(status.last_scale_time.is_some());

    // Usage drops: the down-scale window (5 minutes) holds the count until the clock passes it.
    *metrics.cpu.lock().unwrap_or_else(|p| p.into_inner()) = 10;
    common::wait_for(10, "ScaleDownStabilized", || async {
        Ok((condition(&client, "hpa", "AbleToScale").await?
            == Some(("True".into(), "ScaleDownStabilized".into())))
        .then_some(()))
    })
    .await?;
    assert_eq!(rs_replicas(&client, "hpa").await?, 6);
    clock.advance(Duration::from_secs(301));
    wait_replicas(&client, "hpa", 1).await?;
    // The event is recorded after the scale is written: wait for it rather than race it.
    common::wait_for(10, "the scale-down event", || async {
        let rescales = event_messages(&client, "hpa", "SuccessfulRescale").await?;
        Ok(rescales
            .iter()
            .any(|m| m == "New size: 1; reason: All metrics below target")
            .then_some(()))
    })
    .await?;

    // Metrics gone: ScalingActive False with upstream's reason, and a warning event.
    metrics
        .pods
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    common::wait_for(10, "FailedGetResourceMetric", || async {
        Ok((condition(&client, "hpa", "ScalingActive").await?
            == Some(("False".into(), "FailedGetResourceMetric".into())))
        .then_some(()))
    })
    .await?;
    let failed = event_messages(&client, "hpa", "FailedGetResourceMetric").await?;
    assert!(
        failed.iter().any(|m| m
            == "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"),
        "{failed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn missing_scale_target_is_reported_as_failed_get_scale() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let client = s.client.clone();
    common::namespace(&client, "hpa").await?;
    tokio::spawn(hpa::run(
        client.clone(),
        Informer::<Pod>::start(client.clone()),
        HpaOptions {
            sync_period: Duration::from_millis(200),
            metrics: Some(Arc::new(FakeMetrics::default())),
            ..HpaOptions::default()
        },
    ));
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "hpa",
        json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "nope"},
            "maxReplicas": 3}}),
    )
    .await?;
    common::wait_for(10, "FailedGetScale", || async {
        Ok((condition(&client, "hpa", "AbleToScale").await?
            == Some(("False".into(), "FailedGetScale".into())))
        .then_some(()))
    })
    .await?;
    Ok(())
}

fn hpa_api(client: &Client, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling", version, "HorizontalPodAutoscaler"),
        "horizontalpodautoscalers",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

#[tokio::test]
async fn v1_and_v2_are_two_views_of_one_stored_object() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let client = s.client.clone();
    let v1: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 3, "targetCPUUtilizationPercentage": 50}}))?;
    let created = hpa_api(&client, "v1")
        .create(&PostParams::default(), &v1)
        .await?;
    assert_eq!(created.data["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(created.data["spec"]["minReplicas"], 1);
    let v2 = hpa_api(&client, "v2").get("web").await?;
    assert_eq!(
        v2.data["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}])
    );
    // A merge patch at v1 speaks v1 fields.
    let patched = hpa_api(&client, "v1")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"targetCPUUtilizationPercentage": 70}})),
        )
        .await?;
    assert_eq!(patched.data["spec"]["targetCPUUtilizationPercentage"], 70);
    let v2 = hpa_api(&client, "v2").get("web").await?;
    assert_eq!(
        v2.data["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        70
    );
    let list = hpa_api(&client, "v1").list(&ListParams::default()).await?;
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].data["spec"]["targetCPUUtilizationPercentage"],
        70
    );
    assert_eq!(list.items[0].name_any(), "web");
    Ok(())
}

#[tokio::test]
async fn invalid_hpas_are_refused_with_field_paths() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let client = s.client.clone();
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bad"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 0, "maxReplicas": 3,
            "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}}}))?;
    let err = hpa_api(&client, "v2")
        .create(&PostParams::default(), &bad)
        .await;
    let Err(kube::Error::Api(status)) = err else {
        anyhow::bail!("expected a 422, got {err:?}");
    };
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("spec.minReplicas: Invalid value: 0: must be greater than or equal to 1"),
        "{}",
        status.message
    );
    assert!(
        status.message.contains(
            "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero"
        ),
        "{}",
        status.message
    );
    Ok(())
}

fn hpa_with(metric: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"},
            "minReplicas": 1, "maxReplicas": 10, "metrics": [metric]}})
}

async fn current_metric(client: &Client, ns: &str) -> Result<serde_json::Value> {
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .get("web")
        .await?;
    let status = serde_json::to_value(hpa.status.unwrap_or_default())?;
    Ok(status["currentMetrics"][0].clone())
}

#[tokio::test]
async fn hpa_scales_on_pods_object_and_external_metrics() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let client = s.client.clone();
    for ns in ["pods", "object", "external", "missing"] {
        common::namespace(&client, ns).await?;
        workload(&client, ns, 2).await?;
    }
    let custom = Arc::new(FakeCustomMetrics::default());
    tokio::spawn(hpa::run(
        client.clone(),
        Informer::<Pod>::start(client.clone()),
        HpaOptions {
            sync_period: Duration::from_millis(200),
            metrics: Some(Arc::new(FakeMetrics::default())),
            custom_metrics: Some(custom.clone()),
            ..HpaOptions::default()
        },
    ));
    // Pods: 30 per pod against an average of 10 → three times the two ready pods.
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "pods",
        hpa_with(
            json!({"type": "Pods", "pods": {"metric": {"name": "requests_per_second"},
            "target": {"type": "AverageValue", "averageValue": "10"}}}),
        ),
    )
    .await?;
    // Object: the Service's 150 against a value of 100 → 1.5 times the two ready pods.
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "object",
        hpa_with(json!({"type": "Object", "object": {
            "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "web"},
            "metric": {"name": "requests"},
            "target": {"type": "Value", "value": "100"}}})),
    )
    .await?;
    // External: 50 + 30 against an average of 20 per pod → 4.
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "external",
        hpa_with(json!({"type": "External", "external": {
            "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "a"}}},
            "target": {"type": "AverageValue", "averageValue": "20"}}})),
    )
    .await?;
    common::create::<HorizontalPodAutoscaler>(
        &client,
        "missing",
        hpa_with(json!({"type": "External", "external": {
            "metric": {"name": "queue_depth"},
            "target": {"type": "Value", "value": "20"}}})),
    )
    .await?;

    wait_replicas(&client, "pods", 6).await?;
    wait_replicas(&client, "object", 3).await?;
    wait_replicas(&client, "external", 4).await?;
    common::wait_for(10, "the Pods metric in the status", || async {
        let m = current_metric(&client, "pods").await?;
        Ok((m["pods"]["current"]["averageValue"] == "30").then_some(m))
    })
    .await
    .map(|m| assert_eq!(m["pods"]["metric"]["name"], "requests_per_second"))?;
    common::wait_for(10, "the Object metric in the status", || async {
        let m = current_metric(&client, "object").await?;
        Ok((m["object"]["current"]["value"] == "150").then_some(m))
    })
    .await
    .map(|m| assert_eq!(m["object"]["describedObject"]["kind"], "Service"))?;
    common::wait_for(10, "the External metric in the status", || async {
        let m = current_metric(&client, "external").await?;
        Ok((m["external"]["current"]["averageValue"] == "80").then_some(m))
    })
    .await?;
    common::wait_for(10, "the scale-up event of the external metric", || async {
        let rescales = event_messages(&client, "external", "SuccessfulRescale").await?;
        Ok(rescales
            .iter()
            .any(|m| m == "New size: 4; reason: external metric queue_depth(queue=a) above target")
            .then_some(()))
    })
    .await?;

    // No series: ScalingActive False with upstream's reason, the metric named in the message.
    common::wait_for(10, "FailedGetExternalMetric", || async {
        Ok((condition(&client, "missing", "ScalingActive").await?
            == Some(("False".into(), "FailedGetExternalMetric".into())))
        .then_some(()))
    })
    .await?;
    let failed = event_messages(&client, "missing", "FailedGetExternalMetric").await?;
    assert!(
        failed.iter().any(|m| m
            == "unable to get external metric missing/queue_depth/: no metrics returned from external metrics API"),
        "{failed:?}"
    );
    assert_eq!(rs_replicas(&client, "missing").await?, 2);

    let asked = custom.asked();
    assert!(
        asked.contains(&"pods pods app=web requests_per_second".to_string()),
        "{asked:?}"
    );
    assert!(
        asked.contains(&"object object v1 Service web requests".to_string()),
        "{asked:?}"
    );
    Ok(())
}
