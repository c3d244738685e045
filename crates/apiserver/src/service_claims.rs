//! Claims in the store for the ClusterIPs and NodePorts Services hold, so that several API
//! servers on one etcd never give one address or port to two Services. Each server chooses
//! from its own watch cache (`service_alloc`); before a Service is written, every address and
//! port it takes that its stored version did not hold is claimed by creating the key
//! `/tandem/serviceips/<ip>` or `/tandem/servicenodeports/<port>` (a compare-and-swap: it fails
//! when the key exists), naming the Service. Upstream does the same through etcd — the
//! `IPAddress` objects of `MultiCIDRServiceAllocator` (one object per address, created before
//! the Service), or the older bitmap key under `/registry/ranges/`.
//!
//! A claim is released (deleted, compare-and-swap on its revision and holder) when the write it
//! guarded fails, when the Service gives the address or port up, and when it is deleted. A claim
//! whose holder no longer holds the resource (its server died between claiming and writing, or
//! before releasing) is stale once it is older than [`STALE_AFTER`]; the next Service that wants
//! the resource takes it over. Claims live outside `/registry/`, so nothing lists them as objects.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_store::{Revision, StoreError};

use crate::error::ApiError;
use crate::state::State;

/// How old a claim whose holder does not hold its resource must be before another Service may
/// take it over: far longer than a Service write takes between its claim and its store write.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// An address or port a Service holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    Ip(Ipv4Addr),
    NodePort(u16),
}

impl Resource {
    fn key(self) -> String {
        match self {
            Resource::Ip(ip) => format!("/tandem/serviceips/{ip}"),
            Resource::NodePort(p) => format!("/tandem/servicenodeports/{p}"),
        }
    }
}

/// What `service` (a Service object) holds.
pub fn held(service: &Value) -> BTreeSet<Resource> {
    let held = crate::service_alloc::held(service);
    held.ip
        .map(Resource::Ip)
        .into_iter()
        .chain(held.ports.into_iter().map(Resource::NodePort))
        .collect()
}

/// Claims this request made (released if its write fails).
#[derive(Debug, Default)]
pub struct Made(Vec<(Resource, Revision)>);

/// Another Service holds a resource this one wants.
#[derive(Debug)]
pub struct Taken(pub Resource);

/// Claims for `service_key` every resource `new` holds that `old` did not. On `Taken`, the
/// claims made so far are released again.
pub async fn claim(
    state: &State,
    service_key: &str,
    new: &Value,
    old: Option<&Value>,
) -> Result<Result<Made, Taken>, ApiError> {
    let before = old.map(held).unwrap_or_default();
    let mut made = Made::default();
    for r in held(new).difference(&before).copied() {
        match claim_one(state, service_key, r).await {
            Ok(Some(rev)) => made.0.push((r, rev)),
            Ok(None) => {}
            Err(ClaimError::Taken) => {
                release_made(state, made).await;
                return Ok(Err(Taken(r)));
            }
            Err(ClaimError::Api(e)) => {
                release_made(state, made).await;
                return Err(e);
            }
        }
    }
    Ok(Ok(made))
}

enum ClaimError {
    Taken,
    Api(ApiError),
}

/// Claims one resource: `Some(revision)` when this call created the claim, `None` when
/// `service_key` held it already.
async fn claim_one(
    state: &State,
    service_key: &str,
    r: Resource,
) -> Result<Option<Revision>, ClaimError> {
    let key = r.key();
    // Twice at most: a stale claim is removed, then the resource claimed afresh.
    for _ in 0..2 {
        let value = json!({"service": service_key, "claimed": unix_now()});
        let bytes = Bytes::from(value.to_string());
        match state.store.create(&key, bytes).await {
            Ok(kv) => return Ok(Some(kv.mod_revision)),
            Err(StoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(ClaimError::Api(e.into())),
        }
        let Some(existing) = state
            .store
            .get(&key)
            .await
            .map_err(|e| ClaimError::Api(e.into()))?
        else {
            continue;
        };
        let claim: Value = serde_json::from_slice(&existing.value).unwrap_or(Value::Null);
        let holder = claim.get("service").and_then(Value::as_str).unwrap_or("");
        if holder == service_key {
            return Ok(None);
        }
        let claimed = claim.get("claimed").and_then(Value::as_u64).unwrap_or(0);
        if unix_now().saturating_sub(claimed) < STALE_AFTER.as_secs()
            || holder_holds(state, holder, r).await
        {
            return Err(ClaimError::Taken);
        }
        tracing::info!(claim = %key, holder, "taking over a stale Service claim");
        match state.store.delete(&key, Some(existing.mod_revision)).await {
            Ok(_) | Err(StoreError::NotFound(_) | StoreError::Conflict { .. }) => {}
            Err(e) => return Err(ClaimError::Api(e.into())),
        }
    }
    Err(ClaimError::Taken)
}

/// Whether the Service stored at `service_key` holds `r`, as of the store's latest revision.
async fn holder_holds(state: &State, service_key: &str, r: Resource) -> bool {
    match state.store.get(service_key).await {
        Ok(Some(kv)) => serde_json::from_slice::<Value>(&kv.value)
            .map(|s| held(&s).contains(&r))
            .unwrap_or(false),
        Ok(None) => false,
        // When in doubt, the claim stands.
        Err(_) => true,
    }
}

/// Releases the claims a failed write made.
pub async fn release_made(state: &State, made: Made) {
    for (r, rev) in made.0 {
        if let Err(e) = state.store.delete(&r.key(), Some(rev)).await
            && !matches!(e, StoreError::NotFound(_) | StoreError::Conflict { .. })
        {
            tracing::warn!(claim = %r.key(), error = %e, "cannot release a Service claim (it goes stale)");
        }
    }
}

/// Releases the claims of `service_key` on what `old` held and `new` (none when the Service is
/// gone) does not.
pub async fn release_dropped(state: &State, service_key: &str, old: &Value, new: Option<&Value>) {
    let after = new.map(held).unwrap_or_default();
    for r in held(old).difference(&after) {
        let key = r.key();
        let Ok(Some(kv)) = state.store.get(&key).await else {
            continue;
        };
        let claim: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
        if claim.get("service").and_then(Value::as_str) != Some(service_key) {
            continue;
        }
        if let Err(e) = state.store.delete(&key, Some(kv.mod_revision)).await
            && !matches!(e, StoreError::NotFound(_) | StoreError::Conflict { .. })
        {
            tracing::warn!(claim = %key, error = %e, "cannot release a Service claim (it goes stale)");
        }
    }
}

/// The field error for a resource another Service holds, as upstream words a taken address or
/// port; `service` locates the port.
pub fn taken_error(service: &Value, taken: Resource) -> FieldError {
    match taken {
        Resource::Ip(ip) => FieldError::invalid(
            "spec.clusterIPs",
            &json!([ip.to_string()]),
            format!("failed to allocate IP {ip}: provided IP is already allocated"),
        ),
        Resource::NodePort(port) => {
            let index = service
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .and_then(|ports| {
                    ports.iter().position(|p| {
                        p.get("nodePort").and_then(Value::as_u64) == Some(u64::from(port))
                    })
                })
                .unwrap_or(0);
            FieldError::invalid(
                format!("spec.ports[{index}].nodePort"),
                &json!(port),
                "provided port is already allocated",
            )
        }
    }
}

/// Whether the request body asked for `r` itself (an explicit `clusterIP` or `nodePort`), as
/// opposed to the allocator choosing it.
pub fn asked_for(body: &Value, r: Resource) -> bool {
    held(body).contains(&r)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
