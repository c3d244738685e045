//! The `emulated` runtime: no processes, a data-driven model of the container lifecycle (pull
//! time from image size and bandwidth, start delay, run time and exit code, probe outcomes,
//! hooks) read from [`super::behaviour`], with an OS personality ([`personality`]).
//!
//! The Windows personality refuses what a Windows node refuses, with the messages a real node
//! gives: an image (or pause image) built for a Windows build process isolation cannot run on
//! the host, `hostNetwork` without HostProcess, memory-backed emptyDir, privileged containers;
//! it never OOM-kills (Windows pages instead). The Linux personality refuses Windows images
//! (no matching platform) and OOM-kills at `oom-after`. Both are data: one [`Personality`] per
//! OS, with its golden cases beside it.
//!
//! Everything it reports says it is emulated: `containerRuntimeVersion` is
//! `emulated://tandem-<version>`, container ids are `emulated://<hex>`, probe outputs say the
//! outcome came from emulation data. It never claims a process ran.
//!
//! State (sandboxes, containers, images) is kept in memory and, when a state directory is
//! given, written to `emulated-runtime.json` after every change, so an agent restart re-adopts
//! running pods: a restarted agent sees the same containers, started at the same times.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::behaviour::{Behaviour, HookBehaviour, StageFile};
use super::{
    ContainerInfo, ContainerState, ContainerStats, Credential, HookKind, ImageInfo, NodeResources,
    NodeStats, ProbeKind, ProbeResult, PullOutcome, Runtime, RuntimeError, RuntimeStats,
    SandboxConfig, SandboxInfo, StreamRequest,
};
use crate::clock::Clock;
use crate::config::NodeOs;
use crate::podnet::EmulatedNetwork;
use crate::windows::WindowsVersion;

mod exec;
mod network;
pub mod personality;

pub use personality::Personality;

/// The pause image every node has.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Settings of an emulated runtime.
#[derive(Clone, Debug)]
pub struct EmulatedConfig {
    pub os: NodeOs,
    pub windows_build: Option<WindowsVersion>,
    /// Pull bandwidth in bytes per second.
    pub bandwidth: u64,
    pub pause_image: String,
    pub preloaded_images: Vec<String>,
    pub stages: StageFile,
    /// Directory for `emulated-runtime.json`; `None` keeps state in memory only.
    pub state_dir: Option<PathBuf>,
    /// The node's name, as stand-ins and exec sessions name it.
    pub node_name: String,
    /// The node's pod network: when set, every sandbox with an address gets a network
    /// namespace on it and running containers' ports are answered by a stand-in.
    pub network: Option<Arc<EmulatedNetwork>>,
    /// The node's DNS settings, for the resolver of exec sessions.
    pub dns: crate::dns_config::NodeDns,
}

impl EmulatedConfig {
    /// A node of `os` (and Windows build) named `node`, with nothing beyond the defaults: the
    /// pause image [`PAUSE_IMAGE`] only, 100 MB/s pulls, no stage file, state in memory, no pod
    /// network, the default DNS settings. Callers set the fields they need on the result.
    pub fn new(os: NodeOs, windows_build: Option<WindowsVersion>) -> EmulatedConfig {
        EmulatedConfig {
            os,
            windows_build,
            bandwidth: 100_000_000,
            pause_image: PAUSE_IMAGE.into(),
            preloaded_images: Vec::new(),
            stages: StageFile::default(),
            state_dir: None,
            node_name: "node".into(),
            network: None,
            dns: Default::default(),
        }
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    info: ContainerInfo,
    behaviour: Behaviour,
    /// When a stop was requested and the grace it was given.
    #[serde(default)]
    stop: Option<(u64, u64)>,
    /// What the container's network stand-in answers and probes check.
    #[serde(default)]
    net: network::ContainerNet,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct State {
    sandboxes: BTreeMap<String, SandboxInfo>,
    containers: BTreeMap<String, Record>,
    images: BTreeMap<String, ImageInfo>,
    next_id: u64,
    /// Per sandbox: its hostname and resolver settings, for exec sessions.
    #[serde(default)]
    extras: BTreeMap<String, exec::SandboxExtra>,
}

impl State {
    /// A container's record; the runtime's `NotFound` for an unknown id.
    fn container(&self, id: &str) -> Result<&Record, RuntimeError> {
        self.containers
            .get(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))
    }

    /// [`State::container`], to change it.
    fn container_mut(&mut self, id: &str) -> Result<&mut Record, RuntimeError> {
        self.containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.to_string()))
    }
}

/// The emulated backend. Cheap to share behind an `Arc`.
pub struct EmulatedRuntime {
    config: EmulatedConfig,
    clock: Clock,
    state: Mutex<State>,
    /// Serialises pulls, as the kubelet's default `serializeImagePulls: true` does.
    pull_lock: tokio::sync::Mutex<()>,
    /// The streaming server of exec and port-forward sessions, started at the first one.
    streaming: tokio::sync::OnceCell<crate::streaming::StreamingServer>,
    /// When this runtime was created: the emulated node's start for its stats.
    started: SystemTime,
    /// The CPU counters of the declared usage model ([`crate::stats::emulated`]).
    usage: Mutex<crate::stats::emulated::Integrator>,
}

fn hex_id(parts: &[&str]) -> String {
    let mut out = String::with_capacity(64);
    for salt in 0u8..4 {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        parts.hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

fn unix_us(t: SystemTime) -> u64 {
    u64::try_from(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros(),
    )
    .unwrap_or(u64::MAX)
}

fn from_us(us: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_micros(us)
}

impl EmulatedRuntime {
    /// Creates the runtime, loading earlier state from the state directory when there is one.
    pub fn new(config: EmulatedConfig, clock: Clock) -> Result<EmulatedRuntime, RuntimeError> {
        let mut state = match &config.state_dir {
            Some(dir) => load_state(&dir.join("emulated-runtime.json"))?,
            None => State::default(),
        };
        let preloaded: Vec<String> = std::iter::once(config.pause_image.clone())
            .chain(config.preloaded_images.iter().cloned())
            .collect();
        for image in preloaded {
            let info = ImageInfo {
                name: image.clone(),
                id: format!("sha256:{}", hex_id(&["image", &image])),
                size_bytes: config.stages.image_size(&image),
                repo_digests: Vec::new(),
            };
            state.images.entry(image).or_insert(info);
        }
        Ok(EmulatedRuntime {
            config,
            clock,
            state: Mutex::new(state),
            pull_lock: tokio::sync::Mutex::new(()),
            streaming: tokio::sync::OnceCell::new(),
            started: clock.now(),
            usage: Mutex::new(Default::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn save(&self, state: &State) -> Result<(), RuntimeError> {
        let Some(dir) = &self.config.state_dir else {
            return Ok(());
        };
        let io = |e: std::io::Error| RuntimeError::State(Arc::new(e));
        std::fs::create_dir_all(dir).map_err(io)?;
        let bytes = serde_json::to_vec(state).map_err(|e| io(std::io::Error::other(e)))?;
        let tmp = dir.join("emulated-runtime.json.tmp");
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, dir.join("emulated-runtime.json")).map_err(io)
    }

    /// What the node's OS refuses and how its containers end.
    fn personality(&self) -> &'static Personality {
        Personality::of(self.config.os)
    }

    /// Advances a record to `now`: a running container whose run time is over has exited; on
    /// Linux one past `oom-after` was OOM-killed; a stopping one has stopped.
    fn refresh(&self, rec: &mut Record, now: SystemTime) -> bool {
        if rec.info.state != ContainerState::Running {
            return false;
        }
        let Some(started) = rec.info.started_at else {
            return false;
        };
        let (at, state) = self.exit_plan(rec, started);
        match at {
            Some(at) if at <= now => {
                rec.info.state = state;
                rec.info.finished_at = Some(at);
                rec.info.next_change = None;
                self.stop_standin(&rec.info);
                true
            }
            Some(at) => {
                rec.info.next_change = Some(self.clock.instant(at));
                false
            }
            None => {
                rec.info.next_change = None;
                false
            }
        }
    }

    /// When a running container will exit on its own (or by a pending stop), and how.
    fn exit_plan(&self, rec: &Record, started: SystemTime) -> (Option<SystemTime>, ContainerState) {
        let b = &rec.behaviour;
        let mut plan: (Option<SystemTime>, ContainerState) = (None, ContainerState::Running);
        let mut consider = |at: SystemTime, state: ContainerState| {
            if plan.0.is_none_or(|p| at < p) {
                plan = (Some(at), state);
            }
        };
        if let Some(run) = b.run_for {
            let reason = if b.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            };
            consider(
                started + run,
                ContainerState::Exited {
                    exit_code: b.exit_code,
                    reason: reason.into(),
                    message: None,
                },
            );
        }
        if let (Some(oom), true) = (b.oom_after, self.personality().oom_kills) {
            consider(
                started + oom,
                ContainerState::Exited {
                    exit_code: 137,
                    reason: "OOMKilled".into(),
                    message: None,
                },
            );
        }
        if let Some((at_us, grace_us)) = rec.stop {
            let at = from_us(at_us);
            let grace = Duration::from_micros(grace_us);
            if b.stop_delay <= grace {
                consider(
                    at + b.stop_delay,
                    ContainerState::Exited {
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: None,
                    },
                );
            } else {
                // Killed at the end of the grace period.
                consider(
                    at + grace,
                    ContainerState::Exited {
                        exit_code: self.personality().killed_exit_code,
                        reason: "Error".into(),
                        message: None,
                    },
                );
            }
        }
        plan
    }

    fn new_id(state: &mut State, parts: &[&str]) -> String {
        state.next_id += 1;
        let n = state.next_id.to_string();
        let mut all: Vec<&str> = parts.to_vec();
        all.push(&n);
        hex_id(&all)
    }
}

fn load_state(path: &Path) -> Result<State, RuntimeError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            RuntimeError::State(Arc::new(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                e,
            )))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(RuntimeError::State(Arc::new(e))),
    }
}

#[async_trait]
impl Runtime for EmulatedRuntime {
    fn version(&self) -> String {
        format!("emulated://tandem-{}", env!("CARGO_PKG_VERSION"))
    }

    fn emulated(&self) -> bool {
        true
    }

    async fn run_sandbox(&self, config: &SandboxConfig) -> Result<SandboxInfo, RuntimeError> {
        let personality = self.personality();
        if let Some(message) = personality.sandbox_refusal(&config.pod).or_else(|| {
            personality.pause_image_refusal(self.config.windows_build, &self.config.pause_image)
        }) {
            return Err(RuntimeError::Refused { message });
        }
        let id = {
            let mut state = self.lock();
            if let Some(existing) = state
                .sandboxes
                .values()
                .find(|s| s.pod_uid == config.pod_uid)
            {
                return Ok(existing.clone());
            }
            Self::new_id(&mut state, &["sandbox", &config.pod_uid])
        };
        self.attach_network(&id, config.ip.as_deref()).await?;
        let mut state = self.lock();
        state.extras.insert(
            id.clone(),
            exec::SandboxExtra::of(&config.pod, &self.config.dns),
        );
        let info = SandboxInfo {
            id: id.clone(),
            pod_uid: config.pod_uid.clone(),
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            ip: config.ip.clone(),
            ready: true,
            created_at: self.clock.now(),
        };
        state.sandboxes.insert(id, info.clone());
        self.save(&state)?;
        Ok(info)
    }

    async fn remove_sandbox(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        if let Some(net) = &self.config.network {
            net.detach(sandbox_id).await;
        }
        let mut state = self.lock();
        state.sandboxes.remove(sandbox_id);
        state.extras.remove(sandbox_id);
        state
            .containers
            .retain(|_, r| r.info.sandbox_id != sandbox_id);
        self.save(&state)
    }

    fn list_sandboxes(&self) -> Vec<SandboxInfo> {
        self.lock().sandboxes.values().cloned().collect()
    }

    fn image_status(&self, image: &str) -> Option<ImageInfo> {
        let state = self.lock();
        state
            .images
            .get(image)
            .or_else(|| state.images.values().find(|i| i.is_named(image)))
            .cloned()
    }

    async fn pull_image(
        &self,
        image: &str,
        _auth: Option<&Credential>,
    ) -> Result<PullOutcome, RuntimeError> {
        let asked = tokio::time::Instant::now();
        if let Some(message) = self.personality().pull_refusal(image) {
            return Err(RuntimeError::Refused { message });
        }
        let _serial = self.pull_lock.lock().await;
        if let Some(info) = self.image_status(image) {
            return Ok(PullOutcome {
                image: info,
                took: Duration::ZERO,
                took_including_waiting: asked.elapsed(),
            });
        }
        let size = self.config.stages.image_size(image);
        let secs = size.max(0) as f64 / self.config.bandwidth.max(1) as f64;
        let took = Duration::from_secs_f64(secs);
        tokio::time::sleep(took).await;
        let info = ImageInfo {
            name: image.to_string(),
            id: format!("sha256:{}", hex_id(&["image", image])),
            size_bytes: size,
            repo_digests: Vec::new(),
        };
        let mut state = self.lock();
        state.images.insert(image.to_string(), info.clone());
        self.save(&state)?;
        Ok(PullOutcome {
            image: info,
            took,
            took_including_waiting: asked.elapsed(),
        })
    }

    fn list_images(&self) -> Vec<ImageInfo> {
        self.lock().images.values().cloned().collect()
    }

    async fn prepare_volumes(&self, pod: &Pod) -> Result<(), RuntimeError> {
        match self.personality().volume_refusal(pod) {
            Some(message) => Err(RuntimeError::Refused { message }),
            None => Ok(()),
        }
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        pod: &Pod,
        container: &Container,
        attempt: u32,
    ) -> Result<ContainerInfo, RuntimeError> {
        let personality = self.personality();
        let image = container.image.as_deref().unwrap_or_default();
        if let Some(message) = personality
            .container_refusal(container)
            .or_else(|| personality.image_refusal(self.config.windows_build, image))
        {
            return Err(RuntimeError::Refused { message });
        }
        let is_init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|ics| ics.iter().any(|c| c.name == container.name));
        let behaviour = self
            .config
            .stages
            .behaviour(pod, &container.name, is_init)
            .map_err(|message| RuntimeError::Refused {
                message: format!("emulated behaviour: {message}"),
            })?;
        let image = container.image.clone().unwrap_or_default();
        let mut state = self.lock();
        let sandbox = state
            .sandboxes
            .get(sandbox_id)
            .cloned()
            .ok_or_else(|| RuntimeError::NotFound(format!("sandbox {sandbox_id}")))?;
        let image_id = state
            .images
            .get(&image)
            .map(|i| i.id.clone())
            .unwrap_or_else(|| format!("sha256:{}", hex_id(&["image", &image])));
        let id = format!(
            "emulated://{}",
            Self::new_id(
                &mut state,
                &["container", &sandbox.pod_uid, &container.name]
            )
        );
        let info = ContainerInfo {
            id: id.clone(),
            sandbox_id: sandbox_id.to_string(),
            pod_uid: sandbox.pod_uid.clone(),
            name: container.name.clone(),
            attempt,
            image,
            image_id,
            state: ContainerState::Created,
            started_at: None,
            finished_at: None,
            next_change: None,
        };
        state.containers.insert(
            id,
            Record {
                info: info.clone(),
                behaviour,
                stop: None,
                net: network::ContainerNet::of(container),
            },
        );
        self.save(&state)?;
        Ok(info)
    }

    async fn start_container(&self, container_id: &str) -> Result<(), RuntimeError> {
        let delay = {
            let state = self.lock();
            let rec = state.container(container_id)?;
            rec.behaviour.start_delay
        };
        tokio::time::sleep(delay).await;
        let (started, net) = {
            let mut state = self.lock();
            let rec = state.container_mut(container_id)?;
            rec.info.state = ContainerState::Running;
            rec.info.started_at = Some(self.clock.now());
            let started = rec.info.clone();
            let net = rec.net.clone();
            self.save(&state)?;
            (started, net)
        };
        self.start_standin(&started, &net).await;
        Ok(())
    }

    async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let wait_until = {
            let mut state = self.lock();
            let now = self.clock.now();
            let rec = state.container_mut(container_id)?;
            self.refresh(rec, now);
            match rec.info.state {
                ContainerState::Running => {
                    if rec.stop.is_none() {
                        rec.stop = Some((
                            unix_us(now),
                            u64::try_from(grace.as_micros()).unwrap_or(u64::MAX),
                        ));
                    }
                    self.refresh(rec, now);
                    rec.info.next_change
                }
                ContainerState::Created => {
                    rec.info.state = ContainerState::Exited {
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: None,
                    };
                    rec.info.finished_at = Some(now);
                    None
                }
                ContainerState::Exited { .. } => None,
            }
        };
        if let Some(at) = wait_until {
            tokio::time::sleep_until(at).await;
        }
        let mut state = self.lock();
        let now = self.clock.now();
        if let Some(rec) = state.containers.get_mut(container_id) {
            self.refresh(rec, now);
        }
        self.save(&state)
    }

    fn container_status(&self, container_id: &str) -> Result<ContainerInfo, RuntimeError> {
        let mut state = self.lock();
        let now = self.clock.now();
        let rec = state.container_mut(container_id)?;
        let changed = self.refresh(rec, now);
        let info = rec.info.clone();
        if changed {
            self.save(&state)?;
        }
        Ok(info)
    }

    fn list_containers(&self, sandbox_id: &str) -> Vec<ContainerInfo> {
        let mut state = self.lock();
        let now = self.clock.now();
        let mut out = Vec::new();
        for rec in state
            .containers
            .values_mut()
            .filter(|r| r.info.sandbox_id == sandbox_id)
        {
            self.refresh(rec, now);
            out.push(rec.info.clone());
        }
        out
    }

    async fn probe(&self, container_id: &str, kind: ProbeKind) -> ProbeResult {
        let modelled = {
            let state = self.lock();
            state
                .containers
                .get(container_id)
                .is_some_and(|rec| match kind {
                    ProbeKind::Startup => rec.behaviour.startup.is_some(),
                    ProbeKind::Liveness => rec.behaviour.liveness.is_some(),
                    ProbeKind::Readiness => rec.behaviour.readiness.is_some(),
                })
        };
        if !modelled && let Some(result) = self.probe_network(container_id, kind).await {
            return result;
        }
        let state = self.lock();
        let Some(rec) = state.containers.get(container_id) else {
            return ProbeResult::Failure(format!("container {container_id} not found"));
        };
        let b = match kind {
            ProbeKind::Startup => rec.behaviour.startup,
            ProbeKind::Liveness => rec.behaviour.liveness,
            ProbeKind::Readiness => rec.behaviour.readiness,
        };
        let elapsed = rec
            .info
            .started_at
            .map(|s| self.clock.since(s))
            .unwrap_or_default();
        match b {
            Some(b) if !b.passes(elapsed) => ProbeResult::Failure(format!(
                "emulated probe failure (set by {}{})",
                super::behaviour::PREFIX,
                kind.title().to_ascii_lowercase()
            )),
            _ => ProbeResult::Success,
        }
    }

    fn implicit_probes(&self, container_id: &str) -> Vec<ProbeKind> {
        let state = self.lock();
        let Some(rec) = state.containers.get(container_id) else {
            return Vec::new();
        };
        let b = &rec.behaviour;
        [
            (ProbeKind::Startup, b.startup),
            (ProbeKind::Liveness, b.liveness),
            (ProbeKind::Readiness, b.readiness),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|_| k))
        .collect()
    }

    async fn run_hook(&self, container_id: &str, hook: HookKind) -> Result<(), RuntimeError> {
        let b = {
            let state = self.lock();
            let rec = state.container(container_id)?;
            match hook {
                HookKind::PostStart => rec.behaviour.post_start,
                HookKind::PreStop => rec.behaviour.pre_stop,
            }
        };
        match b {
            HookBehaviour::Pass => Ok(()),
            HookBehaviour::Takes(d) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
            HookBehaviour::Fail => Err(RuntimeError::Refused {
                message: "emulated hook failure (set by emulated.tandem.dev annotations)".into(),
            }),
        }
    }

    fn log_path(&self, container_id: &str) -> Result<PathBuf, RuntimeError> {
        self.network_log_path(container_id)
            .ok_or(RuntimeError::Emulated("reading container logs"))
    }

    async fn exec_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        self.emulated_exec_url(container_id, req).await
    }

    async fn attach_url(
        &self,
        _container_id: &str,
        _req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        Err(RuntimeError::Emulated("attach"))
    }

    async fn port_forward_url(
        &self,
        sandbox_id: &str,
        _ports: &[u16],
    ) -> Result<String, RuntimeError> {
        // The streaming server reads the ports from the client's query, as the kubelet's does.
        self.emulated_port_forward_url(sandbox_id).await
    }

    fn stats(&self) -> RuntimeStats {
        let mut state = self.lock();
        let now = self.clock.now();
        let mut running = 0;
        for rec in state.containers.values_mut() {
            self.refresh(rec, now);
            if rec.info.state == ContainerState::Running {
                running += 1;
            }
        }
        RuntimeStats {
            sandboxes: state.sandboxes.len(),
            running_containers: running,
            images: state.images.len(),
            image_bytes: state.images.values().map(|i| i.size_bytes).sum(),
        }
    }

    /// The declared usage of the running containers ([`crate::stats::emulated`]): what the
    /// pods declare now, CPU integrated at that rate since each container started.
    async fn container_stats(
        &self,
        declared: &crate::stats::emulated::DeclaredPods,
    ) -> Result<Vec<ContainerStats>, RuntimeError> {
        let now = self.clock.now();
        let mut state = self.lock();
        let mut usage = self
            .usage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut out = Vec::new();
        for rec in state.containers.values_mut() {
            self.refresh(rec, now);
            let (ContainerState::Running, Some(started)) = (&rec.info.state, rec.info.started_at)
            else {
                continue;
            };
            let pod = declared.get(&rec.info.pod_uid);
            let rate = pod
                .and_then(|p| p.containers.get(&rec.info.name))
                .copied()
                .unwrap_or_default();
            let since = pod.map_or(started, |p| p.since);
            let cpu = usage.cpu(&rec.info.id, started, rate.cpu_nano_cores, since, now);
            out.push(ContainerStats {
                id: rec.info.id.clone(),
                pod_uid: rec.info.pod_uid.clone(),
                name: rec.info.name.clone(),
                started_at: Some(started),
                timestamp: now,
                cpu_core_nanos: cpu,
                cpu_nano_cores: Some(rate.cpu_nano_cores),
                memory_working_set_bytes: rate.memory_bytes,
                memory_usage_bytes: Some(rate.memory_bytes),
            });
        }
        usage.retain(&out.iter().map(|c| c.id.as_str()).collect());
        Ok(out)
    }

    /// The node's reservations (`capacity − allocatable`) used all the time since the runtime
    /// started, plus its containers (and those that are gone).
    async fn node_stats(
        &self,
        node: &NodeResources,
        containers: &[ContainerStats],
    ) -> Result<NodeStats, RuntimeError> {
        let now = containers
            .iter()
            .map(|c| c.timestamp)
            .max()
            .unwrap_or_else(|| self.clock.now());
        let reserved = node.capacity.saturating_sub(node.allocatable);
        let reserved_rate = u64::try_from(reserved.cpu_millis)
            .unwrap_or(0)
            .saturating_mul(1_000_000);
        let retired = self
            .usage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retired();
        let cpu = containers.iter().fold(
            crate::stats::emulated::integrate(reserved_rate, self.started, now)
                .saturating_add(retired),
            |sum, c| sum.saturating_add(c.cpu_core_nanos),
        );
        let rate = containers.iter().fold(reserved_rate, |sum, c| {
            sum.saturating_add(c.cpu_nano_cores.unwrap_or(0))
        });
        let working_set = containers
            .iter()
            .fold(u64::try_from(reserved.memory).unwrap_or(0), |sum, c| {
                sum.saturating_add(c.memory_working_set_bytes)
            });
        let capacity = u64::try_from(node.capacity.memory).unwrap_or(0);
        Ok(NodeStats {
            start_time: self.started,
            timestamp: now,
            cpu_core_nanos: cpu,
            cpu_nano_cores: Some(rate),
            memory_working_set_bytes: working_set,
            memory_available_bytes: Some(capacity.saturating_sub(working_set)),
            memory_usage_bytes: Some(working_set),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::{self, OS_MISMATCH_MESSAGE};

    fn runtime(os: NodeOs, build: Option<WindowsVersion>) -> EmulatedRuntime {
        EmulatedRuntime::new(EmulatedConfig::new(os, build), Clock::new()).expect("runtime")
    }

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod fixture")
    }

    /// A pod `p` with one container `app` and these other spec fields.
    fn app_pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "app"}]);
        pod(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
    }

    async fn sandbox(rt: &EmulatedRuntime, p: &Pod) -> Result<SandboxInfo, RuntimeError> {
        rt.run_sandbox(&SandboxConfig {
            pod_uid: "u1".into(),
            namespace: "default".into(),
            name: "p".into(),
            pod: p.clone(),
            ip: None,
        })
        .await
    }

    fn container(image: &str) -> Container {
        Container {
            name: "app".into(),
            image: Some(image.into()),
            ..Container::default()
        }
    }

    #[tokio::test]
    async fn windows_2022_host_refuses_ltsc2019_image_with_the_hcs_message() {
        let rt = runtime(NodeOs::Windows, Some(windows::SERVER_2022));
        let p = app_pod(serde_json::json!({}));
        let sb = sandbox(&rt, &p).await.expect("sandbox");
        let err = rt
            .create_container(
                &sb.id,
                &p,
                &container("mcr.microsoft.com/windows/servercore:ltsc2019"),
                0,
            )
            .await
            .expect_err("must refuse");
        assert_eq!(err.to_string(), OS_MISMATCH_MESSAGE);
        assert!(
            rt.create_container(
                &sb.id,
                &p,
                &container("mcr.microsoft.com/windows/servercore:ltsc2022"),
                0
            )
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn windows_2025_host_runs_2022_images_but_2019_host_refuses_2022() {
        let rt = runtime(NodeOs::Windows, Some(windows::SERVER_2025));
        let p = app_pod(serde_json::json!({}));
        let sb = sandbox(&rt, &p).await.expect("sandbox");
        assert!(
            rt.create_container(&sb.id, &p, &container("x/app:ltsc2022"), 0)
                .await
                .is_ok()
        );
        let rt = runtime(NodeOs::Windows, Some(windows::SERVER_2019));
        let sb = sandbox(&rt, &p).await.expect("sandbox");
        assert!(
            rt.create_container(&sb.id, &p, &container("x/app:ltsc2022"), 0)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn windows_refuses_host_network_without_host_process_and_memory_empty_dir() {
        let rt = runtime(NodeOs::Windows, Some(windows::SERVER_2019));
        let hn = app_pod(serde_json::json!({"hostNetwork": true}));
        let err = sandbox(&rt, &hn).await.expect_err("refused");
        assert!(
            err.to_string().contains("hostNetwork is not supported"),
            "{err}"
        );
        let hp = app_pod(serde_json::json!({
            "hostNetwork": true,
            "securityContext": {"windowsOptions": {"hostProcess": true}}
        }));
        assert!(sandbox(&rt, &hp).await.is_ok());
        let mem = app_pod(serde_json::json!({
            "volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}]
        }));
        let err = rt.prepare_volumes(&mem).await.expect_err("refused");
        assert!(
            err.to_string()
                .starts_with("MountVolume.SetUp failed for volume \"cache\""),
            "{err}"
        );
        assert!(
            runtime(NodeOs::Linux, None)
                .prepare_volumes(&mem)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn windows_pause_image_of_another_build_fails_the_sandbox() {
        let mut rt = runtime(NodeOs::Windows, Some(windows::SERVER_2022));
        rt.config.pause_image =
            "mcr.microsoft.com/oss/kubernetes/pause:3.9-windows-ltsc2019".into();
        let p = app_pod(serde_json::json!({}));
        let err = sandbox(&rt, &p).await.expect_err("refused");
        assert!(err.to_string().contains(OS_MISMATCH_MESSAGE), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn windows_never_oom_kills_but_linux_does() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p", "annotations": {"emulated.tandem.dev/oom-after": "5s"}},
            "spec": {"containers": [{"name": "app"}]}}),
        );
        for (os, build, expect_oom) in [
            (NodeOs::Linux, None, true),
            (NodeOs::Windows, Some(windows::SERVER_2019), false),
        ] {
            let rt = runtime(os, build);
            let sb = sandbox(&rt, &p).await.expect("sandbox");
            let c = rt
                .create_container(&sb.id, &p, &container("busybox"), 0)
                .await
                .expect("create");
            rt.start_container(&c.id).await.expect("start");
            tokio::time::advance(Duration::from_secs(6)).await;
            let st = rt.container_status(&c.id).expect("status").state;
            let oom = matches!(&st, ContainerState::Exited { reason, exit_code: 137, .. } if reason == "OOMKilled");
            assert_eq!(oom, expect_oom, "{os:?}: {st:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pull_time_follows_image_size_and_bandwidth_and_present_images_are_instant() {
        let rt = runtime(NodeOs::Windows, Some(windows::SERVER_2019));
        let out = rt
            .pull_image("mcr.microsoft.com/windows/servercore:ltsc2019", None)
            .await
            .expect("pull");
        assert_eq!(out.took, Duration::from_secs(30), "3 GB at 100 MB/s");
        let again = rt
            .pull_image("mcr.microsoft.com/windows/servercore:ltsc2019", None)
            .await
            .expect("pull");
        assert_eq!(again.took, Duration::ZERO);
        // Pinned by the digest name node status lists: already present, not pulled again.
        let present = rt
            .list_images()
            .into_iter()
            .find(|i| i.name.ends_with("servercore:ltsc2019"))
            .expect("pulled image listed");
        let pinned = &present.status_names()[0];
        assert!(pinned.contains("@sha256:"), "{pinned}");
        assert_eq!(rt.image_status(pinned), Some(present.clone()));
        let by_digest = rt.pull_image(pinned, None).await.expect("pull by digest");
        assert_eq!(by_digest.took, Duration::ZERO);
        let linux = runtime(NodeOs::Linux, None);
        assert!(
            linux
                .pull_image("mcr.microsoft.com/windows/nanoserver:ltsc2022", None)
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn state_file_survives_a_new_runtime_instance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mk = || {
            EmulatedRuntime::new(
                EmulatedConfig {
                    bandwidth: 1,
                    state_dir: Some(dir.path().to_path_buf()),
                    ..EmulatedConfig::new(NodeOs::Linux, None)
                },
                Clock::new(),
            )
            .expect("runtime")
        };
        let rt = mk();
        let p = app_pod(serde_json::json!({}));
        let sb = sandbox(&rt, &p).await.expect("sandbox");
        let c = rt
            .create_container(&sb.id, &p, &container("busybox"), 0)
            .await
            .expect("create");
        rt.start_container(&c.id).await.expect("start");
        drop(rt);
        let rt = mk();
        assert_eq!(rt.list_sandboxes().len(), 1);
        let cs = rt.list_containers(&sb.id);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].state, ContainerState::Running);
        assert!(rt.version().starts_with("emulated://tandem-"));
    }
}
