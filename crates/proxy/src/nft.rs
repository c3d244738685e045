//! Running Debian's `nft` binary: one transaction per call (`nft -f -` applies a whole script
//! atomically or not at all), as upstream kube-proxy's nftables mode does through knftables.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// How long one `nft` run may take; a full load of 10,000 Services takes a few seconds.
const NFT_TIMEOUT: Duration = Duration::from_secs(120);

/// A failed `nft` run.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("cannot run nft")]
    Spawn(#[source] std::io::Error),
    #[error("nft did not finish within {0:?}")]
    Timeout(Duration),
    #[error("nft refused the transaction: {0}")]
    Refused(String),
}

/// How `nft` is run: in this process's network namespace, or (benchmarks) in another one
/// entered with `nsenter --net=PATH`, so that rules for made-up Services never touch the host's
/// traffic.
#[derive(Debug, Clone, Default)]
pub struct Nft {
    pub netns: Option<PathBuf>,
}

impl Nft {
    fn command(&self) -> Command {
        match &self.netns {
            None => Command::new("nft"),
            Some(path) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", path.display())).arg("nft");
                c
            }
        }
    }

    /// Why this machine cannot run the proxy, or `None` when it can: root, and `nft` answering.
    pub async fn unavailable_reason(&self) -> Option<String> {
        match self.run_args(&["list", "tables"]).await {
        Ok(_) => None,
        Err(NftError::Spawn(e)) if e.kind() == std::io::ErrorKind::NotFound => Some(
            "the nft command is not installed (Debian package nftables; scripts/install-deps.sh installs it)"
                .to_string(),
        ),
        Err(e) => Some(format!("{e} (the service proxy needs root)")),
    }
    }

    async fn run_args(&self, args: &[&str]) -> Result<String, NftError> {
        let mut command = self.command();
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let output = tokio::time::timeout(NFT_TIMEOUT, command.output())
            .await
            .map_err(|_| NftError::Timeout(NFT_TIMEOUT))?
            .map_err(NftError::Spawn)?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(NftError::Refused(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ))
        }
    }

    /// Applies `script` as one transaction.
    pub async fn apply(&self, script: &str) -> Result<(), NftError> {
        let mut child = self
            .command()
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(NftError::Spawn)?;
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| NftError::Spawn(std::io::Error::other("no stdin")))?;
        let input = script.as_bytes().to_vec();
        let writer = tokio::spawn(async move {
            let result = stdin.write_all(&input).await;
            drop(stdin);
            result
        });
        let output = tokio::time::timeout(NFT_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| NftError::Timeout(NFT_TIMEOUT))?
            .map_err(NftError::Spawn)?;
        let _ = writer.await;
        if output.status.success() {
            Ok(())
        } else {
            Err(NftError::Refused(first_lines(
                &String::from_utf8_lossy(&output.stderr),
                6,
            )))
        }
    }

    /// Deletes `table` (family `ip`) if it exists.
    pub async fn delete_table(&self, table: &str) -> Result<(), NftError> {
        self.apply(&format!("add table ip {table}\ndelete table ip {table}\n"))
            .await
    }

    /// The listing of `table`, or `None` when it does not exist.
    pub async fn list_table(&self, table: &str) -> Option<String> {
        self.run_args(&["list", "table", "ip", table]).await.ok()
    }
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines().take(n).collect::<Vec<_>>().join("; ")
}
