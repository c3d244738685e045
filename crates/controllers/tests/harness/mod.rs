//! An API server without the default controllers, for tests that start one controller with
//! options of their own (a fake clock, short grace periods).
#![allow(dead_code)]

use std::sync::Arc;

use anyhow::{Context, Result};
use kube::Client;
use tandem_apiserver::{ApiServer, Config};
use tandem_store::sqlite::{SqliteOptions, SqliteStore};
use tempfile::TempDir;

/// A running API server and an admin client; no controllers.
pub struct Server {
    pub client: Client,
    pub server: ApiServer,
    _dir: TempDir,
}

/// Starts an API server on an ephemeral port over a store in a temporary directory.
pub async fn start() -> Result<Server> {
    let dir = tempfile::tempdir().context("temp dir")?;
    let store = Arc::new(
        SqliteStore::open(&dir.path().join("state.db"), SqliteOptions::default())
            .context("open store")?,
    );
    let kubeconfig = dir.path().join("kubeconfig");
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        bind: "127.0.0.1:0".parse()?,
        kubeconfig: Some(kubeconfig.clone()),
    };
    let server = ApiServer::start(config, store)
        .await
        .context("start server")?;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).context("read kubeconfig")?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await?;
    let client = Client::try_from(cfg)?;
    Ok(Server {
        client,
        server,
        _dir: dir,
    })
}
