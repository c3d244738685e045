//! Air-gapped images: every image archive a user drops into a node's images directory
//! (`<node dir>/images`, as k3s' `agent/images`) is imported into the node's containerd at start
//! and whenever it appears or changes, without a restart.
//!
//! The rules here are pure: which files are archives ([`archive_kind`]: `.tar`, `.tar.gz`/`.tgz`,
//! `.tar.zst`/`.tzst`, OCI or docker layout — containerd tells them apart), and when one is due
//! ([`ArchiveScan`]): a file is imported once per size and modification time, and only when two
//! scans in a row saw it unchanged, so that a file still being copied in is not read half-way
//! (files present at the first scan are imported at once). A failed import is not retried until
//! the file changes; the failure is logged with containerd's words and disturbs nothing else.
//! [`super::containerd::Importer`] runs the import.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How an archive is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// The program (and its arguments) that decompresses to standard output, if any.
    pub fn decompressor(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some(("gzip", &["-dc"])),
            Compression::Zstd => Some(("zstd", &["-dcq"])),
        }
    }
}

/// The compression of an image archive, by its name; `None` for any other file (hidden files
/// included, as editors and copies in progress leave them).
pub fn archive_kind(path: &Path) -> Option<Compression> {
    let name = path.file_name()?.to_str()?;
    if name.starts_with('.') {
        return None;
    }
    if name.ends_with(".tar") {
        Some(Compression::None)
    } else if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        Some(Compression::Gzip)
    } else if name.ends_with(".tar.zst") || name.ends_with(".tzst") {
        Some(Compression::Zstd)
    } else {
        None
    }
}

/// What identifies one version of a file: its size and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified: Option<SystemTime>,
}

/// The scanner's memory between scans.
#[derive(Debug, Default)]
pub struct ArchiveScan {
    /// What the previous scan saw.
    seen: BTreeMap<PathBuf, Stamp>,
    /// The version of each file last imported (or that failed to import).
    done: BTreeMap<PathBuf, Stamp>,
    scanned: bool,
}

impl ArchiveScan {
    pub fn new() -> ArchiveScan {
        ArchiveScan::default()
    }

    /// Takes the directory's archives now and returns those due for import, in name order.
    pub fn due(&mut self, listing: BTreeMap<PathBuf, Stamp>) -> Vec<(PathBuf, Stamp)> {
        let first = !self.scanned;
        self.scanned = true;
        let due = listing
            .iter()
            .filter(|(path, stamp)| {
                let stable = first || self.seen.get(*path) == Some(*stamp);
                stable && self.done.get(*path) != Some(*stamp)
            })
            .map(|(p, s)| (p.clone(), *s))
            .collect();
        self.done.retain(|path, _| listing.contains_key(path));
        self.seen = listing;
        due
    }

    /// Records that this version of the file was imported or failed to: it is not tried again
    /// until it changes.
    pub fn finished(&mut self, path: PathBuf, stamp: Stamp) {
        self.done.insert(path, stamp);
    }
}

/// The archives in `dir` with their stamps; an unreadable or missing directory has none.
pub fn list_archives(dir: &Path) -> BTreeMap<PathBuf, Stamp> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter(|e| archive_kind(&e.path()).is_some())
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file().then(|| {
                (
                    e.path(),
                    Stamp {
                        len: meta.len(),
                        modified: meta.modified().ok(),
                    },
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(len: u64) -> Stamp {
        Stamp {
            len,
            modified: None,
        }
    }

    fn listing(files: &[(&str, u64)]) -> BTreeMap<PathBuf, Stamp> {
        files
            .iter()
            .map(|(n, l)| (PathBuf::from(n), stamp(*l)))
            .collect()
    }

    fn names(due: Vec<(PathBuf, Stamp)>) -> Vec<String> {
        due.into_iter()
            .map(|(p, _)| p.display().to_string())
            .collect()
    }

    #[test]
    fn archives_are_known_by_their_extensions() {
        let table = [
            ("a.tar", Some(Compression::None)),
            ("a.tar.gz", Some(Compression::Gzip)),
            ("a.tgz", Some(Compression::Gzip)),
            ("a.tar.zst", Some(Compression::Zstd)),
            ("a.tzst", Some(Compression::Zstd)),
            (".a.tar", None),
            ("a.tar.part", None),
            ("a.zip", None),
            ("tar", None),
        ];
        for (name, want) in table {
            assert_eq!(archive_kind(Path::new(name)), want, "{name}");
        }
    }

    #[test]
    fn files_present_at_start_are_due_at_once_and_new_ones_once_stable() {
        let mut scan = ArchiveScan::new();
        assert_eq!(names(scan.due(listing(&[("a.tar", 10)]))), ["a.tar"]);
        scan.finished(PathBuf::from("a.tar"), stamp(10));
        // b appears, still growing: not yet.
        assert!(scan.due(listing(&[("a.tar", 10), ("b.tar", 5)])).is_empty());
        assert!(scan.due(listing(&[("a.tar", 10), ("b.tar", 9)])).is_empty());
        // Unchanged since the last scan: due, once.
        assert_eq!(
            names(scan.due(listing(&[("a.tar", 10), ("b.tar", 9)]))),
            ["b.tar"]
        );
        scan.finished(PathBuf::from("b.tar"), stamp(9));
        assert!(scan.due(listing(&[("a.tar", 10), ("b.tar", 9)])).is_empty());
    }

    #[test]
    fn a_failed_archive_waits_for_a_new_version_and_removed_files_are_forgotten() {
        let mut scan = ArchiveScan::new();
        assert_eq!(names(scan.due(listing(&[("bad.tar", 3)]))), ["bad.tar"]);
        scan.finished(PathBuf::from("bad.tar"), stamp(3));
        assert!(scan.due(listing(&[("bad.tar", 3)])).is_empty());
        // Replaced by a good copy.
        assert!(scan.due(listing(&[("bad.tar", 30)])).is_empty());
        assert_eq!(names(scan.due(listing(&[("bad.tar", 30)]))), ["bad.tar"]);
        scan.finished(PathBuf::from("bad.tar"), stamp(30));
        // Removed, then the same version put back: imported again.
        assert!(scan.due(listing(&[])).is_empty());
        assert!(scan.due(listing(&[("bad.tar", 30)])).is_empty());
        assert_eq!(names(scan.due(listing(&[("bad.tar", 30)]))), ["bad.tar"]);
    }
}
