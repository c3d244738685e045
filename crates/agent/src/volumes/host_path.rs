//! The hostPath volume plugin's SetUp (the kubelet's `pkg/volume/hostpath`, `checkType`), also
//! applied to the `hostPath` PersistentVolume a claim resolves to.

use std::fs;
use std::path::Path;

use k8s_openapi::api::core::v1::HostPathVolumeSource;

use super::error::{SetUpError, io_err};

/// The kubelet's hostPath SetUp (`checkType`, v1.33 wording): no `..` in the path, then the
/// `type` check. `DirectoryOrCreate` creates the directory (0755) and `FileOrCreate` an empty
/// file (0644) when nothing exists there; the other types only check. An unset or empty
/// `type` checks nothing. Like upstream, `File` accepts anything that exists and is not a
/// directory.
pub fn check_host_path(source: &HostPathVolumeSource) -> Result<(), SetUpError> {
    let path = source.path.as_str();
    if path.split('/').any(|c| c == "..") {
        return Err(SetUpError::HostPathBacksteps(path.to_owned()));
    }
    let kind = source.type_.as_deref().unwrap_or("");
    let meta = fs::metadata(path).ok();
    let not_a = |expected: &'static str| SetUpError::HostPathType {
        path: path.to_owned(),
        expected,
    };
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" | "Directory" => {
            if kind == "DirectoryOrCreate" && meta.is_none() {
                return fs::create_dir_all(path).map_err(io_err("mkdir", Path::new(path)));
            }
            match meta {
                Some(m) if m.is_dir() => Ok(()),
                _ => Err(not_a("directory")),
            }
        }
        "FileOrCreate" | "File" => {
            if kind == "FileOrCreate" && meta.is_none() {
                return create_empty_file(Path::new(path));
            }
            match meta {
                Some(m) if !m.is_dir() => Ok(()),
                _ => Err(not_a("file")),
            }
        }
        "Socket" => special_file(meta.as_ref(), SpecialFile::Socket).ok_or(not_a("socket file")),
        "CharDevice" => {
            special_file(meta.as_ref(), SpecialFile::CharDevice).ok_or(not_a("character device"))
        }
        "BlockDevice" => {
            special_file(meta.as_ref(), SpecialFile::BlockDevice).ok_or(not_a("block device"))
        }
        other => Err(SetUpError::InvalidHostPathType(other.to_owned())),
    }
}

fn create_empty_file(path: &Path) -> Result<(), SetUpError> {
    let mut options = fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    options.open(path).map(drop).map_err(io_err("open", path))
}

#[derive(Clone, Copy)]
enum SpecialFile {
    Socket,
    CharDevice,
    BlockDevice,
}

/// `Some(())` when `meta` is that kind of special file.
#[cfg(unix)]
fn special_file(meta: Option<&fs::Metadata>, kind: SpecialFile) -> Option<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta?.file_type();
    let matches = match kind {
        SpecialFile::Socket => t.is_socket(),
        SpecialFile::CharDevice => t.is_char_device(),
        SpecialFile::BlockDevice => t.is_block_device(),
    };
    matches.then_some(())
}

#[cfg(not(unix))]
fn special_file(_meta: Option<&fs::Metadata>, _kind: SpecialFile) -> Option<()> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_path_types_are_checked_with_the_kubelet_messages() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = |path: &Path, kind: &str| HostPathVolumeSource {
            path: path.to_string_lossy().into_owned(),
            type_: Some(kind.to_owned()),
        };
        let new_dir = dir.path().join("made/deep");
        check_host_path(&src(&new_dir, "DirectoryOrCreate")).expect("created");
        assert!(new_dir.is_dir());
        let new_file = dir.path().join("made/file");
        check_host_path(&src(&new_file, "FileOrCreate")).expect("created");
        assert!(new_file.is_file());
        check_host_path(&src(&new_file, "File")).expect("is a file");
        check_host_path(&src(&new_file, "")).expect("unchecked");

        let missing = dir.path().join("missing");
        let msg = |s: HostPathVolumeSource| check_host_path(&s).expect_err("fails").to_string();
        assert_eq!(
            msg(src(&missing, "Directory")),
            format!(
                "hostPath type check failed: {} is not a directory",
                missing.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "File")),
            format!(
                "hostPath type check failed: {} is not a file",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_file, "DirectoryOrCreate")),
            format!(
                "hostPath type check failed: {} is not a directory",
                new_file.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "Socket")),
            format!(
                "hostPath type check failed: {} is not a socket file",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "CharDevice")),
            format!(
                "hostPath type check failed: {} is not a character device",
                new_dir.display()
            )
        );
        assert_eq!(
            msg(src(&new_dir, "Weird")),
            "Weird is an invalid volume type"
        );
        assert_eq!(
            msg(src(Path::new("/tmp/../etc"), "")),
            "invalid HostPath `/tmp/../etc`: must not contain '..'"
        );
    }
}
