//! The root CA publisher — upstream's `pkg/controller/certificates/rootcacertpublisher`: every
//! active namespace has a ConfigMap `kube-root-ca.crt` whose `ca.crt` is the cluster CA, so pods
//! can verify the API server (the ServiceAccount token volume projects it). A missing ConfigMap
//! is created and a changed one is put back.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

use crate::controller_utils::{self as cu, SyncResult};
use crate::informer::Informer;
use crate::workqueue::WorkQueue;

/// The ConfigMap's name.
pub const CONFIG_MAP_NAME: &str = "kube-root-ca.crt";
/// The key holding the CA bundle.
pub const DATA_KEY: &str = "ca.crt";
/// Upstream's description annotation.
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

struct Ctx {
    client: kube::Client,
    ca_pem: String,
    namespaces: Informer<Namespace>,
    config_maps: Informer<ConfigMap>,
    queue: WorkQueue,
}

/// Runs the publisher for the CA `ca_pem` until the runtime stops.
pub async fn run(client: kube::Client, ca_pem: String) {
    let namespaces = Informer::<Namespace>::start(client.clone());
    let config_maps = Informer::<ConfigMap>::start_with(
        Api::all(client.clone()),
        watcher::Config::default().fields(&format!("metadata.name={CONFIG_MAP_NAME}")),
    );
    let ctx = Arc::new(Ctx {
        client,
        ca_pem,
        namespaces,
        config_maps,
        queue: WorkQueue::named("root_ca_cert_publisher"),
    });
    let mut ns_events = ctx.namespaces.subscribe();
    let mut cm_events = ctx.config_maps.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.namespaces, &ctx.config_maps]).await;
    ctx.queue.add_keys(&ctx.namespaces.list());
    ctx.queue
        .run_workers_for(2, "root-ca-cert-publisher", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = ns_events.recv() => {
                ctx.queue.add_keys(change.new.iter());
            }
            Some(change) = cm_events.recv() => {
                if let Some(cm) = change.new.or(change.old) {
                    ctx.queue.add(cm.namespace().unwrap_or_default());
                }
            }
            else => return,
        }
    }
}

async fn sync(ctx: &Ctx, namespace: &str) -> SyncResult {
    if !cu::active_namespace(&ctx.namespaces, namespace) {
        return Ok(None);
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let data = BTreeMap::from([(DATA_KEY.to_string(), ctx.ca_pem.clone())]);
    let result = match ctx.config_maps.get(namespace, CONFIG_MAP_NAME) {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(CONFIG_MAP_NAME.to_string()),
                    annotations: Some(BTreeMap::from([(
                        "kubernetes.io/description".to_string(),
                        DESCRIPTION.to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm).await.map(|_| ())
        }
        Some(current) if current.data.as_ref() == Some(&data) => Ok(()),
        Some(current) => {
            let mut next = (*current).clone();
            next.data = Some(data);
            next.binary_data = None;
            api.replace(CONFIG_MAP_NAME, &PostParams::default(), &next)
                .await
                .map(|_| ())
        }
    };
    match result {
        Ok(()) => Ok(None),
        Err(e)
            if cu::is_already_exists(&e)
                || cu::is_conflict(&e)
                || cu::is_namespace_terminating(&e)
                || cu::is_not_found(&e) =>
        {
            // The informer's next event brings the namespace back here.
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}
