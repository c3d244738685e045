//! What runs beside the node on real containers so that Services carry traffic: the service
//! proxy (nftables, as kube-proxy) and the cluster DNS server, both fed by the API's watches.
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
}

/// The running proxy and DNS server of a node (each may be missing, with the reason said).
pub struct NodeNetwork {
    pub proxy: Option<ServiceProxy>,
    pub dns: Option<tandem_dns::DnsServer>,
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
    /// Publishes the DNS Service and its EndpointSlice, as an addon installer would.
    pub installer: kube::Client,
}

impl Clients {
    /// One client for every part (`tandem agent`, which has one identity).
    pub fn all(client: kube::Client) -> Clients {
        Clients {
            proxy: client.clone(),
            dns: client.clone(),
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
        let dns = match start_dns(clients.dns, clients.installer, s).await {
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
            Err(e) => {
                summary.push(format!("cluster DNS: not running — {e:#}"));
                None
            }
        };
        NodeNetwork {
            proxy,
            dns,
            summary,
            cluster_dns: s.cluster_dns,
        }
    }

    /// The cluster DNS Service's address, when this node runs the DNS server.
    pub fn dns_ip(&self) -> Option<Ipv4Addr> {
        self.dns.is_some().then_some(self.cluster_dns)
    }

    /// Stops both; the proxy deletes its table.
    pub async fn shutdown(self) {
        drop(self.dns);
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
    };
    Ok(ServiceProxy::start(client, config).await?)
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
