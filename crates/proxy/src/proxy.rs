//! The proxy at run time: watches Services, EndpointSlices and Nodes, and keeps the kernel's
//! rules in step — one full load once every watch has listed, then one small transaction per
//! batch of changes (kube-proxy's `syncProxyRules` with its partial syncs).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};

use crate::model::{ClusterState, Endpoint, ServicePort};
use crate::nft::Nft;
use crate::rules::{self, Cidr, Contribution, Script, Settings};
use crate::watch::spawn_watch;

const WHO: &str = "service proxy";

/// How the proxy is set up on its node.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The nftables table of this proxy (`ip` family); deleted at start and at shutdown.
    pub table: String,
    pub node_name: String,
    pub cluster_cidr: Cidr,
    pub node_pod_cidr: Option<Cidr>,
    pub service_cidr: Cidr,
    /// The pods' bridge: `route_localnet` is set on it so node ports answer on 127.0.0.1 (the
    /// bridge is tandem's own and the setting goes with it).
    pub bridge: Option<String>,
    /// The network namespace to program, as a path (`/proc/PID/ns/net`); `None` for this
    /// process's own. Benchmarks use a private one.
    pub netns: Option<std::path::PathBuf>,
    /// Set for the proxy of an emulated Windows node (its pods' traffic only, Windows limits).
    pub windows: Option<rules::WindowsDataPlane>,
    /// Whether this host runs the pod network between hosts (`tandem agent
    /// --pod-network-backend`): the pods of every other node that runs it (annotated
    /// [`tandem_core::POD_NETWORK_BACKEND_ANNOTATION`]) are then reachable endpoints, as
    /// kube-proxy sends Service traffic to any pod of the cluster.
    pub pod_network: bool,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the service proxy cannot run here: {0}")]
    Unavailable(String),
    #[error("cannot set route_localnet on bridge {bridge}")]
    RouteLocalnet {
        bridge: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the last syncs did, for `tandem bench services` and for tests.
#[derive(Debug, Clone, Default)]
pub struct SyncStatus {
    /// Successful transactions so far.
    pub syncs: u64,
    /// The last failure, if the last transaction failed.
    pub last_error: Option<String>,
}

/// The endpoints in the kernel per service (`namespace/name`), as the last successful sync left
/// them.
pub type Applied = Arc<Mutex<HashMap<(String, String), BTreeSet<(Ipv4Addr, u16)>>>>;

/// A running proxy. [`ServiceProxy::shutdown`] removes its table.
pub struct ServiceProxy {
    nft: Nft,
    table: String,
    task: tokio::task::JoinHandle<()>,
    status: watch::Receiver<SyncStatus>,
    applied: Applied,
}

impl ServiceProxy {
    /// Starts watching and programming. Fails at once when `nft` cannot run (not root, not
    /// installed) or the bridge cannot be set up.
    pub async fn start(client: Client, config: ProxyConfig) -> Result<ServiceProxy, ProxyError> {
        let nft = Nft {
            netns: config.netns.clone(),
        };
        if let Some(why) = nft.unavailable_reason().await {
            return Err(ProxyError::Unavailable(why));
        }
        if let Some(bridge) = &config.bridge {
            let path = format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet");
            std::fs::write(&path, "1").map_err(|source| ProxyError::RouteLocalnet {
                bridge: bridge.clone(),
                source,
            })?;
        }
        let (status_tx, status) = watch::channel(SyncStatus::default());
        let applied: Applied = Arc::default();
        let settings = Settings {
            table: config.table.clone(),
            node_name: config.node_name.clone(),
            cluster_cidr: config.cluster_cidr,
            node_pod_cidr: config.node_pod_cidr,
            emulated_pod_cidrs: Vec::new(),
            service_cidr: config.service_cidr,
            windows: config.windows.clone(),
        };
        let runner = Runner {
            nft: nft.clone(),
            settings,
            client: client.clone(),
            state: ClusterState::default(),
            emulated: BTreeSet::new(),
            networked: BTreeMap::new(),
            pod_network: config.pod_network,
            contributions: HashMap::new(),
            hairpin: BTreeMap::new(),
            loaded: false,
            status: status_tx,
            applied: applied.clone(),
            reported: HashMap::new(),
            affinity_reported: HashMap::new(),
        };
        let task = tokio::spawn(runner.run(client));
        Ok(ServiceProxy {
            nft,
            table: config.table,
            task,
            status,
            applied,
        })
    }

    /// The sync status; changes after every transaction.
    pub fn status(&self) -> watch::Receiver<SyncStatus> {
        self.status.clone()
    }

    /// The endpoints the kernel sends a Service's traffic to now.
    pub fn applied_endpoints(&self, namespace: &str, name: &str) -> BTreeSet<(Ipv4Addr, u16)> {
        self.applied
            .lock()
            .map(|m| {
                m.get(&(namespace.to_string(), name.to_string()))
                    .cloned()
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// The nftables table this proxy owns.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The table as `nft list` prints it, or `None` when it does not exist.
    pub async fn listing(&self) -> Option<String> {
        self.nft.list_table(&self.table).await
    }

    /// Stops the proxy and deletes its table (connections already set up keep their NAT in
    /// conntrack until they end).
    pub async fn shutdown(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Err(e) = self.nft.delete_table(&self.table).await {
            tracing::warn!(table = %self.table, error = %e, "cannot delete the service proxy's table");
        }
    }
}

/// A Service's namespace and name.
type ServiceKey = (String, String);

/// A change from one of the watches.
enum Input {
    Service(Box<watcher::Event<Service>>),
    Slice(Box<watcher::Event<EndpointSlice>>),
    Node(Box<watcher::Event<Node>>),
}

/// Which watches are between `Init` and `InitDone`, or have never listed.
#[derive(Default)]
struct Listing {
    services: Option<bool>,
    slices: Option<bool>,
    nodes: Option<bool>,
}

impl Listing {
    fn complete(&self) -> bool {
        [self.services, self.slices, self.nodes]
            .iter()
            .all(|l| *l == Some(false))
    }
}

struct Runner {
    nft: Nft,
    settings: Settings,
    client: Client,
    state: ClusterState,
    /// Nodes whose runtime is emulated and whose pods are not on the network.
    emulated: BTreeSet<String>,
    /// Other nodes whose pods this host reaches, with their pod ranges: emulated nodes whose
    /// pods are on this machine's network, and (with the pod network between hosts) every
    /// node that runs it.
    networked: BTreeMap<String, Cidr>,
    /// Whether this host runs the pod network between hosts.
    pod_network: bool,
    /// Per Service: what it put in the table, and the endpoints that get its traffic.
    contributions: HashMap<ServiceKey, Contribution>,
    hairpin: BTreeMap<Ipv4Addr, usize>,
    /// Whether the table has been loaded in full since start (or since a failed partial sync).
    loaded: bool,
    status: watch::Sender<SyncStatus>,
    applied: Applied,
    /// The emulated nodes last reported in an event per Service.
    reported: HashMap<(String, String), BTreeSet<String>>,
    /// The affinity timeout last reported per Service by a Windows node's proxy.
    affinity_reported: HashMap<(String, String), u32>,
}

impl Runner {
    async fn run(mut self, client: Client) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        spawn_watch(WHO, Api::<Service>::all(client.clone()), tx.clone(), |e| {
            Input::Service(Box::new(e))
        });
        spawn_watch(
            WHO,
            Api::<EndpointSlice>::all(client.clone()),
            tx.clone(),
            |e| Input::Slice(Box::new(e)),
        );
        spawn_watch(WHO, Api::<Node>::all(client), tx, |e| {
            Input::Node(Box::new(e))
        });
        let mut listing = Listing::default();
        let mut backoff = Duration::from_millis(100);
        while let Some(first) = rx.recv().await {
            self.take(first, &mut listing);
            while let Ok(more) = rx.try_recv() {
                self.take(more, &mut listing);
            }
            if !listing.complete() {
                continue;
            }
            if !self.sync().await {
                // Retry from scratch after a pause; new changes are folded in meanwhile.
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                while let Ok(more) = rx.try_recv() {
                    self.take(more, &mut listing);
                }
                self.loaded = false;
                if listing.complete() && self.sync().await {
                    backoff = Duration::from_millis(100);
                }
            } else {
                backoff = Duration::from_millis(100);
            }
        }
    }

    fn take(&mut self, input: Input, listing: &mut Listing) {
        match input {
            Input::Service(e) => match *e {
                watcher::Event::Init => {
                    listing.services = Some(true);
                    self.state.clear_services();
                }
                watcher::Event::InitDone => listing.services = Some(false),
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    self.state.apply_service(s)
                }
                watcher::Event::Delete(s) => self.state.delete_service(&s),
            },
            Input::Slice(e) => match *e {
                watcher::Event::Init => {
                    listing.slices = Some(true);
                    self.state.clear_slices();
                }
                watcher::Event::InitDone => listing.slices = Some(false),
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    self.state.apply_slice(s)
                }
                watcher::Event::Delete(s) => self.state.delete_slice(&s),
            },
            Input::Node(e) => {
                let before = (self.emulated.clone(), self.networked.clone());
                match *e {
                    watcher::Event::Init => {
                        listing.nodes = Some(true);
                        self.emulated.clear();
                        self.networked.clear();
                    }
                    watcher::Event::InitDone => listing.nodes = Some(false),
                    watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                        let name = n.metadata.name.clone().unwrap_or_default();
                        self.emulated.remove(&name);
                        self.networked.remove(&name);
                        match emulated_network(&n) {
                            None => {
                                if self.pod_network
                                    && let Some(cidr) = routed_network(&n)
                                {
                                    self.networked.insert(name, cidr);
                                }
                            }
                            Some(Some(cidr)) => {
                                self.networked.insert(name, cidr);
                            }
                            Some(None) => {
                                self.emulated.insert(name);
                            }
                        }
                    }
                    watcher::Event::Delete(n) => {
                        let name = n.metadata.name.as_deref().unwrap_or_default();
                        self.emulated.remove(name);
                        self.networked.remove(name);
                    }
                }
                self.settings.emulated_pod_cidrs = self.networked.values().copied().collect();
                if before != (self.emulated.clone(), self.networked.clone())
                    && listing.nodes == Some(false)
                {
                    // Which endpoints are reachable changed: every Service is worked out again.
                    self.loaded = false;
                }
            }
        }
    }

    fn reachable(&self) -> impl Fn(&Endpoint) -> bool + '_ {
        move |e: &Endpoint| {
            if e.node.as_ref().is_some_and(|n| self.emulated.contains(n)) {
                return false;
            }
            match self.settings.node_pod_cidr {
                Some(node) => {
                    !self.settings.cluster_cidr.contains(e.ip)
                        || node.contains(e.ip)
                        || self.networked.values().any(|c| c.contains(e.ip))
                }
                None => true,
            }
        }
    }

    /// Applies what changed; `false` when `nft` refused it.
    async fn sync(&mut self) -> bool {
        let started = Instant::now();
        let full = !self.loaded;
        let changed = if full {
            let _ = self.state.take_changed();
            self.state.all_ports()
        } else {
            self.state.take_changed()
        };
        if !full && changed.is_empty() {
            return true;
        }
        let mut next = Vec::with_capacity(changed.len());
        let mut unreachable = Vec::new();
        let mut affinity = Vec::new();
        {
            let reachable = self.reachable();
            for (key, ports) in &changed {
                let c = rules::contribution(&self.settings, ports, &reachable);
                let emulated: BTreeSet<String> = ports
                    .iter()
                    .flat_map(|p| p.endpoints.iter())
                    .filter(|e| !reachable(e))
                    .filter_map(|e| e.node.clone())
                    .filter(|n| self.emulated.contains(n))
                    .collect();
                unreachable.push((key.clone(), emulated, ports.first().cloned()));
                if self.settings.windows.is_some() {
                    affinity.push((key.clone(), ports.clone()));
                }
                next.push((key.clone(), c));
            }
        }
        let t = format!("ip {}", self.settings.table);
        let script;
        let mut hairpin;
        if full {
            let contributions: Vec<&Contribution> = next.iter().map(|(_, c)| c).collect();
            let table = rules::full_script(&self.settings, contributions);
            script = table.script;
            hairpin = table.hairpin;
        } else {
            hairpin = self.hairpin.clone();
            let mut s = Script::default();
            let empty = Contribution::default();
            for (key, c) in &next {
                let old = self.contributions.get(key).unwrap_or(&empty);
                s.diff(&t, old, c, &mut hairpin);
            }
            script = s.finish(&t, &self.hairpin, &hairpin);
        }
        if !script.is_empty()
            && let Err(e) = self.nft.apply(&script).await
        {
            tracing::warn!(error = %e, full, "service proxy sync failed");
            self.status
                .send_modify(|s| s.last_error = Some(e.to_string()));
            if !full {
                // Start again from the whole state: put the changes back.
                for (key, _) in changed {
                    self.state.touch(key);
                }
            }
            return false;
        }
        if full {
            self.contributions.clear();
        }
        hairpin.retain(|_, n| *n > 0);
        self.hairpin = hairpin;
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        if full {
            applied.clear();
        }
        for (key, c) in next {
            if c == Contribution::default() {
                self.contributions.remove(&key);
                applied.remove(&key);
            } else {
                applied.insert(key.clone(), c.targets.clone());
                self.contributions.insert(key, c);
            }
        }
        drop(applied);
        self.loaded = true;
        self.status.send_modify(|s| {
            s.syncs += 1;
            s.last_error = None;
        });
        tracing::debug!(
            services = changed.len(),
            full,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "service proxy synced"
        );
        for (key, emulated, port) in unreachable {
            self.report_unreachable(key, emulated, port);
        }
        for (key, ports) in affinity {
            self.report_windows_affinity(key, &ports);
        }
        true
    }

    /// Tells the Service's users (an event, shown by `kubectl describe service`) that some of
    /// its endpoints get no traffic because their nodes are emulated, once per set of nodes.
    fn report_unreachable(
        &mut self,
        key: (String, String),
        nodes: BTreeSet<String>,
        port: Option<ServicePort>,
    ) {
        if nodes.is_empty() || self.settings.windows.is_some() {
            // A Windows node's proxy leaves reporting to the machine's own.
            self.reported.remove(&key);
            return;
        }
        if self.reported.get(&key) == Some(&nodes) {
            return;
        }
        self.reported.insert(key.clone(), nodes.clone());
        let Some(port) = port else { return };
        let count = port
            .endpoints
            .iter()
            .filter(|e| e.node.as_ref().is_some_and(|n| nodes.contains(n)))
            .count();
        let list = nodes.into_iter().collect::<Vec<_>>().join(", ");
        let message = format!(
            "{count} endpoint(s) of this Service run on emulated nodes ({list}): their pods are not on the network, so the service proxy on {} sends them no traffic",
            self.settings.node_name
        );
        self.warn(key, "EndpointsNotReachable", message);
    }

    /// On a Windows node's proxy: tells the Service's users that the node keeps ClientIP
    /// affinity without the timeout the Service sets (once per timeout value).
    fn report_windows_affinity(&mut self, key: (String, String), ports: &[ServicePort]) {
        let Some(timeout) = ports
            .iter()
            .filter_map(|p| p.affinity_timeout)
            .find(|t| *t != crate::model::DEFAULT_AFFINITY_TIMEOUT)
        else {
            self.affinity_reported.remove(&key);
            return;
        };
        if self.affinity_reported.insert(key.clone(), timeout) == Some(timeout) {
            return;
        }
        let message = format!(
            "sessionAffinityConfig.clientIP.timeoutSeconds ({timeout}) is not supported on Windows nodes: the emulated Windows node {} keeps ClientIP affinity with its default stickiness ({} s)",
            self.settings.node_name,
            crate::model::DEFAULT_AFFINITY_TIMEOUT
        );
        self.warn(key, "SessionAffinityTimeoutIgnored", message);
    }

    /// Records a Warning event on a Service (shown by `kubectl describe service`).
    fn warn(&self, key: (String, String), reason: &'static str, message: String) {
        let client = self.client.clone();
        let node = self.settings.node_name.clone();
        let (namespace, name) = key;
        let event = tandem_core::events::event(tandem_core::events::EventSpec {
            involved: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Service".into()),
                namespace: Some(namespace.clone()),
                name: Some(name),
                ..Default::default()
            },
            type_: tandem_core::events::EventType::Warning,
            reason,
            message: &message,
            component: "tandem-proxy",
            host: Some(&node),
            action: None,
            at: std::time::SystemTime::now(),
        });
        tokio::spawn(async move {
            if let Err(e) = Api::<Event>::namespaced(client, &namespace)
                .create(&PostParams::default(), &event)
                .await
            {
                tracing::debug!(error = %e, "cannot record the service proxy's event");
            }
        });
    }
}

/// For an emulated node: `Some(Some(pod range))` when its pods are on the network (the agent's
/// [`tandem_core::POD_NETWORK_ANNOTATION`]), `Some(None)` when they are not; `None` for a node
/// running real containers.
fn emulated_network(node: &Node) -> Option<Option<Cidr>> {
    let emulated = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .is_some_and(|i| i.container_runtime_version.starts_with("emulated://"));
    if !emulated {
        return None;
    }
    let annotated = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(tandem_core::POD_NETWORK_ANNOTATION));
    let cidr = node
        .spec
        .as_ref()
        .and_then(|s| s.pod_cidr.as_deref())
        .and_then(Cidr::parse);
    Some(if annotated { cidr } else { None })
}

/// The pod range of a node running real containers that takes part in the pod network between
/// hosts (its agent annotates it with [`tandem_core::POD_NETWORK_BACKEND_ANNOTATION`]).
fn routed_network(node: &Node) -> Option<Cidr> {
    node.metadata
        .annotations
        .as_ref()
        .filter(|a| a.contains_key(tandem_core::POD_NETWORK_BACKEND_ANNOTATION))?;
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.as_deref())
        .and_then(Cidr::parse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(annotations: &[(&str, &str)], pod_cidr: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: pod_cidr.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn nodes_of_the_pod_network_between_hosts_have_reachable_pod_ranges() {
        let backend = tandem_core::POD_NETWORK_BACKEND_ANNOTATION;
        let table = [
            (
                node(&[(backend, "vxlan")], Some("10.244.3.0/24")),
                Some("10.244.3.0/24"),
            ),
            (node(&[(backend, "host-gw")], Some("nonsense")), None),
            (node(&[(backend, "auto")], None), None),
            (node(&[], Some("10.244.3.0/24")), None),
        ];
        for (n, want) in table {
            assert_eq!(
                routed_network(&n).map(|c| c.to_string()).as_deref(),
                want,
                "{n:?}"
            );
        }
    }
}
