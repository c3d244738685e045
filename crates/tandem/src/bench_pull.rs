//! `tandem bench pull` (issue 34): image pulls on tandem's private containerd from a registry
//! on loopback (Debian's `docker-registry`, plain HTTP, filled by `skopeo` with images made
//! from the project's busybox archive, each with a random layer of its own so every pull
//! transfers data). Figures, for a fresh containerd each: N pulls one at a time (the kubelet's
//! default `--serialize-image-pulls`) and N at once (`--serialize-image-pulls=false`), then
//! how long the runtime takes to find an image already present (`IfNotPresent`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use tandem_agent::runtime::cri::containerd::{
    Containerd, ContainerdOptions, PAUSE_IMAGE, image_archives_in,
};
use tokio::time::Instant;

use crate::bench::percentile;
use crate::cri_node;

/// Flags of `tandem bench pull`.
#[derive(Args)]
pub struct PullBench {
    /// Images to pull in each round.
    #[arg(long, default_value_t = 4)]
    images: usize,
    /// Size of each image's own random layer, in MiB.
    #[arg(long, default_value_t = 16)]
    layer_mib: usize,
    /// Where `scripts/build-images.sh` put the local OCI images (default: `target/images`).
    #[arg(long)]
    images_dir: Option<PathBuf>,
}

/// The registry child, killed when dropped.
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn run(b: PullBench) -> anyhow::Result<()> {
    if b.images == 0 || b.images > 64 {
        bail!("--images must be between 1 and 64");
    }
    let images_dir = b
        .images_dir
        .clone()
        .or_else(cri_node::default_images_dir)
        .unwrap_or_else(|| PathBuf::from("target/images"));
    if let Some(why) = cri_node::unavailable_reason(&images_dir) {
        bail!("tandem bench pull runs a real containerd, which this machine cannot: {why}");
    }
    let work = tempfile::Builder::new()
        .prefix("tandem-bench-pull-")
        .tempdir()
        .context("cannot create a temp dir")?;
    let (registry, addr) = start_registry(work.path())?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/distinct-image.py");
    let mut refs = Vec::new();
    for round in ["serial", "parallel"] {
        for i in 0..b.images {
            let name = format!("bench.local/pull-{round}-{i}:1");
            let archive = work.path().join(format!("{round}-{i}.tar"));
            let out = Command::new("python3")
                .arg(&script)
                .arg(images_dir.join("busybox.tar"))
                .arg(&archive)
                .arg(&name)
                .arg((b.layer_mib * 1024 * 1024).to_string())
                .output()
                .context("python3 scripts/distinct-image.py")?;
            if !out.status.success() {
                bail!(
                    "distinct-image.py: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let dest = format!("{addr}/bench/pull-{round}-{i}:1");
            let out = Command::new("skopeo")
                .args(["copy", "--quiet", "--dest-tls-verify=false"])
                .arg(format!("oci-archive:{}", archive.display()))
                .arg(format!("docker://{dest}"))
                .output()
                .context("skopeo (scripts/install-deps.sh installs it)")?;
            if !out.status.success() {
                bail!("skopeo copy: {}", String::from_utf8_lossy(&out.stderr));
            }
            refs.push((round, dest));
        }
    }
    println!(
        "tandem bench pull: {} images per round, each with a {} MiB layer of its own, from docker-registry on {addr} (HTTP, loopback)",
        b.images, b.layer_mib
    );
    for (round, parallel) in [("serial", 1usize), ("parallel", b.images)] {
        let images: Vec<String> = refs
            .iter()
            .filter(|(r, _)| *r == round)
            .map(|(_, d)| d.clone())
            .collect();
        let base = work.path().join(format!("containerd-{round}"));
        let mut opts = ContainerdOptions::new(&base, "10.252.0.0/24");
        opts.image_archives = image_archives_in(&images_dir);
        opts.pause_image = PAUSE_IMAGE.to_string();
        let ctrd = Containerd::start(opts)
            .await
            .context("cannot start containerd")?;
        let result = pulls(&ctrd, &images, parallel).await;
        let _ = ctrd.shutdown(true).await;
        let (wall, each, present) = result?;
        let mut sorted = each.clone();
        sorted.sort();
        println!(
            "  {:<28} all {} pulled in {:>7.2}s; per pull including waiting p50 {:.2}s, max {:.2}s",
            if parallel == 1 {
                "one at a time (serialized):".to_string()
            } else {
                format!("{parallel} at once (parallel):")
            },
            images.len(),
            wall.as_secs_f64(),
            percentile(&sorted, 0.5).as_secs_f64(),
            percentile(&sorted, 1.0).as_secs_f64(),
        );
        if parallel == 1 {
            println!(
                "  image already present (ImageStatus, IfNotPresent): {:.2} ms",
                present.as_secs_f64() * 1000.0
            );
        }
    }
    drop(registry);
    Ok(())
}

/// Pulls `images` with at most `parallel` at once; the whole round's wall time, each pull's
/// time including waiting for its turn, and one ImageStatus of a pulled image.
async fn pulls(
    ctrd: &Containerd,
    images: &[String],
    parallel: usize,
) -> anyhow::Result<(Duration, Vec<Duration>, Duration)> {
    let client = ctrd.client();
    let permits = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for image in images {
        let (client, permits, image) = (client.clone(), permits.clone(), image.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            client
                .pull_image(&image, None, None)
                .await
                .with_context(|| format!("pull {image}"))?;
            anyhow::Ok(started.elapsed())
        }));
    }
    let mut each = Vec::new();
    for task in tasks {
        each.push(task.await.context("pull task")??);
    }
    let wall = started.elapsed();
    let asked = Instant::now();
    if let Some(first) = images.first() {
        client.image_status(first).await.context("ImageStatus")?;
    }
    Ok((wall, each, asked.elapsed()))
}

/// Starts `docker-registry` on a free loopback port, plain HTTP, storage under `dir`.
fn start_registry(dir: &Path) -> anyhow::Result<(Registry, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("no free port")?;
    let addr = format!("127.0.0.1:{port}");
    let storage = dir.join("registry");
    std::fs::create_dir_all(&storage)?;
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            storage.display()
        ),
    )?;
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("docker-registry (scripts/install-deps.sh installs it)")?;
    let registry = Registry(child);
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            return Ok((registry, addr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("docker-registry did not listen on {addr}")
}
