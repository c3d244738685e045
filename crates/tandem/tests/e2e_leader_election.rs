//! End-to-end: two `tandem server`s on one etcd form one control plane. The scheduler and the
//! controller manager run under leader election on the Leases `kube-system/kube-scheduler` and
//! `kube-system/kube-controller-manager` (client-go's `leaderelection`, `--leader-elect*` flags
//! as upstream spells them), so exactly one server runs each; when the leader is killed the other
//! server takes over once the lease duration has passed, and a server that shuts down cleanly
//! releases its Leases so the other takes over at once. An agent given both servers
//! (`--server A,B`) fails over with them through its local proxy.
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

use std::process::{Child, Command};
use std::time::Duration;

use common::{Server, deployment};
use etcd_server::{EtcdServer, etcd_binary};

const LONG: Duration = Duration::from_secs(90);
const SCHEDULER: &str = "kube-scheduler";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// `tandem server` on the etcd at `url`, with the given leader election durations.
fn server_flags<'a>(url: &'a str, durations: &'a [&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["server", "--etcd-servers", url];
    flags.extend_from_slice(durations);
    flags
}

/// The Lease's holder, or `None` while it has none (or does not exist yet).
fn holder(s: &Server, lease: &str) -> Option<String> {
    let lease = s.get_json(&["lease", "-n", "kube-system", lease])?;
    let id = lease["spec"]["holderIdentity"].as_str()?.to_string();
    (!id.is_empty()).then_some(id)
}

/// Whether `s` printed that it leads `lease` as `identity`.
fn leads(s: &Server, lease: &str, identity: &str) -> bool {
    s.log().contains(&format!(
        "became leader of kube-system/{lease} as {identity}"
    ))
}

/// A `tandem agent` process, killed when dropped.
struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Joins node `name` with `servers` (comma-separated) and the join token of `s`.
fn agent(s: &Server, servers: &str, name: &str) -> Agent {
    let token = std::fs::read_to_string(s.data_dir().join("join-token")).unwrap();
    let log = s.dir().join(format!("agent-{name}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["agent", "--server", servers, "--token", token.trim()])
        .args(["--hostname-override", name, "--state-dir"])
        .arg(s.dir().join(format!("agent-{name}")))
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    Agent { child, log }
}

#[test]
fn the_other_server_takes_over_scheduling_and_controllers_when_the_leader_is_killed() {
    if etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    // Short durations keep the takeover quick; the rules are the same as with the defaults.
    let durations = [
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=500ms",
    ];
    let flags = server_flags(&etcd.client_url, &durations);
    let mut a = Server::start_with(&flags);
    let mut b = Server::start_with_pki(&flags, &a.data_dir().join("pki"));

    // Each Lease has one holder, and exactly one server says it leads it.
    for lease in [SCHEDULER, CONTROLLER_MANAGER] {
        let id = a.eventually(&format!("{lease} held"), LONG, || holder(&a, lease));
        let (in_a, in_b) = a.eventually(&format!("{lease}'s holder reports it"), LONG, || {
            let (in_a, in_b) = (leads(&a, lease, &id), leads(&b, lease, &id));
            (in_a || in_b).then_some((in_a, in_b))
        });
        assert!(in_a ^ in_b, "{lease} held by {id}: a {in_a}, b {in_b}");
        let other = if in_a { &b } else { &a };
        assert!(
            !other
                .log()
                .contains(&format!("became leader of kube-system/{lease}")),
            "the other server leads {lease} too:\n{}",
            other.log()
        );
    }

    // A node that knows both servers, and a workload the current leaders run.
    let servers = format!("{},{}", a.url(), b.url());
    let node = agent(&a, &servers, "n1");
    a.eventually("the node is Ready", LONG, || {
        let out = a.kubectl(&["get", "node", "n1", "--no-headers"]);
        (out.success() && out.ok().contains(" Ready ")).then_some(())
    });
    assert!(
        node.log().contains("through the failover proxy"),
        "{}",
        node.log()
    );
    a.kubectl_stdin(&["apply", "-f", "-"], &deployment("before", 1))
        .ok();
    a.kubectl(&["rollout", "status", "deployment/before", "--timeout=90s"])
        .ok();

    // The scheduler's leader dies without a word.
    let scheduler_leader = holder(&a, SCHEDULER).unwrap();
    let a_led = leads(&a, SCHEDULER, &scheduler_leader);
    let transitions_before = a
        .get_json(&["lease", "-n", "kube-system", SCHEDULER])
        .unwrap()["spec"]["leaseTransitions"]
        .as_i64()
        .unwrap_or(0);
    let survivor = if a_led {
        a.kill9();
        &b
    } else {
        b.kill9();
        &a
    };

    // The survivor takes both Leases (it may have held one already).
    for lease in [SCHEDULER, CONTROLLER_MANAGER] {
        survivor.eventually(&format!("the survivor leads {lease}"), LONG, || {
            let id = holder(survivor, lease)?;
            leads(survivor, lease, &id).then_some(())
        });
    }
    assert_ne!(holder(survivor, SCHEDULER).unwrap(), scheduler_leader);
    let lease = survivor
        .get_json(&["lease", "-n", "kube-system", SCHEDULER])
        .unwrap();
    assert_eq!(
        lease["spec"]["leaseTransitions"].as_i64(),
        Some(transitions_before + 1),
        "{lease}"
    );

    // The new leaders act: the controllers create the pods, the scheduler binds them, and the
    // node (its proxy now on the survivor) runs them.
    survivor
        .kubectl_stdin(&["apply", "-f", "-"], &deployment("after", 2))
        .ok();
    survivor
        .kubectl(&["rollout", "status", "deployment/after", "--timeout=90s"])
        .ok();
    let pods = survivor.get_json(&["pods", "-l", "app=after"]).unwrap();
    let items = pods["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{pods}");
    assert!(
        items.iter().all(|p| p["spec"]["nodeName"] == "n1"),
        "{pods}"
    );
    drop(node);
}

#[test]
fn a_server_that_shuts_down_hands_its_leases_over_at_once() {
    if etcd_binary().is_none() {
        return;
    }
    let etcd = EtcdServer::start();
    // A lease far longer than the test waits: only a release lets the other server in.
    let durations = [
        "--leader-elect-lease-duration=300s",
        "--leader-elect-renew-deadline=200s",
        "--leader-elect-retry-period=1s",
    ];
    let flags = server_flags(&etcd.client_url, &durations);
    let mut a = Server::start_with(&flags);
    let a_id = a.eventually("a leads both", LONG, || {
        let id = holder(&a, SCHEDULER)?;
        (leads(&a, SCHEDULER, &id) && holder(&a, CONTROLLER_MANAGER)? == id).then_some(id)
    });
    let b = Server::start_with_pki(&flags, &a.data_dir().join("pki"));
    a.terminate();
    for lease in [SCHEDULER, CONTROLLER_MANAGER] {
        let id = b.eventually(&format!("b leads {lease}"), Duration::from_secs(60), || {
            let id = holder(&b, lease)?;
            leads(&b, lease, &id).then_some(id)
        });
        assert_ne!(id, a_id);
    }
    // The released Lease counted a transition when b took it.
    let lease = b
        .get_json(&["lease", "-n", "kube-system", SCHEDULER])
        .unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    assert!(
        b.kubectl(&[
            "get",
            "events",
            "-n",
            "kube-system",
            "--field-selector",
            "reason=LeaderElection",
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .ok()
        .contains(&format!("{a_id} became leader")),
        "the LeaderElection event of a's term"
    );
}
