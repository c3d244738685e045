//! The `cri` backend's substrate against a real containerd: a private containerd in a temporary
//! directory with its own pod CIDR and bridge, driven through `CriClient` from image checks to a
//! pod serving HTTP, exec, a containerd restart that keeps the pod, and a teardown that leaves no
//! bridge or cgroups behind.
//!
//! Needs root and the packages `scripts/install-deps.sh` installs (the test command runs it). It
//! fails, rather than skips, when they are missing.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use tandem_agent::runtime::cri::client::{CriClient, CriError, Timeouts};
use tandem_agent::runtime::cri::containerd::{
    BUSYBOX_IMAGE, Containerd, ContainerdOptions, PAUSE_IMAGE, check_prerequisites,
    image_archives_in,
};
use tandem_agent::runtime::cri::proto::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ImageSpec,
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, PodSandboxState,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds (or reuses, when up to date) the image archives in `target/images`.
fn build_images() -> Result<PathBuf> {
    let root = repo_root();
    let out = root.join("target/images");
    let status = std::process::Command::new(root.join("scripts/build-images.sh"))
        .arg(&out)
        .status()
        .context("run scripts/build-images.sh")?;
    ensure!(status.success(), "scripts/build-images.sh failed: {status}");
    Ok(out)
}

/// A pod CIDR of its own per test process, away from the default 10.244.0.0/16.
fn unique_pod_cidr() -> String {
    format!("10.251.{}.0/24", 100 + std::process::id() % 150)
}

fn pod_namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

fn sandbox_config(containerd: &Containerd, uid: &str, log_dir: &Path) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web".into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "web".into(),
        log_directory: log_dir.display().to_string(),
        labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: containerd.pod_cgroup_parent(uid),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(pod_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn httpd_config() -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "httpd".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX_IMAGE.into(),
            ..Default::default()
        }),
        command: ["httpd", "-f", "-p", "8080", "-h", "/var/www"]
            .map(String::from)
            .to_vec(),
        log_path: "httpd/0.log".into(),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(pod_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `GET /` over plain HTTP/1.0, retried for a few seconds while the server comes up.
async fn http_get(ip: Ipv4Addr, port: u16) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let attempt = async {
            let mut stream = tokio::net::TcpStream::connect((ip, port)).await?;
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n").await?;
            let mut response = String::new();
            stream.read_to_string(&mut response).await?;
            anyhow::Ok(response)
        };
        match tokio::time::timeout(Duration::from_secs(2), attempt).await {
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(error)) if Instant::now() < deadline => eprintln!("retrying GET: {error:#}"),
            Ok(Err(error)) => return Err(error.context(format!("GET http://{ip}:{port}/"))),
            Err(_) => bail!("GET http://{ip}:{port}/ timed out"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn bridge_exists(name: &str) -> bool {
    std::process::Command::new("ip")
        .args(["link", "show", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn cgroup_dirs(cgroup_root: &str) -> Vec<PathBuf> {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    hierarchies
        .flatten()
        .map(|h| h.path().join(cgroup_root))
        .filter(|p| p.exists())
        .collect()
}

#[tokio::test]
async fn a_pod_serves_http_survives_a_containerd_restart_and_is_torn_down() -> Result<()> {
    check_prerequisites().map_err(|e| {
        anyhow!("{e} (this test needs root and the packages from scripts/install-deps.sh)")
    })?;
    let started = Instant::now();
    let images = build_images()?;
    // Short, so the socket path stays well inside the 107-byte limit.
    let dir = tempfile::Builder::new()
        .prefix("tdm-cri-")
        .tempdir_in("/tmp")?;
    let mut options = ContainerdOptions::new(dir.path().join("ctrd"), unique_pod_cidr());
    options.image_archives = image_archives_in(&images);
    let bridge = options.bridge_name.clone();
    let cgroup_root = options.cgroup_root.clone();

    let containerd = Containerd::start(options.clone())
        .await
        .context("start containerd")?;
    eprintln!("containerd ready after {:?}", started.elapsed());
    // Whatever happens, stop containerd and remove the pods before reporting.
    let (outcome, containerd) = exercise(containerd, &options, dir.path()).await;
    let shutdown = containerd.shutdown(true).await;
    outcome?;
    shutdown.context("shutdown")?;

    ensure!(
        !bridge_exists(&bridge),
        "bridge {bridge} is left after shutdown"
    );
    let left = cgroup_dirs(&cgroup_root);
    ensure!(left.is_empty(), "cgroups left after shutdown: {left:?}");
    ensure!(
        !dir.path().join("ctrd/run/containerd.sock.ttrpc").exists(),
        "the ttrpc socket is left after shutdown"
    );
    eprintln!("whole test took {:?}", started.elapsed());
    Ok(())
}

/// Runs the scenario; returns the containerd in charge at the end (it is restarted midway).
async fn exercise(
    containerd: Containerd,
    options: &ContainerdOptions,
    dir: &Path,
) -> (Result<()>, Containerd) {
    let client = containerd.client();
    let uid = format!("{:08x}-cri-test", std::process::id());
    let log_dir = dir.join("pods/default_web");
    let first = pod_lifecycle_first_half(&containerd, &client, &uid, &log_dir).await;
    let (sandbox_id, container_id, pod_ip) = match first {
        Ok(ids) => ids,
        Err(error) => return (Err(error), containerd),
    };

    // A second start on the same base dir stops the first containerd and adopts its pod.
    let restarted = match Containerd::start(options.clone()).await {
        Ok(restarted) => restarted,
        Err(error) => {
            return (
                Err(anyhow!(error).context("restart containerd")),
                containerd,
            );
        }
    };
    drop(containerd);
    let second = pod_lifecycle_second_half(
        &restarted,
        &restarted.client(),
        &sandbox_id,
        &container_id,
        pod_ip,
    )
    .await;
    (second, restarted)
}

async fn pod_lifecycle_first_half(
    containerd: &Containerd,
    client: &CriClient,
    uid: &str,
    log_dir: &Path,
) -> Result<(String, String, Ipv4Addr)> {
    let version = client.version().await?;
    ensure!(version.runtime_name == "containerd", "{version:?}");
    ensure!(version.runtime_api_version == "v1", "{version:?}");

    let busybox = client.image_status(BUSYBOX_IMAGE).await?;
    let busybox = busybox.context("the busybox image is not present")?;
    ensure!(
        busybox.repo_tags.iter().any(|t| t == BUSYBOX_IMAGE),
        "{busybox:?}"
    );
    ensure!(client.image_status(PAUSE_IMAGE).await?.is_some());
    ensure!(
        client
            .image_status("tandem.local/nonexistent:1")
            .await?
            .is_none()
    );

    // No registry here: a pull fails at once, with the runtime's reason.
    let pull_started = Instant::now();
    let bounded = client.clone().with_timeouts(Timeouts {
        short: Duration::from_secs(10),
        long: Duration::from_secs(20),
    });
    let error = bounded
        .pull_image("tandem.local/nonexistent:1", None, None)
        .await
        .expect_err("a pull without a registry fails");
    ensure!(
        matches!(error, CriError::Status { .. }),
        "the pull failed locally, not in containerd: {error}"
    );
    ensure!(
        error.to_string().contains("tandem.local/nonexistent:1"),
        "{error}"
    );
    ensure!(
        pull_started.elapsed() < Duration::from_secs(10),
        "the pull took {:?}",
        pull_started.elapsed()
    );

    let sandbox = sandbox_config(containerd, uid, log_dir);
    let sandbox_id = client.run_pod_sandbox(sandbox.clone(), "").await?;
    let status = client.pod_sandbox_status(&sandbox_id).await?;
    ensure!(
        status.state() == PodSandboxState::SandboxReady,
        "{status:?}"
    );
    let ip: Ipv4Addr = status
        .network
        .as_ref()
        .map(|n| n.ip.as_str())
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("the sandbox has no ipv4 address: {status:?}"))?;
    ensure!(
        containerd.pod_cidr_contains(ip) && ip != containerd.gateway(),
        "pod ip {ip} is not a pod address of {}",
        containerd.pod_cidr()
    );
    ensure!(
        !cgroup_dirs(containerd.cgroup_root()).is_empty(),
        "no cgroup under {}",
        containerd.cgroup_root()
    );

    // runc keeps its state under the base dir, not in the shared /run/containerd/runc.
    let runc_state = containerd.base_dir().join("runc/k8s.io").join(&sandbox_id);
    ensure!(
        runc_state.is_dir(),
        "no runc state at {}",
        runc_state.display()
    );

    let container_id = client
        .create_container(&sandbox_id, httpd_config(), sandbox)
        .await?;
    client.start_container(&container_id).await?;
    let page = http_get(ip, 8080).await?;
    // busybox httpd answers a 1.0 request with HTTP/1.1.
    ensure!(
        page.lines().next().is_some_and(|l| l.ends_with(" 200 OK")),
        "{page}"
    );
    ensure!(page.contains("tandem busybox"), "{page}");
    Ok((sandbox_id, container_id, ip))
}

async fn pod_lifecycle_second_half(
    containerd: &Containerd,
    client: &CriClient,
    sandbox_id: &str,
    container_id: &str,
    ip: Ipv4Addr,
) -> Result<()> {
    let sandboxes = client.list_pod_sandbox(None).await?;
    ensure!(
        sandboxes
            .iter()
            .any(|s| s.id == sandbox_id && s.state() == PodSandboxState::SandboxReady),
        "the pod was not adopted: {sandboxes:?}"
    );
    let page = http_get(ip, 8080).await?;
    ensure!(page.contains("tandem busybox"), "{page}");

    let exec = client
        .exec_sync(
            container_id,
            ["sh", "-c", "echo hi; exit 3"].map(String::from).to_vec(),
            Some(Duration::from_secs(10)),
        )
        .await?;
    ensure!(exec.exit_code == 3, "{exec:?}");
    ensure!(exec.stdout == b"hi\n", "{exec:?}");
    // pid: CONTAINER, so httpd is PID 1 rather than the pause loop.
    let init = client
        .exec_sync(
            container_id,
            ["cat", "/proc/1/cmdline"].map(String::from).to_vec(),
            Some(Duration::from_secs(10)),
        )
        .await?;
    ensure!(init.stdout.starts_with(b"httpd"), "{init:?}");

    let status = client.container_status(container_id).await?;
    ensure!(
        status.state() == ContainerState::ContainerRunning,
        "{status:?}"
    );
    ensure!(
        Path::new(&status.log_path).is_file(),
        "no container log at {:?}",
        status.log_path
    );
    let in_pod = client
        .list_containers(Some(ContainerFilter {
            pod_sandbox_id: sandbox_id.to_string(),
            ..Default::default()
        }))
        .await?;
    ensure!(in_pod.len() == 1, "{in_pod:?}");

    let stop_started = Instant::now();
    client
        .stop_container(container_id, Duration::from_secs(2))
        .await?;
    ensure!(
        stop_started.elapsed() < Duration::from_secs(10),
        "StopContainer took {:?}",
        stop_started.elapsed()
    );
    let status = client.container_status(container_id).await?;
    ensure!(
        status.state() == ContainerState::ContainerExited,
        "{status:?}"
    );

    client.stop_pod_sandbox(sandbox_id).await?;
    client.remove_pod_sandbox(sandbox_id).await?;
    ensure!(client.list_pod_sandbox(None).await?.is_empty());
    let gone = client.container_status(container_id).await;
    ensure!(gone.as_ref().is_err_and(CriError::is_not_found), "{gone:?}");
    ensure!(containerd.pid() != 0, "the restarted containerd has no pid");
    Ok(())
}
