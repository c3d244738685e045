//! The aggregator's controller: follows the APIServices in the watch cache, keeps the table of
//! remote group-versions, and checks each remote as upstream's `AvailableConditionController`
//! does — the Service exists, has the port, has a ready endpoint for it, and answers its
//! discovery path within five seconds as `system:kube-aggregator` in `system:masters` — writing
//! the `Available` condition when it changes. The discovery document read by the check is kept
//! for `/apis`. Checks run on every APIService change and every [`RESYNC`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;

use super::Remote;
use super::model::{self, Check};
use crate::rest::Ctx;
use crate::service_resolve::ResolveError;
use crate::state::State;

/// How often every remote APIService is checked again (Services and endpoints change without
/// the APIService changing).
const RESYNC: Duration = Duration::from_secs(5);
/// Upstream's discovery client timeout.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The most endpoints tried in one check (upstream makes five attempts).
const ATTEMPTS: usize = 5;
/// The largest discovery document read from an aggregated server.
const MAX_DISCOVERY: usize = 8 * 1024 * 1024;

pub(crate) use crate::bootstrap::ensure_authentication_config_map;

/// Starts following APIServices.
pub(crate) fn start(state: Arc<State>) {
    let Some(rt) = state
        .registry
        .by_plural("apiregistration.k8s.io", "v1", "apiservices")
    else {
        return;
    };
    let Ok(sub) = state
        .cache
        .subscribe(&rt, &rt.key_prefix(), Some(state.cache.revision()), false)
    else {
        return;
    };
    let mut live = sub.live;
    let prefix = rt.key_prefix();
    tokio::spawn(async move {
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = live.recv() => match event {
                    Ok(ev) if *ev.type_prefix == *prefix => {
                        // Let a burst of writes settle into one pass.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        while live.try_recv().is_ok() {}
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = resync.tick() => {}
            }
            sync(&state, &rt).await;
        }
    });
}

/// One pass: rebuild the table, check every remote, write the conditions that changed.
async fn sync(state: &Arc<State>, rt: &Arc<tandem_core::registry::ResourceType>) {
    let objects: Vec<Value> = state
        .cache
        .snapshot(rt, &rt.key_prefix(), |_| true)
        .items
        .iter()
        .filter_map(|o| o.to_value())
        .collect();
    state.aggregator.rebuild(&objects);
    let remotes: Vec<(Value, Arc<Remote>)> = objects
        .into_iter()
        .filter_map(|o| {
            let spec = model::RemoteSpec::of(&o)?;
            let remote = state.aggregator.remote(&spec.group, &spec.version)?;
            Some((o, remote))
        })
        .collect();
    let checks = remotes.iter().map(|(object, remote)| async move {
        let outcome = check(state, remote).await;
        let passed = outcome == Check::Passed;
        remote.available.store(passed, Ordering::Relaxed);
        let (status, reason, message) = model::condition(&remote.spec, &outcome);
        let now = tandem_core::time::now_rfc3339();
        let Some(next) = model::next_status(object, (status, reason, &message), &now) else {
            return;
        };
        if !passed {
            tracing::info!(apiservice = %remote.spec.name, %reason, %message, "APIService not available");
        }
        let mut updated = object.clone();
        updated["status"] = next;
        if let Some(meta) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let mut ctx = Ctx::internal("system:kube-aggregator");
        if let Err(e) = state
            .update(
                &mut ctx,
                rt,
                None,
                &remote.spec.name,
                updated,
                Some("status"),
            )
            .await
        {
            tracing::debug!(apiservice = %remote.spec.name, error = %e.message, "APIService status not written (retried on the next pass)");
        }
    });
    futures::future::join_all(checks).await;
}

/// Upstream's availability checks of one remote, in order; a passing discovery read is kept.
async fn check(state: &State, remote: &Remote) -> Check {
    let spec = &remote.spec;
    let addresses = match crate::service_resolve::service_addresses(
        &state.registry,
        &state.cache,
        &spec.namespace,
        &spec.service,
        spec.port,
    ) {
        Ok(a) => a,
        Err(ResolveError::ServiceNotFound { .. }) => return Check::ServiceNotFound,
        Err(ResolveError::NoPort { .. }) => return Check::ServicePortError,
        Err(ResolveError::NoEndpoints { port_name, .. }) => {
            return Check::MissingEndpoints { port_name };
        }
        Err(e) => return Check::DiscoveryFailed(e.to_string()),
    };
    let forwarder = match &remote.forwarder {
        Ok(f) => f,
        Err(e) => return Check::DiscoveryFailed(e.clone()),
    };
    let path = spec.discovery_path();
    let mut last = String::new();
    for (host, port) in addresses.into_iter().take(ATTEMPTS) {
        let url = format!("{}{path}", super::base_url(&host, port));
        match tokio::time::timeout(CHECK_TIMEOUT, discovery_get(forwarder, &url)).await {
            Ok(Ok((code, body))) if (200..400).contains(&code) => {
                let list = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .filter(|v| v.get("kind").and_then(Value::as_str) == Some("APIResourceList"));
                let mut discovery = remote.discovery.lock().unwrap_or_else(|p| p.into_inner());
                match list {
                    Some(list) => *discovery = (Some(list), false),
                    None => discovery.1 = true,
                }
                return Check::Passed;
            }
            Ok(Ok((code, _))) => last = format!("bad status from {url}: {code}"),
            Ok(Err(e)) => last = format!("failing or missing response from {url}: {e}"),
            Err(_) => {
                last = format!(
                    "failing or missing response from {url}: Get {url:?}: context deadline exceeded"
                )
            }
        }
    }
    remote.discovery.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
    Check::DiscoveryFailed(last)
}

/// GETs `url` as the aggregator (`system:kube-aggregator` in `system:masters`): status and body.
async fn discovery_get(
    forwarder: &tandem_netproxy::Forwarder,
    url: &str,
) -> Result<(u16, Bytes), String> {
    let mut req = Request::get("/")
        .header(http::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    super::add_identity(
        req.headers_mut(),
        "system:kube-aggregator",
        &["system:masters".into()],
        &Default::default(),
    );
    let resp = forwarder
        .forward(req, url)
        .await
        .map_err(|e| e.to_string())?;
    let code = resp.status().as_u16();
    let body = Limited::new(resp.into_body(), MAX_DISCOVERY)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((code, body))
}
