//! The disruption controller and the PDB-aware eviction subresource against a real API server:
//! budget status from the pods and their controllers' scale, evictions spending the budget or
//! refused with upstream's Status, and (with a fake clock) expiring disruptions and stale
//! `DisruptionTarget` conditions.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tandem_controllers::clock::FakeClock;
use tandem_controllers::disruption::{self, DisruptionOptions};
use tandem_controllers::informer::Informer;

/// A ReplicaSet of `replicas` pods labelled `app: <name>`, bound to `node` when given (so a
/// deletion is graceful and the pod stays visible while terminating).
fn rs(name: &str, replicas: i32, node: Option<&str>) -> Value {
    let mut spec = json!({ "containers": [{ "name": "app", "image": "nginx" }] });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": { "labels": { "app": name } }, "spec": spec }
        }
    })
}

fn pdb(name: &str, app: &str, bound: Value) -> Value {
    let mut v = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": { "name": name },
        "spec": { "selector": { "matchLabels": { "app": app } } }
    });
    if let (Some(spec), Some(bound)) = (v["spec"].as_object_mut(), bound.as_object()) {
        spec.extend(bound.clone());
    }
    v
}

/// Waits until `pods` ready pods labelled `app=<app>` exist.
async fn ready_pods(client: &Client, ns: &str, app: &str, pods: usize) -> Result<Vec<Pod>> {
    let selector = format!("app={app}");
    common::wait_for(30, &format!("{pods} ready pods of {app}"), || async {
        common::make_all_ready(client, ns, &selector).await?;
        let live = common::live_pods(client, ns, &selector).await?;
        Ok((live.len() == pods && live.iter().all(common::is_ready)).then_some(live))
    })
    .await
}

/// Waits until the budget's status satisfies `check`.
async fn status_where(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&PodDisruptionBudgetStatus) -> bool,
) -> Result<PodDisruptionBudget> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    common::wait_for(30, what, || async {
        let p = api.get(name).await?;
        Ok(p.status.as_ref().is_some_and(&check).then_some(p.clone()))
    })
    .await
}

fn counters(s: &PodDisruptionBudgetStatus) -> (i32, i32, i32, i32) {
    (
        s.expected_pods,
        s.current_healthy,
        s.desired_healthy,
        s.disruptions_allowed,
    )
}

fn condition(p: &PodDisruptionBudget) -> (String, String, String) {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionAllowed"))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// A client like the cluster's admin client but without kube-rs' default retries of 429
/// answers, so a refused eviction is seen as the server sent it.
async fn no_retry_client(server: &tandem_apiserver::ApiServer) -> Result<Client> {
    let dir = server.pki.dir.parent().unwrap_or(&server.pki.dir);
    let kc = kube::config::Kubeconfig::read_from(dir.join("kubeconfig"))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    cfg.default_retry = false;
    Ok(Client::try_from(cfg)?)
}

/// POSTs a policy/v1 Eviction and returns the HTTP code and body as sent.
async fn post_eviction(client: &Client, ns: &str, pod: &str) -> Result<(u16, String)> {
    let body = json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": { "name": pod, "namespace": ns }
    });
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"))
        .header("content-type", "application/json")
        .body(kube::client::Body::from(serde_json::to_vec(&body)?))?;
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await?;
    Ok((code, String::from_utf8_lossy(&bytes).into_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_status_counts_ready_pods_and_allows_the_surplus() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "pdb1").await?;
    let _: ReplicaSet = common::create(&c.client, "pdb1", rs("web", 3, None)).await?;
    ready_pods(&c.client, "pdb1", "web", 3).await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "pdb1",
        pdb("web", "web", json!({"minAvailable": 2})),
    )
    .await?;
    let p = status_where(&c.client, "pdb1", "web", "1 disruption allowed", |s| {
        counters(s) == (3, 3, 2, 1)
    })
    .await?;
    let s = p.status.clone().unwrap_or_default();
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(
        condition(&p),
        ("True".into(), "SufficientPods".into(), String::new())
    );

    // Raising the bound bumps the generation; the status follows and allows nothing.
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.client.clone(), "pdb1");
    common::patch(
        &api,
        "web",
        &Patch::Merge(json!({"spec": {"minAvailable": 3}})),
    )
    .await?;
    let p = status_where(&c.client, "pdb1", "web", "no disruption allowed", |s| {
        counters(s) == (3, 3, 3, 0) && s.observed_generation == Some(2)
    })
    .await?;
    assert_eq!(
        condition(&p),
        ("False".into(), "InsufficientPods".into(), String::new())
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percentages_and_max_unavailable_take_the_deployments_scale() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "pdb2").await?;
    let _: k8s_openapi::api::apps::v1::Deployment = common::create(
        &c.client,
        "pdb2",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "api" },
            "spec": {
                "replicas": 4,
                "selector": { "matchLabels": { "app": "api" } },
                "template": {
                    "metadata": { "labels": { "app": "api" } },
                    "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
                }
            }
        }),
    )
    .await?;
    ready_pods(&c.client, "pdb2", "api", 4).await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "pdb2",
        pdb("max", "api", json!({"maxUnavailable": "30%"})),
    )
    .await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "pdb2",
        pdb("min", "api", json!({"minAvailable": "30%"})),
    )
    .await?;
    // 30% of 4 rounds up to 2: at most 2 unavailable leaves 2 desired.
    status_where(&c.client, "pdb2", "max", "maxUnavailable 30% of 4", |s| {
        counters(s) == (4, 4, 2, 2)
    })
    .await?;
    status_where(&c.client, "pdb2", "min", "minAvailable 30% of 4", |s| {
        counters(s) == (4, 4, 2, 2)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_without_a_scale_fails_the_budget_safe() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "pdb3").await?;
    let owner: ConfigMap = common::create(
        &c.client,
        "pdb3",
        json!({ "metadata": { "name": "owner" } }),
    )
    .await?;
    let _: Pod = common::create(
        &c.client,
        "pdb3",
        json!({
            "metadata": {
                "name": "odd", "labels": { "app": "odd" },
                "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": owner.uid().unwrap_or_default(), "controller": true }]
            },
            "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
        }),
    )
    .await?;
    ready_pods(&c.client, "pdb3", "odd", 1).await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "pdb3",
        pdb("odd", "odd", json!({"maxUnavailable": 1})),
    )
    .await?;
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.client.clone(), "pdb3");
    let p = common::wait_for(30, "SyncFailed condition", || async {
        let p = api.get("odd").await?;
        Ok((condition(&p).1 == "SyncFailed").then_some(p))
    })
    .await?;
    assert_eq!(
        condition(&p),
        (
            "False".into(),
            "SyncFailed".into(),
            "configmaps does not implement the scale subresource".into()
        )
    );
    assert_eq!(p.status.map(|s| s.disruptions_allowed), Some(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_spends_the_budget_then_answers_429_with_upstreams_status() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "ev1").await?;
    let _: ReplicaSet = common::create(&c.client, "ev1", rs("web", 2, Some("node-a"))).await?;
    let pods = ready_pods(&c.client, "ev1", "web", 2).await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "ev1",
        pdb("web-pdb", "web", json!({"minAvailable": 1})),
    )
    .await?;
    status_where(&c.client, "ev1", "web-pdb", "1 disruption allowed", |s| {
        counters(s) == (2, 2, 1, 1)
    })
    .await?;

    // The first eviction is allowed: the pod is marked and terminating, the budget spent.
    let evictor = no_retry_client(&c.server).await?;
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "ev1");
    let first = pods[0].name_any();
    pod_api.evict(&first, &EvictParams::default()).await?;
    let evicted = pod_api.get(&first).await?;
    assert!(evicted.metadata.deletion_timestamp.is_some());
    let target = evicted
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .map(|c| (c.status, c.reason, c.message));
    assert_eq!(
        target,
        Some((
            "True".to_string(),
            Some("EvictionByEvictionAPI".to_string()),
            Some("Eviction API: evicting".to_string())
        ))
    );
    status_where(&c.client, "ev1", "web-pdb", "no disruption left", |s| {
        s.disruptions_allowed == 0 && s.current_healthy == 1
    })
    .await?;

    // The second is refused with upstream's exact Status.
    let second = pods[1].name_any();
    let (code, body) = post_eviction(&evictor, "ev1", &second).await?;
    assert_eq!(code, 429);
    assert_eq!(
        body,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
         \"message\":\"Cannot evict pod as it would violate the pod's disruption budget.\",\
         \"reason\":\"TooManyRequests\",\"details\":{\"causes\":[{\"reason\":\"DisruptionBudget\",\
         \"message\":\"The disruption budget web-pdb needs 1 healthy pods and has 1 currently\"}]},\
         \"code\":429}\n"
    );
    assert!(
        pod_api
            .get(&second)
            .await?
            .metadata
            .deletion_timestamp
            .is_none()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_with_two_budgets_are_refused_and_pending_pods_skip_budgets() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "ev2").await?;
    let _: ReplicaSet = common::create(&c.client, "ev2", rs("web", 1, Some("node-a"))).await?;
    let pods = ready_pods(&c.client, "ev2", "web", 1).await?;
    for name in ["a", "b"] {
        let _: PodDisruptionBudget = common::create(
            &c.client,
            "ev2",
            pdb(name, "web", json!({"minAvailable": 0})),
        )
        .await?;
    }
    let evictor = no_retry_client(&c.server).await?;
    let (code, body) = post_eviction(&evictor, "ev2", &pods[0].name_any()).await?;
    assert_eq!(code, 500);
    let status: Value = serde_json::from_str(&body)?;
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            "code": 500})
    );

    // A pending pod is deleted whatever its budgets say. The ReplicaSet goes first (its pods
    // orphaned), or it would adopt the extra pod and delete it before the eviction does.
    let sets: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "ev2");
    sets.delete("web", &DeleteParams::orphan()).await?;
    for _ in 0..100 {
        if sets.get_opt("web").await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        sets.get_opt("web").await?.is_none(),
        "the ReplicaSet is gone"
    );
    let pending: Pod = common::create(
        &c.client,
        "ev2",
        json!({
            "metadata": { "name": "pending", "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
        }),
    )
    .await?;
    let (code, _) = post_eviction(&evictor, "ev2", &pending.name_any()).await?;
    assert_eq!(code, 201);
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "ev2");
    assert!(pod_api.get_opt("pending").await?.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unready_pod_is_evicted_while_the_budget_is_met() -> Result<()> {
    let c = common::start().await?;
    common::namespace(&c.client, "ev3").await?;
    let _: ReplicaSet = common::create(&c.client, "ev3", rs("web", 3, None)).await?;
    let pods = ready_pods(&c.client, "ev3", "web", 3).await?;
    let _: PodDisruptionBudget = common::create(
        &c.client,
        "ev3",
        pdb("web", "web", json!({"minAvailable": 2})),
    )
    .await?;
    status_where(&c.client, "ev3", "web", "1 disruption allowed", |s| {
        counters(s) == (3, 3, 2, 1)
    })
    .await?;
    // One pod turns unready: 2 healthy still meet the budget, nothing may be disrupted...
    let sick = pods[0].name_any();
    common::finish_pod(&c.client, &pods[0], "Running").await?;
    status_where(&c.client, "ev3", "web", "budget exactly met", |s| {
        counters(s) == (3, 2, 2, 0)
    })
    .await?;
    // ...but the unready pod costs nothing and may go.
    let evictor = no_retry_client(&c.server).await?;
    let pod_api: Api<Pod> = Api::namespaced(c.client.clone(), "ev3");
    pod_api.evict(&sick, &EvictParams::default()).await?;
    assert!(pod_api.get_opt(&sick).await?.is_none());
    // A ready one may not.
    let (code, _) = post_eviction(&evictor, "ev3", &pods[1].name_any()).await?;
    assert_eq!(code, 429);
    Ok(())
}

/// Starts the disruption controller alone on `clock`.
fn start_controller(client: &Client, clock: &FakeClock) {
    let options = DisruptionOptions {
        clock: Arc::new(clock.clone()),
        ..DisruptionOptions::default()
    };
    tokio::spawn(disruption::run(
        client.clone(),
        Informer::<Pod>::start(client.clone()),
        Informer::<ReplicaSet>::start(client.clone()),
        options,
    ));
}

async fn bare_ready_pod(client: &Client, ns: &str, name: &str, conditions: Value) -> Result<Pod> {
    let pod: Pod = common::create(
        client,
        ns,
        json!({
            "metadata": { "name": name, "labels": { "app": "solo" } },
            "spec": { "containers": [{ "name": "app", "image": "nginx" }] }
        }),
    )
    .await?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running", "conditions": conditions}})),
        )
        .await?;
    Ok(pod)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_is_forgotten_when_the_pod_is_not_deleted_in_time() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let clock = FakeClock::new(Timestamp::now());
    common::namespace(&s.client, "exp").await?;
    let now = clock.now_string();
    bare_ready_pod(
        &s.client,
        "exp",
        "solo",
        json!([{"type": "Ready", "status": "True", "lastTransitionTime": now}]),
    )
    .await?;
    let _: PodDisruptionBudget = common::create(
        &s.client,
        "exp",
        pdb("solo", "solo", json!({"minAvailable": 0})),
    )
    .await?;
    // As the eviction subresource records it: evicted a minute ago, not deleted since.
    let api: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), "exp");
    let evicted_at = clock.minus(Duration::from_secs(60));
    api.patch_status(
        "solo",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"disruptedPods": {"solo": evicted_at}}})),
    )
    .await?;
    start_controller(&s.client, &clock);
    status_where(
        &s.client,
        "exp",
        "solo",
        "disrupted pod not healthy",
        |st| {
            counters(st) == (1, 0, 0, 0)
                && st
                    .disrupted_pods
                    .as_ref()
                    .is_some_and(|d| d.contains_key("solo"))
        },
    )
    .await?;

    // Two minutes later the entry has expired; a pod change makes the controller look again.
    clock.advance(Duration::from_secs(120));
    Api::<Pod>::namespaced(s.client.clone(), "exp")
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
        )
        .await?;
    status_where(&s.client, "exp", "solo", "disruption forgotten", |st| {
        counters(st) == (1, 1, 0, 1) && st.disrupted_pods.is_none()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_disruption_target_condition_is_reset_to_false() -> Result<()> {
    let s = tandem_test_support::TestServer::start().await?;
    let clock = FakeClock::new(Timestamp::now());
    common::namespace(&s.client, "stale").await?;
    let old = clock.minus(Duration::from_secs(600));
    bare_ready_pod(
        &s.client,
        "stale",
        "solo",
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": old}]),
    )
    .await?;
    start_controller(&s.client, &clock);
    let api: Api<Pod> = Api::namespaced(s.client.clone(), "stale");
    common::wait_for(30, "DisruptionTarget reset", || async {
        let p = api.get("solo").await?;
        let reset = p
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "False");
        Ok(reset.then_some(()))
    })
    .await?;
    Ok(())
}

/// Timestamps relative to a fake clock, as the API writes them.
trait ClockText {
    fn now_string(&self) -> String;
    fn minus(&self, d: Duration) -> String;
}

impl ClockText for FakeClock {
    fn now_string(&self) -> String {
        use tandem_controllers::clock::Clock;
        self.now()
            .round(k8s_openapi::jiff::Unit::Second)
            .map_or_else(|_| self.now().to_string(), |t| t.to_string())
    }
    fn minus(&self, d: Duration) -> String {
        use tandem_controllers::clock::Clock;
        let t = self
            .now()
            .checked_sub(k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or_default())
            .unwrap_or_else(|_| self.now());
        t.round(k8s_openapi::jiff::Unit::Second)
            .map_or_else(|_| t.to_string(), |t| t.to_string())
    }
}
