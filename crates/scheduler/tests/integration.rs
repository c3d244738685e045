//! The scheduler against a real in-process API server: nodes and pods created through the API,
//! bindings, the Unschedulable condition and the FailedScheduling/Scheduled events observed
//! through it.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tandem_scheduler::{SchedulerOptions, start};
use tandem_test_support::{TestServer, eventually, within};

async fn create_node(
    client: &Client,
    name: &str,
    os: &str,
    build: Option<&str>,
    taints: Value,
) -> Result<()> {
    let mut labels = json!({"kubernetes.io/os": os, "kubernetes.io/hostname": name});
    if let Some(b) = build {
        labels["node.kubernetes.io/windows-build"] = json!(b);
    }
    let status = json!({
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}]
    });
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": status,
    }))?;
    let api: Api<Node> = Api::all(client.clone());
    let created = api.create(&PostParams::default(), &node).await?;
    if created
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .is_none()
    {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await?;
    }
    Ok(())
}

async fn create_pod(client: &Client, ns: &str, pod: Value) -> Result<()> {
    let pod: Pod = serde_json::from_value(pod)?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}}, "spec": spec})
}

async fn node_of(api: &Api<Pod>, name: &str) -> Option<String> {
    api.get(name).await.ok()?.spec?.node_name
}

async fn event_message(client: &Client, ns: &str, pod: &str, reason: &str) -> Option<String> {
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .ok()?;
    events
        .items
        .into_iter()
        .find(|e| {
            e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason)
        })
        .and_then(|e| e.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_binds_explains_and_retries_through_the_api() -> Result<()> {
    let ts = TestServer::start().await?;
    let client = ts.client.clone();
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sched"}}),
    )?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;

    create_node(&client, "linux-1", "linux", None, json!([])).await?;
    create_node(
        &client,
        "win-2019",
        "windows",
        Some("10.0.17763"),
        json!([]),
    )
    .await?;
    create_node(
        &client,
        "win-2022",
        "windows",
        Some("10.0.20348"),
        json!([]),
    )
    .await?;

    let mut scheduler = start(client.clone(), SchedulerOptions::default());
    within(20, "scheduler ready", scheduler.ready()).await;

    // win-webserver.yaml's template: ltsc2019 image, nodeSelector os=windows, two replicas.
    for name in ["win-webserver-a", "win-webserver-b"] {
        create_pod(&client, "sched", pod(name, json!({
            "containers": [{"name": "windowswebserver", "image": "mcr.microsoft.com/windows/servercore:ltsc2019",
                "command": ["powershell.exe", "-command", "echo"]}],
            "nodeSelector": {"kubernetes.io/os": "windows"}
        }))).await?;
    }
    create_pod(
        &client,
        "sched",
        pod(
            "plain",
            json!({"containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await?;
    create_pod(
        &client,
        "sched",
        pod(
            "huge",
            json!({"containers": [{"name": "app", "image": "nginx",
        "resources": {"requests": {"cpu": "100"}}}]}),
        ),
    )
    .await?;
    create_pod(
        &client,
        "sched",
        pod(
            "not-ours",
            json!({"schedulerName": "someone-else",
        "containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await?;
    create_pod(
        &client,
        "sched",
        pod(
            "wants-ssd",
            json!({"nodeSelector": {"disktype": "ssd"},
        "containers": [{"name": "app", "image": "nginx"}]}),
        ),
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "sched");
    for name in ["win-webserver-a", "win-webserver-b"] {
        let node = eventually(20, name, || node_of(&pods, name)).await;
        assert_eq!(
            node, "win-2019",
            "{name} must land where its ltsc2019 image runs"
        );
    }
    assert_eq!(
        eventually(20, "plain", || node_of(&pods, "plain")).await,
        "linux-1"
    );

    // Unschedulable: condition and event, in upstream's words.
    let want = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) run windows, pod requires linux \
                (nothing selects an OS; pods default to linux). preemption: 0/3 nodes are available: \
                1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.";
    let cond = eventually(20, "PodScheduled=False on huge", || async {
        let p = pods.get("huge").await.ok()?;
        p.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(cond.message.as_deref(), Some(want));
    let msg = eventually(20, "FailedScheduling event", || {
        event_message(&client, "sched", "huge", "FailedScheduling")
    })
    .await;
    assert_eq!(msg, want);
    let msg = eventually(20, "Scheduled event", || {
        event_message(&client, "sched", "plain", "Scheduled")
    })
    .await;
    assert_eq!(msg, "Successfully assigned sched/plain to linux-1");
    let scheduled = Api::<Event>::namespaced(client.clone(), "sched")
        .list(&ListParams::default())
        .await?;
    let ev = scheduled
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("Scheduled"))
        .context("a Scheduled event")?;
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(
        ev.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("default-scheduler")
    );
    assert_eq!(ev.reporting_component.as_deref(), Some("default-scheduler"));

    // A cluster change (the node gains the label) lets the waiting pod in.
    assert_eq!(node_of(&pods, "wants-ssd").await, None);
    Api::<Node>::all(client.clone())
        .patch(
            "linux-1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"disktype": "ssd"}}})),
        )
        .await?;
    assert_eq!(
        eventually(20, "wants-ssd after relabel", || node_of(
            &pods,
            "wants-ssd"
        ))
        .await,
        "linux-1"
    );

    // Pods for another scheduler are left alone.
    assert_eq!(node_of(&pods, "not-ours").await, None);
    scheduler.stop();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tainted_windows_nodes_and_wrong_os_are_explained() -> Result<()> {
    let ts = TestServer::start().await?;
    let client = ts.client.clone();
    let taint = json!([{"key": "os", "value": "windows", "effect": "NoSchedule"}]);
    create_node(&client, "linux-1", "linux", None, json!([])).await?;
    create_node(&client, "linux-2", "linux", None, json!([])).await?;
    create_node(
        &client,
        "win-2019",
        "windows",
        Some("10.0.17763"),
        taint.clone(),
    )
    .await?;
    let mut scheduler = start(client.clone(), SchedulerOptions::default());
    within(20, "scheduler ready", scheduler.ready()).await;

    create_pod(
        &client,
        "default",
        pod(
            "win",
            json!({"os": {"name": "windows"},
        "containers": [{"name": "app", "image": "example.com/tools:windows"}]}),
        ),
    )
    .await?;
    let want = "0/3 nodes are available: 1 node(s) had untolerated taint {os: windows}, \
                2 node(s) run linux, pod requires windows (spec.os.name). preemption: 0/3 nodes are available: \
                3 Preemption is not helpful for scheduling.";
    let msg = eventually(20, "FailedScheduling for win", || {
        event_message(&client, "default", "win", "FailedScheduling")
    })
    .await;
    assert_eq!(msg, want);

    // An image naming a build the only Windows node cannot run is refused on the build.
    create_pod(
        &client,
        "default",
        pod(
            "newer",
            json!({"os": {"name": "windows"},
        "tolerations": [{"key": "os", "operator": "Exists"}],
        "containers": [{"name": "app", "image": "mcr.microsoft.com/windows/nanoserver:ltsc2022"}]}),
        ),
    )
    .await?;
    let msg = eventually(20, "FailedScheduling for newer", || {
        event_message(&client, "default", "newer", "FailedScheduling")
    })
    .await;
    assert!(
        msg.starts_with("0/3 nodes are available: 1 node(s) run Windows build 10.0.17763, image \
                         mcr.microsoft.com/windows/nanoserver:ltsc2022 needs 10.0.20348 (process isolation), \
                         2 node(s) run linux, pod requires windows (spec.os.name)."),
        "{msg}"
    );

    create_pod(&client, "default", pod("tolerating", json!({"os": {"name": "windows"},
        "tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}],
        "containers": [{"name": "app", "image": "mcr.microsoft.com/windows/nanoserver:1809"}]}))).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        eventually(20, "tolerating", || node_of(&pods, "tolerating")).await,
        "win-2019"
    );
    scheduler.stop();
    Ok(())
}
