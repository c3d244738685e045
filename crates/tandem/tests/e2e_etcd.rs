//! The control plane on etcd (`tandem server --etcd-servers`, `tandem up --etcd`), driven with
//! kubectl through the workflows the SQLite end-to-end tests cover: a hybrid cluster's
//! deployments scheduled and rolled out, paged and selected lists, watches from a
//! resourceVersion, optimistic concurrency, state that outlives a restart, `410 Gone` for a
//! revision etcd has compacted, two API servers on one etcd seeing each other's writes at once,
//! and `tandem migrate` from the SQLite store to etcd.
//!
//! Each test starts its own etcd (Debian's `etcd-server`, which `scripts/install-deps.sh`
//! installs) on free loopback ports; without etcd on PATH the tests are skipped, except under CI.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;
#[path = "../../store/tests/etcd_server/mod.rs"]
mod etcd_server;

use std::time::Duration;

use common::{Server, configmap, deployment};
use etcd_server::{EtcdServer, etcd_binary};

const LONG: Duration = Duration::from_secs(90);

/// `tandem up` with emulated Linux and Windows nodes on the etcd at `url`.
fn up_on(url: &str) -> Server {
    Server::start_with(&[
        "up",
        "--etcd-servers",
        url,
        "--nodes",
        "linux=1,windows-2019=1",
        "--linux-runtime",
        "emulated",
        "--emulated-pod-network",
        "off",
        "--ingress=false",
    ])
}

#[test]
fn kubectl_workflows_run_on_etcd_and_survive_a_restart() {
    if etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let mut s = up_on(&etcd.client_url);
    assert!(
        s.log()
            .contains(&format!("store:      etcd ({})", etcd.client_url)),
        "the banner names the store:\n{}",
        s.log()
    );
    s.eventually("both nodes are Ready", LONG, || {
        let out = s.kubectl(&["get", "nodes", "--no-headers"]);
        (out.success() && out.ok().matches(" Ready ").count() == 2).then_some(())
    });

    // A hybrid workload: the seed Windows web server lands on the Windows node, a Linux
    // deployment on the Linux one.
    s.kubectl(&["apply", "-f", &common::seed("win-webserver.yaml")])
        .ok();
    s.kubectl_stdin(&["apply", "-f", "-"], &deployment("web", 3))
        .ok();
    s.kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"])
        .ok();
    let pods = s.get_json(&["pods", "-l", "app=web"]).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert!(
        items.iter().all(|p| p["spec"]["nodeName"] == "linux-1"),
        "{pods}"
    );
    s.eventually(
        "the Windows web server is scheduled on Windows",
        LONG,
        || {
            let out = s.kubectl(&[
                "get",
                "pods",
                "-l",
                "app=win-webserver",
                "-o",
                "jsonpath={.items[*].spec.nodeName}",
            ]);
            let nodes = out.ok().to_string();
            (!nodes.is_empty() && nodes.split(' ').all(|n| n == "windows-2019-1")).then_some(())
        },
    );

    // Paged and selected lists: kubectl asks for pages of one and follows the continue tokens.
    for i in 0..5 {
        let label = if i % 2 == 0 { "even" } else { "odd" };
        s.create(&configmap(&format!("c{i}"), &[("parity", label)]));
    }
    let paged = s.kubectl(&[
        "get",
        "configmaps",
        "-l",
        "parity",
        "--chunk-size=1",
        "-o",
        "name",
    ]);
    assert_eq!(
        paged.ok().lines().collect::<Vec<_>>(),
        [
            "configmap/c0",
            "configmap/c1",
            "configmap/c2",
            "configmap/c3",
            "configmap/c4"
        ]
    );
    let even = s.kubectl(&["get", "configmaps", "-l", "parity=even", "-o", "name"]);
    assert_eq!(even.ok().lines().count(), 3);

    // A watch from a resourceVersion replays what came after it, in order.
    let rv = s.get_json(&["configmap", "c0"]).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    s.kubectl(&["label", "configmap", "c1", "seen=yes"]).ok();
    s.kubectl(&["delete", "configmap", "c2"]).ok();
    let events = s.kubectl_full(
        &[
            "get",
            "--raw",
            &format!(
                "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2&labelSelector=parity"
            ),
        ],
        None,
        &[],
        Duration::from_secs(30),
    );
    let seen: Vec<(String, String)> = events
        .ok()
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let tail: Vec<(&str, &str)> = seen
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|(t, n)| (t.as_str(), n.as_str()))
        .collect();
    assert_eq!(tail, [("MODIFIED", "c1"), ("DELETED", "c2")], "{seen:?}");

    // Optimistic concurrency: a replace carrying a stale resourceVersion is refused.
    let mut stale = s.get_json(&["configmap", "c3"]).unwrap();
    s.kubectl(&["label", "configmap", "c3", "fresh=yes"]).ok();
    stale["data"] = serde_json::json!({"k": "stale"});
    let conflict = s.kubectl_stdin(&["replace", "-f", "-"], &stale.to_string());
    assert!(!conflict.success());
    assert!(
        conflict
            .combined()
            .contains("the object has been modified; please apply your changes to the latest version and try again"),
        "{}",
        conflict.combined()
    );

    // kill -9 and start again on the same etcd: everything acknowledged is there.
    s.restart();
    let after = s.kubectl(&["get", "configmaps", "-l", "parity", "-o", "name"]);
    assert_eq!(
        after.ok().lines().collect::<Vec<_>>(),
        [
            "configmap/c0",
            "configmap/c1",
            "configmap/c3",
            "configmap/c4"
        ]
    );
    let c3 = s.get_json(&["configmap", "c3"]).unwrap();
    assert_eq!(c3["metadata"]["labels"]["fresh"], "yes");
    s.kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"])
        .ok();
}

#[test]
fn a_list_at_a_revision_etcd_compacted_is_gone() {
    if etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let s = Server::start_with(&[
        "server",
        "--etcd-servers",
        &etcd.client_url,
        "--etcd-compaction-interval",
        "1s",
    ]);
    s.create(&configmap("old", &[]));
    let rv = s.get_json(&["configmap", "old"]).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let exact = format!(
        "/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"
    );
    assert!(s.kubectl(&["get", "--raw", &exact]).success());
    // The compactor compacts up to what it saw one interval earlier: write, wait a few
    // intervals, and the old revision is gone.
    let gone = s.eventually("the compactor removes the old revision", LONG, || {
        s.kubectl(&["label", "configmap", "old", "--overwrite", "tick=x"]);
        let out = s.kubectl(&["get", "--raw", &exact]);
        (!out.success()).then_some(out)
    });
    assert!(
        gone.combined().contains("(Expired)") || gone.combined().contains("too old"),
        "{}",
        gone.combined()
    );
    let status = s.kubectl_codes(&["get", "--raw", &exact, "-v=6"], None).1;
    assert!(status.contains(&410), "{status:?}");
}

#[test]
fn two_api_servers_on_one_etcd_read_each_others_writes_at_once() {
    if etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    let a = Server::start_with(&["server", "--etcd-servers", &etcd.client_url]);
    // The second server trusts the first one's CA: it starts on a copy of its certificates,
    // as kubeadm copies them to each control-plane machine.
    let b = Server::start_with_pki(
        &["server", "--etcd-servers", &etcd.client_url],
        &a.data_dir().join("pki"),
    );
    let mut watch = b.kubectl_stream(&["get", "configmaps", "-w", "-o", "name"]);
    for i in 0..20 {
        let name = format!("from-a-{i}");
        a.create(&configmap(&name, &[]));
        // A consistent read on the other server sees the write as soon as it is acknowledged.
        let out = b.kubectl(&["get", "configmap", &name, "-o", "name"]);
        assert_eq!(out.ok().trim(), format!("configmap/{name}"));
    }
    watch.wait_for("b's watch sees a's last write", LONG, |l| {
        l.contains("configmap/from-a-19")
    });
    b.kubectl(&["delete", "configmap", "from-a-0"]).ok();
    assert!(!a.kubectl(&["get", "configmap", "from-a-0"]).success());
}

#[test]
fn migrate_moves_a_cluster_from_sqlite_to_etcd() {
    if etcd_binary().is_none() {
        return;
    }
    let mut s = Server::start();
    s.create(&configmap("kept", &[("moved", "yes")]));
    s.kubectl_stdin(&["apply", "-f", "-"], &deployment("web", 2))
        .ok();
    s.terminate();
    let etcd = EtcdServer::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["migrate", "--from"])
        .arg(format!("sqlite:{}", s.data_dir().display()))
        .args(["--to", &format!("etcd:{}", etcd.client_url)])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("copied "), "{stdout}");
    // A second migration into the same etcd is refused: it is no longer empty.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["migrate", "--from"])
        .arg(format!("sqlite:{}", s.data_dir().display()))
        .args(["--to", &format!("etcd:{}", etcd.client_url)])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("migrate only into an empty store"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // The same data dir (its certificates) on etcd now: the objects are there.
    let on_etcd = Server::start_with_pki(
        &["server", "--etcd-servers", &etcd.client_url],
        &s.data_dir().join("pki"),
    );
    let kept = on_etcd.get_json(&["configmap", "kept"]).unwrap();
    assert_eq!(kept["metadata"]["labels"]["moved"], "yes");
    let web = on_etcd.get_json(&["deployment", "web"]).unwrap();
    assert_eq!(web["spec"]["replicas"], 2);
}
