//! Starting the control plane (API server, controllers, scheduler), the node agents, and stopping
//! cleanly.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tandem_agent::NodeConfig;
use tandem_apiserver::{ApiServer, Config, Options};
use tandem_store::Store;

use crate::{LinuxRuntime, ServerArgs, UpArgs};

/// Opens the store in the data dir and starts the API server on it.
pub async fn start(args: &ServerArgs) -> anyhow::Result<(ApiServer, Arc<dyn Store>)> {
    start_with_metrics(
        args,
        Some(tandem_apiserver::metrics::ServerMetrics::standalone()),
    )
    .await
}

/// The process's Prometheus metrics: one registry holding the API server's, the scheduler's and
/// the controllers' families (and the process's), built before any of them starts; the API
/// server serves it at `/metrics`.
pub struct ControlPlaneMetrics {
    pub server: tandem_apiserver::metrics::ServerMetrics,
    pub scheduler: tandem_scheduler::SchedulerMetrics,
    pub workqueue: tandem_controllers::metrics::WorkqueueMetrics,
}

impl ControlPlaneMetrics {
    pub fn new() -> ControlPlaneMetrics {
        let mut registry = prometheus_client::registry::Registry::default();
        let api = tandem_apiserver::metrics::ApiMetrics::new(&mut registry);
        let scheduler = tandem_scheduler::SchedulerMetrics::new(&mut registry);
        let workqueue = tandem_controllers::metrics::WorkqueueMetrics::new(&mut registry);
        tandem_apiserver::metrics::register_process_metrics(&mut registry);
        ControlPlaneMetrics {
            server: tandem_apiserver::metrics::ServerMetrics::new(registry, api),
            scheduler,
            workqueue,
        }
    }
}

/// As [`start`], with the API server's metrics (`None`: a server built without them, for
/// `tandem bench api --metrics`).
pub async fn start_with_metrics(
    args: &ServerArgs,
    server_metrics: Option<tandem_apiserver::metrics::ServerMetrics>,
) -> anyhow::Result<(ApiServer, Arc<dyn Store>)> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create data dir {}", args.data_dir.display()))?;
    let store = args.store.open(&args.data_dir).await?;
    let dyn_store = store.clone();
    let config = Config {
        data_dir: args.data_dir.clone(),
        bind: args.bind(),
        kubeconfig: Some(args.kubeconfig_path()),
    };
    let service_ranges =
        tandem_apiserver::service_alloc::ServiceRanges::from_cidr(&args.service_cidr)
            .context("invalid --service-cidr")?;
    let options = Options {
        allow_privileged: args.allow_privileged,
        service_ranges,
        authorization: args.authorization_mode,
        metric_resolution: Some(args.metric_resolution).filter(|d| !d.is_zero()),
        server_metrics,
        flow_control: args.flow_control.config(),
        metrics_api: !args.disabled(crate::Addon::MetricsServer),
        pod_security: match &args.admission_control_config_file {
            Some(path) => tandem_apiserver::pod_security::load_admission_config(path)
                .map_err(|e| anyhow::anyhow!("invalid --admission-control-config-file: {e}"))?,
            None => Default::default(),
        },
        default_tolerations: tandem_core::admission::default_tolerations::DefaultTolerations {
            not_ready_seconds: args.default_not_ready_toleration_seconds,
            unreachable_seconds: args.default_unreachable_toleration_seconds,
        },
    };
    let server = ApiServer::start_with_options(config, dyn_store, options)
        .await
        .context("cannot start the API server")?;
    // Until a node offers pods a way to this server (see `run`), the `kubernetes` Service names
    // the address it listens on.
    let advertise = if server.local_addr.ip().is_unspecified() {
        std::net::SocketAddr::from(([127, 0, 0, 1], server.local_addr.port()))
    } else {
        server.local_addr
    };
    tandem_apiserver::bootstrap::ensure_kubernetes_service(&server.state, advertise)
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the kubernetes Service: {}", e.message))?;
    Ok((server, store))
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("invalid kubeconfig")?;
    kube::Client::try_from(config).context("cannot build the API client")
}

/// How long the certificates minted for tandem's own components are valid; they are minted
/// again at every start.
const COMPONENT_CERT_VALIDITY: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// A client of `server` that authenticates as `user` in `groups` with a client certificate the
/// cluster CA signs now: each component gets an identity of its own, as upstream's
/// kube-scheduler, kube-controller-manager and kubelets have (see `docs/architecture.md`,
/// "Who may do what"). `http2` selects the HTTP/2 client (see `h2_client`).
pub async fn identity_client(
    server: &ApiServer,
    user: &str,
    groups: &[&str],
    http2: bool,
) -> anyhow::Result<kube::Client> {
    let addr = server.local_addr;
    let host = if addr.ip().is_unspecified() {
        std::net::IpAddr::from([127, 0, 0, 1])
    } else {
        addr.ip()
    };
    let url = format!("https://{}", std::net::SocketAddr::new(host, addr.port()));
    let yaml = server
        .pki
        .mint_kubeconfig(&url, user, groups, COMPONENT_CERT_VALIDITY)
        .with_context(|| format!("cannot issue a certificate for {user}"))?;
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(&yaml).context("invalid minted kubeconfig")?;
    if http2 {
        return crate::h2_client::client_from_kubeconfig(kubeconfig).await;
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("invalid minted kubeconfig")?;
    kube::Client::try_from(config).context("cannot build the API client")
}

/// Runs the control plane — and, for `tandem up` (`up` is `Some`), the node agents — until
/// Ctrl-C or SIGTERM.
pub async fn run(args: ServerArgs, up: Option<UpArgs>) -> anyhow::Result<()> {
    // Listen for Ctrl-C/SIGTERM from the start: a signal during start-up must still stop the
    // containerd child (which runs in its own process group) and its pods.
    let shutdown = tokio::spawn(wait_for_shutdown());
    args.leader_election.validate()?;
    let mut node_configs = match up.as_ref().map(|u| u.nodes.as_deref()) {
        None => Vec::new(),
        Some(None) => tandem_agent::default_nodes(),
        Some(Some(spec)) => tandem_agent::parse_nodes_spec(spec).context("invalid --nodes")?,
    };
    let mut dns_upstreams = Vec::new();
    if let Some(up) = &up {
        assign_pod_cidrs(&mut node_configs, &up.cluster_cidr)?;
        dns_upstreams = crate::node_network::parse_upstreams(up.dns_upstream.as_deref())
            .context("invalid --dns-upstream")?;
    }
    let mut args = args;
    // `tandem up --multi-host`: the underlay bridge first; the API server listens on it.
    let mut multi_host = match up.as_ref().filter(|u| u.multi_host) {
        Some(u) => {
            let images_dir = u
                .images_dir
                .clone()
                .or_else(crate::cri_node::default_images_dir)
                .unwrap_or_else(|| PathBuf::from("target/images"));
            let cri = match (
                u.linux_runtime,
                crate::cri_node::unavailable_reason(&images_dir),
            ) {
                (LinuxRuntime::Emulated, _) => false,
                (LinuxRuntime::Cri, Some(why)) => anyhow::bail!("--linux-runtime cri: {why}"),
                (_, Some(_)) => false,
                (_, None) => true,
            };
            let data_dir = std::path::absolute(&args.data_dir).unwrap_or(args.data_dir.clone());
            let settings = crate::multihost::PlanSettings {
                data_dir: &data_dir,
                underlay: &u.multi_host_underlay,
                cluster_cidr: &u.cluster_cidr,
                service_cidr: &args.service_cidr,
                cluster_domain: &u.cluster_domain,
                images_dir: &std::path::absolute(&images_dir).unwrap_or(images_dir.clone()),
                backend: &u.pod_network_backend,
                cri_nodes: if cri { usize::MAX } else { 0 },
            };
            tandem_agent::cluster_network::Backend::parse(&u.pod_network_backend).with_context(
                || {
                    format!(
                        "--pod-network-backend must be auto, host-gw or vxlan, not {:?}",
                        u.pod_network_backend
                    )
                },
            )?;
            let hosts = crate::multihost::MultiHost::prepare(&node_configs, &settings).await?;
            args.bind_address = std::net::IpAddr::V4(hosts.gateway());
            Some(hosts)
        }
        None => None,
    };
    // `tandem up --etcd`: a local etcd member first, then the control plane on it.
    let _local_etcd = match up.as_ref().filter(|u| u.etcd) {
        Some(u) => {
            let etcd =
                crate::local_etcd::LocalEtcd::start(&args.data_dir.join("etcd"), u.etcd_port)
                    .await?;
            args.store.etcd_servers = vec![etcd.client_url().to_string()];
            Some(etcd)
        }
        None => None,
    };
    // One registry for the API server, scheduler and controllers this process runs; the work
    // queues find theirs through the process-wide provider, as client-go's do.
    let metrics = ControlPlaneMetrics::new();
    tandem_controllers::metrics::set_provider(metrics.workqueue.clone());
    let (server, _store) = start_with_metrics(&args, Some(metrics.server.clone())).await?;
    // The SQLite store admits one server (it locks its file), so there is nobody to elect a
    // leader among: the components start at once, and a restart after a crash does not wait a
    // lease duration for its own dead predecessor's Lease.
    if args.store.etcd_servers.is_empty() {
        args.leader_election.leader_elect = false;
    }
    let kubeconfig = args.kubeconfig_path();
    // The admin client installs what kubeadm would (the DNS Service); every component runs as
    // an identity of its own with the bootstrap RBAC policy's least privilege.
    let client = client_from(&kubeconfig).await?;
    let controllers_client =
        identity_client(&server, "system:kube-controller-manager", &[], false).await?;
    // One identity per process for both Leases, `<hostname>_<uuid>` as upstream's components.
    let candidate = tandem_controllers::leader_election::identity();
    // The default StorageClass `local-path` is an add-on the installer creates (k3s' local-storage
    // manifest); the controllers provision its volumes.
    if !args.disabled(crate::Addon::LocalStorage) {
        tokio::spawn(tandem_controllers::local_path::install_default_class(
            client.clone(),
        ));
    }
    // So is the emulated SMB CSI driver (CSIDriver and the `smb-csi` class; not the default).
    if !args.disabled(crate::Addon::Smb) {
        tokio::spawn(tandem_controllers::smb_csi::install(
            client.clone(),
            args.data_dir.join("smb-share"),
        ));
    }
    // Every controller, the root CA publisher and the CSR approver and signer (nodes joining
    // with a token get their client certificates) run as one controller manager: under leader
    // election on `kube-system/kube-controller-manager`, stopped together when the lease is lost.
    let controller_options = tandem_controllers::ControllerOptions {
        hpa: tandem_controllers::hpa::HpaOptions {
            sync_period: args.hpa_sync_period,
            downscale_stabilization: args.hpa_downscale_stabilization,
            ..Default::default()
        },
        node_monitor_grace_period: args.node_monitor_grace_period,
        disabled: args
            .disable
            .iter()
            .map(|a| a.name())
            .filter(|n| matches!(*n, "servicelb" | "local-storage" | "smb"))
            .collect(),
    };
    let controllers = {
        let (c, ca, key) = (
            controllers_client.clone(),
            server.pki.ca_pem.clone(),
            server.pki.ca_key_pem.clone(),
        );
        move || {
            let scope = tandem_controllers::start_all_with(
                c.clone(),
                tandem_core::registry::Registry::builtin(),
                controller_options.clone(),
            );
            scope.enter(|| {
                tandem_controllers::scope::spawn(tandem_controllers::root_ca_publisher::run(
                    c.clone(),
                    ca.clone(),
                ));
                tandem_controllers::certificates::start(
                    c.clone(),
                    ca.clone(),
                    key.clone(),
                    tandem_controllers::certificates::csr::DEFAULT_MAX_DURATION,
                );
            });
            scope
        }
    };
    let controllers = crate::leader::run(
        &args.leader_election,
        crate::leader::Component {
            what: "controllers",
            lease: tandem_controllers::leader_election::CONTROLLER_MANAGER_LEASE,
            event_source: "kube-controller-manager",
        },
        &candidate,
        controllers_client,
        controllers,
        |scope| scope.stop(),
    )?;
    let sched = tandem_scheduler::SchedulerOptions {
        upstream_os_placement: args.upstream_os_placement,
        metrics: metrics.scheduler.clone(),
        ..Default::default()
    };
    // The scheduler gets an HTTP/2 connection of its own, as kube-scheduler has through
    // client-go: its bindings do not queue behind the controllers' requests.
    let scheduler_client = identity_client(&server, "system:kube-scheduler", &[], true).await?;
    let scheduler = crate::leader::run(
        &args.leader_election,
        crate::leader::Component {
            what: "scheduler",
            lease: tandem_controllers::leader_election::SCHEDULER_LEASE,
            event_source: "kube-scheduler",
        },
        &candidate,
        scheduler_client.clone(),
        move || tandem_scheduler::start(scheduler_client.clone(), sched.clone()),
        drop,
    )?;

    let join_token = crate::identity::ensure_join_token(&server, &client, &args.data_dir).await;
    println!(
        "tandem API server listening on https://{}",
        server.local_addr
    );
    println!("  data dir:   {}", args.data_dir.display());
    println!("  store:      {}", args.store.describe(&args.data_dir));
    println!("  kubeconfig: {}", kubeconfig.display());
    match &join_token {
        Ok(_) => println!(
            "  join token: {} (tandem agent --server URL --token \"$(cat {})\" …)",
            args.data_dir.join("join-token").display(),
            args.data_dir.join("join-token").display()
        ),
        Err(e) => println!("  join token: none — {e:#}"),
    }
    println!(
        "  control plane: API server, scheduler, controllers (garbage collector, namespaces, service accounts,"
    );
    println!(
        "                 ReplicaSet, ReplicationController, Deployment, DaemonSet, Job, EndpointSlice)"
    );
    if args.disable.is_empty() {
        println!(
            "  add-ons:    metrics-server, ingress, servicelb, local-storage, smb, network-policy, dns (--disable to leave any out)"
        );
    } else {
        let off: Vec<&str> = args.disable.iter().map(|a| a.name()).collect();
        println!("  add-ons off (--disable): {}", off.join(", "));
    }
    if let Some(hosts) = multi_host.as_mut() {
        let started = async {
            let token = match &join_token {
                Ok(_) => std::fs::read_to_string(args.data_dir.join("join-token"))
                    .context("cannot read the join token")?,
                Err(e) => anyhow::bail!("--multi-host needs the join token: {e:#}"),
            };
            let exe = std::env::current_exe().context("cannot find the tandem binary")?;
            let url = format!("https://{}", server.local_addr);
            for dir in hosts.identity_dirs() {
                mint_data_plane_kubeconfigs(&server, &url, &dir)?;
            }
            hosts
                .start(&exe, token.trim(), server.local_addr.port())
                .await
        }
        .await;
        match started {
            Ok(lines) => {
                println!("  hosts (--multi-host; ip netns exec tandem-NODE … to enter one):");
                for line in lines {
                    println!("    {line}");
                }
            }
            Err(e) => {
                if let Some(hosts) = multi_host.take() {
                    hosts.shutdown().await;
                }
                return Err(e);
            }
        }
        // The nodes are the hosts' agents, not this process's.
        node_configs = Vec::new();
    }
    let mut containerds = Vec::new();
    let mut agents: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut networks = Vec::new();
    let mut emulated_networks = Vec::new();
    let mut windows_proxies = Vec::new();
    if let Some(up) = &up {
        println!("  nodes:");
        let images_dir = up
            .images_dir
            .clone()
            .or_else(crate::cri_node::default_images_dir)
            .unwrap_or_else(|| PathBuf::from("target/images"));
        let mut cri_wanted = up.linux_runtime != LinuxRuntime::Emulated;
        for mut node in node_configs {
            up.images.apply(&mut node)?;
            let node_dir = args.data_dir.join("nodes").join(&node.name);
            node.state_dir = Some(node_dir.clone());
            // The streaming server accepts only the API server's client certificate, from
            // this CA.
            node.cluster_ca_pem = Some(server.pki.ca_pem.clone());
            // Each agent is `system:node:NAME` in `system:nodes`: the Node authorizer and
            // NodeRestriction confine it to its own Node, Lease, pods and their objects.
            let node_client = identity_client(
                &server,
                &format!("system:node:{}", node.name),
                &["system:nodes"],
                false,
            )
            .await?;
            let build = node
                .windows_build
                .map(|v| format!(" build {}", v.build))
                .unwrap_or_default();
            let mut runtime = None;
            let mut what = "emulated runtime (no processes run)".to_string();
            if node.os == tandem_agent::NodeOs::Linux && cri_wanted {
                // One node per machine runs real containers: they share the host's network.
                cri_wanted = false;
                match crate::cri_node::unavailable_reason(&images_dir) {
                    Some(why) if up.linux_runtime == LinuxRuntime::Cri => {
                        anyhow::bail!("--linux-runtime cri: {why}")
                    }
                    Some(why) => {
                        what = format!(
                            "emulated runtime (no processes run) — real containers unavailable: {why}"
                        );
                    }
                    None => {
                        // containerd first (it makes the pods' bridge), then the proxy and
                        // DNS on that bridge, then the runtime, whose pods use the DNS.
                        let mut network = None;
                        let cri = match crate::cri_node::start_containerd(
                            &node,
                            &node_dir,
                            &images_dir,
                            None,
                        )
                        .await
                        {
                            Ok(ctrd) => {
                                network = Some(
                                    start_node_network(
                                        &server,
                                        client.clone(),
                                        &args,
                                        up,
                                        &dns_upstreams,
                                        &mut node,
                                        &ctrd,
                                    )
                                    .await,
                                );
                                crate::cri_node::start_runtime(
                                    &mut node,
                                    &node_dir,
                                    ctrd,
                                    node_client.clone(),
                                )
                                .await
                            }
                            Err(e) => Err(e),
                        };
                        if cri.is_err()
                            && let Some(network) = network.take()
                        {
                            // The node falls back to emulated: no data plane for it.
                            network.shutdown().await;
                            node.labels
                                .remove(tandem_controllers::service_lb::SERVICE_PROXY_LABEL);
                            node.cluster_dns.clear();
                        }
                        match cri {
                            Ok(cri) => {
                                what = cri.description.clone();
                                runtime = Some(cri.runtime.clone());
                                if let Some(network) = network.take() {
                                    for line in &network.summary {
                                        what.push_str(&format!("\n{:<22}{line}", ""));
                                    }
                                    networks.push(network);
                                }
                                containerds.push(cri);
                            }
                            Err(e) if up.linux_runtime == LinuxRuntime::Cri => return Err(e),
                            Err(e) => {
                                what = format!(
                                    "emulated runtime (no processes run) — containerd failed: {e:#}"
                                );
                            }
                        }
                    }
                }
            }
            if runtime.is_none() && up.emulated_pod_network == crate::Toggle::On {
                let (line, proxy) =
                    start_emulated_network(&mut node, &server, &args, up, &networks).await;
                what.push_str(&line);
                if let Some(net) = &node.pod_network {
                    emulated_networks.push(net.clone());
                }
                windows_proxies.extend(proxy);
            }
            println!(
                "    {:<18} {}{} — {what}",
                node.name,
                node.os.as_str(),
                build
            );
            let client = node_client;
            agents.push(tokio::spawn(async move {
                let name = node.name.clone();
                let result = match runtime {
                    Some(rt) => {
                        tandem_agent::run_with_runtime(
                            client,
                            node,
                            rt,
                            tandem_agent::clock::Clock::new(),
                        )
                        .await
                    }
                    None => tandem_agent::run(client, node).await,
                };
                if let Err(e) = result {
                    tracing::error!(node = %name, error = %e, "node agent stopped");
                }
            }));
        }
    }
    println!();
    println!(
        "Use it with:  kubectl --kubeconfig {} get nodes -o wide",
        kubeconfig.display()
    );
    let _ = shutdown.await;
    println!("tandem: shutting down");
    // The scheduler and controllers stop first and give their Leases up, so another server
    // takes over at once.
    scheduler.shutdown().await;
    controllers.shutdown().await;
    // The node agents stop before their runtimes are torn down: an agent left running would
    // restart the containers the teardown removes, in sandboxes the teardown never sees.
    if let Some(hosts) = multi_host {
        hosts.shutdown().await;
    }
    for agent in &agents {
        agent.abort();
    }
    for agent in agents {
        let _ = agent.await;
    }
    for network in networks {
        network.shutdown().await;
    }
    for proxy in windows_proxies {
        proxy.shutdown().await;
    }
    for network in emulated_networks {
        network.shutdown().await;
    }
    for cri in &containerds {
        if let Err(e) = cri.containerd.shutdown(true).await {
            eprintln!("tandem: containerd shutdown: {e}");
        }
    }
    server.shutdown(std::time::Duration::from_secs(2)).await;
    drop(server);
    Ok(())
}

/// Puts an emulated node's pods on the network (a bridge of its own; see
/// `tandem_agent::podnet`): the node's address becomes its bridge's, and its pods use the cluster
/// DNS when the machine runs one. Returns what `tandem up` prints about it.
async fn start_emulated_network(
    node: &mut NodeConfig,
    server: &ApiServer,
    args: &ServerArgs,
    up: &UpArgs,
    networks: &[crate::node_network::NodeNetwork],
) -> (String, Option<tandem_proxy::ServiceProxy>) {
    let Some(pod_cidr) = node.pod_cidr.clone() else {
        return (
            "; pods not reachable: the node has no pod CIDR".to_string(),
            None,
        );
    };
    let spec = tandem_agent::podnet::NetworkSpec {
        node_name: node.name.clone(),
        pod_cidr,
        cluster_cidr: Some(up.cluster_cidr.clone()),
        windows: node.os == tandem_agent::NodeOs::Windows,
    };
    match tandem_agent::podnet::EmulatedNetwork::start(&spec).await {
        Ok(net) => {
            node.internal_ip = std::net::IpAddr::V4(net.gateway());
            if let Some(dns) = networks.iter().find_map(|n| n.dns_ip()) {
                node.cluster_dns = vec![std::net::IpAddr::V4(dns)];
            }
            node.cluster_domain = up.cluster_domain.clone();
            let mut line = format!(
                "; pods reachable on bridge {} (node address {}), ports answered by emulated stand-ins",
                net.bridge(),
                net.gateway()
            );
            let mut proxy = None;
            if spec.windows && networks.iter().any(|n| n.proxy.is_some()) {
                let client = identity_client(server, PROXY_USER, &[], false).await;
                match async { start_windows_proxy(client?, args, up, node, &net).await }.await {
                    Ok(p) => {
                        line.push_str(&format!(
                            "; Windows data plane emulated in nftables table ip tandem-{}",
                            net.bridge()
                        ));
                        proxy = Some(p);
                    }
                    Err(e) => line.push_str(&format!(
                        "; the Windows data plane is not emulated ({e:#}): its pods' Service traffic follows Linux rules"
                    )),
                }
            }
            node.pod_network = Some(net);
            (line, proxy)
        }
        Err(e) => (format!("; pods not reachable: {e}"), None),
    }
}

/// The service proxy of an emulated Windows node: its pods' Service traffic with the limits of
/// a Windows node's data plane (see `tandem_proxy::rules::WindowsDataPlane`).
async fn start_windows_proxy(
    client: kube::Client,
    args: &ServerArgs,
    up: &UpArgs,
    node: &NodeConfig,
    net: &tandem_agent::podnet::EmulatedNetwork,
) -> anyhow::Result<tandem_proxy::ServiceProxy> {
    use crate::node_network::cidr;
    use tandem_proxy::rules::WindowsDataPlane;
    let config = tandem_proxy::ProxyConfig {
        table: format!("tandem-{}", net.bridge()),
        node_name: node.name.clone(),
        cluster_cidr: cidr("cluster CIDR", &up.cluster_cidr)?,
        node_pod_cidr: None,
        service_cidr: cidr("service CIDR", &args.service_cidr)?,
        bridge: None,
        netns: None,
        windows: Some(WindowsDataPlane {
            interface: net.bridge().to_string(),
            node_address: net.gateway(),
        }),
        pod_network: false,
    };
    Ok(tandem_proxy::ServiceProxy::start(client, config).await?)
}

/// Starts the service proxy and cluster DNS beside `tandem up`'s node on real containers, serves
/// the API on the pods' gateway (the `kubernetes` Service's endpoint) and points the node's
/// pods at the cluster DNS.
async fn start_node_network(
    server: &ApiServer,
    client: kube::Client,
    args: &ServerArgs,
    up: &UpArgs,
    dns_upstreams: &[std::net::SocketAddr],
    node: &mut NodeConfig,
    ctrd: &tandem_agent::runtime::cri::containerd::Containerd,
) -> crate::node_network::NodeNetwork {
    let gateway = ctrd.gateway();
    let port = server.local_addr.port();
    let api = match server.listen_also((gateway, port).into()).await {
        Ok(addr) => Ok(addr),
        Err(_) => server.listen_also((gateway, 0).into()).await,
    };
    match api {
        Ok(addr) => {
            if let Err(e) =
                tandem_apiserver::bootstrap::ensure_kubernetes_service(&server.state, addr).await
            {
                tracing::warn!(error = %e.message, "cannot point the kubernetes Service at the pods' gateway");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "pods cannot reach the API server: no listener on the pods' gateway")
        }
    }
    let ranges = &server.state.options.service_ranges;
    let settings = crate::node_network::NetworkSettings {
        node_name: node.name.clone(),
        cluster_cidr: up.cluster_cidr.clone(),
        node_pod_cidr: ctrd.pod_cidr(),
        service_cidr: args.service_cidr.clone(),
        cluster_dns: ranges.dns_ip(),
        cluster_domain: up.cluster_domain.clone(),
        dns_upstreams: dns_upstreams.to_vec(),
        bridge: ctrd.bridge_name().to_string(),
        gateway,
        dns: !args.disabled(crate::Addon::Dns),
        network_policy: !args.disabled(crate::Addon::NetworkPolicy),
        pod_network: false,
    };
    let clients = match node_network_clients(server, client.clone()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "the service proxy and DNS run as the admin: no certificates of their own");
            crate::node_network::Clients::all(client)
        }
    };
    // The ingress controller runs as its ServiceAccount (the bootstrap policy's
    // `system:tandem:ingress-controller`); the installer creates its IngressClass.
    let installer = clients.installer.clone();
    let ingress_client = match service_account_client(server, INGRESS_SA).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "the ingress controller runs as the admin: no certificate of its own");
            installer.clone()
        }
    };
    let mut network = crate::node_network::NodeNetwork::start(clients, &settings).await;
    let mut ingress = up.ingress.clone();
    ingress.enabled &= !args.disabled(crate::Addon::Ingress);
    network
        .start_ingress(ingress_client, Some(installer), &node.name, &ingress)
        .await;
    if network.proxy.is_some() {
        node.labels.insert(
            tandem_controllers::service_lb::SERVICE_PROXY_LABEL.to_string(),
            "nftables".to_string(),
        );
    }
    if network.dns.is_some() {
        node.cluster_dns = vec![std::net::IpAddr::V4(settings.cluster_dns)];
    }
    node.cluster_domain = up.cluster_domain.clone();
    network
}

/// The user the service proxies run as (upstream's kube-proxy, bound to `system:node-proxier`).
const PROXY_USER: &str = "system:kube-proxy";
/// The ServiceAccount the cluster DNS runs as: `kube-system/coredns`, which kubeadm's CoreDNS
/// addon binds `system:coredns` to.
const DNS_SA: &str = "coredns";

/// The ingress controller's ServiceAccount in `kube-system`.
const INGRESS_SA: &str = tandem_core::rbac::bootstrap::INGRESS_CONTROLLER_SA;

/// A client for the `kube-system` ServiceAccount `name` (a client certificate in its name and
/// groups, as the add-ons' identities are minted here).
async fn service_account_client(server: &ApiServer, name: &str) -> anyhow::Result<kube::Client> {
    identity_client(
        server,
        &format!("system:serviceaccount:kube-system:{name}"),
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        ],
        false,
    )
    .await
}

/// The proxy's, the DNS's and the policy agent's clients, each its own identity; `installer`
/// (the admin) publishes the DNS Service, as kubeadm's addon installer does.
async fn node_network_clients(
    server: &ApiServer,
    installer: kube::Client,
) -> anyhow::Result<crate::node_network::Clients> {
    Ok(crate::node_network::Clients {
        proxy: identity_client(server, PROXY_USER, &[], false).await?,
        dns: service_account_client(server, DNS_SA).await?,
        netpol: service_account_client(
            server,
            tandem_core::rbac::bootstrap::NETWORK_POLICY_AGENT_SA,
        )
        .await?,
        installer,
    })
}

/// Gives node n the n-th /24 of `cluster_cidr` (an IPv4 /16) as its pod CIDR.
fn assign_pod_cidrs(nodes: &mut [NodeConfig], cluster_cidr: &str) -> anyhow::Result<()> {
    let bad = || {
        anyhow::anyhow!("--cluster-cidr {cluster_cidr:?} must be an IPv4 /16 such as 10.244.0.0/16")
    };
    let (net, bits) = cluster_cidr.split_once('/').ok_or_else(bad)?;
    if bits != "16" {
        return Err(bad());
    }
    let ip: std::net::Ipv4Addr = net.parse().map_err(|_| bad())?;
    let [a, b, _, _] = ip.octets();
    if nodes.len() > 256 {
        anyhow::bail!("--cluster-cidr {cluster_cidr} has room for 256 nodes");
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        n.pod_cidr = Some(format!("{a}.{b}.{i}.0/24"));
    }
    Ok(())
}

/// Flags of `tandem scheduler`, named as kube-scheduler's.
#[derive(Args, Clone, Debug)]
pub struct SchedulerArgs {
    /// Kubeconfig with credentials for the API server.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Schedule the pods whose `spec.schedulerName` is this.
    #[arg(long, default_value = tandem_scheduler::DEFAULT_SCHEDULER_NAME)]
    pub scheduler_name: String,
    /// Schedule exactly as upstream kube-scheduler does, without tandem's OS placement and
    /// Windows build compatibility.
    #[arg(long)]
    pub upstream_os_placement: bool,
    /// Leader election on `kube-system/kube-scheduler`, as kube-scheduler's: a second
    /// scheduler beside a server's own (another `--scheduler-name`) needs `--leader-elect=false`,
    /// as upstream's multiple-schedulers setup turns it off.
    #[command(flatten)]
    pub leader_election: crate::leader::LeaderElectionArgs,
}

/// Runs a scheduler alone until Ctrl-C or SIGTERM.
pub async fn run_scheduler(args: SchedulerArgs) -> anyhow::Result<()> {
    // HTTP/2 when the kubeconfig holds a client certificate, kube-rs' own client otherwise
    // (tokens, exec plugins).
    let client = match crate::h2_client::client_from(&args.kubeconfig).await {
        Ok(client) => client,
        Err(_) => client_from(&args.kubeconfig).await?,
    };
    let options = tandem_scheduler::SchedulerOptions {
        scheduler_name: args.scheduler_name.clone(),
        upstream_os_placement: args.upstream_os_placement,
        ..Default::default()
    };
    args.leader_election.validate()?;
    println!(
        "tandem scheduler: scheduling pods with schedulerName {:?}",
        args.scheduler_name
    );
    let identity = tandem_controllers::leader_election::identity();
    let scheduler = crate::leader::run(
        &args.leader_election,
        crate::leader::Component {
            what: "scheduler",
            lease: tandem_controllers::leader_election::SCHEDULER_LEASE,
            event_source: "kube-scheduler",
        },
        &identity,
        client.clone(),
        move || tandem_scheduler::start(client.clone(), options.clone()),
        drop,
    )?;
    wait_for_shutdown().await;
    scheduler.shutdown().await;
    Ok(())
}

/// Flags of `tandem agent`, named as the kubelet's.
#[derive(Args, Clone, Debug)]
pub struct AgentArgs {
    /// Kubeconfig with credentials for the API server to join (or use `--server` and
    /// `--token`).
    #[arg(long, required_unless_present = "token")]
    pub kubeconfig: Option<PathBuf>,
    /// The API server to join with `--token`, `https://HOST:PORT`; several, comma-separated
    /// (`https://A:6443,https://B:6443`), for a control plane of several servers: the agent
    /// then reaches them through a local failover proxy (see `failover`). With `--kubeconfig`
    /// the list replaces the kubeconfig's server.
    #[arg(long, required_unless_present = "kubeconfig")]
    pub server: Option<String>,
    /// The join token `tandem server` wrote to `<data-dir>/join-token`
    /// (`K10<CA hash>::<id>.<secret>`): the agent pins the server's CA from it, requests its
    /// client certificate through a CertificateSigningRequest and keeps it in the state dir.
    #[arg(
        long,
        env = "TANDEM_TOKEN",
        requires = "server",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// The node's name.
    #[arg(long)]
    pub hostname_override: String,
    /// `linux` or `windows`.
    #[arg(long, default_value = "linux")]
    pub os: String,
    /// Windows build for a Windows node (`10.0.17763`, `10.0.20348`, `10.0.26100`).
    #[arg(long)]
    pub windows_build: Option<String>,
    /// Extra node labels, `key=value,…`.
    #[arg(long)]
    pub node_labels: Option<String>,
    /// Taints to register with, `key=value:Effect,…` (e.g. `os=windows:NoSchedule`).
    #[arg(long)]
    pub register_with_taints: Option<String>,
    /// Resources reserved for Kubernetes daemons, `cpu=100m,memory=500Mi`.
    #[arg(long)]
    pub kube_reserved: Option<String>,
    /// Resources reserved for the OS, `cpu=100m,memory=500Mi`.
    #[arg(long)]
    pub system_reserved: Option<String>,
    /// Hard eviction thresholds, `memory.available<500Mi,nodefs.available<10%`.
    #[arg(long)]
    pub eviction_hard: Option<String>,
    /// Windows process priority class for the agent (one of the six Windows names).
    #[arg(long)]
    pub windows_priorityclass: Option<String>,
    /// Where the runtime keeps its state across restarts (for `cri`: containerd's directories,
    /// pod volumes and logs; default `.tandem-agent/<node>`).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The node's InternalIP; the streaming server (logs, exec, port-forward) listens there.
    #[arg(long, default_value = "127.0.0.1")]
    pub node_ip: std::net::IpAddr,
    /// The node's pod CIDR (required with `--container-runtime cri`; otherwise taken from the
    /// Node once the controller manager assigns one).
    #[arg(long)]
    pub pod_cidr: Option<String>,
    /// `emulated` (no processes), or `cri` to run real Linux pods on a private containerd.
    #[arg(long, value_enum, default_value_t = crate::LinuxRuntime::Emulated)]
    pub container_runtime: crate::LinuxRuntime,
    /// Where the local OCI images are (default: `images/` beside the binary's directory).
    #[arg(long)]
    pub images_dir: Option<PathBuf>,
    /// Nameservers of `ClusterFirst` pods, `IP[,IP]` (the kubelet's `--cluster-dns`). With
    /// `--container-runtime cri` the agent runs the cluster DNS itself and this defaults to the
    /// tenth address of `--service-cidr`.
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<std::net::IpAddr>,
    /// The cluster's DNS domain (the kubelet's `--cluster-domain`).
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// The Services' address range, for the service proxy of a `cri` node.
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cidr: String,
    /// The cluster's pod range, for the service proxy of a `cri` node (traffic from outside it
    /// is masqueraded; default: the /16 around `--pod-cidr`).
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    /// Where the cluster DNS of a `cri` node sends other names: `none`, or `IP[:PORT],…`;
    /// default: this host's /etc/resolv.conf.
    #[arg(long)]
    pub dns_upstream: Option<String>,
    #[command(flatten)]
    pub ingress: crate::node_network::IngressArgs,
    #[command(flatten)]
    pub images: crate::image_args::ImageArgs,
    /// The pod network between hosts (routes to the other nodes' pod CIDRs, as flannel):
    /// `auto` — direct routes to hosts on this host's link, VXLAN to the others; `host-gw`;
    /// `vxlan`; `none` — no routes to other hosts' pods. Off whatever it says when `--node-ip`
    /// is a loopback address (every node on this one machine).
    #[arg(long, value_name = "BACKEND", default_value = "auto")]
    pub pod_network_backend: String,
    /// The pod network's VXLAN network identifier (4096, as the Windows overlay network needs;
    /// flannel's Linux default is 1).
    #[arg(long, default_value_t = tandem_agent::cluster_network::DEFAULT_VNI)]
    pub pod_network_vni: u32,
    /// The pod network's VXLAN UDP port (4789, IANA's and the Windows overlay's; the Linux
    /// kernel's own default is 8472).
    #[arg(long, default_value_t = tandem_agent::cluster_network::DEFAULT_PORT)]
    pub pod_network_port: u16,
    /// A directory of kubeconfigs for the data plane of a `cri` node, each its own identity as
    /// upstream's add-ons have: `kube-proxy.kubeconfig` (the service proxy,
    /// `system:kube-proxy`), `coredns.kubeconfig` (the cluster DNS), `network-policy.kubeconfig`
    /// (NetworkPolicy enforcement) and `installer.kubeconfig` (publishes the DNS Service, as
    /// kubeadm's addon installer). A missing file leaves that part on the node's identity,
    /// which may not read what it needs (Services, EndpointSlices cluster-wide). `tandem up
    /// --multi-host` writes one per host.
    #[arg(long, value_name = "DIR")]
    pub data_plane_kubeconfigs: Option<PathBuf>,
    /// Credentials of the built-in ingress controller (a kubeconfig of the
    /// `kube-system/tandem-ingress-controller` ServiceAccount, which the bootstrap policy grants
    /// what it reads): the node's own identity may not read Secrets cluster-wide, so without
    /// it a `cri` node runs no ingress controller.
    #[arg(long)]
    pub ingress_kubeconfig: Option<PathBuf>,
}

/// Joins the cluster at `server` with a join token: the CA is pinned from the token, the
/// client certificate comes through a CertificateSigningRequest (approved automatically for
/// bootstrap tokens), and a task renews it before it expires; the returned client presents the
/// renewed certificate on its new connections. Returns the node's kubeconfig and client.
async fn join(
    server: &str,
    token: &str,
    node_name: &str,
    node_dir: &std::path::Path,
) -> anyhow::Result<(PathBuf, kube::Client)> {
    use tandem_agent::bootstrap;
    let token = bootstrap::parse_join_token(token).context("invalid --token")?;
    std::fs::create_dir_all(node_dir)
        .with_context(|| format!("cannot create {}", node_dir.display()))?;
    println!("tandem agent: joining {server} as node {node_name} …");
    let kubeconfig = bootstrap::join(server, &token, node_name, node_dir)
        .await
        .with_context(|| format!("cannot join {server}"))?;
    println!(
        "tandem agent: joined; credentials in {}",
        kubeconfig.display()
    );
    let (client, identity) = crate::rotating_client::client(&kubeconfig).await?;
    let (server, path, name) = (
        server.to_string(),
        kubeconfig.clone(),
        node_name.to_string(),
    );
    tokio::spawn(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let reloader = {
            let path = path.clone();
            tokio::spawn(async move {
                while rx.recv().await.is_some() {
                    match identity.reload(&path).await {
                        Ok(()) => tracing::info!(
                            "renewed the node's client certificate; new connections use it"
                        ),
                        Err(e) => {
                            tracing::error!(error = %format!("{e:#}"), "cannot load the renewed client certificate")
                        }
                    }
                }
            })
        };
        let renewed = move |_client: kube::Client| {
            let _ = tx.send(());
        };
        let Err(e) = bootstrap::rotate(&server, &path, &name, renewed).await;
        tracing::error!(error = %e, "cannot renew the node's client certificate");
        reloader.abort();
    });
    Ok((kubeconfig, client))
}

/// Runs one node agent until Ctrl-C or SIGTERM.
pub async fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
    use std::net::IpAddr;
    let mut node = match args.os.as_str() {
        "linux" => NodeConfig::linux(&args.hostname_override),
        "windows" => {
            let build = args.windows_build.as_deref().unwrap_or("10.0.20348");
            let build = tandem_agent::WindowsVersion::parse(build)
                .with_context(|| format!("invalid --windows-build {build:?}"))?;
            NodeConfig::windows(&args.hostname_override, build)
        }
        other => anyhow::bail!("--os must be linux or windows, not {other:?}"),
    };
    if let Some(l) = &args.node_labels {
        node.labels.extend(tandem_agent::config::parse_labels(l)?);
    }
    if let Some(t) = &args.register_with_taints {
        node.taints = tandem_agent::config::parse_taints(t)?;
    }
    if let Some(r) = &args.kube_reserved {
        node.kube_reserved = tandem_agent::Resources::parse_reservation(r)?;
    }
    if let Some(r) = &args.system_reserved {
        node.system_reserved = tandem_agent::Resources::parse_reservation(r)?;
    }
    if let Some(e) = &args.eviction_hard {
        node.eviction_hard = tandem_agent::config::parse_eviction_hard(e)?;
    }
    if let Some(p) = &args.windows_priorityclass {
        tandem_agent::validate_windows_priority_class(p)?;
        node.windows_priorityclass = Some(p.clone());
    }
    node.internal_ip = args.node_ip;
    node.pod_cidr = args.pod_cidr.clone();
    node.cluster_dns = args.cluster_dns.clone();
    node.cluster_domain = args.cluster_domain.clone();
    args.images.apply(&mut node)?;
    let node_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".tandem-agent").join(&node.name));
    node.state_dir = args.state_dir.clone();
    node.validate()?;
    // Several servers: every client of the agent goes through the local failover proxy.
    let (server, _failover) = match args.server.as_deref() {
        Some(list) => {
            let servers = crate::failover::parse_servers(list)?;
            if servers.len() > 1 {
                let proxy = crate::failover::FailoverProxy::start(
                    servers,
                    crate::failover::DEFAULT_DIAL_TIMEOUT,
                )
                .await?;
                println!(
                    "tandem agent: API servers {list} through the failover proxy {}",
                    proxy.local_addr()
                );
                (Some(proxy.url()), Some(proxy))
            } else {
                (Some(list.trim().trim_end_matches('/').to_string()), None)
            }
        }
        None => (None, None),
    };
    let (kubeconfig, joined) = match (&args.kubeconfig, &server, &args.token) {
        (Some(path), _, None) => (path.clone(), None),
        (_, Some(server), Some(token)) => {
            let (path, client) = join(server, token, &node.name, &node_dir).await?;
            (path, Some(client))
        }
        _ => anyhow::bail!("pass --kubeconfig, or --server with --token"),
    };
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("cannot read kubeconfig {}", kubeconfig.display()))?,
        &Default::default(),
    )
    .await
    .context("invalid kubeconfig")?;
    if let (Some(server), None) = (&server, &joined) {
        config.cluster_url = server
            .parse()
            .with_context(|| format!("invalid --server {server:?}"))?;
    }
    node.cluster_ca_pem = tandem_agent::config::cluster_ca_pem(&config);
    let client = match joined {
        Some(client) => client,
        None => kube::Client::try_from(config).context("cannot build the API client")?,
    };
    let pod_network = pod_network_config(&args, &node)?;
    let shutdown = tokio::spawn(wait_for_shutdown());
    let mut cri = None;
    let mut network = None;
    match args.container_runtime {
        crate::LinuxRuntime::Emulated => println!(
            "tandem agent: node {} ({}) — emulated runtime: no processes run",
            node.name,
            node.os.as_str()
        ),
        crate::LinuxRuntime::Cri | crate::LinuxRuntime::Auto => {
            if node.os != tandem_agent::NodeOs::Linux {
                anyhow::bail!(
                    "--container-runtime cri runs Linux nodes only; Windows nodes are emulated"
                );
            }
            if node.pod_cidr.is_none() {
                anyhow::bail!("--container-runtime cri needs --pod-cidr");
            }
            let images_dir = args
                .images_dir
                .clone()
                .or_else(crate::cri_node::default_images_dir)
                .unwrap_or_else(|| PathBuf::from("target/images"));
            if let Some(why) = crate::cri_node::unavailable_reason(&images_dir) {
                anyhow::bail!("--container-runtime cri: {why}");
            }
            node.state_dir = Some(node_dir.clone());
            // Every flag is checked before containerd starts, so a bad one leaves nothing
            // running.
            let service_ranges =
                tandem_apiserver::service_alloc::ServiceRanges::from_cidr(&args.service_cidr)
                    .context("invalid --service-cidr")?;
            let cluster_cidr = match &args.cluster_cidr {
                Some(c) => c.clone(),
                None => sixteen_around(node.pod_cidr.as_deref().unwrap_or_default())?,
            };
            let dns_upstreams = crate::node_network::parse_upstreams(args.dns_upstream.as_deref())
                .context("invalid --dns-upstream")?;
            let ctrd = crate::cri_node::start_containerd(
                &node,
                &node_dir,
                &images_dir,
                pod_network.as_ref().map(|_| cluster_cidr.as_str()),
            )
            .await?;
            let pod_cidr = ctrd.pod_cidr();
            let settings = crate::node_network::NetworkSettings {
                node_name: node.name.clone(),
                cluster_cidr,
                node_pod_cidr: pod_cidr,
                service_cidr: args.service_cidr.clone(),
                cluster_dns: service_ranges.dns_ip(),
                cluster_domain: args.cluster_domain.clone(),
                dns_upstreams,
                bridge: ctrd.bridge_name().to_string(),
                gateway: ctrd.gateway(),
                // The agent's own node network: its add-ons are the server's to switch off.
                dns: true,
                network_policy: true,
                pod_network: pod_network.is_some(),
            };
            let clients = data_plane_clients(&client, args.data_plane_kubeconfigs.as_deref())
                .await
                .context("invalid --data-plane-kubeconfigs")?;
            let mut net = crate::node_network::NodeNetwork::start(clients, &settings).await;
            match &args.ingress_kubeconfig {
                Some(path) => {
                    let ingress_client = client_from(path).await.with_context(|| {
                        format!("cannot use --ingress-kubeconfig {}", path.display())
                    })?;
                    net.start_ingress(
                        ingress_client.clone(),
                        Some(ingress_client),
                        &node.name,
                        &args.ingress,
                    )
                    .await;
                }
                None if args.ingress.enabled => net.summary.push(format!(
                    "ingress controller: not running — the node's identity may not read Secrets \
                     cluster-wide; pass --ingress-kubeconfig with the credentials of \
                     kube-system/{INGRESS_SA} (`tandem kubeconfig --user \
                     system:serviceaccount:kube-system:{INGRESS_SA}`), or --ingress=false"
                )),
                None => net
                    .summary
                    .push("ingress controller: off (--ingress=false)".to_string()),
            }
            if net.proxy.is_some() {
                node.labels.insert(
                    tandem_controllers::service_lb::SERVICE_PROXY_LABEL.to_string(),
                    "nftables".to_string(),
                );
            }
            if net.dns.is_some() && node.cluster_dns.is_empty() {
                node.cluster_dns = vec![IpAddr::V4(settings.cluster_dns)];
            }
            let node_cri =
                match crate::cri_node::start_runtime(&mut node, &node_dir, ctrd, client.clone())
                    .await
                {
                    Ok(c) => c,
                    Err(e) => {
                        net.shutdown().await;
                        return Err(e);
                    }
                };
            println!(
                "tandem agent: node {} (linux) — {}",
                node.name, node_cri.description
            );
            for line in &net.summary {
                println!("  {line}");
            }
            network = Some(net);
            cri = Some(node_cri);
        }
    }
    let hosts = match pod_network {
        Some(config) => match tandem_agent::cluster_network::controller::ClusterNetwork::start(
            client.clone(),
            config,
        )
        .await
        {
            Ok(n) => {
                println!("  {}", n.summary());
                Some(n)
            }
            Err(e) => {
                println!("  pod network: not running — {:#}", anyhow::Error::from(e));
                None
            }
        },
        None => {
            println!(
                "  pod network: off ({})",
                if args.pod_network_backend == "none" {
                    "--pod-network-backend none"
                } else {
                    "--node-ip is a loopback address: one machine"
                }
            );
            None
        }
    };
    let runtime = cri.as_ref().map(|c| c.runtime.clone());
    let result = tokio::select! {
        r = async {
            match runtime {
                Some(rt) => {
                    tandem_agent::run_with_runtime(client, node, rt, tandem_agent::clock::Clock::new())
                        .await
                }
                None => tandem_agent::run(client, node).await,
            }
        } => r.context("node agent failed"),
        _ = shutdown => {
            println!("tandem agent: shutting down");
            Ok(())
        }
    };
    if let Some(net) = network {
        net.shutdown().await;
    }
    if let Some(h) = hosts {
        h.shutdown().await;
    }
    if let Some(c) = &cri
        && let Err(e) = c.containerd.shutdown(true).await
    {
        eprintln!("tandem agent: containerd shutdown: {e}");
    }
    result
}

/// The data plane's file names in `--data-plane-kubeconfigs`, and who each authenticates as:
/// (file, user, groups).
/// (A certificate carries one group here; the add-ons' bindings name their users.)
pub const DATA_PLANE_IDENTITIES: [(&str, &str, &[&str]); 4] = [
    ("kube-proxy.kubeconfig", PROXY_USER, &[]),
    (
        "coredns.kubeconfig",
        "system:serviceaccount:kube-system:coredns",
        &[],
    ),
    (
        "network-policy.kubeconfig",
        "system:serviceaccount:kube-system:tandem-network-policy-agent",
        &[],
    ),
    (
        "installer.kubeconfig",
        "kubernetes-admin",
        &["system:masters"],
    ),
];

/// The clients of a `cri` agent's data plane: those of `dir` that exist, the node's otherwise.
async fn data_plane_clients(
    node: &kube::Client,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<crate::node_network::Clients> {
    let mut clients = crate::node_network::Clients::all(node.clone());
    let Some(dir) = dir else {
        return Ok(clients);
    };
    for (file, _, _) in DATA_PLANE_IDENTITIES {
        let path = dir.join(file);
        if !path.is_file() {
            continue;
        }
        let client = client_from(&path).await?;
        match file {
            "kube-proxy.kubeconfig" => clients.proxy = client,
            "coredns.kubeconfig" => clients.dns = client,
            "network-policy.kubeconfig" => clients.netpol = client,
            _ => clients.installer = client,
        }
    }
    Ok(clients)
}

/// Writes the kubeconfigs of [`DATA_PLANE_IDENTITIES`] into `dir` (mode 0600), for agents that
/// reach the API server at `url` (`tandem up --multi-host`'s hosts).
pub fn mint_data_plane_kubeconfigs(
    server: &ApiServer,
    url: &str,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (file, user, groups) in DATA_PLANE_IDENTITIES {
        let yaml = server
            .pki
            .mint_kubeconfig(url, user, groups, COMPONENT_CERT_VALIDITY)
            .with_context(|| format!("cannot issue a certificate for {user}"))?;
        let path = dir.join(file);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        std::io::Write::write_all(&mut f, yaml.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The pod network between hosts that `tandem agent`'s flags ask for; `None` when off
/// (`--pod-network-backend none`, or a loopback `--node-ip`).
fn pod_network_config(
    args: &AgentArgs,
    node: &NodeConfig,
) -> anyhow::Result<Option<tandem_agent::cluster_network::controller::ClusterNetworkConfig>> {
    use tandem_agent::cluster_network::{Backend, controller::ClusterNetworkConfig};
    if args.pod_network_backend == "none" {
        return Ok(None);
    }
    let backend = Backend::parse(&args.pod_network_backend).with_context(|| {
        format!(
            "--pod-network-backend must be auto, host-gw, vxlan or none, not {:?}",
            args.pod_network_backend
        )
    })?;
    if args.pod_network_vni == 0 || args.pod_network_vni >= 1 << 24 {
        anyhow::bail!("--pod-network-vni must be between 1 and 16777215");
    }
    if args.pod_network_port == 0 {
        anyhow::bail!("--pod-network-port must not be 0");
    }
    let public_ip = match args.node_ip {
        std::net::IpAddr::V4(ip) if ip.is_loopback() => return Ok(None),
        std::net::IpAddr::V4(ip) => ip,
        std::net::IpAddr::V6(_) => {
            anyhow::bail!("the pod network between hosts is IPv4 only: --node-ip must be IPv4")
        }
    };
    Ok(Some(ClusterNetworkConfig {
        node_name: node.name.clone(),
        backend,
        vni: args.pod_network_vni,
        port: args.pod_network_port,
        public_ip,
        pod_cidr: node.pod_cidr.clone(),
    }))
}

/// The /16 that holds a pod CIDR such as `10.244.3.0/24`.
fn sixteen_around(pod_cidr: &str) -> anyhow::Result<String> {
    let ip: std::net::Ipv4Addr = pod_cidr
        .split('/')
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("invalid pod CIDR {pod_cidr:?}"))?;
    let [a, b, _, _] = ip.octets();
    Ok(format!("{a}.{b}.0.0/16"))
}

async fn wait_for_shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
