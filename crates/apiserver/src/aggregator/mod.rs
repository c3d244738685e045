//! API aggregation (kube-aggregator): an `apiregistration.k8s.io/v1` APIService with a
//! `spec.service` hands its group-version to another server. Requests under
//! `/apis/GROUP/VERSION` are authenticated, limited and authorized here, then proxied to a ready
//! endpoint of the Service over TLS (the server's certificate checked against `caBundle` for the
//! name `SERVICE.NAMESPACE.svc`, or not at all with `insecureSkipTLSVerify`), presenting the
//! front proxy's client certificate and naming the user in `X-Remote-User`/`X-Remote-Group`/
//! `X-Remote-Extra-*` headers; the aggregated server trusts those through the CA published in
//! `kube-system/extension-apiserver-authentication`. Watches stream and upgrades are spliced.
//!
//! Shaped as the service proxy is: `controller` watches the APIServices, keeps the table of
//! remote group-versions ([`Aggregator`]) and their `Available` condition (upstream's checks:
//! Service, port, endpoints, then a discovery GET); `model` holds the pure parts (spec,
//! conditions, identity headers, discovery merging); `proxy` does the HTTP.

mod controller;
pub(crate) mod model;
mod proxy;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use tandem_netproxy::Forwarder;
use tandem_netproxy::tls::AnyServerCert;

pub(crate) use controller::{ensure_authentication_config_map, start};
pub(crate) use proxy::serve;

use model::{RemoteDiscovery, RemoteSpec};

/// How long the front proxy's client certificate is valid; it is issued again at every start.
const FRONT_PROXY_CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The front proxy's identity towards aggregated servers: its client certificate and key, and
/// the CA that signed it (published for the aggregated servers).
pub(crate) struct FrontProxy {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    pub ca_pem: String,
    pub client_ca_pem: String,
}

impl FrontProxy {
    /// Issues the front proxy's client certificate from `pki`.
    pub fn new(pki: &crate::pki::Pki) -> Result<FrontProxy, crate::server::StartError> {
        let (cert, key) = pki.issue_front_proxy_client(FRONT_PROXY_CERT_VALIDITY)?;
        Ok(FrontProxy {
            chain: CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<_, _>>()?,
            key: PrivateKeyDer::from_pem_slice(key.as_bytes())?,
            ca_pem: pki.front_proxy_ca_pem.clone(),
            client_ca_pem: pki.ca_pem.clone(),
        })
    }

    /// The TLS client configuration of calls to `spec`'s server.
    fn tls_config(&self, spec: &RemoteSpec) -> Result<rustls::ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if spec.insecure_skip_tls_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServerCert::new(provider)))
        } else {
            let roots = crate::webhook::trust_roots(&spec.ca_bundle)?;
            builder.with_root_certificates(roots)
        };
        let mut config = builder
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// One group-version served by an aggregated server.
pub(crate) struct Remote {
    pub spec: RemoteSpec,
    /// How requests reach it, or why they cannot (an unreadable `caBundle`).
    forwarder: Result<Forwarder, String>,
    /// The `Available` condition as last checked (or read from the stored object).
    available: AtomicBool,
    /// The server's `APIResourceList` as last read, and whether the last read failed.
    discovery: Mutex<(Option<Value>, bool)>,
}

impl Remote {
    fn new(spec: RemoteSpec, front_proxy: Option<&FrontProxy>, available: bool) -> Remote {
        let forwarder = match front_proxy {
            Some(fp) => fp.tls_config(&spec).map(|config| {
                Forwarder::new()
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_tls(Arc::new(config))
                    .with_server_name(format!("{}.{}.svc", spec.service, spec.namespace))
            }),
            None => Err("the front proxy has no client certificate".to_string()),
        };
        Remote {
            spec,
            forwarder,
            available: AtomicBool::new(available),
            discovery: Mutex::new((None, false)),
        }
    }

    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Relaxed)
    }

    fn discovery(&self) -> RemoteDiscovery {
        let (resources, stale) = self
            .discovery
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        RemoteDiscovery {
            group: self.spec.group.clone(),
            version: self.spec.version.clone(),
            group_priority: self.spec.group_priority,
            version_priority: self.spec.version_priority,
            resources,
            stale,
        }
    }
}

/// Remote group-versions by (group, version).
type Table = HashMap<(String, String), Arc<Remote>>;

/// Adds the identity headers of `name` in `groups` (with `extra`) to `headers`
/// ([`model::identity_headers`]); a value a header cannot carry is left out.
fn add_identity(
    headers: &mut http::HeaderMap,
    name: &str,
    groups: &[String],
    extra: &std::collections::BTreeMap<String, Vec<String>>,
) {
    for (name, value) in model::identity_headers(name, groups, extra) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            headers.append(name, value);
        }
    }
}

/// `https://HOST:PORT` of a resolved endpoint, an IPv6 address bracketed.
fn base_url(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// The remote group-versions, swapped whole when an APIService changes.
#[derive(Default)]
pub(crate) struct Aggregator {
    front_proxy: Option<FrontProxy>,
    remotes: RwLock<Arc<Table>>,
}

impl Aggregator {
    pub fn new(front_proxy: FrontProxy) -> Aggregator {
        Aggregator {
            front_proxy: Some(front_proxy),
            remotes: RwLock::default(),
        }
    }

    fn table(&self) -> Arc<Table> {
        self.remotes
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The aggregated server of `group`/`version`, if one serves it.
    pub fn remote(&self, group: &str, version: &str) -> Option<Arc<Remote>> {
        let table = self.table();
        if table.is_empty() {
            return None;
        }
        table
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }

    /// What the aggregated servers' discovery said, for merging into `/apis`.
    pub fn discovery(&self) -> Vec<RemoteDiscovery> {
        self.table().values().map(|r| r.discovery()).collect()
    }

    /// Replaces the table with the remote APIServices among `api_services`, keeping the
    /// remotes whose spec did not change (and what they know).
    fn rebuild(&self, api_services: &[Value]) {
        let old = self.table();
        let mut next = HashMap::new();
        for svc in api_services {
            let Some(spec) = RemoteSpec::of(svc) else {
                continue;
            };
            let key = (spec.group.clone(), spec.version.clone());
            let remote = match old.get(&key) {
                Some(r) if r.spec == spec => {
                    r.available
                        .store(model::is_available(svc), Ordering::Relaxed);
                    r.clone()
                }
                _ => Arc::new(Remote::new(
                    spec,
                    self.front_proxy.as_ref(),
                    model::is_available(svc),
                )),
            };
            next.insert(key, remote);
        }
        let mut guard = self.remotes.write().unwrap_or_else(|p| p.into_inner());
        *guard = Arc::new(next);
    }
}
