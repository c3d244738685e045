//! The registry credential keyring, as upstream's kubelet builds it from a pod's
//! `imagePullSecrets` (`pkg/credentialprovider`: `secrets.MakeDockerKeyring`,
//! `BasicDockerKeyring.Add` and `Lookup`, `URLsMatch`).
//!
//! - A Secret contributes the entries of its `.dockerconfigjson` key (`{"auths": {…}}`, type
//!   `kubernetes.io/dockerconfigjson`) or else of its `.dockercfg` key (the bare map, type
//!   `kubernetes.io/dockercfg`). Each entry has `username`/`password`, or `auth`
//!   (base64 `user:password`), which wins when present.
//! - An entry's key is a registry location (`registry.example:5000`, `https://index.docker.io/v1/`,
//!   `*.example.com/team`): the scheme is dropped, a `/v1/` or `/v2/` path prefix means the whole
//!   host, and host labels may be globs (`*` and `?` within one label).
//! - [`Keyring::lookup`] of a normalised repository (`docker.io/library/busybox`) returns every
//!   matching credential, most specific location first (the index is sorted in reverse); a
//!   location matches when the hosts have as many labels, each label matches, the ports are
//!   equal and the location's path is a prefix of the repository's path. Docker Hub images also
//!   match credentials stored for `index.docker.io`.
//!
//! The kubelet tries each credential in turn and stops at the first successful pull; with no
//! match it pulls without credentials (`kuberuntime_image.go` `PullImage`).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The Secret data key of a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// The Secret data key of a `kubernetes.io/dockercfg` Secret.
pub const DOCKER_CFG_KEY: &str = ".dockercfg";
/// Where Docker Hub credentials are stored (`https://index.docker.io/v1/` in a docker config).
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Registry credentials, as the CRI `AuthConfig` carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

/// Why a Secret's registry configuration could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyringError {
    /// The JSON under `.dockerconfigjson` or `.dockercfg` is not a docker config.
    #[error("{key} is not a valid docker config: {detail}")]
    Json { key: &'static str, detail: String },
    /// An entry's `auth` is not base64 of `user:password`.
    #[error("the auth field of {location} is not base64 of user:password")]
    Auth { location: String },
}

/// Credentials by registry location, in the order [`Keyring::lookup`] tries them.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    /// Location key (`host[:port][/path]`) → credentials added for it, in order.
    creds: BTreeMap<String, Vec<Credential>>,
}

#[derive(serde::Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(serde::Deserialize)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

impl Keyring {
    /// An empty keyring: every lookup finds nothing.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Adds the registry configuration of one Secret, given its decoded `data`: the
    /// `.dockerconfigjson` key if present, else `.dockercfg`; a Secret with neither adds
    /// nothing. On error nothing of that Secret is added.
    pub fn add_secret_data(
        &mut self,
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<(), KeyringError> {
        let entries = if let Some(raw) = data.get(DOCKER_CONFIG_JSON_KEY) {
            let parsed: ConfigJson =
                serde_json::from_slice(raw).map_err(|e| KeyringError::Json {
                    key: DOCKER_CONFIG_JSON_KEY,
                    detail: e.to_string(),
                })?;
            parsed.auths
        } else if let Some(raw) = data.get(DOCKER_CFG_KEY) {
            serde_json::from_slice(raw).map_err(|e| KeyringError::Json {
                key: DOCKER_CFG_KEY,
                detail: e.to_string(),
            })?
        } else {
            return Ok(());
        };
        let mut resolved = Vec::with_capacity(entries.len());
        for (location, entry) in entries {
            let credential = if entry.auth.is_empty() {
                Credential {
                    username: entry.username,
                    password: entry.password,
                }
            } else {
                decode_auth(&entry.auth).ok_or_else(|| KeyringError::Auth {
                    location: location.clone(),
                })?
            };
            resolved.push((location, credential));
        }
        for (location, credential) in resolved {
            self.add(&location, credential);
        }
        Ok(())
    }

    /// Adds one credential for a registry location (`BasicDockerKeyring.Add`); a location that
    /// is not a URL without its scheme is ignored.
    pub fn add(&mut self, location: &str, credential: Credential) {
        let Some(key) = location_key(location) else {
            return;
        };
        self.creds.entry(key).or_default().push(credential);
    }

    /// Whether no credential was added.
    pub fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }

    /// The credentials for a normalised repository (`docker.io/library/busybox`, no tag or
    /// digest), most specific location first; empty when none matches.
    pub fn lookup(&self, repository: &str) -> Vec<Credential> {
        let mut found = Vec::new();
        // Reverse order of the sorted keys: `host/path/deeper` before `host/path` before `host`.
        for (key, creds) in self.creds.iter().rev() {
            if urls_match(key, repository) {
                found.extend(creds.iter().cloned());
            }
        }
        if found.is_empty()
            && is_default_registry(repository)
            && let Some(creds) = self.creds.get(DEFAULT_REGISTRY_HOST)
        {
            found.extend(creds.iter().cloned());
        }
        found
    }
}

/// `user:password` from a docker config's `auth` field.
fn decode_auth(auth: &str) -> Option<Credential> {
    let bytes = STANDARD.decode(auth.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (username, password) = text.split_once(':')?;
    Some(Credential {
        username: username.to_string(),
        password: password.trim_matches('\0').to_string(),
    })
}

/// A location without scheme, with `/v1/` and `/v2/` path prefixes (the registry API root)
/// meaning the host itself: `https://index.docker.io/v1/` → `index.docker.io`.
fn location_key(location: &str) -> Option<String> {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains(['@', ' ', '?', '#']) {
        return None;
    }
    let path = if path.starts_with("/v1/") || path.starts_with("/v2/") {
        &path[3..]
    } else {
        path
    };
    if path.is_empty() || path == "/" {
        Some(host.to_string())
    } else {
        Some(format!("{host}{path}"))
    }
}

/// Whether the repository is on Docker Hub (`isDefaultRegistryMatch`): no registry part, or
/// `docker.io`, or a first part without `.` or `:`.
fn is_default_registry(repository: &str) -> bool {
    match repository.split_once('/') {
        None => !repository.is_empty(),
        Some(("", _)) => false,
        Some(("docker.io", _)) => true,
        Some((first, _)) => !first.contains(['.', ':']),
    }
}

/// `URLsMatchStr(glob, target)`: same number of host labels, each matching its glob, equal
/// ports, and the glob's path a prefix of the target's.
fn urls_match(glob: &str, target: &str) -> bool {
    let split = |s: &str| -> (String, String) {
        match s.find('/') {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.to_string(), String::new()),
        }
    };
    let (glob_host, glob_path) = split(glob);
    let (target_host, target_path) = split(target);
    let host_port = |h: &str| -> (String, String) {
        match h.rsplit_once(':') {
            Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
                (host.to_string(), port.to_string())
            }
            _ => (h.to_string(), String::new()),
        }
    };
    let (glob_host, glob_port) = host_port(&glob_host);
    let (target_host, target_port) = host_port(&target_host);
    if glob_port != target_port {
        return false;
    }
    let glob_labels: Vec<&str> = glob_host.split('.').collect();
    let target_labels: Vec<&str> = target_host.split('.').collect();
    if glob_labels.len() != target_labels.len() {
        return false;
    }
    if !glob_labels
        .iter()
        .zip(&target_labels)
        .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()))
    {
        return false;
    }
    target_path.starts_with(&glob_path)
}

/// A shell glob over one host label (`filepath.Match` without character classes): `*` any run,
/// `?` one character.
fn glob_match(glob: &[u8], text: &[u8]) -> bool {
    // Iterative matching with one backtrack point: linear in practice, never recursive.
    let (mut g, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, t));
                g += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((sg, st)) => {
                    g = sg + 1;
                    t = st + 1;
                    star = Some((sg, st + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(user: &str) -> Credential {
        Credential {
            username: user.into(),
            password: format!("{user}-pw"),
        }
    }

    fn ring(locations: &[(&str, &str)]) -> Keyring {
        let mut k = Keyring::new();
        for (loc, user) in locations {
            k.add(loc, cred(user));
        }
        k
    }

    fn users(k: &Keyring, repo: &str) -> Vec<String> {
        k.lookup(repo).into_iter().map(|c| c.username).collect()
    }

    #[test]
    fn locations_match_by_host_port_and_path_prefix_most_specific_first() {
        let k = ring(&[
            ("registry.local:5443", "host"),
            ("registry.local:5443/team", "team"),
            ("https://registry.local:5443/team/app", "app"),
            ("other.local", "other"),
        ]);
        let table: &[(&str, &[&str])] = &[
            ("registry.local:5443/team/app", &["app", "team", "host"]),
            ("registry.local:5443/team/tool", &["team", "host"]),
            ("registry.local:5443/public/x", &["host"]),
            ("registry.local/team/app", &[]),
            ("registry.local:5000/team/app", &[]),
            ("other.local/x", &["other"]),
            ("sub.other.local/x", &[]),
        ];
        for (repo, want) in table {
            assert_eq!(users(&k, repo), *want, "{repo}");
        }
    }

    #[test]
    fn host_labels_may_be_globs() {
        let k = ring(&[("*.example.com", "wild"), ("reg?.example.org", "q")]);
        assert_eq!(users(&k, "a.example.com/x"), ["wild"]);
        assert_eq!(users(&k, "a.b.example.com/x"), Vec::<String>::new());
        assert_eq!(users(&k, "example.com/x"), Vec::<String>::new());
        // A `?` starts a URL query upstream: such a location names no host here.
        assert_eq!(users(&k, "reg1.example.org/x"), Vec::<String>::new());
        let k = ring(&[("reg-*.example.org:5000", "port")]);
        assert_eq!(users(&k, "reg-eu.example.org:5000/x"), ["port"]);
        assert_eq!(users(&k, "reg-eu.example.org/x"), Vec::<String>::new());
    }

    #[test]
    fn docker_hub_images_find_index_docker_io_credentials() {
        let k = ring(&[("https://index.docker.io/v1/", "hub")]);
        assert_eq!(users(&k, "docker.io/library/busybox"), ["hub"]);
        assert_eq!(users(&k, "library/busybox"), ["hub"]);
        assert_eq!(users(&k, "quay.io/org/x"), Vec::<String>::new());
        let k = ring(&[("docker.io", "plain")]);
        assert_eq!(users(&k, "docker.io/library/busybox"), ["plain"]);
    }

    #[test]
    fn secrets_of_both_types_are_read_and_auth_wins_over_username() {
        let auth = STANDARD.encode("alice:s3cret");
        let json = format!(
            r#"{{"auths":{{"registry.local:5443":{{"username":"ignored","password":"x","auth":"{auth}"}}}}}}"#
        );
        let mut k = Keyring::new();
        let data = BTreeMap::from([(DOCKER_CONFIG_JSON_KEY.to_string(), json.into_bytes())]);
        assert_eq!(k.add_secret_data(&data), Ok(()));
        let cfg = r#"{"old.local":{"username":"bob","password":"pw","email":"b@x"}}"#;
        let data = BTreeMap::from([(DOCKER_CFG_KEY.to_string(), cfg.as_bytes().to_vec())]);
        assert_eq!(k.add_secret_data(&data), Ok(()));
        assert_eq!(
            k.lookup("registry.local:5443/private/busybox"),
            [Credential {
                username: "alice".into(),
                password: "s3cret".into()
            }]
        );
        assert_eq!(users(&k, "old.local/app"), ["bob"]);
        // A Secret of another kind adds nothing.
        let other = BTreeMap::from([("token".to_string(), b"x".to_vec())]);
        assert_eq!(k.add_secret_data(&other), Ok(()));
    }

    #[test]
    fn bad_secret_data_is_an_error_and_adds_nothing() {
        let mut k = Keyring::new();
        let bad_json = BTreeMap::from([(DOCKER_CONFIG_JSON_KEY.to_string(), b"{".to_vec())]);
        assert!(matches!(
            k.add_secret_data(&bad_json),
            Err(KeyringError::Json { .. })
        ));
        let bad_auth = BTreeMap::from([(
            DOCKER_CONFIG_JSON_KEY.to_string(),
            br#"{"auths":{"a.local":{"auth":"%%%"},"b.local":{"username":"u"}}}"#.to_vec(),
        )]);
        assert_eq!(
            k.add_secret_data(&bad_auth),
            Err(KeyringError::Auth {
                location: "a.local".into()
            })
        );
        assert!(k.is_empty());
    }

    #[test]
    fn glob_matching_never_panics_on_odd_input() {
        for (g, t) in [
            ("", ""),
            ("*", ""),
            ("**", "a"),
            ("a*b*c", "abbbc"),
            ("?", ""),
        ] {
            let _ = glob_match(g.as_bytes(), t.as_bytes());
        }
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(!glob_match(b"a*b", b"ac"));
    }
}
