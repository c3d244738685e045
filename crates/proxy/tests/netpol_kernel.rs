//! The NetworkPolicy table the model produces is accepted by the kernel, replaces itself whole,
//! and is removed by the delete script: applied with `nft` in a private network namespace (so
//! nothing here touches this machine's traffic). Needs root and `nft`; without them the test
//! says so and checks nothing else.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;
use tandem_proxy::netpol::model::{ClusterState, PodInfo};
use tandem_proxy::netpol::rules;
use tandem_proxy::nft::Nft;

/// A process holding a new network namespace for the test's lifetime.
struct Netns(Child);

impl Netns {
    fn new() -> Option<Netns> {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .ok()?;
        std::thread::sleep(std::time::Duration::from_millis(200));
        Some(Netns(child))
    }
    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.0.id())
    }
    fn list(&self, table: &str) -> Option<String> {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.path()))
            .args(["nft", "list", "table", "inet", table])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pod(namespace: &str, name: &str, ip: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": ip}
    }))
    .unwrap()
}

fn policy(name: &str, spec: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"namespace": "app", "name": name}, "spec": spec}))
        .unwrap()
}

fn state() -> ClusterState {
    let mut c = ClusterState::default();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "app", "labels": {"team": "a"}}}))
            .unwrap();
    c.apply_namespace(&ns);
    c.apply_pod(&pod("app", "web", "10.254.0.2", "web"));
    c.apply_pod(&pod("app", "db", "10.254.0.3", "db"));
    c.apply_pod(&pod("app", "client", "10.254.0.4", "client"));
    c.apply_policy(&policy(
        "web",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "client"}}}], "ports": [{"port": "http"}]},
                {"from": [{"ipBlock": {"cidr": "172.16.0.0/16", "except": ["172.16.1.0/24"]}}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}], "ports": [{"protocol": "UDP", "port": 5000, "endPort": 5010}, {"protocol": "SCTP"}]}
            ],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}], "ports": [{"port": "http"}]}]
        }),
    ));
    c.apply_policy(&policy(
        "deny",
        json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}),
    ));
    c
}

#[tokio::test]
async fn the_policy_table_is_accepted_replaced_whole_and_deleted() {
    let Some(netns) = Netns::new() else {
        eprintln!("skipped: cannot create a network namespace (unshare --net needs root)");
        return;
    };
    let nft = Nft {
        netns: Some(netns.path().into()),
    };
    if let Some(why) = nft.unavailable_reason().await {
        eprintln!("skipped: {why}");
        return;
    }
    let table = "tandem-netpol-kernel-test";
    let mut c = state();
    let local = |p: &PodInfo| p.node.as_deref() == Some("n1");
    let script = rules::full_script(table, &c.pod_rules(&local));
    nft.apply(&script).await.unwrap();
    let listing = netns.list(table).unwrap();
    for expected in [
        "hook forward priority filter; policy accept;",
        "ct state established,related accept",
        "ip saddr vmap @egress-pods",
        "ip daddr vmap @ingress-pods",
        "10.254.0.2 : jump ingress-10.254.0.2",
        "10.254.0.3 : jump ingress-10.254.0.3",
        "10.254.0.2 : jump egress-10.254.0.2",
        // The client on the named port; the db on the web pod's named port for egress.
        "10.254.0.4 . tcp . 8080",
        "10.254.0.3 . tcp . 8080",
        "udp . 5000-5010",
        "sctp . 0-65535",
        // The ipBlock without its except range.
        "172.16.0.0/24",
        "172.16.2.0-172.16.255.255",
    ] {
        assert!(
            listing.contains(expected),
            "{expected:?} missing from:\n{listing}"
        );
    }
    assert!(!listing.contains("jump ingress-10.254.0.4"), "{listing}");

    // Deleting the policies and applying again leaves the table with no pod chains.
    c.policies.clear();
    nft.apply(&rules::full_script(table, &c.pod_rules(&local)))
        .await
        .unwrap();
    let listing = netns.list(table).unwrap();
    assert!(!listing.contains("10.254.0.2"), "{listing}");
    assert!(listing.contains("ip daddr vmap @ingress-pods"), "{listing}");

    nft.apply(&rules::delete_script(table)).await.unwrap();
    assert!(netns.list(table).is_none(), "the table is gone");
    // Deleting again is not an error.
    nft.apply(&rules::delete_script(table)).await.unwrap();
}
