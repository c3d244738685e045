//! A kube-rs client that speaks HTTP/2 to the API server.
//!
//! kube-rs' default client speaks HTTP/1.1 from a connection pool, so every request in flight
//! holds a TCP connection (with its TLS session and buffers, on both ends) and every burst beyond
//! the idle pool pays new TLS handshakes. A thousand emulated agents sharing such a client held
//! about 2,400 connections at once in `tandem bench nodes`, with thousands more in TIME_WAIT.
//! client-go negotiates HTTP/2 instead: requests and watches are streams of one connection. This
//! builds that client. The API server allows 200 concurrent streams per connection (hyper's
//! default); requests beyond that wait for a stream, which also bounds the load one client puts
//! on the server.
//!
//! Like kube-rs' own clients (and client-go), these retry `429 TooManyRequests`,
//! `503 ServiceUnavailable` and `504 GatewayTimeout` with backoff, waiting the server's
//! `Retry-After`: the scheduler's bindings and the agents' heartbeats ride out API Priority and
//! Fairness refusing them at a moment of overload instead of failing.

use std::path::Path;

use anyhow::Context;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::BoxError;
use tower::retry::RetryLayer;
use tower::util::MapErrLayer;

/// A client for the kubeconfig at `path` that talks HTTP/2 (ALPN `h2`) over one TLS connection.
/// Only client-certificate credentials are supported (the admin kubeconfig's).
pub async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
    client_from_kubeconfig(kubeconfig).await
}

/// As [`client_from`], for a kubeconfig already read.
pub async fn client_from_kubeconfig(
    kubeconfig: kube::config::Kubeconfig,
) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("invalid kubeconfig")?;
    anyhow::ensure!(
        config
            .auth_layer()
            .context("invalid credentials")?
            .is_none(),
        "the HTTP/2 client supports client certificates only"
    );
    let tls = config
        .rustls_client_config()
        .context("cannot build the TLS configuration")?;
    Ok(client_with_tls(&config, tls, true))
}

/// A client of `config`'s server over `tls` (which carries the credentials), speaking HTTP/2
/// over one connection when `http2`, else HTTP/1.1 from a pool of connections as kube-rs does.
pub fn client_with_tls(
    config: &kube::Config,
    tls: rustls::ClientConfig,
    http2: bool,
) -> kube::Client {
    // Without TCP_NODELAY, small frames written while an earlier one is unacknowledged wait for
    // the peer's delayed ACK (40 ms on Linux): node creates over one connection ran 3–5 times
    // slower than over a pool of HTTP/1.1 connections until this was set.
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only();
    if !http2 {
        let https = builder.enable_http1().wrap_connector(tcp);
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
        return kube::client::ClientBuilder::new(http, config.default_namespace.clone())
            .with_layer(&config.base_uri_layer())
            .with_layer(&MapErrLayer::new(BoxError::from))
            .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
            .build();
    }
    let https = builder.enable_http2().wrap_connector(tcp);
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        // Fixed, generous receive windows rather than hyper's adaptive ones, which stay small on
        // loopback's tiny round trips: a watch stream whose reader lags then used up the
        // connection's window and the responses of every other request on it waited (the
        // scheduler's bindings stalled for seconds behind its pod watch).
        .http2_initial_stream_window_size(8 << 20)
        .http2_initial_connection_window_size(64 << 20)
        .build(https);
    kube::client::ClientBuilder::new(http, config.default_namespace.clone())
        .with_layer(&config.base_uri_layer())
        .with_layer(&MapErrLayer::new(BoxError::from))
        .with_layer(&RetryLayer::new(RetryPolicy::server_retry()))
        .build()
}
