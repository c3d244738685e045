//! `tandem up --etcd`: a one-member etcd started from Debian's `etcd-server` package
//! (`/usr/bin/etcd`) beside the control plane, so the etcd store can be tried on one machine.
//!
//! The member keeps its data in `<data-dir>/etcd`, listens for clients on loopback only
//! (`http://127.0.0.1:PORT`, peers on the next port), and is stopped with the cluster: it runs
//! in a process group of its own, which tandem signals on the way out (a Ctrl-C at the terminal
//! reaches tandem alone, so the store outlives every write tandem still makes). Production
//! layouts run etcd as kubeadm does (three or five members on their own machines, TLS between
//! peers and to clients) and point `tandem server --etcd-servers` at them; the README describes it.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a starting member may take to answer `/health`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running local etcd member; [`LocalEtcd::stop`] (or dropping it) ends it.
pub struct LocalEtcd {
    child: Child,
    client_url: String,
}

impl LocalEtcd {
    /// Starts a member with its data in `data_dir` and its client port `client_port` on
    /// 127.0.0.1 (peers on the next port), and waits until it reports itself healthy.
    pub async fn start(data_dir: &Path, client_port: u16) -> anyhow::Result<LocalEtcd> {
        let binary = find_etcd().context(
            "`tandem up --etcd` needs etcd on PATH: install Debian's etcd-server package \
             (scripts/install-deps.sh does)",
        )?;
        let peer_port = client_port
            .checked_add(1)
            .context("--etcd-port must leave room for the peer port after it")?;
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create {}", data_dir.display()))?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log_path = data_dir.with_extension("log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut command = Command::new(&binary);
        command
            .arg("--name")
            .arg("tandem")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("tandem={peer_url}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("cannot share the etcd log file")?)
            .stderr(log)
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut etcd = LocalEtcd { child, client_url };
        let addr = SocketAddr::from(([127, 0, 0, 1], client_port));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = etcd.child.try_wait().context("cannot watch etcd")? {
                anyhow::bail!(
                    "etcd exited ({status}) before it was ready; its log is {} (is port {client_port} or {peer_port} taken?)",
                    log_path.display()
                );
            }
            if healthy(addr).await {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                etcd.stop();
                anyhow::bail!(
                    "etcd did not become healthy within {START_TIMEOUT:?}; its log is {}",
                    log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The member's client URL, for `--etcd-servers`.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// Stops the member (SIGTERM, then SIGKILL after five seconds) and waits for it.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free loopback port whose successor was free too when asked (a member's client and peer
/// ports), for benchmarks that start their own member.
pub fn free_port_pair() -> anyhow::Result<u16> {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind(("127.0.0.1", 0)).context("no free port")?;
        let port = first.local_addr().context("no local address")?.port();
        let Some(next) = port.checked_add(1) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", next)).is_ok() {
            return Ok(port);
        }
    }
    anyhow::bail!("no two adjacent free loopback ports")
}

/// `etcd` on PATH, or Debian's location.
fn find_etcd() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let debian = PathBuf::from("/usr/bin/etcd");
        debian.is_file().then_some(debian)
    })
}

/// Whether etcd's `/health` answers `"health":"true"`.
async fn healthy(addr: SocketAddr) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut body = Vec::new();
        stream.read_to_end(&mut body).await.ok()?;
        Some(String::from_utf8_lossy(&body).contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Some(true))
    )
}
