//! The model of k3s' `registries.yaml`:
//!
//! ```yaml
//! mirrors:
//!   docker.io:                        # a registry as image references name it
//!     endpoint: ["https://mirror.local:5443"]
//! configs:
//!   "mirror.local:5443":              # a host tandem contacts (registry or mirror)
//!     auth: {username: u, password: p}
//!     tls: {ca_file: /ca.crt, cert_file: /c.crt, key_file: /c.key, insecure_skip_verify: false}
//! ```
//!
//! `rewrite` rules of a mirror are read but containerd 1.6 cannot apply them (they are a k3s
//! extension of containerd): [`RegistriesConfig::warnings`] says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `registries.yaml`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistriesConfig {
    /// Registry name (`docker.io`, `registry.local:5000`, `*` for every registry) → mirrors.
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Host (`mirror.local:5443`) → credentials and TLS settings.
    #[serde(default)]
    pub configs: BTreeMap<String, HostConfig>,
}

/// The mirrors of one registry, tried in order before the registry itself.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// Endpoint URLs (`https://host:port`, an optional path is the registry API's prefix);
    /// a bare `host:port` means `https://host:port`.
    #[serde(default)]
    pub endpoint: Vec<String>,
    /// k3s' repository rewrites (regex → replacement); not applied by containerd 1.6.
    #[serde(default)]
    pub rewrite: BTreeMap<String, String>,
}

/// Settings for one host.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(default)]
    pub auth: Option<Auth>,
    #[serde(default)]
    pub tls: Option<Tls>,
}

/// Credentials for a host: `username`/`password`, `auth` (base64 `user:password`) or an
/// `identity_token`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Auth {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub auth: String,
    #[serde(default)]
    pub identity_token: String,
}

/// TLS settings for a host.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// Why a registry configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryConfigError {
    #[error("cannot read the registry configuration {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the registry configuration {} is not valid: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
    /// A name or endpoint that would escape the `certs.d` directory or break the TOML.
    #[error("registry {name:?}: {detail}")]
    Invalid { name: String, detail: String },
    /// A TLS file that is not there.
    #[error("registry {name:?}: {} does not exist", path.display())]
    MissingFile { name: String, path: PathBuf },
}

impl RegistriesConfig {
    /// Reads and checks a `registries.yaml` (an empty file is an empty configuration).
    pub fn load(path: &Path) -> Result<RegistriesConfig, RegistryConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| RegistryConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let config =
            RegistriesConfig::parse(&text).map_err(|detail| RegistryConfigError::Parse {
                path: path.to_path_buf(),
                detail,
            })?;
        config.validate()?;
        for (name, host) in &config.configs {
            let tls = host.tls.iter();
            for file in tls
                .flat_map(|t| [&t.ca_file, &t.cert_file, &t.key_file])
                .flatten()
            {
                if !file.is_file() {
                    return Err(RegistryConfigError::MissingFile {
                        name: name.clone(),
                        path: file.clone(),
                    });
                }
            }
        }
        Ok(config)
    }

    /// Parses the YAML text (no file checks).
    pub fn parse(text: &str) -> Result<RegistriesConfig, String> {
        if text.trim().is_empty() {
            return Ok(RegistriesConfig::default());
        }
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks names and endpoints: a registry or host name is a host with an optional port
    /// (or `*` for mirrors), an endpoint an `http(s)://` URL or a bare host; TLS files are
    /// absolute paths; a client certificate comes with its key.
    pub fn validate(&self) -> Result<(), RegistryConfigError> {
        let invalid = |name: &str, detail: &str| RegistryConfigError::Invalid {
            name: name.to_string(),
            detail: detail.to_string(),
        };
        for (name, mirror) in &self.mirrors {
            if name != "*" && !is_host(name) {
                return Err(invalid(name, "not a registry host[:port]"));
            }
            for endpoint in &mirror.endpoint {
                if endpoint_url(endpoint).is_none() {
                    return Err(invalid(
                        name,
                        &format!("endpoint {endpoint:?} is not an http(s) URL"),
                    ));
                }
            }
        }
        for (name, host) in &self.configs {
            if !is_host(name) {
                return Err(invalid(name, "not a registry host[:port]"));
            }
            if let Some(tls) = &host.tls {
                for file in [&tls.ca_file, &tls.cert_file, &tls.key_file]
                    .into_iter()
                    .flatten()
                {
                    let text = file.to_str().unwrap_or_default();
                    if !file.is_absolute() || text.is_empty() || text.contains(['"', '\\', '\n']) {
                        return Err(invalid(
                            name,
                            &format!("{} must be a plain absolute path", file.display()),
                        ));
                    }
                }
                if tls.cert_file.is_some() != tls.key_file.is_some() {
                    return Err(invalid(name, "cert_file and key_file go together"));
                }
            }
        }
        Ok(())
    }

    /// What the configuration asks that containerd 1.6 cannot do.
    pub fn warnings(&self) -> Vec<String> {
        self.mirrors
            .iter()
            .filter(|(_, m)| !m.rewrite.is_empty())
            .map(|(name, _)| {
                format!(
                    "registry {name:?}: mirror rewrites are a k3s extension containerd 1.6 does not apply; they are ignored"
                )
            })
            .collect()
    }
}

/// Whether `name` is `host` or `host:port` made of DNS characters (or an IPv6 literal in
/// brackets), so that it is safe as a directory name and inside TOML strings.
pub(super) fn is_host(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 || name.starts_with('.') || name.contains("..") {
        return false;
    }
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']' | b'_'))
}

/// An endpoint as `(scheme, host, path)`; a bare host gets `https`.
pub(super) fn endpoint_url(endpoint: &str) -> Option<(&'static str, String, String)> {
    let (scheme, rest) = if let Some(r) = endpoint.strip_prefix("https://") {
        ("https", r)
    } else if let Some(r) = endpoint.strip_prefix("http://") {
        ("http", r)
    } else if endpoint.contains("://") {
        return None;
    } else {
        ("https", endpoint)
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    let path_ok = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'-' | b'_'));
    (is_host(host) && path_ok).then(|| (scheme, host.to_string(), path.to_string()))
}
