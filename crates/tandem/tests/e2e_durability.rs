//! End-to-end: acknowledged writes survive `kill -9` of the server, and watches resume from a
//! resourceVersion taken before the crash.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

use common::{Server, configmap};

const N: usize = 50;

/// name → (uid, resourceVersion) of every ConfigMap in `default` labelled `set=durable`.
fn identities(s: &Server) -> BTreeMap<String, (String, String)> {
    let list = s
        .kubectl(&["get", "configmaps", "-l", "set=durable", "-o", "json"])
        .json();
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            (
                m["name"].as_str().unwrap().to_string(),
                (
                    m["uid"].as_str().unwrap().to_string(),
                    m["resourceVersion"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

fn rv_of(s: &Server, name: &str) -> u64 {
    let out = s.kubectl(&[
        "get",
        "cm",
        name,
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    out.ok().trim().parse().expect("numeric resourceVersion")
}

#[test]
fn acknowledged_creates_survive_kill_9_with_the_same_uids_and_resource_versions() {
    let mut s = Server::start();
    for i in 0..N {
        let out = s.kubectl_stdin(
            &["create", "-f", "-"],
            &configmap(&format!("cm-{i:02}"), &[("set", "durable")]),
        );
        assert!(out.ok().contains("created"), "{}", out.stdout);
    }
    let before = identities(&s);
    assert_eq!(before.len(), N);
    let ca_before = fs::read_to_string(s.kubeconfig()).unwrap();
    let ca_before = ca_before
        .lines()
        .find(|l| l.contains("certificate-authority-data"))
        .unwrap()
        .to_string();

    s.kill9();
    s.restart();

    let after = identities(&s);
    assert_eq!(after, before, "objects changed across kill -9");
    let kubeconfig = fs::read_to_string(s.kubeconfig()).unwrap();
    assert!(
        kubeconfig.contains(&ca_before),
        "the CA should be kept in the data dir across restarts"
    );
    // New writes continue the revision sequence rather than reusing it.
    let newest = before
        .values()
        .map(|(_, rv)| rv.parse::<u64>().unwrap())
        .max()
        .unwrap();
    s.create(&configmap("after-restart", &[]));
    assert!(rv_of(&s, "after-restart") > newest);
    assert_eq!(
        s.get_json(&["cm", "cm-07"]).unwrap()["data"]["key"],
        "value"
    );
}

#[test]
fn updates_and_deletes_survive_kill_9() {
    let mut s = Server::start();
    let docs: Vec<String> = (0..5)
        .map(|i| configmap(&format!("cm-{i}"), &[("set", "durable")]))
        .collect();
    s.kubectl_stdin(&["create", "-f", "-"], &docs.join("---\n"))
        .ok();
    s.kubectl(&["label", "cm", "cm-0", "updated=yes"]).ok();
    s.kubectl(&[
        "patch",
        "cm",
        "cm-1",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"key":"patched"}}"#,
    ])
    .ok();
    s.kubectl(&["delete", "cm", "cm-2"]).ok();
    let before = identities(&s);

    s.kill9();
    s.restart();

    assert_eq!(identities(&s), before);
    assert_eq!(
        s.get_json(&["cm", "cm-0"]).unwrap()["metadata"]["labels"]["updated"],
        "yes"
    );
    assert_eq!(
        s.get_json(&["cm", "cm-1"]).unwrap()["data"]["key"],
        "patched"
    );
    assert!(s.get_json(&["cm", "cm-2"]).is_none());
}

#[test]
fn repeated_kill_9_restarts_keep_every_acknowledged_write() {
    let mut s = Server::start();
    let mut expected = BTreeMap::new();
    for round in 0..3 {
        for i in 0..5 {
            let name = format!("r{round}-{i}");
            s.create(&configmap(&name, &[("set", "durable")]));
        }
        expected = identities(&s);
        s.kill9();
        s.restart();
        assert_eq!(identities(&s), expected, "after round {round}");
    }
    assert_eq!(expected.len(), 15);
}

/// (type, object name) of one JSON watch event line.
fn event(line: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (
        v["type"].as_str().unwrap_or_default().to_string(),
        v["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn list_rv(s: &Server) -> String {
    let list = s
        .kubectl(&["get", "--raw", "/api/v1/namespaces/default/configmaps"])
        .json();
    list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion")
        .to_string()
}

fn watch_path(rv: &str) -> String {
    format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=60"
    )
}

#[test]
fn watch_resumes_from_the_last_resource_version_seen_before_kill_9() {
    let mut s = Server::start();
    for i in 0..5 {
        s.create(&configmap(&format!("cm-{i}"), &[("set", "durable")]));
    }
    s.kubectl(&["delete", "cm", "cm-4"]).ok();
    // What an informer holds when the server dies: the resourceVersion of its last list/event.
    let last_seen = list_rv(&s);

    s.kill9();
    s.restart();

    let mut watch = s.kubectl_stream(&["get", "--raw", &watch_path(&last_seen)]);
    s.create(&configmap("live", &[]));
    let line = watch.wait_for("the first event", Duration::from_secs(30), |l| {
        l.starts_with('{')
    });
    assert_eq!(
        event(&line),
        ("ADDED".to_string(), "live".to_string()),
        "nothing before {last_seen} may be replayed"
    );
    s.kubectl(&["delete", "cm", "cm-0"]).ok();
    let line = watch.wait_for("DELETED cm-0", Duration::from_secs(30), |l| {
        l.starts_with('{')
    });
    assert_eq!(event(&line), ("DELETED".to_string(), "cm-0".to_string()));
}

#[test]
fn watch_from_an_older_resource_version_after_kill_9_replays_or_is_expired() {
    let mut s = Server::start();
    for i in 0..10 {
        s.create(&configmap(&format!("cm-{i}"), &[("set", "durable")]));
    }
    let older = rv_of(&s, "cm-4").to_string();
    s.kubectl(&["delete", "cm", "cm-9"]).ok();

    s.kill9();
    s.restart();

    let mut watch = s.kubectl_stream(&["get", "--raw", &watch_path(&older)]);
    let timeout = Duration::from_secs(30);
    let first = watch.wait_for("the first event", timeout, |l| l.starts_with('{'));
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    if v["type"] == "ERROR" {
        // Upstream's watch cache starts at the list it made on start, so an older revision is
        // `410 Gone` (reason Expired) and the client relists.
        assert_eq!(v["object"]["code"], 410, "{first}");
        assert_eq!(v["object"]["reason"], "Expired", "{first}");
        return;
    }
    // Otherwise everything after the resume point is replayed, in order, and nothing before it.
    let mut replayed = vec![event(&first)];
    for _ in 0..5 {
        let line = watch.wait_for("a replayed event", timeout, |l| l.starts_with('{'));
        replayed.push(event(&line));
    }
    let want: Vec<(String, String)> = (5..10)
        .map(|i| ("ADDED".to_string(), format!("cm-{i}")))
        .chain([("DELETED".to_string(), "cm-9".to_string())])
        .collect();
    assert_eq!(replayed, want);
}

#[test]
fn kubectl_watch_started_after_restart_sees_new_changes() {
    let mut s = Server::start();
    s.create(&configmap("before", &[]));
    s.kill9();
    s.restart();
    let mut watch = s.kubectl_stream(&["get", "configmaps", "-w", "--output-watch-events"]);
    let timeout = Duration::from_secs(30);
    watch.wait_for("ADDED before", timeout, |l| {
        l.starts_with("ADDED") && l.contains("before")
    });
    s.create(&configmap("after", &[]));
    watch.wait_for("ADDED after", timeout, |l| {
        l.starts_with("ADDED") && l.contains("after")
    });
}
