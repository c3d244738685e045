//! [`CriRuntime`]: the agent's [`Runtime`] on a CRI v1 runtime (tandem's own containerd child).
//!
//! What the kubelet's `kuberuntime` manager does, narrowed to the pod workers' needs:
//! - pod sandboxes with the pod's namespaces, hostname, port mappings and a cgroup parent of their
//!   own (`<cgroup prefix>/pod<uid>`), their IP coming from the CNI bridge, and the resolv.conf
//!   their `dnsPolicy` asks for ([`crate::dns_config`]; the runtime never copies the node's);
//! - containers with the environment, command expansion and volume mounts the kubelet computes
//!   ([`crate::env`], [`crate::volumes`]), the kubelet-managed `/etc/hosts`, resource limits as
//!   cgroup settings, and logs at `<log dir>/<container>/<attempt>.log`;
//! - probes and lifecycle hooks run by the agent (HTTP and TCP from the host into the pod's
//!   network, exec through `ExecSync`), as the kubelet's prober does;
//! - a status cache refreshed every second by a relist of the runtime (the kubelet's PLEG), so
//!   the trait's synchronous queries never block on gRPC.
//!
//! Container ids are `containerd://<id>`, as `containerID` shows them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};

use super::client::{CriClient, CriError};
use super::proto;
use crate::clock::Clock;
use crate::config::Resources;
use crate::dns_config::{self, DnsWarning, NodeDns};
use crate::env::{self, EnvContext};
use crate::events::ApiReporter;
use crate::pod_worker::{EventType, Reporter};
use crate::runtime::prober;
use crate::runtime::{
    ContainerInfo, ContainerState, ContainerStats, Credential, HookKind, ImageInfo, NodeResources,
    NodeStats, ProbeKind, ProbeResult, PullOutcome, Runtime, RuntimeError, RuntimeStats,
    SandboxConfig, SandboxInfo, StreamRequest,
};
use crate::volumes::{self, PodVolumes};
use tandem_core::validation::quantity::Quantity;

/// The prefix of container ids in pod status.
pub const ID_PREFIX: &str = "containerd://";
/// The annotation that keeps a container's spec with the runtime, so probes and hooks still
/// work for containers re-adopted after an agent restart.
const SPEC_ANNOTATION: &str = "tandem.dev/container-spec";
/// The label every sandbox and container of this backend carries.
const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// How often the status cache is refreshed from the runtime (the kubelet's relist period).
const RELIST: Duration = Duration::from_secs(1);
/// How many RunPodSandbox durations [`CriRuntime::sandbox_create_durations`] keeps.
const SANDBOX_DURATIONS_KEPT: usize = 10_000;

/// What the backend needs to know about its node.
#[derive(Clone, Debug)]
pub struct CriConfig {
    pub node_name: String,
    pub node_ip: IpAddr,
    /// Limits of containers without their own, for `resourceFieldRef` (the node allocatable).
    pub allocatable: Resources,
    /// Per-pod directories (volumes, hosts file): `<pods_dir>/<uid>`.
    pub pods_dir: PathBuf,
    /// Sandbox log directories: `<logs_dir>/<namespace>_<name>_<uid>`.
    pub logs_dir: PathBuf,
    /// The cgroup parent of every pod (`/tandem-<hash>`), per instance.
    pub cgroup_parent: String,
    /// The kubelet's `--cluster-dns`: the nameservers of `ClusterFirst` pods. Empty when the
    /// cluster has no DNS service: such pods then get the node's resolv.conf and a
    /// `MissingClusterDNS` warning event.
    pub cluster_dns: Vec<IpAddr>,
    /// The kubelet's `--cluster-domain` ([`dns_config::DEFAULT_CLUSTER_DOMAIN`] by default).
    pub cluster_domain: String,
    /// The kubelet's `--resolv-conf`: the node's resolver configuration, the base of `Default`
    /// pods and the source of the node's search domains ([`dns_config::DEFAULT_RESOLV_CONF`] by
    /// default). Read at every sandbox, so changes reach new pods. An empty path is the kubelet's
    /// `--resolv-conf=""`: `Default` pods then get the loopback resolver.
    pub resolv_conf: PathBuf,
    /// How many image pulls may run at once: 1 is the kubelet's default
    /// `--serialize-image-pulls=true`; more is `--serialize-image-pulls=false` with
    /// `--max-parallel-image-pulls`.
    pub parallel_image_pulls: usize,
}

#[derive(Clone, Debug)]
struct CachedSandbox {
    info: SandboxInfo,
    attempt: u32,
}

#[derive(Clone, Debug)]
struct CachedContainer {
    info: ContainerInfo,
    /// The container spec, from memory or the spec annotation.
    spec: Option<Container>,
    log_path: PathBuf,
    /// The pod's UID and name, for hook and probe messages.
    pod_name: String,
}

#[derive(Default)]
struct State {
    sandboxes: HashMap<String, CachedSandbox>,
    containers: HashMap<String, CachedContainer>,
    images: Vec<ImageInfo>,
    volumes: HashMap<String, PodVolumes>,
    /// Per pod UID, the task that rewrites its projected ServiceAccount tokens before they
    /// expire (the kubelet's token manager refreshes at 80 % of a token's lifetime).
    token_refreshers: HashMap<String, tokio::task::JoinHandle<()>>,
    /// The next sandbox attempt per pod UID (a failed RunPodSandbox reserves its name).
    attempts: HashMap<String, u32>,
    /// Durations of the successful RunPodSandbox calls, oldest first, at most
    /// [`SANDBOX_DURATIONS_KEPT`].
    sandbox_create: VecDeque<Duration>,
}

/// The `cri` backend.
pub struct CriRuntime {
    client: CriClient,
    kube: kube::Client,
    config: CriConfig,
    /// Records the warnings met forming a pod's DNS settings, as the kubelet's recorder does.
    events: ApiReporter,
    version: String,
    state: Mutex<State>,
    /// Permits for concurrent image pulls ([`CriConfig::parallel_image_pulls`]).
    pulls: tokio::sync::Semaphore,
}

fn cri_err(e: CriError) -> RuntimeError {
    match e {
        e if e.is_not_found() => RuntimeError::NotFound(e.to_string()),
        e => RuntimeError::Refused {
            message: e.to_string(),
        },
    }
}

/// The runtime's own words for a failure (without grpc-go's `rpc error: …` framing).
fn desc(e: &CriError) -> String {
    match e {
        CriError::Status { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn raw_id(id: &str) -> &str {
    id.strip_prefix(ID_PREFIX).unwrap_or(id)
}

fn wall(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs()))
}

/// `busybox` → `docker.io/library/busybox:latest`, as containerd names images.
pub fn normalize_image(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or("");
    let has_domain =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_domain {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = full.rsplit('/').next().unwrap_or("");
    if digest.is_none() && !last.contains(':') {
        full.push_str(":latest");
    }
    match digest {
        Some(d) => format!("{full}@{d}"),
        None => full,
    }
}

fn image_info(img: &proto::Image) -> Vec<ImageInfo> {
    let size = i64::try_from(img.size).unwrap_or(i64::MAX);
    // An image pulled by digest only has no tag: it is known by its digest reference.
    let names = if img.repo_tags.is_empty() {
        &img.repo_digests
    } else {
        &img.repo_tags
    };
    names
        .iter()
        .map(|t| ImageInfo {
            name: t.clone(),
            id: img.id.clone(),
            size_bytes: size,
            repo_digests: img.repo_digests.clone(),
        })
        .collect()
}

impl CriRuntime {
    /// Connects the backend to a running CRI runtime, fills its caches and starts the relist
    /// loop (which ends when the runtime is dropped).
    pub async fn start(
        client: CriClient,
        kube: kube::Client,
        config: CriConfig,
    ) -> Result<Arc<CriRuntime>, RuntimeError> {
        let v = client.version().await.map_err(cri_err)?;
        let rt = Arc::new(CriRuntime {
            version: format!("{}://{}", v.runtime_name, v.runtime_version),
            client,
            events: ApiReporter::new(kube.clone(), &config.node_name, Clock::new()),
            kube,
            pulls: tokio::sync::Semaphore::new(config.parallel_image_pulls.max(1)),
            config,
            state: Mutex::new(State::default()),
        });
        rt.relist().await;
        rt.refresh_images().await;
        let weak = Arc::downgrade(&rt);
        tokio::spawn(relist_loop(weak));
        Ok(rt)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long each successful RunPodSandbox took (the gRPC call as this backend sees it,
    /// queueing in the runtime included), oldest first; the last 10,000 are kept. For
    /// `tandem bench startup`'s sandbox creation time.
    pub fn sandbox_create_durations(&self) -> Vec<Duration> {
        self.lock().sandbox_create.iter().copied().collect()
    }

    /// The images present and the image references of every container (running or exited),
    /// for the image garbage collector.
    pub fn image_use(&self) -> (Vec<ImageInfo>, Vec<String>) {
        let state = self.lock();
        let used = state
            .containers
            .values()
            .flat_map(|c| [c.info.image.clone(), c.info.image_id.clone()])
            .filter(|r| !r.is_empty())
            .flat_map(|r| [normalize_image(&r), r])
            .collect();
        (state.images.clone(), used)
    }

    /// Removes an image (name or ID) from the runtime.
    pub async fn remove_image(&self, image: &str) -> Result<(), RuntimeError> {
        self.client.remove_image(image).await.map_err(cri_err)
    }

    /// Reads the image list from the runtime again (after a pull or an import).
    pub async fn refresh_images(&self) {
        if let Ok(images) = self.client.list_images(None).await {
            let list = images.iter().flat_map(image_info).collect();
            self.lock().images = list;
        }
    }

    /// Brings the caches in line with the runtime: sandboxes and containers that appeared
    /// (after an agent restart), changed state or went away.
    async fn relist(&self) {
        // What the caches held when the listing began: an entry that a concurrent
        // RunPodSandbox or CreateContainer adds while the runtime is being listed is kept,
        // and one that a concurrent removal takes away stays away.
        let (sandboxes_before, containers_before) = {
            let state = self.lock();
            (
                state.sandboxes.keys().cloned().collect::<HashSet<_>>(),
                state.containers.keys().cloned().collect::<HashSet<_>>(),
            )
        };
        let Ok(sandboxes) = self.client.list_pod_sandbox(None).await else {
            return;
        };
        let mut fresh = HashMap::new();
        for sb in sandboxes {
            let ready = sb.state == proto::PodSandboxState::SandboxReady as i32;
            let known = self.lock().sandboxes.get(&sb.id).cloned();
            let entry = match known {
                Some(mut c) => {
                    c.info.ready = ready;
                    c
                }
                None => {
                    let Some(meta) = sb.metadata.clone() else {
                        continue;
                    };
                    let status = self.client.pod_sandbox_status(&sb.id).await.ok();
                    let ip = status
                        .as_ref()
                        .and_then(|s| s.network.as_ref())
                        .map(|n| n.ip.clone())
                        .filter(|ip| !ip.is_empty());
                    CachedSandbox {
                        info: SandboxInfo {
                            id: sb.id.clone(),
                            pod_uid: meta.uid.clone(),
                            namespace: meta.namespace.clone(),
                            name: meta.name.clone(),
                            ip: ip.or_else(|| Some(self.config.node_ip.to_string())),
                            ready,
                            created_at: wall(sb.created_at).unwrap_or(UNIX_EPOCH),
                        },
                        attempt: meta.attempt,
                    }
                }
            };
            fresh.insert(sb.id.clone(), entry);
        }
        let Ok(containers) = self.client.list_containers(None).await else {
            return;
        };
        let mut seen = HashMap::new();
        for c in containers {
            let id = format!("{ID_PREFIX}{}", c.id);
            let cached = self.lock().containers.get(&id).cloned();
            let unchanged = cached.as_ref().is_some_and(|k| {
                state_code(&k.info.state) == c.state
                    && c.state != proto::ContainerState::ContainerUnknown as i32
            });
            let entry = match (unchanged, cached) {
                // The listing's sandbox id is authoritative: an entry cached by
                // `refresh_container` after a concurrent relist had dropped it has none, and the
                // probes would go to the node's address instead of the pod's.
                (true, Some(mut k)) => {
                    k.info.sandbox_id.clone_from(&c.pod_sandbox_id);
                    k
                }
                (_, prior) => match self.client.container_status(&c.id).await {
                    Ok(st) => {
                        let mut entry = self.cached_from_status(&c.pod_sandbox_id, st);
                        if let Some(p) = prior {
                            entry.spec = entry.spec.or(p.spec);
                        }
                        entry
                    }
                    Err(_) => continue,
                },
            };
            seen.insert(id, entry);
        }
        let mut state = self.lock();
        let state = &mut *state;
        state.sandboxes = merge_relisted(&sandboxes_before, &mut state.sandboxes, fresh);
        state.containers = merge_relisted(&containers_before, &mut state.containers, seen);
    }

    fn cached_from_status(&self, sandbox_id: &str, st: proto::ContainerStatus) -> CachedContainer {
        let meta = st.metadata.clone().unwrap_or_default();
        let state = match proto::ContainerState::try_from(st.state) {
            Ok(proto::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(proto::ContainerState::ContainerRunning) => ContainerState::Running,
            _ => ContainerState::Exited {
                exit_code: st.exit_code,
                reason: if st.reason.is_empty() {
                    if st.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .to_string()
                } else {
                    st.reason.clone()
                },
                message: (!st.message.is_empty()).then(|| st.message.clone()),
            },
        };
        let spec: Option<Container> = st
            .annotations
            .get(SPEC_ANNOTATION)
            .and_then(|s| serde_json::from_str(s).ok());
        let image = spec
            .as_ref()
            .and_then(|s| s.image.clone())
            .or_else(|| st.image.as_ref().map(|i| i.image.clone()))
            .unwrap_or_default();
        let next_change = matches!(state, ContainerState::Running | ContainerState::Created)
            .then(|| tokio::time::Instant::now() + RELIST);
        CachedContainer {
            info: ContainerInfo {
                id: format!("{ID_PREFIX}{}", st.id),
                sandbox_id: sandbox_id.to_string(),
                pod_uid: st.labels.get(POD_UID_LABEL).cloned().unwrap_or_default(),
                name: meta.name,
                attempt: meta.attempt,
                image,
                image_id: st.image_ref.clone(),
                state,
                started_at: wall(st.started_at),
                finished_at: wall(st.finished_at),
                next_change,
            },
            spec,
            log_path: PathBuf::from(st.log_path),
            pod_name: st
                .labels
                .get("io.kubernetes.pod.name")
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// Reads one container's status from the runtime into the cache.
    async fn refresh_container(&self, id: &str) -> Result<ContainerInfo, RuntimeError> {
        let st = self
            .client
            .container_status(raw_id(id))
            .await
            .map_err(cri_err)?;
        let mut state = self.lock();
        let prior = state.containers.get(id).cloned();
        let sandbox = prior
            .as_ref()
            .map(|p| p.info.sandbox_id.clone())
            .unwrap_or_default();
        let mut entry = self.cached_from_status(&sandbox, st);
        if let Some(p) = prior {
            entry.spec = entry.spec.or(p.spec);
            if entry.pod_name.is_empty() {
                entry.pod_name = p.pod_name;
            }
        }
        let info = entry.info.clone();
        state.containers.insert(id.to_string(), entry);
        Ok(info)
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.config.pods_dir.join(uid)
    }

    fn env_context(&self, pod_ip: Option<String>) -> EnvContext {
        EnvContext {
            pod_ips: pod_ip.iter().cloned().collect(),
            pod_ip,
            host_ip: Some(self.config.node_ip.to_string()),
            host_ips: vec![self.config.node_ip.to_string()],
            node_name: self.config.node_name.clone(),
            node_allocatable: self.config.allocatable,
        }
    }

    /// The pod's DNS settings from its `dnsPolicy` and `dnsConfig` on this node, with the
    /// warnings the kubelet records as events (the kubelet's `GetPodDNS`). Fails, as the kubelet
    /// does, when the node's resolv.conf cannot be read or has a `nameserver` line without an
    /// address.
    fn pod_dns(&self, pod: &Pod) -> Result<dns_config::PodDns, RuntimeError> {
        let path = &self.config.resolv_conf;
        let host = read_resolv_conf(path).map_err(|e| {
            RuntimeError::Config(format!(
                "cannot read the node's resolv.conf {}: {e}",
                path.display()
            ))
        })?;
        let node = NodeDns {
            cluster_dns: self.config.cluster_dns.clone(),
            cluster_domain: self.config.cluster_domain.clone(),
            node_ips: vec![self.config.node_ip],
        };
        dns_config::pod_dns(pod, &node, host.as_deref()).map_err(|e| {
            RuntimeError::Config(format!("the node's resolv.conf {}: {e}", path.display()))
        })
    }

    /// The sandbox config of `pod`, computed the same way every time (CreateContainer needs
    /// it again, also for sandboxes adopted after a restart), and the DNS warnings met.
    fn sandbox_config(
        &self,
        pod: &Pod,
        attempt: u32,
    ) -> Result<(proto::PodSandboxConfig, Vec<DnsWarning>), RuntimeError> {
        let meta = &pod.metadata;
        let uid = meta.uid.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let spec = pod.spec.clone().unwrap_or_default();
        let host_network = spec.host_network.unwrap_or(false);
        let hostname = if host_network {
            // runc cannot set a hostname without a private UTS namespace.
            String::new()
        } else {
            spec.hostname.clone().unwrap_or_else(|| name.clone())
        };
        // Always set, as the kubelet does: without it containerd copies the node's resolv.conf.
        let dns = self.pod_dns(pod)?;
        let dns_config = Some(proto::DnsConfig {
            servers: dns.config.nameservers,
            searches: dns.config.searches,
            options: dns.config.options,
        });
        let port_mappings = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let host_port = p.host_port.filter(|h| *h > 0)?;
                Some(proto::PortMapping {
                    protocol: match p.protocol.as_deref() {
                        Some("UDP") => proto::Protocol::Udp as i32,
                        Some("SCTP") => proto::Protocol::Sctp as i32,
                        _ => proto::Protocol::Tcp as i32,
                    },
                    container_port: p.container_port,
                    host_port,
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                })
            })
            .collect();
        let labels = HashMap::from([
            (POD_UID_LABEL.to_string(), uid.clone()),
            ("io.kubernetes.pod.name".to_string(), name.clone()),
            ("io.kubernetes.pod.namespace".to_string(), namespace.clone()),
        ]);
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref())
            .map(|s| {
                s.iter()
                    .map(|x| (x.name.clone(), x.value.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let privileged = spec.containers.iter().any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
        let config = proto::PodSandboxConfig {
            metadata: Some(proto::PodSandboxMetadata {
                name: name.clone(),
                uid: uid.clone(),
                namespace: namespace.clone(),
                attempt,
            }),
            hostname,
            log_directory: self
                .config
                .logs_dir
                .join(format!("{namespace}_{name}_{uid}"))
                .to_string_lossy()
                .into_owned(),
            dns_config,
            port_mappings,
            labels,
            annotations: HashMap::new(),
            linux: Some(proto::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/pod-{uid}", self.config.cgroup_parent),
                security_context: Some(proto::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(&spec)),
                    privileged,
                    ..Default::default()
                }),
                sysctls,
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok((config, dns.warnings))
    }

    fn sandbox_ip(&self, sandbox_id: &str) -> Option<String> {
        self.lock()
            .sandboxes
            .get(sandbox_id)
            .and_then(|s| s.info.ip.clone())
    }

    fn cached(&self, container_id: &str) -> Result<CachedContainer, RuntimeError> {
        self.lock()
            .containers
            .get(container_id)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound(format!("container {container_id}")))
    }

    /// The address probes and HTTP hooks reach: the pod IP (or the node's for hostNetwork).
    fn target_host(&self, c: &CachedContainer) -> String {
        self.sandbox_ip(&c.info.sandbox_id)
            .unwrap_or_else(|| self.config.node_ip.to_string())
    }
}

impl CriRuntime {
    /// A container's namespaces: the pod's ([`namespaces`]), except that an ephemeral container
    /// with a `targetContainerName` joins the PID namespace of that container's running
    /// instance (upstream kubelet `generateContainerConfig`: `NamespaceMode_TARGET` with
    /// `target_id`), so `ps` in `kubectl debug --target` shows the target's processes.
    fn container_namespaces(
        &self,
        sandbox_id: &str,
        spec: &k8s_openapi::api::core::v1::PodSpec,
        name: &str,
    ) -> proto::NamespaceOption {
        let mut options = namespaces(spec);
        let target = spec
            .ephemeral_containers
            .iter()
            .flatten()
            .find(|ec| ec.name == name)
            .and_then(|ec| ec.target_container_name.as_deref())
            .filter(|t| !t.is_empty());
        if let Some(target) = target {
            let state = self.lock();
            let running = state
                .containers
                .values()
                .filter(|c| {
                    c.info.sandbox_id == sandbox_id
                        && c.info.name == target
                        && c.info.state == ContainerState::Running
                })
                .max_by_key(|c| c.info.attempt);
            if let Some(c) = running {
                options.pid = proto::NamespaceMode::Target as i32;
                options.target_id = raw_id(&c.info.id).to_string();
            }
        }
        options
    }
}

/// The pod's namespace sharing: network and IPC per pod unless hostNetwork/hostIPC, PID per
/// container unless `shareProcessNamespace` (CRI's default would share the sandbox's).
fn namespaces(spec: &k8s_openapi::api::core::v1::PodSpec) -> proto::NamespaceOption {
    let node_or_pod = |host: Option<bool>| {
        if host.unwrap_or(false) {
            proto::NamespaceMode::Node as i32
        } else {
            proto::NamespaceMode::Pod as i32
        }
    };
    proto::NamespaceOption {
        network: node_or_pod(spec.host_network),
        pid: if spec.host_pid.unwrap_or(false) {
            proto::NamespaceMode::Node as i32
        } else if spec.share_process_namespace.unwrap_or(false) {
            proto::NamespaceMode::Pod as i32
        } else {
            proto::NamespaceMode::Container as i32
        },
        ipc: node_or_pod(spec.host_ipc),
        ..Default::default()
    }
}

fn state_code(s: &ContainerState) -> i32 {
    match s {
        ContainerState::Created => proto::ContainerState::ContainerCreated as i32,
        ContainerState::Running => proto::ContainerState::ContainerRunning as i32,
        ContainerState::Exited { .. } => proto::ContainerState::ContainerExited as i32,
    }
}

/// The cache after a relist: what the runtime listed, plus entries added to the cache while
/// the listing ran (the listing may predate them), minus entries removed from it meanwhile
/// (the listing may still show them). `before` holds the cache's keys when the listing began.
fn merge_relisted<V>(
    before: &HashSet<String>,
    current: &mut HashMap<String, V>,
    mut listed: HashMap<String, V>,
) -> HashMap<String, V> {
    listed.retain(|id, _| current.contains_key(id) || !before.contains(id));
    for (id, entry) in current.drain() {
        if !before.contains(&id) && !listed.contains_key(&id) {
            listed.insert(id, entry);
        }
    }
    listed
}

async fn relist_loop(rt: Weak<CriRuntime>) {
    let mut tick = 0u32;
    loop {
        tokio::time::sleep(RELIST).await;
        let Some(rt) = rt.upgrade() else {
            return;
        };
        rt.relist().await;
        tick = tick.wrapping_add(1);
        if tick.is_multiple_of(10) {
            rt.refresh_images().await;
        }
    }
}

/// CPU and memory limits as cgroup settings, like the kubelet's `generateLinuxContainerResources`:
/// shares from the CPU request (at least 2), quota from the CPU limit over a 100 ms period,
/// the memory limit in bytes.
pub fn linux_resources(container: &Container) -> proto::LinuxContainerResources {
    let res = container.resources.clone().unwrap_or_default();
    type Q = k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let milli = |q: Option<&Q>| {
        q.and_then(|q| Quantity::parse(&q.0))
            .map(crate::config::milli)
    };
    let bytes = |q: Option<&Q>| {
        q.and_then(|q| Quantity::parse(&q.0))
            .map(crate::config::whole)
    };
    let limits = res.limits.unwrap_or_default();
    let requests = res.requests.unwrap_or_default();
    let cpu_request = milli(requests.get("cpu")).or_else(|| milli(limits.get("cpu")));
    let cpu_limit = milli(limits.get("cpu"));
    let mut r = proto::LinuxContainerResources {
        cpu_shares: cpu_request.map_or(2, |m| (m * 1024 / 1000).max(2)),
        ..Default::default()
    };
    if let Some(m) = cpu_limit {
        r.cpu_period = 100_000;
        r.cpu_quota = (m * 100_000 / 1000).max(1000);
    }
    if let Some(b) = bytes(limits.get("memory")) {
        r.memory_limit_in_bytes = b;
    }
    r
}

#[async_trait]
impl Runtime for CriRuntime {
    fn version(&self) -> String {
        self.version.clone()
    }

    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<SandboxInfo, RuntimeError> {
        let uid = config.pod_uid.clone();
        // A sandbox left by a failed attempt keeps its name reserved: remove it first.
        let stale: Vec<String> = self
            .lock()
            .sandboxes
            .values()
            .filter(|s| s.info.pod_uid == uid && !s.info.ready)
            .map(|s| s.info.id.clone())
            .collect();
        for id in stale {
            let _ = self.client.stop_pod_sandbox(&id).await;
            let _ = self.client.remove_pod_sandbox(&id).await;
            self.lock().sandboxes.remove(&id);
        }
        let attempt = self.lock().attempts.get(&uid).copied().unwrap_or(0);
        let (cfg, dns_warnings) = self.sandbox_config(&config.pod, attempt)?;
        for warning in dns_warnings {
            tracing::warn!(
                pod = %format!("{}/{}", config.namespace, config.name),
                reason = warning.reason,
                "{}",
                warning.message
            );
            self.events
                .event(
                    &config.pod,
                    None,
                    EventType::Warning,
                    warning.reason,
                    &warning.message,
                )
                .await;
        }
        let host_network = config
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let started = Instant::now();
        let id = match self.client.run_pod_sandbox(cfg, "").await {
            Ok(id) => {
                let mut state = self.lock();
                if state.sandbox_create.len() == SANDBOX_DURATIONS_KEPT {
                    state.sandbox_create.pop_front();
                }
                state.sandbox_create.push_back(started.elapsed());
                id
            }
            Err(e) => {
                self.lock().attempts.insert(uid.clone(), attempt + 1);
                // Whatever the failure left behind is removed by its (bumped) attempt's retry.
                if let Ok(list) = self.client.list_pod_sandbox(None).await {
                    for sb in list {
                        if sb.metadata.as_ref().is_some_and(|m| m.uid == uid)
                            && sb.state != proto::PodSandboxState::SandboxReady as i32
                        {
                            let _ = self.client.stop_pod_sandbox(&sb.id).await;
                            let _ = self.client.remove_pod_sandbox(&sb.id).await;
                        }
                    }
                }
                return Err(RuntimeError::Refused {
                    message: e.to_string(),
                });
            }
        };
        let ip = if host_network {
            Some(self.config.node_ip.to_string())
        } else {
            let status = self.client.pod_sandbox_status(&id).await.map_err(cri_err)?;
            status.network.map(|n| n.ip).filter(|ip| !ip.is_empty())
        };
        let info = SandboxInfo {
            id: id.clone(),
            pod_uid: uid,
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            ip,
            ready: true,
            created_at: SystemTime::now(),
        };
        self.lock().sandboxes.insert(
            id,
            CachedSandbox {
                info: info.clone(),
                attempt,
            },
        );
        Ok(info)
    }

    async fn remove_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        let uid = self
            .lock()
            .sandboxes
            .get(sandbox_id)
            .map(|s| s.info.pod_uid.clone());
        self.client
            .stop_pod_sandbox(sandbox_id)
            .await
            .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
            .map_err(cri_err)?;
        self.client
            .remove_pod_sandbox(sandbox_id)
            .await
            .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
            .map_err(cri_err)?;
        let mut state = self.lock();
        state.sandboxes.remove(sandbox_id);
        state
            .containers
            .retain(|_, c| c.info.sandbox_id != sandbox_id);
        if let Some(uid) = uid {
            state.volumes.remove(&uid);
            if let Some(task) = state.token_refreshers.remove(&uid) {
                task.abort();
            }
            state.attempts.remove(&uid);
            let still_used = state.sandboxes.values().any(|s| s.info.pod_uid == uid);
            drop(state);
            if !still_used {
                volumes::cleanup(&self.pod_dir(&uid));
                remove_cgroups(&format!("{}/pod-{uid}", self.config.cgroup_parent));
            }
        }
        Ok(())
    }

    async fn stop_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        self.client
            .stop_pod_sandbox(sandbox_id)
            .await
            .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
            .map_err(cri_err)?;
        if let Some(s) = self.lock().sandboxes.get_mut(sandbox_id) {
            s.info.ready = false;
        }
        Ok(())
    }

    fn list_sandboxes(&self) -> Vec<SandboxInfo> {
        self.lock()
            .sandboxes
            .values()
            .map(|s| s.info.clone())
            .collect()
    }

    fn image_status(&self, image: &str) -> Option<ImageInfo> {
        let want = normalize_image(image);
        self.lock()
            .images
            .iter()
            .find(|i| i.is_named(&want) || i.is_named(image))
            .cloned()
    }

    async fn pull_image(
        &self,
        image: &str,
        auth: Option<&Credential>,
    ) -> Result<PullOutcome, RuntimeError> {
        let asked = tokio::time::Instant::now();
        // The kubelet's puller: one at a time (`--serialize-image-pulls`, the default), or at
        // most `--max-parallel-image-pulls` at once.
        let _permit = self
            .pulls
            .acquire()
            .await
            .map_err(|_| RuntimeError::Refused {
                message: "the runtime is shutting down".into(),
            })?;
        let started = tokio::time::Instant::now();
        let auth = auth.map(|c| proto::AuthConfig {
            username: c.username.clone(),
            password: c.password.clone(),
            ..Default::default()
        });
        match self.client.pull_image(image, auth, None).await {
            Ok(image_ref) => {
                self.refresh_images().await;
                let took = started.elapsed();
                let info = self
                    .image_status(image)
                    .or_else(|| self.image_status(&image_ref))
                    .ok_or_else(|| RuntimeError::NotFound(format!("image {image}")))?;
                Ok(PullOutcome {
                    image: info,
                    took,
                    took_including_waiting: asked.elapsed(),
                })
            }
            Err(e) => Err(RuntimeError::Refused {
                message: format!("failed to pull image {image:?}: {}", desc(&e)),
            }),
        }
    }

    fn list_images(&self) -> Vec<ImageInfo> {
        self.lock().images.clone()
    }

    async fn prepare_volumes(&self, pod: &Pod) -> Result<(), RuntimeError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ctx = self.env_context(pod.status.as_ref().and_then(|s| s.pod_ip.clone()));
        let vols = volumes::prepare(&self.kube, pod, &self.pod_dir(&uid), &ctx)
            .await
            .map_err(|e| RuntimeError::Refused {
                message: e.to_string(),
            })?;
        let refresher = volumes::token_refresh_period(pod).map(|period| {
            let (kube, pod, dir) = (self.kube.clone(), pod.clone(), self.pod_dir(&uid));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(period).await;
                    if let Err(e) = volumes::prepare(&kube, &pod, &dir, &ctx).await {
                        tracing::warn!(pod = ?pod.metadata.name, error = %e, "cannot refresh the pod's projected ServiceAccount token");
                    }
                }
            })
        });
        let mut state = self.lock();
        state.volumes.insert(uid.clone(), vols);
        if let Some(task) = refresher
            && let Some(old) = state.token_refreshers.insert(uid, task)
        {
            old.abort();
        }
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        pod: &Pod,
        container: &Container,
        attempt: u32,
    ) -> Result<ContainerInfo, RuntimeError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let pod_ip = self.sandbox_ip(sandbox_id);
        let ctx = self.env_context(pod_ip.clone());
        let env = env::container_env(&self.kube, pod, container, &ctx)
            .await
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let (command, args) = env::expand_command(container, &env);
        let known = self.lock().volumes.get(&uid).cloned();
        let vols = match known {
            Some(v) => v,
            None => {
                let v = volumes::prepare(&self.kube, pod, &self.pod_dir(&uid), &ctx)
                    .await
                    .map_err(|e| RuntimeError::Config(e.to_string()))?;
                self.lock().volumes.insert(uid.clone(), v.clone());
                v
            }
        };
        let mut mounts: Vec<proto::Mount> = volumes::container_mounts(container, &vols, &env)
            .map_err(|e| RuntimeError::Config(e.to_string()))?
            .into_iter()
            .map(|m| proto::Mount {
                container_path: m.container_path,
                host_path: m.host_path.to_string_lossy().into_owned(),
                readonly: m.read_only,
                ..Default::default()
            })
            .collect();
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        if !host_network && !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
            let hosts = volumes::write_hosts_file(pod, pod_ip.as_deref(), &self.pod_dir(&uid))
                .map_err(|e| RuntimeError::Config(format!("cannot write the hosts file: {e}")))?;
            mounts.push(proto::Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        let sandbox_attempt = self
            .lock()
            .sandboxes
            .get(sandbox_id)
            .map_or(0, |s| s.attempt);
        let image = container.image.clone().unwrap_or_default();
        // A reference pinned by digest is handed to the runtime as the image ID found on the
        // node (the kubelet passes its image ref), since the digest may be the one node status
        // lists rather than a name the runtime's store has.
        let image_ref = match self.image_status(&image) {
            Some(found) if image.contains('@') => found.id,
            _ => image.clone(),
        };
        let sc = container.security_context.clone().unwrap_or_default();
        let pod_sc = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.clone())
            .unwrap_or_default();
        let run_as_user = sc.run_as_user.or(pod_sc.run_as_user);
        let run_as_group = sc.run_as_group.or(pod_sc.run_as_group);
        let spec_json = serde_json::to_string(container).unwrap_or_default();
        let config = proto::ContainerConfig {
            metadata: Some(proto::ContainerMetadata {
                name: container.name.clone(),
                attempt,
            }),
            image: Some(proto::ImageSpec {
                image: image_ref,
                ..Default::default()
            }),
            command,
            args,
            working_dir: container.working_dir.clone().unwrap_or_default(),
            envs: env
                .iter()
                .map(|(k, v)| proto::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            mounts,
            labels: HashMap::from([
                (POD_UID_LABEL.to_string(), uid.clone()),
                ("io.kubernetes.pod.name".to_string(), pod_name.clone()),
                (
                    "io.kubernetes.container.name".to_string(),
                    container.name.clone(),
                ),
            ]),
            annotations: HashMap::from([(SPEC_ANNOTATION.to_string(), spec_json)]),
            log_path: format!("{}/{attempt}.log", container.name),
            stdin: container.stdin.unwrap_or(false),
            stdin_once: container.stdin_once.unwrap_or(false),
            tty: container.tty.unwrap_or(false),
            linux: Some(proto::LinuxContainerConfig {
                resources: Some(linux_resources(container)),
                security_context: Some(proto::LinuxContainerSecurityContext {
                    privileged: sc.privileged.unwrap_or(false),
                    namespace_options: pod
                        .spec
                        .as_ref()
                        .map(|spec| self.container_namespaces(sandbox_id, spec, &container.name)),
                    run_as_user: run_as_user.map(|value| proto::Int64Value { value }),
                    run_as_group: run_as_group.map(|value| proto::Int64Value { value }),
                    readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                    no_new_privs: sc.allow_privilege_escalation == Some(false),
                    capabilities: sc.capabilities.as_ref().map(|c| proto::Capability {
                        add_capabilities: c.add.clone().unwrap_or_default(),
                        drop_capabilities: c.drop.clone().unwrap_or_default(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        // The warnings were recorded when the sandbox was created.
        let (sandbox_config, _) = self.sandbox_config(pod, sandbox_attempt)?;
        let id = self
            .client
            .create_container(sandbox_id, config, sandbox_config)
            .await
            .map_err(cri_err)?;
        let full = format!("{ID_PREFIX}{id}");
        {
            let mut state = self.lock();
            state.containers.insert(
                full.clone(),
                CachedContainer {
                    info: ContainerInfo {
                        id: full.clone(),
                        sandbox_id: sandbox_id.to_string(),
                        pod_uid: uid,
                        name: container.name.clone(),
                        attempt,
                        image: image.clone(),
                        image_id: String::new(),
                        state: ContainerState::Created,
                        started_at: None,
                        finished_at: None,
                        next_change: None,
                    },
                    spec: Some(container.clone()),
                    log_path: PathBuf::new(),
                    pod_name,
                },
            );
        }
        self.refresh_container(&full).await
    }

    async fn start_container(&self, container_id: &str) -> Result<(), RuntimeError> {
        self.client
            .start_container(raw_id(container_id))
            .await
            .map_err(cri_err)?;
        self.refresh_container(container_id).await.map(|_| ())
    }

    async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        self.client
            .stop_container(raw_id(container_id), grace)
            .await
            .map_err(cri_err)?;
        self.refresh_container(container_id).await.map(|_| ())
    }

    fn container_status(&self, container_id: &str) -> Result<ContainerInfo, RuntimeError> {
        let mut info = self.cached(container_id)?.info;
        // A relist keeps an unchanged entry as it was cached, due time included; a due time in
        // the past would wake the pod worker again at once, in a loop. The cache is refreshed
        // every RELIST, so look again then.
        let now = tokio::time::Instant::now();
        if let Some(at) = info.next_change.as_mut()
            && *at <= now
        {
            *at = now + RELIST;
        }
        Ok(info)
    }

    fn list_containers(&self, sandbox_id: &str) -> Vec<ContainerInfo> {
        self.lock()
            .containers
            .values()
            .filter(|c| c.info.sandbox_id == sandbox_id)
            .map(|c| c.info.clone())
            .collect()
    }

    async fn probe(&self, container_id: &str, kind: ProbeKind) -> ProbeResult {
        let Ok(c) = self.cached(container_id) else {
            return ProbeResult::Failure(format!("container {container_id} not found"));
        };
        let Some(spec) = c.spec.clone() else {
            return ProbeResult::Failure("the container's spec is unknown to the runtime".into());
        };
        let probe = match kind {
            ProbeKind::Startup => spec.startup_probe.clone(),
            ProbeKind::Liveness => spec.liveness_probe.clone(),
            ProbeKind::Readiness => spec.readiness_probe.clone(),
        };
        let Some(probe) = probe else {
            return ProbeResult::Success;
        };
        self.run_probe(&c, &spec, &probe).await
    }

    fn implicit_probes(&self, _container_id: &str) -> Vec<ProbeKind> {
        Vec::new()
    }

    async fn run_hook(&self, container_id: &str, hook: HookKind) -> Result<(), RuntimeError> {
        let c = self.cached(container_id)?;
        let Some(spec) = c.spec.clone() else {
            return Ok(());
        };
        let lifecycle = spec.lifecycle.clone().unwrap_or_default();
        let handler: Option<LifecycleHandler> = match hook {
            HookKind::PostStart => lifecycle.post_start,
            HookKind::PreStop => lifecycle.pre_stop,
        };
        let Some(h) = handler else {
            return Ok(());
        };
        let fail = |message: String| Err(RuntimeError::Refused { message });
        if let Some(exec) = h.exec {
            let cmd = exec.command.unwrap_or_default();
            return match self
                .client
                .exec_sync(raw_id(container_id), cmd.clone(), None)
                .await
            {
                Ok(r) if r.exit_code == 0 => Ok(()),
                Ok(r) => fail(format!(
                    "command '{}' exited with {}: {}",
                    cmd.join(" "),
                    r.exit_code,
                    String::from_utf8_lossy(&r.stderr).trim()
                )),
                Err(e) => fail(desc(&e).to_string()),
            };
        }
        if let Some(get) = h.http_get {
            let host = self.target_host(&c);
            return match prober::http_get(&host, &spec, &get, Duration::from_secs(10)).await {
                Ok(code) if (200..400).contains(&code) => Ok(()),
                Ok(code) => fail(format!(
                    "HTTP lifecycle hook failed with status code {code}"
                )),
                Err(e) => fail(e),
            };
        }
        if let Some(sleep) = h.sleep {
            tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0).unsigned_abs())).await;
            return Ok(());
        }
        fail("the lifecycle handler names no action".into())
    }

    fn log_path(&self, container_id: &str) -> Result<PathBuf, RuntimeError> {
        let c = self.cached(container_id)?;
        if c.log_path.as_os_str().is_empty() {
            return Err(RuntimeError::NotFound(format!(
                "log of container {container_id}"
            )));
        }
        Ok(c.log_path)
    }

    async fn exec_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        self.client
            .exec(proto::ExecRequest {
                container_id: raw_id(container_id).to_string(),
                cmd: req.command.clone(),
                tty: req.tty,
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
            })
            .await
            .map_err(cri_err)
    }

    async fn attach_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        self.client
            .attach(proto::AttachRequest {
                container_id: raw_id(container_id).to_string(),
                stdin: req.stdin,
                tty: req.tty,
                stdout: req.stdout,
                stderr: req.stderr,
            })
            .await
            .map_err(cri_err)
    }

    async fn port_forward_url(
        &self,
        sandbox_id: &str,
        ports: &[u16],
    ) -> Result<String, RuntimeError> {
        self.client
            .port_forward(sandbox_id, ports.iter().map(|p| i32::from(*p)).collect())
            .await
            .map_err(cri_err)
    }

    fn stats(&self) -> RuntimeStats {
        let state = self.lock();
        RuntimeStats {
            sandboxes: state.sandboxes.len(),
            running_containers: state
                .containers
                .values()
                .filter(|c| c.info.state == ContainerState::Running)
                .count(),
            images: state.images.len(),
            image_bytes: state.images.iter().map(|i| i.size_bytes).sum(),
        }
    }

    /// `ListContainerStats` of the running containers, as the kubelet's CRI stats provider
    /// reads them; start times come from the status cache.
    async fn container_stats(
        &self,
        _declared: &crate::stats::emulated::DeclaredPods,
    ) -> Result<Vec<ContainerStats>, RuntimeError> {
        let listed = self
            .client
            .list_container_stats(None)
            .await
            .map_err(cri_err)?;
        let state = self.lock();
        let now = SystemTime::now();
        Ok(listed
            .into_iter()
            .filter_map(|st| {
                let attributes = st.attributes?;
                let id = format!("{ID_PREFIX}{}", attributes.id);
                let cached = state.containers.get(&id)?;
                if cached.info.state != ContainerState::Running {
                    return None;
                }
                let cpu = st.cpu.unwrap_or_default();
                let memory = st.memory.unwrap_or_default();
                Some(ContainerStats {
                    pod_uid: attributes
                        .labels
                        .get(POD_UID_LABEL)
                        .cloned()
                        .unwrap_or_else(|| cached.info.pod_uid.clone()),
                    name: attributes
                        .metadata
                        .map(|m| m.name)
                        .unwrap_or_else(|| cached.info.name.clone()),
                    id,
                    started_at: cached.info.started_at,
                    timestamp: wall(cpu.timestamp).unwrap_or(now),
                    cpu_core_nanos: cpu.usage_core_nano_seconds.map_or(0, |v| v.value),
                    cpu_nano_cores: cpu.usage_nano_cores.map(|v| v.value),
                    memory_working_set_bytes: memory.working_set_bytes.map_or(0, |v| v.value),
                    memory_usage_bytes: memory.usage_bytes.map(|v| v.value),
                })
            })
            .collect())
    }

    /// The node's figures from `/proc` ([`crate::stats::proc`]).
    async fn node_stats(
        &self,
        _node: &NodeResources,
        _containers: &[ContainerStats],
    ) -> Result<NodeStats, RuntimeError> {
        crate::stats::proc::read_node(SystemTime::now()).map_err(|e| RuntimeError::Refused {
            message: crate::stats::error_chain(&e),
        })
    }
}

impl CriRuntime {
    /// One probe, as the kubelet's prober runs it: HTTP GET and TCP connect from the node into
    /// the pod's network, exec through `ExecSync`; each bounded by `timeoutSeconds`.
    async fn run_probe(&self, c: &CachedContainer, spec: &Container, probe: &Probe) -> ProbeResult {
        let timeout = Duration::from_secs(u64::from(
            probe.timeout_seconds.unwrap_or(1).max(1).unsigned_abs(),
        ));
        if let Some(exec) = &probe.exec {
            let cmd = exec.command.clone().unwrap_or_default();
            return match self
                .client
                .exec_sync(raw_id(&c.info.id), cmd, Some(timeout))
                .await
            {
                Ok(r) if r.exit_code == 0 => ProbeResult::Success,
                Ok(r) => {
                    let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
                    out.push_str(&String::from_utf8_lossy(&r.stderr));
                    ProbeResult::Failure(out)
                }
                Err(e) => ProbeResult::Failure(desc(&e).to_string()),
            };
        }
        let host = self.target_host(c);
        prober::network_probe(&host, spec, probe, timeout).await
    }
}

/// The node's resolv.conf text, at most [`dns_config::MAX_RESOLV_CONF_BYTES`] of it as the
/// kubelet reads it; `None` for an empty path (the kubelet's `--resolv-conf=""`).
fn read_resolv_conf(path: &Path) -> std::io::Result<Option<String>> {
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(dns_config::MAX_RESOLV_CONF_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > dns_config::MAX_RESOLV_CONF_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} bytes",
            dns_config::MAX_RESOLV_CONF_BYTES
        )));
    }
    Ok(Some(text))
}

/// Removes a pod's cgroup directories in every v1 hierarchy (runc removes only the
/// containers'); best effort, deepest first.
pub fn remove_cgroups(parent: &str) {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for h in hierarchies.flatten() {
        let dir = h.path().join(parent.trim_start_matches('/'));
        remove_dirs(&dir);
    }
}

fn remove_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_dirs(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_keeps_what_was_added_and_drops_what_was_removed_while_it_listed() {
        let map = |ids: &[&str]| -> HashMap<String, u8> {
            ids.iter().map(|id| (id.to_string(), 0)).collect()
        };
        // The cache held `old` and `gone` when the listing began; meanwhile a sandbox `new`
        // was run and `gone` was removed. The runtime listed `old`, `gone` and `restarted`
        // (one the cache never had, e.g. from before an agent restart); `vanished` was in
        // the cache and is no longer in the runtime.
        let before: HashSet<String> = ["old", "gone", "vanished"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut current = map(&["old", "new", "vanished"]);
        let listed = map(&["old", "gone", "restarted"]);
        let merged = merge_relisted(&before, &mut current, listed);
        let mut ids: Vec<&str> = merged.keys().map(String::as_str).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["new", "old", "restarted"]);
    }

    #[test]
    fn image_names_are_normalized_like_containerd() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(normalize_image("org/app"), "docker.io/org/app:latest");
        assert_eq!(
            normalize_image("tandem.local/busybox:1"),
            "tandem.local/busybox:1"
        );
        assert_eq!(
            normalize_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(
            normalize_image("mcr.microsoft.com/a@sha256:abc"),
            "mcr.microsoft.com/a@sha256:abc"
        );
    }

    #[test]
    fn limits_become_cgroup_settings() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "a",
            "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}
        }))
        .unwrap_or_default();
        let r = linux_resources(&c);
        assert_eq!(r.cpu_shares, 256);
        assert_eq!((r.cpu_quota, r.cpu_period), (50_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 64 * 1024 * 1024);
        let none = linux_resources(&Container::default());
        assert_eq!(
            (none.cpu_shares, none.cpu_quota, none.memory_limit_in_bytes),
            (2, 0, 0)
        );
    }
}
