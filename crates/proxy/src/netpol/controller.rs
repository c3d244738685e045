//! NetworkPolicy enforcement at run time: watches NetworkPolicies, Pods (cluster-wide: peers
//! can be anywhere), Namespaces and Nodes, and after each burst of changes (debounced) writes
//! the whole table again in one `nft -f` transaction — what kube-network-policies' and
//! Calico's Felix sync loops do, with a full rewrite instead of diffs (the table of a node's
//! pods stays small; `tandem bench netpol` measures it at 1,000 policies).
//!
//! Pods on nodes that do not enforce (Windows nodes, emulated nodes) are reported once per
//! policy and set of nodes with a `NetworkPolicyNotEnforced` Warning event on the policy, shown
//! by `kubectl describe networkpolicy`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::model::{ClusterState, PodInfo};
use super::rules;
use crate::nft::Nft;
use crate::watch::spawn_watch;

const WHO: &str = "NetworkPolicy controller";

/// How the enforcement is set up on its node.
#[derive(Debug, Clone)]
pub struct NetpolConfig {
    /// The nftables table (`inet` family), owned by this controller alone; replaced at every
    /// sync and deleted at shutdown.
    pub table: String,
    /// The node whose pods are isolated.
    pub node_name: String,
    /// The network namespace to program (`/proc/PID/ns/net`); `None` for this process's own.
    pub netns: Option<PathBuf>,
    /// How long the controller waits for more changes after one before it syncs.
    pub debounce: Duration,
}

impl NetpolConfig {
    /// The settings of a node's enforcement: table `tandem-netpol-<bridge>`, 50 ms debounce.
    pub fn for_node(node_name: &str, bridge: &str) -> NetpolConfig {
        NetpolConfig {
            table: format!("tandem-netpol-{bridge}"),
            node_name: node_name.to_string(),
            netns: None,
            debounce: Duration::from_millis(50),
        }
    }
}

/// Why the enforcement could not start.
#[derive(Debug, thiserror::Error)]
pub enum NetpolError {
    #[error("NetworkPolicy cannot be enforced here: {0}")]
    Unavailable(String),
}

/// What the syncs did, for tests and benchmarks.
#[derive(Debug, Clone, Default)]
pub struct NetpolStatus {
    /// Transactions applied so far.
    pub syncs: u64,
    /// The last failure, while the last transaction failed.
    pub last_error: Option<String>,
    /// Pods of this node isolated in at least one direction, as of the last sync.
    pub isolated_pods: usize,
    /// How long the last sync took, from the model to the applied table.
    pub last_duration: Duration,
}

/// A running enforcement. [`NetworkPolicyController::shutdown`] removes its table.
pub struct NetworkPolicyController {
    nft: Nft,
    table: String,
    task: tokio::task::JoinHandle<()>,
    status: watch::Receiver<NetpolStatus>,
}

impl NetworkPolicyController {
    /// Starts watching and programming. Fails at once when `nft` cannot run (not root, not
    /// installed).
    pub async fn start(
        client: Client,
        config: NetpolConfig,
    ) -> Result<NetworkPolicyController, NetpolError> {
        let nft = Nft {
            netns: config.netns.clone(),
        };
        if let Some(why) = nft.unavailable_reason().await {
            return Err(NetpolError::Unavailable(why));
        }
        let (status_tx, status) = watch::channel(NetpolStatus::default());
        let runner = Runner {
            nft: nft.clone(),
            client: client.clone(),
            config: config.clone(),
            state: ClusterState::default(),
            nodes: BTreeMap::new(),
            applied: None,
            reported: BTreeMap::new(),
            status: status_tx,
        };
        let task = tokio::spawn(runner.run());
        Ok(NetworkPolicyController {
            nft,
            table: config.table,
            task,
            status,
        })
    }

    /// The nftables table (family `inet`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The sync status; changes after every transaction.
    pub fn status(&self) -> watch::Receiver<NetpolStatus> {
        self.status.clone()
    }

    /// Stops the controller and deletes its table: the node's pods are no longer isolated.
    pub async fn shutdown(self) {
        self.task.abort();
        let _ = self.task.await;
        if let Err(e) = self.nft.apply(&rules::delete_script(&self.table)).await {
            tracing::warn!(table = %self.table, error = %e, "cannot delete the NetworkPolicy table");
        }
    }
}

/// A change from one of the watches.
enum Input {
    Policy(Box<watcher::Event<NetworkPolicy>>),
    Pod(Box<watcher::Event<Pod>>),
    Namespace(Box<watcher::Event<Namespace>>),
    Node(Box<watcher::Event<Node>>),
}

/// Per watch: `None` before its first list, `Some(true)` while (re)listing, `Some(false)` when
/// listed. Syncs wait until every watch has listed, so a half-known cluster never opens or
/// closes traffic.
#[derive(Default)]
struct Listing {
    policies: Option<bool>,
    pods: Option<bool>,
    namespaces: Option<bool>,
    nodes: Option<bool>,
}

impl Listing {
    fn complete(&self) -> bool {
        [self.policies, self.pods, self.namespaces, self.nodes]
            .iter()
            .all(|l| *l == Some(false))
    }
}

/// What the controller knows of a node: whether it filters its pods' traffic itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeKind {
    windows: bool,
    emulated: bool,
}

struct Runner {
    nft: Nft,
    client: Client,
    config: NetpolConfig,
    state: ClusterState,
    nodes: BTreeMap<String, NodeKind>,
    /// The script of the last successful sync.
    applied: Option<String>,
    /// Per policy, the non-enforcing nodes last reported.
    reported: BTreeMap<(String, String), BTreeSet<String>>,
    status: watch::Sender<NetpolStatus>,
}

/// The longest a burst of changes can hold a sync back.
const MAX_DELAY: Duration = Duration::from_secs(1);

impl Runner {
    async fn run(mut self) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let c = &self.client;
        spawn_watch(WHO, Api::<NetworkPolicy>::all(c.clone()), tx.clone(), |e| {
            Input::Policy(Box::new(e))
        });
        spawn_watch(WHO, Api::<Pod>::all(c.clone()), tx.clone(), |e| {
            Input::Pod(Box::new(e))
        });
        spawn_watch(WHO, Api::<Namespace>::all(c.clone()), tx.clone(), |e| {
            Input::Namespace(Box::new(e))
        });
        spawn_watch(WHO, Api::<Node>::all(c.clone()), tx, |e| {
            Input::Node(Box::new(e))
        });
        let mut listing = Listing::default();
        let mut backoff = Duration::from_millis(100);
        let mut failed = false;
        loop {
            // Wait for a change (or, after a failed sync, for the retry time).
            let first = if failed {
                match tokio::time::timeout(backoff, rx.recv()).await {
                    Ok(None) => return,
                    Ok(Some(input)) => Some(input),
                    Err(_) => None,
                }
            } else {
                match rx.recv().await {
                    None => return,
                    Some(input) => Some(input),
                }
            };
            if let Some(input) = first {
                self.take(input, &mut listing);
                // Debounce: fold in what follows closely, for at most MAX_DELAY.
                let deadline = Instant::now() + MAX_DELAY;
                loop {
                    let wait = self
                        .config
                        .debounce
                        .min(deadline.saturating_duration_since(Instant::now()));
                    match tokio::time::timeout(wait, rx.recv()).await {
                        Ok(Some(more)) => self.take(more, &mut listing),
                        Ok(None) => return,
                        Err(_) => break,
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                }
            }
            if !listing.complete() {
                continue;
            }
            if self.sync().await {
                failed = false;
                backoff = Duration::from_millis(100);
            } else {
                failed = true;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }

    fn take(&mut self, input: Input, listing: &mut Listing) {
        match input {
            Input::Policy(e) => match *e {
                watcher::Event::Init => {
                    listing.policies = Some(true);
                    self.state.policies.clear();
                }
                watcher::Event::InitDone => listing.policies = Some(false),
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    self.state.apply_policy(&p)
                }
                watcher::Event::Delete(p) => self.state.delete_policy(&p),
            },
            Input::Pod(e) => match *e {
                watcher::Event::Init => {
                    listing.pods = Some(true);
                    self.state.pods.clear();
                }
                watcher::Event::InitDone => listing.pods = Some(false),
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => self.state.apply_pod(&p),
                watcher::Event::Delete(p) => self.state.delete_pod(&p),
            },
            Input::Namespace(e) => match *e {
                watcher::Event::Init => {
                    listing.namespaces = Some(true);
                    self.state.namespaces.clear();
                }
                watcher::Event::InitDone => listing.namespaces = Some(false),
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    self.state.apply_namespace(&n)
                }
                watcher::Event::Delete(n) => self.state.delete_namespace(&n),
            },
            Input::Node(e) => match *e {
                watcher::Event::Init => {
                    listing.nodes = Some(true);
                    self.nodes.clear();
                }
                watcher::Event::InitDone => listing.nodes = Some(false),
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    self.nodes.insert(name, node_kind(&n));
                }
                watcher::Event::Delete(n) => {
                    if let Some(name) = &n.metadata.name {
                        self.nodes.remove(name);
                    }
                }
            },
        }
    }

    /// Writes the table for the current state (unless it is what the kernel has already);
    /// `false` when `nft` refused it.
    async fn sync(&mut self) -> bool {
        let started = Instant::now();
        let node = self.config.node_name.clone();
        let local = move |p: &PodInfo| p.node.as_deref() == Some(node.as_str());
        let pods = self.state.pod_rules(&local);
        let script = rules::full_script(&self.config.table, &pods);
        if self.applied.as_deref() != Some(script.as_str()) {
            if let Err(e) = self.nft.apply(&script).await {
                tracing::warn!(table = %self.config.table, error = %e, "NetworkPolicy sync failed");
                self.status
                    .send_modify(|s| s.last_error = Some(e.to_string()));
                return false;
            }
            self.applied = Some(script);
            let elapsed = started.elapsed();
            tracing::debug!(
                isolated = pods.len(),
                elapsed_ms = elapsed.as_millis() as u64,
                "NetworkPolicy table synced"
            );
            self.status.send_modify(|s| {
                s.syncs += 1;
                s.last_error = None;
                s.isolated_pods = pods.len();
                s.last_duration = elapsed;
            });
        }
        self.report_unenforced();
        true
    }

    /// Warns on each policy that selects pods of nodes that do not enforce policies, once per
    /// set of such nodes.
    fn report_unenforced(&mut self) {
        let me = self.config.node_name.clone();
        let nodes = self.nodes.clone();
        // Unknown nodes and real Linux nodes (each runs its own enforcement) are not reported.
        let enforcing =
            move |n: &str| n == me || nodes.get(n).is_none_or(|k| !k.windows && !k.emulated);
        let now = self.state.unenforced(&enforcing);
        self.reported.retain(|k, _| now.contains_key(k));
        for (key, nodes) in now {
            if self.reported.get(&key) == Some(&nodes) {
                continue;
            }
            let message = self.not_enforced_message(&nodes);
            self.reported.insert(key.clone(), nodes);
            self.warn(key, message);
        }
    }

    fn not_enforced_message(&self, nodes: &BTreeSet<String>) -> String {
        let described: Vec<String> = nodes
            .iter()
            .map(|n| match self.nodes.get(n) {
                Some(NodeKind { windows: true, .. }) => format!(
                    "{n} (emulated Windows node: its pods' traffic is not filtered; on real Windows nodes only CNIs with NetworkPolicy support, such as Calico for Windows or Antrea, enforce it — win-bridge, win-overlay and Flannel do not)"
                ),
                _ => format!("{n} (emulated node: its pods' traffic is not filtered)"),
            })
            .collect();
        format!(
            "NetworkPolicy is not enforced for the pods this policy selects on {}; it is enforced on {} and on nodes with real containers",
            described.join(", "),
            self.config.node_name
        )
    }

    /// Records a Warning event on a NetworkPolicy.
    fn warn(&self, key: (String, String), message: String) {
        let client = self.client.clone();
        let node = self.config.node_name.clone();
        let (namespace, name) = key;
        let event = tandem_core::events::event(tandem_core::events::EventSpec {
            involved: ObjectReference {
                api_version: Some("networking.k8s.io/v1".into()),
                kind: Some("NetworkPolicy".into()),
                namespace: Some(namespace.clone()),
                name: Some(name),
                ..Default::default()
            },
            type_: tandem_core::events::EventType::Warning,
            reason: "NetworkPolicyNotEnforced",
            message: &message,
            component: "tandem-netpol",
            host: Some(&node),
            action: None,
            at: std::time::SystemTime::now(),
        });
        tokio::spawn(async move {
            if let Err(e) = Api::<Event>::namespaced(client, &namespace)
                .create(&PostParams::default(), &event)
                .await
            {
                tracing::debug!(error = %e, "cannot record the NetworkPolicy controller's event");
            }
        });
    }
}

/// Whether `node` is a Windows node (`kubernetes.io/os=windows`) or runs emulated containers.
fn node_kind(node: &Node) -> NodeKind {
    let windows = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"))
        .is_some_and(|os| os == "windows");
    let emulated = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .is_some_and(|i| i.container_runtime_version.starts_with("emulated://"));
    NodeKind { windows, emulated }
}
