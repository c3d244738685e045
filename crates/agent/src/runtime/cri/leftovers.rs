//! What a stopped private containerd can leave running, and its removal.
//!
//! A containerd shim (`containerd-shim-runc-v2 -namespace k8s.io -id … -address SOCKET`) outlives
//! its containerd by design, holding its container's processes. When every sandbox was removed
//! none is left; but a sandbox created while the teardown ran, or one whose removal failed,
//! would keep its shim and containers running after tandem stopped. After containerd has exited,
//! [`kill_leftovers`] kills the processes still in tandem's cgroups and the shims that name
//! tandem's containerd socket as their `-address` (and only those: a system containerd's shims
//! name another socket).

use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Whether a `/proc/PID/cmdline` (arguments separated by NULs) is a containerd shim of the
/// containerd listening on `socket`.
pub(super) fn is_shim_of(cmdline: &[u8], socket: &Path) -> bool {
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let Some(program) = args.first() else {
        return false;
    };
    let name = program.rsplit(|b| *b == b'/').next().unwrap_or(program);
    if !name.starts_with(b"containerd-shim") {
        return false;
    }
    let socket = socket.as_os_str().as_encoded_bytes();
    args.windows(2)
        .any(|pair| matches!(pair, [flag, value] if (*flag == b"-address" || *flag == b"--address") && *value == socket))
}

/// The pids of running shims of the containerd listening on `socket`.
pub(super) fn shims_of(socket: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| is_shim_of(&cmdline, socket))
        })
        .collect()
}

/// The pids listed in every `cgroup.procs` under `<cgroup fs>/<hierarchy>/<cgroup root>`, cgroup
/// v1 and v2 alike.
pub(super) fn cgroup_pids(cgroup_fs: &Path, cgroup_root: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(hierarchies) = std::fs::read_dir(cgroup_fs) else {
        return pids;
    };
    for hierarchy in hierarchies.flatten() {
        let root = hierarchy.path().join(cgroup_root);
        collect_procs(&root, &mut pids, 0);
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

fn collect_procs(dir: &Path, pids: &mut Vec<i32>, depth: usize) {
    if depth > 16 {
        return;
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_procs(&entry.path(), pids, depth + 1);
        }
    }
}

/// Kills (SIGKILL) the processes in tandem's cgroups and the shims of its containerd; returns
/// how many were signalled. Called once containerd has exited.
pub(super) fn kill_leftovers(socket: &Path, cgroup_fs: &Path, cgroup_root: &str) -> usize {
    let mut victims = cgroup_pids(cgroup_fs, cgroup_root);
    victims.extend(shims_of(socket));
    victims.sort_unstable();
    victims.dedup();
    // Never this process (tandem does not run in its pods' cgroups, but a misconfigured root
    // must not make it kill itself).
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    victims.retain(|pid| *pid > 1 && *pid != me);
    victims
        .iter()
        .filter(|pid| kill(Pid::from_raw(**pid), Signal::SIGKILL).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmdline(args: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for a in args {
            out.extend_from_slice(a.as_bytes());
            out.push(0);
        }
        out
    }

    #[test]
    fn a_shim_is_ours_only_when_it_names_our_socket() {
        let ours = Path::new("/var/lib/tandem/nodes/linux-1/containerd/run/containerd.sock");
        let shim = cmdline(&[
            "/usr/bin/containerd-shim-runc-v2",
            "-namespace",
            "k8s.io",
            "-id",
            "abc",
            "-address",
            "/var/lib/tandem/nodes/linux-1/containerd/run/containerd.sock",
        ]);
        assert!(is_shim_of(&shim, ours));
        let system = cmdline(&[
            "/usr/bin/containerd-shim-runc-v2",
            "-namespace",
            "k8s.io",
            "-address",
            "/run/containerd/containerd.sock",
        ]);
        assert!(!is_shim_of(&system, ours));
        let not_a_shim = cmdline(&["sleep", "-address", ours.to_str().unwrap_or_default()]);
        assert!(!is_shim_of(&not_a_shim, ours));
        assert!(!is_shim_of(b"", ours));
    }

    #[test]
    fn cgroup_pids_are_gathered_from_every_hierarchy_and_depth() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pods = dir.path().join("pids/tandem-x/pod1/c1");
        let cpu = dir.path().join("cpu/tandem-x/pod1");
        std::fs::create_dir_all(&pods).expect("mkdir");
        std::fs::create_dir_all(&cpu).expect("mkdir");
        std::fs::write(pods.join("cgroup.procs"), "41\n42\n").expect("write");
        std::fs::write(cpu.join("cgroup.procs"), "42\n43\n").expect("write");
        std::fs::create_dir_all(dir.path().join("pids/other")).expect("mkdir");
        std::fs::write(dir.path().join("pids/other/cgroup.procs"), "99\n").expect("write");
        assert_eq!(cgroup_pids(dir.path(), "tandem-x"), vec![41, 42, 43]);
        assert!(cgroup_pids(dir.path(), "absent").is_empty());
    }
}
