//! The `Runtime` contract: what every backend of the node agent's runtime trait does, written
//! against the trait only, as `crates/store/tests/contract.rs` is for the stores.
//!
//! Each check in [`suite`] is generic over a [`Harness`], which starts one backend; the
//! `contract_tests!` macro turns every check into a `#[tokio::test]` for a harness. The emulated
//! backend always runs. The CRI backend runs on a private containerd started as
//! `cri_containerd.rs` starts it (root, containerd, runc and the CNI plugins of
//! `scripts/install-deps.sh`, the images `scripts/build-images.sh` builds); without them its
//! checks are skipped with the reason, or fail when `CI` is set.
//!
//! One pod means the same to both backends: a container carries a real command and the
//! emulation annotations for the same behaviour (`sh -c 'exit 3'` and
//! `emulated.tandem.dev/exit-code.<name>: 3`).
//!
//! Where the backends differ by design, the harness states it in a [`Design`] and the check
//! asserts each side: the emulated backend runs no process, so it has no log files, no attach,
//! and no port-forward without a pod network; it keeps nothing of a stopped sandbox (the trait's
//! default `stop_sandbox` removes it); and it "pulls" a present image in place, where containerd
//! asks the image's registry again. The trait has no container removal: containers go with
//! their sandbox. One departure from the trait's own contract ("a missing id is `NotFound`") is
//! asserted as it stands rather than hidden: the emulated `log_path` answers an unknown
//! container with `RuntimeError::Emulated`, as it answers every log request without a pod
//! network.
//!
//! The CRI backend reads the `kubernetes` Service for every container's environment; its
//! harness gives it an API server that answers 404 to everything ([`empty_api`]).

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use tandem_agent::clock::Clock;
use tandem_agent::runtime::cri::backend::{CriConfig, CriRuntime};
use tandem_agent::runtime::cri::containerd::{
    BUSYBOX_IMAGE, Containerd, ContainerdOptions, check_prerequisites, image_archives_in,
};
use tandem_agent::runtime::emulated::{EmulatedConfig, EmulatedRuntime};
use tandem_agent::runtime::{
    ContainerInfo, ContainerState, HookKind, NodeResources, ProbeKind, ProbeResult, Runtime,
    RuntimeError, SandboxConfig, SandboxInfo, StreamRequest,
};
use tandem_agent::{NodeOs, Resources};

/// What a backend does where backends differ by design.
#[derive(Clone, Copy, Debug)]
struct Design {
    /// [`Runtime::emulated`]: no process runs.
    emulated: bool,
    /// How container ids begin (`containerID` in pod status).
    id_scheme: &'static str,
    /// Whether `stop_sandbox` keeps the sandbox (not ready) and its exited containers, for
    /// `kubectl logs` of a finished pod; otherwise it removes them, as the trait's default does.
    stop_keeps_sandbox: bool,
    /// Whether containers have log files with their output.
    logs: bool,
    /// Whether attach and port-forward give streaming URLs.
    attach_and_port_forward: bool,
    /// Whether pulling an image that is present succeeds without a registry.
    pull_present_without_registry: bool,
}

/// Starts one backend for one check.
trait Harness: Sized + Send + Sync + 'static {
    const DESIGN: Design;
    /// Starts the backend, or says why it cannot run on this machine.
    async fn start() -> Result<Self, String>;
    /// The runtime under test.
    fn runtime(&self) -> Arc<dyn Runtime>;
    /// A new runtime over the same backend state, as a restarted agent gets.
    async fn reopen(&self) -> Arc<dyn Runtime>;
    /// Stops what `start` started (also after a failed check).
    async fn stop(&self);
}

/// The image both backends have without a pull.
const IMAGE: &str = BUSYBOX_IMAGE;

struct EmulatedHarness {
    dir: tempfile::TempDir,
    runtime: Arc<EmulatedRuntime>,
}

impl EmulatedHarness {
    fn open(dir: &Path) -> Arc<EmulatedRuntime> {
        let config = EmulatedConfig {
            preloaded_images: vec![IMAGE.to_string()],
            state_dir: Some(dir.to_path_buf()),
            ..EmulatedConfig::new(NodeOs::Linux, None)
        };
        Arc::new(EmulatedRuntime::new(config, Clock::new()).unwrap())
    }
}

impl Harness for EmulatedHarness {
    const DESIGN: Design = Design {
        emulated: true,
        id_scheme: "emulated://",
        stop_keeps_sandbox: false,
        logs: false,
        attach_and_port_forward: false,
        pull_present_without_registry: true,
    };

    async fn start() -> Result<Self, String> {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Self::open(dir.path());
        Ok(EmulatedHarness { dir, runtime })
    }

    fn runtime(&self) -> Arc<dyn Runtime> {
        self.runtime.clone()
    }

    async fn reopen(&self) -> Arc<dyn Runtime> {
        Self::open(self.dir.path())
    }

    async fn stop(&self) {}
}

struct CriHarness {
    _dir: tempfile::TempDir,
    containerd: Containerd,
    config: CriConfig,
    runtime: Arc<CriRuntime>,
}

impl CriHarness {
    /// A client of [`empty_api`]: the checks' pods need nothing from the API but the lookup of
    /// the `kubernetes` Service every container's environment makes.
    async fn kube() -> kube::Client {
        let url = format!("http://{}", empty_api().await);
        kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    /// Builds (or reuses, when up to date) the image archives in `target/images`.
    fn build_images() -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = root.join("target/images");
        let status = std::process::Command::new(root.join("scripts/build-images.sh"))
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "scripts/build-images.sh failed: {status}");
        out
    }
}

impl Harness for CriHarness {
    const DESIGN: Design = Design {
        emulated: false,
        id_scheme: "containerd://",
        stop_keeps_sandbox: true,
        logs: true,
        attach_and_port_forward: true,
        pull_present_without_registry: false,
    };

    async fn start() -> Result<Self, String> {
        check_prerequisites().map_err(|e| e.to_string())?;
        let images = Self::build_images();
        // Short, so the socket path stays well inside the 107-byte limit.
        let dir = tempfile::Builder::new()
            .prefix("tdm-rc-")
            .tempdir_in("/tmp")
            .unwrap();
        // A pod CIDR of its own per test process, away from cri_containerd.rs's 10.251.x.
        let cidr = format!("10.252.{}.0/24", std::process::id() % 250);
        let mut options = ContainerdOptions::new(dir.path().join("ctrd"), cidr);
        options.image_archives = image_archives_in(&images);
        let containerd = Containerd::start(options).await.unwrap();
        let config = CriConfig {
            node_name: "contract".into(),
            node_ip: IpAddr::V4(containerd.gateway()),
            allocatable: Resources {
                cpu_millis: 1000,
                memory: 1 << 30,
                ephemeral_storage: 1 << 30,
                pods: 10,
            },
            pods_dir: dir.path().join("pods"),
            logs_dir: dir.path().join("logs"),
            cgroup_parent: format!("/{}", containerd.cgroup_root()),
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            parallel_image_pulls: 1,
        };
        let started =
            CriRuntime::start(containerd.client(), Self::kube().await, config.clone()).await;
        let runtime = match started {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = containerd.shutdown(true).await;
                panic!("the CRI runtime did not start: {e}");
            }
        };
        Ok(CriHarness {
            _dir: dir,
            containerd,
            config,
            runtime,
        })
    }

    fn runtime(&self) -> Arc<dyn Runtime> {
        self.runtime.clone()
    }

    async fn reopen(&self) -> Arc<dyn Runtime> {
        CriRuntime::start(
            self.containerd.client(),
            Self::kube().await,
            self.config.clone(),
        )
        .await
        .unwrap()
    }

    async fn stop(&self) {
        if let Err(e) = self.containerd.shutdown(true).await {
            panic!("containerd did not shut down cleanly: {e}");
        }
    }
}

/// An API server that has nothing: every request gets a 404 `Status` (the `kubernetes` Service
/// is then absent, and events are dropped). Returns its address.
async fn empty_api() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request head is enough; the answer closes the connection.
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"not found","reason":"NotFound","code":404}"#;
                let response = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

/// Pods, containers and waiting, shared by the checks.
mod fixture {
    use super::*;

    /// A container that runs until it is stopped and then exits 0 (the emulated default). It
    /// and [`IGNORES_TERM`] print `ready` once their signal handling is in place.
    pub const RUNS: &str = "runs";
    /// A container that ignores SIGTERM, so a stop kills it at the end of the grace period.
    pub const IGNORES_TERM: &str = "ignores-term";
    /// A container that prints [`OUTPUT`] and exits 3.
    pub const FAILS: &str = "fails";
    /// A container that prints [`OUTPUT`] and exits 0.
    pub const COMPLETES: &str = "completes";
    /// What [`FAILS`] and [`COMPLETES`] print.
    pub const OUTPUT: &str = "runtime-contract-output";

    /// A pod with one container of each kind, named `name`, with its own uid.
    pub fn pod(name: &str) -> Pod {
        let uid = format!("{:08x}-{name}", std::process::id());
        let shell = |script: &str| serde_json::json!(["sh", "-c", script]);
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "namespace": "contract",
                "uid": uid,
                "annotations": {
                    format!("emulated.tandem.dev/stop-delay.{IGNORES_TERM}"): "1h",
                    format!("emulated.tandem.dev/exit-code.{FAILS}"): "3",
                    format!("emulated.tandem.dev/exit-code.{COMPLETES}"): "0",
                },
            },
            "spec": {
                "enableServiceLinks": false,
                "automountServiceAccountToken": false,
                "containers": [
                    {"name": RUNS, "image": IMAGE,
                     "command": shell("trap 'exit 0' TERM; echo ready; while true; do sleep 1; done")},
                    {"name": IGNORES_TERM, "image": IMAGE,
                     "command": shell("trap '' TERM; echo ready; while true; do sleep 1; done")},
                    {"name": FAILS, "image": IMAGE,
                     "command": shell(&format!("echo {OUTPUT}; exit 3"))},
                    {"name": COMPLETES, "image": IMAGE,
                     "command": shell(&format!("echo {OUTPUT}"))},
                ],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
            },
        }))
        .unwrap()
    }

    pub fn sandbox_config(pod: &Pod) -> SandboxConfig {
        SandboxConfig {
            pod_uid: pod.metadata.uid.clone().unwrap(),
            namespace: pod.metadata.namespace.clone().unwrap(),
            name: pod.metadata.name.clone().unwrap(),
            pod: pod.clone(),
            // The emulated backend takes the agent's address; containerd's CNI gives its own.
            ip: Some("10.252.255.2".into()),
        }
    }

    pub fn container<'a>(pod: &'a Pod, name: &str) -> &'a Container {
        let spec = pod.spec.as_ref().unwrap();
        spec.containers.iter().find(|c| c.name == name).unwrap()
    }

    /// Volumes, then the sandbox.
    pub async fn run_sandbox(rt: &dyn Runtime, pod: &Pod) -> SandboxInfo {
        rt.prepare_volumes(pod).await.unwrap();
        rt.run_sandbox(&sandbox_config(pod)).await.unwrap()
    }

    /// Creates and starts container `name` of `pod`.
    pub async fn start(rt: &dyn Runtime, sandbox: &str, pod: &Pod, name: &str) -> ContainerInfo {
        let created = rt
            .create_container(sandbox, pod, container(pod, name), 0)
            .await
            .unwrap();
        rt.start_container(&created.id).await.unwrap();
        rt.container_status(&created.id).unwrap()
    }

    /// Polls `f` until it returns something, for at most 20 s (a real runtime's status cache
    /// is refreshed every second).
    pub async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for the container to have exited; returns its exit code and reason.
    pub async fn exit_of(rt: &dyn Runtime, id: &str) -> (i32, String, ContainerInfo) {
        eventually(&format!("{id} to exit"), || {
            let info = rt.container_status(id).unwrap();
            match &info.state {
                ContainerState::Exited {
                    exit_code, reason, ..
                } => Some((*exit_code, reason.clone(), info.clone())),
                _ => None,
            }
        })
        .await
    }

    /// Waits until a container that prints `ready` has printed it, where containers have logs:
    /// a signal sent before would find the shell without its trap.
    pub async fn ready<H: Harness>(rt: &dyn Runtime, id: &str) {
        if H::DESIGN.logs {
            eventually(&format!("{id} to be ready"), || {
                let text = std::fs::read_to_string(rt.log_path(id).ok()?).ok()?;
                text.lines().any(|l| l.ends_with(" ready")).then_some(())
            })
            .await;
        }
    }

    pub fn is_not_found<T: std::fmt::Debug>(r: &Result<T, RuntimeError>) -> bool {
        matches!(r, Err(RuntimeError::NotFound(_)))
    }
}

/// The checks, each generic over the harness.
mod suite {
    use super::fixture::*;
    use super::*;

    pub async fn the_runtime_names_itself_and_says_whether_it_is_emulated<H: Harness>(h: &H) {
        let rt = h.runtime();
        let version = rt.version();
        let (scheme, v) = version.split_once("://").unwrap();
        assert!(!scheme.is_empty() && !v.is_empty(), "{version}");
        assert_eq!(rt.emulated(), H::DESIGN.emulated);
    }

    pub async fn a_sandbox_runs_is_listed_and_goes_with_its_containers<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("sandbox");
        let before = rt.stats().sandboxes;
        let sb = run_sandbox(&*rt, &pod).await;
        assert_eq!(
            (sb.pod_uid.as_str(), sb.namespace.as_str(), sb.name.as_str()),
            (pod.metadata.uid.as_deref().unwrap(), "contract", "sandbox")
        );
        assert!(sb.ready, "{sb:?}");
        assert!(!sb.id.is_empty());
        let listed = rt.list_sandboxes();
        assert!(
            listed.iter().any(|s| s.id == sb.id && s.ready),
            "{listed:?}"
        );
        assert_eq!(rt.stats().sandboxes, before + 1);

        let c = start(&*rt, &sb.id, &pod, RUNS).await;
        rt.remove_sandbox(&sb.id).await.unwrap();
        assert!(!rt.list_sandboxes().iter().any(|s| s.id == sb.id));
        assert!(rt.list_containers(&sb.id).is_empty());
        assert!(is_not_found(&rt.container_status(&c.id)));
        assert_eq!(rt.stats().sandboxes, before);
        // Removal is idempotent.
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn a_stopped_sandbox_is_kept_or_removed_by_design<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("stopped");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, COMPLETES).await;
        exit_of(&*rt, &c.id).await;
        rt.stop_sandbox(&sb.id).await.unwrap();
        let kept = rt.list_sandboxes().into_iter().find(|s| s.id == sb.id);
        if H::DESIGN.stop_keeps_sandbox {
            let kept = kept.unwrap();
            assert!(!kept.ready, "a stopped sandbox is not ready: {kept:?}");
            let containers = rt.list_containers(&sb.id);
            assert!(containers.iter().any(|x| x.id == c.id), "{containers:?}");
            assert!(rt.container_status(&c.id).is_ok());
        } else {
            assert_eq!(kept, None);
            assert!(rt.list_containers(&sb.id).is_empty());
        }
        rt.remove_sandbox(&sb.id).await.unwrap();
        assert!(!rt.list_sandboxes().iter().any(|s| s.id == sb.id));
    }

    pub async fn a_container_is_created_then_runs_once_started<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("created");
        let sb = run_sandbox(&*rt, &pod).await;
        let running_before = rt.stats().running_containers;
        let created = rt
            .create_container(&sb.id, &pod, container(&pod, RUNS), 2)
            .await
            .unwrap();
        assert!(
            created.id.starts_with(H::DESIGN.id_scheme),
            "{}",
            created.id
        );
        assert_eq!(created.state, ContainerState::Created);
        assert_eq!(
            (
                created.name.as_str(),
                created.attempt,
                created.sandbox_id.as_str(),
                created.pod_uid.as_str(),
                created.image.as_str()
            ),
            (RUNS, 2, sb.id.as_str(), sb.pod_uid.as_str(), IMAGE)
        );
        assert_eq!(created.started_at, None);
        assert_eq!(
            rt.container_status(&created.id).unwrap().state,
            ContainerState::Created
        );

        rt.start_container(&created.id).await.unwrap();
        let running = rt.container_status(&created.id).unwrap();
        assert_eq!(running.state, ContainerState::Running);
        assert!(running.started_at.is_some(), "{running:?}");
        assert_eq!(running.finished_at, None);
        let listed = rt.list_containers(&sb.id);
        assert!(
            listed
                .iter()
                .any(|c| c.id == created.id && c.state == ContainerState::Running),
            "{listed:?}"
        );
        assert_eq!(rt.stats().running_containers, running_before + 1);
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn a_container_exits_with_its_exit_code<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("exits");
        let sb = run_sandbox(&*rt, &pod).await;
        for (name, code, reason) in [(FAILS, 3, "Error"), (COMPLETES, 0, "Completed")] {
            let c = start(&*rt, &sb.id, &pod, name).await;
            let (exit_code, why, info) = exit_of(&*rt, &c.id).await;
            assert_eq!((exit_code, why.as_str()), (code, reason), "{name}");
            // Both times are reported; containerd may stamp the start of a process that exits at
            // once a little after its end, so their order is not part of the contract.
            assert!(
                info.started_at.is_some() && info.finished_at.is_some(),
                "{info:?}"
            );
        }
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn a_stop_gives_the_grace_period_then_kills<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("stops");
        let sb = run_sandbox(&*rt, &pod).await;

        let polite = start(&*rt, &sb.id, &pod, RUNS).await;
        ready::<H>(&*rt, &polite.id).await;
        let asked = Instant::now();
        rt.stop_container(&polite.id, Duration::from_secs(20))
            .await
            .unwrap();
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{:?}",
            asked.elapsed()
        );
        let (code, reason, _) = exit_of(&*rt, &polite.id).await;
        assert_eq!((code, reason.as_str()), (0, "Completed"));

        let stubborn = start(&*rt, &sb.id, &pod, IGNORES_TERM).await;
        ready::<H>(&*rt, &stubborn.id).await;
        let asked = Instant::now();
        rt.stop_container(&stubborn.id, Duration::from_secs(1))
            .await
            .unwrap();
        let took = asked.elapsed();
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(10),
            "{took:?}"
        );
        let (code, reason, _) = exit_of(&*rt, &stubborn.id).await;
        assert_eq!((code, reason.as_str()), (137, "Error"), "SIGKILL");
        // Stopping an exited container changes nothing.
        rt.stop_container(&stubborn.id, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(exit_of(&*rt, &stubborn.id).await.0, 137);
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn unknown_ids_are_not_found<H: Harness>(h: &H) {
        let rt = h.runtime();
        let id = format!("{}0123456789abcdef", H::DESIGN.id_scheme);
        assert!(is_not_found(&rt.container_status(&id)));
        assert!(is_not_found(
            &rt.stop_container(&id, Duration::from_secs(1)).await
        ));
        let exec = rt.exec_url(&id, &StreamRequest::default()).await;
        assert!(is_not_found(&exec), "{exec:?}");
        assert!(rt.list_containers("0123456789abcdef").is_empty());
        let log = rt.log_path(&id);
        if H::DESIGN.logs {
            assert!(is_not_found(&log), "{log:?}");
        } else {
            // Not NotFound: the emulated backend answers every log request alike.
            assert!(matches!(log, Err(RuntimeError::Emulated(_))), "{log:?}");
        }
        let missing = rt.run_hook(&id, HookKind::PreStop).await;
        assert!(is_not_found(&missing), "{missing:?}");
    }

    pub async fn present_images_are_found_and_absent_ones_are_not<H: Harness>(h: &H) {
        let rt = h.runtime();
        let image = rt.image_status(IMAGE).unwrap();
        assert!(image.id.starts_with("sha256:"), "{image:?}");
        assert!(
            image.is_named(IMAGE) || image.name.ends_with(IMAGE),
            "{image:?}"
        );
        assert!(rt.list_images().iter().any(|i| i.id == image.id));
        assert_eq!(
            rt.image_status(&image.id).map(|i| i.id),
            Some(image.id.clone())
        );
        assert_eq!(rt.image_status("tandem.local/absent:1"), None);
        let stats = rt.stats();
        assert!(stats.images >= 1 && stats.image_bytes > 0, "{stats:?}");

        let pulled = rt.pull_image(IMAGE, None).await;
        if H::DESIGN.pull_present_without_registry {
            let pulled = pulled.unwrap();
            assert_eq!(pulled.image.id, image.id);
            assert_eq!(
                pulled.took,
                Duration::ZERO,
                "a present image is not transferred"
            );
        } else {
            // containerd resolves the reference at the registry even for a present image, and
            // there is none here; the agent's IfNotPresent policy does not pull.
            let e = pulled.unwrap_err();
            assert!(e.to_string().contains(IMAGE), "{e}");
            assert_eq!(rt.image_status(IMAGE).map(|i| i.id), Some(image.id));
        }
    }

    pub async fn probes_and_hooks_without_a_spec_pass<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("probes");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, RUNS).await;
        assert!(rt.implicit_probes(&c.id).is_empty());
        for kind in [
            ProbeKind::Startup,
            ProbeKind::Liveness,
            ProbeKind::Readiness,
        ] {
            assert_eq!(
                rt.probe(&c.id, kind).await,
                ProbeResult::Success,
                "{kind:?}"
            );
        }
        rt.run_hook(&c.id, HookKind::PostStart).await.unwrap();
        rt.run_hook(&c.id, HookKind::PreStop).await.unwrap();
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn logs_hold_the_output_where_a_process_runs<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("logs");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, COMPLETES).await;
        exit_of(&*rt, &c.id).await;
        if H::DESIGN.logs {
            let text = eventually("the log to hold the output", || {
                let path = rt.log_path(&c.id).ok()?;
                let text = std::fs::read_to_string(path).ok()?;
                text.contains(OUTPUT).then_some(text)
            })
            .await;
            // The CRI log format: `<RFC 3339 time> <stream> <P|F> <text>`.
            let line = text.lines().find(|l| l.ends_with(OUTPUT)).unwrap();
            let fields: Vec<&str> = line.splitn(4, ' ').collect();
            assert_eq!(fields[1..], ["stdout", "F", OUTPUT], "{line}");
        } else {
            let log = rt.log_path(&c.id);
            assert!(matches!(log, Err(RuntimeError::Emulated(_))), "{log:?}");
        }
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn streaming_urls_are_single_use<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("streams");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, RUNS).await;
        let req = StreamRequest {
            command: vec!["echo".into(), "hi".into()],
            stdout: true,
            ..StreamRequest::default()
        };
        let first = rt.exec_url(&c.id, &req).await.unwrap();
        let second = rt.exec_url(&c.id, &req).await.unwrap();
        assert!(first.starts_with("http://"), "{first}");
        assert_ne!(first, second, "every session gets a URL of its own");

        let attach = StreamRequest {
            stdout: true,
            ..StreamRequest::default()
        };
        let attached = rt.attach_url(&c.id, &attach).await;
        let forwarded = rt.port_forward_url(&sb.id, &[]).await;
        if H::DESIGN.attach_and_port_forward {
            assert!(attached.unwrap().starts_with("http://"));
            assert!(forwarded.unwrap().starts_with("http://"));
        } else {
            assert!(
                matches!(attached, Err(RuntimeError::Emulated(_))),
                "{attached:?}"
            );
            assert!(
                matches!(forwarded, Err(RuntimeError::Emulated(_))),
                "{forwarded:?}"
            );
        }
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn usage_is_reported_for_running_containers<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("usage");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, RUNS).await;
        let declared = Default::default();
        // containerd lists a container's figures once it has taken them.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (listed, mine) = loop {
            let listed = rt.container_stats(&declared).await.unwrap();
            if let Some(mine) = listed.iter().find(|s| s.id == c.id).cloned() {
                break (listed, mine);
            }
            assert!(
                Instant::now() < deadline,
                "no figures for {}: {listed:?}",
                c.id
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(
            (mine.pod_uid.as_str(), mine.name.as_str()),
            (sb.pod_uid.as_str(), RUNS)
        );
        assert_eq!(mine.started_at, c.started_at);
        let node = NodeResources {
            capacity: Resources {
                cpu_millis: 2000,
                memory: 2 << 30,
                ..Resources::default()
            },
            allocatable: Resources {
                cpu_millis: 1000,
                memory: 1 << 30,
                ..Resources::default()
            },
        };
        let stats = rt.node_stats(&node, &listed).await.unwrap();
        assert!(stats.timestamp >= stats.start_time, "{stats:?}");
        assert!(stats.memory_working_set_bytes > 0, "{stats:?}");
        rt.remove_sandbox(&sb.id).await.unwrap();
    }

    pub async fn a_restarted_agent_finds_sandboxes_and_running_containers<H: Harness>(h: &H) {
        let rt = h.runtime();
        let pod = pod("readopted");
        let sb = run_sandbox(&*rt, &pod).await;
        let c = start(&*rt, &sb.id, &pod, RUNS).await;
        let again = h.reopen().await;
        let sandboxes = again.list_sandboxes();
        let found = sandboxes.iter().find(|s| s.id == sb.id).unwrap();
        assert_eq!(
            (found.pod_uid.as_str(), found.ip.is_some(), found.ready),
            (sb.pod_uid.as_str(), true, true)
        );
        let containers = again.list_containers(&sb.id);
        let same = containers.iter().find(|x| x.id == c.id).unwrap();
        assert_eq!(same.state, ContainerState::Running);
        assert_eq!((same.name.as_str(), same.attempt), (RUNS, 0));
        let at = |t: Option<std::time::SystemTime>| {
            t.unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        assert_eq!(at(same.started_at), at(c.started_at), "the same start time");
        drop(again);
        rt.remove_sandbox(&sb.id).await.unwrap();
    }
}

/// Why a harness's checks are skipped, or a failure when `CI` is set.
fn unavailable(reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "the backend is not available: {reason}"
    );
    eprintln!("skipped: {reason}");
}

/// Generates, for each backend, a module with one `#[tokio::test]` per contract check. A check
/// runs in a task of its own so that the harness is stopped even when the check fails.
macro_rules! contract_tests {
    ($($module:ident: $harness:ty),+; $checks:tt) => {
        $(
            mod $module {
                use super::*;

                contract_tests!(@checks $harness; $checks);
            }
        )+
    };
    (@checks $harness:ty; [$($name:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = match <$harness as Harness>::start().await {
                    Ok(h) => Arc::new(h),
                    Err(reason) => return unavailable(&reason),
                };
                let h = harness.clone();
                let outcome =
                    tokio::spawn(async move { suite::$name::<$harness>(&*h).await }).await;
                harness.stop().await;
                if let Err(e) = outcome {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        )*
    };
}

contract_tests!(emulated: EmulatedHarness, cri: CriHarness; [
    the_runtime_names_itself_and_says_whether_it_is_emulated,
    a_sandbox_runs_is_listed_and_goes_with_its_containers,
    a_stopped_sandbox_is_kept_or_removed_by_design,
    a_container_is_created_then_runs_once_started,
    a_container_exits_with_its_exit_code,
    a_stop_gives_the_grace_period_then_kills,
    unknown_ids_are_not_found,
    present_images_are_found_and_absent_ones_are_not,
    probes_and_hooks_without_a_spec_pass,
    logs_hold_the_output_where_a_process_runs,
    streaming_urls_are_single_use,
    usage_is_reported_for_running_containers,
    a_restarted_agent_finds_sandboxes_and_running_containers,
]);
