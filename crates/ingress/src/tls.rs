//! The certificate for each TLS handshake, chosen by SNI name from the `spec.tls` entries of our
//! Ingresses (Kubernetes Ingress documentation, "TLS"): each entry names hosts and a
//! `kubernetes.io/tls` Secret in the Ingress's namespace whose `tls.crt` (PEM chain) and
//! `tls.key` (PEM key: PKCS#8, PKCS#1 or SEC1) are served for those hosts.
//!
//! - A name listed exactly wins over a wildcard entry (`*.example.com`, one label, as host
//!   rules); among entries for the same name the oldest Ingress wins (ingress-nginx's order).
//! - An entry without hosts gives the certificate for handshakes no entry names, in place of
//!   the default certificate (ingress-nginx uses such a Secret for its catch-all server).
//! - Otherwise — no SNI (a client dialling an address), an unknown name, a Secret that is
//!   missing or does not parse — the default certificate answers: self-signed at start, like
//!   ingress-nginx's "Kubernetes Ingress Controller Fake Certificate".

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The subject common name of the default certificate, as ingress-nginx names its own.
pub const FAKE_CERT_COMMON_NAME: &str = "Kubernetes Ingress Controller Fake Certificate";
/// The Secret type whose data the TLS entries use.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// Why a certificate could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot generate the default certificate")]
    Generate(#[source] rcgen::Error),
    #[error("secret {0} has no {1}")]
    Missing(String, &'static str),
    #[error("secret {secret}: tls.crt holds no PEM certificate")]
    NoCertificate { secret: String },
    #[error("secret {secret}: tls.crt is not valid PEM")]
    CertificatePem {
        secret: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("secret {secret}: tls.key is not a PEM private key")]
    KeyPem {
        secret: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("secret {secret}: unsupported private key")]
    Key {
        secret: String,
        #[source]
        source: rustls::Error,
    },
}

/// A certificate with where it came from (`None`: the default one).
#[derive(Clone)]
pub struct Selected {
    pub key: Arc<CertifiedKey>,
    /// `namespace/name` of the Secret.
    pub secret: Option<String>,
}

impl fmt::Debug for Selected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selected")
            .field("secret", &self.secret)
            .finish()
    }
}

/// Names to certificates; see the module documentation.
#[derive(Clone, Debug)]
pub struct TlsTable {
    exact: HashMap<String, Selected>,
    /// Keyed by what follows `*.`.
    wildcard: HashMap<String, Selected>,
    fallback: Selected,
}

impl TlsTable {
    /// A table that answers every handshake with `default`.
    pub fn new(default: Arc<CertifiedKey>) -> TlsTable {
        TlsTable {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            fallback: Selected {
                key: default,
                secret: None,
            },
        }
    }

    /// Builds the table from our `ingresses` and the TLS Secrets (`secrets`, any namespace);
    /// returns it with one message per Secret that is missing or cannot be used.
    pub fn build(
        ingresses: &[&Ingress],
        secrets: &[&Secret],
        default: Arc<CertifiedKey>,
    ) -> (TlsTable, Vec<String>) {
        let mut table = TlsTable::new(default);
        let mut problems = Vec::new();
        let by_name: HashMap<(&str, &str), &Secret> = secrets
            .iter()
            .filter_map(|s| {
                Some((
                    (
                        s.metadata.namespace.as_deref()?,
                        s.metadata.name.as_deref()?,
                    ),
                    *s,
                ))
            })
            .collect();
        let mut sorted = ingresses.to_vec();
        sorted.sort_by_cached_key(|i| {
            (
                i.metadata.creation_timestamp.clone(),
                i.metadata.namespace.clone(),
                i.metadata.name.clone(),
            )
        });
        let mut parsed: HashMap<String, Option<Arc<CertifiedKey>>> = HashMap::new();
        let mut fallback_set = false;
        for ing in sorted {
            let ns = ing.metadata.namespace.as_deref().unwrap_or_default();
            let entries = ing.spec.as_ref().and_then(|s| s.tls.as_deref());
            for entry in entries.unwrap_or_default() {
                let Some(name) = entry.secret_name.as_deref().filter(|n| !n.is_empty()) else {
                    continue;
                };
                let id = format!("{ns}/{name}");
                let key = parsed
                    .entry(id.clone())
                    .or_insert_with(|| match by_name.get(&(ns, name)) {
                        None => {
                            problems.push(format!("secret {id} not found"));
                            None
                        }
                        Some(secret) => match certified_key(&id, secret) {
                            Ok(k) => Some(k),
                            Err(e) => {
                                problems.push(error_chain(&e));
                                None
                            }
                        },
                    })
                    .clone();
                let Some(key) = key else { continue };
                let selected = Selected {
                    key,
                    secret: Some(id),
                };
                let hosts = entry.hosts.as_deref().unwrap_or_default();
                if hosts.is_empty() && !fallback_set {
                    table.fallback = selected.clone();
                    fallback_set = true;
                }
                for host in hosts {
                    let host = host.to_ascii_lowercase();
                    let slot = match host.strip_prefix("*.") {
                        Some(suffix) => table.wildcard.entry(suffix.to_string()),
                        None => table.exact.entry(host),
                    };
                    slot.or_insert_with(|| selected.clone());
                }
            }
        }
        (table, problems)
    }

    /// The certificate for a handshake that asked for `server_name` (SNI), or gave none.
    pub fn select(&self, server_name: Option<&str>) -> &Selected {
        let Some(name) = server_name else {
            return &self.fallback;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.exact
            .get(&name)
            .or_else(|| {
                let (first, rest) = name.split_once('.')?;
                if first.is_empty() {
                    return None;
                }
                self.wildcard.get(rest)
            })
            .unwrap_or(&self.fallback)
    }
}

/// The rustls side: answers each handshake from the current [`TlsTable`], which the controller
/// swaps as Ingresses and Secrets change.
#[derive(Clone)]
pub struct SniResolver {
    table: Arc<RwLock<Arc<TlsTable>>>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SniResolver")
    }
}

impl SniResolver {
    pub fn new(table: TlsTable) -> SniResolver {
        SniResolver {
            table: Arc::new(RwLock::new(Arc::new(table))),
        }
    }

    /// Replaces the table; handshakes from now on use the new one.
    pub fn set(&self, table: TlsTable) {
        let mut slot = self.table.write().unwrap_or_else(|p| p.into_inner());
        *slot = Arc::new(table);
    }

    /// The table handshakes use now.
    pub fn current(&self) -> Arc<TlsTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current().select(hello.server_name()).key.clone())
    }
}

/// A new self-signed certificate like ingress-nginx's default one: subject
/// `O=Acme Co, CN=Kubernetes Ingress Controller Fake Certificate`, for `ingress.local`.
pub fn fake_certificate() -> Result<Arc<CertifiedKey>, CertError> {
    let mut params = rcgen::CertificateParams::new(vec!["ingress.local".to_string()])
        .map_err(CertError::Generate)?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::OrganizationName, "Acme Co");
    dn.push(rcgen::DnType::CommonName, FAKE_CERT_COMMON_NAME);
    params.distinguished_name = dn;
    let key = rcgen::KeyPair::generate().map_err(CertError::Generate)?;
    let cert = params.self_signed(&key).map_err(CertError::Generate)?;
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&der).map_err(|source| CertError::Key {
            secret: "(default certificate)".into(),
            source,
        })?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// The certificate chain and key of a `kubernetes.io/tls` Secret (`id` names it in errors).
pub fn certified_key(id: &str, secret: &Secret) -> Result<Arc<CertifiedKey>, CertError> {
    let data = secret.data.as_ref();
    let crt = data
        .and_then(|d| d.get("tls.crt"))
        .ok_or_else(|| CertError::Missing(id.to_string(), "tls.crt"))?;
    let key = data
        .and_then(|d| d.get("tls.key"))
        .ok_or_else(|| CertError::Missing(id.to_string(), "tls.key"))?;
    let chain = CertificateDer::pem_slice_iter(&crt.0)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| CertError::CertificatePem {
            secret: id.to_string(),
            source,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            secret: id.to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key.0).map_err(|source| CertError::KeyPem {
        secret: id.to_string(),
        source,
    })?;
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|source| CertError::Key {
            secret: id.to_string(),
            source,
        })?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// An error and its causes on one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use serde_json::json;

    /// A `kubernetes.io/tls` Secret `name` with a new self-signed certificate for `hosts`.
    fn tls_secret(name: &str, hosts: &[&str]) -> Secret {
        let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(names)
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            type_: Some(TLS_SECRET_TYPE.into()),
            data: Some(
                [
                    ("tls.crt".to_string(), ByteString(cert.pem().into_bytes())),
                    (
                        "tls.key".to_string(),
                        ByteString(key.serialize_pem().into_bytes()),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    fn ingress(name: &str, created: &str, tls: serde_json::Value) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
            "spec": {"tls": tls}
        }))
        .expect("ingress")
    }

    fn source(t: &TlsTable, sni: Option<&str>) -> Option<String> {
        t.select(sni).secret.clone()
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-02T00:00:00Z";

    #[test]
    fn sni_name_selects_the_secret_of_its_tls_entry() {
        let a = tls_secret("a-tls", &["a.example.com"]);
        let b = tls_secret("b-tls", &["b.example.com"]);
        let ing = ingress(
            "i",
            T0,
            json!([{"hosts": ["a.example.com"], "secretName": "a-tls"},
                   {"hosts": ["b.example.com"], "secretName": "b-tls"}]),
        );
        let (t, problems) = TlsTable::build(&[&ing], &[&a, &b], fake_certificate().expect("fake"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            source(&t, Some("a.example.com")).as_deref(),
            Some("default/a-tls")
        );
        assert_eq!(
            source(&t, Some("B.Example.com")).as_deref(),
            Some("default/b-tls")
        );
        assert_eq!(source(&t, Some("c.example.com")), None);
        assert_eq!(source(&t, None), None);
    }

    #[test]
    fn the_selected_certificate_is_the_secret_certificate() {
        let a = tls_secret("a-tls", &["a.example.com"]);
        let ing = ingress(
            "i",
            T0,
            json!([{"hosts": ["a.example.com"], "secretName": "a-tls"}]),
        );
        let (t, _) = TlsTable::build(&[&ing], &[&a], fake_certificate().expect("fake"));
        let pem = &a.data.as_ref().expect("data")["tls.crt"].0;
        let der = CertificateDer::from_pem_slice(pem).expect("pem");
        assert_eq!(t.select(Some("a.example.com")).key.cert[0], der);
        assert_ne!(t.select(Some("other")).key.cert[0], der);
    }

    #[test]
    fn wildcard_entry_covers_one_label_and_exact_entry_wins() {
        let wild = tls_secret("wild", &["*.example.com"]);
        let api = tls_secret("api", &["api.example.com"]);
        let ing = ingress(
            "i",
            T0,
            json!([{"hosts": ["*.example.com"], "secretName": "wild"},
                   {"hosts": ["api.example.com"], "secretName": "api"}]),
        );
        let (t, _) = TlsTable::build(&[&ing], &[&wild, &api], fake_certificate().expect("fake"));
        assert_eq!(
            source(&t, Some("www.example.com")).as_deref(),
            Some("default/wild")
        );
        assert_eq!(
            source(&t, Some("api.example.com")).as_deref(),
            Some("default/api")
        );
        assert_eq!(source(&t, Some("example.com")), None);
        assert_eq!(source(&t, Some("a.b.example.com")), None);
    }

    #[test]
    fn the_oldest_ingress_wins_a_host_named_twice() {
        let old = tls_secret("old", &["h.test"]);
        let new = tls_secret("new", &["h.test"]);
        let i_new = ingress("n", T1, json!([{"hosts": ["h.test"], "secretName": "new"}]));
        let i_old = ingress("o", T0, json!([{"hosts": ["h.test"], "secretName": "old"}]));
        let (t, _) = TlsTable::build(
            &[&i_new, &i_old],
            &[&old, &new],
            fake_certificate().expect("fake"),
        );
        assert_eq!(source(&t, Some("h.test")).as_deref(), Some("default/old"));
    }

    #[test]
    fn an_entry_without_hosts_replaces_the_default_certificate() {
        let any = tls_secret("any", &["whatever"]);
        let ing = ingress("i", T0, json!([{"secretName": "any"}]));
        let (t, _) = TlsTable::build(&[&ing], &[&any], fake_certificate().expect("fake"));
        assert_eq!(source(&t, None).as_deref(), Some("default/any"));
        assert_eq!(source(&t, Some("x.test")).as_deref(), Some("default/any"));
    }

    #[test]
    fn missing_or_broken_secrets_fall_back_to_the_default_and_are_reported() {
        let mut broken = tls_secret("broken", &["b.test"]);
        if let Some(d) = broken.data.as_mut() {
            d.insert("tls.key".into(), ByteString(b"not a key".to_vec()));
        }
        let ing = ingress(
            "i",
            T0,
            json!([{"hosts": ["m.test"], "secretName": "missing"},
                   {"hosts": ["b.test"], "secretName": "broken"}]),
        );
        let (t, problems) = TlsTable::build(&[&ing], &[&broken], fake_certificate().expect("fake"));
        assert_eq!(source(&t, Some("m.test")), None);
        assert_eq!(source(&t, Some("b.test")), None);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("default/missing not found"))
        );
        assert!(problems.iter().any(|p| p.contains("default/broken")));
    }

    #[test]
    fn secrets_of_another_namespace_are_not_used() {
        let mut s = tls_secret("a-tls", &["a.test"]);
        s.metadata.namespace = Some("other".into());
        let ing = ingress(
            "i",
            T0,
            json!([{"hosts": ["a.test"], "secretName": "a-tls"}]),
        );
        let (t, problems) = TlsTable::build(&[&ing], &[&s], fake_certificate().expect("fake"));
        assert_eq!(source(&t, Some("a.test")), None);
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn the_default_certificate_says_it_is_the_fake_one() {
        let fake = fake_certificate().expect("fake");
        let der = fake.cert[0].as_ref();
        let needle = FAKE_CERT_COMMON_NAME.as_bytes();
        assert!(der.windows(needle.len()).any(|w| w == needle));
    }
}
