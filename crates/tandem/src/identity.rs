//! Credentials for people and nodes: `tandem kubeconfig --user NAME --group G` mints a kubeconfig
//! signed by the cluster CA (what an administrator does with `openssl` and a CSR upstream), and
//! the join token `tandem server` publishes for `tandem agent --token` (a bootstrap token, as
//! kubeadm's and k3s's).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Flags of `tandem kubeconfig`.
#[derive(Args, Clone, Debug)]
pub struct KubeconfigArgs {
    /// The data dir of the server (its `pki/` holds the CA).
    #[arg(long, default_value = ".tandem")]
    pub data_dir: PathBuf,
    /// The user name (the certificate's common name).
    #[arg(long)]
    pub user: String,
    /// The user's group (the certificate's organization): one per certificate; bind roles to
    /// the user for more.
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// The API server URL (default: the one in `<data-dir>/kubeconfig`).
    #[arg(long)]
    pub server: Option<String>,
    /// How long the certificate is valid, in hours.
    #[arg(long, default_value_t = 24 * 365)]
    pub valid_hours: u64,
    /// Where to write the kubeconfig (default: standard output).
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
}

/// `tandem kubeconfig`.
pub fn mint_kubeconfig(args: &KubeconfigArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!args.user.trim().is_empty(), "--user must not be empty");
    anyhow::ensure!(
        !args.groups.iter().any(|g| g == "system:masters"),
        "refusing to mint a system:masters certificate: use the admin kubeconfig, or bind a role to the user instead"
    );
    anyhow::ensure!(
        args.groups.len() <= 1,
        "one --group per certificate (the certificate library tandem uses writes one organization); bind roles to the user, or to one group"
    );
    let ca = args.data_dir.join("pki").join("ca.crt");
    anyhow::ensure!(
        ca.exists(),
        "{} does not exist: start `tandem server --data-dir {}` first",
        ca.display(),
        args.data_dir.display()
    );
    let pki = tandem_apiserver::pki::Pki::load_or_create(&args.data_dir, &[])
        .context("cannot read the cluster's certificates")?;
    let server = match &args.server {
        Some(s) => s.clone(),
        None => server_of(&args.data_dir.join("kubeconfig"))?,
    };
    let groups: Vec<&str> = args.groups.iter().map(String::as_str).collect();
    let yaml = pki
        .mint_kubeconfig(
            &server,
            &args.user,
            &groups,
            std::time::Duration::from_secs(args.valid_hours * 3600),
        )
        .context("cannot issue the certificate")?;
    match &args.output {
        Some(path) => {
            write_private(path, &yaml)?;
            eprintln!(
                "wrote {} for user {:?}{}",
                path.display(),
                args.user,
                if groups.is_empty() {
                    String::new()
                } else {
                    format!(" in groups {}", groups.join(", "))
                }
            );
        }
        None => print!("{yaml}"),
    }
    Ok(())
}

/// The `server:` of the first cluster of a kubeconfig.
fn server_of(path: &std::path::Path) -> anyhow::Result<String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).with_context(|| {
        format!(
            "cannot read {} to find the server (or pass --server)",
            path.display()
        )
    })?;
    kubeconfig
        .clusters
        .iter()
        .find_map(|c| c.cluster.as_ref().and_then(|c| c.server.clone()))
        .with_context(|| format!("{} names no server", path.display()))
}

/// Writes `contents` to `path` with mode 0600, atomically.
pub fn write_private(path: &std::path::Path, contents: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot restrict {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Random lower-case alphanumerics (a bootstrap token's alphabet), from the OS's randomness.
fn random_alphanumerics(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(n);
    while out.len() < n {
        for b in uuid::Uuid::new_v4().as_bytes() {
            // 252 = 7 * 36: dropping the rest keeps every character equally likely.
            if *b < 252 && out.len() < n {
                out.push(ALPHABET[(*b % 36) as usize] as char);
            }
        }
    }
    out
}

/// The join token of this cluster, `K10<sha256 of the CA>::<id>.<secret>`: the one in
/// `<data-dir>/join-token` when its bootstrap-token Secret still exists, else a new one (its
/// Secret created in kube-system, the file written with mode 0600).
pub async fn ensure_join_token(
    server: &tandem_apiserver::ApiServer,
    admin: &kube::Client,
    data_dir: &std::path::Path,
) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(admin.clone(), "kube-system");
    let hash = server
        .pki
        .ca_sha256_hex()
        .context("the cluster CA certificate is unreadable")?;
    let path = data_dir.join("join-token");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim().to_string();
        let id = existing
            .split_once("::")
            .and_then(|(_, t)| t.split_once('.'))
            .map(|(id, _)| id.to_string());
        if existing.starts_with(&format!("K10{hash}::"))
            && let Some(id) = id
            && secrets
                .get_opt(&format!("bootstrap-token-{id}"))
                .await?
                .is_some()
        {
            return Ok(existing);
        }
    }
    let id = random_alphanumerics(6);
    let secret = random_alphanumerics(16);
    let object: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "description": "The join token of tandem agents (tandem agent --token).",
            "token-id": id,
            "token-secret": secret,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:tandem:default-node-token",
        },
    }))
    .context("cannot build the bootstrap token Secret")?;
    secrets
        .create(&kube::api::PostParams::default(), &object)
        .await
        .context("cannot create the bootstrap token Secret")?;
    let token = format!("K10{hash}::{id}.{secret}");
    write_private(&path, &format!("{token}\n"))?;
    Ok(token)
}
