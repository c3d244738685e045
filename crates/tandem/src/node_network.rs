//! What runs beside the node on real containers so that Services carry traffic: the service
//! proxy (nftables, as kube-proxy) and the cluster DNS server, both fed by the API's watches,
//! and the ingress controller (`tandem_ingress`) serving the `tandem` IngressClass on the
//! node's HTTP and HTTPS ports.
//!
//! The DNS server listens on the pods' gateway (the bridge address, which tandem creates with the
//! node's containerd) and is published as `kube-system/kube-dns` on the cluster DNS address; the
//! proxy sends that address to it like any other Service. Both stop with the node, and the proxy
//! removes its table then.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context;
use tandem_proxy::{Cidr, ProxyConfig, ServiceProxy};

/// The cluster-wide settings the node's network needs.
#[derive(Debug, Clone)]
pub struct NetworkSettings {
    pub node_name: String,
    pub cluster_cidr: String,
    pub node_pod_cidr: String,
    pub service_cidr: String,
    pub cluster_dns: Ipv4Addr,
    pub cluster_domain: String,
    /// Where names outside the cluster domain are sent; empty: answered SERVFAIL at once.
    pub dns_upstreams: Vec<SocketAddr>,
    /// The pods' bridge and its address.
    pub bridge: String,
    pub gateway: Ipv4Addr,
    /// `--disable dns`: no cluster DNS on this node.
    pub dns: bool,
    /// `--disable network-policy`: NetworkPolicies are not enforced here.
    pub network_policy: bool,
    /// Whether this host runs the pod network between hosts: the proxy then sends Service
    /// traffic to the pods of the other hosts in it.
    pub pod_network: bool,
}

/// Flags of the ingress controller (`tandem up`, `tandem agent --container-runtime cri`).
#[derive(clap::Args, Clone, Debug)]
pub struct IngressArgs {
    /// Run the built-in ingress controller (IngressClass `tandem`, the default class) on the
    /// node with real containers; `--ingress=false` turns it off.
    #[arg(
        long = "ingress",
        id = "ingress",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub enabled: bool,
    /// The ingress controller's HTTP port.
    #[arg(long, default_value_t = 80)]
    pub ingress_http_port: u16,
    /// The ingress controller's HTTPS port.
    #[arg(long, default_value_t = 443)]
    pub ingress_https_port: u16,
    /// The address the ingress controller listens on (all IPv4 addresses by default, as a
    /// hostPort).
    #[arg(long, default_value = "0.0.0.0")]
    pub ingress_bind_address: IpAddr,
}

/// The running proxy and DNS server of a node (each may be missing, with the reason said).
pub struct NodeNetwork {
    pub proxy: Option<ServiceProxy>,
    pub dns: Option<tandem_dns::DnsServer>,
    /// NetworkPolicy enforcement for the node's pods (`tandem_proxy::netpol`), beside the proxy.
    pub netpol: Option<tandem_proxy::netpol::NetworkPolicyController>,
    /// The ingress controller, once [`NodeNetwork::start_ingress`] started it.
    pub ingress: Option<tandem_ingress::IngressController>,
    /// One line per component for the start-up banner.
    pub summary: Vec<String>,
    /// The cluster DNS Service's address, when the DNS server runs.
    cluster_dns: Ipv4Addr,
}

/// The API clients of a node's data plane.
pub struct Clients {
    /// The service proxy's (`system:kube-proxy`).
    pub proxy: kube::Client,
    /// The DNS server's (the `kube-system/kube-dns` ServiceAccount).
    pub dns: kube::Client,
    /// The NetworkPolicy agent's (`kube-system/tandem-network-policy-agent`, or the node).
    pub netpol: kube::Client,
    /// Publishes the DNS Service and its EndpointSlice, as an addon installer would.
    pub installer: kube::Client,
}

impl Clients {
    /// One client for every part (`tandem agent`, which has one identity).
    pub fn all(client: kube::Client) -> Clients {
        Clients {
            proxy: client.clone(),
            dns: client.clone(),
            netpol: client.clone(),
            installer: client,
        }
    }
}

impl NodeNetwork {
    /// Starts the proxy and the DNS server. Neither failing stops the node: it then runs
    /// without that part of the data plane, and the summary says why.
    pub async fn start(clients: Clients, s: &NetworkSettings) -> NodeNetwork {
        let mut summary = Vec::new();
        let proxy = match start_proxy(clients.proxy, s).await {
            Ok(p) => {
                summary.push(format!(
                    "service proxy: nftables table ip {} (ClusterIP, NodePort, LoadBalancer on this node's addresses)",
                    p.table()
                ));
                Some(p)
            }
            Err(e) => {
                summary.push(format!("service proxy: not running — {e:#}"));
                None
            }
        };
        let netpol = match &proxy {
            Some(_) if !s.network_policy => {
                summary.push("network policy: off (--disable network-policy)".to_string());
                None
            }
            Some(_) => start_netpol(clients.netpol, s, &mut summary).await,
            None => None,
        };
        let dns = if !s.dns {
            summary.push("cluster DNS: off (--disable dns)".to_string());
            Err(None)
        } else {
            start_dns(clients.dns, clients.installer, s)
                .await
                .map_err(Some)
        };
        let dns = match dns {
            Ok(d) => {
                let at = d
                    .local_addrs()
                    .first()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let upstream = if s.dns_upstreams.is_empty() {
                    "no upstream: other names fail at once".to_string()
                } else {
                    format!(
                        "other names to {}",
                        s.dns_upstreams
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                summary.push(format!(
                    "cluster DNS: {} (kube-system/kube-dns) served at {at}; zone {}, {upstream}",
                    s.cluster_dns, s.cluster_domain
                ));
                Some(d)
            }
            Err(Some(e)) => {
                summary.push(format!("cluster DNS: not running — {e:#}"));
                None
            }
            Err(None) => None,
        };
        NodeNetwork {
            proxy,
            dns,
            netpol,
            ingress: None,
            summary,
            cluster_dns: s.cluster_dns,
        }
    }

    /// Starts the ingress controller of `node_name` as `args` say (nothing when turned off);
    /// failing to (a port taken) leaves the node running without it, and the summary says why.
    /// `client` is the controller's own identity; `installer`, when given, creates the
    /// IngressClass if it is missing (the controller's role may not).
    pub async fn start_ingress(
        &mut self,
        client: kube::Client,
        installer: Option<kube::Client>,
        node_name: &str,
        args: &IngressArgs,
    ) {
        if !args.enabled {
            self.summary
                .push("ingress controller: off (--ingress=false)".to_string());
            return;
        }
        let config = tandem_ingress::IngressConfig::new(
            node_name,
            SocketAddr::new(args.ingress_bind_address, args.ingress_http_port),
            SocketAddr::new(args.ingress_bind_address, args.ingress_https_port),
        );
        match tandem_ingress::IngressController::start(client, config).await {
            Ok(c) => {
                if let Some(installer) = installer {
                    tokio::spawn(tandem_ingress::ensure_class(
                        installer,
                        tandem_ingress::class::Identity::default(),
                    ));
                }
                self.summary.push(format!(
                    "ingress controller: IngressClass {} (default) on http://{} and https://{}",
                    tandem_ingress::CLASS_NAME,
                    c.http_addr(),
                    c.https_addr()
                ));
                self.ingress = Some(c);
            }
            Err(e) => self.summary.push(format!(
                "ingress controller: not running — {:#}",
                anyhow::Error::from(e)
            )),
        }
    }

    /// The cluster DNS Service's address, when this node runs the DNS server.
    pub fn dns_ip(&self) -> Option<Ipv4Addr> {
        self.dns.is_some().then_some(self.cluster_dns)
    }

    /// Stops them all; the proxy deletes its table, the ingress controller takes its address
    /// out of the Ingresses' status.
    pub async fn shutdown(self) {
        if let Some(i) = self.ingress {
            i.shutdown().await;
        }
        drop(self.dns);
        if let Some(n) = self.netpol {
            n.shutdown().await;
        }
        if let Some(p) = self.proxy {
            p.shutdown().await;
        }
    }
}

/// Parses a CIDR flag or setting, naming it in the error.
pub(crate) fn cidr(what: &str, s: &str) -> anyhow::Result<Cidr> {
    Cidr::parse(s).with_context(|| format!("invalid {what} {s:?}"))
}

async fn start_proxy(client: kube::Client, s: &NetworkSettings) -> anyhow::Result<ServiceProxy> {
    let config = ProxyConfig {
        table: format!("tandem-{}", s.bridge),
        node_name: s.node_name.clone(),
        cluster_cidr: cidr("cluster CIDR", &s.cluster_cidr)?,
        node_pod_cidr: Some(cidr("pod CIDR", &s.node_pod_cidr)?),
        service_cidr: cidr("service CIDR", &s.service_cidr)?,
        bridge: Some(s.bridge.clone()),
        netns: None,
        windows: None,
        pod_network: s.pod_network,
    };
    Ok(ServiceProxy::start(client, config).await?)
}

/// Starts NetworkPolicy enforcement for the node's pods; its summary line names the table.
async fn start_netpol(
    client: kube::Client,
    s: &NetworkSettings,
    summary: &mut Vec<String>,
) -> Option<tandem_proxy::netpol::NetworkPolicyController> {
    use tandem_proxy::netpol::{NetpolConfig, NetworkPolicyController};
    let config = NetpolConfig::for_node(&s.node_name, &s.bridge);
    match NetworkPolicyController::start(client, config).await {
        Ok(c) => {
            summary.push(format!(
                "network policy: nftables table inet {} (NetworkPolicy enforced for this node's pods)",
                c.table()
            ));
            Some(c)
        }
        Err(e) => {
            summary.push(format!("network policy: not enforced — {e}"));
            None
        }
    }
}

async fn start_dns(
    client: kube::Client,
    installer: kube::Client,
    s: &NetworkSettings,
) -> anyhow::Result<tandem_dns::DnsServer> {
    // Port 53 on the gateway when free (pods could then also use the gateway directly); any
    // port otherwise, since pods reach it through the kube-dns Service's address.
    let mut last = None;
    for port in [53, 0] {
        let config = tandem_dns::DnsConfig {
            listen: vec![SocketAddr::new(IpAddr::V4(s.gateway), port)],
            cluster_domain: s.cluster_domain.clone(),
            upstreams: s.dns_upstreams.clone(),
            ttl: 30,
        };
        match tandem_dns::DnsServer::start(client.clone(), config).await {
            Ok(server) => {
                let endpoint = server
                    .local_addrs()
                    .first()
                    .copied()
                    .context("the DNS server listens nowhere")?;
                tandem_dns::register_service(
                    &installer,
                    IpAddr::V4(s.cluster_dns),
                    endpoint,
                    &s.node_name,
                )
                .await
                .context("cannot publish kube-system/kube-dns")?;
                return Ok(server);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .map(anyhow::Error::from)
        .unwrap_or_else(|| anyhow::anyhow!("no port to listen on")))
}

/// The upstream resolvers: `spec` is `none`, a comma-separated list of addresses (port 53 when
/// not given), or empty for the nameservers of this host's /etc/resolv.conf.
pub fn parse_upstreams(spec: Option<&str>) -> anyhow::Result<Vec<SocketAddr>> {
    match spec.map(str::trim) {
        None | Some("") => Ok(std::fs::read_to_string("/etc/resolv.conf")
            .map(|text| tandem_dns::upstreams_from_resolv_conf(&text))
            .unwrap_or_default()),
        Some("none") => Ok(Vec::new()),
        Some(list) => list
            .split(',')
            .map(|item| {
                let item = item.trim();
                item.parse::<SocketAddr>()
                    .or_else(|_| item.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                    .with_context(|| format!("invalid DNS upstream {item:?}"))
            })
            .collect(),
    }
}
