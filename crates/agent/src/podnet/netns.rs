//! Network namespaces held by file descriptor, and one thread that works inside them.
//!
//! A pod's namespace is created with `unshare(CLONE_NEWNET)` on a dedicated thread and kept
//! alive only by the descriptor tandem holds (and by the sockets opened in it): nothing is
//! mounted under `/run/netns`, so when tandem exits, even by `kill -9`, the kernel frees every
//! namespace and the veth pairs in them. This is what the CNI `ns` package does for the
//! kubelet's sandboxes, without the bind mount that keeps them after the owner is gone.
//!
//! Sockets, netlink connections and `/proc/sys/net` writes bind to the namespace of the thread
//! that makes them. The [`NsWorker`] thread enters a pod's namespace, runs one short job (open a
//! listener, a netlink socket, write a sysctl) and returns to the host's namespace before the
//! next job, so no tokio worker thread ever changes namespace.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, mpsc};

use nix::sched::{CloneFlags, setns, unshare};

/// A network namespace, alive while this (or a socket opened in it) exists.
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    /// The namespace's descriptor (for `IFLA_NET_NS_FD`).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn current() -> io::Result<NetNs> {
        Ok(NetNs {
            fd: File::open("/proc/thread-self/ns/net")?.into(),
        })
    }
}

type Job = Box<dyn FnOnce(&NetNs) + Send>;

/// The thread that enters namespaces on tandem's behalf. Cheap to clone.
#[derive(Clone)]
pub struct NsWorker {
    jobs: mpsc::Sender<Job>,
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl NsWorker {
    /// Starts the thread. It enters tokio's runtime (through `runtime`) so that sockets it
    /// makes can be registered with the reactor.
    pub fn start(runtime: tokio::runtime::Handle) -> io::Result<NsWorker> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("tandem-netns".into())
            .spawn(move || {
                let _entered = runtime.enter();
                let host = match NetNs::current().and_then(|h| Ok((namespace_id(&h)?, h))) {
                    Ok(h) => {
                        let _ = ready_tx.send(Ok(()));
                        h
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let (host_id, host) = host;
                while let Ok(job) = rx.recv() {
                    job(&host);
                    // A job that could not return to the host namespace poisons the thread:
                    // stop taking jobs rather than run one in the wrong namespace.
                    let back = current_namespace_id().is_ok_and(|now| now == host_id);
                    if !back {
                        tracing::error!(
                            "the network namespace worker could not return to the host namespace; pod networking stops"
                        );
                        return;
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("the namespace thread did not start"))??;
        Ok(NsWorker { jobs })
    }

    async fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&NetNs) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |host| {
            let _ = tx.send(job(host));
        });
        self.jobs
            .send(job)
            .map_err(|_| io::Error::other("the network namespace worker has stopped"))?;
        rx.await
            .map_err(|_| io::Error::other("the network namespace worker has stopped"))?
    }

    /// Creates a new, empty network namespace (only `lo`, down).
    pub async fn create(&self) -> io::Result<Arc<NetNs>> {
        self.submit(|host| {
            unshare(CloneFlags::CLONE_NEWNET).map_err(errno)?;
            // Pods here are IPv4 only: links made in this namespace start without IPv6, which
            // spares each veth the kernel's address autoconfiguration.
            let _ = std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
            let made = NetNs::current();
            setns(host.as_fd(), CloneFlags::CLONE_NEWNET).map_err(errno)?;
            Ok(Arc::new(made?))
        })
        .await
    }

    /// Runs `f` inside `ns` and returns what it made (a socket stays in `ns`).
    pub async fn run_in<T: Send + 'static>(
        &self,
        ns: &Arc<NetNs>,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let ns = ns.clone();
        self.submit(move |host| {
            setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(errno)?;
            let out = f();
            setns(host.as_fd(), CloneFlags::CLONE_NEWNET).map_err(errno)?;
            out
        })
        .await
    }
}

/// A namespace's identity: the device and inode of its nsfs file.
fn namespace_id(ns: &NetNs) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = File::from(ns.fd.try_clone()?).metadata()?;
    Ok((m.dev(), m.ino()))
}

/// The identity of the calling thread's namespace (`stat` follows the magic link).
fn current_namespace_id() -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/thread-self/ns/net")?;
    Ok((m.dev(), m.ino()))
}

/// Whether this process may create network namespaces and links (effective root).
pub fn can_manage_networks() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        // CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21).
        .is_some_and(|caps| caps & (1 << 12) != 0 && caps & (1 << 21) != 0)
}
