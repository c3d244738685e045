//! `tandem images ls|import|rm`: a node's images, as `k3s ctr images` and `crictl images` give
//! them, for a node that runs real containers on tandem's private containerd. The node is found
//! by its directory: `--state-dir` (a `tandem agent`'s), or `<data-dir>/nodes/<node>` (a
//! `tandem up` node; `--node` may be left out when only one node runs containerd).
//!
//! `import` copies the archive into the node's images directory (`<node dir>/images`), which the
//! running node imports within seconds, and again at every start; `ls` and `rm` talk CRI to the
//! node's containerd.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tandem_agent::runtime::cri::archives::archive_kind;
use tandem_agent::runtime::cri::client::CriClient;

#[derive(clap::Args, Debug)]
pub struct ImagesArgs {
    /// The `tandem up` data directory whose node to use.
    #[arg(long, default_value = ".tandem")]
    pub data_dir: PathBuf,
    /// The node (default: the only node of the data dir that runs containerd).
    #[arg(long)]
    pub node: Option<String>,
    /// A node's state directory instead (`tandem agent --state-dir`).
    #[arg(long, conflicts_with_all = ["node"])]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ImagesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ImagesCommand {
    /// Lists the node's images: name, image ID and size.
    Ls,
    /// Copies an image archive (`.tar`, `.tar.gz`, `.tar.zst`; OCI or docker) into the node's
    /// images directory, from where the node imports it.
    Import { archive: PathBuf },
    /// Removes images (names or IDs) from the node.
    Rm {
        #[arg(required = true)]
        images: Vec<String>,
    },
}

pub async fn run(args: &ImagesArgs) -> anyhow::Result<()> {
    let node_dir = node_dir(args)?;
    match &args.command {
        ImagesCommand::Ls => {
            let client = connect(&node_dir).await?;
            let images = client.list_images(None).await.context("ListImages")?;
            println!("{:<60} {:<20} {:>12}", "IMAGE", "IMAGE ID", "SIZE");
            for image in images {
                let id = image.id.strip_prefix("sha256:").unwrap_or(&image.id);
                let short: String = id.chars().take(13).collect();
                let names = if image.repo_tags.is_empty() {
                    image.repo_digests.clone()
                } else {
                    image.repo_tags.clone()
                };
                for name in names {
                    println!("{name:<60} {short:<20} {:>12}", human(image.size));
                }
            }
        }
        ImagesCommand::Import { archive } => {
            if archive_kind(archive).is_none() {
                bail!(
                    "{} is not an image archive (.tar, .tar.gz, .tgz, .tar.zst, .tzst)",
                    archive.display()
                );
            }
            let name = archive
                .file_name()
                .context("the archive path has no file name")?;
            let dir = node_dir.join("images");
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            // Copied under a hidden name, then renamed: the node never reads half a file.
            let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
            std::fs::copy(archive, &partial)
                .with_context(|| format!("cannot copy {}", archive.display()))?;
            let target = dir.join(name);
            std::fs::rename(&partial, &target)
                .with_context(|| format!("cannot move the archive to {}", target.display()))?;
            println!(
                "{} copied to {}; the node imports it within seconds (`tandem images ls` shows it)",
                archive.display(),
                target.display()
            );
        }
        ImagesCommand::Rm { images } => {
            let client = connect(&node_dir).await?;
            for image in images {
                client
                    .remove_image(image)
                    .await
                    .with_context(|| format!("cannot remove {image}"))?;
                println!("removed {image}");
            }
        }
    }
    Ok(())
}

/// The containerd socket of a node directory (see `runtime::cri::containerd`'s layout).
fn socket(node_dir: &Path) -> PathBuf {
    node_dir
        .join("containerd")
        .join("run")
        .join("containerd.sock")
}

async fn connect(node_dir: &Path) -> anyhow::Result<CriClient> {
    let socket = socket(node_dir);
    CriClient::connect(&socket).await.with_context(|| {
        format!(
            "the node's containerd does not answer on {}",
            socket.display()
        )
    })
}

fn node_dir(args: &ImagesArgs) -> anyhow::Result<PathBuf> {
    if let Some(dir) = &args.state_dir {
        return Ok(dir.clone());
    }
    let nodes = args.data_dir.join("nodes");
    if let Some(node) = &args.node {
        return Ok(nodes.join(node));
    }
    let with_containerd: Vec<PathBuf> = std::fs::read_dir(&nodes)
        .with_context(|| format!("no nodes in {}", nodes.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| socket(p).exists())
        .collect();
    match with_containerd.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no node in {} runs containerd", nodes.display()),
        _ => bail!(
            "several nodes in {} run containerd: name one with --node",
            nodes.display()
        ),
    }
}

/// A size as crictl prints it (`1.23MB`).
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}B")
    } else {
        format!("{value:.3}{}", UNITS[unit])
    }
}
