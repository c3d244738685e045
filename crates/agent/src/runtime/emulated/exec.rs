//! `kubectl exec` and `kubectl port-forward` into emulated pods. No process runs, so exec runs
//! the emulated command set of [`crate::emulated_exec`] (labelled as emulated in its output),
//! inside the pod's network namespace when the pod is on the network; port-forward connects to
//! the pod's ports from inside its namespace, where the stand-in answers. Both are served by the
//! runtime's own streaming server ([`crate::streaming`]), as containerd serves a real node's.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::net::{TcpStream, UdpSocket};

use super::EmulatedRuntime;
use crate::emulated_exec::{self, DnsSettings, ExecContext, PodNetwork};
use crate::podnet::PodNet;
use crate::runtime::{RuntimeError, StreamRequest};
use crate::streaming::{self, ExecHandler, PortForwardHandler, StreamingServer};

/// What exec needs to know about a sandbox beyond [`crate::runtime::SandboxInfo`]: its hostname
/// and resolver settings, worked out from the pod when the sandbox is made.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct SandboxExtra {
    pub hostname: String,
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub ndots: u32,
}

impl SandboxExtra {
    /// From the pod and the node's DNS settings (the kubelet's `GetPodDNS`; the node has no
    /// resolv.conf of its own to give `Default` pods).
    pub fn of(
        pod: &k8s_openapi::api::core::v1::Pod,
        node: &crate::dns_config::NodeDns,
    ) -> SandboxExtra {
        let spec = pod.spec.as_ref();
        let hostname = spec
            .and_then(|s| s.hostname.clone())
            .or_else(|| pod.metadata.name.clone())
            .unwrap_or_default();
        let dns = crate::dns_config::pod_dns(pod, node, None)
            .map(|d| d.config)
            .unwrap_or_default();
        let ndots = dns
            .options
            .iter()
            .find_map(|o| o.strip_prefix("ndots:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        SandboxExtra {
            hostname,
            nameservers: dns.nameservers,
            searches: dns.searches,
            ndots,
        }
    }
}

/// An emulated pod's network, for the commands.
struct OnNetwork(Arc<PodNet>);

#[async_trait]
impl PodNetwork for OnNetwork {
    async fn tcp_connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
        self.0.tcp_connect(addr, timeout).await
    }

    async fn udp_socket(&self) -> std::io::Result<UdpSocket> {
        self.0.udp_socket().await
    }

    async fn icmp_echo(
        &self,
        dst: Ipv4Addr,
        seq: u16,
        timeout: Duration,
    ) -> std::io::Result<Option<(Duration, u8)>> {
        self.0.icmp_echo(dst, seq, timeout).await
    }
}

/// A pod whose node has no pod network: every network operation fails, saying why.
struct OffNetwork;

fn off() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NetworkUnreachable,
        "this emulated pod is not on the network (its node runs without an emulated pod network)",
    )
}

#[async_trait]
impl PodNetwork for OffNetwork {
    async fn tcp_connect(&self, _: SocketAddr, _: Duration) -> std::io::Result<TcpStream> {
        Err(off())
    }

    async fn udp_socket(&self) -> std::io::Result<UdpSocket> {
        Err(off())
    }

    async fn icmp_echo(
        &self,
        _: Ipv4Addr,
        _: u16,
        _: Duration,
    ) -> std::io::Result<Option<(Duration, u8)>> {
        Err(off())
    }
}

struct Exec(ExecContext);

#[async_trait]
impl ExecHandler for Exec {
    async fn exec(&self, io: streaming::ExecIo) -> i32 {
        emulated_exec::run(
            &self.0,
            io.command,
            emulated_exec::ExecIo {
                stdin: io.stdin,
                stdout: io.stdout,
                stderr: io.stderr,
                tty: io.tty,
            },
        )
        .await
    }
}

struct Forward(Arc<PodNet>);

#[async_trait]
impl PortForwardHandler for Forward {
    async fn connect(&self, port: u16) -> std::io::Result<TcpStream> {
        self.0
            .tcp_connect(
                SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                Duration::from_secs(10),
            )
            .await
    }
}

impl EmulatedRuntime {
    async fn streaming(&self) -> Result<&StreamingServer, RuntimeError> {
        self.streaming
            .get_or_try_init(StreamingServer::start)
            .await
            .map_err(|e| RuntimeError::Refused {
                message: format!("the emulated runtime's streaming server cannot listen: {e}"),
            })
    }

    /// The URL of an exec session running emulated commands in the container's pod.
    pub(super) async fn emulated_exec_url(
        &self,
        container_id: &str,
        req: &StreamRequest,
    ) -> Result<String, RuntimeError> {
        let (info, sandbox, extra) = {
            let state = self.lock();
            let rec = state
                .containers
                .get(container_id)
                .ok_or_else(|| RuntimeError::NotFound(container_id.to_string()))?;
            let sandbox = state
                .sandboxes
                .get(&rec.info.sandbox_id)
                .cloned()
                .ok_or_else(|| {
                    RuntimeError::NotFound(format!("sandbox {}", rec.info.sandbox_id))
                })?;
            let extra = state.extras.get(&sandbox.id).cloned().unwrap_or_default();
            (rec.info.clone(), sandbox, extra)
        };
        let pod = self
            .config
            .network
            .as_ref()
            .and_then(|n| n.pod(&sandbox.id));
        let net: Arc<dyn PodNetwork> = match &pod {
            Some(p) => Arc::new(OnNetwork(p.clone())),
            None => Arc::new(OffNetwork),
        };
        let ctx = ExecContext {
            windows_build: self.config.windows_build.map(|v| v.build.to_string()),
            namespace: sandbox.namespace.clone(),
            pod: sandbox.name.clone(),
            hostname: extra.hostname.clone(),
            container: info.name.clone(),
            image: info.image.clone(),
            node: self.config.node_name.clone(),
            ip: pod
                .as_ref()
                .map(|p| p.ip)
                .or_else(|| sandbox.ip.as_deref().and_then(|i| i.parse().ok())),
            prefix_len: pod.as_ref().map(|p| p.prefix).unwrap_or(24),
            gateway: pod.as_ref().map(|p| p.gateway),
            mac: pod.as_ref().and_then(|p| p.mac.clone()),
            dns: DnsSettings {
                nameservers: extra
                    .nameservers
                    .iter()
                    .filter_map(|n| n.parse().ok())
                    .collect(),
                searches: extra.searches.clone(),
                ndots: extra.ndots,
            },
            net,
        };
        let server = self.streaming().await?;
        Ok(server.exec_url(req.into(), Arc::new(Exec(ctx))))
    }

    /// The URL of a port-forward session into the sandbox's namespace.
    pub(super) async fn emulated_port_forward_url(
        &self,
        sandbox_id: &str,
    ) -> Result<String, RuntimeError> {
        let Some(pod) = self.config.network.as_ref().and_then(|n| n.pod(sandbox_id)) else {
            return Err(RuntimeError::Emulated(
                "port forwarding to a pod that is not on the network",
            ));
        };
        let server = self.streaming().await?;
        Ok(server.port_forward_url(sandbox_id, Arc::new(Forward(pod))))
    }
}
