//! Node agent configuration: what the kubelet takes as flags (`--node-labels`,
//! `--register-with-taints`, `--kube-reserved`, `--system-reserved`, `--eviction-hard`,
//! `--windows-priorityclass`), the emulated node's capacity, and the `--nodes` spec of `tandem up`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use tandem_core::validation::quantity::Quantity;

use crate::windows::{self, WindowsVersion};

/// The operating system a node runs (`kubernetes.io/os`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeOs {
    Linux,
    Windows,
}

impl NodeOs {
    /// The value of the `kubernetes.io/os` label and of `spec.os.name`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeOs::Linux => "linux",
            NodeOs::Windows => "windows",
        }
    }
}

/// Which runtime backend runs the node's pods. Only `Emulated` exists today; a `Cri` variant
/// (containerd over CRI v1) arrives with the CRI issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RuntimeKind {
    /// No processes: the data-driven lifecycle model of [`crate::runtime::emulated`].
    #[default]
    Emulated,
}

/// An amount of each node resource the agent accounts for. CPU in millicores, the rest in
/// bytes, `pods` as a count. Negative values never leave [`allocatable`](Resources::saturating_sub):
/// upstream floors allocatable at zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
}

impl Resources {
    /// Subtracts `other`, flooring every resource at zero.
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: (self.cpu_millis - other.cpu_millis).max(0),
            memory: (self.memory - other.memory).max(0),
            ephemeral_storage: (self.ephemeral_storage - other.ephemeral_storage).max(0),
            pods: (self.pods - other.pods).max(0),
        }
    }

    /// Component-wise sum.
    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory: self.memory.saturating_add(other.memory),
            ephemeral_storage: self
                .ephemeral_storage
                .saturating_add(other.ephemeral_storage),
            pods: self.pods.saturating_add(other.pods),
        }
    }

    /// Parses a kubelet reservation flag value: `cpu=100m,memory=500Mi,ephemeral-storage=1Gi`.
    /// `pid=` is accepted and ignored (the agent does not account PIDs).
    pub fn parse_reservation(s: &str) -> Result<Resources, ConfigError> {
        let mut r = Resources::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                ConfigError::Invalid(format!("reservation {part:?} is not name=quantity"))
            })?;
            let q = parse_quantity(v)?;
            match k.trim() {
                "cpu" => r.cpu_millis = milli(q),
                "memory" => r.memory = whole(q),
                "ephemeral-storage" => r.ephemeral_storage = whole(q),
                "pid" => {}
                other => {
                    return Err(ConfigError::Invalid(format!(
                        "unsupported reserved resource {other:?}"
                    )));
                }
            }
        }
        Ok(r)
    }
}

fn parse_quantity(v: &str) -> Result<Quantity, ConfigError> {
    Quantity::parse(v.trim()).ok_or_else(|| ConfigError::Invalid(format!("invalid quantity {v:?}")))
}

/// A quantity in milli-units, rounded up as upstream's `MilliValue`.
pub(crate) fn milli(q: Quantity) -> i64 {
    let n = q.nanos();
    let m = n / 1_000_000 + i128::from(n % 1_000_000 > 0);
    i64::try_from(m).unwrap_or(i64::MAX)
}

/// A quantity in whole units, rounded up as upstream's `Value`.
pub(crate) fn whole(q: Quantity) -> i64 {
    let n = q.nanos();
    let m = n / 1_000_000_000 + i128::from(n % 1_000_000_000 > 0);
    i64::try_from(m).unwrap_or(i64::MAX)
}

/// A hard eviction threshold (`--eviction-hard`): the signal and the amount kept free.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictionThreshold {
    /// `memory.available`, `nodefs.available`, `imagefs.available`, `nodefs.inodesFree`, `pid.available`.
    pub signal: String,
    pub value: ThresholdValue,
}

/// A threshold is either an absolute quantity or a percentage of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdValue {
    Bytes(i64),
    Percent(f64),
}

impl ThresholdValue {
    fn of(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Bytes(b) => b,
            ThresholdValue::Percent(p) => ((capacity as f64) * p / 100.0).ceil() as i64,
        }
    }
}

/// Parses `memory.available<500Mi,nodefs.available<10%`.
pub fn parse_eviction_hard(s: &str) -> Result<Vec<EvictionThreshold>, ConfigError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (signal, value) = part.split_once('<').ok_or_else(|| {
            ConfigError::Invalid(format!("eviction threshold {part:?} is not signal<value"))
        })?;
        let value = value.trim();
        let value = if let Some(p) = value.strip_suffix('%') {
            let p: f64 = p
                .parse()
                .map_err(|_| ConfigError::Invalid(format!("invalid percentage {value:?}")))?;
            if !(0.0..=100.0).contains(&p) {
                return Err(ConfigError::Invalid(format!(
                    "percentage {value:?} is out of range"
                )));
            }
            ThresholdValue::Percent(p)
        } else {
            ThresholdValue::Bytes(whole(parse_quantity(value)?))
        };
        out.push(EvictionThreshold {
            signal: signal.trim().to_string(),
            value,
        });
    }
    Ok(out)
}

/// The kubelet's hard eviction defaults for each OS. Windows: `memory.available<500Mi`,
/// `nodefs.available<10%` (the Windows kubelet's defaults); Linux: upstream's
/// `memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%`.
pub fn default_eviction_hard(os: NodeOs) -> Vec<EvictionThreshold> {
    let spec = match os {
        NodeOs::Windows => "memory.available<500Mi,nodefs.available<10%",
        NodeOs::Linux => {
            "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%"
        }
    };
    parse_eviction_hard(spec).unwrap_or_default()
}

/// The six values `--windows-priorityclass` accepts (Windows process priority classes).
pub const WINDOWS_PRIORITY_CLASSES: [&str; 6] = [
    "IDLE_PRIORITY_CLASS",
    "BELOW_NORMAL_PRIORITY_CLASS",
    "NORMAL_PRIORITY_CLASS",
    "ABOVE_NORMAL_PRIORITY_CLASS",
    "HIGH_PRIORITY_CLASS",
    "REALTIME_PRIORITY_CLASS",
];

/// Validates a `--windows-priorityclass` value: exactly one of [`WINDOWS_PRIORITY_CLASSES`].
pub fn validate_windows_priority_class(value: &str) -> Result<(), ConfigError> {
    if WINDOWS_PRIORITY_CLASSES.contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "--windows-priorityclass {value:?} is not one of {}",
            WINDOWS_PRIORITY_CLASSES.join(", ")
        )))
    }
}

/// The CA certificates a kube client configuration trusts for the API server, as PEM: the
/// `certificate-authority(-data)` of a kubeconfig, or the service account's `ca.crt` in a pod.
/// In a tandem cluster that CA also signs the API server's client certificate, so this is what
/// [`NodeConfig::cluster_ca_pem`] is normally set to. `None` when the configuration names no CA
/// (or its file cannot be read).
pub fn cluster_ca_pem(config: &kube::Config) -> Option<String> {
    if let Some(ders) = config.root_cert.as_ref().filter(|d| !d.is_empty()) {
        return Some(ders.iter().map(|der| certificate_pem(der)).collect());
    }
    let path = config.root_cert_file.as_ref()?;
    std::fs::read_to_string(path).ok()
}

/// One DER certificate as a PEM block (base64 in lines of 64, RFC 7468).
fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// Heartbeat timing. Upstream defaults: Lease renewed every 10 s with a 40 s duration; node
/// status computed every 10 s (`nodeStatusUpdateFrequency`) and posted when it changed or
/// every 5 minutes (`nodeStatusReportFrequency`).
#[derive(Clone, Debug)]
pub struct Timing {
    pub lease_renew_interval: Duration,
    pub lease_duration_seconds: i32,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    /// How long the agent waits before retrying a failed API call.
    pub retry_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            retry_interval: Duration::from_secs(1),
        }
    }
}

/// A taint as `--register-with-taints` takes it: `key=value:Effect` or `key:Effect`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintSpec {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// Parses `os=windows:NoSchedule,dedicated:NoExecute`.
pub fn parse_taints(s: &str) -> Result<Vec<TaintSpec>, ConfigError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (kv, effect) = part
            .rsplit_once(':')
            .ok_or_else(|| ConfigError::Invalid(format!("taint {part:?} has no effect")))?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(ConfigError::Invalid(format!(
                "taint {part:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute"
            )));
        }
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (kv, None),
        };
        if key.is_empty() {
            return Err(ConfigError::Invalid(format!(
                "taint {part:?} has an empty key"
            )));
        }
        out.push(TaintSpec {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
        });
    }
    Ok(out)
}

/// Parses `--node-labels`: `a=b,c=d`.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| ConfigError::Invalid(format!("label {part:?} is not key=value")))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// Everything one node agent needs. Build one with [`NodeConfig::linux`] or
/// [`NodeConfig::windows`] and adjust fields; [`NodeConfig::validate`] checks it (and `run`
/// calls it).
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The Node's name, also its `kubernetes.io/hostname` label and Lease holder.
    pub name: String,
    pub os: NodeOs,
    /// The Windows build (`10.0.17763.5820`); required for Windows nodes, ignored for Linux.
    pub windows_build: Option<WindowsVersion>,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// `--node-labels`, applied over the well-known labels the agent sets.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<TaintSpec>,
    /// Node capacity (the emulated machine's size).
    pub capacity: Resources,
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    /// `--eviction-hard`.
    pub eviction_hard: Vec<EvictionThreshold>,
    /// Pod CIDR; when `None` the agent reads `spec.podCIDR` from its Node.
    pub pod_cidr: Option<String>,
    /// The node's InternalIP address.
    pub internal_ip: IpAddr,
    /// `--windows-priorityclass` (Windows only); one of [`WINDOWS_PRIORITY_CLASSES`].
    pub windows_priorityclass: Option<String>,
    pub runtime: RuntimeKind,
    /// Emulated image pull bandwidth in bytes per second.
    pub image_bandwidth: u64,
    /// Images present on the node at start (besides the pause image), e.g. for benchmarks.
    pub preloaded_images: Vec<String>,
    /// Where the emulated runtime keeps its state (`emulated-runtime.json`) so an agent restart
    /// re-adopts running pods. `None`: state lives in memory only.
    pub state_dir: Option<PathBuf>,
    /// Optional stage file (YAML or JSON) with default emulated behaviour per image or label.
    pub stage_file: Option<PathBuf>,
    pub timing: Timing,
    /// Port of the streaming server (logs, exec, attach, port-forward) on `internal_ip`; `Some(0)`
    /// picks a free port, `None` runs none (benchmarks). The port in use is reported as the
    /// Node's `daemonEndpoints.kubeletEndpoint`.
    pub streaming_port: Option<u16>,
    /// The port reported in `daemonEndpoints.kubeletEndpoint` (set from the bound server).
    pub kubelet_port: u16,
    /// The cluster CA, PEM (the kubelet's `--client-ca-file`): the streaming server accepts only
    /// client certificates it signed, and of those only the API server's (see
    /// [`crate::server`]). Usually the CA of the agent's own kubeconfig ([`cluster_ca_pem`]).
    /// `None`: the streaming server is not started (a line is logged) even with a
    /// `streaming_port`, as it never serves unauthenticated.
    pub cluster_ca_pem: Option<String>,
    /// `--cluster-dns`: the nameservers of `ClusterFirst` pods. Empty (the default) when the
    /// cluster runs no DNS service; such pods then get the node's resolv.conf, as `Default`
    /// ones do, and a `MissingClusterDNS` warning (see [`crate::dns_config`]).
    pub cluster_dns: Vec<IpAddr>,
    /// `--cluster-domain`: the domain of the search paths of `ClusterFirst` pods
    /// (`<namespace>.svc.<domain>`, `svc.<domain>`, `<domain>`); default `cluster.local`.
    pub cluster_domain: String,
    /// The pod network of an emulated node (see [`crate::podnet`]): its pods get reachable
    /// addresses and stand-ins. `None`: emulated pods have addresses nothing answers.
    pub pod_network: Option<std::sync::Arc<crate::podnet::EmulatedNetwork>>,
    /// How many image pulls a `cri` node runs at once: 1 is the kubelet's default
    /// `--serialize-image-pulls=true`.
    pub parallel_image_pulls: usize,
    /// Registry mirrors, TLS and credentials of a `cri` node (`--registry-config`).
    pub registries: crate::registries::RegistriesConfig,
    /// Image garbage collection thresholds of a `cri` node (`--image-gc-high-threshold`,
    /// `--image-gc-low-threshold`).
    pub image_gc: crate::runtime::cri::image_gc::GcPolicy,
    /// How often a `cri` node's image garbage collector runs (the kubelet's 5 minutes).
    pub image_gc_period: std::time::Duration,
}

/// Default emulated capacity: 4 CPUs, 16 GiB memory, 100 GiB disk, 110 pods (upstream maxPods).
pub const DEFAULT_CAPACITY: Resources = Resources {
    cpu_millis: 4000,
    memory: 16 * 1024 * 1024 * 1024,
    ephemeral_storage: 100 * 1024 * 1024 * 1024,
    pods: 110,
};

impl NodeConfig {
    /// A Linux amd64 node with default capacity and upstream eviction defaults.
    pub fn linux(name: &str) -> NodeConfig {
        NodeConfig {
            name: name.to_string(),
            os: NodeOs::Linux,
            windows_build: None,
            arch: "amd64".into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            capacity: DEFAULT_CAPACITY,
            kube_reserved: Resources::default(),
            system_reserved: Resources::default(),
            eviction_hard: default_eviction_hard(NodeOs::Linux),
            pod_cidr: None,
            internal_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            windows_priorityclass: None,
            runtime: RuntimeKind::Emulated,
            image_bandwidth: 100 * 1024 * 1024,
            preloaded_images: Vec::new(),
            state_dir: None,
            stage_file: None,
            timing: Timing::default(),
            streaming_port: Some(0),
            kubelet_port: 10250,
            cluster_ca_pem: None,
            cluster_dns: Vec::new(),
            cluster_domain: crate::dns_config::DEFAULT_CLUSTER_DOMAIN.to_string(),
            pod_network: None,
            parallel_image_pulls: 1,
            registries: crate::registries::RegistriesConfig::default(),
            image_gc: crate::runtime::cri::image_gc::GcPolicy::default(),
            image_gc_period: std::time::Duration::from_secs(300),
        }
    }

    /// A Windows amd64 node of `build`, with the Windows eviction defaults and 2 GiB of
    /// system-reserved memory (the reference guide's good practice for Windows nodes).
    pub fn windows(name: &str, build: WindowsVersion) -> NodeConfig {
        NodeConfig {
            os: NodeOs::Windows,
            windows_build: Some(build),
            eviction_hard: default_eviction_hard(NodeOs::Windows),
            system_reserved: Resources {
                memory: 2 * 1024 * 1024 * 1024,
                ..Resources::default()
            },
            ..NodeConfig::linux(name)
        }
    }

    /// Checks the combination of fields, as the kubelet's flag validation would.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::Invalid("node name is empty".into()));
        }
        if self.os == NodeOs::Windows && self.windows_build.is_none() {
            return Err(ConfigError::Invalid(format!(
                "Windows node {} needs a windows build",
                self.name
            )));
        }
        if let Some(pc) = &self.windows_priorityclass {
            if self.os != NodeOs::Windows {
                return Err(ConfigError::Invalid(
                    "--windows-priorityclass is only valid on Windows nodes".into(),
                ));
            }
            validate_windows_priority_class(pc)?;
        }
        if let Some(cidr) = &self.pod_cidr {
            crate::ipam::PodCidr::parse(cidr)?;
        }
        if self.image_bandwidth == 0 {
            return Err(ConfigError::Invalid(
                "image bandwidth must be positive".into(),
            ));
        }
        Ok(())
    }

    /// Allocatable = capacity − kube-reserved − system-reserved − hard eviction thresholds,
    /// floored at zero (upstream `GetNodeAllocatableAbsolute` with `hardEvictionReservation`:
    /// `memory.available` reserves memory, `nodefs.available` reserves ephemeral storage).
    pub fn allocatable(&self) -> Resources {
        let mut eviction = Resources::default();
        for t in &self.eviction_hard {
            match t.signal.as_str() {
                "memory.available" => eviction.memory += t.value.of(self.capacity.memory),
                "nodefs.available" => {
                    eviction.ephemeral_storage += t.value.of(self.capacity.ephemeral_storage)
                }
                _ => {}
            }
        }
        self.capacity
            .saturating_sub(self.kube_reserved)
            .saturating_sub(self.system_reserved)
            .saturating_sub(eviction)
    }
}

/// Configuration errors; the message says which flag or value is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid node configuration: {0}")]
    Invalid(String),
}

/// Parses the `tandem up --nodes` spec: comma-separated `kind=count` with kinds `linux`,
/// `windows` (= Windows Server 2022), `windows-2019`, `windows-2022`, `windows-2025`,
/// optionally suffixed `:arm64` (`linux:arm64=2`). Names are `<kind>-<n>` counting from 1
/// (`linux-1`, `windows-2019-1`), and each node gets its own pod CIDR `10.244.<i>.0/24` and
/// InternalIP `127.0.<(10+i)/250>.<(10+i)%250+1>`: an address of its own on this host's loopback,
/// where its streaming server listens.
pub fn parse_nodes_spec(spec: &str) -> Result<Vec<NodeConfig>, ConfigError> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (kind, count) = part.split_once('=').ok_or_else(|| {
            ConfigError::Invalid(format!("--nodes entry {part:?} is not kind=count"))
        })?;
        let count: usize = count.trim().parse().map_err(|_| {
            ConfigError::Invalid(format!("--nodes entry {part:?}: count is not a number"))
        })?;
        let kind = kind.trim();
        let (kind, arch) = match kind.split_once(':') {
            Some((k, a)) if matches!(a, "amd64" | "arm64") => (k, a),
            Some(_) => {
                return Err(ConfigError::Invalid(format!(
                    "--nodes entry {part:?}: arch must be amd64 or arm64"
                )));
            }
            None => (kind, "amd64"),
        };
        let build = match kind {
            "linux" => None,
            "windows" | "windows-2022" => Some(windows::SERVER_2022),
            "windows-2019" => Some(windows::SERVER_2019),
            "windows-2025" => Some(windows::SERVER_2025),
            other => {
                return Err(ConfigError::Invalid(format!(
                    "--nodes kind {other:?} is not one of linux, windows, windows-2019, windows-2022, windows-2025"
                )));
            }
        };
        let prefix = if kind == "windows" {
            "windows-2022"
        } else {
            kind
        };
        for n in 1..=count {
            let name = format!("{prefix}-{n}");
            if out.iter().any(|c: &NodeConfig| c.name == name) {
                return Err(ConfigError::Invalid(format!(
                    "--nodes names node {name} twice"
                )));
            }
            let mut c = match build {
                None => NodeConfig::linux(&name),
                Some(b) => NodeConfig::windows(&name, b),
            };
            c.arch = arch.to_string();
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::Invalid("--nodes names no nodes".into()));
    }
    for (i, c) in out.iter_mut().enumerate() {
        c.pod_cidr = Some(format!("10.244.{}.0/24", i % 256));
        let host = 10 + i;
        c.internal_ip = IpAddr::V4(Ipv4Addr::new(
            127,
            0,
            (host / 250) as u8,
            (host % 250) as u8 + 1,
        ));
    }
    Ok(out)
}

/// DESIGN.md's default nodes: one Linux node, one Windows Server 2019 node (10.0.17763) and one
/// Windows Server 2022 node (10.0.20348), all emulated.
pub fn default_nodes() -> Vec<NodeConfig> {
    parse_nodes_spec("linux=1,windows-2019=1,windows-2022=1").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1024 * 1024 * 1024;
    const MI: i64 = 1024 * 1024;

    #[test]
    fn windows_allocatable_subtracts_reservations_and_default_eviction() {
        let mut c = NodeConfig::windows("w", windows::SERVER_2019);
        c.kube_reserved = Resources::parse_reservation("cpu=100m,memory=500Mi").expect("valid");
        let a = c.allocatable();
        assert_eq!(a.cpu_millis, 3900);
        // 16Gi − 500Mi kube − 2Gi system − 500Mi eviction
        assert_eq!(a.memory, 16 * GI - 500 * MI - 2 * GI - 500 * MI);
        // 100Gi − 10%
        assert_eq!(a.ephemeral_storage, 100 * GI - 10 * GI);
        assert_eq!(a.pods, 110);
    }

    #[test]
    fn linux_allocatable_uses_upstream_eviction_defaults() {
        let c = NodeConfig::linux("l");
        let a = c.allocatable();
        assert_eq!(a.memory, 16 * GI - 100 * MI);
        assert_eq!(a.cpu_millis, 4000);
    }

    #[test]
    fn the_cluster_ca_of_a_client_configuration_is_its_root_certificates_as_pem() {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;

        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().expect("url"));
        assert_eq!(cluster_ca_pem(&config), None);
        // Any DER will do: the PEM armour is what is checked. 200 bytes span several lines.
        let ders = vec![vec![0x30; 200], vec![1, 2, 3]];
        config.root_cert = Some(ders.clone());
        let pem = cluster_ca_pem(&config).expect("PEM");
        assert!(pem.lines().all(|l| l.len() <= 64), "{pem}");
        let back: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.expect("PEM block").to_vec())
            .collect();
        assert_eq!(back, ders);
    }

    #[test]
    fn allocatable_is_floored_at_zero() {
        let mut c = NodeConfig::linux("l");
        c.capacity = Resources {
            cpu_millis: 500,
            memory: GI,
            ephemeral_storage: GI,
            pods: 10,
        };
        c.system_reserved = Resources::parse_reservation("cpu=1,memory=2Gi").expect("valid");
        let a = c.allocatable();
        assert_eq!((a.cpu_millis, a.memory), (0, 0));
        assert_eq!(a.pods, 10);
    }

    #[test]
    fn reservation_and_eviction_parsing_reject_garbage() {
        assert!(Resources::parse_reservation("cpu").is_err());
        assert!(Resources::parse_reservation("gpu=1").is_err());
        assert!(Resources::parse_reservation("memory=lots").is_err());
        assert!(parse_eviction_hard("memory.available=1Gi").is_err());
        assert!(parse_eviction_hard("nodefs.available<150%").is_err());
        let t = parse_eviction_hard("memory.available<1Gi, nodefs.available<5%").expect("valid");
        assert_eq!(t[0].value, ThresholdValue::Bytes(GI));
        assert_eq!(t[1].value, ThresholdValue::Percent(5.0));
    }

    #[test]
    fn windows_priority_class_accepts_exactly_the_six_names() {
        for n in WINDOWS_PRIORITY_CLASSES {
            assert!(validate_windows_priority_class(n).is_ok(), "{n}");
        }
        for bad in [
            "",
            "normal_priority_class",
            "NORMAL",
            "REALTIME",
            "ABOVE_NORMAL_PRIORITY_CLASS ",
        ] {
            assert!(validate_windows_priority_class(bad).is_err(), "{bad:?}");
        }
        let mut w = NodeConfig::windows("w", windows::SERVER_2022);
        w.windows_priorityclass = Some("ABOVE_NORMAL_PRIORITY_CLASS".into());
        assert!(w.validate().is_ok());
        w.windows_priorityclass = Some("TURBO".into());
        assert!(w.validate().is_err());
        let mut l = NodeConfig::linux("l");
        l.windows_priorityclass = Some("NORMAL_PRIORITY_CLASS".into());
        assert!(
            l.validate().is_err(),
            "linux nodes have no windows priority class"
        );
    }

    #[test]
    fn nodes_spec_names_builds_and_addresses() {
        let nodes = parse_nodes_spec("linux=3,windows-2019=2,windows-2022=4").expect("valid");
        assert_eq!(nodes.len(), 9);
        let names: Vec<_> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            &names[..4],
            ["linux-1", "linux-2", "linux-3", "windows-2019-1"]
        );
        assert_eq!(names[8], "windows-2022-4");
        assert_eq!(nodes[3].windows_build, Some(windows::SERVER_2019));
        assert_eq!(nodes[5].windows_build, Some(windows::SERVER_2022));
        assert_eq!(nodes[0].os, NodeOs::Linux);
        let cidrs: std::collections::HashSet<_> =
            nodes.iter().filter_map(|n| n.pod_cidr.clone()).collect();
        assert_eq!(cidrs.len(), 9, "every node gets its own pod CIDR");
        let ips: std::collections::HashSet<_> = nodes.iter().map(|n| n.internal_ip).collect();
        assert_eq!(ips.len(), 9);
        assert!(nodes.iter().all(|n| n.validate().is_ok()));
    }

    #[test]
    fn nodes_spec_rejects_unknown_kinds_and_bad_counts() {
        for bad in [
            "",
            "macos=1",
            "linux",
            "linux=x",
            "windows-2016=1",
            "linux:sparc=1",
            "linux=0",
        ] {
            assert!(parse_nodes_spec(bad).is_err(), "{bad:?}");
        }
        let arm = parse_nodes_spec("linux:arm64=1,windows=1").expect("valid");
        assert_eq!(arm[0].arch, "arm64");
        assert_eq!(arm[1].name, "windows-2022-1");
    }

    #[test]
    fn default_nodes_are_linux_2019_and_2022() {
        let d = default_nodes();
        let kinds: Vec<_> = d
            .iter()
            .map(|n| (n.os, n.windows_build.map(|v| v.build.build)))
            .collect();
        assert_eq!(
            kinds,
            [
                (NodeOs::Linux, None),
                (NodeOs::Windows, Some(17763)),
                (NodeOs::Windows, Some(20348))
            ]
        );
    }

    #[test]
    fn taints_and_labels_parse_like_kubelet_flags() {
        let t = parse_taints("os=windows:NoSchedule,dedicated:NoExecute").expect("valid");
        assert_eq!(
            t[0],
            TaintSpec {
                key: "os".into(),
                value: Some("windows".into()),
                effect: "NoSchedule".into()
            }
        );
        assert_eq!(t[1].value, None);
        assert!(parse_taints("os=windows").is_err());
        assert!(parse_taints("os=windows:Sometimes").is_err());
        let l = parse_labels("pool=blue, tier=web").expect("valid");
        assert_eq!(l.get("tier").map(String::as_str), Some("web"));
        assert!(parse_labels("novalue").is_err());
    }
}
