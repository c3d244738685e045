//! The API server's side of LimitRanges and ResourceQuotas: the `LimitRanger` admission plugin
//! (upstream `plugin/pkg/admission/limitranger`) and the `ResourceQuota` admission plugin
//! (upstream `k8s.io/apiserver/pkg/admission/plugin/resourcequota`). The decisions are
//! `tandem_core::admission::limit_ranger` and `tandem_core::quota`; this module looks up the
//! namespace's LimitRanges and ResourceQuotas and charges quotas.
//!
//! A write that fits every covering quota charges each of them before it is stored: the
//! quota's `status.used` is rewritten with a compare-and-swap on its revision, read fresh from
//! the store, and on a conflict the check runs again against the new usage — as upstream's
//! quota evaluator does — so two creates racing for the last unit cannot both pass. Charges by
//! this server are also serialized per namespace. The ResourceQuota controller later recomputes
//! usage from the objects themselves, which also returns what a write that failed after being
//! charged took.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tandem_core::admission::{AdmissionError, Operation, limit_ranger};
use tandem_core::quota::{self, Evaluator};
use tandem_core::registry::ResourceType;
use tandem_store::StoreError;

use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::state::State;

/// How many times a charge is retried after losing a compare-and-swap race.
const CHARGE_ATTEMPTS: usize = 16;

fn is_core(rt: &ResourceType, kind: &str) -> bool {
    rt.group.is_empty() && rt.kind == kind
}

/// The lock serializing this server's quota charges in one namespace.
fn namespace_lock(ns: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    locks.entry(ns.to_string()).or_default().clone()
}

impl State {
    /// The cached objects of a core type in `ns`.
    fn cached_in_namespace(&self, plural: &str, ns: &str) -> Vec<Value> {
        let Some(rt) = self.registry.by_plural("", "v1", plural) else {
            return Vec::new();
        };
        self.cache
            .snapshot(&rt, &rt.namespace_prefix(Some(ns)), |_| true)
            .items
            .iter()
            .filter_map(|o| o.to_value())
            .collect()
    }

    /// The LimitRanger plugin: on pod creation, applies the namespace's LimitRange defaults to
    /// `obj` and checks its containers and totals; on claim creation and update, checks the
    /// requested storage. Objects being deleted are left alone, as upstream.
    pub(crate) fn admit_limit_ranges(
        &self,
        op: Operation,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), AdmissionError> {
        let pod = is_core(rt, "Pod") && op == Operation::Create;
        let claim = is_core(rt, "PersistentVolumeClaim");
        if !(pod || claim) || old.is_some_and(meta::is_deleting) {
            return Ok(());
        }
        let Some(ns) = meta::namespace(obj).map(str::to_string) else {
            return Ok(());
        };
        let ranges = self.cached_in_namespace("limitranges", &ns);
        if ranges.is_empty() {
            return Ok(());
        }
        if pod {
            limit_ranger::default_pod(obj, &ranges);
            limit_ranger::validate_pod(obj, &ranges).map_err(AdmissionError::Forbidden)
        } else {
            limit_ranger::validate_claim(obj, &ranges).map_err(AdmissionError::Forbidden)
        }
    }

    /// The ResourceQuota plugin for a create (`old` is `None`) or update of `obj`: refuses it
    /// with 403 when it does not fit a covering quota, else charges the quotas (unless
    /// `dry_run`). Runs last, after validation, as upstream's validating plugin.
    pub(crate) async fn admit_quota(
        &self,
        rt: &ResourceType,
        obj: &Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> ApiResult<()> {
        if !rt.namespaced || rt.plural == "events" {
            return Ok(());
        }
        let evaluator = Evaluator::for_resource(&rt.group, &rt.plural);
        if old.is_some() && !evaluator.handles_update() {
            return Ok(());
        }
        let Some(ns) = meta::namespace(obj).map(str::to_string) else {
            return Ok(());
        };
        let Some(quota_rt) = self.registry.by_plural("", "v1", "resourcequotas") else {
            return Ok(());
        };
        let keys: Vec<String> = self
            .cache
            .snapshot(&quota_rt, &quota_rt.namespace_prefix(Some(&ns)), |_| true)
            .items
            .iter()
            .map(|o| o.key.to_string())
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let lock = namespace_lock(&ns);
        let _guard = lock.lock().await;
        let now = tandem_core::time::unix(std::time::SystemTime::now()).0;
        let mut charged: BTreeSet<String> = BTreeSet::new();
        for _ in 0..CHARGE_ATTEMPTS {
            let mut quotas = Vec::new();
            let mut stored = Vec::new();
            for key in keys.iter().filter(|k| !charged.contains(*k)) {
                let Some(kv) = self.store.get(key).await? else {
                    continue;
                };
                let Ok(value) = serde_json::from_slice::<Value>(&kv.value) else {
                    continue;
                };
                quotas.push(value);
                stored.push((key.clone(), kv.mod_revision));
            }
            let charges =
                quota::check_request(&quotas, &evaluator, obj, old, now).map_err(|msg| {
                    crate::admission::admission_error(rt, obj, AdmissionError::Forbidden(msg))
                })?;
            if dry_run || charges.is_empty() {
                return Ok(());
            }
            let mut lost_race = false;
            for charge in charges {
                let (Some(q), Some((key, rev))) =
                    (quotas.get_mut(charge.index), stored.get(charge.index))
                else {
                    continue;
                };
                q["status"]["used"] = quota::evaluator::to_value(&charge.used);
                let bytes = serde_json::to_vec(q)
                    .map(Bytes::from)
                    .map_err(|e| ApiError::internal(format!("cannot encode quota: {e}")))?;
                match self.store.update(key, bytes, Some(*rev)).await {
                    Ok(_) => {
                        charged.insert(key.clone());
                    }
                    Err(StoreError::Conflict { .. } | StoreError::NotFound(_)) => {
                        lost_race = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if !lost_race {
                return Ok(());
            }
        }
        Err(ApiError::internal(
            "resource quota evaluation failed: too many conflicts updating quota usage".to_string(),
        ))
    }
}
