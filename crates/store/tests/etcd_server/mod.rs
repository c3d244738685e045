//! Starts real etcd servers for tests: `etcd` from `PATH` (Debian's `etcd-server` package, which
//! `scripts/install-deps.sh` installs), on loopback with free ports and a temporary data
//! directory, one member or a cluster of several. Each server is killed (SIGKILL) when dropped.
//!
//! The flags are etcd's own clustering flags (`--initial-cluster` and friends, as in etcd's
//! "Clustering" guide for a static cluster); readiness is etcd's `/health` endpoint on the client
//! URL, which answers `"health":"true"` once the member sees a leader.
//!
//! Shared by the store's tests; other crates' tests can include it with `#[path]`.

#![allow(
    dead_code,
    reason = "each test crate that includes this module uses a different part of it"
)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a member (or a whole cluster) may take to report healthy.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at starting a server or cluster, in case another test took a port meanwhile.
const START_ATTEMPTS: usize = 3;

/// The `etcd` binary to use, or `None` with the reason printed, when the tests should be skipped.
/// When the `CI` environment variable is set a missing etcd is a failure instead: CI must run
/// `scripts/install-deps.sh`.
pub fn etcd_binary() -> Option<PathBuf> {
    let found = find_etcd();
    if let Err(reason) = &found {
        eprintln!("skipped: {reason}");
    }
    found.ok()
}

/// The `etcd` binary on `PATH`, or why the tests must be skipped (a failure when `CI` is set).
pub fn find_etcd() -> Result<PathBuf, String> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    });
    found.ok_or_else(|| {
        let reason = "etcd is not on PATH; run scripts/install-deps.sh (Debian's etcd-server)";
        assert!(std::env::var_os("CI").is_none(), "{reason}");
        reason.to_owned()
    })
}

/// One running etcd member.
pub struct EtcdServer {
    name: String,
    child: Option<Child>,
    /// `http://127.0.0.1:<port>`, the URL clients use.
    pub client_url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Starts a one-member cluster and waits until it answers. Panics when etcd is missing
    /// (callers check [`etcd_binary`] first) or does not become healthy.
    pub fn start() -> EtcdServer {
        let mut cluster = start_cluster(1);
        cluster
            .pop()
            .unwrap_or_else(|| unreachable!("one member started"))
    }

    /// Kills the member with SIGKILL, as a crash would; its data directory stays until drop.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The member's name in the cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member's log so far (etcd writes it to stderr), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a cluster of `members` etcd members on loopback and waits until every one is healthy
/// (a leader is elected). Panics when that does not happen within a bounded time.
pub fn start_cluster(members: usize) -> Vec<EtcdServer> {
    let Some(binary) = etcd_binary() else {
        panic!("etcd is not on PATH; run scripts/install-deps.sh")
    };
    let mut last_error = String::new();
    for _ in 0..START_ATTEMPTS {
        match try_start_cluster(&binary, members) {
            Ok(cluster) => return cluster,
            Err(error) => last_error = error,
        }
    }
    panic!("etcd did not start after {START_ATTEMPTS} attempts: {last_error}");
}

/// A free loopback port (free when asked; etcd binds it a moment later).
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("listener has no address: {e}"))
        .port()
}

fn try_start_cluster(binary: &Path, members: usize) -> Result<Vec<EtcdServer>, String> {
    static CLUSTERS: AtomicU32 = AtomicU32::new(0);
    let token = format!(
        "tandem-test-{}-{}",
        std::process::id(),
        CLUSTERS.fetch_add(1, Ordering::SeqCst)
    );
    let ports: Vec<(u16, u16)> = (0..members).map(|_| (free_port(), free_port())).collect();
    let names: Vec<String> = (0..members).map(|i| format!("member{i}")).collect();
    let initial_cluster = names
        .iter()
        .zip(&ports)
        .map(|(name, (_, peer))| format!("{name}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut servers = Vec::new();
    for (name, (client, peer)) in names.iter().zip(&ports) {
        let dir = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let log = dir.path().join("etcd.log");
        let log_file = std::fs::File::create(&log).map_err(|e| format!("no log file: {e}"))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut command = Command::new(binary);
        // A machine-wide etcd configuration must not leak into the test's.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                command.env_remove(key);
            }
        }
        let child = command
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg(format!("--initial-cluster-token={token}"))
            .arg("--initial-cluster-state=new")
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", binary.display()))?;
        servers.push(EtcdServer {
            name: name.clone(),
            child: Some(child),
            client_url,
            log,
            _dir: dir,
        });
    }
    let deadline = Instant::now() + START_TIMEOUT;
    for server in &mut servers {
        wait_healthy(server, deadline)?;
    }
    Ok(servers)
}

/// Polls the member's `/health` until it says healthy, it exits, or `deadline` passes.
fn wait_healthy(server: &mut EtcdServer, deadline: Instant) -> Result<(), String> {
    loop {
        if let Some(child) = server.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(format!(
                "{} exited ({status}): {}",
                server.name,
                tail(&server.log())
            ));
        }
        if healthy(&server.client_url) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} not healthy within {START_TIMEOUT:?}: {}",
                server.name,
                tail(&server.log())
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether etcd's `/health` at `client_url` answers healthy.
pub fn healthy(client_url: &str) -> bool {
    let Some(addr) = client_url
        .strip_prefix("http://")
        .and_then(|a| a.parse::<SocketAddr>().ok())
    else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains(r#""health":"true""#)
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
