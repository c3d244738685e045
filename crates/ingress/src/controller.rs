//! The controller at run time: reflectors (kube-rs `watcher` + `reflector`) over Ingresses,
//! IngressClasses, Services, EndpointSlices, `kubernetes.io/tls` Secrets and this node's Node;
//! after each batch of changes the routing and TLS tables are rebuilt from the caches and
//! swapped in, and the status of our Ingresses is brought in step.
//!
//! Status, as ingress-nginx and Traefik write it: `status.loadBalancer.ingress` of each Ingress
//! of our class lists this node's InternalIP (`{ip: …}`); addresses other controllers or nodes
//! put there are kept. An Ingress that stops being ours loses our address, and so do all our
//! Ingresses when the controller shuts down (ingress-nginx's `--update-status-on-shutdown`).
//! At start the IngressClass `tandem` (controller `tandem.io/ingress`, the cluster's default)
//! is created when missing, as k3s creates Traefik's.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use rustls::sign::CertifiedKey;
use tandem_netproxy::Forwarder;
use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot};

use crate::class::Identity;
use crate::routing::RoutingTable;
use crate::server::{self, Routes};
use crate::tls::{self, CertError, SniResolver, TlsTable};

/// How long connecting to an endpoint may take: ingress-nginx's `proxy-connect-timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often status writes that failed are tried again.
const STATUS_RETRY: Duration = Duration::from_secs(10);
/// How long shutting down may spend taking our address out of Ingress status.
const SHUTDOWN_STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// How the controller runs on its node.
#[derive(Debug, Clone)]
pub struct IngressConfig {
    /// The node it serves on: its InternalIP goes into the Ingresses' status.
    pub node_name: String,
    /// Where plain HTTP is served (ingress-nginx's hostPort 80).
    pub http: SocketAddr,
    /// Where HTTPS is served (hostPort 443).
    pub https: SocketAddr,
    /// The class it creates and the controller name it answers to.
    pub identity: Identity,
    /// See [`CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
}

impl IngressConfig {
    /// tandem's class and controller name, the default connect timeout.
    pub fn new(node_name: &str, http: SocketAddr, https: SocketAddr) -> IngressConfig {
        IngressConfig {
            node_name: node_name.to_string(),
            http,
            https,
            identity: Identity::default(),
            connect_timeout: CONNECT_TIMEOUT,
        }
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Certificate(#[from] CertError),
}

/// A running controller. [`IngressController::shutdown`] stops it.
pub struct IngressController {
    http_addr: SocketAddr,
    https_addr: SocketAddr,
    routes: Routes,
    tls: SniResolver,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    runner: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl IngressController {
    /// Binds both listeners (failing at once when either is taken) and starts watching and
    /// serving; the IngressClass is [`ensure_class`]'s.
    pub async fn start(
        client: kube::Client,
        config: IngressConfig,
    ) -> Result<IngressController, StartError> {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Listen { addr, source })
        };
        let http = bind(config.http).await?;
        let https = bind(config.https).await?;
        let local = |l: &TcpListener, asked: SocketAddr| l.local_addr().unwrap_or(asked);
        let (http_addr, https_addr) = (local(&http, config.http), local(&https, config.https));
        let fake = tls::fake_certificate()?;
        let routes = Routes::default();
        let resolver = SniResolver::new(TlsTable::new(fake.clone()));
        let forwarder = Forwarder::new()
            .with_connect_timeout(config.connect_timeout)
            .keep_host();
        let mut tasks = vec![
            server::serve_http(http, routes.clone(), forwarder.clone()),
            server::serve_https(
                https,
                server::tls_server_config(resolver.clone()),
                routes.clone(),
                forwarder,
            ),
        ];
        let notify = Arc::new(Notify::new());
        let caches = Caches {
            ingresses: reflect(
                Api::all(client.clone()),
                watcher::Config::default(),
                &notify,
                &mut tasks,
            ),
            classes: reflect(
                Api::all(client.clone()),
                watcher::Config::default(),
                &notify,
                &mut tasks,
            ),
            services: reflect(
                Api::all(client.clone()),
                watcher::Config::default(),
                &notify,
                &mut tasks,
            ),
            slices: reflect(
                Api::all(client.clone()),
                watcher::Config::default(),
                &notify,
                &mut tasks,
            ),
            secrets: reflect(
                Api::all(client.clone()),
                watcher::Config::default().fields(&format!("type={}", tls::TLS_SECRET_TYPE)),
                &notify,
                &mut tasks,
            ),
            node: reflect(
                Api::all(client.clone()),
                watcher::Config::default().fields(&format!("metadata.name={}", config.node_name)),
                &notify,
                &mut tasks,
            ),
        };
        let (stop, stopped) = oneshot::channel();
        let runner = Runner {
            client,
            identity: config.identity,
            caches,
            routes: routes.clone(),
            tls: resolver.clone(),
            fake,
            reported: BTreeSet::new(),
            attempts: HashMap::new(),
        };
        let runner_task = tokio::spawn(runner.run(notify, stopped));
        Ok(IngressController {
            http_addr,
            https_addr,
            routes,
            tls: resolver,
            tasks,
            runner: Some((stop, runner_task)),
        })
    }

    /// Where HTTP is served.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Where HTTPS is served.
    pub fn https_addr(&self) -> SocketAddr {
        self.https_addr
    }

    /// The routing table requests use now.
    pub fn routes(&self) -> Arc<RoutingTable> {
        self.routes.current()
    }

    /// The certificate table handshakes use now.
    pub fn tls(&self) -> Arc<TlsTable> {
        self.tls.current()
    }

    /// Stops serving, takes this node's address out of the Ingresses' status (bounded in
    /// time), and stops watching.
    pub async fn shutdown(mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some((stop, task)) = self.runner.take() {
            let _ = stop.send(());
            let mut task = task;
            if tokio::time::timeout(SHUTDOWN_STATUS_TIMEOUT + Duration::from_secs(1), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for IngressController {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some((_, task)) = &self.runner {
            task.abort();
        }
    }
}

/// A reflector's cache and whether it has listed once.
struct Cache<K: kube::Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    listed: Arc<AtomicBool>,
}

impl<K> Cache<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}

struct Caches {
    ingresses: Cache<Ingress>,
    classes: Cache<IngressClass>,
    services: Cache<Service>,
    slices: Cache<EndpointSlice>,
    secrets: Cache<Secret>,
    node: Cache<Node>,
}

/// Starts a reflector over `api`; `notify` is woken after each change once listed.
fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
    notify: &Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Cache<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let listed = Arc::new(AtomicBool::new(false));
    let (flag, notify) = (listed.clone(), notify.clone());
    tasks.push(tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().reflect(writer).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    flag.store(true, Ordering::Release);
                    notify.notify_one();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => notify.notify_one(),
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Err(e) => {
                    tracing::debug!(kind = %K::kind(&()), error = %e, "ingress controller watch failed; retrying");
                }
            }
        }
    }));
    Cache { store, listed }
}

/// Creates our IngressClass unless it exists, retrying while the API does not serve the kind
/// yet or is unreachable: the installer's part (a chart's), run with the installer's client —
/// the controller's own role may not create classes. A refusal (403) ends the attempt with a
/// warning saying who must create it.
pub async fn ensure_class(client: kube::Client, identity: Identity) {
    let api: Api<IngressClass> = Api::all(client);
    let class = identity.default_class_object();
    loop {
        match api.get_opt(&identity.class_name).await {
            Ok(Some(_)) => return,
            Ok(None) => match api.create(&PostParams::default(), &class).await {
                Ok(_) => {
                    tracing::info!(class = %identity.class_name, "created the default IngressClass");
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => return,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    tracing::warn!(class = %identity.class_name, reason = %s.message, "the IngressClass is missing and this identity may not create it: an administrator must");
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "cannot create the IngressClass yet"),
            },
            Err(e) => tracing::debug!(error = %e, "cannot read the IngressClass yet"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// An Ingress by namespace and name.
type Key = (String, String);

struct Runner {
    client: kube::Client,
    identity: Identity,
    caches: Caches,
    routes: Routes,
    tls: SniResolver,
    fake: Arc<CertifiedKey>,
    /// TLS problems already logged.
    reported: BTreeSet<String>,
    /// Status writes sent: the Ingress's resourceVersion then, and when.
    attempts: HashMap<Key, (Option<String>, Instant)>,
}

impl Runner {
    async fn run(mut self, notify: Arc<Notify>, mut stop: oneshot::Receiver<()>) {
        let mut retry = tokio::time::interval(STATUS_RETRY);
        loop {
            tokio::select! {
                _ = notify.notified() => {}
                _ = retry.tick() => {}
                _ = &mut stop => {
                    let _ = tokio::time::timeout(SHUTDOWN_STATUS_TIMEOUT, self.withdraw_status()).await;
                    return;
                }
            }
            self.sync().await;
        }
    }

    /// Our Ingresses, with every Ingress.
    fn ours(&self) -> (Vec<Arc<Ingress>>, Vec<Arc<Ingress>>) {
        let classes = self.caches.classes.state();
        let class_refs: Vec<&IngressClass> = classes.iter().map(|c| c.as_ref()).collect();
        let all = self.caches.ingresses.state();
        let ours = all
            .iter()
            .filter(|i| self.identity.owns(i, &class_refs))
            .cloned()
            .collect();
        (ours, all)
    }

    async fn sync(&mut self) {
        let c = &self.caches;
        if !(c.ingresses.listed() && c.classes.listed() && c.services.listed() && c.slices.listed())
        {
            return;
        }
        let (ours, all) = self.ours();
        let ingress_refs: Vec<&Ingress> = ours.iter().map(|i| i.as_ref()).collect();
        let services = c.services.state();
        let slices = c.slices.state();
        let table = RoutingTable::build(
            &ingress_refs,
            &services.iter().map(|s| s.as_ref()).collect::<Vec<_>>(),
            &slices.iter().map(|s| s.as_ref()).collect::<Vec<_>>(),
            Some(&self.routes.current()),
        );
        self.routes.set(table);
        let secrets = c.secrets.state();
        let (tls_table, problems) = TlsTable::build(
            &ingress_refs,
            &secrets.iter().map(|s| s.as_ref()).collect::<Vec<_>>(),
            self.fake.clone(),
        );
        self.tls.set(tls_table);
        let problems: BTreeSet<String> = problems.into_iter().collect();
        for p in problems.difference(&self.reported) {
            tracing::warn!(problem = %p, "ingress TLS: serving the default certificate instead");
        }
        self.reported = problems;
        let Some(ip) = self.node_ip() else { return };
        let ours_keys: BTreeSet<Key> = ours.iter().map(|i| key(i)).collect();
        for ing in &all {
            let k = key(ing);
            let current = lb_ips(ing);
            let want = if ours_keys.contains(&k) {
                add_ip(&current, &ip)
            } else {
                remove_ip(&current, &ip)
            };
            if want == current {
                self.attempts.remove(&k);
                continue;
            }
            let rv = ing.metadata.resource_version.clone();
            if let Some((seen, at)) = self.attempts.get(&k)
                && *seen == rv
                && at.elapsed() < STATUS_RETRY
            {
                continue;
            }
            self.attempts.insert(k.clone(), (rv, Instant::now()));
            if let Err(e) = write_status(&self.client, &k, &want).await {
                tracing::debug!(ingress = %format!("{}/{}", k.0, k.1), error = %e, "cannot write the Ingress status");
            }
        }
    }

    /// The InternalIP of this node, once its Node is registered.
    fn node_ip(&self) -> Option<String> {
        self.caches.node.state().first().and_then(|n| {
            n.status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .find(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
        })
    }

    /// Takes this node's address out of every Ingress's status.
    async fn withdraw_status(&self) {
        let Some(ip) = self.node_ip() else { return };
        for ing in self.caches.ingresses.state() {
            let current = lb_ips(&ing);
            let want = remove_ip(&current, &ip);
            if want != current
                && let Err(e) = write_status(&self.client, &key(&ing), &want).await
            {
                tracing::debug!(error = %e, "cannot clear the Ingress status at shutdown");
            }
        }
    }
}

fn key(ing: &Ingress) -> Key {
    (
        ing.metadata.namespace.clone().unwrap_or_default(),
        ing.metadata.name.clone().unwrap_or_default(),
    )
}

/// The addresses in `status.loadBalancer.ingress` (`ip`, else `hostname`).
fn lb_ips(ing: &Ingress) -> Vec<String> {
    ing.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|list| {
            list.iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn add_ip(current: &[String], ip: &str) -> Vec<String> {
    let mut out = current.to_vec();
    if !out.iter().any(|c| c == ip) {
        out.push(ip.to_string());
        out.sort();
    }
    out
}

fn remove_ip(current: &[String], ip: &str) -> Vec<String> {
    current.iter().filter(|c| *c != ip).cloned().collect()
}

/// Sets `status.loadBalancer.ingress` to `ips` (a merge patch of the status subresource).
async fn write_status(client: &kube::Client, k: &Key, ips: &[String]) -> Result<(), kube::Error> {
    let entries: Vec<serde_json::Value> = ips
        .iter()
        .map(|a| {
            if a.parse::<std::net::IpAddr>().is_ok() {
                serde_json::json!({"ip": a})
            } else {
                serde_json::json!({"hostname": a})
            }
        })
        .collect();
    let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": entries}}});
    Api::<Ingress>::namespaced(client.clone(), &k.0)
        .patch_status(&k.1, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_address_is_added_once_and_others_are_kept() {
        let current = vec!["10.0.0.9".to_string()];
        assert_eq!(add_ip(&current, "10.0.0.2"), ["10.0.0.2", "10.0.0.9"]);
        assert_eq!(add_ip(&["10.0.0.2".to_string()], "10.0.0.2"), ["10.0.0.2"]);
    }

    #[test]
    fn only_our_address_is_removed() {
        let current = vec!["10.0.0.2".to_string(), "10.0.0.9".to_string()];
        assert_eq!(remove_ip(&current, "10.0.0.2"), ["10.0.0.9"]);
        assert_eq!(remove_ip(&current, "10.0.0.3"), current);
    }
}
