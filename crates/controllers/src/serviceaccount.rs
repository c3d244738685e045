//! The ServiceAccounts controller — upstream's `pkg/controller/serviceaccount`
//! (`ServiceAccountsController`): every active namespace has a `default` ServiceAccount; one that
//! is missing (a new namespace, or someone deleted it) is created.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

use crate::controller_utils::{self as cu, SyncResult};
use crate::informer::Informer;
use crate::workqueue::WorkQueue;

/// The ServiceAccounts every namespace gets.
pub const DEFAULT_SERVICE_ACCOUNTS: &[&str] = &["default"];

struct Ctx {
    client: kube::Client,
    namespaces: Informer<Namespace>,
    accounts: Informer<ServiceAccount>,
    queue: WorkQueue,
}

/// Runs the ServiceAccounts controller until the runtime stops.
pub async fn run(client: kube::Client) {
    let namespaces = Informer::<Namespace>::start(client.clone());
    // Only the accounts this controller manages need caching.
    let selector = DEFAULT_SERVICE_ACCOUNTS
        .iter()
        .map(|n| format!("metadata.name={n}"))
        .collect::<Vec<_>>()
        .join(",");
    let accounts = Informer::<ServiceAccount>::start_with(
        Api::all(client.clone()),
        if DEFAULT_SERVICE_ACCOUNTS.len() == 1 {
            watcher::Config::default().fields(&selector)
        } else {
            watcher::Config::default()
        },
    );
    let ctx = Arc::new(Ctx {
        client,
        namespaces,
        accounts,
        queue: WorkQueue::named("serviceaccount"),
    });
    let mut ns_events = ctx.namespaces.subscribe();
    let mut sa_events = ctx.accounts.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.namespaces, &ctx.accounts]).await;
    ctx.queue.add_keys(&ctx.namespaces.list());
    ctx.queue
        .run_workers_for(2, "serviceaccount", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = ns_events.recv() => {
                ctx.queue.add_keys(change.new.iter());
            }
            Some(change) = sa_events.recv() => {
                // A deleted default account is recreated.
                if change.new.is_none()
                    && let Some(sa) = change.old
                {
                    ctx.queue.add(sa.namespace().unwrap_or_default());
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
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), namespace);
    for name in DEFAULT_SERVICE_ACCOUNTS {
        if ctx.accounts.get(namespace, name).is_some() {
            continue;
        }
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some((*name).to_string()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(e)
                if cu::is_already_exists(&e)
                    || cu::is_namespace_terminating(&e)
                    || cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}
