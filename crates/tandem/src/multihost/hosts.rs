//! The I/O of `tandem up --multi-host`: the underlay bridge, each host's named network
//! namespace and veth pair (through `ip`, as a user would make them by hand, so that `ip netns
//! exec tandem-NODE …` works), each host's `tandem agent` process (started in the namespace with
//! `nsenter --net`, which changes nothing else, so cgroups and mounts stay the machine's), and
//! the teardown that removes all of it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::plan::{HostPlan, Underlay};

/// Longest any one `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an agent has to stop after SIGTERM (it tears its containerd down) before SIGKILL.
const AGENT_STOP: Duration = Duration::from_secs(40);

async fn ip(args: &[&str]) -> anyhow::Result<()> {
    let run = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(IP_TIMEOUT, run)
        .await
        .with_context(|| format!("ip {} timed out", args.join(" ")))?
        .with_context(|| format!("cannot run ip {}", args.join(" ")))?;
    if !out.status.success() {
        anyhow::bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Creates the underlay bridge holding the gateway address (one of a killed run is reused),
/// with `nf_call_iptables` off: the hosts' traffic between each other is not the machine's to
/// filter.
pub async fn create_underlay(u: &Underlay) -> anyhow::Result<()> {
    if ip(&["link", "show", "dev", &u.bridge]).await.is_err() {
        ip(&["link", "add", &u.bridge, "type", "bridge"]).await?;
    }
    let _ = ip(&[
        "link",
        "set",
        &u.bridge,
        "type",
        "bridge",
        "nf_call_iptables",
        "0",
    ])
    .await;
    let addr = format!("{}/{}", u.gateway, u.prefix);
    ip(&["addr", "replace", &addr, "dev", &u.bridge]).await?;
    ip(&["link", "set", &u.bridge, "up"]).await?;
    Ok(())
}

/// Deletes the underlay bridge (best effort).
pub async fn delete_underlay(u: &Underlay) {
    if let Err(e) = ip(&["link", "del", &u.bridge]).await {
        tracing::debug!(error = %e, "underlay bridge already gone");
    }
}

/// Creates the host's namespace (one of a killed run is deleted first), its veth pair (`eth0`
/// inside, on the underlay bridge outside), its address and default route via the gateway,
/// `lo` up and IPv4 forwarding on (each namespace has its own).
pub async fn create_host(u: &Underlay, h: &HostPlan) -> anyhow::Result<()> {
    if Path::new("/run/netns").join(&h.netns).exists() {
        let _ = ip(&["netns", "del", &h.netns]).await;
    }
    let _ = ip(&["link", "del", &h.host_if]).await;
    ip(&["netns", "add", &h.netns]).await?;
    ip(&[
        "link", "add", &h.host_if, "type", "veth", "peer", "name", "eth0", "netns", &h.netns,
    ])
    .await?;
    ip(&["link", "set", &h.host_if, "master", &u.bridge, "up"]).await?;
    let addr = format!("{}/{}", h.address, h.prefix);
    let gw = u.gateway.to_string();
    for args in [
        vec!["link", "set", "lo", "up"],
        vec!["addr", "add", &addr, "dev", "eth0"],
        vec!["link", "set", "eth0", "up"],
        vec!["route", "add", "default", "via", &gw, "dev", "eth0"],
    ] {
        let mut full = vec!["-n", h.netns.as_str()];
        full.extend(args);
        ip(&full).await?;
    }
    let sysctl = Command::new("ip")
        .args(["netns", "exec", &h.netns, "sysctl", "-q", "-w"])
        .args(["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status();
    let _ = tokio::time::timeout(IP_TIMEOUT, sysctl).await;
    Ok(())
}

/// Deletes the host's namespace (and with it everything in it: `eth0`, the VXLAN device, the
/// pods' bridge, its routes and nftables tables) and the machine's end of its veth pair.
pub async fn delete_host(h: &HostPlan) {
    let _ = ip(&["netns", "del", &h.netns]).await;
    let _ = ip(&["link", "del", &h.host_if]).await;
}

/// Starts the host's agent inside its namespace, its output appended to
/// `<state dir>/agent.log`; the join token goes through the environment.
pub fn start_agent(
    h: &HostPlan,
    args: &[String],
    exe: &Path,
    token: &str,
) -> anyhow::Result<Child> {
    std::fs::create_dir_all(&h.state_dir)
        .with_context(|| format!("cannot create {}", h.state_dir.display()))?;
    let log_path = h.state_dir.join("agent.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let err = log.try_clone().context("cannot share the agent's log")?;
    Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", h.netns))
        .arg("--")
        .arg(exe)
        .args(args)
        .env("TANDEM_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start the agent of {}", h.node))
}

/// Stops an agent: SIGTERM (it removes its pods, containerd and data plane), then SIGKILL
/// after [`AGENT_STOP`].
pub async fn stop_agent(node: &str, mut child: Child) {
    if let Some(pid) = child.id() {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    match tokio::time::timeout(AGENT_STOP, child.wait()).await {
        Ok(_) => {}
        Err(_) => {
            eprintln!("tandem: the agent of {node} did not stop in time; killing it");
            let _ = child.kill().await;
        }
    }
}
