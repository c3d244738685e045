//! End-to-end: pod priority and preemption with the stock kubectl. The Priority admission
//! plugin (upstream `plugin/pkg/admission/priority`) resolves `priorityClassName`, and the
//! scheduler's default preemption (upstream `defaultpreemption`) evicts lower-priority pods from
//! a full emulated node so that a higher-priority pod can run there: the preemptor is nominated
//! to the node, the victims get `Preempted` events and are deleted, and the preemptor binds.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(150);

fn items(s: &Server, args: &[&str]) -> Vec<Value> {
    s.get_json(args)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}

/// Millicores of a CPU quantity as the node reports it (`4`, `3900m`).
fn millicores(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => q.parse::<i64>().unwrap() * 1000,
    }
}

fn pod(name: &str, class: &str, cpu_millis: i64) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  priorityClassName: {class}\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    \
         image: registry.k8s.io/pause:3.9\n    resources:\n      requests:\n        \
         cpu: {cpu_millis}m\n"
    )
}

fn node_of(s: &Server, name: &str) -> Option<String> {
    s.get_json(&["pod", name])?["spec"]["nodeName"]
        .as_str()
        .map(str::to_string)
}

#[test]
fn high_priority_pod_preempts_low_priority_pods_on_a_full_node() {
    let s = Server::start_up(Some("linux=1"));
    let node = s.eventually("the linux node with its allocatable", LONG, || {
        items(&s, &["nodes"])
            .into_iter()
            .find(|n| n["metadata"]["name"] == "linux-1")
            .filter(|n| n["status"]["allocatable"]["cpu"].is_string())
    });
    let cpu = millicores(node["status"]["allocatable"]["cpu"].as_str().unwrap());
    s.kubectl(&["create", "priorityclass", "high", "--value=1000"])
        .ok();
    s.kubectl(&["create", "priorityclass", "low", "--value=10"])
        .ok();

    // Fill the node with two low-priority pods.
    for name in ["low-1", "low-2"] {
        s.create(&pod(name, "low", cpu / 2));
    }
    for name in ["low-1", "low-2"] {
        s.eventually(&format!("{name} bound to linux-1"), LONG, || {
            (node_of(&s, name).as_deref() == Some("linux-1")).then_some(())
        });
    }
    let low = s.get_json(&["pod", "low-1"]).unwrap();
    assert_eq!(low["spec"]["priority"], 10, "admission set the priority");
    assert_eq!(low["spec"]["preemptionPolicy"], "PreemptLowerPriority");

    // A high-priority pod needing more than either low pod leaves: both must go.
    s.create(&pod("high", "high", cpu * 3 / 4));
    let high = s.eventually("high bound to linux-1", LONG, || {
        s.get_json(&["pod", "high"])
            .filter(|p| p["spec"]["nodeName"] == "linux-1")
    });
    assert_eq!(high["spec"]["priority"], 1000);
    assert_eq!(
        high["status"]["nominatedNodeName"], "linux-1",
        "preemption nominated the node: {high}"
    );
    let uid = high["metadata"]["uid"].as_str().unwrap().to_string();
    s.eventually("the victims are gone", LONG, || {
        (s.get_json(&["pod", "low-1"]).is_none() && s.get_json(&["pod", "low-2"]).is_none())
            .then_some(())
    });

    let events = s.eventually("the Preempted events of both victims", LONG, || {
        let events = items(&s, &["events"]);
        let preempted: Vec<Value> = events
            .iter()
            .filter(|e| e["reason"] == "Preempted")
            .cloned()
            .collect();
        (preempted.len() >= 2).then_some(events)
    });
    for e in events.iter().filter(|e| e["reason"] == "Preempted") {
        let victim = e["involvedObject"]["name"].as_str().unwrap();
        assert!(victim.starts_with("low-"), "{e}");
        assert_eq!(
            e["message"],
            format!("Preempted by pod {uid} on node linux-1"),
            "{e}"
        );
    }
    let failed: Vec<&str> = events
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling" && e["involvedObject"]["name"] == "high")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        failed.iter().any(|m| m.ends_with(
            "preemption: found a potential placement for pod on node linux-1, preempting 2 victims"
        )),
        "{failed:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "Scheduled" && e["involvedObject"]["name"] == "high"),
        "high was scheduled"
    );
}

#[test]
fn priority_admission_refuses_unknown_classes_forged_priorities_and_a_second_default() {
    let s = Server::start();
    let out = s.kubectl_stdin(&["create", "-f", "-"], &pod("p", "nope", 10));
    assert!(
        out.err()
            .contains("pods \"p\" is forbidden: no PriorityClass with name nope was found"),
        "{}",
        out.stderr
    );

    s.kubectl(&["create", "priorityclass", "high", "--value=1000"])
        .ok();
    let forged = pod("forged", "high", 10).replace("spec:\n", "spec:\n  priority: 7\n");
    let out = s.kubectl_stdin(&["create", "-f", "-"], &forged);
    assert!(
        out.err().contains(
            "the integer value of priority (7) must not be provided in pod spec; priority \
             admission controller computed 1000 from the given PriorityClass name"
        ),
        "{}",
        out.stderr
    );

    // No default class: priority 0; then the default applies to pods naming none.
    let plain = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: plain\nspec:\n  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n";
    s.create(plain);
    let p = s.get_json(&["pod", "plain"]).unwrap();
    assert_eq!(p["spec"]["priority"], 0);
    s.kubectl(&[
        "create",
        "priorityclass",
        "default",
        "--value=5",
        "--global-default=true",
    ])
    .ok();
    s.create(&plain.replace("name: plain", "name: defaulted"));
    let p = s.get_json(&["pod", "defaulted"]).unwrap();
    assert_eq!(p["spec"]["priorityClassName"], "default");
    assert_eq!(p["spec"]["priority"], 5);

    let out = s.kubectl(&[
        "create",
        "priorityclass",
        "another",
        "--value=6",
        "--global-default=true",
    ]);
    assert!(
        out.err().contains(
            "priorityclasses.scheduling.k8s.io \"another\" is forbidden: PriorityClass default \
             is already marked as default. Only one default can exist"
        ),
        "{}",
        out.stderr
    );
}
