//! The generated rules are accepted by the kernel: a full table, then the transactions of a
//! change and of a removal, applied with `nft` in a private network namespace (so nothing here
//! touches this machine's own traffic). Needs root and `nft` (scripts/install-deps.sh); without
//! them the test says so and checks nothing else.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};

use tandem_proxy::model::{Endpoint, Protocol, ServicePort};
use tandem_proxy::nft::Nft;
use tandem_proxy::rules::{self, Cidr, Contribution, Script, Settings};

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
    fn nft(&self) -> Nft {
        Nft {
            netns: Some(format!("/proc/{}/ns/net", self.0.id()).into()),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn settings() -> Settings {
    Settings {
        table: "tandem-kernel-test".into(),
        node_name: "n1".into(),
        cluster_cidr: Cidr::parse("10.244.0.0/16").unwrap(),
        node_pod_cidr: Cidr::parse("10.244.0.0/24"),
        emulated_pod_cidrs: Vec::new(),
        service_cidr: Cidr::parse("10.96.0.0/12").unwrap(),
        windows: None,
    }
}

fn port(name: &str, endpoints: &[[u8; 4]], affinity: bool) -> ServicePort {
    ServicePort {
        namespace: "default".into(),
        name: name.into(),
        port_name: "http".into(),
        protocol: Protocol::Tcp,
        port: 80,
        cluster_ips: vec![Ipv4Addr::new(10, 96, 0, 20)],
        external_ips: vec![Ipv4Addr::new(127, 0, 0, 11)],
        node_port: Some(30080),
        affinity_timeout: affinity.then_some(60),
        internal_local: false,
        external_local: true,
        endpoints: endpoints
            .iter()
            .map(|ip| Endpoint {
                ip: Ipv4Addr::from(*ip),
                port: 8080,
                node: Some("n1".into()),
                ready: true,
                serving: true,
                terminating: false,
            })
            .collect(),
    }
}

#[tokio::test]
async fn generated_tables_and_changes_are_accepted_by_the_kernel() {
    let Some(ns) = Netns::new() else {
        eprintln!("skipped: cannot create a network namespace (unshare --net needs root)");
        return;
    };
    let nft = ns.nft();
    if let Some(why) = nft.unavailable_reason().await {
        eprintln!("skipped: {why}");
        return;
    }
    let s = settings();
    let t = format!("ip {}", s.table);
    let reach = |_: &Endpoint| true;
    let v1 = rules::contribution(
        &s,
        &[port("web", &[[10, 244, 0, 5], [10, 244, 0, 6]], false)],
        &reach,
    );
    let empty = rules::contribution(&s, &[port("empty", &[], false)], &reach);
    nft.apply(&rules::full_script(&s, [&v1, &empty]).script)
        .await
        .unwrap();
    let listing = nft.list_table(&s.table).await.unwrap();
    assert!(listing.contains("dnat to 10.244.0.5:8080"), "{listing}");
    assert!(listing.contains("goto reject-chain"), "{listing}");

    // A change of endpoints and a switch to ClientIP affinity, as one transaction.
    let mut counts = BTreeMap::new();
    for ip in &v1.hairpin {
        counts.insert(*ip, 1usize);
    }
    let before = counts.clone();
    let v2 = rules::contribution(&s, &[port("web", &[[10, 244, 0, 7]], true)], &reach);
    let mut script = Script::default();
    script.diff(&t, &v1, &v2, &mut counts);
    nft.apply(&script.finish(&t, &before, &counts))
        .await
        .unwrap();
    let listing = nft.list_table(&s.table).await.unwrap();
    assert!(listing.contains("dnat to 10.244.0.7:8080"), "{listing}");
    assert!(!listing.contains("dnat to 10.244.0.5:8080"), "{listing}");
    assert!(
        listing.contains("aff-default/web/tcp/80__10.244.0.7/8080"),
        "{listing}"
    );

    // Removing the Service leaves only the skeleton.
    let before = counts.clone();
    let mut script = Script::default();
    script.diff(&t, &v2, &Contribution::default(), &mut counts);
    nft.apply(&script.finish(&t, &before, &counts))
        .await
        .unwrap();
    let listing = nft.list_table(&s.table).await.unwrap();
    assert!(!listing.contains("default/web/"), "{listing}");
    nft.delete_table(&s.table).await.unwrap();
    assert!(nft.list_table(&s.table).await.is_none());
}
