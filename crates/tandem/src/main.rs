//! `tandem`: one binary for the control plane (`server`), the node agent (`agent`), the whole
//! cluster in one process (`up`), offline manifest checks (`check`) and benchmarks (`bench`).

mod bench;
mod bench_ingress;
mod bench_multihost;
mod bench_netpol;
mod bench_nodes_net;
mod bench_overload;
mod bench_pull;
mod bench_rbac;
mod bench_services;
mod bench_startup;
mod bench_watchers;
mod bench_webhook;
mod bench_wire;
mod check;
mod cluster;
mod cri_node;
mod failover;
mod h2_client;
mod identity;
mod image_args;
mod images_cmd;
mod leader;
mod local_etcd;
mod multihost;
mod node_network;
mod rotating_client;
mod store;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

// glibc's allocator spends a sixth of the API server's CPU in malloc/free under load (measured with
// `perf record` on `tandem bench api`); mimalloc is markedly cheaper for this many small objects.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "A Kubernetes-compatible orchestrator for clusters that mix Linux and Windows nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the control plane: the API server on its embedded store.
    Server(Box<ServerArgs>),
    /// Runs the whole cluster in one process, in the foreground: control plane and node agents.
    Up(Box<UpArgs>),
    /// Runs one node agent that joins a server.
    Agent(Box<cluster::AgentArgs>),
    /// Runs a scheduler alone against an API server, as kube-scheduler runs beside
    /// kube-apiserver (a second scheduler takes the pods that name it in `spec.schedulerName`).
    Scheduler(cluster::SchedulerArgs),
    /// Mints a kubeconfig for a person (`--user`, `--group`), signed by the cluster CA in the
    /// data dir, so RBAC can be tried as the documentation describes.
    Kubeconfig(identity::KubeconfigArgs),
    /// Copies a stopped cluster's state from one store to another (`--from sqlite:DIR --to
    /// etcd:URL`), so a cluster started on the embedded store can move to etcd.
    Migrate(store::MigrateArgs),
    /// Checks manifests with no cluster: the API server's validation and Windows admission, and
    /// the hybrid-cluster pitfalls upstream accepts silently (rule IDs TDM…).
    Check(check::CheckArgs),
    /// Runs benchmarks and prints their figures.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Manages the images of a node that runs real containers: `ls`, `import ARCHIVE` (into
    /// the node's images directory, imported within seconds), `rm IMAGE`.
    Images(images_cmd::ImagesArgs),
}

/// Flags shared by `server` and `up`.
#[derive(Args, Clone, Debug)]
pub struct ServerArgs {
    /// Directory for the store, certificates and kubeconfig.
    #[arg(long, default_value = ".tandem")]
    pub data_dir: PathBuf,
    /// HTTPS port of the API server.
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Where to write the admin kubeconfig (default: <data-dir>/kubeconfig).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Allow privileged (and so Windows HostProcess) pods, as upstream's --allow-privileged.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub allow_privileged: bool,
    /// An `AdmissionConfiguration` file (kube-apiserver's flag): the `PodSecurity` plugin's
    /// cluster defaults and exemptions (`PodSecurityConfiguration`). Without it every namespace
    /// without labels is privileged, as upstream.
    #[arg(long)]
    pub admission_control_config_file: Option<PathBuf>,
    /// Schedule exactly as upstream kube-scheduler does, without tandem's OS placement and
    /// Windows build compatibility.
    #[arg(long)]
    pub upstream_os_placement: bool,
    /// The Services' address range (kube-apiserver's `--service-cluster-ip-range`): the
    /// `kubernetes` Service gets its first address and the cluster DNS its tenth.
    #[arg(
        long,
        alias = "service-cluster-ip-range",
        default_value = "10.96.0.0/12"
    )]
    pub service_cidr: String,
    /// Which authorizers run, as kube-apiserver's flag: `Node,RBAC` (default) or `AlwaysAllow`.
    #[arg(long, default_value = "Node,RBAC")]
    pub authorization_mode: tandem_apiserver::auth::authz::AuthorizationMode,
    /// How often node agents' resource metrics are scraped for `metrics.k8s.io` (`kubectl top`,
    /// the HorizontalPodAutoscaler), as metrics-server's flag; `0s` scrapes nothing.
    #[arg(long, default_value = "15s", value_parser = leader::parse_go_duration)]
    pub metric_resolution: std::time::Duration,
    /// How often the HorizontalPodAutoscaler controller reconciles every HPA
    /// (kube-controller-manager's flag).
    #[arg(long = "horizontal-pod-autoscaler-sync-period", default_value = "15s", value_parser = leader::parse_go_duration)]
    pub hpa_sync_period: std::time::Duration,
    /// How long a node may go unheard before the node lifecycle controller marks it `Unknown`
    /// and taints it unreachable (kube-controller-manager's flag; upstream's 40s).
    #[arg(long, value_parser = leader::parse_go_duration)]
    pub node_monitor_grace_period: Option<std::time::Duration>,
    /// `tolerationSeconds` of the `node.kubernetes.io/not-ready:NoExecute` toleration every pod
    /// gets (kube-apiserver's DefaultTolerationSeconds flag).
    #[arg(long, default_value_t = 300)]
    pub default_not_ready_toleration_seconds: i64,
    /// `tolerationSeconds` of the `node.kubernetes.io/unreachable:NoExecute` toleration every
    /// pod gets: how long pods stay on a lost host before they are evicted.
    #[arg(long, default_value_t = 300)]
    pub default_unreachable_toleration_seconds: i64,
    /// The down-scale stabilization window of HPAs that set none in `behavior`
    /// (kube-controller-manager's flag).
    #[arg(long = "horizontal-pod-autoscaler-downscale-stabilization", default_value = "5m0s", value_parser = leader::parse_go_duration)]
    pub hpa_downscale_stabilization: std::time::Duration,
    /// Built-in add-ons to leave out, comma-separated, as k3s' `--disable`: `metrics-server`
    /// (the built-in `metrics.k8s.io`, so that a metrics-server of your own can register it),
    /// `ingress` (alias `traefik`), `servicelb`, `local-storage`, `smb`, `network-policy`, `dns`
    /// (alias `coredns`). `server` itself runs only the metrics API of these.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub disable: Vec<Addon>,
    #[command(flatten)]
    pub store: store::StoreArgs,
    #[command(flatten)]
    pub leader_election: leader::LeaderElectionArgs,
    #[command(flatten)]
    pub flow_control: FlowControlArgs,
}

/// The bounds on requests in flight (kube-apiserver's flags and defaults; see
/// `tandem_apiserver::flowcontrol`).
#[derive(Args, Clone, Debug)]
pub struct FlowControlArgs {
    /// With priority and fairness, this and --max-mutating-requests-inflight are summed into
    /// the server's concurrency limit, shared out among priority levels; without, the bound on
    /// read-only requests in flight (0: none).
    #[arg(long, default_value_t = tandem_apiserver::flowcontrol::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    pub max_requests_inflight: usize,
    /// As --max-requests-inflight, for mutating requests.
    #[arg(long, default_value_t = tandem_apiserver::flowcontrol::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    pub max_mutating_requests_inflight: usize,
    /// API Priority and Fairness: system traffic gets its own seats and each user a fair share.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,
    /// How long a request may wait for a seat before a 429 (tandem's stand-in for upstream's
    /// per-level queue configuration; `0s` refuses at once instead of queuing).
    #[arg(long, default_value = "15s", value_parser = leader::parse_go_duration)]
    pub flow_control_queue_wait: std::time::Duration,
}

impl Default for FlowControlArgs {
    fn default() -> Self {
        let c = tandem_apiserver::flowcontrol::FlowControlConfig::default();
        FlowControlArgs {
            max_requests_inflight: c.max_requests_inflight,
            max_mutating_requests_inflight: c.max_mutating_requests_inflight,
            enable_priority_and_fairness: c.priority_and_fairness,
            flow_control_queue_wait: c.queue_wait,
        }
    }
}

impl FlowControlArgs {
    /// The API server's configuration of these flags.
    pub fn config(&self) -> tandem_apiserver::flowcontrol::FlowControlConfig {
        tandem_apiserver::flowcontrol::FlowControlConfig {
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            priority_and_fairness: self.enable_priority_and_fairness,
            queue_wait: self.flow_control_queue_wait,
        }
    }
}

/// Flags of `tandem up`.
#[derive(Args, Clone, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Nodes to run, e.g. `linux=3,windows-2019=2,windows-2022=4` (kinds: linux, windows-2019,
    /// windows-2022, windows-2025). Default: one Linux, one Windows Server 2019 and one Windows
    /// Server 2022 node.
    #[arg(long)]
    pub nodes: Option<String>,
    /// Runtime of the Linux nodes: `auto` runs the first Linux node on a private containerd when
    /// this machine can (root, containerd, runc and CNI plugins installed, local images built)
    /// and falls back to the emulated runtime otherwise; `cri` insists; `emulated` never tries.
    #[arg(long, value_enum, default_value_t = LinuxRuntime::Auto)]
    pub linux_runtime: LinuxRuntime,
    /// Where `scripts/build-images.sh` put the local OCI images (default: `images/` beside the
    /// directory of the tandem binary, i.e. `target/images`).
    #[arg(long)]
    pub images_dir: Option<PathBuf>,
    /// The pod network: node n gets the n-th /24 of this /16 as its podCIDR.
    #[arg(long, default_value = "10.244.0.0/16")]
    pub cluster_cidr: String,
    /// The cluster's DNS domain (the kubelet's `--cluster-domain`).
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Where the cluster DNS sends names outside the cluster domain: `none`, or addresses
    /// `IP[:PORT],…`; default: the nameservers of this host's /etc/resolv.conf.
    #[arg(long)]
    pub dns_upstream: Option<String>,
    /// Whether pods of emulated nodes get a network namespace with a reachable address and a
    /// stand-in answering their ports (needs root; without it they stay unreachable).
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub emulated_pod_network: Toggle,
    #[command(flatten)]
    pub ingress: node_network::IngressArgs,
    #[command(flatten)]
    pub images: image_args::ImageArgs,
    /// Start a local one-member etcd (Debian's etcd-server, data in `<data-dir>/etcd`) and keep
    /// the cluster there instead of the embedded SQLite store.
    #[arg(long, conflicts_with = "etcd_servers")]
    pub etcd: bool,
    /// The local etcd's client port on 127.0.0.1 (its peer port is the next one). Not etcd's
    /// 2379, which the Debian package's own etcd service takes where systemd runs it.
    #[arg(long, default_value_t = 2479, requires = "etcd")]
    pub etcd_port: u16,
    /// Make every node a simulated host of its own: a network namespace `tandem-NODE` with
    /// `eth0` on an underlay bridge, and its own `tandem agent` process joined with the join
    /// token (Linux nodes on their own containerd), linked by the pod network between hosts.
    /// The API server then listens on the bridge's address. Needs root.
    #[arg(long)]
    pub multi_host: bool,
    /// The underlay network of `--multi-host` (the bridge takes the first address, hosts the
    /// next ones).
    #[arg(long, default_value = multihost::DEFAULT_UNDERLAY, requires = "multi_host")]
    pub multi_host_underlay: String,
    /// The pod network between the hosts of `--multi-host`: `auto`, `host-gw` or `vxlan`
    /// (see `tandem agent --pod-network-backend`).
    #[arg(long, default_value = "auto", requires = "multi_host")]
    pub pod_network_backend: String,
}

/// `on` or `off`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Toggle {
    On,
    Off,
}

/// `tandem up --linux-runtime`.
/// A built-in add-on that `--disable` can leave out.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addon {
    /// The `metrics.k8s.io` API served from the node agents' scrapes.
    MetricsServer,
    /// The ingress controller.
    #[value(alias = "traefik")]
    Ingress,
    /// The service load balancer (LoadBalancer Services' addresses).
    Servicelb,
    /// The local-path provisioner and its default StorageClass.
    LocalStorage,
    /// The emulated SMB CSI driver and its `smb-csi` StorageClass.
    Smb,
    /// NetworkPolicy enforcement.
    NetworkPolicy,
    /// The cluster DNS.
    #[value(alias = "coredns")]
    Dns,
}

impl Addon {
    /// The name `--disable` takes and the banner shows.
    pub fn name(self) -> &'static str {
        match self {
            Addon::MetricsServer => "metrics-server",
            Addon::Ingress => "ingress",
            Addon::Servicelb => "servicelb",
            Addon::LocalStorage => "local-storage",
            Addon::Smb => "smb",
            Addon::NetworkPolicy => "network-policy",
            Addon::Dns => "dns",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxRuntime {
    Auto,
    Cri,
    Emulated,
}

impl ServerArgs {
    /// Whether `--disable` names `addon`.
    pub fn disabled(&self, addon: Addon) -> bool {
        self.disable.contains(&addon)
    }
    fn kubeconfig_path(&self) -> PathBuf {
        self.kubeconfig
            .clone()
            .unwrap_or_else(|| self.data_dir.join("kubeconfig"))
    }
    fn bind(&self) -> SocketAddr {
        SocketAddr::new(self.bind_address, self.port)
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TANDEM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match cli.command {
            Command::Server(args) => cluster::run(*args, None).await,
            Command::Up(args) => {
                let server = args.server.clone();
                cluster::run(server, Some(*args)).await
            }
            Command::Agent(args) => cluster::run_agent(*args).await,
            Command::Scheduler(args) => cluster::run_scheduler(args).await,
            Command::Kubeconfig(args) => identity::mint_kubeconfig(&args),
            Command::Migrate(args) => store::run(args).await,
            Command::Images(args) => images_cmd::run(&args).await,
            Command::Check(args) => match check::run(&args).await {
                Ok(0) => Ok(()),
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!("Error: {e:#}");
                    std::process::exit(2)
                }
            },
            Command::Bench(cmd) => bench::run(cmd).await,
        }
    })
}
