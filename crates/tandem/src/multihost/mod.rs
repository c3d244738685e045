//! `tandem up --multi-host`: a cluster that spans hosts, tried on one machine. Every node is a
//! simulated host of its own, as kind makes each node a container: a network namespace named
//! `tandem-NODE` with `eth0` on an underlay bridge of the machine (an address each), and its own
//! `tandem agent` process joined with the join token — Linux nodes with real containers on
//! their own containerd, Windows nodes emulated — which programs the pod network between the
//! hosts (`tandem_agent::cluster_network`). Cutting a host off is
//! `ip netns exec tandem-NODE ip link set eth0 down`.
//!
//! [`plan`] works out names, addresses and command lines (pure); [`hosts`] makes and removes
//! them. Stopping stops every agent (each removes its pods, containerd and data plane), then
//! deletes the namespaces (and with them whatever is left inside) and the bridge.

pub mod hosts;
pub mod plan;

use std::path::Path;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

pub use plan::{DEFAULT_UNDERLAY, HostPlan, PlanSettings, Underlay};

/// How many times a host's agent is started in all (it exits when it cannot join in time, e.g.
/// while the machine is busy); a real host's service manager restarts its agent the same way.
const AGENT_STARTS: u32 = 10;
/// The pause before an exited agent is started again.
const RESTART_DELAY: Duration = Duration::from_secs(2);

/// The running simulated hosts.
pub struct MultiHost {
    underlay: Underlay,
    hosts: Vec<(HostPlan, Option<tokio::task::JoinHandle<()>>)>,
    stop: watch::Sender<bool>,
}

/// Runs a host's agent until `stop`, starting it again when it exits (at most
/// [`AGENT_STARTS`] times in all); at `stop`, stops it (SIGTERM, then SIGKILL).
async fn supervise(
    plan: HostPlan,
    args: Vec<String>,
    exe: PathBuf,
    token: String,
    mut stop: watch::Receiver<bool>,
) {
    for start in 1..=AGENT_STARTS {
        if *stop.borrow() {
            return;
        }
        let mut child = match hosts::start_agent(&plan, &args, &exe, &token) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("tandem: cannot start the agent of {}: {e:#}", plan.node);
                return;
            }
        };
        let exited = tokio::select! {
            status = child.wait() => Some(status),
            _ = stop.changed() => None,
        };
        let Some(status) = exited else {
            hosts::stop_agent(&plan.node, child).await;
            return;
        };
        let status = status
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        if start == AGENT_STARTS {
            eprintln!(
                "tandem: the agent of {} exited ({status}) {start} times; see {}",
                plan.node,
                plan.state_dir.join("agent.log").display()
            );
            return;
        }
        eprintln!(
            "tandem: the agent of {} exited ({status}); starting it again",
            plan.node
        );
        tokio::select! {
            _ = tokio::time::sleep(RESTART_DELAY) => {}
            _ = stop.changed() => return,
        }
    }
}

impl MultiHost {
    /// Makes the underlay bridge (before the API server starts: it listens on the bridge).
    pub async fn prepare(
        nodes: &[tandem_agent::NodeConfig],
        settings: &PlanSettings<'_>,
    ) -> anyhow::Result<MultiHost> {
        if !tandem_agent::podnet::netns::can_manage_networks() {
            anyhow::bail!("--multi-host makes network namespaces: run tandem as root");
        }
        let (underlay, hosts) = plan::plan(nodes, settings)?;
        hosts::create_underlay(&underlay)
            .await
            .context("cannot create the underlay bridge")?;
        Ok(MultiHost {
            underlay,
            hosts: hosts.into_iter().map(|h| (h, None)).collect(),
            stop: watch::channel(false).0,
        })
    }

    /// Where each host's data-plane kubeconfigs go (`--data-plane-kubeconfigs`).
    pub fn identity_dirs(&self) -> Vec<std::path::PathBuf> {
        self.hosts
            .iter()
            .map(|(h, _)| plan::identity_dir(h))
            .collect()
    }

    /// The address the API server listens on (the bridge's).
    pub fn gateway(&self) -> std::net::Ipv4Addr {
        self.underlay.gateway
    }

    /// Makes each host and starts its agent; returns a line per host for the banner. A host
    /// that cannot be made stops the whole start (what was made is removed by
    /// [`MultiHost::shutdown`]).
    pub async fn start(
        &mut self,
        exe: &Path,
        token: &str,
        api_port: u16,
    ) -> anyhow::Result<Vec<String>> {
        let mut lines = Vec::new();
        for (plan, task) in &mut self.hosts {
            hosts::create_host(&self.underlay, plan)
                .await
                .with_context(|| format!("cannot make the host of {}", plan.node))?;
            let args = plan::agent_command(&self.underlay, api_port, plan);
            *task = Some(tokio::spawn(supervise(
                plan.clone(),
                args,
                exe.to_path_buf(),
                token.to_string(),
                self.stop.subscribe(),
            )));
            lines.push(format!(
                "{:<18} host tandem-{} at {} on {} — {}; log {}",
                plan.node,
                plan.node,
                plan.address,
                self.underlay.bridge,
                if plan.cri {
                    "real containers on its own containerd"
                } else {
                    "emulated runtime"
                },
                plan.state_dir.join("agent.log").display()
            ));
        }
        Ok(lines)
    }

    /// Stops every agent, then removes every namespace and the bridge.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let mut plans = Vec::new();
        for (plan, task) in self.hosts {
            if let Some(task) = task {
                let _ = task.await;
            }
            plans.push(plan);
        }
        for plan in &plans {
            hosts::delete_host(plan).await;
        }
        hosts::delete_underlay(&self.underlay).await;
    }
}
