//! The agent's failover proxy to several API servers, as k3s' agent runs its client load
//! balancer (`pkg/agent/loadbalancer`): a TCP proxy on `127.0.0.1:<free port>` inside the agent,
//! which every client of the agent (node status, pods, the service proxy and DNS, certificate
//! rotation) uses as its one API server address. Each new connection goes to the server that
//! answered last; when it refuses or does not answer within the dial timeout the proxy tries the
//! next one in the order given, and remembers the one that answered. A connection that breaks
//! when its server dies is not moved (TLS ends at the server); the clients reconnect, and their
//! new connections reach a server that is up. When none answers, the client's connection is
//! closed after at most one dial timeout per server.
//!
//! TLS is end to end: the agent verifies the server's certificate for `127.0.0.1`, which every
//! tandem API server's serving certificate names (see `tandem_apiserver::pki`); the servers must
//! share one cluster CA, as the servers of one control plane do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};

/// How long the proxy waits for one server to accept a connection before trying the next
/// (k3s' load balancer dials with a 10 s-bounded dialer; a shorter bound fails over sooner).
pub const DEFAULT_DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// One API server, as `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Parses `--server https://A:6443,https://B:6444`: `https://` URLs (no path), the port 443
/// when left out, as a kubeconfig's `server`.
pub fn parse_servers(list: &str) -> anyhow::Result<Vec<Upstream>> {
    let mut servers = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let rest = item
            .strip_prefix("https://")
            .with_context(|| format!("--server {item:?}: an API server is https://HOST:PORT"))?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            anyhow::bail!("--server {item:?}: an API server is https://HOST:PORT, without a path");
        }
        let (host, port) = match authority.strip_prefix('[') {
            // [v6]:port or [v6]
            Some(v6) => {
                let (host, tail) = v6
                    .split_once(']')
                    .with_context(|| format!("--server {item:?}: unclosed '['"))?;
                let port = match tail.strip_prefix(':') {
                    Some(p) => p.parse().ok(),
                    None if tail.is_empty() => Some(443),
                    None => None,
                };
                (host.to_string(), port)
            }
            None => match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), port.parse().ok()),
                None => (authority.to_string(), Some(443)),
            },
        };
        let port = port
            .filter(|p| *p != 0)
            .with_context(|| format!("--server {item:?}: invalid port"))?;
        if host.is_empty() {
            anyhow::bail!("--server {item:?}: no host");
        }
        servers.push(Upstream { host, port });
    }
    if servers.is_empty() {
        anyhow::bail!("--server lists no API server");
    }
    Ok(servers)
}

/// The servers in the order they are tried, and the one that answered last.
#[derive(Debug)]
struct Upstreams {
    servers: Vec<Upstream>,
    preferred: AtomicUsize,
    dial_timeout: Duration,
}

impl Upstreams {
    /// Connects to the preferred server or, failing that, to the next ones in order.
    async fn dial(&self) -> std::io::Result<(usize, TcpStream)> {
        let n = self.servers.len();
        let first = self.preferred.load(Ordering::Relaxed) % n.max(1);
        let mut failures = Vec::new();
        for i in (0..n).map(|k| (first + k) % n) {
            let server = &self.servers[i];
            let connect = TcpStream::connect((server.host.as_str(), server.port));
            match tokio::time::timeout(self.dial_timeout, connect).await {
                Ok(Ok(stream)) => {
                    if self.preferred.swap(i, Ordering::Relaxed) != i {
                        tracing::info!(server = %server, "API server connections go to this server now");
                    }
                    return Ok((i, stream));
                }
                Ok(Err(e)) => failures.push(format!("{server}: {e}")),
                Err(_) => failures.push(format!(
                    "{server}: no answer within {:?}",
                    self.dial_timeout
                )),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("no API server answered ({})", failures.join("; ")),
        ))
    }
}

/// A running failover proxy; dropping it stops accepting connections.
pub struct FailoverProxy {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FailoverProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FailoverProxy {
    /// Listens on a free loopback port and forwards to `servers` (tried in this order).
    pub async fn start(servers: Vec<Upstream>, dial_timeout: Duration) -> anyhow::Result<Self> {
        if servers.is_empty() {
            anyhow::bail!("the failover proxy needs at least one API server");
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("cannot listen for the API server failover proxy")?;
        let addr = listener.local_addr()?;
        let upstreams = Arc::new(Upstreams {
            servers,
            preferred: AtomicUsize::new(0),
            dial_timeout,
        });
        let accept = tokio::spawn(accept_loop(listener, upstreams));
        Ok(FailoverProxy { addr, accept })
    }

    /// Where the proxy listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL the agent's clients use: `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }
}

async fn accept_loop(listener: TcpListener, upstreams: Arc<Upstreams>) {
    loop {
        let (mut client, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: pause instead of spinning.
                tracing::warn!(error = %e, "the API server failover proxy cannot accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let upstreams = upstreams.clone();
        tokio::spawn(async move {
            let (_, mut server) = match upstreams.dial().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(client = %peer, error = %e, "dropping an API connection");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server that answers every connection with its name and closes it.
    async fn named_server(
        name: &'static str,
    ) -> anyhow::Result<(Upstream, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let _ = conn.write_all(name.as_bytes()).await;
            }
        });
        Ok((
            Upstream {
                host: "127.0.0.1".into(),
                port,
            },
            task,
        ))
    }

    /// Reads what the server behind the proxy says, bounded.
    async fn ask(proxy: &FailoverProxy) -> anyhow::Result<String> {
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut out))
            .await
            .context("no answer through the proxy")??;
        Ok(out)
    }

    /// A loopback port nothing listens on.
    async fn closed_port() -> anyhow::Result<Upstream> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        drop(listener);
        Ok(Upstream {
            host: "127.0.0.1".into(),
            port,
        })
    }

    #[test]
    fn server_lists_parse_as_kubeconfig_urls() -> anyhow::Result<()> {
        let s = parse_servers(
            "https://a.example:6443, https://10.0.0.2:6444/,https://b,https://[::1]:7443",
        )?;
        let got: Vec<String> = s.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            ["a.example:6443", "10.0.0.2:6444", "b:443", "[::1]:7443"]
        );
        for bad in [
            "",
            "http://a:6443",
            "https://a:6443/api",
            "https://:6443",
            "https://a:x",
        ] {
            assert!(parse_servers(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn connections_go_to_the_first_server_that_answers() -> anyhow::Result<()> {
        let (a, a_task) = named_server("A").await?;
        let (b, _b_task) = named_server("B").await?;
        let proxy = FailoverProxy::start(vec![a, b], Duration::from_secs(2)).await?;
        assert_eq!(ask(&proxy).await?, "A");
        assert_eq!(ask(&proxy).await?, "A", "stays with a server that answers");
        // The first server dies: new connections go to the second, and stay there.
        a_task.abort();
        let _ = a_task.await;
        assert_eq!(ask(&proxy).await?, "B");
        assert_eq!(ask(&proxy).await?, "B");
        Ok(())
    }

    #[tokio::test]
    async fn a_refusing_first_server_is_skipped() -> anyhow::Result<()> {
        let (b, _b_task) = named_server("B").await?;
        let proxy =
            FailoverProxy::start(vec![closed_port().await?, b], Duration::from_secs(2)).await?;
        assert_eq!(ask(&proxy).await?, "B");
        Ok(())
    }

    #[tokio::test]
    async fn with_no_server_answering_the_connection_is_closed() -> anyhow::Result<()> {
        let servers = vec![closed_port().await?, closed_port().await?];
        let upstreams = Upstreams {
            servers: servers.clone(),
            preferred: AtomicUsize::new(0),
            dial_timeout: Duration::from_secs(2),
        };
        let err = upstreams.dial().await.err().context("a dial succeeded")?;
        let msg = err.to_string();
        assert!(msg.starts_with("no API server answered"), "{msg}");
        for s in &servers {
            assert!(msg.contains(&s.to_string()), "{msg}");
        }
        let proxy = FailoverProxy::start(servers, Duration::from_secs(2)).await?;
        // The client sees its connection end (EOF or reset), not a hang.
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf))
            .await
            .context("the connection was left hanging")?;
        assert!(read.is_err() || buf.is_empty());
        Ok(())
    }
}
