//! The ClusterRole aggregation controller — upstream's `pkg/controller/clusterroleaggregation`:
//! a ClusterRole with an `aggregationRule` gets the rules of every ClusterRole its selectors
//! match (so `admin`, `edit` and `view` grow when a CRD's `aggregate-to-*` role appears). Any
//! ClusterRole change queues every aggregated role; the rules are computed by
//! `tandem_core::rbac::aggregate_rules` and written only when they differ.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use crate::controller_utils::{self as cu, SyncResult};
use crate::informer::Informer;
use crate::workqueue::WorkQueue;

struct Ctx {
    client: kube::Client,
    roles: Informer<ClusterRole>,
    queue: WorkQueue,
}

/// Runs the controller until the runtime stops.
pub async fn run(client: kube::Client) {
    let roles = Informer::<ClusterRole>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        roles,
        queue: WorkQueue::named("ClusterRoleAggregator"),
    });
    let mut events = ctx.roles.subscribe();
    ctx.roles.wait_ready().await;
    enqueue_aggregated(&ctx);
    ctx.queue
        .run_workers_for(1, "clusterrole-aggregation", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    while let Some(_change) = events.recv().await {
        enqueue_aggregated(&ctx);
    }
}

fn enqueue_aggregated(ctx: &Ctx) {
    for role in ctx.roles.list() {
        if role.aggregation_rule.is_some() {
            ctx.queue.add(role.name_any());
        }
    }
}

async fn sync(ctx: &Ctx, name: &str) -> SyncResult {
    let Some(role) = ctx.roles.get("", name) else {
        return Ok(None);
    };
    let Some(rule) = role.aggregation_rule.as_ref() else {
        return Ok(None);
    };
    let all: Vec<ClusterRole> = ctx.roles.list().iter().map(|r| (**r).clone()).collect();
    let rules = tandem_core::rbac::aggregate_rules(name, rule, &all);
    if role.rules.as_deref().unwrap_or_default() == rules.as_slice() {
        return Ok(None);
    }
    let mut next = (*role).clone();
    next.rules = Some(rules);
    let api: Api<ClusterRole> = Api::all(ctx.client.clone());
    match api.replace(name, &PostParams::default(), &next).await {
        Ok(_) => Ok(None),
        // A newer version is on its way through the informer, which queues the role again.
        Err(e) if cu::is_conflict(&e) || cu::is_not_found(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
