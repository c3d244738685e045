//! `tandem bench api --rbac`: what authorization costs the API server. The same create load runs
//! twice in one process, first on a server with `--authorization-mode AlwaysAllow`, then on one
//! with `Node,RBAC`. Each of the clients is a ServiceAccount of its own namespace, holding a
//! namespaced Role that allows creating pods there, and authenticates with a token from the
//! TokenRequest API — so both runs authenticate the same way and differ only in authorization.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};

use crate::ServerArgs;
use crate::bench::{ms, percentile, pod};
use tandem_apiserver::auth::authz::AuthorizationMode;

/// The figures of one run.
struct Figures {
    creates: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.creates as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs both modes and prints them side by side.
pub async fn compare(pods: usize, clients: usize) -> anyhow::Result<()> {
    println!(
        "tandem bench api --rbac: {pods} pods from {clients} ServiceAccount clients (one namespace, Role and RoleBinding each), durable SQLite store"
    );
    let off = run(pods, clients, AuthorizationMode::AlwaysAllow).await?;
    let on = run(pods, clients, AuthorizationMode::NodeRbac).await?;
    println!();
    for (label, f) in [("authorization off", &off), ("RBAC on", &on)] {
        println!(
            "{label:<18} {:>6.0} creates/s   p50 {}  p99 {}  max {}",
            f.rate(),
            ms(percentile(&f.latencies, 0.5)),
            ms(percentile(&f.latencies, 0.99)),
            ms(percentile(&f.latencies, 1.0)),
        );
    }
    let rate_change = (on.rate() / off.rate() - 1.0) * 100.0;
    let p99 = |f: &Figures| percentile(&f.latencies, 0.99).as_secs_f64();
    let p99_change = (p99(&on) / p99(&off) - 1.0) * 100.0;
    println!("RBAC on vs off:    creates/s {rate_change:+.1} %, p99 {p99_change:+.1} %");
    Ok(())
}

async fn run(pods: usize, clients: usize, mode: AuthorizationMode) -> anyhow::Result<Figures> {
    let dir = tempfile::tempdir().context("cannot create a temp dir")?;
    let args = ServerArgs {
        authorization_mode: mode,
        ..crate::bench::server_args(dir.path())
    };
    let (server, _store) = crate::cluster::start(&args).await?;
    let admin = crate::cluster::client_from(&args.kubeconfig_path()).await?;
    let url = format!("https://{}", server.local_addr);

    // One namespace, ServiceAccount, Role and RoleBinding per client, and its token.
    let mut tokens = Vec::new();
    for c in 0..clients {
        let ns = format!("bench-{c:02}");
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
            )
            .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": "client"}}))?,
            )
            .await?;
        let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
        roles
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "pod-creator"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
                }))?,
            )
            .await?;
        let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
        bindings
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "client-creates-pods"},
                    "subjects": [{"kind": "ServiceAccount", "name": "client", "namespace": ns}],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-creator"}
                }))?,
            )
            .await?;
        let request =
            serde_json::from_value(serde_json::json!({"spec": {"expirationSeconds": 3600}}))?;
        let token = accounts
            .create_token_request("client", &PostParams::default(), &request)
            .await?
            .status
            .map(|s| s.token)
            .unwrap_or_default();
        tokens.push((ns, token));
    }
    // Let the authorizer's index see the bindings before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let ca = server.pki.ca_pem.clone();
    let per_client = pods.div_ceil(clients);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, (ns, token)) in tokens.into_iter().enumerate() {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: {url:?}, certificate-authority-data: {:?}}}}}]\nusers: [{{name: u, user: {{token: {token:?}}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            base64_encode(ca.as_bytes())
        );
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let api: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, &ns);
        let range = (c * per_client)..((c + 1) * per_client).min(pods);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(range.len());
            for i in range {
                let p = pod(&format!("bench-{i:06}"))?;
                let t = Instant::now();
                api.create(&PostParams::default(), &p).await?;
                lat.push(t.elapsed());
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let mode_name = match mode {
        AuthorizationMode::AlwaysAllow => "AlwaysAllow",
        AuthorizationMode::NodeRbac => "Node,RBAC",
    };
    println!(
        "  {mode_name:<12} {} creates in {:.2} s",
        latencies.len(),
        elapsed.as_secs_f64()
    );
    drop(server);
    Ok(Figures {
        creates: latencies.len(),
        elapsed,
        latencies,
    })
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
