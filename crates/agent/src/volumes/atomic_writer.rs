//! Atomic projection of a set of files into a directory, after the kubelet's
//! `pkg/volume/util/atomic_writer.go`: configMap, secret, downwardAPI and projected volumes are
//! written with it so a running container never sees half of an update.
//!
//! Layout of a target directory:
//!
//! ```text
//! <target>/..2024_05_01_10_00_00.123456789/   the real files (a fresh directory per write)
//! <target>/..data -> ..2024_05_01_10_00_00.123456789
//! <target>/<first path component> -> ..data/<first path component>   (one per visible name)
//! ```
//!
//! A write fills a new timestamped directory, points a `..data_tmp` symlink at it and renames
//! that over `..data` (rename is atomic), then removes visible names that left the payload and
//! the previous timestamped directory. Names starting with `..` are reserved for this scheme.
//! Like upstream, the writer does no locking: callers serialise writes to one directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The longest file name a payload path component may have.
const MAX_FILE_NAME_LENGTH: usize = 255;
/// The longest payload path.
const MAX_PATH_LENGTH: usize = 4096;
const DATA_DIR_NAME: &str = "..data";
const NEW_DATA_DIR_NAME: &str = "..data_tmp";

/// One file of a payload: its content and permission bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    /// Permission bits (`0o644`); applied regardless of the process umask.
    pub mode: u32,
}

/// Files keyed by their path relative to the target directory (`key`, `dir/key`).
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload could not be written. Path messages are upstream's `validatePath` wording.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path: must not be empty: \"\"")]
    EmptyPath,
    #[error("invalid path: must be relative path: {0}")]
    AbsolutePath(String),
    #[error("invalid path: must be less than or equal to 4096 characters")]
    PathTooLong,
    #[error("invalid path: must not contain '..': {0}")]
    Backsteps(String),
    #[error("invalid path: filenames must be less than or equal to 255 characters")]
    FileNameTooLong,
    #[error("invalid path: must not start with '..': {0}")]
    ReservedPrefix(String),
    /// A filesystem operation failed; the message reads like Go's `*PathError`.
    #[error("{op} {}: {error}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WriteError + use<> {
    let path = path.to_path_buf();
    move |error| WriteError::Io { op, path, error }
}

/// Checks one payload path (upstream `validatePath`): not empty, relative, at most 4096
/// characters, no `..` component, components at most 255 characters, and not starting with
/// `..` (reserved for the writer's own entries).
pub fn validate_path(path: &str) -> Result<(), WriteError> {
    if path.is_empty() {
        return Err(WriteError::EmptyPath);
    }
    if path.starts_with('/') {
        return Err(WriteError::AbsolutePath(path.to_owned()));
    }
    if path.len() > MAX_PATH_LENGTH {
        return Err(WriteError::PathTooLong);
    }
    let items: Vec<&str> = path.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(WriteError::Backsteps(path.to_owned()));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(WriteError::FileNameTooLong);
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(WriteError::ReservedPrefix(path.to_owned()));
    }
    Ok(())
}

/// Go's `filepath.Clean` for a validated relative path: empty and `.` components dropped.
pub fn clean_path(path: &str) -> String {
    let cleaned: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if cleaned.is_empty() {
        ".".to_owned()
    } else {
        cleaned.join("/")
    }
}

/// Writes `payload` into `target` (which must exist) atomically, replacing what an earlier
/// write put there. Nothing is written when every file already has the same content and mode
/// and no file left the payload (upstream compares content only; the mode is compared too so
/// a `defaultMode` change reaches the disk).
pub fn write(target: &Path, payload: &Payload) -> Result<(), WriteError> {
    let mut clean = Payload::new();
    for (path, file) in payload {
        validate_path(path)?;
        clean.insert(clean_path(path), file.clone());
    }

    let data_dir = target.join(DATA_DIR_NAME);
    let old_ts_name = match fs::read_link(&data_dir) {
        Ok(p) => Some(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("readlink", &data_dir)(e)),
    };
    let old_ts_dir = old_ts_name.as_ref().map(|n| target.join(n));

    let mut to_remove = BTreeSet::new();
    if let Some(old) = &old_ts_dir {
        to_remove = paths_to_remove(&clean, old)?;
        if to_remove.is_empty() && !should_write(&clean, old)? {
            return Ok(());
        }
    }

    let ts_dir = new_timestamp_dir(target)?;
    let ts_name = ts_dir
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".."));
    if let Err(e) = write_payload(&clean, &ts_dir) {
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(e);
    }
    create_user_visible_files(&clean, target)?;

    let new_data_dir = target.join(NEW_DATA_DIR_NAME);
    // A stale `..data_tmp` from an interrupted write would make the symlink call fail.
    let _ = fs::remove_file(&new_data_dir);
    if let Err(e) = platform::symlink(&ts_name, &new_data_dir) {
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(io_err("symlink", &new_data_dir)(e));
    }
    if let Err(e) = platform::replace_symlink(&new_data_dir, &data_dir, &ts_name) {
        let _ = fs::remove_file(&new_data_dir);
        let _ = fs::remove_dir_all(&ts_dir);
        return Err(io_err("rename", &new_data_dir)(e));
    }

    // Only entries of the target's root are visible symlinks; deeper paths live inside the old
    // timestamped directory, which goes as a whole.
    for path in to_remove.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(path);
        match fs::remove_file(&visible) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &visible)(e)),
        }
    }
    if let Some(old) = &old_ts_dir {
        fs::remove_dir_all(old).map_err(io_err("remove", old))?;
    }
    Ok(())
}

/// Paths present in the previous version and absent from the new payload (parents of new
/// files count as present, so non-empty directories are kept).
fn paths_to_remove(payload: &Payload, old_ts_dir: &Path) -> Result<BTreeSet<String>, WriteError> {
    let mut old = BTreeSet::new();
    match walk(old_ts_dir, "", &mut old) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(io_err("walk", old_ts_dir)(e)),
    }
    let mut new = BTreeSet::new();
    for path in payload.keys() {
        let mut prefix = path.as_str();
        loop {
            new.insert(prefix.to_owned());
            match prefix.rsplit_once('/') {
                Some((parent, _)) => prefix = parent,
                None => break,
            }
        }
    }
    Ok(old.difference(&new).cloned().collect())
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel_path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &rel_path, out)?;
        }
        out.insert(rel_path);
    }
    Ok(())
}

fn should_write(payload: &Payload, old_ts_dir: &Path) -> Result<bool, WriteError> {
    for (path, file) in payload {
        let on_disk = old_ts_dir.join(path);
        let meta = match fs::symlink_metadata(&on_disk) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(io_err("lstat", &on_disk)(e)),
        };
        if platform::mode(&meta).is_some_and(|m| m != file.mode) {
            return Ok(true);
        }
        let content = fs::read(&on_disk).map_err(io_err("read", &on_disk))?;
        if content != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Creates `..<UTC timestamp>.<random>` with mode 0755, so that group and other can traverse
/// it whatever the umask.
fn new_timestamp_dir(target: &Path) -> Result<PathBuf, WriteError> {
    let (secs, _) = tandem_core::time::unix(SystemTime::now());
    let stamp: String = tandem_core::time::format_rfc3339(secs)
        .trim_end_matches('Z')
        .chars()
        .map(|c| if c.is_ascii_digit() { c } else { '_' })
        .collect();
    let mut attempt = 0;
    loop {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let random = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let dir = target.join(format!("..{stamp}.{random}"));
        match fs::create_dir(&dir) {
            Ok(()) => {
                platform::set_mode(&dir, 0o755).map_err(io_err("chmod", &dir))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(io_err("mkdir", &dir)(e)),
        }
    }
}

fn write_payload(payload: &Payload, dir: &Path) -> Result<(), WriteError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent).map_err(io_err("mkdir", parent))?;
        }
        fs::write(&full, &file.data).map_err(io_err("open", &full))?;
        // The file was created subject to the umask; the projection's mode is what counts.
        platform::set_mode(&full, file.mode).map_err(io_err("chmod", &full))?;
    }
    Ok(())
}

/// Links each payload path's first component into `..data`: `a/b/c` is reached through
/// `a -> ..data/a`.
fn create_user_visible_files(payload: &Payload, target: &Path) -> Result<(), WriteError> {
    for path in payload.keys() {
        let first = path.split('/').next().unwrap_or(path);
        let visible = target.join(first);
        match fs::symlink_metadata(&visible) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let link_target = Path::new(DATA_DIR_NAME).join(first);
                platform::symlink(&link_target, &visible).map_err(io_err("symlink", &visible))?;
            }
            Err(e) => return Err(io_err("lstat", &visible)(e)),
        }
    }
    Ok(())
}

/// The few filesystem calls that differ between Unix and Windows.
pub(crate) mod platform {
    use std::fs;
    use std::io;
    use std::path::Path;

    #[cfg(unix)]
    pub(crate) fn symlink(original: &Path, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(original, link)
    }

    #[cfg(windows)]
    pub(crate) fn symlink(original: &Path, link: &Path) -> io::Result<()> {
        let resolved = link
            .parent()
            .map(|p| p.join(original))
            .unwrap_or_else(|| original.to_path_buf());
        if resolved.is_dir() {
            std::os::windows::fs::symlink_dir(original, link)
        } else {
            std::os::windows::fs::symlink_file(original, link)
        }
    }

    #[cfg(not(any(unix, windows)))]
    pub(crate) fn symlink(_original: &Path, _link: &Path) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "symlinks are not supported on this platform",
        ))
    }

    /// Points `data_dir` at `target` by renaming `tmp_link` over it. Windows cannot rename over
    /// a directory symlink, so there (as upstream does) the link is removed and recreated.
    pub(crate) fn replace_symlink(
        tmp_link: &Path,
        data_dir: &Path,
        target: &Path,
    ) -> io::Result<()> {
        if cfg!(windows) {
            let _ = fs::remove_dir(data_dir);
            let _ = fs::remove_file(data_dir);
            let result = symlink(target, data_dir);
            let _ = fs::remove_file(tmp_link);
            let _ = fs::remove_dir(tmp_link);
            result
        } else {
            fs::rename(tmp_link, data_dir)
        }
    }

    #[cfg(unix)]
    pub(crate) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    }

    #[cfg(not(unix))]
    pub(crate) fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
        Ok(())
    }

    /// Permission bits of `meta`, where the platform has them.
    #[cfg(unix)]
    pub(crate) fn mode(meta: &fs::Metadata) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt;
        Some(meta.permissions().mode() & 0o7777)
    }

    #[cfg(not(unix))]
    pub(crate) fn mode(_meta: &fs::Metadata) -> Option<u32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    #[test]
    fn payload_paths_are_validated_like_upstream() {
        let err = |p: &str| validate_path(p).map_err(|e| e.to_string()).err();
        assert_eq!(err("key"), None);
        assert_eq!(err("dir/key"), None);
        assert_eq!(
            err("..."),
            Some("invalid path: must not start with '..': ...".into())
        );
        assert_eq!(
            err("..a/b"),
            Some("invalid path: must not start with '..': ..a/b".into())
        );
        assert_eq!(err("a/..b"), None);
        assert_eq!(
            err(".."),
            Some("invalid path: must not contain '..': ..".into())
        );
        assert_eq!(
            err("a/../b"),
            Some("invalid path: must not contain '..': a/../b".into())
        );
        assert_eq!(
            err("/etc/x"),
            Some("invalid path: must be relative path: /etc/x".into())
        );
        assert_eq!(
            err(""),
            Some("invalid path: must not be empty: \"\"".into())
        );
        assert_eq!(
            err(&"a".repeat(256)),
            Some("invalid path: filenames must be less than or equal to 255 characters".into())
        );
        assert_eq!(
            err(&"a/".repeat(2049)),
            Some("invalid path: must be less than or equal to 4096 characters".into())
        );
        assert_eq!(clean_path("a//b/./c"), "a/b/c");
        assert_eq!(clean_path("./k"), "k");
    }

    #[cfg(unix)]
    #[test]
    fn writes_swap_the_data_link_and_prune_removed_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path();
        let mut payload = Payload::new();
        payload.insert("a".into(), file("one", 0o644));
        payload.insert("sub/b".into(), file("two", 0o400));
        write(target, &payload).expect("first write");

        assert_eq!(fs::read_to_string(target.join("a")).expect("a"), "one");
        assert_eq!(fs::read_to_string(target.join("sub/b")).expect("b"), "two");
        assert_eq!(
            fs::read_link(target.join("a")).expect("link"),
            Path::new("..data/a")
        );
        let first_ts = fs::read_link(target.join("..data")).expect("data link");
        assert!(first_ts.to_string_lossy().starts_with("..20"));
        let meta = fs::metadata(target.join("sub/b")).expect("meta");
        assert_eq!(platform::mode(&meta), Some(0o400));

        // Same content: nothing changes.
        write(target, &payload).expect("no-op write");
        assert_eq!(
            fs::read_link(target.join("..data")).expect("link"),
            first_ts
        );

        // New content, one name gone.
        let mut next = Payload::new();
        next.insert("a".into(), file("uno", 0o644));
        write(target, &next).expect("second write");
        assert_eq!(fs::read_to_string(target.join("a")).expect("a"), "uno");
        assert!(fs::symlink_metadata(target.join("sub")).is_err());
        assert!(!target.join(&first_ts).exists());
        assert!(!target.join(NEW_DATA_DIR_NAME).exists());
    }
}
