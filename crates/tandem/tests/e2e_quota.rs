//! End-to-end: ResourceQuota and LimitRange through the stock kubectl — the quota controller
//! fills in usage, admission charges pods and refuses the one over the limit with upstream's
//! message, `kubectl get/describe quota` show the usage, and LimitRange defaults and maximums
//! apply to new pods.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::time::Duration;

use common::Server;
use serde_json::Value;

fn pod(name: &str, cpu: Option<&str>) -> String {
    let resources = match cpu {
        Some(c) => format!("    resources: {{requests: {{cpu: {c}}}}}\n"),
        None => String::new(),
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: app\n    image: busybox\n{resources}"
    )
}

fn used(s: &Server, quota: &str) -> Option<Value> {
    s.get_json(&["resourcequota", quota])
        .and_then(|q| q.pointer("/status/used").cloned())
}

#[test]
fn quota_charges_pods_and_refuses_the_one_over_the_limit() {
    let s = Server::start();
    s.kubectl(&["create", "quota", "q", "--hard=pods=2,requests.cpu=1"])
        .ok();
    // The controller fills in status; until then the quota constrains nothing.
    s.eventually("quota usage computed", Duration::from_secs(30), || {
        used(&s, "q").filter(|u| u["pods"] == "0" && u["requests.cpu"] == "0")
    });

    s.create(&pod("p1", Some("250m")));
    // A pod that does not request cpu cannot be counted against requests.cpu.
    let out = s.kubectl_stdin(&["create", "-f", "-"], &pod("nocpu", None));
    assert!(
        out.err().contains(
            "pods \"nocpu\" is forbidden: failed quota: q: must specify requests.cpu for: app"
        ),
        "{}",
        out.stderr
    );
    s.create(&pod("p2", Some("500m")));
    let out = s.kubectl_stdin(&["create", "-f", "-"], &pod("p3", Some("100m")));
    assert!(
        out.err().contains(
            "pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("Forbidden"), "{}", out.stderr);
    assert!(
        s.get_json(&["pod", "p3"]).is_none(),
        "the refused pod is not stored"
    );

    let u = used(&s, "q").unwrap();
    assert_eq!(u["pods"], "2", "{u}");
    assert_eq!(u["requests.cpu"], "750m", "{u}");

    let table = s.kubectl(&["get", "quota", "q"]).ok().to_string();
    assert!(
        table.contains("pods: 2/2") && table.contains("requests.cpu: 750m/1"),
        "{table}"
    );
    let describe = s.kubectl(&["describe", "quota", "q"]).ok().to_string();
    let line = |name: &str| {
        describe
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    assert_eq!(line("pods"), Some(vec!["pods", "2", "2"]), "{describe}");
    assert_eq!(
        line("requests.cpu"),
        Some(vec!["requests.cpu", "750m", "1"]),
        "{describe}"
    );

    // Deleting a pod gives its share back; the next create fits again.
    s.kubectl(&["delete", "pod", "p1", "--wait=false"]).ok();
    s.eventually("usage replenished", Duration::from_secs(30), || {
        used(&s, "q").filter(|u| u["pods"] == "1" && u["requests.cpu"] == "500m")
    });
    s.create(&pod("p4", Some("100m")));
}

#[test]
fn limit_range_defaults_pods_and_refuses_too_large_ones() {
    let s = Server::start();
    s.create(
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: limits}\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m, memory: 256Mi}\n    defaultRequest: {cpu: 100m}\n    max: {cpu: '1', memory: 1Gi}\n    min: {cpu: 50m}\n",
    );
    // The LimitRanger reads LimitRanges from the watch cache: wait until it answers.
    s.eventually("limit range visible", Duration::from_secs(10), || {
        s.get_json(&["limitrange", "limits"])
    });
    s.create(&pod("plain", None));
    let p = s.get_json(&["pod", "plain"]).unwrap();
    let resources = &p["spec"]["containers"][0]["resources"];
    assert_eq!(resources["limits"]["cpu"], "500m", "{resources}");
    assert_eq!(resources["limits"]["memory"], "256Mi", "{resources}");
    assert_eq!(resources["requests"]["cpu"], "100m", "{resources}");
    // LimitRange defaulting copies `default` into `defaultRequest` for memory.
    assert_eq!(resources["requests"]["memory"], "256Mi", "{resources}");
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu, memory request for container app; cpu, memory limit for container app"
    );

    let big = "apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: app\n    image: busybox\n    resources: {limits: {cpu: '2', memory: 2Gi}, requests: {cpu: 20m}}\n";
    let out = s.kubectl_stdin(&["create", "-f", "-"], big);
    assert!(
        out.err().contains(
            "pods \"big\" is forbidden: [minimum cpu usage per Container is 50m, but request is 20m, maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Container is 1Gi, but limit is 2Gi]"
        ),
        "{}",
        out.stderr
    );
    assert!(s.get_json(&["pod", "big"]).is_none());
}
