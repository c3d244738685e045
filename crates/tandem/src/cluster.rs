//! Starting the control plane (and, for `up`, everything else) and stopping it cleanly.

use std::sync::Arc;

use anyhow::Context;
use tandem_apiserver::{ApiServer, Config};
use tandem_store::Store;
use tandem_store::sqlite::{SqliteOptions, SqliteStore};

use crate::ServerArgs;

/// Opens the store in the data dir and starts the API server on it.
pub async fn start(args: &ServerArgs) -> anyhow::Result<(ApiServer, Arc<SqliteStore>)> {
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("cannot create data dir {}", args.data_dir.display()))?;
    let db = args.data_dir.join("state.db");
    let store = Arc::new(SqliteStore::open(&db, SqliteOptions::default()).with_context(|| format!("cannot open the store {}", db.display()))?);
    let dyn_store: Arc<dyn Store> = store.clone();
    let config = Config { data_dir: args.data_dir.clone(), bind: args.bind(), kubeconfig: Some(args.kubeconfig_path()) };
    let server = ApiServer::start(config, dyn_store).await.context("cannot start the API server")?;
    Ok((server, store))
}

/// A kube-rs client with the admin credentials of `server`, for the in-process controllers.
pub async fn admin_client(args: &ServerArgs) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(args.kubeconfig_path()).context("cannot read the admin kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.context("invalid admin kubeconfig")?;
    kube::Client::try_from(config).context("cannot build the API client")
}

/// Runs until Ctrl-C or SIGTERM.
pub async fn run(args: ServerArgs, whole_cluster: bool) -> anyhow::Result<()> {
    let (server, _store) = start(&args).await?;
    let client = admin_client(&args).await?;
    tandem_controllers::start_all(client, server.state.registry.clone());
    let kubeconfig = args.kubeconfig_path();
    println!("tandem API server listening on https://{}", server.local_addr);
    println!("  data dir:   {}", args.data_dir.display());
    println!("  kubeconfig: {}", kubeconfig.display());
    if whole_cluster {
        println!("  nodes:      none yet — the node agent (Linux CRI and emulated Windows nodes) is not built yet; pods stay Pending");
    }
    println!();
    println!("Use it with:  kubectl --kubeconfig {} get namespaces", kubeconfig.display());
    wait_for_shutdown().await;
    println!("tandem: shutting down");
    drop(server);
    Ok(())
}

async fn wait_for_shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
