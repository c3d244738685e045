//! The node's side of the built-in local-path provisioner (rancher/local-path-provisioner's
//! teardown, done by the agent that owns the disk instead of a helper pod).
//!
//! At start the agent publishes where it keeps local-path volumes — its Node's
//! `local-path.tandem.dev/root` annotation, `<state dir>/storage` (or `/var/lib/tandem/storage`
//! for an agent without a state directory) — so the provisioner places volume directories
//! there. The directory of a volume is created by the kubelet's `hostPath` `DirectoryOrCreate`
//! set-up when a pod first mounts it (see [`super::check_host_path`]). Agents of the emulated
//! runtime, which never create one, do not run this task (the provisioner deletes their volumes
//! without asking).
//!
//! Reclaim: the agent may not read PersistentVolumes its pods do not mount (the Node
//! authorizer), so the provisioner asks through the agent's own Node object (see
//! `tandem_core::local_path`): the agent watches its Node, removes every requested directory
//! that is a `pvc-…` directory directly under its root (a missing one counts as removed), and
//! answers with the names of the volumes done. A path outside the root is refused and logged;
//! its volume stays `Released` for an administrator to look at. Failed removals are retried
//! every 30 seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tandem_core::local_path as lp;

use crate::config::NodeConfig;

/// How often requests that failed are tried again.
const RETRY: Duration = Duration::from_secs(30);

/// The directory under which this node keeps local-path volumes: `<state dir>/storage`
/// (made absolute), else [`lp::DEFAULT_ROOT`].
pub fn root_for(config: &NodeConfig) -> PathBuf {
    match &config.state_dir {
        Some(dir) if dir.is_absolute() => dir.join("storage"),
        Some(dir) => std::env::current_dir()
            .map(|cwd| cwd.join(dir).join("storage"))
            .unwrap_or_else(|_| PathBuf::from(lp::DEFAULT_ROOT)),
        None => PathBuf::from(lp::DEFAULT_ROOT),
    }
}

/// Why a requested directory was not removed.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// The path is not a volume directory directly under the node's root.
    #[error("refusing to remove {path}: not a pvc-… directory directly under {root}")]
    OutsideRoot { path: String, root: String },
    /// Removing it failed.
    #[error("cannot remove {path}")]
    Remove {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Removes one volume directory (and everything in it) if it is one under `root`. A directory
/// that does not exist is already removed.
pub fn remove_volume_directory(root: &Path, path: &str) -> Result<(), CleanupError> {
    let p = Path::new(path);
    if !lp::is_volume_directory(root, p) {
        return Err(CleanupError::OutsideRoot {
            path: path.to_string(),
            root: root.display().to_string(),
        });
    }
    match std::fs::symlink_metadata(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Ok(m) if !m.is_dir() => {
            // A file or symlink where the directory should be: remove the entry itself.
            return std::fs::remove_file(p).map_err(|source| CleanupError::Remove {
                path: path.to_string(),
                source,
            });
        }
        _ => {}
    }
    match std::fs::remove_dir_all(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(CleanupError::Remove {
            path: path.to_string(),
            source,
        }),
    }
}

/// Carries out the requests of `node` and returns the answer it should carry: the requested
/// volumes whose directories are gone (requests no longer made drop out).
pub fn handle_requests(root: &Path, node: &Node) -> BTreeSet<String> {
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let requests: BTreeMap<String, String> =
        lp::parse_cleanup(annotations.get(lp::CLEANUP_ANNOTATION).map(String::as_str));
    let mut done = BTreeSet::new();
    for (volume, path) in requests {
        match remove_volume_directory(root, &path) {
            Ok(()) => {
                tracing::info!(volume = %volume, path = %path, "removed local-path volume directory");
                done.insert(volume);
            }
            Err(e) => {
                tracing::warn!(volume = %volume, error = %e, source = ?std::error::Error::source(&e), "local-path volume directory not removed");
            }
        }
    }
    done
}

/// Publishes the root and serves the node's reclaim requests until the task is aborted.
pub async fn run(client: kube::Client, node_name: String, root: PathBuf) {
    let api: Api<Node> = Api::all(client);
    let publish = json!({"metadata": {"annotations": {
        lp::ROOT_ANNOTATION: root.display().to_string(),
    }}});
    for attempt in 0..30u32 {
        match api
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&publish))
            .await
        {
            Ok(_) => break,
            Err(e) => {
                if attempt == 29 {
                    tracing::warn!(node = %node_name, error = %e, "cannot publish the local-path root");
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    let wc = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let mut stream = watcher(api.clone(), wc)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut last: Option<Node> = None;
    let mut tick = tokio::time::interval(RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(node)) => last = Some(node),
                Some(Err(e)) => {
                    tracing::debug!(node = %node_name, error = %e, "node watch error; the watcher retries");
                    continue;
                }
                None => return,
            },
            _ = tick.tick() => {}
        }
        let Some(node) = &last else { continue };
        let done = handle_requests(&root, node);
        let answered = lp::parse_cleaned(
            node.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(lp::CLEANED_ANNOTATION))
                .map(String::as_str),
        );
        if done == answered {
            continue;
        }
        let patch = json!({"metadata": {"annotations": {
            lp::CLEANED_ANNOTATION: lp::format_cleaned(&done),
        }}});
        if let Err(e) = api
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(node = %node_name, error = %e, "cannot answer the local-path cleanup requests");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn node_with(requests: &BTreeMap<String, String>) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "annotations": {
            lp::CLEANUP_ANNOTATION: lp::format_cleanup(requests),
        }}}))
        .unwrap()
    }

    #[test]
    fn requested_volume_directories_are_removed_and_answered() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("storage");
        let vol = root.join("pvc-u1_ns_data");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("sub/file"), b"data").unwrap();
        let requests = BTreeMap::from([
            ("pvc-u1".to_string(), vol.display().to_string()),
            // Never created (an emulated node): counts as removed.
            (
                "pvc-u2".to_string(),
                root.join("pvc-u2_ns_x").display().to_string(),
            ),
        ]);
        let done = handle_requests(&root, &node_with(&requests));
        assert!(!vol.exists());
        assert!(root.exists(), "the root itself stays");
        assert_eq!(
            done,
            BTreeSet::from(["pvc-u1".to_string(), "pvc-u2".to_string()])
        );
    }

    #[test]
    fn paths_outside_the_root_are_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("storage");
        let elsewhere = dir.path().join("pvc-precious");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let requests = BTreeMap::from([("pvc-p".to_string(), elsewhere.display().to_string())]);
        let done = handle_requests(&root, &node_with(&requests));
        assert!(elsewhere.exists());
        assert!(done.is_empty());
        assert!(matches!(
            remove_volume_directory(&root, &format!("{}/pvc-a/../..", root.display())),
            Err(CleanupError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn root_is_the_state_directory_storage_or_the_default() {
        let mut config = NodeConfig::linux("n");
        assert_eq!(root_for(&config), PathBuf::from(lp::DEFAULT_ROOT));
        config.state_dir = Some(PathBuf::from("/data/nodes/n"));
        assert_eq!(root_for(&config), PathBuf::from("/data/nodes/n/storage"));
        config.state_dir = Some(PathBuf::from("rel/n"));
        assert!(root_for(&config).is_absolute());
    }
}
