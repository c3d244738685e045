//! The emulated runtime on a pod network ([`crate::podnet`]): sandboxes get a namespace and
//! their address, running containers a stand-in on their ports, probes with an `httpGet` or
//! `tcpSocket` action are really sent to the pod, and the stand-in's log is the container's log.
//!
//! A probe outcome set by emulation data (`emulated.tandem.dev/…-probe`) still wins: it is how
//! a user models an application that is not healthy although its port answers.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};

use super::EmulatedRuntime;
use crate::podnet::standin::{self, ContainerLog, Identity, Port};
use crate::runtime::{ContainerInfo, ContainerState, ProbeKind, ProbeResult, RuntimeError, prober};

/// What a container's network stand-in answers and its probes check, kept with the container.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ContainerNet {
    #[serde(default)]
    pub ports: BTreeSet<Port>,
    #[serde(default)]
    pub startup: Option<Probe>,
    #[serde(default)]
    pub liveness: Option<Probe>,
    #[serde(default)]
    pub readiness: Option<Probe>,
    /// The container's declared ports, for named probe ports.
    #[serde(default)]
    pub spec_ports: Vec<k8s_openapi::api::core::v1::ContainerPort>,
}

impl ContainerNet {
    pub fn of(container: &Container) -> ContainerNet {
        ContainerNet {
            ports: standin::ports_of(container),
            startup: container.startup_probe.clone(),
            liveness: container.liveness_probe.clone(),
            readiness: container.readiness_probe.clone(),
            spec_ports: container.ports.clone().unwrap_or_default(),
        }
    }

    fn probe(&self, kind: ProbeKind) -> Option<&Probe> {
        match kind {
            ProbeKind::Startup => self.startup.as_ref(),
            ProbeKind::Liveness => self.liveness.as_ref(),
            ProbeKind::Readiness => self.readiness.as_ref(),
        }
    }
}

impl EmulatedRuntime {
    /// Puts a new sandbox on the node's pod network (nothing without a network or an address).
    pub(super) async fn attach_network(
        &self,
        sandbox_id: &str,
        ip: Option<&str>,
    ) -> Result<(), RuntimeError> {
        let (Some(net), Some(ip)) = (&self.config.network, ip) else {
            return Ok(());
        };
        let ip: Ipv4Addr = ip.parse().map_err(|_| RuntimeError::Refused {
            message: format!("failed to set up the pod's network: {ip:?} is not an IPv4 address"),
        })?;
        net.attach(sandbox_id, ip)
            .await
            .map(|_| ())
            .map_err(|e| RuntimeError::Refused {
                message: format!(
                    "failed to set up the network of the emulated sandbox: {}",
                    error_chain(&e)
                ),
            })
    }

    fn log_file(&self, container_id: &str) -> Option<PathBuf> {
        let dir = self.config.state_dir.as_ref()?;
        let hex = container_id.trim_start_matches("emulated://");
        Some(dir.join("logs").join(format!("{hex}.log")))
    }

    /// Starts the stand-in of a container that just started.
    pub(super) async fn start_standin(&self, info: &ContainerInfo, net: &ContainerNet) {
        let Some(network) = &self.config.network else {
            return;
        };
        let Some(pod) = network.pod(&info.sandbox_id) else {
            return;
        };
        let (namespace, name) = {
            let state = self.lock();
            match state.sandboxes.get(&info.sandbox_id) {
                Some(s) => (s.namespace.clone(), s.name.clone()),
                None => return,
            }
        };
        let log = match self.log_file(&info.id) {
            Some(path) => match ContainerLog::open(&path) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "cannot open an emulated container's log");
                    ContainerLog::discard()
                }
            },
            None => ContainerLog::discard(),
        };
        let who = Identity {
            namespace,
            pod: name,
            container: info.name.clone(),
            image: info.image.clone(),
            node: self.config.node_name.clone(),
            windows_build: self.config.windows_build.map(|v| v.build.to_string()),
        };
        pod.start_standin(&info.id, &net.ports, who, Arc::new(log))
            .await;
    }

    /// Stops the stand-in of a container that exited or is being removed.
    pub(super) fn stop_standin(&self, info: &ContainerInfo) {
        if let Some(pod) = self
            .config
            .network
            .as_ref()
            .and_then(|n| n.pod(&info.sandbox_id))
        {
            pod.stop_standin(&info.id);
        }
    }

    /// Whether a probe of a container is checked over the pod network; `None` when it is not
    /// (no network, no such probe, or not an `httpGet`/`tcpSocket` one).
    pub(super) async fn probe_network(
        &self,
        container_id: &str,
        kind: ProbeKind,
    ) -> Option<ProbeResult> {
        let network = self.config.network.as_ref()?;
        let (net, info) = {
            let state = self.lock();
            let rec = state.containers.get(container_id)?;
            (rec.net.clone(), rec.info.clone())
        };
        let probe = net.probe(kind)?.clone();
        if probe.http_get.is_none() && probe.tcp_socket.is_none() {
            return None;
        }
        let pod = network.pod(&info.sandbox_id)?;
        let spec = Container {
            name: info.name.clone(),
            ports: Some(net.spec_ports.clone()),
            ..Container::default()
        };
        let timeout = Duration::from_secs(u64::from(
            probe.timeout_seconds.unwrap_or(1).max(1).unsigned_abs(),
        ));
        Some(prober::network_probe(&pod.ip.to_string(), &spec, &probe, timeout).await)
    }

    /// Where a networked container's log is.
    pub(super) fn network_log_path(&self, container_id: &str) -> Option<PathBuf> {
        self.config.network.as_ref()?;
        let path = self.log_file(container_id)?;
        path.exists().then_some(path)
    }

    /// After an agent restart: puts the sandboxes kept in the state file back on the network
    /// (a new namespace with the same address) and restarts the stand-ins of running
    /// containers. The previous run's namespaces went away with its process.
    pub async fn restore_network(&self) {
        if self.config.network.is_none() {
            return;
        }
        let sandboxes: Vec<(String, Option<String>)> = self
            .lock()
            .sandboxes
            .values()
            .map(|s| (s.id.clone(), s.ip.clone()))
            .collect();
        for (id, ip) in sandboxes {
            if let Err(e) = self.attach_network(&id, ip.as_deref()).await {
                tracing::warn!(sandbox = id, error = %e, "cannot restore an emulated pod's network");
            }
        }
        let running: Vec<(ContainerInfo, ContainerNet)> = {
            let state = self.lock();
            state
                .containers
                .values()
                .filter(|r| r.info.state == ContainerState::Running)
                .map(|r| (r.info.clone(), r.net.clone()))
                .collect()
        };
        for (info, net) in running {
            self.start_standin(&info, &net).await;
        }
    }
}

/// An error and its causes, `: `-separated, as a user reads them in an event.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
