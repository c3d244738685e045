//! `tandem up`'s Linux node on real containers: decides whether this machine can run the `cri`
//! runtime, starts the private containerd with the node's pod CIDR and the local images, and
//! builds the agent's [`CriRuntime`] on it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tandem_agent::NodeConfig;
use tandem_agent::runtime::Runtime;
use tandem_agent::runtime::cri::containerd::{
    self, Containerd, ContainerdOptions, image_archives_in,
};
use tandem_agent::runtime::cri::{CriConfig, CriRuntime};

/// A Linux node running on containerd.
pub struct CriNode {
    pub runtime: Arc<dyn Runtime>,
    /// The same runtime as `runtime`, for what only the CRI backend offers (benchmark figures).
    pub cri: Arc<CriRuntime>,
    pub containerd: Containerd,
    pub description: String,
}

/// `target/images` for a binary in `target/<profile>/`.
pub fn default_images_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("images"))
}

/// Why this machine cannot run real containers, or `None` when it can.
pub fn unavailable_reason(images_dir: &Path) -> Option<String> {
    if let Err(e) = containerd::check_prerequisites() {
        return Some(e.to_string());
    }
    let missing: Vec<String> = image_archives_in(images_dir)
        .into_iter()
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "the local images are not built ({} missing; run scripts/build-images.sh)",
            missing.join(", ")
        ));
    }
    None
}

/// Starts containerd for `node` under `node_dir` and the runtime on it. The node's capacity
/// becomes this machine's (CPUs and memory), since its pods really run here.
pub async fn start(
    node: &mut NodeConfig,
    node_dir: &Path,
    images_dir: &Path,
    kube: kube::Client,
) -> anyhow::Result<CriNode> {
    let ctrd = start_containerd(node, node_dir, images_dir, None).await?;
    start_runtime(node, node_dir, ctrd, kube).await
}

/// The first half of [`start`]: containerd, with the pods' bridge in place, so that what must
/// listen on the bridge (cluster DNS, the API for pods) can start before the node's pods do.
/// `routed_cluster_cidr` is the cluster's pod range when other hosts' pods are routed here (the
/// pod network between hosts): pods' traffic to it is not masqueraded.
pub async fn start_containerd(
    node: &NodeConfig,
    node_dir: &Path,
    images_dir: &Path,
    routed_cluster_cidr: Option<&str>,
) -> anyhow::Result<Containerd> {
    let cidr = node
        .pod_cidr
        .clone()
        .context("the CRI node needs a pod CIDR")?;
    let mut opts = ContainerdOptions::new(node_dir.join("containerd"), cidr);
    opts.image_archives = image_archives_in(images_dir);
    opts.registries = node.registries.clone();
    opts.cluster_cidr = routed_cluster_cidr.map(str::to_string);
    Containerd::start(opts)
        .await
        .context("cannot start containerd")
}

/// The second half of [`start`]: the CRI runtime on a started containerd.
pub async fn start_runtime(
    node: &mut NodeConfig,
    node_dir: &Path,
    ctrd: Containerd,
    kube: kube::Client,
) -> anyhow::Result<CriNode> {
    let cidr = ctrd.pod_cidr();
    if let Ok(cpus) = std::thread::available_parallelism() {
        node.capacity.cpu_millis = i64::try_from(cpus.get()).unwrap_or(1) * 1000;
    }
    if let Some(mem) = host_memory_bytes() {
        node.capacity.memory = mem;
    }
    let config = CriConfig {
        node_name: node.name.clone(),
        node_ip: node.internal_ip,
        allocatable: node.allocatable(),
        pods_dir: node_dir.join("pods"),
        logs_dir: node_dir.join("logs"),
        cgroup_parent: format!("/{}", ctrd.cgroup_root()),
        cluster_dns: node.cluster_dns.clone(),
        cluster_domain: node.cluster_domain.clone(),
        resolv_conf: PathBuf::from("/etc/resolv.conf"),
        parallel_image_pulls: node.parallel_image_pulls,
    };
    let runtime = match CriRuntime::start(ctrd.client(), kube, config).await {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ctrd.shutdown(false).await;
            return Err(e).context("cannot connect to containerd's CRI");
        }
    };
    // Air-gapped images: archives dropped here are imported now and whenever they appear.
    let images = node_dir.join("images");
    if let Err(e) = std::fs::create_dir_all(&images) {
        tracing::warn!(dir = %images.display(), "cannot create the node's images directory: {e}");
    }
    tokio::spawn(tandem_agent::runtime::cri::images_dir::watch(
        images.clone(),
        ctrd.importer(),
        Arc::downgrade(&runtime),
    ));
    tokio::spawn(tandem_agent::runtime::cri::gc_loop::run(
        Arc::downgrade(&runtime),
        node.image_gc,
        node.image_gc_period,
        ctrd.base_dir().join("root"),
        // The project's own images cannot be pulled again: pinned, as k3s pins its imports.
        vec![
            containerd::PAUSE_IMAGE.to_string(),
            containerd::BUSYBOX_IMAGE.to_string(),
        ],
    ));
    let description = format!(
        "cri runtime: {} (real containers; pod network {cidr} on bridge {}; image archives from {})",
        runtime.version(),
        ctrd.bridge_name(),
        images.display()
    );
    Ok(CriNode {
        runtime: runtime.clone(),
        cri: runtime,
        containerd: ctrd,
        description,
    })
}

/// `MemTotal` of /proc/meminfo in bytes.
fn host_memory_bytes() -> Option<i64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
