//! Joining a cluster with a token — the kubelet's TLS bootstrap
//! (`pkg/kubelet/certificate/bootstrap`) and client certificate rotation (client-go's
//! `util/certificate` manager), with k3s's secure join token.
//!
//! - [`parse_join_token`]: `K10<sha256 of the CA certificate DER>::<token-id>.<token-secret>`,
//!   the secret part a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`).
//! - [`discover_ca`]: a TLS handshake that trusts nothing and only reads the certificates the
//!   server presents; the one whose sha256 is the token's becomes the CA. The token's hash is
//!   what authenticates it, so a man in the middle can only hand over the real CA.
//! - [`join`]: with that CA and the token as bearer (user `system:bootstrap:<id>`), creates a
//!   CertificateSigningRequest for `system:node:<name>` in `system:nodes` (signer
//!   `kubernetes.io/kube-apiserver-client-kubelet`), waits for the certificate and writes
//!   `<dir>/kubeconfig` (mode 0600) with the CA, the certificate and its key. A kubeconfig that
//!   still holds a valid certificate of the same node and CA is reused.
//! - [`rotate`]: past 70–90 % of the certificate's lifetime, asks for a new one as the node
//!   itself and swaps the kubeconfig.

use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData};
use rustls::pki_types::{CertificateDer, ServerName};
use tandem_netproxy::tls::AnyServerCert;

/// The signer of kubelet client certificates.
pub const SIGNER_NAME: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// How long [`join`] waits for its request to be approved and signed: the kubelet's bootstrap
/// wait (an hour), long enough for a person to run `kubectl certificate approve`.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a rotation waits for its request (client-go's `certificateWaitTimeout`); a rotation
/// that times out is tried again.
pub const ROTATION_APPROVAL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long connecting and the TLS handshake of [`discover_ca`] may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest single sleep of [`rotate`], so a machine that was suspended notices the
/// deadline soon after it wakes up.
const MAX_SLEEP: Duration = Duration::from_secs(3600);
/// First and longest pause between failed rotations.
const RETRY_MIN: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(5 * 60);
/// The file [`join`] writes in its directory.
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// A join token whose shape is wrong; the messages say which part.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error(
        "the join token must start with K10 (its form is K10<sha256 of the CA certificate>::<token-id>.<token-secret>)"
    )]
    MissingPrefix,
    #[error(
        "the join token has no \"::\" between the CA hash and the credentials (its form is K10<sha256 of the CA certificate>::<token-id>.<token-secret>)"
    )]
    MissingSeparator,
    #[error(
        "the CA hash of the join token must be 64 hexadecimal digits (a sha256), found {found} characters"
    )]
    CaHash { found: usize },
    #[error("the credentials of the join token must be <token-id>.<token-secret>")]
    MissingDot,
    #[error("the token id must be 6 characters from [a-z0-9], found {found:?}")]
    TokenId { found: String },
    #[error("the token secret must be 16 characters from [a-z0-9]")]
    TokenSecret,
}

/// Why joining or rotating failed.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("the server address must look like https://host:port, found {server:?}")]
    ServerUrl { server: String },
    #[error("the node name must not be empty")]
    NodeName,
    #[error("cannot connect to {server}")]
    Connect {
        server: String,
        #[source]
        source: std::io::Error,
    },
    #[error("timed out connecting to {server}")]
    ConnectTimeout { server: String },
    #[error("the TLS handshake with {server} failed")]
    Tls {
        server: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the server's CA does not match the join token (expected sha256:{expected})")]
    CaMismatch { expected: String },
    #[error("the join token was refused by the server (wrong or expired token)")]
    TokenRefused,
    #[error("the server refused the node's client certificate")]
    CertificateRefused,
    #[error("the server does not allow this node to {action}")]
    Forbidden {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("cannot {action}")]
    Api {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("invalid kubeconfig")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("cannot build the API client")]
    Client(#[source] kube::Error),
    #[error("cannot generate the node's key and certificate request")]
    KeyGeneration(#[source] rcgen::Error),
    #[error("certificate signing request {name} was denied, reason: {reason}, message: {message}")]
    Denied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} was deleted")]
    Deleted { name: String },
    #[error(
        "certificate signing request {name} was not issued within {}; approve it with `kubectl certificate approve {name}`",
        human(.waited)
    )]
    ApprovalTimeout { name: String, waited: Duration },
    #[error("the certificate issued for {name} is not a certificate of the node's key")]
    WrongCertificate { name: String },
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a node kubeconfig: {problem}", .path.display())]
    NotNodeKubeconfig {
        path: PathBuf,
        problem: &'static str,
    },
    #[error("the node certificate in {} has expired; join again with the token", .path.display())]
    CertificateExpired { path: PathBuf },
}

fn human(d: &Duration) -> String {
    match d.as_secs() {
        s if s >= 60 && s % 60 == 0 => format!("{} minutes", s / 60),
        s => format!("{s} seconds"),
    }
}

/// A parsed join token. Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinToken {
    ca_sha256: String,
    id: String,
    secret: String,
}

impl std::fmt::Debug for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinToken")
            .field("ca_sha256", &self.ca_sha256)
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl JoinToken {
    /// The sha256 of the CA certificate's DER, lower-case hex.
    pub fn ca_sha256_hex(&self) -> &str {
        &self.ca_sha256
    }

    /// The bootstrap token id (the user is `system:bootstrap:<id>`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The bearer token the API server authenticates: `<id>.<secret>`.
    pub fn bearer(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

impl std::str::FromStr for JoinToken {
    type Err = JoinError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_join_token(s)
    }
}

/// Parses `K10<sha256 hex of the CA certificate DER>::<token-id>.<token-secret>` (surrounding
/// whitespace ignored; the hash in either case). The id and secret follow upstream's bootstrap
/// token format: 6 and 16 characters from `[a-z0-9]`.
pub fn parse_join_token(s: &str) -> Result<JoinToken, JoinError> {
    let s = s.trim();
    let rest = s.strip_prefix("K10").ok_or(TokenError::MissingPrefix)?;
    let (hash, credentials) = rest.split_once("::").ok_or(TokenError::MissingSeparator)?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TokenError::CaHash { found: hash.len() }.into());
    }
    let (id, secret) = credentials.split_once('.').ok_or(TokenError::MissingDot)?;
    let token_chars = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !token_chars(id, 6) {
        return Err(TokenError::TokenId {
            found: id.to_string(),
        }
        .into());
    }
    if !token_chars(secret, 16) {
        return Err(TokenError::TokenSecret.into());
    }
    Ok(JoinToken {
        ca_sha256: hash.to_ascii_lowercase(),
        id: id.to_string(),
        secret: secret.to_string(),
    })
}

/// Host and port of `https://host[:port][/]`.
fn server_address(server: &str) -> Result<(String, u16), JoinError> {
    let bad = || JoinError::ServerUrl {
        server: server.to_string(),
    };
    let uri: http::Uri = server.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("https") {
        return Err(bad());
    }
    let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), uri.port_u16().unwrap_or(443)))
}

fn sha256_hex(der: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The certificate among `presented` whose DER has the sha256 `ca_sha256_hex`.
fn pick_ca<'a>(
    presented: &'a [CertificateDer<'static>],
    ca_sha256_hex: &str,
) -> Result<&'a CertificateDer<'static>, JoinError> {
    presented
        .iter()
        .find(|c| sha256_hex(c.as_ref()) == ca_sha256_hex)
        .ok_or_else(|| JoinError::CaMismatch {
            expected: ca_sha256_hex.to_string(),
        })
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The certificates `server` presents in its TLS handshake, leaf first.
async fn presented_certificates(server: &str) -> Result<Vec<CertificateDer<'static>>, JoinError> {
    let (host, port) = server_address(server)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyServerCert::new(provider.clone()));
    let tls_error = |source| JoinError::Tls {
        server: server.to_string(),
        source,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(std::io::Error::other(e)))?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone()).map_err(|_| JoinError::ServerUrl {
        server: server.to_string(),
    })?;
    let timed_out = || JoinError::ConnectTimeout {
        server: server.to_string(),
    };
    let tcp = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(|_| timed_out())?
    .map_err(|source| JoinError::Connect {
        server: server.to_string(),
        source,
    })?;
    let handshake = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| timed_out())?;
    let seen = verifier.take_presented();
    match handshake {
        // The certificates are what was wanted; a handshake that failed after showing them
        // (a server that insists on a client certificate, say) still showed them.
        _ if !seen.is_empty() => Ok(seen),
        Ok(_) => Err(tls_error(std::io::Error::other(
            "the server presented no certificates",
        ))),
        Err(e) => Err(tls_error(e)),
    }
}

/// The cluster CA of `server` (`https://host:port`), as PEM: the certificate it presents in its
/// TLS chain whose DER has the sha256 the token pins. Fails with
/// [`JoinError::CaMismatch`] when none has.
pub async fn discover_ca(server: &str, token: &JoinToken) -> Result<String, JoinError> {
    let presented = presented_certificates(server).await?;
    let ca = pick_ca(&presented, token.ca_sha256_hex())?;
    Ok(pem_encode("CERTIFICATE", ca.as_ref()))
}

/// How [`join_with`] waits.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// How long to wait for the request to be approved and signed.
    pub approval_timeout: Duration,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
        }
    }
}

/// Joins the cluster at `server` as node `node_name` with `token`, and returns the path of
/// `<dir>/kubeconfig`, which authenticates as `system:node:<node_name>` (see the module doc).
/// Waits [`DEFAULT_APPROVAL_TIMEOUT`] for the certificate; [`join_with`] takes another wait.
pub async fn join(
    server: &str,
    token: &JoinToken,
    node_name: &str,
    dir: &Path,
) -> Result<PathBuf, JoinError> {
    join_with(server, token, node_name, dir, &JoinOptions::default()).await
}

/// [`join`] with `options`.
pub async fn join_with(
    server: &str,
    token: &JoinToken,
    node_name: &str,
    dir: &Path,
    options: &JoinOptions,
) -> Result<PathBuf, JoinError> {
    if node_name.is_empty() {
        return Err(JoinError::NodeName);
    }
    server_address(server)?;
    let path = dir.join(KUBECONFIG_FILE);
    if path.exists() {
        match read_node_kubeconfig(&path) {
            Ok(current) if current.reusable(server, token, node_name, SystemTime::now()) => {
                tracing::info!(path = %path.display(), "reusing the node's certificate");
                return Ok(path);
            }
            Ok(_) => {
                tracing::info!(path = %path.display(), "the node's certificate is expired or for another node, cluster or server; joining again");
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable node kubeconfig; joining again");
            }
        }
    }
    let ca_pem = discover_ca(server, token).await?;
    let bootstrap = client_from_yaml(&kubeconfig_yaml(
        server,
        &ca_pem,
        &format!("system:bootstrap:{}", token.id()),
        Credentials::Token(&token.bearer()),
    ))
    .await?;
    let issued = request_certificate(
        &bootstrap,
        node_name,
        Credential::BootstrapToken,
        options.approval_timeout,
    )
    .await?;
    write_private(
        &path,
        &kubeconfig_yaml(
            server,
            &ca_pem,
            &node_user(node_name),
            Credentials::Certificate {
                cert_pem: &issued.cert_pem,
                key_pem: &issued.key_pem,
            },
        ),
    )?;
    tracing::info!(path = %path.display(), csr = %issued.csr_name, "joined the cluster");
    Ok(path)
}

/// The user a node's certificate names.
fn node_user(node_name: &str) -> String {
    format!("system:node:{node_name}")
}

/// Which credential a request to the API server used, for the error a 401 becomes.
#[derive(Clone, Copy, Debug)]
enum Credential {
    BootstrapToken,
    NodeCertificate,
}

fn api_error(source: kube::Error, action: &'static str, credential: Credential) -> JoinError {
    match &source {
        kube::Error::Api(s) if s.code == 401 => match credential {
            Credential::BootstrapToken => JoinError::TokenRefused,
            Credential::NodeCertificate => JoinError::CertificateRefused,
        },
        kube::Error::Api(s) if s.code == 403 => JoinError::Forbidden { action, source },
        _ => JoinError::Api { action, source },
    }
}

/// A certificate the cluster issued, with its key.
struct Issued {
    csr_name: String,
    cert_pem: String,
    key_pem: String,
}

/// A PEM PKCS#10 request for `system:node:<node_name>` in `system:nodes`, no SANs, as the
/// kubelet's `requestNodeCertificate` makes it.
fn node_request_pem(key: &KeyPair, node_name: &str) -> Result<String, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "system:nodes");
    dn.push(DnType::CommonName, node_user(node_name));
    params.distinguished_name = dn;
    params.serialize_request(key)?.pem()
}

/// The CertificateSigningRequest object of a node client request: `generateName: node-csr-`,
/// the kubelet client signer, usages `digital signature` and `client auth` (the key is ECDSA,
/// so no `key encipherment`, as the kubelet asks for non-RSA keys).
fn node_csr_object(request_pem: &str) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("node-csr-".to_string()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: SIGNER_NAME.to_string(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// What a request's state means for its creator (client-go's `WaitForCertificate`): `None`
/// while it waits, the certificate once approved and issued, an error once denied or failed.
fn outcome(csr: &CertificateSigningRequest) -> Option<Result<String, JoinError>> {
    let name = csr.name_any();
    let status = csr.status.as_ref()?;
    let mut approved = false;
    for c in status.conditions.iter().flatten() {
        let reason = || c.reason.clone().unwrap_or_default();
        let message = || c.message.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => {
                return Some(Err(JoinError::Denied {
                    name,
                    reason: reason(),
                    message: message(),
                }));
            }
            "Failed" => {
                return Some(Err(JoinError::Failed {
                    name,
                    reason: reason(),
                    message: message(),
                }));
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    let cert = status.certificate.as_ref().filter(|c| !c.0.is_empty())?;
    approved.then(|| Ok(String::from_utf8_lossy(&cert.0).into_owned()))
}

/// Creates a node client request with a new key through `client`, waits up to `timeout` for
/// its certificate and checks that the certificate is for that key.
async fn request_certificate(
    client: &kube::Client,
    node_name: &str,
    credential: Credential,
    timeout: Duration,
) -> Result<Issued, JoinError> {
    let key = KeyPair::generate().map_err(JoinError::KeyGeneration)?;
    let request_pem = node_request_pem(&key, node_name).map_err(JoinError::KeyGeneration)?;
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let created = api
        .create(&PostParams::default(), &node_csr_object(&request_pem))
        .await
        .map_err(|e| api_error(e, "create a certificate signing request", credential))?;
    let name = created.name_any();
    tracing::info!(
        csr = %name,
        "waiting for the certificate; if it is not approved automatically, run `kubectl certificate approve {name}`"
    );
    let cert_pem =
        match tokio::time::timeout(timeout, wait_for_certificate(&api, &name, credential)).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(JoinError::ApprovalTimeout {
                    name,
                    waited: timeout,
                });
            }
        };
    let issued_for_key =
        certificate_info(&cert_pem).is_some_and(|info| info.public_key == key.der_bytes());
    if !issued_for_key {
        return Err(JoinError::WrongCertificate { name });
    }
    Ok(Issued {
        csr_name: name,
        cert_pem,
        key_pem: key.serialize_pem(),
    })
}

/// Watches the request `name` until [`outcome`] has something to say; watch errors other than
/// a refused credential are retried with back-off.
async fn wait_for_certificate(
    api: &Api<CertificateSigningRequest>,
    name: &str,
    credential: Credential,
) -> Result<String, JoinError> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api.clone(), config).default_backoff().boxed();
    let mut listed = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listed = false,
            // Only this request counts, should the server not honour the field selector.
            Ok(
                watcher::Event::InitApply(csr)
                | watcher::Event::Apply(csr)
                | watcher::Event::Delete(csr),
            ) if csr.name_any() != name => {}
            Ok(watcher::Event::InitApply(csr) | watcher::Event::Apply(csr)) => {
                listed = true;
                if let Some(result) = outcome(&csr) {
                    return result;
                }
            }
            Ok(watcher::Event::InitDone) if !listed => {
                return Err(JoinError::Deleted {
                    name: name.to_string(),
                });
            }
            Ok(watcher::Event::InitDone) => {}
            Ok(watcher::Event::Delete(_)) => {
                return Err(JoinError::Deleted {
                    name: name.to_string(),
                });
            }
            Err(
                watcher::Error::InitialListFailed(e)
                | watcher::Error::WatchStartFailed(e)
                | watcher::Error::WatchFailed(e),
            ) if matches!(&e, kube::Error::Api(s) if s.code == 401 || s.code == 403) => {
                return Err(api_error(
                    e,
                    "watch its certificate signing request",
                    credential,
                ));
            }
            Err(e) => {
                tracing::debug!(csr = name, error = %e, "watching the certificate signing request failed; retrying");
            }
        }
    }
    Err(JoinError::Deleted {
        name: name.to_string(),
    })
}

/// How a kubeconfig's user authenticates.
enum Credentials<'a> {
    Token(&'a str),
    Certificate { cert_pem: &'a str, key_pem: &'a str },
}

/// A kubeconfig for `server` trusting `ca_pem`, with one user.
fn kubeconfig_yaml(server: &str, ca_pem: &str, user: &str, credentials: Credentials<'_>) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let auth = match credentials {
        Credentials::Token(token) => serde_json::json!({ "token": token }),
        Credentials::Certificate { cert_pem, key_pem } => serde_json::json!({
            "client-certificate-data": b64(cert_pem),
            "client-key-data": b64(key_pem),
        }),
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "tandem",
            "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
        }],
        "users": [{"name": user, "user": auth}],
        "contexts": [{"name": "tandem", "context": {"cluster": "tandem", "user": user}}],
        "current-context": "tandem",
        "preferences": {},
    });
    // A JSON value of strings and maps always serializes.
    serde_yaml::to_string(&doc).unwrap_or_default()
}

async fn client_from_yaml(yaml: &str) -> Result<kube::Client, JoinError> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).map_err(JoinError::Kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(JoinError::Kubeconfig)?;
    kube::Client::try_from(config).map_err(JoinError::Client)
}

/// A client of the kubeconfig at `path` (what [`join`] wrote).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, JoinError> {
    let yaml = std::fs::read_to_string(path).map_err(|source| JoinError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    client_from_yaml(&yaml).await
}

/// Writes `contents` to `path` with mode 0600, atomically: a temporary file beside it, created
/// with that mode, flushed to disk and renamed over it.
fn write_private(path: &Path, contents: &str) -> Result<(), JoinError> {
    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| JoinError::Write { path: p, source }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(write_err(parent))?;
    }
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    // A leftover of an interrupted write may have other permissions; start afresh.
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp).map_err(write_err(&tmp))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(write_err(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(write_err(path))
}

/// What the agent reads from a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CertificateInfo {
    not_before: SystemTime,
    not_after: SystemTime,
    common_name: String,
    /// The subject public key bits.
    public_key: Vec<u8>,
}

fn certificate_info(pem: &str) -> Option<CertificateInfo> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).ok()?;
    let at = |t: i64| {
        let secs = u64::try_from(t).ok()?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
    };
    Some(CertificateInfo {
        not_before: at(cert.validity().not_before.timestamp())?,
        not_after: at(cert.validity().not_after.timestamp())?,
        common_name: cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .unwrap_or_default()
            .to_string(),
        public_key: cert.public_key().subject_public_key.data.to_vec(),
    })
}

/// The parts of a node kubeconfig written by [`join`].
#[derive(Clone, Debug)]
struct NodeKubeconfig {
    server: String,
    ca_pem: String,
    cert: CertificateInfo,
}

impl NodeKubeconfig {
    /// Whether [`join`] can keep it: the same server, a CA the token pins, a certificate of this
    /// node valid at `now`.
    fn reusable(&self, server: &str, token: &JoinToken, node_name: &str, now: SystemTime) -> bool {
        let ca_hash = x509_parser::pem::parse_x509_pem(self.ca_pem.as_bytes())
            .ok()
            .map(|(_, block)| sha256_hex(&block.contents));
        self.server.trim_end_matches('/') == server.trim_end_matches('/')
            && ca_hash.as_deref() == Some(token.ca_sha256_hex())
            && self.cert.common_name == node_user(node_name)
            && self.cert.not_before <= now
            && now < self.cert.not_after
    }
}

fn read_node_kubeconfig(path: &Path) -> Result<NodeKubeconfig, JoinError> {
    let text = std::fs::read_to_string(path).map_err(|source| JoinError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |problem| JoinError::NotNodeKubeconfig {
        path: path.to_path_buf(),
        problem,
    };
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|_| invalid("not YAML"))?;
    let first = |list: &str, item: &str| doc.get(list)?.get(0)?.get(item).cloned();
    let string = |v: Option<serde_yaml::Value>, key: &str| -> Option<String> {
        v?.get(key)?.as_str().map(str::to_string)
    };
    let decode = |s: String| -> Option<String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .ok()?;
        String::from_utf8(bytes).ok()
    };
    let cluster = first("clusters", "cluster");
    let user = first("users", "user");
    let server = string(cluster.clone(), "server").ok_or_else(|| invalid("no server"))?;
    let ca_pem = string(cluster, "certificate-authority-data")
        .and_then(decode)
        .ok_or_else(|| invalid("no certificate-authority-data"))?;
    let cert_pem = string(user, "client-certificate-data")
        .and_then(decode)
        .ok_or_else(|| invalid("no client-certificate-data"))?;
    let cert =
        certificate_info(&cert_pem).ok_or_else(|| invalid("unreadable client certificate"))?;
    Ok(NodeKubeconfig {
        server,
        ca_pem,
        cert,
    })
}

/// When to rotate a certificate valid from `not_before` to `not_after`: at `fraction` of its
/// lifetime (client-go's `nextRotationDeadline`, where the fraction is jittered in 0.7–0.9).
pub fn rotation_deadline(
    not_before: SystemTime,
    not_after: SystemTime,
    fraction: f64,
) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    let fraction = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    not_before + lifetime.mul_f64(fraction)
}

/// A fraction in [0.7, 0.9) from `random` (uniform over `u32`): upstream's
/// `wait.Jitter(total, 0.2) - 0.3 * total`.
pub fn jittered_fraction(random: u32) -> f64 {
    0.7 + 0.2 * (f64::from(random) / (f64::from(u32::MAX) + 1.0))
}

fn random_fraction() -> f64 {
    let random = ring::rand::generate::<[u8; 4]>(&ring::rand::SystemRandom::new())
        .map(|r| u32::from_be_bytes(r.expose()))
        .unwrap_or(u32::MAX / 2);
    jittered_fraction(random)
}

/// The pause after the `failures`-th failed rotation in a row: 2 s doubling up to 5 minutes.
fn retry_delay(failures: u32) -> Duration {
    RETRY_MIN
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// Keeps the node's certificate in `kubeconfig_path` fresh (client-go's certificate manager):
/// sleeps until 70–90 % (jittered) of its lifetime, then creates a node client request
/// authenticated by the current certificate (approved as `selfnodeclient`), writes the new
/// certificate and key over the kubeconfig (for `server`, same CA) and hands `on_new` a client
/// of it. A failed rotation is retried with back-off. Returns only on an error it cannot
/// recover from: the kubeconfig is unreadable, or the certificate expired before a renewal
/// succeeded ([`JoinError::CertificateExpired`]; join again with the token).
pub async fn rotate(
    server: &str,
    kubeconfig_path: &Path,
    node_name: &str,
    on_new: impl Fn(kube::Client),
) -> Result<Infallible, JoinError> {
    server_address(server)?;
    loop {
        let current = read_node_kubeconfig(kubeconfig_path)?;
        let deadline = rotation_deadline(
            current.cert.not_before,
            current.cert.not_after,
            random_fraction(),
        );
        tracing::info!(
            path = %kubeconfig_path.display(),
            in_secs = deadline.duration_since(SystemTime::now()).unwrap_or_default().as_secs(),
            "next rotation of the node's certificate"
        );
        while let Ok(left) = deadline.duration_since(SystemTime::now())
            && !left.is_zero()
        {
            tokio::time::sleep(left.min(MAX_SLEEP)).await;
        }
        let mut failures = 0;
        loop {
            match renew(server, kubeconfig_path, node_name, &current).await {
                Ok(client) => {
                    on_new(client);
                    break;
                }
                Err(e) if SystemTime::now() >= current.cert.not_after => {
                    tracing::warn!(error = %e, "rotating the node's certificate failed");
                    return Err(JoinError::CertificateExpired {
                        path: kubeconfig_path.to_path_buf(),
                    });
                }
                Err(e) => {
                    failures += 1;
                    let delay = retry_delay(failures);
                    tracing::warn!(error = %e, retry_in_secs = delay.as_secs(), "rotating the node's certificate failed");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// One rotation: a new key and certificate through the current credentials, then the swap.
async fn renew(
    server: &str,
    path: &Path,
    node_name: &str,
    current: &NodeKubeconfig,
) -> Result<kube::Client, JoinError> {
    let client = client_from_kubeconfig(path).await?;
    let issued = request_certificate(
        &client,
        node_name,
        Credential::NodeCertificate,
        ROTATION_APPROVAL_TIMEOUT,
    )
    .await?;
    let yaml = kubeconfig_yaml(
        server,
        &current.ca_pem,
        &node_user(node_name),
        Credentials::Certificate {
            cert_pem: &issued.cert_pem,
            key_pem: &issued.key_pem,
        },
    );
    write_private(path, &yaml)?;
    tracing::info!(path = %path.display(), csr = %issued.csr_name, "rotated the node's certificate");
    client_from_yaml(&yaml).await
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };
    use rcgen::{BasicConstraints, IsCa, Issuer, KeyUsagePurpose};

    const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn token_error(s: &str) -> String {
        parse_join_token(s).expect_err("malformed").to_string()
    }

    #[test]
    fn well_formed_join_token_parses_into_hash_id_and_bearer() {
        let t = parse_join_token(&format!(
            " K10{}::abcdef.0123456789abcdef\n",
            HASH.to_uppercase()
        ))
        .expect("valid");
        assert_eq!(t.ca_sha256_hex(), HASH);
        assert_eq!(t.id(), "abcdef");
        assert_eq!(t.bearer(), "abcdef.0123456789abcdef");
        assert!(!format!("{t:?}").contains("0123456789abcdef."));
        assert!(format!("{t:?}").contains("<redacted>"));
    }

    #[test]
    fn malformed_join_tokens_say_which_part_is_wrong() {
        assert!(
            token_error(&format!("{HASH}::abcdef.0123456789abcdef"))
                .contains("must start with K10")
        );
        assert!(token_error(&format!("K10{HASH}abcdef.0123456789abcdef")).contains("no \"::\""));
        assert_eq!(
            token_error("K10abc::abcdef.0123456789abcdef"),
            "the CA hash of the join token must be 64 hexadecimal digits (a sha256), found 3 characters"
        );
        assert!(
            token_error(&format!("K10{}::abcdef.0123456789abcdef", "g".repeat(64)))
                .contains("64 hexadecimal digits")
        );
        assert_eq!(
            token_error(&format!("K10{HASH}::abcdef0123456789abcdef")),
            "the credentials of the join token must be <token-id>.<token-secret>"
        );
        assert_eq!(
            token_error(&format!("K10{HASH}::ABCDEF.0123456789abcdef")),
            "the token id must be 6 characters from [a-z0-9], found \"ABCDEF\""
        );
        assert_eq!(
            token_error(&format!("K10{HASH}::abcde.0123456789abcdef")),
            "the token id must be 6 characters from [a-z0-9], found \"abcde\""
        );
        let secret = "the token secret must be 16 characters from [a-z0-9]";
        assert_eq!(
            token_error(&format!("K10{HASH}::abcdef.0123456789abcde")),
            secret
        );
        assert_eq!(
            token_error(&format!("K10{HASH}::abcdef.0123456789abcdeF")),
            secret
        );
        assert_eq!(
            token_error(&format!("K10{HASH}::abcdef.0123456789abcdef.x")),
            secret
        );
    }

    #[test]
    fn server_address_must_be_https_with_a_host() {
        assert_eq!(
            server_address("https://10.0.0.1:6443").expect("ok"),
            ("10.0.0.1".to_string(), 6443)
        );
        assert_eq!(
            server_address("https://[::1]:6443/").expect("ok"),
            ("::1".to_string(), 6443)
        );
        assert_eq!(
            server_address("https://example.com").expect("ok"),
            ("example.com".to_string(), 443)
        );
        for bad in ["http://10.0.0.1:6443", "10.0.0.1:6443", "", "https://"] {
            assert!(
                matches!(server_address(bad), Err(JoinError::ServerUrl { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rotation_happens_between_70_and_90_percent_of_the_lifetime() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let end = start + Duration::from_secs(1000);
        assert_eq!(jittered_fraction(0), 0.7);
        assert!(jittered_fraction(u32::MAX) < 0.9);
        assert!((jittered_fraction(u32::MAX / 2) - 0.8).abs() < 1e-6);
        assert_eq!(
            rotation_deadline(start, end, jittered_fraction(0)),
            start + Duration::from_secs(700)
        );
        let late = rotation_deadline(start, end, jittered_fraction(u32::MAX));
        assert!(late > start + Duration::from_secs(899) && late < start + Duration::from_secs(900));
        // A certificate that ends before it starts, or a nonsense fraction, is due at once.
        assert_eq!(rotation_deadline(end, start, 0.8), end);
        assert_eq!(rotation_deadline(start, end, f64::NAN), start);
    }

    #[test]
    fn failed_rotations_back_off_up_to_five_minutes() {
        assert_eq!(retry_delay(1), Duration::from_secs(2));
        assert_eq!(retry_delay(2), Duration::from_secs(4));
        assert_eq!(retry_delay(8), Duration::from_secs(256));
        assert_eq!(retry_delay(9), Duration::from_secs(300));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
    }

    fn csr_with(
        conditions: &[(&str, &str)],
        certificate: Option<&str>,
    ) -> CertificateSigningRequest {
        let mut csr = node_csr_object("pem");
        csr.metadata.name = Some("node-csr-x".to_string());
        csr.status = Some(CertificateSigningRequestStatus {
            certificate: certificate.map(|c| ByteString(c.as_bytes().to_vec())),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, reason)| CertificateSigningRequestCondition {
                        type_: t.to_string(),
                        status: "True".to_string(),
                        reason: Some(reason.to_string()),
                        message: Some("because".to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        csr
    }

    #[test]
    fn waiting_ends_with_the_certificate_or_the_refusal() {
        assert!(outcome(&csr_with(&[], None)).is_none());
        assert!(outcome(&csr_with(&[("Approved", "AutoApproved")], None)).is_none());
        // A certificate without approval is not taken.
        assert!(outcome(&csr_with(&[], Some("pem"))).is_none());
        let ok = outcome(&csr_with(&[("Approved", "AutoApproved")], Some("pem")));
        assert_eq!(ok.and_then(Result::ok).as_deref(), Some("pem"));
        let denied = outcome(&csr_with(&[("Denied", "Nope")], None))
            .and_then(Result::err)
            .map(|e| e.to_string());
        assert_eq!(
            denied.as_deref(),
            Some(
                "certificate signing request node-csr-x was denied, reason: Nope, message: because"
            )
        );
        let failed = outcome(&csr_with(
            &[
                ("Approved", "AutoApproved"),
                ("Failed", "SignerValidationFailure"),
            ],
            None,
        ))
        .and_then(Result::err)
        .map(|e| e.to_string());
        assert_eq!(
            failed.as_deref(),
            Some(
                "certificate signing request node-csr-x failed, reason: SignerValidationFailure, message: because"
            )
        );
    }

    #[test]
    fn timeout_message_says_how_to_approve() {
        let e = JoinError::ApprovalTimeout {
            name: "node-csr-x".to_string(),
            waited: DEFAULT_APPROVAL_TIMEOUT,
        };
        assert_eq!(
            e.to_string(),
            "certificate signing request node-csr-x was not issued within 60 minutes; approve it with `kubectl certificate approve node-csr-x`"
        );
    }

    #[test]
    fn unauthorized_means_a_refused_token_during_bootstrap() {
        let status = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(
            api_error(status(401), "create", Credential::BootstrapToken).to_string(),
            "the join token was refused by the server (wrong or expired token)"
        );
        assert!(matches!(
            api_error(status(401), "create", Credential::NodeCertificate),
            JoinError::CertificateRefused
        ));
        assert!(matches!(
            api_error(status(403), "create", Credential::BootstrapToken),
            JoinError::Forbidden { .. }
        ));
        assert!(matches!(
            api_error(status(500), "create", Credential::BootstrapToken),
            JoinError::Api { .. }
        ));
    }

    #[test]
    fn node_request_names_the_node_in_system_nodes() {
        let key = KeyPair::generate().expect("key");
        let pem = node_request_pem(&key, "n1").expect("csr");
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).expect("pem");
        assert_eq!(block.label, "CERTIFICATE REQUEST");
        let (_, req) = <x509_parser::certification_request::X509CertificationRequest<'_> as x509_parser::prelude::FromDer<'_, _>>::from_der(&block.contents).expect("csr");
        let subject = &req.certification_request_info.subject;
        let cn: Vec<_> = subject
            .iter_common_name()
            .map(|a| a.as_str().expect("cn"))
            .collect();
        let o: Vec<_> = subject
            .iter_organization()
            .map(|a| a.as_str().expect("o"))
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        assert_eq!(o, ["system:nodes"]);
        assert!(
            req.requested_extensions()
                .is_none_or(|mut e| e.next().is_none())
        );
        let object = serde_json::to_value(node_csr_object(&pem)).expect("json");
        assert_eq!(object["metadata"]["generateName"], "node-csr-");
        assert_eq!(object["spec"]["signerName"], SIGNER_NAME);
        assert_eq!(
            object["spec"]["usages"],
            serde_json::json!(["digital signature", "client auth"])
        );
    }

    /// A CA and a serving certificate it signed for 127.0.0.1, all PEM, and the CA's DER.
    struct TestPki {
        ca_pem: String,
        ca_der: Vec<u8>,
        ca_key: KeyPair,
        serving_pem: String,
        serving_key_pem: String,
    }

    fn test_pki() -> TestPki {
        let ca_key = KeyPair::generate().expect("key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "test-ca");
        ca.distinguished_name = dn;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let issuer = Issuer::new(ca, &ca_key);
        let serving_key = KeyPair::generate().expect("key");
        let serving = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
        let serving_cert = serving.signed_by(&serving_key, &issuer).expect("serving");
        TestPki {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
            serving_pem: serving_cert.pem(),
            serving_key_pem: serving_key.serialize_pem(),
            ca_key,
        }
    }

    fn client_cert(
        pki: &TestPki,
        cn: &str,
        valid: std::ops::Range<SystemTime>,
    ) -> (String, String) {
        let issuer = Issuer::from_ca_cert_pem(&pki.ca_pem, &pki.ca_key).expect("issuer");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.not_before = valid.start.into();
        params.not_after = valid.end.into();
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    /// Serves TLS with the chain [serving, CA] on a loopback port, for one handshake.
    async fn tls_server(pki: &TestPki) -> String {
        use rustls::pki_types::PrivateKeyDer;
        use rustls::pki_types::pem::PemObject;
        let chain = vec![
            CertificateDer::from_pem_slice(pki.serving_pem.as_bytes()).expect("serving"),
            CertificateDer::from(pki.ca_der.clone()),
        ];
        let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes()).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            if let Ok((tcp, _)) = listener.accept().await {
                let _ = acceptor.accept(tcp).await;
            }
        });
        format!("https://{addr}")
    }

    #[tokio::test]
    async fn discovery_returns_the_ca_the_token_pins() {
        let pki = test_pki();
        let server = tls_server(&pki).await;
        let token = parse_join_token(&format!(
            "K10{}::abcdef.0123456789abcdef",
            sha256_hex(&pki.ca_der)
        ))
        .expect("token");
        let ca_pem = discover_ca(&server, &token).await.expect("discovered");
        let (_, block) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).expect("pem");
        assert_eq!(block.contents, pki.ca_der);
    }

    #[tokio::test]
    async fn discovery_refuses_a_server_whose_ca_is_not_the_tokens() {
        let pki = test_pki();
        let server = tls_server(&pki).await;
        let token =
            parse_join_token(&format!("K10{HASH}::abcdef.0123456789abcdef")).expect("token");
        let err = discover_ca(&server, &token).await.expect_err("mismatch");
        assert_eq!(
            err.to_string(),
            format!("the server's CA does not match the join token (expected sha256:{HASH})")
        );
    }

    #[tokio::test]
    async fn join_reuses_a_valid_kubeconfig_without_contacting_the_server() {
        let pki = test_pki();
        let dir = tempfile::tempdir().expect("tempdir");
        // Nothing listens on port 1: joining anew would fail to connect.
        let server = "https://127.0.0.1:1";
        let token = parse_join_token(&format!(
            "K10{}::abcdef.0123456789abcdef",
            sha256_hex(&pki.ca_der)
        ))
        .expect("token");
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let (cert, key) = client_cert(&pki, "system:node:n1", now - hour..now + hour);
        let yaml = kubeconfig_yaml(
            server,
            &pki.ca_pem,
            "system:node:n1",
            Credentials::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        );
        let path = dir.path().join(KUBECONFIG_FILE);
        write_private(&path, &yaml).expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(
            join(server, &token, "n1", dir.path())
                .await
                .expect("reused"),
            path
        );
        client_from_kubeconfig(&path)
            .await
            .expect("a usable kubeconfig");

        // Another node's name, or an expired certificate, means joining again.
        let err = join(server, &token, "n2", dir.path())
            .await
            .expect_err("joins again");
        assert!(matches!(err, JoinError::Connect { .. }), "{err}");
        let (old, key) = client_cert(&pki, "system:node:n1", now - 2 * hour..now - hour);
        let yaml = kubeconfig_yaml(
            server,
            &pki.ca_pem,
            "system:node:n1",
            Credentials::Certificate {
                cert_pem: &old,
                key_pem: &key,
            },
        );
        write_private(&path, &yaml).expect("write");
        let err = join(server, &token, "n1", dir.path())
            .await
            .expect_err("joins again");
        assert!(matches!(err, JoinError::Connect { .. }), "{err}");
    }

    #[test]
    fn node_kubeconfig_reads_back_what_join_writes() {
        let pki = test_pki();
        let dir = tempfile::tempdir().expect("tempdir");
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let (cert, key) = client_cert(&pki, "system:node:n1", now - hour..now + hour);
        let path = dir.path().join(KUBECONFIG_FILE);
        let yaml = kubeconfig_yaml(
            "https://10.0.0.1:6443",
            &pki.ca_pem,
            "system:node:n1",
            Credentials::Certificate {
                cert_pem: &cert,
                key_pem: &key,
            },
        );
        write_private(&path, &yaml).expect("write");
        let read = read_node_kubeconfig(&path).expect("read");
        assert_eq!(read.server, "https://10.0.0.1:6443");
        assert_eq!(read.ca_pem, pki.ca_pem);
        assert_eq!(read.cert.common_name, "system:node:n1");
        let token = parse_join_token(&format!(
            "K10{}::abcdef.0123456789abcdef",
            sha256_hex(&pki.ca_der)
        ))
        .expect("token");
        assert!(read.reusable("https://10.0.0.1:6443/", &token, "n1", now));
        assert!(!read.reusable("https://10.0.0.2:6443", &token, "n1", now));
        assert!(!read.reusable("https://10.0.0.1:6443", &token, "n1", now + 2 * hour));
        let other =
            parse_join_token(&format!("K10{HASH}::abcdef.0123456789abcdef")).expect("token");
        assert!(!read.reusable("https://10.0.0.1:6443", &other, "n1", now));

        std::fs::write(&path, "clusters: []\n").expect("write");
        assert_eq!(
            read_node_kubeconfig(&path)
                .expect_err("not a node kubeconfig")
                .to_string(),
            format!("{} is not a node kubeconfig: no server", path.display())
        );
    }
}
