//! End-to-end on `tandem up`: the hybrid cluster walkthrough of the reference guide with the stock
//! kubectl — nodes, where the seed workloads land and how they run on emulated Linux and Windows
//! Server 2019/2022 nodes (issues 4, 5 and 6).
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::{Server, Stopped, seed};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(150);

fn items(s: &Server, args: &[&str]) -> Vec<Value> {
    s.get_json(args)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

fn condition(pod: &Value, kind: &str) -> Option<String> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && condition(pod, "Ready").as_deref() == Some("True")
}

#[test]
fn up_starts_a_linux_and_two_windows_nodes_that_are_ready() {
    let s = Server::start_up(None);
    let nodes = s.eventually("three Ready nodes", Duration::from_secs(60), || {
        let n = items(&s, &["nodes"]);
        (n.len() == 3
            && n.iter()
                .all(|x| condition(x, "Ready").as_deref() == Some("True")))
        .then_some(n)
    });
    let by_name = |name: &str| {
        nodes
            .iter()
            .find(|n| n["metadata"]["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let w19 = by_name("windows-2019-1");
    assert_eq!(w19["metadata"]["labels"]["kubernetes.io/os"], "windows");
    assert_eq!(
        w19["metadata"]["labels"]["node.kubernetes.io/windows-build"],
        "10.0.17763"
    );
    assert_eq!(
        w19["status"]["nodeInfo"]["osImage"],
        "Windows Server 2019 Datacenter"
    );
    assert_eq!(
        by_name("windows-2022-1")["metadata"]["labels"]["node.kubernetes.io/windows-build"],
        "10.0.20348"
    );
    assert_eq!(
        by_name("linux-1")["metadata"]["labels"]["kubernetes.io/os"],
        "linux"
    );
    for n in &nodes {
        let runtime = n["status"]["nodeInfo"]["containerRuntimeVersion"]
            .as_str()
            .unwrap_or_default();
        assert!(
            runtime.starts_with("emulated://"),
            "emulated nodes say so: {runtime}"
        );
    }
    let wide = s.kubectl(&["get", "nodes", "-o", "wide"]).ok().to_string();
    assert!(
        wide.contains("Windows Server 2022 Datacenter") && wide.contains("emulated://"),
        "{wide}"
    );
}

#[test]
fn seed_workloads_land_on_the_nodes_the_reference_says() {
    let s = Server::start_up(None);
    for f in [
        "win-webserver.yaml",
        "runtimeClasses.yml",
        "iis-2019.yaml",
        "legacy-billing-app.yaml",
    ] {
        s.kubectl(&["apply", "-f", &seed(f)]).ok();
    }
    // Both win-webserver replicas (ltsc2019 image, nodeSelector os=windows) run on the 2019 node:
    // upstream would put one on the 2022 node, where it could never start.
    let web = s.eventually("win-webserver Running and Ready", LONG, || {
        let p = items(&s, &["pods", "-l", "app=win-webserver"]);
        (p.len() == 2 && p.iter().all(running_and_ready)).then_some(p)
    });
    for p in &web {
        assert_eq!(
            p["spec"]["nodeName"], "windows-2019-1",
            "{}",
            p["metadata"]["name"]
        );
    }
    let iis = s.eventually("iis-2019 running", LONG, || {
        let p = items(&s, &["pods", "-l", "app=iis-2019"]);
        (p.len() == 1 && p[0]["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(iis[0]["spec"]["nodeName"], "windows-2019-1");
    let billing = s.eventually("legacy-billing-app running", LONG, || {
        let p = items(&s, &["pods", "-n", "billing", "-l", "app=legacy-billing"]);
        (p.len() == 3 && p.iter().all(|x| x["status"]["phase"] == "Running")).then_some(p)
    });
    for p in &billing {
        assert_eq!(p["spec"]["nodeName"], "windows-2022-1");
    }
    let table = s.kubectl(&["get", "pods", "-o", "wide"]).ok().to_string();
    assert!(
        table.contains("windows-2019-1") && table.contains("Running"),
        "{table}"
    );
}

#[test]
fn dotnet_api_becomes_ready_only_after_its_readiness_delay() {
    let s = Server::start_up(None);
    s.kubectl(&["apply", "-f", &seed("dotnet-framework-api.yaml")])
        .ok();
    let pod = s.eventually(
        "a Ready dotnet-framework-api pod",
        Duration::from_secs(240),
        || {
            items(&s, &["pods", "-l", "app=dotnet-framework-api"])
                .into_iter()
                .find(running_and_ready)
        },
    );
    let started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ready_at = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or_default()
        .to_string();
    let secs = |t: &str| tandem_core::table::parse_rfc3339(t).unwrap_or(0);
    let delay = pod["spec"]["containers"][0]["readinessProbe"]["initialDelaySeconds"]
        .as_i64()
        .unwrap_or(0);
    assert!(delay >= 30, "the manifest's readiness delay: {delay}");
    assert!(
        secs(&ready_at) - secs(&started) >= delay,
        "Ready at {ready_at}, started at {started}, delay {delay}"
    );
}

#[test]
fn ltsc2019_pod_forced_onto_the_2022_node_waits_with_the_os_mismatch_reason() {
    let s = Server::start_up(None);
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: forced}\nspec:\n  nodeName: windows-2022-1\n  os: {name: windows}\n  containers: [{name: web, image: mcr.microsoft.com/windows/servercore:ltsc2019}]\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let waiting = s.eventually("the OS mismatch waiting reason", LONG, || {
        let pod = s.get_json(&["pod", "forced"])?;
        let w = pod["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        w["message"].as_str().is_some_and(|m| m.contains("The operating system of the container does not match the operating system of the host.")).then_some(w)
    });
    assert!(waiting["reason"].is_string(), "{waiting}");
    let pod = s.get_json(&["pod", "forced"]).unwrap();
    assert_ne!(pod["status"]["phase"], "Running");
}

#[test]
fn pod_that_fits_nowhere_stays_pending_with_the_explanation_in_describe() {
    let s = Server::start_up(None);
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: nowhere}\nspec:\n  nodeSelector: {disktype: ssd}\n  containers: [{name: c, image: busybox}]\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let described = s.eventually("a FailedScheduling event", Duration::from_secs(60), || {
        let out = s.kubectl(&["describe", "pod", "nowhere"]);
        out.stdout
            .contains("FailedScheduling")
            .then(|| out.stdout.clone())
    });
    assert!(described.contains("0/3 nodes are available"), "{described}");
    assert!(
        described.contains("didn't match Pod's node affinity/selector")
            || described.contains("run windows"),
        "{described}"
    );
    let pod = s.get_json(&["pod", "nowhere"]).unwrap();
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(condition(&pod, "PodScheduled").as_deref(), Some("False"));
}

#[test]
fn deployment_rolls_out_and_an_image_update_replaces_its_pods() {
    let s = Server::start_up(None);
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: tandem.local/busybox:1}]}\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let status = s.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    assert!(
        status.stdout.contains("successfully rolled out"),
        "{}",
        status.combined()
    );
    s.kubectl(&["set", "image", "deployment/web", "c=tandem.local/busybox:2"])
        .ok();
    let status = s.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    assert!(
        status.stdout.contains("successfully rolled out"),
        "{}",
        status.combined()
    );
    let pods = s.eventually("three updated pods", Duration::from_secs(60), || {
        let p = items(&s, &["pods", "-l", "app=web"]);
        (p.len() == 3
            && p.iter()
                .all(|x| x["spec"]["containers"][0]["image"] == "tandem.local/busybox:2"))
        .then_some(p)
    });
    assert!(
        pods.iter().all(|p| p["spec"]["nodeName"] == "linux-1"),
        "Linux pods stay on the Linux node"
    );
    let history = s
        .kubectl(&["rollout", "history", "deployment/web"])
        .ok()
        .to_string();
    assert!(history.contains('1') && history.contains('2'), "{history}");
    // Deleting the Deployment removes its ReplicaSets and pods.
    s.kubectl(&["delete", "deployment", "web", "--timeout=60s"])
        .ok();
    s.eventually("ReplicaSets and pods gone", Duration::from_secs(60), || {
        (items(&s, &["replicasets", "-l", "app=web"]).is_empty()
            && items(&s, &["pods", "-l", "app=web"]).is_empty())
        .then_some(())
    });
}

#[test]
fn linux_only_daemonset_skips_windows_nodes() {
    let s = Server::start_up(None);
    let manifest = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec:\n  selector: {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      nodeSelector: {kubernetes.io/os: linux}\n      containers: [{name: c, image: tandem.local/busybox:1}]\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let pods = s.eventually("the daemon pod running", Duration::from_secs(90), || {
        let p = items(&s, &["pods", "-l", "app=agent"]);
        (p.len() == 1 && p[0]["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(pods[0]["spec"]["nodeName"], "linux-1");
    let ds = s.get_json(&["daemonset", "agent"]).unwrap();
    assert_eq!(
        ds["status"]["desiredNumberScheduled"], 1,
        "{}",
        ds["status"]
    );
}

#[test]
fn job_runs_to_completion() {
    let s = Server::start_up(None);
    let manifest = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: once}\nspec:\n  completions: 2\n  template:\n    metadata:\n      annotations: {emulated.tandem.dev/run-for: 2s, emulated.tandem.dev/exit-code: \"0\"}\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: tandem.local/busybox:1}]\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let out = s.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/once",
        "--timeout=120s",
    ]);
    assert!(out.success(), "{}", out.combined());
    let job = s.get_json(&["job", "once"]).unwrap();
    assert_eq!(job["status"]["succeeded"], 2, "{}", job["status"]);
}

#[test]
fn standalone_scheduler_binds_the_pods_that_name_it() {
    let s = Server::start_up(None);
    // A pod for a second scheduler: tandem up's own scheduler must leave it alone.
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: second}\nspec:\n  schedulerName: second-scheduler\n  nodeSelector: {kubernetes.io/os: linux}\n  containers: [{name: c, image: tandem.local/busybox:1}]\n";
    s.kubectl_stdin(&["apply", "-f", "-"], manifest).ok();
    let log = std::fs::File::create(s.dir().join("scheduler.log")).unwrap();
    let _scheduler = Stopped(
        std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args([
                "scheduler",
                "--kubeconfig",
                &s.kubeconfig().display().to_string(),
                "--scheduler-name",
                "second-scheduler",
                // Beside the server's own scheduler, as upstream's multiple schedulers run.
                "--leader-elect=false",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let pod = s.eventually("the pod running", Duration::from_secs(90), || {
        let p = s.get_json(&["pod", "second"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    assert_eq!(pod["spec"]["nodeName"], "linux-1");
    // The binding came from the standalone scheduler, which reports under its own name.
    let sources = s.eventually("a Scheduled event", Duration::from_secs(30), || {
        let events = s.get_json(&[
            "events",
            "--field-selector",
            "involvedObject.name=second,reason=Scheduled",
        ])?;
        let sources: Vec<Value> = events["items"]
            .as_array()?
            .iter()
            .map(|e| e["source"]["component"].clone())
            .collect();
        (!sources.is_empty()).then_some(sources)
    });
    assert_eq!(sources, [Value::from("second-scheduler")]);
}
