//! The `Runtime` trait: the node agent's one boundary to whatever runs containers, shaped after
//! CRI v1 (`RuntimeService` + `ImageService`) but narrowed to what the pod workers use. Backends:
//! [`emulated`] (no processes, behaviour from data) and [`cri`] (containerd).
//!
//! Contract every backend keeps (checked against both by `tests/runtime_contract.rs`, which also
//! states where they differ by design):
//! - sandbox, container and image operations are idempotent on their ids; a missing id is
//!   [`RuntimeError::NotFound`];
//! - state survives an agent restart as far as the backend can keep it, and
//!   [`Runtime::list_sandboxes`]/[`Runtime::list_containers`] report it so the agent can re-adopt
//!   running pods instead of restarting them;
//! - failures a user must see carry the message the real node would give (they end up in pod
//!   status and events verbatim).

pub mod behaviour;
pub mod cri;
pub mod emulated;
pub mod prober;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
pub use tandem_core::images::keyring::Credential;

/// What a backend needs to create a pod sandbox.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    pub pod_uid: String,
    pub namespace: String,
    pub name: String,
    /// The pod, for backends that read per-pod behaviour or Windows options from it.
    pub pod: Pod,
    /// The IP the agent allocated from the node's pod CIDR (`None` for hostNetwork pods).
    pub ip: Option<String>,
}

/// A sandbox as the backend reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SandboxInfo {
    pub id: String,
    pub pod_uid: String,
    pub namespace: String,
    pub name: String,
    pub ip: Option<String>,
    pub ready: bool,
    #[serde(with = "wall")]
    pub created_at: SystemTime,
}

/// An image present on the node.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageInfo {
    /// The reference the image was pulled by.
    pub name: String,
    /// `sha256:…`, as `imageID` shows it.
    pub id: String,
    pub size_bytes: i64,
    /// `repository@sha256:…` references of the image's manifest, as the runtime reports them
    /// (empty for images imported from an archive).
    #[serde(default)]
    pub repo_digests: Vec<String>,
}

impl ImageInfo {
    /// Whether `reference` names this image: its name, its ID, one of its repository digests,
    /// or `<repository>@<ID>`, the digest name node status reports for an image without
    /// repository digests. An image pinned by digest is then found on the node, as the
    /// kubelet's image manager finds it, instead of being pulled.
    pub fn is_named(&self, reference: &str) -> bool {
        if reference == self.name
            || reference == self.id
            || self.repo_digests.iter().any(|d| d == reference)
        {
            return true;
        }
        reference
            .split_once('@')
            .is_some_and(|(repo, digest)| digest == self.id && repo == repository(&self.name))
    }

    /// The names node status lists for the image: its digest references, then its name.
    pub fn status_names(&self) -> Vec<String> {
        let mut names = if self.repo_digests.is_empty() {
            vec![format!("{}@{}", repository(&self.name), self.id)]
        } else {
            self.repo_digests.clone()
        };
        if !names.contains(&self.name) {
            names.push(self.name.clone());
        }
        names
    }
}

/// An image reference without its tag or digest: `tandem.local:5000/busybox:1` →
/// `tandem.local:5000/busybox` (a colon before the last `/` belongs to the registry's port).
pub fn repository(reference: &str) -> &str {
    let name = reference.split_once('@').map_or(reference, |(n, _)| n);
    let last = name.rfind('/').map_or(0, |i| i + 1);
    match name[last..].find(':') {
        Some(colon) => &name[..last + colon],
        None => name,
    }
}

/// The result of a pull: the image and how long the transfer took (without queueing).
#[derive(Clone, Debug)]
pub struct PullOutcome {
    pub image: ImageInfo,
    pub took: Duration,
    /// Time spent including waiting for other pulls (the kubelet's "including waiting").
    pub took_including_waiting: Duration,
}

/// A container's state as the backend reports it (CRI `ContainerStatus`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ContainerState {
    Created,
    Running,
    Exited {
        exit_code: i32,
        reason: String,
        message: Option<String>,
    },
}

/// A container as the backend reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContainerInfo {
    /// `emulated://<hex>` for the emulated backend, as `containerID` shows it.
    pub id: String,
    pub sandbox_id: String,
    pub pod_uid: String,
    pub name: String,
    /// How many times this container was started before this instance (CRI `attempt`).
    pub attempt: u32,
    pub image: String,
    pub image_id: String,
    pub state: ContainerState,
    #[serde(with = "wall_opt")]
    pub started_at: Option<SystemTime>,
    #[serde(with = "wall_opt")]
    pub finished_at: Option<SystemTime>,
    /// When the state is next expected to change without anyone acting (an emulated exit);
    /// `None` when only polling can tell. The agent wakes then instead of polling.
    #[serde(skip)]
    pub next_change: Option<tokio::time::Instant>,
}

/// What an exec or attach session streams (CRI `ExecRequest`/`AttachRequest` without the
/// container id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamRequest {
    /// The command for exec; empty for attach.
    pub command: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Which probe is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    /// `Startup`, `Liveness`, `Readiness`: how probe events name the probe.
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }
}

/// One probe's outcome; `Failure` carries the output the kubelet shows in its Unhealthy event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    Success,
    Failure(String),
}

/// Lifecycle hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    PostStart,
    PreStop,
}

/// Node-level usage figures (CRI `ImageFsInfo`/`ListContainerStats`, summed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeStats {
    pub sandboxes: usize,
    pub running_containers: usize,
    pub images: usize,
    pub image_bytes: i64,
}

/// One container's usage (CRI `ContainerStats`): measured by a real runtime, declared by the
/// emulated one.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerStats {
    /// The container id, as [`ContainerInfo::id`] spells it.
    pub id: String,
    pub pod_uid: String,
    /// The container's name in the pod spec.
    pub name: String,
    pub started_at: Option<SystemTime>,
    /// When the figures were taken.
    pub timestamp: SystemTime,
    /// CPU time used since the container started, in core-nanoseconds (CRI
    /// `usage_core_nano_seconds`).
    pub cpu_core_nanos: u64,
    /// The runtime's own current rate in nanocores, when it gives one (CRI `usage_nano_cores`;
    /// the declared rate on an emulated node).
    pub cpu_nano_cores: Option<u64>,
    pub memory_working_set_bytes: u64,
    /// All memory charged to the container, when the runtime reports it.
    pub memory_usage_bytes: Option<u64>,
}

/// The node's usage as a whole: `/proc` on a real node, reservations plus pods on an emulated
/// one.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeStats {
    /// When the node started: boot time on a real node, the runtime's start when emulated.
    pub start_time: SystemTime,
    pub timestamp: SystemTime,
    /// CPU time used since `start_time`, in core-nanoseconds.
    pub cpu_core_nanos: u64,
    /// The current rate in nanocores when the source knows it exactly (emulated nodes).
    pub cpu_nano_cores: Option<u64>,
    pub memory_working_set_bytes: u64,
    pub memory_available_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
}

/// The node's size, for backends whose node figures are declared rather than measured: an
/// emulated node uses its reservations (`capacity − allocatable`) all the time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeResources {
    pub capacity: crate::config::Resources,
    pub allocatable: crate::config::Resources,
}

/// Why a runtime operation failed. `message` is what a user sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0} not found")]
    NotFound(String),
    /// The node refused the operation as a real node of its OS would (Windows build mismatch,
    /// hostNetwork, memory-backed emptyDir, platform mismatch on pull).
    #[error("{message}")]
    Refused { message: String },
    #[error("{0} is not supported by this runtime")]
    Unsupported(&'static str),
    /// The container's configuration could not be resolved (a missing ConfigMap or Secret, a
    /// bad volume mount): the kubelet's `CreateContainerConfigError`.
    #[error("{0}")]
    Config(String),
    /// The node's runtime is emulated: there is no process to stream from or to.
    #[error("{0} is not possible on this node: its runtime is emulated and runs no processes")]
    Emulated(&'static str),
    #[error("runtime state could not be saved")]
    State(#[source] std::sync::Arc<std::io::Error>),
}

/// The runtime a node agent drives. Narrow on purpose: sandbox, image, container, hooks and
/// probes, log files and streaming URLs, stats.
#[async_trait]
pub trait Runtime: Send + Sync {
    /// `containerRuntimeVersion` as the Node reports it (`emulated://tandem-0.1.0`).
    fn version(&self) -> String;

    /// Whether containers are emulated (no process runs), so that what the node reports about
    /// them says so — and what a real runtime reports never does.
    fn emulated(&self) -> bool {
        false
    }

    /// Creates and starts a pod sandbox (network namespace, pause container).
    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<SandboxInfo, RuntimeError>;
    /// Stops and removes a sandbox and every container in it.
    async fn remove_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError>;
    /// Stops a finished pod's sandbox but keeps its containers and logs for `kubectl logs`
    /// (removal follows when the pod is deleted). Backends without that distinction remove it.
    async fn stop_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        self.remove_sandbox(sandbox_id).await
    }
    /// Sandboxes that exist (for re-adoption after an agent restart).
    fn list_sandboxes(&self) -> Vec<SandboxInfo>;

    /// The image if present on the node.
    fn image_status(&self, image: &str) -> Option<ImageInfo>;
    /// Pulls an image with the given registry credentials, or none (for the emulated backend:
    /// waits the modelled transfer time). The pod worker tries each credential the pod's pull
    /// secrets hold for the image, as the kubelet does.
    async fn pull_image(
        &self,
        image: &str,
        auth: Option<&Credential>,
    ) -> Result<PullOutcome, RuntimeError>;
    /// Images present.
    fn list_images(&self) -> Vec<ImageInfo>;

    /// Mounts the pod's volumes; an error is reported as a `FailedMount` event.
    async fn prepare_volumes(&self, pod: &Pod) -> Result<(), RuntimeError>;
    /// Creates a container in a sandbox; `attempt` counts restarts.
    async fn create_container(
        &self,
        sandbox_id: &str,
        pod: &Pod,
        container: &Container,
        attempt: u32,
    ) -> Result<ContainerInfo, RuntimeError>;
    /// Starts a created container.
    async fn start_container(&self, container_id: &str) -> Result<(), RuntimeError>;
    /// Stops a container, giving it `grace` to exit before it is killed.
    async fn stop_container(&self, container_id: &str, grace: Duration)
    -> Result<(), RuntimeError>;
    /// The container's current status.
    fn container_status(&self, container_id: &str) -> Result<ContainerInfo, RuntimeError>;
    /// Containers of a sandbox, every attempt.
    fn list_containers(&self, sandbox_id: &str) -> Vec<ContainerInfo>;

    /// Runs a probe against a running container.
    async fn probe(&self, container_id: &str, kind: ProbeKind) -> ProbeResult;
    /// Probes the backend models for a container even though its spec declares none (the
    /// emulated runtime's probe annotations); the agent runs them with period 1 s and
    /// thresholds 1. A real runtime returns none.
    fn implicit_probes(&self, container_id: &str) -> Vec<ProbeKind>;
    /// Runs a lifecycle hook; an error is the hook's failure message.
    async fn run_hook(&self, container_id: &str, hook: HookKind) -> Result<(), RuntimeError>;

    /// Where the container's log is, in the CRI log format (`<RFC 3339 time> <stream> <P|F>
    /// <text>` per line); `kubectl logs` reads it through the agent's streaming server.
    fn log_path(&self, container_id: &str) -> Result<PathBuf, RuntimeError>;
    /// A single-use URL of the runtime's streaming server for an exec session (CRI `Exec`); the
    /// agent splices the client's upgraded connection to it.
    async fn exec_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError>;
    /// The same for attaching to the container's main process (CRI `Attach`).
    async fn attach_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError>;
    /// The same for port forwarding into the sandbox's network namespace (CRI `PortForward`,
    /// with the ports a websocket client named; SPDY clients name theirs per stream, so the
    /// list may be empty).
    async fn port_forward_url(
        &self,
        sandbox_id: &str,
        ports: &[u16],
    ) -> Result<String, RuntimeError>;
    /// Usage figures.
    fn stats(&self) -> RuntimeStats;

    /// Usage of the running containers (CRI `ListContainerStats`). `declared` is the usage the
    /// node's pods declare now, by pod UID (see [`crate::stats::emulated`]); only an emulated
    /// backend reads it.
    async fn container_stats(
        &self,
        declared: &crate::stats::emulated::DeclaredPods,
    ) -> Result<Vec<ContainerStats>, RuntimeError> {
        let _ = declared;
        Err(RuntimeError::Unsupported("container stats"))
    }

    /// Usage of the node as a whole; `containers` is what [`Runtime::container_stats`] just
    /// returned (an emulated node adds them to its reservations).
    async fn node_stats(
        &self,
        node: &NodeResources,
        containers: &[ContainerStats],
    ) -> Result<NodeStats, RuntimeError> {
        let _ = (node, containers);
        Err(RuntimeError::Unsupported("node stats"))
    }
}

/// Labels every backend records on a container so it can be matched to the pod spec.
pub fn container_labels(pod_uid: &str, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("io.kubernetes.pod.uid".to_string(), pod_uid.to_string()),
        ("io.kubernetes.container.name".to_string(), name.to_string()),
    ])
}

/// `SystemTime` as Unix microseconds in JSON.
mod wall {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let us = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        s.serialize_u64(u64::try_from(us).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let us = u64::deserialize(d)?;
        Ok(UNIX_EPOCH + Duration::from_micros(us))
    }
}

mod wall_opt {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => {
                let us = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
                s.serialize_some(&u64::try_from(us).unwrap_or(u64::MAX))
            }
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(|us| UNIX_EPOCH + Duration::from_micros(us)))
    }
}

#[cfg(test)]
mod tests {
    use super::{ImageInfo, repository};

    fn busybox(repo_digests: &[&str]) -> ImageInfo {
        ImageInfo {
            name: "tandem.local/busybox:1".into(),
            id: "sha256:aaaa".into(),
            size_bytes: 1,
            repo_digests: repo_digests.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn repository_strips_tag_and_digest_but_keeps_a_registry_port() {
        for (reference, repo) in [
            ("tandem.local/busybox:1", "tandem.local/busybox"),
            ("tandem.local/busybox@sha256:aa", "tandem.local/busybox"),
            ("tandem.local/busybox:1@sha256:aa", "tandem.local/busybox"),
            ("localhost:5000/app", "localhost:5000/app"),
            ("localhost:5000/app:v2", "localhost:5000/app"),
            ("busybox", "busybox"),
        ] {
            assert_eq!(repository(reference), repo, "{reference}");
        }
    }

    #[test]
    fn an_image_answers_to_its_name_id_and_the_digest_names_status_lists() {
        let archived = busybox(&[]);
        assert_eq!(
            archived.status_names(),
            ["tandem.local/busybox@sha256:aaaa", "tandem.local/busybox:1"]
        );
        for name in archived.status_names() {
            assert!(archived.is_named(&name), "{name}");
        }
        assert!(archived.is_named("sha256:aaaa"));
        assert!(!archived.is_named("tandem.local/busybox@sha256:bbbb"));
        assert!(!archived.is_named("tandem.local/other@sha256:aaaa"));
        assert!(!archived.is_named("tandem.local/busybox:2"));

        let pulled = busybox(&["tandem.local/busybox@sha256:cccc"]);
        assert_eq!(
            pulled.status_names(),
            ["tandem.local/busybox@sha256:cccc", "tandem.local/busybox:1"]
        );
        assert!(pulled.is_named("tandem.local/busybox@sha256:cccc"));
        assert!(pulled.is_named("tandem.local/busybox@sha256:aaaa"));
    }
}
