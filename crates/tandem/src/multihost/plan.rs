//! What `tandem up --multi-host` makes, worked out without I/O: per node a simulated host (its
//! network namespace, its veth pair on the underlay bridge, its address) and the `tandem agent`
//! command line that joins it to the cluster.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use tandem_agent::{NodeConfig, NodeOs};

/// The underlay by default: one /24 on a bridge of the machine, the bridge holding the first
/// address (the API server listens there), each host the next ones.
pub const DEFAULT_UNDERLAY: &str = "172.30.250.0/24";

/// One simulated host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    pub node: String,
    /// `tandem-NODE` (`ip netns exec tandem-NODE …`).
    pub netns: String,
    /// The machine's end of the host's veth pair, on the underlay bridge (`tdmh` + hash).
    pub host_if: String,
    /// The host's address on its `eth0`, with the underlay's prefix.
    pub address: Ipv4Addr,
    pub prefix: u8,
    /// The host's state dir (containerd, pods, logs, the agent's log).
    pub state_dir: PathBuf,
    /// The flags of its `tandem agent` but `--server` (the API server's port is known once it
    /// listens; see [`agent_command`]) and the token (through `TANDEM_TOKEN`).
    pub agent_args: Vec<String>,
    /// Runs real containers.
    pub cri: bool,
}

/// The machine's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    /// The bridge (`tdmu` + hash of the data dir).
    pub bridge: String,
    pub gateway: Ipv4Addr,
    pub prefix: u8,
}

/// Settings shared by every host.
#[derive(Debug, Clone)]
pub struct PlanSettings<'a> {
    pub data_dir: &'a Path,
    /// `172.30.250.0/24`.
    pub underlay: &'a str,
    pub cluster_cidr: &'a str,
    pub service_cidr: &'a str,
    pub cluster_domain: &'a str,
    pub images_dir: &'a Path,
    /// `auto`, `host-gw`, `vxlan`.
    pub backend: &'a str,
    /// How many Linux nodes run real containers (the first ones); the rest are emulated.
    pub cri_nodes: usize,
}

/// 8 hex digits of FNV-1a over `parts`, stable across builds.
pub fn short_hash(parts: &[&str]) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            hash ^= u32::from(b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    format!("{hash:08x}")
}

/// Where the host's data-plane kubeconfigs are (`<state dir>/identities`).
pub fn identity_dir(host: &HostPlan) -> PathBuf {
    host.state_dir.join("identities")
}

/// `tandem agent --server https://GATEWAY:PORT FLAGS…` for `host`.
pub fn agent_command(underlay: &Underlay, api_port: u16, host: &HostPlan) -> Vec<String> {
    let mut out = vec![
        "agent".to_string(),
        "--server".to_string(),
        format!("https://{}:{api_port}", underlay.gateway),
    ];
    out.extend(host.agent_args.iter().cloned());
    out
}

/// Why a plan cannot be made.
#[derive(Debug, PartialEq, Eq)]
pub enum PlanError {
    Underlay(String),
    PodCidr(String),
    Name(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Underlay(u) => write!(
                f,
                "--multi-host-underlay {u:?} must be an IPv4 network with room for the nodes, such as {DEFAULT_UNDERLAY}"
            ),
            PlanError::PodCidr(n) => write!(f, "node {n} has no pod CIDR"),
            PlanError::Name(n) => write!(f, "node name {n:?} cannot name a network namespace"),
        }
    }
}

impl std::error::Error for PlanError {}

/// The underlay and one host per node, in order.
pub fn plan(
    nodes: &[NodeConfig],
    s: &PlanSettings<'_>,
) -> Result<(Underlay, Vec<HostPlan>), PlanError> {
    let bad = || PlanError::Underlay(s.underlay.to_string());
    let (net, prefix) = s.underlay.split_once('/').ok_or_else(bad)?;
    let net: Ipv4Addr = net.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().map_err(|_| bad())?;
    if !(8..=29).contains(&prefix) {
        return Err(bad());
    }
    let size = 1u64 << (32 - u32::from(prefix));
    // Network, gateway, broadcast, and one address per node.
    if (nodes.len() as u64) + 3 > size {
        return Err(bad());
    }
    let base = u32::from(net) & (u32::MAX << (32 - u32::from(prefix)));
    let underlay = Underlay {
        bridge: format!("tdmu{}", short_hash(&[&s.data_dir.display().to_string()])),
        gateway: Ipv4Addr::from(base + 1),
        prefix,
    };
    let mut hosts = Vec::new();
    let mut cri_left = s.cri_nodes;
    for (i, node) in nodes.iter().enumerate() {
        let offset = u32::try_from(i).map_err(|_| bad())? + 2;
        let address = Ipv4Addr::from(base + offset);
        let pod_cidr = node
            .pod_cidr
            .clone()
            .ok_or_else(|| PlanError::PodCidr(node.name.clone()))?;
        let netns = format!("tandem-{}", node.name);
        if netns.len() > 200 || node.name.contains('/') {
            return Err(PlanError::Name(node.name.clone()));
        }
        let state_dir = s.data_dir.join("hosts").join(&node.name);
        let cri = node.os == NodeOs::Linux && cri_left > 0;
        if cri {
            cri_left -= 1;
        }
        let mut args: Vec<String> = vec![
            "--hostname-override".into(),
            node.name.clone(),
            "--node-ip".into(),
            address.to_string(),
            "--state-dir".into(),
            state_dir.display().to_string(),
            "--pod-cidr".into(),
            pod_cidr,
            "--cluster-cidr".into(),
            s.cluster_cidr.to_string(),
            "--service-cidr".into(),
            s.service_cidr.to_string(),
            "--cluster-domain".into(),
            s.cluster_domain.to_string(),
            "--pod-network-backend".into(),
            s.backend.to_string(),
        ];
        match (node.os, node.windows_build) {
            (NodeOs::Windows, Some(v)) => {
                args.extend(["--os".into(), "windows".into()]);
                args.extend(["--windows-build".into(), v.build.to_string()]);
            }
            (NodeOs::Windows, None) => args.extend(["--os".into(), "windows".into()]),
            (NodeOs::Linux, _) => {}
        }
        if !node.labels.is_empty() {
            let labels: Vec<String> = node
                .labels
                .iter()
                .filter(|(k, _)| {
                    !k.starts_with("kubernetes.io/") && !k.starts_with("node.kubernetes.io/")
                })
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !labels.is_empty() {
                args.extend(["--node-labels".into(), labels.join(",")]);
            }
        }
        if !node.taints.is_empty() {
            let taints: Vec<String> = node
                .taints
                .iter()
                .map(|t| match &t.value {
                    Some(v) => format!("{}={v}:{}", t.key, t.effect),
                    None => format!("{}:{}", t.key, t.effect),
                })
                .collect();
            args.extend(["--register-with-taints".into(), taints.join(",")]);
        }
        if cri {
            args.extend([
                "--container-runtime".into(),
                "cri".into(),
                "--images-dir".into(),
                s.images_dir.display().to_string(),
                // The host's resolv.conf names resolvers this namespace cannot reach.
                "--dns-upstream".into(),
                "none".into(),
                "--ingress=false".into(),
                "--data-plane-kubeconfigs".into(),
                state_dir.join("identities").display().to_string(),
            ]);
        }
        hosts.push(HostPlan {
            host_if: format!("tdmh{}", short_hash(&[&underlay.bridge, &node.name])),
            node: node.name.clone(),
            netns,
            address,
            prefix,
            state_dir,
            agent_args: args,
            cri,
        });
    }
    Ok((underlay, hosts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<NodeConfig> {
        let mut out = vec![
            NodeConfig::linux("l1"),
            NodeConfig::linux("l2"),
            NodeConfig::windows("w1", tandem_agent::windows::SERVER_2022),
        ];
        for (i, n) in out.iter_mut().enumerate() {
            n.pod_cidr = Some(format!("10.244.{i}.0/24"));
        }
        out
    }

    fn settings(underlay: &str) -> PlanSettings<'_> {
        PlanSettings {
            data_dir: Path::new("/tmp/d"),
            underlay,
            cluster_cidr: "10.244.0.0/16",
            service_cidr: "10.96.0.0/12",
            cluster_domain: "cluster.local",
            images_dir: Path::new("/tmp/images"),
            backend: "vxlan",
            cri_nodes: 2,
        }
    }

    #[test]
    fn each_node_gets_a_namespace_an_address_and_an_agent_joining_the_gateway() {
        let (u, hosts) =
            plan(&nodes(), &settings("172.30.250.0/24")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(u.gateway, Ipv4Addr::new(172, 30, 250, 1));
        assert!(u.bridge.starts_with("tdmu") && u.bridge.len() <= 15);
        let names: Vec<(&str, String, bool)> = hosts
            .iter()
            .map(|h| (h.netns.as_str(), h.address.to_string(), h.cri))
            .collect();
        assert_eq!(
            names,
            vec![
                ("tandem-l1", "172.30.250.2".to_string(), true),
                ("tandem-l2", "172.30.250.3".to_string(), true),
                ("tandem-w1", "172.30.250.4".to_string(), false),
            ]
        );
        for h in &hosts {
            assert!(h.host_if.len() <= 15);
            let joined = agent_command(&u, 6443, h).join(" ");
            assert!(
                joined.starts_with("agent --server https://172.30.250.1:6443 "),
                "{joined}"
            );
            assert!(
                joined.contains(&format!("--node-ip {}", h.address)),
                "{joined}"
            );
            assert!(joined.contains("--pod-network-backend vxlan"), "{joined}");
        }
        assert!(
            hosts[0]
                .agent_args
                .join(" ")
                .contains("--container-runtime cri")
        );
        let w = hosts[2].agent_args.join(" ");
        assert!(w.contains("--os windows --windows-build 10.0.20348"), "{w}");
        assert!(!w.contains("--container-runtime cri"));
        assert_ne!(hosts[0].host_if, hosts[1].host_if);
    }

    #[test]
    fn bad_underlays_are_refused() {
        for bad in [
            "",
            "172.30.250.0",
            "172.30.250.0/30",
            "x/24",
            "172.30.250.0/33",
            "172.30.250.0/4",
        ] {
            assert_eq!(
                plan(&nodes(), &settings(bad)),
                Err(PlanError::Underlay(bad.to_string())),
                "{bad}"
            );
        }
    }
}
