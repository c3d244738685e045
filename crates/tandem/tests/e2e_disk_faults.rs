//! End-to-end: disk faults under a running server. When the data directory's file system is full
//! or turns read-only, writes are answered with a 500 `Status` (upstream maps storage failures to
//! `InternalError`) whose message says what happened, reads keep working, nothing acknowledged is
//! lost, the process stays up, and writes resume once space returns (or, for a file system that
//! went read-only after an error, once it is mounted again and the server restarted).
//!
//! Real file systems, not mocks: a small tmpfs filled with a file, and an ext4 image on a loop
//! device that the kernel turns read-only under the server (`errors=remount-ro` plus ext4's
//! `trigger_fs_error`, what a real disk error does). Needs root and mount; skipped (with a
//! message) where mounting is not permitted.

#![allow(
    clippy::unwrap_used,
    reason = "a test fails by panicking; unwrap says where"
)]

mod common;
mod raw_api;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use raw_api::{Api, Reply};

/// Unmounts (lazily, so it works while the server still has files open) when dropped, also when
/// the test fails.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn sh(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Whether this process may mount file systems (root with CAP_SYS_ADMIN, not in a restricted
/// container); probed by mounting a tiny tmpfs.
fn can_mount() -> Option<String> {
    let probe = tempfile::tempdir().ok()?;
    let dir = probe.path().to_str()?.to_string();
    if !sh("mount", &["-t", "tmpfs", "-o", "size=1m", "tmpfs", &dir]) {
        return Some("mount is not permitted here".into());
    }
    sh("umount", &[&dir]);
    None
}

/// Stops the server, moves its data dir onto a fresh mount made by `mount` (given the empty
/// mount point), and starts it again there.
fn move_data_dir(s: &mut Server, mount: impl FnOnce(&Path) -> bool) -> Mounted {
    s.kill9();
    let data = s.data_dir();
    let saved = s.dir().join("data-saved");
    assert!(sh(
        "cp",
        &["-a", data.to_str().unwrap(), saved.to_str().unwrap()]
    ));
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::create_dir(&data).unwrap();
    assert!(mount(&data), "mount failed");
    let guard = Mounted(data.clone());
    assert!(sh(
        "cp",
        &[
            "-a",
            &format!("{}/.", saved.display()),
            data.to_str().unwrap()
        ]
    ));
    // The copy must be on disk before the test makes the file system fail: otherwise it is the
    // unwritten copy that a fault loses, not anything the server acknowledged.
    assert!(sh("sync", &["-f", data.to_str().unwrap()]));
    s.restart();
    guard
}

fn configmap(name: &str, bytes: usize) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"blob": "x".repeat(bytes)},
    })
    .to_string()
}

fn create(api: &Api, name: &str, bytes: usize) -> Reply {
    api.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(&configmap(name, bytes)),
    )
    .unwrap()
}

fn rv(reply: &Reply) -> String {
    reply.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// name → resourceVersion of every ConfigMap in `default`, through the API (the watch cache).
fn listed(api: &Api) -> BTreeMap<String, String> {
    let reply = api
        .request("GET", "/api/v1/namespaces/default/configmaps", None)
        .unwrap();
    assert_eq!(reply.code, 200, "a read failed: {}", reply.body);
    reply.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            (
                m["name"].as_str().unwrap().to_string(),
                m["resourceVersion"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every acknowledged write is listed with its resourceVersion.
fn assert_all_there(api: &Api, acked: &BTreeMap<String, String>) {
    let now = listed(api);
    for (name, rv) in acked {
        assert_eq!(now.get(name), Some(rv), "acknowledged {name}@{rv} lost");
    }
}

/// A single object read straight from the store (a GET with resourceVersion unset reads the
/// cache; with a field selector on a list it is the cache too), so also a `get` by name.
fn get_works(api: &Api, name: &str) {
    let reply = api
        .request(
            "GET",
            &format!("/api/v1/namespaces/default/configmaps/{name}"),
            None,
        )
        .unwrap();
    assert_eq!(reply.code, 200, "{}", reply.body);
}

#[test]
fn a_full_data_dir_refuses_writes_with_500_keeps_reads_and_recovers_when_space_returns() {
    if let Some(why) = can_mount() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let mut s = Server::start();
    let _mount = move_data_dir(&mut s, |dir| {
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=16m",
                "tmpfs",
                dir.to_str().unwrap(),
            ],
        )
    });
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    let mut acked = BTreeMap::new();
    for i in 0..20 {
        let name = format!("before-{i:02}");
        let reply = create(&api, &name, 1024);
        assert_eq!(reply.code, 201, "{}", reply.body);
        acked.insert(name, rv(&reply));
    }

    // Fill the file system: dd stops with ENOSPC.
    let filler = s.data_dir().join("filler");
    let _ = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", filler.display()),
            "bs=64k",
        ])
        .output();
    assert!(filler.exists());

    // Writes fail once the log or the file must grow (the log's free frames may take a few).
    let mut refused = None;
    for i in 0..100 {
        let name = format!("full-{i:03}");
        let reply = create(&api, &name, 256 * 1024);
        match reply.code {
            201 => {
                acked.insert(name, rv(&reply));
            }
            code => {
                refused = Some((code, reply.json()));
                break;
            }
        }
    }
    let (code, status) = refused.expect("no write was refused on a full file system");
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "InternalError");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("no space left on device"),
        "the message should say the disk is full: {message}"
    );
    println!("refused while full: {message}");

    // Reads keep working and hold every acknowledged write; the server is still up.
    assert_all_there(&api, &acked);
    get_works(&api, "before-00");
    s.assert_alive();

    // Space returns: writes succeed again.
    std::fs::remove_file(&filler).unwrap();
    let reply = create(&api, "after-space", 1024);
    assert_eq!(reply.code, 201, "{}", reply.body);
    acked.insert("after-space".into(), rv(&reply));
    assert_all_there(&api, &acked);

    // And what is on disk is whole: a crash and restart on the same files loses nothing.
    s.restart();
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    assert_all_there(&api, &acked);
}

#[test]
fn a_data_dir_turned_read_only_refuses_writes_with_500_keeps_reads_and_loses_nothing() {
    if let Some(why) = can_mount() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let mut s = Server::start();
    let image = s.dir().join("ext4.img");
    let image_str = image.to_str().unwrap().to_string();
    assert!(sh("truncate", &["-s", "64M", &image_str]));
    if !sh("mkfs.ext4", &["-q", &image_str]) {
        eprintln!("SKIPPED: mkfs.ext4 is not available");
        return;
    }
    let mount_ext4 = |dir: &Path| {
        sh(
            "mount",
            &[
                "-o",
                "loop,errors=remount-ro",
                &image_str,
                dir.to_str().unwrap(),
            ],
        )
    };
    let mount = move_data_dir(&mut s, mount_ext4);
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    let mut acked = BTreeMap::new();
    for i in 0..20 {
        let name = format!("before-{i:02}");
        let reply = create(&api, &name, 1024);
        assert_eq!(reply.code, 201, "{}", reply.body);
        acked.insert(name, rv(&reply));
    }

    // The kernel turns the file system read-only, as after a disk error.
    let out = Command::new("findmnt")
        .args(["-n", "-o", "SOURCE", s.data_dir().to_str().unwrap()])
        .output()
        .unwrap();
    let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let name = device.rsplit('/').next().unwrap_or_default().to_string();
    let trigger = format!("/sys/fs/ext4/{name}/trigger_fs_error");
    if std::fs::write(&trigger, "tandem e2e test\n").is_err() {
        eprintln!("SKIPPED: cannot write {trigger}");
        return;
    }
    assert!(
        std::fs::write(s.data_dir().join("probe"), "x").is_err(),
        "the file system should be read-only now"
    );

    // Every write is refused with a 500 that says why (bounded number of tries).
    let started = Instant::now();
    for i in 0..5 {
        let reply = create(&api, &format!("ro-{i}"), 1024);
        assert_eq!(reply.code, 500, "{}", reply.body);
        let status = reply.json();
        assert_eq!(status["reason"], "InternalError");
        let message = status["message"].as_str().unwrap().to_ascii_lowercase();
        assert!(
            message.contains("read-only"),
            "the message should say the file system is read-only: {message}"
        );
        if i == 0 {
            println!("refused while read-only: {message}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_all_there(&api, &acked);
    get_works(&api, "before-00");
    s.assert_alive();

    // Repaired and mounted again: a restart finds everything and writes work.
    s.kill9();
    drop(mount);
    assert!(
        sh("e2fsck", &["-fy", &image_str]) || sh("e2fsck", &["-fy", &image_str]),
        "e2fsck could not repair the image"
    );
    assert!(mount_ext4(&s.data_dir()), "mount again failed");
    let _mount = Mounted(s.data_dir());
    s.restart();
    let api = Api::new(&s.data_dir(), &s.url()).unwrap();
    assert_all_there(&api, &acked);
    let reply = create(&api, "after-repair", 1024);
    assert_eq!(reply.code, 201, "{}", reply.body);
}
