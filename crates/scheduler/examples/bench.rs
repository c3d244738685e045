//! `cargo run --release -p tandem-scheduler --example bench -- --nodes 5000 --pods 10000`: the
//! scheduler benchmark against an in-process API server on a SQLite store in a temporary
//! directory, started the way the integration tests start one. `tandem bench scheduler` runs the
//! same [`tandem_scheduler::run_bench`] against the cluster it is given.

use std::sync::Arc;

use anyhow::{Context, Result};
use tandem_apiserver::{ApiServer, Config};
use tandem_store::sqlite::{SqliteOptions, SqliteStore};

fn arg(name: &str, default: usize) -> Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .context("missing value")?
            .parse()
            .with_context(|| format!("bad {name}")),
        None => Ok(default),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let nodes = arg("--nodes", 5000)?;
    let pods = arg("--pods", 10000)?;
    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteStore::open(
        &dir.path().join("state.db"),
        SqliteOptions::default(),
    )?);
    let kubeconfig = dir.path().join("kubeconfig");
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        bind: "127.0.0.1:0".parse()?,
        kubeconfig: Some(kubeconfig.clone()),
    };
    let _server = ApiServer::start(config, store)
        .await
        .context("start server")?;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    let client = kube::Client::try_from(config)?;
    let report = tandem_scheduler::run_bench(client.clone(), client, nodes, pods).await?;
    println!("{report}");
    Ok(())
}
