//! The bind mounts of one container from its pod's prepared volumes, as the kubelet's
//! `makeMounts` (`pkg/kubelet/kubelet_pods.go`) builds them: `subPath` and `subPathExpr`
//! resolved inside the volume (upstream `pkg/volume/util/subpath`), read-only flags merged,
//! relative mount paths made absolute.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Container;

use super::PodVolumes;
use super::atomic_writer::platform;
use super::error::VolumeError;
use crate::env;

/// One bind mount of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMount {
    /// The absolute path inside the container.
    pub container_path: String,
    /// The host path to bind (a `subPath` already resolved, symlinks included).
    pub host_path: PathBuf,
    pub read_only: bool,
}

/// [`etc_hosts_mount`](super::etc_hosts_mount)), in `volumeMounts` order.
///
/// - a mount naming a volume `volumes` lacks is an error;
/// - `subPathExpr` is expanded against `env` (the container's resolved environment, as
///   [`crate::env::container_env`] returns it); a reference to an undefined or empty variable is
///   an error;
/// - a `subPath` must be relative and free of `..`; a missing subPath directory is created
///   inside the volume with the volume root's permissions, never through a symlink leading out
///   of the volume, and the result is resolved to its real path, which must stay inside the
///   volume;
/// - the mount is read-only when the mount or the volume says so;
/// - a relative `mountPath` is made absolute.
pub fn container_mounts(
    container: &Container,
    volumes: &PodVolumes,
    env: &[(String, String)],
) -> Result<Vec<HostMount>, VolumeError> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let volume = volumes
            .get(&mount.name)
            .ok_or_else(|| VolumeError::MissingVolume {
                volume: mount.name.clone(),
                container: container.name.clone(),
            })?;
        let sub_path = match mount.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            Some(expr) => expand_sub_path_expr(expr, env)?,
            None => mount.sub_path.clone().unwrap_or_default(),
        };
        let host_path = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            validate_sub_path(&sub_path)?;
            resolve_sub_path(&volume.host_path, &sub_path, &mount.name, &container.name)?
        };
        mounts.push(HostMount {
            container_path: absolute_container_path(&mount.mount_path),
            host_path,
            read_only: mount.read_only.unwrap_or(false) || volume.read_only,
        });
    }
    Ok(mounts)
}

/// Upstream `ExpandContainerVolumeMounts`: `$(VAR)` in `subPathExpr`; undefined or empty
/// variables are reported together, sorted.
fn expand_sub_path_expr(expr: &str, env: &[(String, String)]) -> Result<String, VolumeError> {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut missing = BTreeSet::new();
    let expanded = env::expand(expr, |name| match map.get(name) {
        Some(v) if !v.is_empty() => (*v).to_owned(),
        _ => {
            missing.insert(name.to_owned());
            String::new()
        }
    });
    if missing.is_empty() {
        Ok(expanded)
    } else {
        Err(VolumeError::SubPathExpr(
            missing.into_iter().collect::<Vec<_>>().join(", "),
        ))
    }
}

/// A subPath is relative and has no `..` component (upstream `makeMounts` with
/// `ValidatePathNoBacksteps`).
fn validate_sub_path(sub_path: &str) -> Result<(), VolumeError> {
    if sub_path.starts_with('/') || Path::new(sub_path).is_absolute() {
        return Err(VolumeError::AbsoluteSubPath(sub_path.to_owned()));
    }
    if sub_path.split('/').any(|c| c == "..") {
        return Err(VolumeError::SubPathBacksteps(sub_path.to_owned()));
    }
    Ok(())
}

fn resolve_sub_path(
    volume_root: &Path,
    sub_path: &str,
    mount: &str,
    container: &str,
) -> Result<PathBuf, VolumeError> {
    let create_failed = || VolumeError::SubPathCreate {
        mount: mount.to_owned(),
        container: container.to_owned(),
    };
    let prepare_failed = || VolumeError::SubPathPrepare {
        mount: mount.to_owned(),
        container: container.to_owned(),
    };
    let root = fs::canonicalize(volume_root).map_err(|e| {
        tracing::warn!(path = %volume_root.display(), error = %e, "volume root for subPath not found");
        prepare_failed()
    })?;
    let full = root.join(sub_path);
    if fs::metadata(&full).is_err() {
        let perm = fs::metadata(&root)
            .ok()
            .and_then(|m| platform::mode(&m))
            .unwrap_or(0o755);
        safe_make_dir(&root, sub_path, perm).map_err(|e| {
            tracing::warn!(%mount, %container, error = %e, "failed to create subPath directory");
            create_failed()
        })?;
    }
    let real = fs::canonicalize(&full).map_err(|e| {
        tracing::warn!(%mount, %container, error = %e, "failed to resolve subPath");
        prepare_failed()
    })?;
    if !real.starts_with(&root) {
        tracing::warn!(%mount, %container, path = %real.display(), "subPath resolves outside its volume");
        return Err(prepare_failed());
    }
    Ok(real)
}

/// Creates `sub_path` under `root` (already canonical) one component at a time, refusing to
/// follow a symlink out of `root` (upstream `SafeMakeDir`).
fn safe_make_dir(root: &Path, sub_path: &str, perm: u32) -> io::Result<()> {
    let mut current = root.to_path_buf();
    for component in sub_path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let next = current.join(component);
        match fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = fs::canonicalize(&next)?;
                if !real.starts_with(root) || !real.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} resolves to {}, outside the volume or not a directory",
                            next.display(),
                            real.display()
                        ),
                    ));
                }
                current = real;
            }
            Ok(meta) if meta.is_dir() => current = next,
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    next.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&next)?;
                platform::set_mode(&next, perm)?;
                current = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Upstream `MakeAbsolutePath` for Linux: a `mountPath` without a leading `/` gets one.
fn absolute_container_path(path: &str) -> String {
    if path.starts_with('/') || Path::new(path).is_absolute() {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::HostVolume;
    use super::super::test_fixtures::container;
    use super::*;
    use k8s_openapi::api::core::v1::VolumeMount;

    fn volumes(root: &Path, read_only: bool) -> PodVolumes {
        let mut v = PodVolumes::default();
        v.insert(
            "data",
            HostVolume {
                host_path: root.to_path_buf(),
                read_only,
            },
        );
        v
    }

    fn err_text<T: std::fmt::Debug>(r: Result<T, VolumeError>) -> String {
        r.expect_err("an error").to_string()
    }

    #[test]
    fn sub_paths_must_be_relative_without_backsteps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vols = volumes(dir.path(), false);
        let mount = |sub: &str| {
            container(serde_json::json!([{"name": "data", "mountPath": "/d", "subPath": sub}]))
        };
        assert_eq!(
            err_text(container_mounts(&mount("/etc"), &vols, &[])),
            "error SubPath `/etc` must not be an absolute path"
        );
        assert_eq!(
            err_text(container_mounts(&mount("a/../../b"), &vols, &[])),
            "unable to provision SubPath `a/../../b`: must not contain '..'"
        );
        // `..` inside a name is not a backstep.
        let ok = container_mounts(&mount("a..b/c"), &vols, &[]).expect("mounts");
        assert!(ok[0].host_path.ends_with("a..b/c"));
        assert!(ok[0].host_path.is_dir());
    }

    #[test]
    fn sub_path_creates_directories_and_resolves_inside_the_volume() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("vol");
        fs::create_dir(&root).expect("root");
        platform::set_mode(&root, 0o777).expect("chmod");
        let vols = volumes(&root, false);
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "logs", "subPath": "a/b", "readOnly": true},
            {"name": "data", "mountPath": "/whole"}
        ]));
        let mounts = container_mounts(&c, &vols, &[]).expect("mounts");
        let real_root = fs::canonicalize(&root).expect("canonical");
        assert_eq!(
            mounts,
            vec![
                HostMount {
                    container_path: "/logs".into(),
                    host_path: real_root.join("a/b"),
                    read_only: true
                },
                HostMount {
                    container_path: "/whole".into(),
                    host_path: root.clone(),
                    read_only: false
                },
            ]
        );
        let meta = fs::metadata(real_root.join("a")).expect("a");
        assert_eq!(platform::mode(&meta), Some(0o777));

        // A volume's read-only flag wins over the mount's.
        let ro = volumes(&root, true);
        let c = container(serde_json::json!([{"name": "data", "mountPath": "/d"}]));
        assert!(container_mounts(&c, &ro, &[]).expect("mounts")[0].read_only);

        // Missing volume.
        let c = container(serde_json::json!([{"name": "nope", "mountPath": "/d"}]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "cannot find volume \"nope\" to mount into container \"app\""
        );
    }

    #[cfg(unix)]
    #[test]
    fn sub_path_symlinks_may_not_leave_the_volume() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("vol");
        let outside = dir.path().join("outside");
        fs::create_dir(&root).expect("root");
        fs::create_dir(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, root.join("escape")).expect("symlink");
        let vols = volumes(&root, false);
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "/d", "subPath": "escape"}
        ]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "failed to prepare subPath for volumeMount \"data\" of container \"app\""
        );
        let c = container(serde_json::json!([
            {"name": "data", "mountPath": "/d", "subPath": "escape/new"}
        ]));
        assert_eq!(
            err_text(container_mounts(&c, &vols, &[])),
            "failed to create subPath directory for volumeMount \"data\" of container \"app\""
        );
        assert!(!outside.join("new").exists());
    }

    #[test]
    fn sub_path_expr_expands_against_the_container_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vols = volumes(dir.path(), false);
        let env = vec![
            ("POD_NAME".to_string(), "web-0".to_string()),
            ("EMPTY".to_string(), String::new()),
        ];
        let mut c = container(serde_json::json!([]));
        c.volume_mounts = Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/logs".into(),
            sub_path_expr: Some("logs/$(POD_NAME)".into()),
            ..VolumeMount::default()
        }]);
        let mounts = container_mounts(&c, &vols, &env).expect("mounts");
        assert!(mounts[0].host_path.ends_with("logs/web-0"));
        if let Some(m) = c.volume_mounts.as_mut().and_then(|m| m.first_mut()) {
            m.sub_path_expr = Some("$(ZED)/$(EMPTY)/$(ALPHA)".into());
        }
        assert_eq!(
            err_text(container_mounts(&c, &vols, &env)),
            "missing value for ALPHA, EMPTY, ZED"
        );
    }
}
