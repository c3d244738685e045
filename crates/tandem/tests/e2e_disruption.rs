//! End-to-end: PodDisruptionBudgets with the stock kubectl. The disruption controller (upstream
//! `pkg/controller/disruption`) keeps the budget's status, and the eviction subresource (upstream
//! `pkg/registry/core/pod/storage/eviction.go`) refuses an eviction that would break the budget
//! with 429 — so `kubectl drain` retries with the budget's message until the budget is relaxed.
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

fn ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Live (not terminating) pods of the `web` Deployment.
fn web_pods(s: &Server) -> Vec<Value> {
    items(s, &["pods", "-l", "app=web"])
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// Waits until the budget's status says `allowed` disruptions with the status current.
fn wait_allowed(s: &Server, allowed: i64) -> Value {
    s.eventually(&format!("{allowed} disruptions allowed"), LONG, || {
        let p = s.get_json(&["pdb", "web"])?;
        let st = &p["status"];
        (st["disruptionsAllowed"] == allowed
            && st["observedGeneration"] == p["metadata"]["generation"])
            .then_some(p)
    })
}

#[test]
fn drain_waits_for_the_disruption_budget_and_evicts_once_it_allows() {
    let s = Server::start_up(Some("linux=2"));
    s.eventually("two Ready nodes", LONG, || {
        let n = items(&s, &["nodes"]);
        (n.len() == 2).then_some(())
    });
    // Both replicas land on linux-1: linux-2 is cordoned until the drain needs it.
    s.kubectl(&["cordon", "linux-2"]).ok();
    s.create(&common::deployment("web", 2));
    s.eventually("two ready web pods on linux-1", LONG, || {
        let p = web_pods(&s);
        (p.len() == 2
            && p.iter()
                .all(|p| ready(p) && p["spec"]["nodeName"] == "linux-1"))
        .then_some(())
    });
    s.kubectl(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=2",
    ])
    .ok();
    let p = wait_allowed(&s, 0);
    assert_eq!(p["status"]["currentHealthy"], 2);
    assert_eq!(p["status"]["desiredHealthy"], 2);
    assert_eq!(p["status"]["expectedPods"], 2);
    let table = s.kubectl(&["get", "pdb", "web"]).ok().to_string();
    assert!(
        common::header(&table).contains("ALLOWED DISRUPTIONS"),
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], ["web", "2", "N/A", "0"], "{table}");

    // A direct eviction is refused with upstream's Status.
    let victim = web_pods(&s)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let eviction = format!(
        "{{\"apiVersion\":\"policy/v1\",\"kind\":\"Eviction\",\"metadata\":{{\"name\":\"{victim}\",\"namespace\":\"default\"}}}}"
    );
    let path = format!("/api/v1/namespaces/default/pods/{victim}/eviction");
    let (out, codes) = s.kubectl_codes(&["create", "--raw", &path, "-f", "-"], Some(&eviction));
    assert!(!out.success());
    assert_eq!(codes.last(), Some(&429), "{}", out.combined());
    assert!(
        out.err()
            .contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{}",
        out.err()
    );
    let verbose = s.kubectl_full(
        &["create", "--raw", &path, "-f", "-", "-v=8"],
        Some(&eviction),
        &[],
        Duration::from_secs(30),
    );
    assert!(
        verbose.combined().contains(
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Cannot evict pod as it would violate the pod's disruption budget.\",\
             \"reason\":\"TooManyRequests\",\"details\":{\"causes\":[{\"reason\":\"DisruptionBudget\",\
             \"message\":\"The disruption budget web needs 2 healthy pods and has 2 currently\"}]},\
             \"code\":429}"
        ),
        "{}",
        verbose.combined()
    );

    // Drain retries with the budget's message until its timeout; nothing is evicted.
    s.kubectl(&["uncordon", "linux-2"]).ok();
    let drain = s.kubectl_full(
        &["drain", "linux-1", "--ignore-daemonsets", "--timeout=12s"],
        None,
        &[],
        Duration::from_secs(60),
    );
    assert!(!drain.success(), "{}", drain.combined());
    assert!(
        drain
            .combined()
            .contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{}",
        drain.combined()
    );
    assert_eq!(web_pods(&s).len(), 2);

    // Relaxed to one, the drain evicts both pods one at a time onto linux-2.
    s.kubectl(&[
        "patch",
        "pdb",
        "web",
        "--type=merge",
        "-p",
        "{\"spec\":{\"minAvailable\":1}}",
    ])
    .ok();
    wait_allowed(&s, 1);
    let drain = s.kubectl_full(
        &["drain", "linux-1", "--ignore-daemonsets", "--timeout=120s"],
        None,
        &[],
        Duration::from_secs(180),
    );
    assert!(drain.success(), "{}", drain.combined());
    assert!(drain.combined().contains("evicted"), "{}", drain.combined());
    s.eventually("both web pods ready on linux-2", LONG, || {
        let p = web_pods(&s);
        (p.len() == 2
            && p.iter()
                .all(|p| ready(p) && p["spec"]["nodeName"] == "linux-2"))
        .then_some(())
    });
}
