//! The loop that keeps this host's kernel in step with the Nodes: it watches Nodes, reads them
//! into peers ([`super::model`]), works out what must change ([`super::rules`]) and applies it
//! ([`super::netlink`]). It publishes this host's tunnel address and VXLAN MAC on its own Node
//! (flannel's `kube` subnet manager does the same with its annotations) and, at shutdown,
//! removes everything it added.
//!
//! States: `Listing` (nothing applied until the first list of Nodes is complete) → `Synced`
//! (each burst of watch events applies only the difference) ⇄ `Dirty` (a failed netlink request:
//! the next round re-adds everything wanted and deletes everything it may have left). A full
//! resynchronisation also runs every [`RESYNC_PERIOD`], since the kernel drops routes through a
//! link that goes down and does not bring them back with the link.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use tokio::sync::{mpsc, oneshot};

use super::model::{Mac, Peer};
use super::netlink::{self, Underlay, VxlanSpec};
use super::rules::{self, Desired, LocalHost};
use super::{
    BACKEND_ANNOTATION, Backend, PUBLIC_IP_ANNOTATION, VTEP_MAC_ANNOTATION, VXLAN_OVERHEAD,
    device_name,
};
use crate::podnet::Net;
use crate::podnet::links::LinkError;

/// How often everything wanted is written again even without a change.
pub const RESYNC_PERIOD: Duration = Duration::from_secs(5);
/// Most watch events taken into one round.
const EVENT_BATCH: usize = 1_000;

/// What the pod network of this host is made from (the agent's flags).
#[derive(Debug, Clone)]
pub struct ClusterNetworkConfig {
    pub node_name: String,
    pub backend: Backend,
    pub vni: u32,
    pub port: u16,
    /// This host's address on the link to the other hosts: the tunnel endpoint, and the
    /// gateway other hosts route this node's pods through (`--node-ip`, or the public ip).
    pub public_ip: Ipv4Addr,
    /// This node's pod CIDR when known at start; otherwise read from its Node.
    pub pod_cidr: Option<String>,
}

/// Why the pod network cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterNetworkError {
    #[error(
        "no interface of this host holds {0}: pass the host's address on its link to the other hosts"
    )]
    NoUnderlay(Ipv4Addr),
    #[error("the underlay MTU {0} is too small for VXLAN")]
    Mtu(u32),
    #[error("cannot open a netlink socket")]
    Io(#[source] std::io::Error),
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// The running pod network of this host.
pub struct ClusterNetwork {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    handle: rtnetlink::Handle,
    device: Option<String>,
    summary: String,
}

impl std::fmt::Debug for ClusterNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNetwork")
            .field("device", &self.device)
            .field("summary", &self.summary)
            .finish()
    }
}

/// What the loop needs of this host.
struct Host {
    config: ClusterNetworkConfig,
    underlay: Underlay,
    vxlan: Option<(u32, Mac)>,
}

impl ClusterNetwork {
    /// Finds the underlay, creates the VXLAN device (for `vxlan` and `auto`), removes routes
    /// an earlier run left, and starts the loop.
    pub async fn start(
        client: kube::Client,
        config: ClusterNetworkConfig,
    ) -> Result<ClusterNetwork, ClusterNetworkError> {
        let handle = netlink::connect().map_err(ClusterNetworkError::Io)?;
        let underlay = netlink::underlay(&handle, config.public_ip)
            .await?
            .ok_or(ClusterNetworkError::NoUnderlay(config.public_ip))?;
        let flushed = netlink::flush_routes(&handle).await?;
        if flushed > 0 {
            tracing::info!(
                routes = flushed,
                "removed pod-network routes of an earlier run"
            );
        }
        let own_cidr = config.pod_cidr.as_deref().and_then(Net::parse);
        let (vxlan, device) = if config.backend.uses_vxlan() {
            let mtu = underlay
                .mtu
                .checked_sub(VXLAN_OVERHEAD)
                .filter(|m| *m >= 576)
                .ok_or(ClusterNetworkError::Mtu(underlay.mtu))?;
            let spec = VxlanSpec {
                name: device_name(config.vni),
                vni: config.vni,
                port: config.port,
                underlay: underlay.index,
                local: config.public_ip,
                mtu,
                address: own_cidr.map(|c| c.addr),
            };
            let created = netlink::create_vxlan(&handle, &spec).await?;
            (Some(created), Some(spec.name))
        } else {
            (None, None)
        };
        let summary = match (&device, &vxlan) {
            (Some(name), Some((_, mac))) => format!(
                "pod network: {} — VXLAN device {name} (VNI {}, UDP {}, MTU {}, MAC {mac}) over {} {}{}",
                config.backend,
                config.vni,
                config.port,
                underlay.mtu.saturating_sub(VXLAN_OVERHEAD),
                underlay.name,
                underlay.net,
                if config.backend == Backend::Auto {
                    format!("; direct routes to hosts on {}", underlay.net)
                } else {
                    String::new()
                }
            ),
            _ => format!(
                "pod network: host-gw — direct routes to hosts on {} via {}",
                underlay.net, underlay.name
            ),
        };
        let (stop_tx, stop_rx) = oneshot::channel();
        let host = Host {
            config,
            underlay,
            vxlan,
        };
        let task = tokio::spawn(run(client, handle.clone(), host, stop_rx));
        Ok(ClusterNetwork {
            stop: Some(stop_tx),
            task,
            handle,
            device,
            summary,
        })
    }

    /// One line for the start-up banner.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Stops the loop and removes every route, neighbour and forwarding entry and the device.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
        self.task.abort();
        if let Err(e) = netlink::flush_routes(&self.handle).await {
            tracing::warn!(error = %e, "cannot remove the pod network's routes");
        }
        if let Some(name) = &self.device
            && let Err(e) = netlink::delete_vxlan(&self.handle, name).await
        {
            tracing::warn!(error = %e, "cannot delete the VXLAN device {name}");
        }
    }
}

/// The annotations this host wants on its Node.
fn own_annotations(host: &Host) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(
        BACKEND_ANNOTATION.to_string(),
        host.config.backend.as_str().to_string(),
    );
    out.insert(
        PUBLIC_IP_ANNOTATION.to_string(),
        host.config.public_ip.to_string(),
    );
    if let Some((_, mac)) = host.vxlan {
        out.insert(VTEP_MAC_ANNOTATION.to_string(), mac.to_string());
    }
    out
}

fn annotations_match(node: Option<&Node>, want: &BTreeMap<String, String>) -> bool {
    let have = node.and_then(|n| n.metadata.annotations.as_ref());
    want.iter()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

async fn publish(api: &Api<Node>, name: &str, want: &BTreeMap<String, String>) -> bool {
    let patch = serde_json::json!({ "metadata": { "annotations": want } });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, "cannot annotate the node with its pod-network address yet");
            false
        }
    }
}

async fn run(
    client: kube::Client,
    handle: rtnetlink::Handle,
    host: Host,
    mut stop: oneshot::Receiver<()>,
) {
    let api: Api<Node> = Api::all(client);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watch_api = api.clone();
    let watch = tokio::spawn(async move {
        let mut stream = watcher(watch_api, watcher::Config::default()).boxed();
        loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "pod network: node watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                None => return,
            }
        }
    });
    let want_annotations = own_annotations(&host);
    let name = host.config.node_name.clone();
    let mut nodes: BTreeMap<String, Node> = BTreeMap::new();
    let mut pending: Option<BTreeMap<String, Node>> = None;
    let mut listed = false;
    let mut applied = Desired::default();
    let mut dirty = false;
    let mut last_skipped = Vec::new();
    let mut resync = tokio::time::interval(RESYNC_PERIOD);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let full = tokio::select! {
            _ = &mut stop => break,
            event = rx.recv() => {
                let Some(event) = event else { break };
                let mut batch = vec![event];
                while batch.len() < EVENT_BATCH {
                    match rx.try_recv() {
                        Ok(e) => batch.push(e),
                        Err(_) => break,
                    }
                }
                for event in batch {
                    match event {
                        watcher::Event::Init => pending = Some(BTreeMap::new()),
                        watcher::Event::InitApply(n) => {
                            if let (Some(p), Some(k)) = (pending.as_mut(), n.metadata.name.clone()) {
                                p.insert(k, n);
                            }
                        }
                        watcher::Event::InitDone => {
                            if let Some(p) = pending.take() {
                                nodes = p;
                            }
                            listed = true;
                        }
                        watcher::Event::Apply(n) => {
                            if let Some(k) = n.metadata.name.clone() {
                                nodes.insert(k, n);
                            }
                        }
                        watcher::Event::Delete(n) => {
                            if let Some(k) = &n.metadata.name {
                                nodes.remove(k);
                            }
                        }
                    }
                }
                false
            }
            _ = resync.tick() => true,
        };
        if !listed {
            continue;
        }
        let own = nodes.get(&name);
        if own.is_some() && !annotations_match(own, &want_annotations) {
            publish(&api, &name, &want_annotations).await;
        }
        let own_cidr = host
            .config
            .pod_cidr
            .as_deref()
            .and_then(Net::parse)
            .or_else(|| {
                own.and_then(|n| n.spec.as_ref())
                    .and_then(|s| s.pod_cidr.as_deref())
                    .and_then(Net::parse)
            });
        let local = LocalHost {
            node_name: name.clone(),
            pod_cidr: own_cidr,
            underlay: host.underlay.net,
            address: host.config.public_ip,
            addresses: host.underlay.all_addresses.clone(),
        };
        let peers: Vec<Peer> = nodes.values().filter_map(Peer::from_node).collect();
        let want = rules::desired(&local, host.config.backend, &peers);
        if want.skipped != last_skipped {
            for (peer, why) in &want.skipped {
                tracing::info!(node = %peer, "pod network: no route to this node's pods: {why}");
            }
            last_skipped = want.skipped.clone();
        }
        let changes = if dirty || full {
            rules::resync(&applied, &want)
        } else {
            rules::diff(&applied, &want)
        };
        if changes.is_empty() {
            continue;
        }
        let vxlan = host.vxlan.map(|(i, _)| i);
        match netlink::apply(&handle, host.underlay.index, vxlan, &changes).await {
            Ok(()) => {
                applied = want;
                dirty = false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "pod network: cannot program this host; retrying");
                // Keep whatever may be installed in `applied` so the next round deletes it.
                applied = rules::union(&applied, &want);
                dirty = true;
            }
        }
    }
    watch.abort();
}
