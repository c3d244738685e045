//! The Node object the agent registers and keeps up to date, built as the kubelet's
//! `nodestatus` setters build it (`NodeAddress`, `MachineInfo`, `VersionInfo`, `Images`,
//! `ReadyCondition`, `MemoryPressureCondition`, `DiskPressureCondition`, `PIDPressureCondition`).
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::clock;
use crate::config::{NodeConfig, NodeOs, Resources};
use crate::runtime::ImageInfo;

/// The kubelet version tandem's agent reports (the Kubernetes API level it implements).
pub const KUBELET_VERSION: &str = "v1.33.0";

/// Well-known labels: hostname, os, arch (and their beta twins), and for Windows the
/// `node.kubernetes.io/windows-build` label (`major.minor.build`), then `--node-labels`.
pub fn node_labels(config: &NodeConfig) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("kubernetes.io/hostname".to_string(), config.name.clone());
    l.insert(
        "kubernetes.io/os".to_string(),
        config.os.as_str().to_string(),
    );
    l.insert("kubernetes.io/arch".to_string(), config.arch.clone());
    l.insert(
        "beta.kubernetes.io/os".to_string(),
        config.os.as_str().to_string(),
    );
    l.insert("beta.kubernetes.io/arch".to_string(), config.arch.clone());
    if let (NodeOs::Windows, Some(b)) = (config.os, config.windows_build) {
        l.insert(
            "node.kubernetes.io/windows-build".to_string(),
            b.build.to_string(),
        );
    }
    l.extend(config.labels.clone());
    l
}

fn stable_hex(seed: &str, salt: &str) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut out = String::new();
    for i in 0u8..2 {
        let mut h = DefaultHasher::new();
        (seed, salt, i).hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// `status.nodeInfo`: osImage and kernelVersion per OS, the runtime's version string
/// (`emulated://tandem-…` for emulated nodes), kubeletVersion [`KUBELET_VERSION`].
pub fn node_info(config: &NodeConfig, runtime_version: &str) -> NodeSystemInfo {
    let (os_image, kernel) = match (config.os, config.windows_build) {
        (NodeOs::Windows, Some(v)) => (crate::windows::os_image(v.build), v.to_string()),
        (NodeOs::Windows, None) => ("Windows Server Datacenter".to_string(), "10.0".to_string()),
        (NodeOs::Linux, _) if !runtime_version.starts_with("emulated://") => {
            host_linux_info().unwrap_or_else(|| ("Linux".to_string(), "unknown".to_string()))
        }
        (NodeOs::Linux, _) => (
            "Linux (tandem emulated node)".to_string(),
            "6.1.0-tandem-emulated".to_string(),
        ),
    };
    let id = stable_hex(&config.name, "machine");
    NodeSystemInfo {
        architecture: config.arch.clone(),
        boot_id: stable_hex(&config.name, "boot"),
        container_runtime_version: runtime_version.to_string(),
        kernel_version: kernel,
        kube_proxy_version: String::new(),
        kubelet_version: KUBELET_VERSION.to_string(),
        machine_id: id.clone(),
        operating_system: config.os.as_str().to_string(),
        os_image,
        system_uuid: format!(
            "{}-{}-{}-{}-{}",
            &id[0..8],
            &id[8..12],
            &id[12..16],
            &id[16..20],
            &id[20..32]
        ),
        swap: None,
    }
}

/// This machine's OS image (`PRETTY_NAME` of `/etc/os-release`) and kernel release, as the
/// kubelet reports them, for a Linux node that runs real containers here.
fn host_linux_info() -> Option<(String, String)> {
    let release = std::fs::read_to_string("/etc/os-release").ok()?;
    let image = release.lines().find_map(|l| {
        let value = l.strip_prefix("PRETTY_NAME=")?;
        Some(value.trim().trim_matches('"').to_string())
    })?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some((image, kernel.trim().to_string()))
}

/// Formats resources as the kubelet does: cpu in cores or millicores, bytes in `Ki` when exact.
pub fn resource_list(r: Resources) -> BTreeMap<String, Quantity> {
    let cpu = if r.cpu_millis % 1000 == 0 {
        format!("{}", r.cpu_millis / 1000)
    } else {
        format!("{}m", r.cpu_millis)
    };
    let bytes = |b: i64| {
        if b % 1024 == 0 {
            format!("{}Ki", b / 1024)
        } else {
            b.to_string()
        }
    };
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu)),
        ("memory".to_string(), Quantity(bytes(r.memory))),
        (
            "ephemeral-storage".to_string(),
            Quantity(bytes(r.ephemeral_storage)),
        ),
        ("pods".to_string(), Quantity(r.pods.to_string())),
    ])
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: SystemTime,
    previous: &[NodeCondition],
) -> NodeCondition {
    let transition = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| clock::time(now));
    NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(clock::time(now)),
        last_transition_time: Some(transition),
    }
}

/// The conditions a healthy node reports, in the kubelet's order. Windows nodes report no
/// PIDPressure (the Windows kubelet does not implement it).
pub fn conditions(os: NodeOs, now: SystemTime, previous: &[NodeCondition]) -> Vec<NodeCondition> {
    let mut out = vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            now,
            previous,
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            now,
            previous,
        ),
    ];
    if os == NodeOs::Linux {
        out.push(condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            now,
            previous,
        ));
    }
    out.push(condition(
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
        now,
        previous,
    ));
    out
}

/// `status.images`: name and digest reference, largest first (as the kubelet sorts them).
pub fn images(list: &[ImageInfo]) -> Vec<ContainerImage> {
    let mut v: Vec<&ImageInfo> = list.iter().collect();
    v.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.name.cmp(&b.name)));
    v.into_iter()
        .map(|i| ContainerImage {
            names: Some(i.status_names()),
            size_bytes: Some(i.size_bytes),
        })
        .collect()
}

/// The node status the agent posts.
pub fn status(
    config: &NodeConfig,
    runtime_version: &str,
    imgs: &[ImageInfo],
    now: SystemTime,
    previous: &[NodeCondition],
) -> NodeStatus {
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: config.internal_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: config.name.clone(),
            },
        ]),
        allocatable: Some(resource_list(config.allocatable())),
        capacity: Some(resource_list(config.capacity)),
        conditions: Some(conditions(config.os, now, previous)),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(config.kubelet_port),
            }),
        }),
        images: Some(images(imgs)),
        node_info: Some(node_info(config, runtime_version)),
        ..NodeStatus::default()
    }
}

/// The annotations the agent sets on its Node: the kubelet's TTL one and, for an emulated node
/// whose pods are on the network, [`tandem_core::POD_NETWORK_ANNOTATION`] (the service proxy
/// then sends them traffic).
pub fn node_annotations(config: &NodeConfig) -> BTreeMap<String, String> {
    let mut a = BTreeMap::from([("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string())]);
    if let Some(net) = &config.pod_network {
        a.insert(
            tandem_core::POD_NETWORK_ANNOTATION.to_string(),
            format!("emulated on bridge {}", net.bridge()),
        );
    }
    a
}

/// The Node to create at registration: labels, taints, pod CIDR, and status.
pub fn node(
    config: &NodeConfig,
    runtime_version: &str,
    imgs: &[ImageInfo],
    now: SystemTime,
) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(config.name.clone());
    n.metadata.labels = Some(node_labels(config));
    n.metadata.annotations = Some(node_annotations(config));
    n.spec = Some(NodeSpec {
        pod_cidr: config.pod_cidr.clone(),
        pod_cidrs: config.pod_cidr.clone().map(|c| vec![c]),
        taints: (!config.taints.is_empty()).then(|| {
            config
                .taints
                .iter()
                .map(|t| Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    time_added: None,
                })
                .collect()
        }),
        ..NodeSpec::default()
    });
    n.status = Some(status(config, runtime_version, imgs, now, &[]));
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_taints;
    use crate::windows;

    #[test]
    fn windows_2019_labels_and_node_info() {
        let mut c = NodeConfig::windows("win-1", windows::SERVER_2019);
        c.labels.insert("pool".into(), "iis".into());
        let l = node_labels(&c);
        assert_eq!(l["kubernetes.io/os"], "windows");
        assert_eq!(l["kubernetes.io/arch"], "amd64");
        assert_eq!(l["kubernetes.io/hostname"], "win-1");
        assert_eq!(l["node.kubernetes.io/windows-build"], "10.0.17763");
        assert_eq!(l["pool"], "iis");
        let info = node_info(&c, "emulated://tandem-0.1.0");
        assert_eq!(info.os_image, "Windows Server 2019 Datacenter");
        assert_eq!(info.kernel_version, "10.0.17763.5820");
        assert_eq!(info.operating_system, "windows");
        assert_eq!(info.kubelet_version, "v1.33.0");
        assert_eq!(info.container_runtime_version, "emulated://tandem-0.1.0");
    }

    #[test]
    fn windows_2022_and_linux_labels_and_node_info() {
        let w = NodeConfig::windows("w", windows::SERVER_2022);
        assert_eq!(
            node_labels(&w)["node.kubernetes.io/windows-build"],
            "10.0.20348"
        );
        assert_eq!(
            node_info(&w, "x").os_image,
            "Windows Server 2022 Datacenter"
        );
        let l = NodeConfig::linux("l");
        let labels = node_labels(&l);
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert!(!labels.contains_key("node.kubernetes.io/windows-build"));
        assert_eq!(node_info(&l, "x").operating_system, "linux");
    }

    #[test]
    fn a_linux_node_on_real_containers_reports_this_host_and_an_emulated_one_says_so() {
        let l = NodeConfig::linux("l");
        let real = node_info(&l, "containerd://1.6.20");
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        assert_eq!(real.kernel_version, kernel.trim());
        assert!(!real.os_image.contains("emulated"), "{}", real.os_image);
        let emulated = node_info(&l, "emulated://tandem-0.1.0");
        assert!(
            emulated.os_image.contains("emulated"),
            "{}",
            emulated.os_image
        );
        assert!(emulated.kernel_version.contains("emulated"));
    }

    #[test]
    fn windows_reports_no_pid_pressure_and_ready_is_last() {
        let now = SystemTime::now();
        let w: Vec<_> = conditions(NodeOs::Windows, now, &[])
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(w, ["MemoryPressure", "DiskPressure", "Ready"]);
        let l: Vec<_> = conditions(NodeOs::Linux, now, &[])
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(
            l,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
    }

    #[test]
    fn condition_transition_time_is_kept_while_status_holds() {
        let t0 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
        let t1 = t0 + std::time::Duration::from_secs(60);
        let first = conditions(NodeOs::Linux, t0, &[]);
        let second = conditions(NodeOs::Linux, t1, &first);
        assert_eq!(
            second[3].last_transition_time,
            first[3].last_transition_time
        );
        assert_ne!(second[3].last_heartbeat_time, first[3].last_heartbeat_time);
    }

    #[test]
    fn node_has_taints_allocatable_and_formatted_quantities() {
        let mut c = NodeConfig::windows("w", windows::SERVER_2022);
        c.taints = parse_taints("os=windows:NoSchedule").expect("valid");
        c.kube_reserved.cpu_millis = 500;
        let n = node(&c, "emulated://tandem-0.1.0", &[], SystemTime::now());
        let spec = n.spec.expect("spec");
        assert_eq!(spec.taints.expect("taints")[0].key, "os");
        let st = n.status.expect("status");
        let alloc = st.allocatable.expect("allocatable");
        assert_eq!(alloc["cpu"].0, "3500m");
        assert_eq!(st.capacity.expect("capacity")["memory"].0, "16777216Ki");
        // 16Gi − 2Gi system-reserved − 500Mi eviction
        assert_eq!(
            alloc["memory"].0,
            format!("{}Ki", (16 * 1024 - 2048 - 500) * 1024)
        );
        assert_eq!(
            st.daemon_endpoints
                .and_then(|d| d.kubelet_endpoint)
                .map(|e| e.port),
            Some(10250)
        );
    }
}
