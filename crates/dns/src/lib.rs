//! The cluster DNS server: Kubernetes DNS-based service discovery answered from watched Services and EndpointSlices, everything else forwarded upstream.
//!
//! What CoreDNS does for a kubeadm cluster (its `kubernetes` plugin with `pods insecure`,
//! `fallthrough in-addr.arpa ip6.arpa`, `ttl 30`, then `forward . /etc/resolv.conf`), in-process:
//!
//! - [`records`]: the zone as an index of API objects and the lookup that answers from it (pure);
//! - `handler`: one DNS message to a reply, a forward or nothing (pure);
//! - `server`: UDP and TCP sockets; `forward`: upstream resolvers; `watch`: the API feed;
//! - [`register_service`]: publishes the server as `kube-system/kube-dns`;
//!
//! ```no_run
//! # async fn run(client: kube::Client) -> Result<(), tandem_dns::DnsError> {
//! let config = tandem_dns::DnsConfig {
//!     listen: vec!["127.0.0.1:1053".parse().unwrap()],
//!     upstreams: tandem_dns::upstreams_from_resolv_conf(
//!         &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
//!     ),
//!     ..tandem_dns::DnsConfig::default()
//! };
//! let server = tandem_dns::DnsServer::start(client.clone(), config).await?;
//! let at = server.local_addrs()[0];
//! tandem_dns::register_service(&client, "10.96.0.10".parse().unwrap(), at, "node-1").await?;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;

mod forward;
mod handler;
pub mod records;
mod register;
mod server;
mod watch;

pub use forward::{UPSTREAM_TIMEOUT, upstreams_from_resolv_conf};
pub use records::{Answer, DEFAULT_TTL, Index, IndexError};
pub use register::{DNS_NAMESPACE, DNS_SERVICE, MANAGED_BY, register_service};
pub use server::{DnsServer, MAX_TCP_CONNECTIONS, SYNC_WAIT, TCP_IDLE_TIMEOUT, TCP_IO_TIMEOUT};

/// What the server serves and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// Addresses to serve on, UDP and TCP each; port 0 picks a free port (see
    /// [`DnsServer::local_addrs`]). Must not be empty.
    pub listen: Vec<SocketAddr>,
    /// The cluster domain, `cluster.local` by default (the kubelet's `clusterDomain`).
    pub cluster_domain: String,
    /// Resolvers for every other name, tried in order (the first three); none means SERVFAIL
    /// at once. [`upstreams_from_resolv_conf`] reads them from a resolv.conf.
    pub upstreams: Vec<SocketAddr>,
    /// TTL of the records served, and the SOA minimum (negative caching).
    pub ttl: u32,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            listen: Vec::new(),
            cluster_domain: "cluster.local".to_string(),
            upstreams: Vec::new(),
            ttl: DEFAULT_TTL,
        }
    }
}

/// Why the server could not start or register.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("no listen address configured")]
    NoListenAddress,
    #[error("could not listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("kubernetes API request failed")]
    Kube(#[from] kube::Error),
    #[error("could not build the {what} manifest")]
    Manifest {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}
