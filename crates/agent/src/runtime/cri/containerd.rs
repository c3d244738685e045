//! The private containerd that the `cri` backend runs as a child process: its config, its CNI
//! network, start-up until CRI is ready, importing tandem's local images, and an orderly
//! shutdown that leaves no pods, bridge or cgroups behind.
//!
//! Everything containerd keeps lives under one base directory:
//!
//! ```text
//! <base>/config.toml              containerd config (rewritten at every start)
//! <base>/containerd.pid           pid of the running containerd
//! <base>/root, state, opt, runc   containerd root and state, opt plugin, runc's state root
//! <base>/run/containerd.sock      CRI and containerd gRPC (+ .ttrpc)
//! <base>/cni/net.d/10-tandem.conflist, <base>/cni/ipam
//! <base>/certs.d/<registry>/hosts.toml   registry mirrors and TLS (`--registry-config`)
//! <base>/logs/containerd.log      containerd's output
//! ```
//!
//! containerd 1.6 still uses a few shared host paths: `/run/containerd/s` (shim sockets),
//! `/run/containerd/fifo`, `/var/lib/cni/results` and `/run/netns`. They are shared by every
//! instance on the machine and empty once the pods are gone, so they are left alone.
//!
//! The facts this module relies on were verified on the target machine; see
//! `docs/cri-on-this-machine.md`.

use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures::StreamExt;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::client::{CriClient, CriError};
use super::proto::{NETWORK_READY, runtime_condition};
use crate::registries::{RegistriesConfig, render};

/// The sandbox (pause) image, built by `scripts/build-images.sh` into [`PAUSE_ARCHIVE`]: a
/// busybox shell loop that reaps orphaned processes and exits at once on SIGTERM.
pub const PAUSE_IMAGE: &str = "tandem.local/pause:1";
/// A general-purpose image, built into [`BUSYBOX_ARCHIVE`]: busybox with every applet in `/bin`,
/// `/var/www/index.html`, `Cmd ["/bin/sh"]` and no entrypoint.
pub const BUSYBOX_IMAGE: &str = "tandem.local/busybox:1";
/// File name of the pause image archive in the image directory.
pub const PAUSE_ARCHIVE: &str = "pause.tar";
/// File name of the busybox image archive in the image directory.
pub const BUSYBOX_ARCHIVE: &str = "busybox.tar";

/// The CNI plugins the conflist uses.
const CNI_PLUGINS: [&str; 3] = ["bridge", "host-local", "portmap"];
/// Where Debian (`containernetworking-plugins`) and upstream put CNI plugins.
const CNI_BIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];
/// Searched after `$PATH`: Debian puts runc in /usr/sbin, which a non-login `$PATH` may lack.
const SYSTEM_BIN_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];
/// The longest path a Unix socket address can hold (`sun_path` is 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;
const READY_POLL: Duration = Duration::from_millis(50);
const IMPORT_TIMEOUT: Duration = Duration::from_secs(120);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How many sandboxes [`Containerd::shutdown`] tears down at once.
const TEARDOWN_PARALLELISM: usize = 8;

/// Why the `cri` backend cannot run on this machine; the agent falls back to the emulated
/// runtime. Each problem says what is missing and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("the cri runtime is unavailable: {}", problems.join("; "))]
pub struct Unavailable {
    /// One sentence per missing piece, each ending in its fix.
    pub problems: Vec<String>,
}

/// A failure to start, use or stop the private containerd.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// The machine cannot run containerd (see [`check_prerequisites`]).
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    /// [`ContainerdOptions::pod_cidr`] is not an IPv4 network between /8 and /30.
    #[error("invalid pod cidr {cidr:?}: {reason}")]
    InvalidPodCidr { cidr: String, reason: &'static str },
    /// [`ContainerdOptions::bridge_name`] is not a valid interface name.
    #[error("invalid bridge name {name:?}: it must be 1 to 15 letters, digits, '-', '_' or '.'")]
    InvalidBridgeName { name: String },
    /// [`ContainerdOptions::cgroup_root`] is not a single path segment.
    #[error("invalid cgroup root {name:?}: it must be one non-empty path segment")]
    InvalidCgroupRoot { name: String },
    /// The base directory is too deep for a Unix socket address below it.
    #[error("the socket path {} is longer than {MAX_SOCKET_PATH} bytes; use a shorter base dir", path.display())]
    SocketPathTooLong { path: PathBuf },
    /// A path that has to go into the TOML or JSON config is not UTF-8.
    #[error("the path {} is not valid utf-8", path.display())]
    NonUtf8Path { path: PathBuf },
    /// A file or directory operation failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A program (containerd, ctr, kill, ip) could not be started.
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// A helper program hung.
    #[error("{program} did not finish within {timeout:?}")]
    CommandTimeout { program: String, timeout: Duration },
    /// Something already listens on the socket (a containerd without a pid file).
    #[error("a containerd that tandem did not start already serves {}", socket.display())]
    SocketInUse { socket: PathBuf },
    /// containerd exited before it was ready; its log usually says why.
    #[error("containerd exited during start-up ({status}); last lines of {}:\n{log_tail}", log.display())]
    ExitedEarly {
        status: ExitStatus,
        log: PathBuf,
        log_tail: String,
    },
    /// containerd runs but CRI did not become ready in time; `last` is what was seen last.
    #[error("containerd was not ready within {waited:?} ({last}); see {}", log.display())]
    NotReady {
        waited: Duration,
        last: String,
        log: PathBuf,
    },
    /// An archive in [`ContainerdOptions::image_archives`] is missing.
    #[error("image archive {} does not exist; run scripts/build-images.sh", path.display())]
    MissingArchive { path: PathBuf },
    /// `ctr images import` failed; `output` is what it printed.
    #[error("cannot import the image archive {}: {output}", path.display())]
    Import { path: PathBuf, output: String },
    /// The sandbox image is not in containerd, so no pod could start.
    #[error(
        "the pause image {image} is not in containerd after importing the archives; run scripts/build-images.sh"
    )]
    PauseImageMissing { image: String },
    /// A CRI call the supervisor makes itself failed.
    #[error("cri call to containerd failed")]
    Cri(#[from] CriError),
    /// [`Containerd::shutdown`] could not remove every sandbox; `first` is the first failure.
    /// containerd was stopped anyway; the bridge and cgroups were kept for the pods left.
    #[error("{failed} of {total} pod sandboxes could not be removed")]
    PodsLeft {
        failed: usize,
        total: usize,
        #[source]
        first: CriError,
    },
}

/// Checks that this machine can run the `cri` backend: running as root, `containerd`, `runc`
/// and `ctr` installed, and the CNI `bridge`, `host-local` and `portmap` plugins present.
/// Reports every missing piece at once.
pub fn check_prerequisites() -> Result<(), Unavailable> {
    find_prerequisites(None).map(|_| ())
}

/// The programs and plugin directory the private containerd uses.
#[derive(Clone, Debug)]
struct Prerequisites {
    containerd: PathBuf,
    runc: PathBuf,
    ctr: PathBuf,
    cni_bin_dir: PathBuf,
}

fn find_prerequisites(cni_bin_dir: Option<&Path>) -> Result<Prerequisites, Unavailable> {
    let mut problems = Vec::new();
    match effective_uid() {
        Some(0) => {}
        Some(uid) => problems.push(format!(
            "tandem runs as uid {uid}, and containerd needs root: run tandem as root"
        )),
        None => problems.push("cannot read the effective uid from /proc/self/status".into()),
    }
    let mut binary = |name: &str| {
        let found = find_binary(name);
        if found.is_none() {
            problems.push(format!(
                "{name} is not installed (looked in $PATH, /usr/bin and /usr/sbin): run scripts/install-deps.sh"
            ));
        }
        found
    };
    let containerd = binary("containerd");
    let runc = binary("runc");
    let ctr = binary("ctr");

    let candidates: Vec<PathBuf> = match cni_bin_dir {
        Some(dir) => vec![dir.to_path_buf()],
        None => CNI_BIN_DIRS.iter().map(PathBuf::from).collect(),
    };
    let cni = candidates
        .iter()
        .find(|dir| CNI_PLUGINS.iter().all(|p| is_executable(&dir.join(p))));
    if cni.is_none() {
        let dirs: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
        problems.push(format!(
            "the CNI plugins {} are not all in {}: run scripts/install-deps.sh",
            CNI_PLUGINS.join(", "),
            dirs.join(" or ")
        ));
    }
    match (containerd, runc, ctr, cni) {
        (Some(containerd), Some(runc), Some(ctr), Some(cni)) if problems.is_empty() => {
            Ok(Prerequisites {
                containerd,
                runc,
                ctr,
                cni_bin_dir: cni.clone(),
            })
        }
        _ => Err(Unavailable { problems }),
    }
}

/// The effective uid (second field of the `Uid:` line of `/proc/self/status`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_effective_uid(&status)
}

fn parse_effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SYSTEM_BIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The image archives `scripts/build-images.sh` writes into `dir` (by default
/// `target/images`), pause first.
pub fn image_archives_in(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join(PAUSE_ARCHIVE), dir.join(BUSYBOX_ARCHIVE)]
}

/// How to run the private containerd. [`ContainerdOptions::new`] fills in defaults that are
/// unique per base directory, so two instances (a `tandem up` and a test) can run side by side
/// as long as their pod CIDRs differ.
#[derive(Clone, Debug)]
pub struct ContainerdOptions {
    /// Everything containerd writes goes below it (see the module docs). Absolute, and short
    /// enough that `<base>/run/containerd.sock.ttrpc` fits a socket address (107 bytes).
    pub base_dir: PathBuf,
    /// The node's pod CIDR, an IPv4 network such as `10.244.0.0/24`; the first address is the
    /// bridge's (the pods' gateway), pods get the following ones.
    pub pod_cidr: String,
    /// The Linux bridge the pods attach to; at most 15 characters and unique per instance.
    pub bridge_name: String,
    /// The first segment of every pod's cgroup parent (see [`Containerd::pod_cgroup_parent`]);
    /// unique per instance so that shutdown removes only this instance's cgroups.
    pub cgroup_root: String,
    /// containerd's `sandbox_image`, a fully qualified name present in one of the archives.
    pub pause_image: String,
    /// OCI archives imported (idempotently) at every start, see [`image_archives_in`].
    pub image_archives: Vec<PathBuf>,
    /// Registry mirrors, TLS and credentials (`--registry-config`), written as `hosts.toml`
    /// files under `<base>/certs.d` and the CRI config at every start.
    pub registries: RegistriesConfig,
    /// Where the CNI plugins are; `None` looks in `/usr/lib/cni`, then `/opt/cni/bin`.
    pub cni_bin_dir: Option<PathBuf>,
    /// How long start-up may take until CRI answers and reports the network ready.
    pub start_timeout: Duration,
    /// How long containerd may take to exit after SIGTERM before it is killed.
    pub stop_timeout: Duration,
    /// The cluster's pod range, when other hosts' pods are routed here (the pod network
    /// between hosts): traffic from pods to it keeps the pods' addresses, as flannel's
    /// `ip-masq` leaves it, so peers and NetworkPolicy see the real source. `None`: only
    /// traffic staying on the bridge is left unmasqueraded.
    pub cluster_cidr: Option<String>,
}

impl ContainerdOptions {
    /// Options for `base_dir` (made absolute) and `pod_cidr`, with the bridge name
    /// `tdm<8 hex digits>` and the cgroup root `tandem-<8 hex digits>` derived from a stable hash
    /// of the base directory, the pause image [`PAUSE_IMAGE`], no archives, and timeouts of 15 s
    /// to start and 10 s to stop.
    pub fn new(base_dir: impl Into<PathBuf>, pod_cidr: impl Into<String>) -> ContainerdOptions {
        let base_dir = base_dir.into();
        let base_dir = std::path::absolute(&base_dir).unwrap_or(base_dir);
        let tag = instance_tag(&base_dir);
        ContainerdOptions {
            bridge_name: format!("tdm{tag}"),
            cgroup_root: format!("tandem-{tag}"),
            base_dir,
            pod_cidr: pod_cidr.into(),
            pause_image: PAUSE_IMAGE.to_string(),
            image_archives: Vec::new(),
            registries: RegistriesConfig::default(),
            cni_bin_dir: None,
            start_timeout: Duration::from_secs(15),
            stop_timeout: Duration::from_secs(10),
            cluster_cidr: None,
        }
    }
}

/// 8 hex digits of the FNV-1a hash of `path`: stable across builds and Rust versions, unlike
/// `DefaultHasher`, so a restarted tandem finds the bridge and cgroups of the previous run.
fn instance_tag(path: &Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}

/// An IPv4 network in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Cidr {
    fn parse(cidr: &str) -> Result<Ipv4Cidr, ContainerdError> {
        let invalid = |reason| ContainerdError::InvalidPodCidr {
            cidr: cidr.to_string(),
            reason,
        };
        let (address, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| invalid("expected <ipv4 address>/<prefix length>"))?;
        let network: Ipv4Addr = address
            .parse()
            .map_err(|_| invalid("the address is not an ipv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| invalid("the prefix length is not a number"))?;
        if !(8..=30).contains(&prefix) {
            return Err(invalid("the prefix length must be between 8 and 30"));
        }
        let mask = u32::MAX << (32 - prefix);
        if u32::from(network) & !mask != 0 {
            return Err(invalid("the address has host bits set"));
        }
        Ok(Ipv4Cidr { network, prefix })
    }

    /// The first address of the network.
    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    fn contains(&self, address: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix);
        u32::from(address) & mask == u32::from(self.network)
    }
}

impl std::fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

fn validate_bridge_name(name: &str) -> Result<(), ContainerdError> {
    let valid = (1..=15).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(ContainerdError::InvalidBridgeName {
            name: name.to_string(),
        })
    }
}

fn validate_cgroup_root(name: &str) -> Result<(), ContainerdError> {
    let valid = !name.is_empty() && !name.contains('/') && name != "." && name != "..";
    if valid {
        Ok(())
    } else {
        Err(ContainerdError::InvalidCgroupRoot {
            name: name.to_string(),
        })
    }
}

/// The paths under the base directory.
#[derive(Clone, Debug)]
struct Layout {
    base: PathBuf,
}

impl Layout {
    fn config(&self) -> PathBuf {
        self.base.join("config.toml")
    }
    fn pid_file(&self) -> PathBuf {
        self.base.join("containerd.pid")
    }
    fn root(&self) -> PathBuf {
        self.base.join("root")
    }
    fn state(&self) -> PathBuf {
        self.base.join("state")
    }
    fn opt(&self) -> PathBuf {
        self.base.join("opt")
    }
    fn runc_root(&self) -> PathBuf {
        self.base.join("runc")
    }
    fn run(&self) -> PathBuf {
        self.base.join("run")
    }
    fn socket(&self) -> PathBuf {
        self.run().join("containerd.sock")
    }
    fn ttrpc_socket(&self) -> PathBuf {
        self.run().join("containerd.sock.ttrpc")
    }
    fn cni_conf_dir(&self) -> PathBuf {
        self.base.join("cni").join("net.d")
    }
    fn conflist(&self) -> PathBuf {
        self.cni_conf_dir().join("10-tandem.conflist")
    }
    fn ipam_dir(&self) -> PathBuf {
        self.base.join("cni").join("ipam")
    }
    fn logs(&self) -> PathBuf {
        self.base.join("logs")
    }
    fn certs_dir(&self) -> PathBuf {
        self.base.join("certs.d")
    }
    fn log_file(&self) -> PathBuf {
        self.logs().join("containerd.log")
    }
}

/// The values the config and conflist are rendered from.
struct Rendering<'a> {
    layout: &'a Layout,
    pause_image: &'a str,
    runc: &'a Path,
    cni_bin_dir: &'a Path,
    bridge_name: &'a str,
    cidr: Ipv4Cidr,
    /// The CRI `registry` tables ([`crate::registries::render`]).
    registry_toml: &'a str,
}

fn utf8(path: &Path) -> Result<&str, ContainerdError> {
    path.to_str().ok_or_else(|| ContainerdError::NonUtf8Path {
        path: path.to_path_buf(),
    })
}

/// A TOML basic string.
fn toml_string(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

impl Rendering<'_> {
    /// containerd's config, as section 3 of the runbook verified it, plus runc's state root
    /// under the base directory.
    fn config_toml(&self) -> Result<String, ContainerdError> {
        let l = self.layout;
        let s = |path: PathBuf| utf8(&path).map(toml_string);
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        Ok(format!(
            r#"# Written by tandem at every start; edits are lost.
version = 2
root = {root}
state = {state}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = {socket}
[ttrpc]
  address = {ttrpc}
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = {opt}
  [{cri}]
    # Required without CAP_SYS_RESOURCE: sandboxes would get oom_score_adj -998 and fail.
    restrict_oom_score_adj = true
    sandbox_image = {pause}
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_apparmor = true
    enable_selinux = false
    disable_hugetlb_controller = true
    tolerate_missing_hugetlb_controller = true
    [{cri}.containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [{cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{cri}.containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = {runc}
          Root = {runc_root}
    [{cri}.cni]
      bin_dir = {cni_bin}
      conf_dir = {conf_dir}
      max_conf_num = 1
{registry}"#,
            root = s(l.root())?,
            state = s(l.state())?,
            socket = s(l.socket())?,
            ttrpc = s(l.ttrpc_socket())?,
            opt = s(l.opt())?,
            pause = toml_string(self.pause_image),
            runc = s(self.runc.to_path_buf())?,
            runc_root = s(l.runc_root())?,
            cni_bin = s(self.cni_bin_dir.to_path_buf())?,
            conf_dir = s(l.cni_conf_dir())?,
            registry = indent(self.registry_toml, "  "),
        ))
    }

    /// The CNI network: a bridge with the first address as gateway, host-local IPAM with its
    /// state under the base directory, and portmap for hostPorts.
    ///
    /// NAT to the outside is not the bridge plugin's `ipMasq`, which adds a chain of its own and
    /// a jump to it in `nat POSTROUTING` for every pod (a handful of `iptables` runs at each
    /// sandbox's setup and teardown, each slower as the table grows with the pods): with 200
    /// pods created at once it cost a quarter of the runtime's CPU (`tandem bench startup`,
    /// BENCHMARKS.md). One rule for the whole pod CIDR, added by [`Containerd::start`] and
    /// removed at shutdown, does the same for every pod, as flannel and kindnet do.
    fn conflist(&self) -> Result<String, ContainerdError> {
        let ipam_dir = utf8(&self.layout.ipam_dir())?.to_string();
        let conflist = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": "tandem",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge_name,
                    "isGateway": true,
                    "ipMasq": false,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{
                            "subnet": self.cidr.to_string(),
                            "gateway": self.cidr.gateway().to_string(),
                        }]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": ipam_dir,
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": true}},
            ],
        });
        Ok(format!("{conflist:#}\n"))
    }
}

/// A running private containerd, started by [`Containerd::start`].
///
/// Dropping it without [`Containerd::shutdown`] kills containerd (SIGKILL); its pods keep running
/// in their shims and the next start on the same base directory adopts them.
pub struct Containerd {
    options: ContainerdOptions,
    layout: Layout,
    cidr: Ipv4Cidr,
    client: CriClient,
    pid: u32,
    child: Mutex<Option<Child>>,
    ctr: PathBuf,
}

/// Imports image archives into a running containerd's `k8s.io` namespace (the one CRI reads)
/// with `ctr images import`, decompressing `.tar.gz` and `.tar.zst` through `gzip`/`zstd` on
/// the way. Re-importing an archive is a no-op.
#[derive(Clone, Debug)]
pub struct Importer {
    ctr: PathBuf,
    socket: PathBuf,
}

impl Importer {
    /// Imports one archive (its compression told by its name, see
    /// [`super::archives::archive_kind`]); on failure the error carries what the tools printed.
    pub async fn import(&self, path: &Path) -> Result<(), ContainerdError> {
        let kind =
            super::archives::archive_kind(path).unwrap_or(super::archives::Compression::None);
        let mut ctr = Command::new(&self.ctr);
        ctr.arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io", "images", "import"]);
        let Some((program, args)) = kind.decompressor() else {
            ctr.arg(path);
            let output = run(ctr, "ctr", IMPORT_TIMEOUT).await?;
            return if output.status.success() {
                Ok(())
            } else {
                Err(ContainerdError::Import {
                    path: path.to_path_buf(),
                    output: combined_output(&output),
                })
            };
        };
        let spawn_error = |program: &str| {
            let program = program.to_string();
            move |source| ContainerdError::Spawn { program, source }
        };
        let mut decompress = Command::new(program)
            .args(args)
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_error(program))?;
        let pipe: Stdio = decompress
            .stdout
            .take()
            .and_then(|out| out.try_into().ok())
            .unwrap_or_else(Stdio::null);
        ctr.arg("-")
            .stdin(pipe)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let imported = ctr.spawn().map_err(spawn_error("ctr"))?;
        let both =
            async { tokio::join!(imported.wait_with_output(), decompress.wait_with_output()) };
        let (imported, decompressed) =
            tokio::time::timeout(IMPORT_TIMEOUT, both)
                .await
                .map_err(|_| ContainerdError::CommandTimeout {
                    program: "ctr".into(),
                    timeout: IMPORT_TIMEOUT,
                })?;
        let imported = imported.map_err(spawn_error("ctr"))?;
        let decompressed = decompressed.map_err(spawn_error(program))?;
        if !decompressed.status.success() {
            return Err(ContainerdError::Import {
                path: path.to_path_buf(),
                output: format!("{program}: {}", combined_output(&decompressed)),
            });
        }
        if !imported.status.success() {
            return Err(ContainerdError::Import {
                path: path.to_path_buf(),
                output: combined_output(&imported),
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Containerd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containerd")
            .field("base_dir", &self.options.base_dir)
            .field("pid", &self.pid)
            .field("pod_cidr", &self.cidr)
            .field("bridge_name", &self.options.bridge_name)
            .finish()
    }
}

impl Containerd {
    /// Starts containerd for `options` and returns once CRI answers, reports `NetworkReady` and
    /// has the images from `options.image_archives`.
    ///
    /// Writes `config.toml` and the CNI conflist, then runs `containerd --config …` in its own
    /// process group (so a Ctrl-C meant for tandem does not stop it before tandem has removed
    /// its pods), output appended to `logs/containerd.log`. If a containerd from an earlier run
    /// on the same base directory is still running (its pid file says so), it is stopped first:
    /// its pods keep running in their shims, and the new containerd recovers them from the same
    /// root and state, so they show up in `ListPodSandbox`/`ListContainers` for re-adoption.
    pub async fn start(options: ContainerdOptions) -> Result<Containerd, ContainerdError> {
        let prerequisites = find_prerequisites(options.cni_bin_dir.as_deref())?;
        let cidr = Ipv4Cidr::parse(&options.pod_cidr)?;
        validate_bridge_name(&options.bridge_name)?;
        validate_cgroup_root(&options.cgroup_root)?;
        let layout = Layout {
            base: options.base_dir.clone(),
        };
        let socket = layout.ttrpc_socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ContainerdError::SocketPathTooLong { path: socket });
        }
        for archive in &options.image_archives {
            if !archive.is_file() {
                return Err(ContainerdError::MissingArchive {
                    path: archive.clone(),
                });
            }
        }
        for dir in [
            layout.root(),
            layout.state(),
            layout.opt(),
            layout.runc_root(),
            layout.run(),
            layout.cni_conf_dir(),
            layout.ipam_dir(),
            layout.logs(),
        ] {
            create_dir_all(&dir)?;
        }

        stop_previous(&layout, options.stop_timeout).await?;
        if tokio::net::UnixStream::connect(layout.socket())
            .await
            .is_ok()
        {
            return Err(ContainerdError::SocketInUse {
                socket: layout.socket(),
            });
        }
        remove_file_if_present(&layout.socket())?;
        remove_file_if_present(&layout.ttrpc_socket())?;

        let certs_dir = layout.certs_dir();
        let registry_files = render(&options.registries, utf8(&certs_dir)?);
        write_certs_dir(&certs_dir, &registry_files.hosts)?;
        let rendering = Rendering {
            registry_toml: &registry_files.cri_registry,
            layout: &layout,
            pause_image: &options.pause_image,
            runc: &prerequisites.runc,
            cni_bin_dir: &prerequisites.cni_bin_dir,
            bridge_name: &options.bridge_name,
            cidr,
        };
        write_file(&layout.config(), &rendering.config_toml()?)?;
        write_file(&layout.conflist(), &rendering.conflist()?)?;

        let mut child = spawn_containerd(&prerequisites.containerd, &layout)?;
        let pid = child.id().unwrap_or_default();
        write_file(&layout.pid_file(), &format!("{pid}\n"))?;
        tracing::info!(pid, base_dir = %layout.base.display(), "containerd started");

        let client = match wait_ready(&mut child, &layout, options.start_timeout).await {
            Ok(client) => client,
            Err(error) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let _ = std::fs::remove_file(layout.pid_file());
                return Err(error);
            }
        };
        let containerd = Containerd {
            options,
            layout,
            cidr,
            client,
            pid,
            child: Mutex::new(Some(child)),
            ctr: prerequisites.ctr.clone(),
        };
        if let Err(error) = containerd.import_images(&prerequisites.ctr).await {
            containerd.stop_process().await;
            return Err(error);
        }
        masquerade(
            MasqueradeOp::Ensure,
            &cidr,
            &containerd.options.bridge_name,
            containerd.options.cluster_cidr.as_deref(),
        )
        .await;
        ensure_bridge(&containerd.options.bridge_name, &cidr).await;
        Ok(containerd)
    }

    /// Imports every archive into the `k8s.io` namespace (the one CRI reads), then checks that
    /// the pause image is there. Re-importing an archive is a no-op.
    async fn import_images(&self, ctr: &Path) -> Result<(), ContainerdError> {
        let socket = self.layout.socket();
        for archive in &self.options.image_archives {
            let mut command = Command::new(ctr);
            command
                .arg("--address")
                .arg(&socket)
                .args(["--namespace", "k8s.io", "images", "import"])
                .arg(archive);
            let output = run(command, "ctr", IMPORT_TIMEOUT).await?;
            if !output.status.success() {
                return Err(ContainerdError::Import {
                    path: archive.clone(),
                    output: combined_output(&output),
                });
            }
            tracing::debug!(archive = %archive.display(), "image archive imported");
        }
        if self
            .client
            .image_status(&self.options.pause_image)
            .await?
            .is_none()
        {
            return Err(ContainerdError::PauseImageMissing {
                image: self.options.pause_image.clone(),
            });
        }
        Ok(())
    }

    /// What imports archives into this containerd.
    pub fn importer(&self) -> Importer {
        Importer {
            ctr: self.ctr.clone(),
            socket: self.layout.socket(),
        }
    }

    /// A client for containerd's CRI socket (a clone sharing one connection).
    pub fn client(&self) -> CriClient {
        self.client.clone()
    }

    /// containerd's gRPC socket (CRI and containerd's own API).
    pub fn socket_path(&self) -> PathBuf {
        self.layout.socket()
    }

    /// The process id of containerd.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The base directory everything lives under.
    pub fn base_dir(&self) -> &Path {
        &self.layout.base
    }

    /// containerd's log file.
    pub fn log_path(&self) -> PathBuf {
        self.layout.log_file()
    }

    /// The pod CIDR pods get their addresses from.
    pub fn pod_cidr(&self) -> String {
        self.cidr.to_string()
    }

    /// The bridge's address, the pods' default gateway (the first address of the pod CIDR).
    pub fn gateway(&self) -> Ipv4Addr {
        self.cidr.gateway()
    }

    /// Whether `address` is inside the pod CIDR.
    pub fn pod_cidr_contains(&self, address: Ipv4Addr) -> bool {
        self.cidr.contains(address)
    }

    /// The Linux bridge the pods are attached to.
    pub fn bridge_name(&self) -> &str {
        &self.options.bridge_name
    }

    /// The cgroup root below which every pod's cgroup parent lives.
    pub fn cgroup_root(&self) -> &str {
        &self.options.cgroup_root
    }

    /// The `LinuxPodSandboxConfig.cgroup_parent` for a pod: `/<cgroup root>/pod-<uid>`. With
    /// cgroupfs, containerd puts the containers at
    /// `/sys/fs/cgroup/<controller>/<cgroup root>/pod-<uid>/<container id>`.
    pub fn pod_cgroup_parent(&self, pod_uid: &str) -> String {
        format!("/{}/pod-{pod_uid}", self.options.cgroup_root)
    }

    /// Stops containerd and tidies up after it.
    ///
    /// With `remove_pods`, first stops and removes every sandbox (in parallel, at most 8 at a
    /// time) with StopPodSandbox + RemovePodSandbox, which kills containers without a grace
    /// period: stopping containers gracefully beforehand is the caller's job. Then sends SIGTERM,
    /// waits up to `stop_timeout` and kills containerd if it is still there, and removes its
    /// sockets and pid file. When every sandbox is gone, it also deletes the bridge and removes
    /// the cgroup directories under `/sys/fs/cgroup/*/<cgroup root>`.
    ///
    /// Without `remove_pods`, the pods keep running in their shims (with the bridge) for the next
    /// start to adopt. Calling it again does nothing more.
    pub async fn shutdown(&self, remove_pods: bool) -> Result<(), ContainerdError> {
        let removal = if remove_pods && self.child.lock().await.is_some() {
            self.remove_all_sandboxes().await
        } else {
            Ok(())
        };
        self.stop_process().await;
        if remove_pods {
            // Whatever outlived the removal (a sandbox created while it ran, one that failed to
            // go) must not outlive tandem: its shim and processes are killed.
            let cgroup_fs = Path::new("/sys/fs/cgroup");
            let killed = super::leftovers::kill_leftovers(
                &self.layout.socket(),
                cgroup_fs,
                &self.options.cgroup_root,
            );
            if killed > 0 {
                tracing::warn!(
                    killed,
                    "killed shims and container processes left after the pods were removed"
                );
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                while tokio::time::Instant::now() < deadline
                    && !super::leftovers::cgroup_pids(cgroup_fs, &self.options.cgroup_root)
                        .is_empty()
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            masquerade(
                MasqueradeOp::Remove,
                &self.cidr,
                &self.options.bridge_name,
                self.options.cluster_cidr.as_deref(),
            )
            .await;
            delete_bridge(&self.options.bridge_name).await;
            remove_cgroups(cgroup_fs, &self.options.cgroup_root);
        }
        removal
    }

    /// Removes every sandbox, listing again after each pass (at most three) so that one created
    /// while a pass ran goes too.
    async fn remove_all_sandboxes(&self) -> Result<(), ContainerdError> {
        let mut result = Ok(());
        for _ in 0..3 {
            result = self.remove_listed_sandboxes().await;
            let left = self.client.list_pod_sandbox(None).await.map(|s| s.len());
            if matches!(left, Ok(0)) {
                return result;
            }
        }
        result
    }

    async fn remove_listed_sandboxes(&self) -> Result<(), ContainerdError> {
        let sandboxes = self.client.list_pod_sandbox(None).await?;
        let total = sandboxes.len();
        let client = &self.client;
        let results: Vec<Result<(), CriError>> = futures::stream::iter(sandboxes)
            .map(|sandbox| async move {
                client.stop_pod_sandbox(&sandbox.id).await?;
                client.remove_pod_sandbox(&sandbox.id).await
            })
            .buffer_unordered(TEARDOWN_PARALLELISM)
            .collect()
            .await;
        let mut errors = results.into_iter().filter_map(Result::err);
        match errors.next() {
            None => Ok(()),
            Some(first) => Err(ContainerdError::PodsLeft {
                failed: 1 + errors.count(),
                total,
                first,
            }),
        }
    }

    /// SIGTERM, a bounded wait, SIGKILL; then removes the sockets and the pid file.
    async fn stop_process(&self) {
        let Some(mut child) = self.child.lock().await.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            signal(pid, "TERM").await;
        }
        match tokio::time::timeout(self.options.stop_timeout, child.wait()).await {
            Ok(status) => tracing::info!(?status, "containerd exited"),
            Err(_) => {
                tracing::warn!(
                    timeout = ?self.options.stop_timeout,
                    "containerd did not exit after SIGTERM; killing it"
                );
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
        for path in [
            self.layout.socket(),
            self.layout.ttrpc_socket(),
            self.layout.pid_file(),
        ] {
            if let Err(error) = remove_file_if_present(&path) {
                tracing::warn!(%error, "cleanup after containerd failed");
            }
        }
    }
}

fn spawn_containerd(program: &Path, layout: &Layout) -> Result<Child, ContainerdError> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(layout.log_file())
        .map_err(|source| ContainerdError::Io {
            action: "open",
            path: layout.log_file(),
            source,
        })?;
    let log_for_stdout = log.try_clone().map_err(|source| ContainerdError::Io {
        action: "open",
        path: layout.log_file(),
        source,
    })?;
    let mut command = Command::new(program);
    command
        .arg("--config")
        .arg(layout.config())
        .env("PATH", child_path())
        .stdin(Stdio::null())
        .stdout(log_for_stdout)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true);
    command.spawn().map_err(|source| ContainerdError::Spawn {
        program: program.display().to_string(),
        source,
    })
}

/// `$PATH` plus the system directories, so containerd finds its shim and the shim finds runc.
fn child_path() -> std::ffi::OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&inherited)
        .chain(SYSTEM_BIN_DIRS.iter().map(PathBuf::from))
        .collect::<Vec<_>>();
    std::env::join_paths(dirs).unwrap_or(inherited)
}

/// Polls until CRI answers `Version` and `Status` says the network is ready.
async fn wait_ready(
    child: &mut Child,
    layout: &Layout,
    timeout: Duration,
) -> Result<CriClient, ContainerdError> {
    let started = Instant::now();
    let mut last = String::from("the socket did not appear");
    let mut client: Option<CriClient> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(ContainerdError::ExitedEarly {
                    status,
                    log: layout.log_file(),
                    log_tail: log_tail(&layout.log_file(), 20),
                });
            }
            Ok(None) => {}
            Err(source) => {
                return Err(ContainerdError::Io {
                    action: "wait for containerd",
                    path: layout.base.clone(),
                    source,
                });
            }
        }
        if client.is_none() && layout.socket().exists() {
            match CriClient::connect(layout.socket()).await {
                Ok(connected) => client = Some(connected),
                Err(error) => last = error.to_string(),
            }
        }
        if let Some(client) = &client {
            match probe(client).await {
                Ok(()) => return Ok(client.clone()),
                Err(observed) => last = observed,
            }
        }
        if started.elapsed() >= timeout {
            return Err(ContainerdError::NotReady {
                waited: started.elapsed(),
                last,
                log: layout.log_file(),
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Whether CRI is up and the network ready; otherwise what was seen instead.
async fn probe(client: &CriClient) -> Result<(), String> {
    client.version().await.map_err(|e| e.to_string())?;
    let status = client.status().await.map_err(|e| e.to_string())?;
    match runtime_condition(&status, NETWORK_READY) {
        Some(condition) if condition.status => Ok(()),
        Some(condition) => Err(format!(
            "NetworkReady is false: {} {}",
            condition.reason, condition.message
        )),
        None => Err("CRI status reports no NetworkReady condition".into()),
    }
}

/// Stops a containerd left running by an earlier run on the same base directory, if its pid file
/// names a live containerd with this config.
async fn stop_previous(layout: &Layout, timeout: Duration) -> Result<(), ContainerdError> {
    let Ok(contents) = std::fs::read_to_string(layout.pid_file()) else {
        return Ok(());
    };
    let Ok(pid) = contents.trim().parse::<u32>() else {
        return remove_file_if_present(&layout.pid_file());
    };
    if !is_our_containerd(pid, &layout.config()) {
        return remove_file_if_present(&layout.pid_file());
    }
    tracing::info!(
        pid,
        "stopping the containerd of an earlier run; its pods keep running and will be adopted"
    );
    signal(pid, "TERM").await;
    let deadline = Instant::now() + timeout;
    while is_alive(pid) {
        if Instant::now() >= deadline {
            tracing::warn!(pid, "the earlier containerd ignored SIGTERM; killing it");
            signal(pid, "KILL").await;
            let kill_deadline = Instant::now() + Duration::from_secs(5);
            while is_alive(pid) && Instant::now() < kill_deadline {
                tokio::time::sleep(READY_POLL).await;
            }
            break;
        }
        tokio::time::sleep(READY_POLL).await;
    }
    remove_file_if_present(&layout.pid_file())
}

/// Whether `pid` runs `containerd --config <config>` (guards against a reused pid).
fn is_our_containerd(pid: u32, config: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let runs_containerd = args
        .first()
        .is_some_and(|program| program.ends_with(b"containerd"));
    let config = config.as_os_str().as_encoded_bytes();
    runs_containerd
        && args
            .windows(2)
            .any(|w| w[0] == b"--config" && w[1] == config)
}

/// Whether `pid` exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Sends a signal with the `kill` program (tandem forbids `unsafe`, so no libc).
async fn signal(pid: u32, name: &str) {
    let mut command = Command::new("kill");
    command.arg(format!("-{name}")).arg(pid.to_string());
    match run(command, "kill", COMMAND_TIMEOUT).await {
        Ok(output) if output.status.success() => {}
        Ok(output) => tracing::debug!(pid, output = combined_output(&output), "kill failed"),
        Err(error) => tracing::warn!(pid, %error, "cannot send a signal"),
    }
}

/// What [`masquerade`] does with the pod CIDR's NAT rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MasqueradeOp {
    /// Adds the rule unless it is there already (a restart adopting its pods finds it).
    Ensure,
    /// Deletes the rule if it is there.
    Remove,
}

/// The `iptables` arguments after the operation flag for the rule that masquerades traffic
/// from the pod CIDR leaving through any interface other than the bridge (traffic between pods,
/// and to the host, keeps the pods' addresses) and, with `cluster`, not to the cluster's pod
/// range (other hosts' pods).
fn masquerade_rule(cidr: &Ipv4Cidr, bridge: &str, cluster: Option<&str>) -> Vec<String> {
    let mut head = vec![
        "POSTROUTING".to_string(),
        "-s".to_string(),
        cidr.to_string(),
    ];
    if let Some(cluster) = cluster {
        head.extend(["!".to_string(), "-d".to_string(), cluster.to_string()]);
    }
    head.into_iter().chain(masquerade_tail(bridge)).collect()
}

fn masquerade_tail(bridge: &str) -> Vec<String> {
    [
        "!",
        "-o",
        bridge,
        "-m",
        "comment",
        "--comment",
        &format!("tandem: masquerade the pods of {bridge}"),
        "-j",
        "MASQUERADE",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// Adds or removes the pod CIDR's masquerade rule in `nat POSTROUTING`. Best effort: without
/// it, pods still reach each other and the host, and the host reaches them; only traffic to
/// other machines lacks NAT, so a failure is a warning.
async fn masquerade(op: MasqueradeOp, cidr: &Ipv4Cidr, bridge: &str, cluster: Option<&str>) {
    let rule = masquerade_rule(cidr, bridge, cluster);
    let iptables = |flag: &str| {
        let mut command = Command::new("iptables");
        command.args(["-w", "5", "-t", "nat", flag]).args(&rule);
        command
    };
    let present = matches!(
        run(iptables("-C"), "iptables", COMMAND_TIMEOUT).await,
        Ok(output) if output.status.success()
    );
    let change = match (op, present) {
        (MasqueradeOp::Ensure, false) => "-A",
        (MasqueradeOp::Remove, true) => "-D",
        _ => return,
    };
    match run(iptables(change), "iptables", COMMAND_TIMEOUT).await {
        Ok(output) if output.status.success() => {
            tracing::debug!(%cidr, bridge, ?op, "pod CIDR masquerade rule updated")
        }
        Ok(output) => tracing::warn!(
            %cidr,
            ?op,
            output = combined_output(&output),
            "cannot update the pod CIDR's masquerade rule; traffic from pods to other machines is not NATed"
        ),
        Err(error) => tracing::warn!(
            %cidr,
            ?op,
            %error,
            "cannot run iptables for the pod CIDR's masquerade rule; traffic from pods to other machines is not NATed"
        ),
    }
}

/// Creates the pods' bridge with the gateway address before the first pod, as the CNI bridge
/// plugin would at the first sandbox (it adopts a bridge that already has its gateway address).
/// Node-level services bind to the gateway address from the start: the cluster DNS server and
/// the API server's listener for the `kubernetes` Service. `nf_call_iptables` is set on this
/// bridge only, so traffic between two pods of the node passes the service proxy's conntrack
/// (upstream asks for the `br_netfilter` sysctl host-wide). Best effort: CNI still creates the
/// bridge at the first pod if this fails.
async fn ensure_bridge(name: &str, cidr: &Ipv4Cidr) {
    let ip = |args: &[&str]| {
        let mut command = Command::new("ip");
        command.args(args);
        command
    };
    let gateway = format!("{}/{}", cidr.gateway(), cidr.prefix);
    remove_stale_bridges(name, &cidr.gateway().to_string()).await;
    let steps: [Vec<&str>; 3] = [
        vec![
            "link",
            "add",
            name,
            "type",
            "bridge",
            "nf_call_iptables",
            "1",
        ],
        vec!["addr", "add", &gateway, "dev", name],
        vec!["link", "set", name, "up"],
    ];
    for step in steps {
        match run(ip(&step), "ip", COMMAND_TIMEOUT).await {
            Ok(output) if output.status.success() => {}
            Ok(output) => {
                let text = combined_output(&output);
                // A bridge left by the previous run (pods kept for re-adoption) is reused.
                if !text.contains("File exists") {
                    tracing::warn!(
                        bridge = name,
                        output = text,
                        "cannot set up the pods' bridge"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(bridge = name, %error, "cannot run ip for the pods' bridge")
            }
        }
    }
}

/// Deletes bridges of earlier tandem runs (`tdm…`, not `keep`) that hold this node's gateway
/// address and have no pod attached: left by a run that was killed, they would take the pod
/// range's route and make every pod unreachable from the host. A bridge with pods attached is
/// never touched.
async fn remove_stale_bridges(keep: &str, gateway: &str) {
    let mut command = Command::new("ip");
    command.args(["-o", "-4", "addr", "show"]);
    let Ok(output) = run(command, "ip", COMMAND_TIMEOUT).await else {
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(_index), Some(dev), Some("inet"), Some(addr)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        if dev == keep || !dev.starts_with("tdm") || addr.split('/').next() != Some(gateway) {
            continue;
        }
        let ports = std::fs::read_dir(format!("/sys/class/net/{dev}/brif"))
            .map(|d| d.count())
            .unwrap_or(1);
        if ports == 0 {
            tracing::warn!(
                bridge = dev,
                gateway,
                "removing a stale bridge left by an earlier run"
            );
            delete_bridge(dev).await;
        }
    }
}

/// Deletes the bridge; a missing bridge is fine.
async fn delete_bridge(name: &str) {
    let mut command = Command::new("ip");
    command.args(["link", "delete", name]);
    match run(command, "ip", COMMAND_TIMEOUT).await {
        Ok(output) if output.status.success() => tracing::debug!(bridge = name, "bridge deleted"),
        Ok(output) => {
            let text = combined_output(&output);
            if !text.contains("Cannot find device") {
                tracing::warn!(bridge = name, output = text, "cannot delete the bridge");
            }
        }
        Err(error) => tracing::warn!(bridge = name, %error, "cannot delete the bridge"),
    }
}

/// Removes `<hierarchy>/<cgroup_root>` depth-first in every cgroup hierarchy under `cgroup_fs`.
/// runc removes the container cgroups but leaves the pod parents. Best effort: a cgroup that
/// still has processes stays, with a warning.
fn remove_cgroups(cgroup_fs: &Path, cgroup_root: &str) {
    let Ok(hierarchies) = std::fs::read_dir(cgroup_fs) else {
        return;
    };
    for hierarchy in hierarchies.flatten() {
        // cgroup v1 links `cpu` to `cpu,cpuacct`; visit each hierarchy once.
        if !hierarchy.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let root = hierarchy.path().join(cgroup_root);
        if root.is_dir()
            && let Err(error) = remove_dir_depth_first(&root)
        {
            tracing::warn!(cgroup = %root.display(), %error, "cannot remove the cgroup");
        }
    }
}

/// Removes a directory tree of cgroups: only directories, since a cgroup's files vanish with it.
fn remove_dir_depth_first(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_dir_depth_first(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

async fn run(
    mut command: Command,
    program: &str,
    timeout: Duration,
) -> Result<std::process::Output, ContainerdError> {
    command.stdin(Stdio::null()).kill_on_drop(true);
    match tokio::time::timeout(timeout, command.output()).await {
        Ok(output) => output.map_err(|source| ContainerdError::Spawn {
            program: program.to_string(),
            source,
        }),
        Err(_) => Err(ContainerdError::CommandTimeout {
            program: program.to_string(),
            timeout,
        }),
    }
}

fn combined_output(output: &std::process::Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.trim().is_empty() {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.push_str(stdout.trim());
    }
    if text.is_empty() {
        text = output.status.to_string();
    }
    text
}

/// The last `lines` lines of a log file, for error messages.
fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(contents) = std::fs::read(path) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&contents);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Lines of `text` with `prefix` before each non-empty one.
fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("{prefix}{l}\n")
            }
        })
        .collect()
}

/// Replaces the `certs.d` directory with one `<host>/hosts.toml` per entry, so that a host
/// dropped from the configuration is gone at the next start.
fn write_certs_dir(
    dir: &Path,
    hosts: &std::collections::BTreeMap<String, String>,
) -> Result<(), ContainerdError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| ContainerdError::Io {
            action: "remove",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    create_dir_all(dir)?;
    for (host, text) in hosts {
        let host_dir = dir.join(host);
        create_dir_all(&host_dir)?;
        write_file(&host_dir.join("hosts.toml"), text)?;
    }
    Ok(())
}

fn create_dir_all(path: &Path) -> Result<(), ContainerdError> {
    std::fs::create_dir_all(path).map_err(|source| ContainerdError::Io {
        action: "create",
        path: path.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, contents: &str) -> Result<(), ContainerdError> {
    std::fs::write(path, contents).map_err(|source| ContainerdError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

fn remove_file_if_present(path: &Path) -> Result<(), ContainerdError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ContainerdError::Io {
            action: "remove",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendering_for<'a>(layout: &'a Layout, cidr: &str) -> Rendering<'a> {
        Rendering {
            layout,
            pause_image: PAUSE_IMAGE,
            runc: Path::new("/usr/sbin/runc"),
            cni_bin_dir: Path::new("/usr/lib/cni"),
            bridge_name: "tdm0123abcd",
            cidr: Ipv4Cidr::parse(cidr).expect("valid cidr"),
            registry_toml: "",
        }
    }

    #[test]
    fn default_names_are_stable_unique_and_short_enough() {
        let a = ContainerdOptions::new("/var/lib/tandem/a", "10.244.0.0/24");
        let again = ContainerdOptions::new("/var/lib/tandem/a", "10.244.0.0/24");
        let b = ContainerdOptions::new("/var/lib/tandem/b", "10.244.0.0/24");
        assert_eq!(a.bridge_name, again.bridge_name);
        assert_ne!(a.bridge_name, b.bridge_name);
        assert_eq!(a.bridge_name.len(), 11);
        validate_bridge_name(&a.bridge_name).expect("valid bridge name");
        assert_eq!(
            a.cgroup_root.strip_prefix("tandem-"),
            a.bridge_name.strip_prefix("tdm")
        );
        // Pinned so that a restarted tandem (even a newer build) finds the same bridge.
        assert_eq!(instance_tag(Path::new("/var/lib/tandem/a")), "1532d045");
    }

    #[test]
    fn relative_base_dirs_are_made_absolute() {
        let options = ContainerdOptions::new("data", "10.244.0.0/24");
        assert!(options.base_dir.is_absolute());
    }

    #[test]
    fn pod_cidrs_are_validated_and_give_the_first_address_as_gateway() {
        let cidr = Ipv4Cidr::parse("10.251.7.0/24").expect("valid");
        assert_eq!(cidr.gateway(), Ipv4Addr::new(10, 251, 7, 1));
        assert!(cidr.contains(Ipv4Addr::new(10, 251, 7, 200)));
        assert!(!cidr.contains(Ipv4Addr::new(10, 251, 8, 2)));
        for (bad, reason) in [
            ("10.251.7.0", "expected"),
            ("10.251.7.1/24", "host bits"),
            ("fd00::/64", "not an ipv4"),
            ("10.0.0.0/31", "between 8 and 30"),
            ("10.0.0.0/x", "not a number"),
        ] {
            let error = Ipv4Cidr::parse(bad).expect_err(bad).to_string();
            assert!(error.contains(reason), "{bad}: {error}");
        }
    }

    #[test]
    fn bridge_names_longer_than_an_interface_name_are_rejected() {
        validate_bridge_name("tandem0").expect("valid");
        assert!(validate_bridge_name("tandem-bridge-01").is_err());
        assert!(validate_bridge_name("").is_err());
        assert!(validate_bridge_name("br 0").is_err());
        validate_cgroup_root("tandem-0123abcd").expect("valid");
        assert!(validate_cgroup_root("a/b").is_err());
    }

    #[test]
    fn config_keeps_everything_under_the_base_dir() {
        let layout = Layout {
            base: PathBuf::from("/tmp/t"),
        };
        let config = rendering_for(&layout, "10.244.0.0/24")
            .config_toml()
            .expect("renders");
        for line in [
            "root = \"/tmp/t/root\"",
            "state = \"/tmp/t/state\"",
            "address = \"/tmp/t/run/containerd.sock\"",
            "address = \"/tmp/t/run/containerd.sock.ttrpc\"",
            "path = \"/tmp/t/opt\"",
            "restrict_oom_score_adj = true",
            "sandbox_image = \"tandem.local/pause:1\"",
            "stream_server_port = \"0\"",
            "snapshotter = \"overlayfs\"",
            "SystemdCgroup = false",
            "BinaryName = \"/usr/sbin/runc\"",
            "Root = \"/tmp/t/runc\"",
            "bin_dir = \"/usr/lib/cni\"",
            "conf_dir = \"/tmp/t/cni/net.d\"",
            "max_conf_num = 1",
        ] {
            assert!(
                config.lines().any(|l| l.trim() == line),
                "missing {line:?} in\n{config}"
            );
        }
        assert!(
            config.contains(
                "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]"
            )
        );
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(toml_string("x\ny"), "\"x\\u000Ay\"");
    }

    #[test]
    fn conflist_describes_a_bridge_for_the_pod_cidr() {
        let layout = Layout {
            base: PathBuf::from("/tmp/t"),
        };
        let conflist = rendering_for(&layout, "10.251.3.0/24")
            .conflist()
            .expect("renders");
        let value: serde_json::Value = serde_json::from_str(&conflist).expect("json");
        assert_eq!(value["cniVersion"], "0.4.0");
        let bridge = &value["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["bridge"], "tdm0123abcd");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        let range = &bridge["ipam"]["ranges"][0][0];
        assert_eq!(range["subnet"], "10.251.3.0/24");
        assert_eq!(range["gateway"], "10.251.3.1");
        assert_eq!(bridge["ipam"]["dataDir"], "/tmp/t/cni/ipam");
        assert_eq!(value["plugins"][1]["type"], "portmap");
        assert_eq!(value["plugins"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn one_masquerade_rule_covers_the_pod_cidr_leaving_the_bridge() {
        let cidr = Ipv4Cidr::parse("10.251.3.0/24").expect("valid");
        let rule = masquerade_rule(&cidr, "tdm0123abcd", None).join(" ");
        assert_eq!(
            rule,
            "POSTROUTING -s 10.251.3.0/24 ! -o tdm0123abcd -m comment --comment tandem: masquerade the pods of tdm0123abcd -j MASQUERADE"
        );
        let rule = masquerade_rule(&cidr, "tdm0123abcd", Some("10.251.0.0/16")).join(" ");
        assert_eq!(
            rule,
            "POSTROUTING -s 10.251.3.0/24 ! -d 10.251.0.0/16 ! -o tdm0123abcd -m comment --comment tandem: masquerade the pods of tdm0123abcd -j MASQUERADE"
        );
    }

    #[test]
    fn the_effective_uid_is_the_second_uid_field() {
        let status = "Name:\tcat\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(parse_effective_uid(status), Some(0));
        assert_eq!(parse_effective_uid("Name:\tcat\n"), None);
    }

    #[test]
    fn cgroup_trees_are_removed_depth_first() {
        let fs = tempfile::tempdir().expect("tempdir");
        let pod = fs.path().join("memory/tandem-x/pod-1");
        std::fs::create_dir_all(pod.join("c1")).expect("mkdir");
        std::fs::create_dir_all(fs.path().join("cpu/tandem-x")).expect("mkdir");
        std::fs::create_dir_all(fs.path().join("cpu/other")).expect("mkdir");
        remove_cgroups(fs.path(), "tandem-x");
        assert!(!fs.path().join("memory/tandem-x").exists());
        assert!(!fs.path().join("cpu/tandem-x").exists());
        assert!(fs.path().join("cpu/other").exists());
    }

    #[test]
    fn missing_prerequisites_name_the_fix() {
        let error =
            find_prerequisites(Some(Path::new("/nonexistent/cni"))).expect_err("no plugins there");
        let message = error.to_string();
        assert!(
            message.contains("CNI plugins bridge, host-local, portmap"),
            "{message}"
        );
        assert!(message.contains("scripts/install-deps.sh"), "{message}");
    }

    #[test]
    fn a_pid_that_is_not_our_containerd_is_not_stopped() {
        let config = Path::new("/tmp/t/config.toml");
        assert!(!is_our_containerd(std::process::id(), config));
        assert!(is_alive(std::process::id()));
        assert!(!is_alive(u32::MAX));
    }
}
