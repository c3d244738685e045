//! The watch loop shared by the service proxy and the NetworkPolicy controller: one kube-rs
//! `watcher` per kind, its events wrapped into the controller's input and sent to its loop.

use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

/// Watches `api` until the receiver of `tx` is gone, sending each event through `wrap`. A failed
/// watch is retried after half a second (the watcher relists or resumes by itself); `who` names
/// the controller in the log line.
pub(crate) fn spawn_watch<K, M, F>(
    who: &'static str,
    api: Api<K>,
    tx: mpsc::UnboundedSender<M>,
    wrap: F,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    M: Send + 'static,
    F: Fn(watcher::Event<K>) -> M + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if tx.send(wrap(event)).is_err() {
                        return;
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "{who} watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                None => return,
            }
        }
    });
}
