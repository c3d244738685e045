//! The loop that keeps a node's images directory imported (the I/O side of
//! [`super::archives`]): a scan every [`SCAN_INTERVAL`], each due archive imported in turn, the
//! runtime's image list refreshed after an import so node status shows the images at once. It
//! ends when the runtime is dropped.

use std::path::PathBuf;
use std::sync::Weak;
use std::time::Duration;

use super::CriRuntime;
use super::archives::{ArchiveScan, list_archives};
use super::containerd::Importer;

/// How often the directory is scanned (k3s watches its agent images directory; a scan of a
/// handful of files every two seconds costs nothing).
pub const SCAN_INTERVAL: Duration = Duration::from_secs(2);

/// Imports what is in `dir` now, then keeps watching it while `runtime` lives.
pub async fn watch(dir: PathBuf, importer: Importer, runtime: Weak<CriRuntime>) {
    let mut scan = ArchiveScan::new();
    loop {
        let due = scan.due(list_archives(&dir));
        let mut imported = false;
        for (path, stamp) in due {
            match importer.import(&path).await {
                Ok(()) => {
                    tracing::info!(archive = %path.display(), "image archive imported");
                    imported = true;
                }
                Err(e) => tracing::warn!(
                    archive = %path.display(),
                    "image archive not imported (it is tried again when it changes): {e}"
                ),
            }
            scan.finished(path, stamp);
        }
        {
            let Some(rt) = runtime.upgrade() else {
                return;
            };
            if imported {
                rt.refresh_images().await;
            }
        }
        tokio::time::sleep(SCAN_INTERVAL).await;
    }
}
