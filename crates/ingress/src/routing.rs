//! The routing table: our Ingresses, with the Services and EndpointSlices they name, turned into
//! "host and path → backend endpoints". Pure: built from objects, asked with a host and a path.
//!
//! It follows the Kubernetes Ingress documentation ("Path types", "Examples", "Hostname
//! wildcards", "Default backend") with ingress-nginx's server/location model where the
//! documentation leaves a choice:
//!
//! - Hosts: a request's host picks one group of rules — the rules for exactly that host; else
//!   the rules of a wildcard `*.example.com` that matches it (the wildcard stands for exactly one
//!   DNS label: `foo.example.com`, not `example.com` nor `a.foo.example.com`); else the rules
//!   without a host. Only that group's paths are tried (nginx picks a `server` first, then a
//!   `location` inside it).
//! - Paths: `Exact` matches the path as it is, case-sensitively; `Prefix` matches element by
//!   element on `/` (`/foo` and `/foo/` both match `/foo`, `/foo/` and `/foo/bar`, never
//!   `/foobar`), and `/` matches everything; `ImplementationSpecific` is treated as `Prefix`.
//!   The longest matching path wins; at equal length `Exact` wins over `Prefix`; remaining ties
//!   go to the oldest Ingress (then namespace/name, then rule order), as ingress-nginx resolves
//!   conflicts.
//! - No path matches: the group's default backend — the `spec.defaultBackend` of the oldest
//!   Ingress with rules for that host, or for requests falling to the host-less group, of the
//!   oldest Ingress that has only a default backend and no rules — else 404.
//! - A backend is a Service port (by number or name) in the Ingress's namespace; its endpoints
//!   are the ready addresses of the Service's EndpointSlices (`ready` unset counts as ready) at
//!   the slice port named like the Service port, TCP. An `ExternalName` Service is reached by
//!   its name. A missing Service or port, or no ready endpoint, answers 503; so does a
//!   `resource` backend, which this controller does not implement.
//!
//! Requests are spread over a backend's endpoints round-robin; the counter of a backend carries
//! over when the table is rebuilt.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service port as an Ingress backend names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortRef {
    Number(i32),
    Name(String),
}

/// A Service backend of an Ingress: the Service and port, in the Ingress's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendRef {
    pub namespace: String,
    pub service: String,
    pub port: PortRef,
}

impl fmt::Display for BackendRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.port {
            PortRef::Number(n) => write!(f, "{}/{}:{n}", self.namespace, self.service),
            PortRef::Name(n) => write!(f, "{}/{}:{n}", self.namespace, self.service),
        }
    }
}

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An endpoint's address and port.
    Addr(SocketAddr),
    /// An `ExternalName` Service's name and port.
    Name { host: String, port: u16 },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// What the table says about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Send it to `target`, one endpoint of `backend`.
    Forward { backend: BackendRef, target: Target },
    /// No rule and no default backend: 404.
    NotFound,
    /// A rule matched but its backend cannot take traffic: 503, with the reason (for the log).
    Unavailable { reason: String },
}

/// How an Ingress path matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathKind {
    /// Sorted before `Prefix`: at equal length an exact match wins.
    Exact,
    Prefix,
}

impl PathKind {
    /// `Exact`, or `Prefix` for `Prefix`, `ImplementationSpecific` and anything else.
    pub fn from_path_type(path_type: &str) -> PathKind {
        if path_type == "Exact" {
            PathKind::Exact
        } else {
            PathKind::Prefix
        }
    }
}

/// Whether `rule` (of `kind`) matches the request path `path`.
pub fn path_matches(kind: PathKind, rule: &str, path: &str) -> bool {
    match kind {
        PathKind::Exact => rule == path,
        PathKind::Prefix => {
            let prefix = rule.trim_end_matches('/');
            if prefix.is_empty() {
                return path.starts_with('/') || path.is_empty();
            }
            match path.strip_prefix(prefix) {
                Some(rest) => rest.is_empty() || rest.starts_with('/'),
                None => false,
            }
        }
    }
}

/// The host of a `Host` header or URI authority as rules compare it: without the port, in
/// lower case, without a trailing dot.
pub fn normalize_host(raw: &str) -> String {
    let raw = raw.trim();
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // An IPv6 literal: `[::1]:80`.
        rest.split(']').next().unwrap_or_default()
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => raw,
        }
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Oldest first, then by namespace and name: the order conflicts are settled in.
type Age = (Option<Time>, String, String);

#[derive(Debug, Clone)]
struct PathRule {
    path: String,
    kind: PathKind,
    backend: Result<BackendRef, String>,
    order: (Age, usize),
}

impl PathRule {
    /// The length that "longest path wins" compares: a prefix's trailing `/` does not count.
    fn match_len(&self) -> usize {
        match self.kind {
            PathKind::Exact => self.path.len(),
            PathKind::Prefix => self.path.trim_end_matches('/').len(),
        }
    }
}

/// The rules of one host (or of every host, or of a wildcard).
#[derive(Debug, Clone, Default)]
struct HostRoutes {
    paths: Vec<PathRule>,
    default: Option<Result<BackendRef, String>>,
}

/// A backend's endpoints (or why it has none) and its round-robin position.
#[derive(Debug, Clone)]
struct Backend {
    targets: Result<Vec<Target>, String>,
    next: Arc<AtomicUsize>,
}

/// Hosts and paths to backends; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct RoutingTable {
    exact: HashMap<String, HostRoutes>,
    /// Keyed by what follows `*.`.
    wildcard: HashMap<String, HostRoutes>,
    any: HostRoutes,
    backends: HashMap<BackendRef, Backend>,
}

impl RoutingTable {
    /// Builds the table from `ingresses` (ours only), every Service and every EndpointSlice;
    /// `previous` lends its round-robin positions so that a rebuild does not send the next
    /// requests to the first endpoint again.
    pub fn build(
        ingresses: &[&Ingress],
        services: &[&Service],
        slices: &[&EndpointSlice],
        previous: Option<&RoutingTable>,
    ) -> RoutingTable {
        let mut sorted: Vec<&Ingress> = ingresses.to_vec();
        sorted.sort_by_cached_key(|i| age(i));
        let mut table = RoutingTable::default();
        for ing in sorted {
            let ns = ing.metadata.namespace.clone().unwrap_or_default();
            let Some(spec) = &ing.spec else { continue };
            let default = spec.default_backend.as_ref().map(|b| backend_ref(&ns, b));
            let rules = spec.rules.as_deref().unwrap_or_default();
            if rules.is_empty() {
                if table.any.default.is_none() {
                    table.any.default = default;
                }
                continue;
            }
            let mut seq = 0;
            for rule in rules {
                let host = rule
                    .host
                    .as_deref()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                let group = if host.is_empty() {
                    &mut table.any
                } else if let Some(suffix) = host.strip_prefix("*.") {
                    table.wildcard.entry(suffix.to_string()).or_default()
                } else {
                    table.exact.entry(host).or_default()
                };
                if !rule.host.as_deref().unwrap_or_default().is_empty() && group.default.is_none() {
                    group.default = default.clone();
                }
                let paths = rule.http.as_ref().map(|h| h.paths.as_slice());
                for p in paths.unwrap_or_default() {
                    group.paths.push(PathRule {
                        path: p.path.clone().unwrap_or_else(|| "/".to_string()),
                        kind: PathKind::from_path_type(&p.path_type),
                        backend: backend_ref(&ns, &p.backend),
                        order: (age(ing), seq),
                    });
                    seq += 1;
                }
            }
        }
        for group in table
            .exact
            .values_mut()
            .chain(table.wildcard.values_mut())
            .chain(std::iter::once(&mut table.any))
        {
            group.paths.sort_by(|a, b| {
                b.match_len()
                    .cmp(&a.match_len())
                    .then(a.kind.cmp(&b.kind))
                    .then_with(|| a.order.cmp(&b.order))
            });
        }
        let index = Index::new(services, slices);
        let refs: BTreeSet<BackendRef> = table
            .groups()
            .flat_map(|g| {
                g.paths
                    .iter()
                    .map(|p| &p.backend)
                    .chain(g.default.iter())
                    .filter_map(|b| b.as_ref().ok().cloned())
            })
            .collect();
        for r in refs {
            let next = previous
                .and_then(|p| p.backends.get(&r))
                .map(|b| b.next.clone())
                .unwrap_or_default();
            let targets = index.targets(&r);
            table.backends.insert(r, Backend { targets, next });
        }
        table
    }

    fn groups(&self) -> impl Iterator<Item = &HostRoutes> {
        self.exact
            .values()
            .chain(self.wildcard.values())
            .chain(std::iter::once(&self.any))
    }

    /// Where a request for `host` (a `Host` header or authority; port and case do not matter)
    /// and `path` goes. Each call that forwards advances the backend's round-robin position.
    pub fn route(&self, host: &str, path: &str) -> Route {
        let host = normalize_host(host);
        let group = self
            .exact
            .get(&host)
            .or_else(|| {
                let (first, rest) = host.split_once('.')?;
                if first.is_empty() {
                    return None;
                }
                self.wildcard.get(rest)
            })
            .unwrap_or(&self.any);
        let chosen = group
            .paths
            .iter()
            .find(|p| path_matches(p.kind, &p.path, path))
            .map(|p| &p.backend)
            .or(group.default.as_ref());
        match chosen {
            None => Route::NotFound,
            Some(Err(why)) => Route::Unavailable {
                reason: why.clone(),
            },
            Some(Ok(backend)) => self.pick(backend),
        }
    }

    fn pick(&self, backend: &BackendRef) -> Route {
        let Some(b) = self.backends.get(backend) else {
            return Route::Unavailable {
                reason: format!("backend {backend} is unknown"),
            };
        };
        match &b.targets {
            Err(why) => Route::Unavailable {
                reason: why.clone(),
            },
            Ok(targets) if targets.is_empty() => Route::Unavailable {
                reason: format!("service {backend} has no ready endpoints"),
            },
            Ok(targets) => {
                let i = b.next.fetch_add(1, Ordering::Relaxed) % targets.len();
                Route::Forward {
                    backend: backend.clone(),
                    target: targets[i].clone(),
                }
            }
        }
    }

    /// A backend's endpoints in the order round-robin visits them (`None`: not in the table;
    /// `Some(Err)`: why it has none).
    pub fn targets(&self, backend: &BackendRef) -> Option<Result<&[Target], &str>> {
        self.backends.get(backend).map(|b| match &b.targets {
            Ok(t) => Ok(t.as_slice()),
            Err(e) => Err(e.as_str()),
        })
    }

    /// How many hosts (exact and wildcard) have rules.
    pub fn host_count(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }
}

fn age(ing: &Ingress) -> Age {
    (
        ing.metadata.creation_timestamp.clone(),
        ing.metadata.namespace.clone().unwrap_or_default(),
        ing.metadata.name.clone().unwrap_or_default(),
    )
}

fn backend_ref(namespace: &str, backend: &IngressBackend) -> Result<BackendRef, String> {
    let Some(svc) = &backend.service else {
        return Err(format!(
            "a resource backend in namespace {namespace} is not supported by this controller"
        ));
    };
    let port = match &svc.port {
        Some(p) => match (&p.name, p.number) {
            (Some(name), _) if !name.is_empty() => PortRef::Name(name.clone()),
            (_, Some(n)) => PortRef::Number(n),
            _ => return Err(format!("backend {namespace}/{} names no port", svc.name)),
        },
        None => return Err(format!("backend {namespace}/{} names no port", svc.name)),
    };
    Ok(BackendRef {
        namespace: namespace.to_string(),
        service: svc.name.clone(),
        port,
    })
}

/// Services and EndpointSlices by namespace and Service name.
struct Index<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
}

impl<'a> Index<'a> {
    fn new(services: &[&'a Service], slices: &[&'a EndpointSlice]) -> Index<'a> {
        let mut index = Index {
            services: HashMap::new(),
            slices: HashMap::new(),
        };
        for s in services {
            if let (Some(ns), Some(name)) = (&s.metadata.namespace, &s.metadata.name) {
                index.services.insert((ns.as_str(), name.as_str()), s);
            }
        }
        for s in slices {
            let svc = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL));
            if let (Some(ns), Some(svc)) = (&s.metadata.namespace, svc) {
                index
                    .slices
                    .entry((ns.as_str(), svc.as_str()))
                    .or_default()
                    .push(s);
            }
        }
        index
    }

    fn targets(&self, r: &BackendRef) -> Result<Vec<Target>, String> {
        let key = (r.namespace.as_str(), r.service.as_str());
        let Some(svc) = self.services.get(&key) else {
            return Err(format!("service {}/{} not found", r.namespace, r.service));
        };
        let spec = svc.spec.as_ref();
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
        let port = ports.iter().find(|p| match &r.port {
            PortRef::Number(n) => p.port == *n,
            PortRef::Name(n) => p.name.as_deref() == Some(n.as_str()),
        });
        if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            let host = spec
                .and_then(|s| s.external_name.clone())
                .unwrap_or_default();
            let number = match (&r.port, port) {
                (PortRef::Number(n), _) => Some(*n),
                (PortRef::Name(_), Some(p)) => Some(p.port),
                (PortRef::Name(_), None) => None,
            };
            return match number.and_then(|n| u16::try_from(n).ok()) {
                Some(port) if !host.is_empty() => Ok(vec![Target::Name { host, port }]),
                _ => Err(format!("service {r} has no usable port")),
            };
        }
        let Some(port) = port else {
            return Err(format!("service {r}: no such port"));
        };
        if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
            return Err(format!("service {r} is not a TCP port"));
        }
        let name = port.name.as_deref().unwrap_or_default();
        let mut targets = BTreeSet::new();
        for slice in self.slices.get(&key).map(Vec::as_slice).unwrap_or_default() {
            if slice.address_type == "FQDN" {
                continue;
            }
            let Some(number) = slice
                .ports
                .as_deref()
                .unwrap_or_default()
                .iter()
                .find(|p| {
                    p.name.as_deref().unwrap_or_default() == name
                        && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
                })
                .and_then(|p| p.port)
                .and_then(|n| u16::try_from(n).ok())
            else {
                continue;
            };
            for e in &slice.endpoints {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !ready {
                    continue;
                }
                for a in &e.addresses {
                    if let Ok(ip) = a.parse::<IpAddr>() {
                        targets.insert(SocketAddr::new(ip, number));
                    }
                }
            }
        }
        Ok(targets.into_iter().map(Target::Addr).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn ingress(name: &str, created: &str, spec: Value) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
            "spec": spec
        }))
        .expect("ingress")
    }

    fn svc_backend(name: &str, port: i32) -> Value {
        json!({"service": {"name": name, "port": {"number": port}}})
    }

    fn rule(host: Option<&str>, paths: &[(&str, &str, &str)]) -> Value {
        let paths: Vec<Value> = paths
            .iter()
            .map(|(path, kind, svc)| json!({"path": path, "pathType": kind, "backend": svc_backend(svc, 80)}))
            .collect();
        let mut r = json!({"http": {"paths": paths}});
        if let Some(h) = host {
            r["host"] = json!(h);
        }
        r
    }

    fn service(name: &str, ports: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": ports}
        }))
        .expect("service")
    }

    /// A Service `name` on port 80 (`http`) → 8080 with one slice of `ips`, all ready.
    fn web(name: &str, ips: &[&str]) -> (Service, EndpointSlice) {
        let svc = service(
            name,
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
        );
        (svc, slice(name, "http", 8080, ips, true))
    }

    fn slice(svc: &str, port_name: &str, port: i32, ips: &[&str], ready: bool) -> EndpointSlice {
        let endpoints: Vec<Value> = ips
            .iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": ready}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": format!("{svc}-{port_name}-{}", ips.len()), "namespace": "default",
                         "labels": {SERVICE_NAME_LABEL: svc}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]
        }))
        .expect("slice")
    }

    /// A table of `ingresses` whose backends `a`, `b`, `c`, `d` each have one endpoint
    /// (10.0.0.1, .2, .3, .4), so the route's target says which backend answered.
    fn table(ingresses: &[Ingress]) -> RoutingTable {
        let objects: Vec<(Service, EndpointSlice)> = ["a", "b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, n)| web(n, &[&format!("10.0.0.{}", i + 1)]))
            .collect();
        let services: Vec<&Service> = objects.iter().map(|o| &o.0).collect();
        let slices: Vec<&EndpointSlice> = objects.iter().map(|o| &o.1).collect();
        let refs: Vec<&Ingress> = ingresses.iter().collect();
        RoutingTable::build(&refs, &services, &slices, None)
    }

    /// Which of `a`..`d` answers, `404` or `503`.
    fn who(t: &RoutingTable, host: &str, path: &str) -> String {
        match t.route(host, path) {
            Route::Forward { backend, .. } => backend.service,
            Route::NotFound => "404".into(),
            Route::Unavailable { .. } => "503".into(),
        }
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-02T00:00:00Z";

    #[test]
    fn prefix_matches_element_wise() {
        let p = PathKind::Prefix;
        assert!(path_matches(p, "/foo", "/foo"));
        assert!(path_matches(p, "/foo", "/foo/"));
        assert!(path_matches(p, "/foo", "/foo/bar"));
        assert!(!path_matches(p, "/foo", "/foobar"));
        assert!(path_matches(p, "/foo/", "/foo"));
        assert!(path_matches(p, "/foo/", "/foo/bar"));
        assert!(!path_matches(p, "/foo/", "/foobar"));
        assert!(path_matches(p, "/aaa/bbb", "/aaa/bbb/ccc"));
        assert!(!path_matches(p, "/aaa/bbb", "/aaa/bbbxyz"));
        assert!(!path_matches(p, "/foo", "/Foo"));
    }

    #[test]
    fn root_prefix_matches_every_path() {
        for path in ["/", "/x", "/a/b/c", "/index.html"] {
            assert!(path_matches(PathKind::Prefix, "/", path), "{path}");
        }
    }

    #[test]
    fn exact_matches_only_the_same_path() {
        let e = PathKind::Exact;
        assert!(path_matches(e, "/foo", "/foo"));
        assert!(!path_matches(e, "/foo", "/foo/"));
        assert!(!path_matches(e, "/foo", "/foo/bar"));
        assert!(!path_matches(e, "/foo/", "/foo"));
        assert!(!path_matches(e, "/foo", "/FOO"));
    }

    #[test]
    fn implementation_specific_is_treated_as_prefix() {
        assert_eq!(
            PathKind::from_path_type("ImplementationSpecific"),
            PathKind::Prefix
        );
        assert_eq!(PathKind::from_path_type("Prefix"), PathKind::Prefix);
        assert_eq!(PathKind::from_path_type("Exact"), PathKind::Exact);
    }

    #[test]
    fn hosts_are_compared_without_port_case_or_trailing_dot() {
        assert_eq!(normalize_host("Web.Example.COM:8080"), "web.example.com");
        assert_eq!(normalize_host("web.example.com."), "web.example.com");
        assert_eq!(normalize_host("[::1]:443"), "::1");
        assert_eq!(normalize_host("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn host_and_paths_route_to_their_backends() {
        let t = table(&[ingress(
            "site",
            T0,
            json!({"rules": [rule(Some("web.example.com"), &[("/", "Prefix", "a"), ("/api", "Prefix", "b")])]}),
        )]);
        assert_eq!(who(&t, "web.example.com", "/"), "a");
        assert_eq!(who(&t, "web.example.com", "/index.html"), "a");
        assert_eq!(who(&t, "web.example.com:18080", "/api"), "b");
        assert_eq!(who(&t, "web.example.com", "/api/v1/users"), "b");
        assert_eq!(who(&t, "web.example.com", "/apis"), "a");
        assert_eq!(who(&t, "other.example.com", "/"), "404");
    }

    #[test]
    fn longest_matching_path_wins_whatever_the_rule_order() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[
                ("/a", "Prefix", "a"), ("/a/b/c", "Prefix", "c"), ("/a/b", "Prefix", "b")
            ])]}),
        )]);
        assert_eq!(who(&t, "h", "/a/b/c/d"), "c");
        assert_eq!(who(&t, "h", "/a/b/x"), "b");
        assert_eq!(who(&t, "h", "/a/x"), "a");
        assert_eq!(who(&t, "h", "/z"), "404");
    }

    #[test]
    fn exact_wins_over_prefix_of_equal_length() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/foo/", "Prefix", "a"), ("/foo", "Exact", "b")])]}),
        )]);
        assert_eq!(who(&t, "h", "/foo"), "b");
        assert_eq!(who(&t, "h", "/foo/"), "a");
        assert_eq!(who(&t, "h", "/foo/x"), "a");
    }

    #[test]
    fn a_longer_prefix_wins_over_a_shorter_exact() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/foo", "Exact", "a"), ("/foo/bar", "Prefix", "b")])]}),
        )]);
        assert_eq!(who(&t, "h", "/foo/bar"), "b");
        assert_eq!(who(&t, "h", "/foo"), "a");
    }

    #[test]
    fn wildcard_host_matches_exactly_one_label() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [rule(Some("*.example.com"), &[("/", "Prefix", "a")])]}),
        )]);
        assert_eq!(who(&t, "foo.example.com", "/"), "a");
        assert_eq!(who(&t, "BAR.example.com", "/x"), "a");
        assert_eq!(who(&t, "example.com", "/"), "404");
        assert_eq!(who(&t, "a.foo.example.com", "/"), "404");
        assert_eq!(who(&t, ".example.com", "/"), "404");
    }

    #[test]
    fn exact_host_wins_over_wildcard_and_does_not_fall_back_to_it() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [
                rule(Some("*.example.com"), &[("/", "Prefix", "a")]),
                rule(Some("api.example.com"), &[("/v1", "Prefix", "b")]),
            ]}),
        )]);
        assert_eq!(who(&t, "api.example.com", "/v1/x"), "b");
        // The exact host's group has no `/`: nginx does not try the wildcard server.
        assert_eq!(who(&t, "api.example.com", "/"), "404");
        assert_eq!(who(&t, "www.example.com", "/"), "a");
    }

    #[test]
    fn rules_without_host_serve_hosts_no_rule_names() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [
                rule(None, &[("/", "Prefix", "a")]),
                rule(Some("web.example.com"), &[("/app", "Prefix", "b")]),
            ]}),
        )]);
        assert_eq!(who(&t, "anything.test", "/x"), "a");
        assert_eq!(who(&t, "10.1.2.3", "/"), "a");
        assert_eq!(who(&t, "web.example.com", "/app"), "b");
        assert_eq!(who(&t, "web.example.com", "/other"), "404");
    }

    #[test]
    fn default_backend_of_an_ingress_without_rules_catches_unmatched_hosts() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"defaultBackend": svc_backend("c", 80)}),
        )]);
        assert_eq!(who(&t, "whatever", "/anything"), "c");
    }

    #[test]
    fn default_backend_serves_unmatched_paths_of_its_own_hosts() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({
                "defaultBackend": svc_backend("c", 80),
                "rules": [rule(Some("web.example.com"), &[("/api", "Prefix", "b")])]
            }),
        )]);
        assert_eq!(who(&t, "web.example.com", "/api"), "b");
        assert_eq!(who(&t, "web.example.com", "/"), "c");
        // Other hosts do not get it: only a rule-less Ingress's default backend catches them.
        assert_eq!(who(&t, "other.example.com", "/"), "404");
    }

    #[test]
    fn the_oldest_ingress_wins_a_conflict_on_the_same_host_and_path() {
        let newer = ingress(
            "newer",
            T1,
            json!({"rules": [rule(Some("h.test"), &[("/", "Prefix", "b")])]}),
        );
        let older = ingress(
            "older",
            T0,
            json!({"rules": [rule(Some("h.test"), &[("/", "Prefix", "a"), ("/only-older", "Prefix", "c")])]}),
        );
        let t = table(&[newer.clone(), older.clone()]);
        assert_eq!(who(&t, "h.test", "/"), "a");
        assert_eq!(who(&t, "h.test", "/only-older"), "c");
        let t = table(&[older, newer]);
        assert_eq!(who(&t, "h.test", "/"), "a");
    }

    #[test]
    fn paths_of_several_ingresses_for_one_host_are_merged() {
        let t = table(&[
            ingress(
                "one",
                T0,
                json!({"rules": [rule(Some("h.test"), &[("/", "Prefix", "a")])]}),
            ),
            ingress(
                "two",
                T1,
                json!({"rules": [rule(Some("h.test"), &[("/b", "Prefix", "b")])]}),
            ),
        ]);
        assert_eq!(who(&t, "h.test", "/b/x"), "b");
        assert_eq!(who(&t, "h.test", "/c"), "a");
    }

    #[test]
    fn missing_service_or_port_answers_503() {
        let t = table(&[ingress(
            "i",
            T0,
            json!({"rules": [{"host": "h.test", "http": {"paths": [
                {"path": "/gone", "pathType": "Prefix", "backend": svc_backend("gone", 80)},
                {"path": "/port", "pathType": "Prefix", "backend": svc_backend("a", 9999)},
                {"path": "/res", "pathType": "Prefix", "backend": {"resource": {"kind": "Bucket", "name": "b"}}},
            ]}}]}),
        )]);
        assert_eq!(who(&t, "h.test", "/gone"), "503");
        assert_eq!(who(&t, "h.test", "/port"), "503");
        assert_eq!(who(&t, "h.test", "/res"), "503");
        assert!(matches!(
            t.route("h.test", "/gone"),
            Route::Unavailable { reason } if reason.contains("not found")
        ));
    }

    #[test]
    fn service_without_ready_endpoints_answers_503() {
        let svc = service("w", json!([{"name": "http", "port": 80}]));
        let not_ready = slice("w", "http", 8080, &["10.0.0.9"], false);
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/", "Prefix", "w")])]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[&not_ready], None);
        assert!(matches!(
            t.route("h", "/"),
            Route::Unavailable { reason } if reason.contains("no ready endpoints")
        ));
        let t = RoutingTable::build(&[&ing], &[&svc], &[], None);
        assert_eq!(who(&t, "h", "/"), "503");
    }

    #[test]
    fn endpoints_are_visited_round_robin_and_the_position_survives_a_rebuild() {
        let (svc, sl) = web("w", &["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/", "Prefix", "w")])]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[&sl], None);
        let target = |t: &RoutingTable| match t.route("h", "/") {
            Route::Forward { target, .. } => target.to_string(),
            other => panic!("{other:?}"),
        };
        let first: Vec<String> = (0..4).map(|_| target(&t)).collect();
        assert_eq!(
            first,
            [
                "10.0.0.1:8080",
                "10.0.0.2:8080",
                "10.0.0.3:8080",
                "10.0.0.1:8080"
            ]
        );
        let rebuilt = RoutingTable::build(&[&ing], &[&svc], &[&sl], Some(&t));
        assert_eq!(target(&rebuilt), "10.0.0.2:8080");
    }

    #[test]
    fn only_ready_endpoints_at_the_named_slice_port_are_used() {
        let svc = service(
            "w",
            json!([{"name": "http", "port": 80}, {"name": "metrics", "port": 9090}]),
        );
        let ready = slice("w", "http", 8080, &["10.0.0.1"], true);
        let not_ready = slice("w", "http", 8080, &["10.0.0.2", "10.0.0.3"], false);
        let metrics = slice("w", "metrics", 9100, &["10.0.0.4"], true);
        let mut unset: EndpointSlice = slice("w", "http", 8080, &["10.0.0.5"], true);
        unset.metadata.name = Some("unset".into());
        unset.endpoints[0].conditions = None;
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [{"http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "w", "port": {"name": "http"}}}},
                {"path": "/metrics", "pathType": "Prefix", "backend": {"service": {"name": "w", "port": {"number": 9090}}}},
            ]}}]}),
        );
        let t = RoutingTable::build(
            &[&ing],
            &[&svc],
            &[&ready, &not_ready, &metrics, &unset],
            None,
        );
        let http = BackendRef {
            namespace: "default".into(),
            service: "w".into(),
            port: PortRef::Name("http".into()),
        };
        assert_eq!(
            t.targets(&http),
            Some(Ok(&[
                Target::Addr("10.0.0.1:8080".parse().expect("addr")),
                Target::Addr("10.0.0.5:8080".parse().expect("addr")),
            ][..]))
        );
        assert!(matches!(
            t.route("h", "/metrics"),
            Route::Forward { target: Target::Addr(a), .. } if a.to_string() == "10.0.0.4:9100"
        ));
    }

    #[test]
    fn unnamed_service_port_matches_the_unnamed_slice_port() {
        let svc = service("w", json!([{"port": 80, "targetPort": 8080}]));
        let sl = slice("w", "", 8080, &["10.0.0.7"], true);
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/", "Prefix", "w")])]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[&sl], None);
        assert!(matches!(
            t.route("h", "/"),
            Route::Forward { target: Target::Addr(a), .. } if a.to_string() == "10.0.0.7:8080"
        ));
    }

    #[test]
    fn slices_of_other_namespaces_or_services_are_ignored() {
        let svc = service("w", json!([{"name": "http", "port": 80}]));
        let mut elsewhere = slice("w", "http", 8080, &["10.0.0.1"], true);
        elsewhere.metadata.namespace = Some("other".into());
        let other_service = slice("x", "http", 8080, &["10.0.0.2"], true);
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/", "Prefix", "w")])]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[&elsewhere, &other_service], None);
        assert_eq!(who(&t, "h", "/"), "503");
    }

    #[test]
    fn external_name_service_is_reached_by_its_name() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "ext", "namespace": "default"},
            "spec": {"type": "ExternalName", "externalName": "backend.internal", "ports": [{"name": "http", "port": 8000}]}
        }))
        .expect("service");
        let ing = ingress(
            "i",
            T0,
            json!({"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "ext", "port": {"name": "http"}}}}]}}]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[], None);
        assert_eq!(
            t.route("h", "/"),
            Route::Forward {
                backend: BackendRef {
                    namespace: "default".into(),
                    service: "ext".into(),
                    port: PortRef::Name("http".into())
                },
                target: Target::Name {
                    host: "backend.internal".into(),
                    port: 8000
                }
            }
        );
    }

    #[test]
    fn backends_are_looked_up_in_the_ingress_namespace() {
        let (mut svc, mut sl) = web("w", &["10.0.0.1"]);
        svc.metadata.namespace = Some("shop".into());
        sl.metadata.namespace = Some("shop".into());
        let mut ing = ingress(
            "i",
            T0,
            json!({"rules": [rule(None, &[("/", "Prefix", "w")])]}),
        );
        let t = RoutingTable::build(&[&ing], &[&svc], &[&sl], None);
        assert_eq!(who(&t, "h", "/"), "503");
        ing.metadata.namespace = Some("shop".into());
        let t = RoutingTable::build(&[&ing], &[&svc], &[&sl], None);
        assert_eq!(who(&t, "h", "/"), "w");
    }

    #[test]
    fn an_empty_table_answers_404() {
        let t = RoutingTable::build(&[], &[], &[], None);
        assert_eq!(t.route("h", "/"), Route::NotFound);
        assert_eq!(t.host_count(), 0);
    }
}
