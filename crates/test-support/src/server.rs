//! An in-process API server for tests: `tandem-apiserver` on an ephemeral loopback port over a
//! store (by default SQLite in the data directory), and `kube::Client`s authenticated with the
//! admin kubeconfig the server writes, built as a controller builds its own.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Client;
use tandem_apiserver::rest::Options;
use tandem_apiserver::{ApiServer, Config};
use tandem_store::Store;
use tandem_store::sqlite::{SqliteOptions, SqliteStore};
use tempfile::TempDir;

/// How to start a test server. The default is what `tandem server` runs with on a SQLite store
/// of its own.
#[derive(Default)]
pub struct ServerOptions {
    /// The server's behaviour switches (`--allow-privileged`, authorization, flow control, …).
    pub rest: Options,
    /// The store to serve; `None` opens a SQLite store at `<data_dir>/state.db`. Give one store
    /// to several servers to run them as `tandem server`s on one etcd.
    pub store: Option<Arc<dyn Store>>,
}

/// A running API server on a fresh temporary data directory, and an admin client for it.
/// Dropping it stops the listener and removes the directory.
pub struct TestServer {
    pub client: Client,
    pub server: ApiServer,
    /// The server's data directory (PKI, `state.db`, `kubeconfig`); tests may put their own
    /// files here too.
    pub data_dir: PathBuf,
    _dir: TempDir,
}

impl TestServer {
    /// Starts a server with the default [`ServerOptions`].
    pub async fn start() -> Result<TestServer> {
        TestServer::start_with(ServerOptions::default()).await
    }

    /// Starts a server with `options` on a fresh temporary data directory.
    pub async fn start_with(options: ServerOptions) -> Result<TestServer> {
        let dir = tempfile::tempdir().context("create temp dir")?;
        let (server, client) = start_at_with(dir.path(), options).await?;
        Ok(TestServer {
            client,
            server,
            data_dir: dir.path().to_path_buf(),
            _dir: dir,
        })
    }

    /// The admin kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig")
    }

    /// Another admin client with connections of its own (as a second process would have).
    pub async fn new_client(&self) -> Result<Client> {
        client_for(&self.kubeconfig()).await
    }
}

/// Starts a server with the default [`ServerOptions`] on `data_dir`, which may hold the state of
/// an earlier server; returns the server and an admin client. The caller keeps `data_dir` alive.
pub async fn start_at(data_dir: &Path) -> Result<(ApiServer, Client)> {
    start_at_with(data_dir, ServerOptions::default()).await
}

/// As [`start_at`], with `options`.
pub async fn start_at_with(data_dir: &Path, options: ServerOptions) -> Result<(ApiServer, Client)> {
    let store: Arc<dyn Store> = match options.store {
        Some(store) => store,
        None => Arc::new(
            SqliteStore::open(&data_dir.join("state.db"), SqliteOptions::default())
                .context("open store")?,
        ),
    };
    let kubeconfig = data_dir.join("kubeconfig");
    let config = Config {
        data_dir: data_dir.to_path_buf(),
        bind: "127.0.0.1:0".parse().context("loopback address")?,
        kubeconfig: Some(kubeconfig.clone()),
    };
    let server = ApiServer::start_with_options(config, store, options.rest)
        .await
        .context("start server")?;
    let client = client_for(&kubeconfig).await?;
    Ok((server, client))
}

/// A `kube::Client` built from a kubeconfig file, as a controller would build one.
pub async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).context("read kubeconfig")?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .context("load kubeconfig")?;
    Client::try_from(config).context("build client")
}

/// Runs `f` against a server on `data_dir` inside its own runtime on its own thread, then shuts
/// that runtime down, which ends every task holding the store so the data directory can be opened
/// again by a later server (the SQLite store holds an exclusive lock on its file while open).
///
/// # Panics
///
/// When the runtime or the server cannot start, or `f` panics.
pub fn with_server_then_stop<T, F, Fut>(data_dir: &Path, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let data_dir = data_dir.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let out = rt.block_on(async move {
            let (server, client) = start_at(&data_dir).await.expect("start first server");
            let out = f(client).await;
            drop(server);
            out
        });
        rt.shutdown_timeout(Duration::from_secs(10));
        out
    })
    .join()
    .expect("first server thread")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;

    use super::*;

    #[tokio::test]
    async fn a_test_server_answers_its_admin_client_and_a_second_one() -> Result<()> {
        let ts = TestServer::start().await?;
        let default = Api::<Namespace>::all(ts.client.clone())
            .get("default")
            .await?;
        assert_eq!(default.metadata.name.as_deref(), Some("default"));
        let other = ts.new_client().await?;
        Api::<Namespace>::all(other).get("kube-system").await?;
        assert!(ts.kubeconfig().is_file());
        Ok(())
    }

    #[test]
    fn a_data_dir_outlives_its_server_and_opens_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let rv = with_server_then_stop(dir.path(), |client| async move {
            Api::<Namespace>::all(client)
                .get("default")
                .await
                .expect("default namespace")
                .metadata
                .resource_version
        });
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let again = rt.block_on(async {
            let (_server, client) = start_at(dir.path()).await.expect("second server");
            Api::<Namespace>::all(client)
                .get("default")
                .await
                .expect("default namespace")
                .metadata
                .resource_version
        });
        assert_eq!(rv, again);
    }
}
