//! Conversion of custom resources between the versions their CRD serves, as upstream's
//! apiextensions-apiserver converts them (`pkg/apiserver/conversion`): with
//! `spec.conversion.strategy: None` only `apiVersion` changes (`nopConverter`); with `Webhook`
//! the objects are sent to the CRD's conversion webhook in a ConversionReview
//! (`webhookConverter`), one review per object or per list.
//!
//! Where conversion happens, as upstream's storage codec places it: a write at a version other
//! than the storage version is validated at its own version and converted to the storage
//! version just before it is stored (`rest/create.rs`, `rest/write.rs`); the stored object an
//! update, patch or scale starts from is converted to the request's version first
//! (`rest/update.rs`, `rest/subresources.rs`); what is read (a LIST's items in `rest/reads.rs`,
//! watch events in `watch.rs`, every other answer in `server.rs`) is converted to the version
//! the client asked for. Objects stay stored at the version they were written at until they are
//! written again, so a change of storage version needs no migration.
//!
//! The pure parts (the review, the checks on its answer, upstream's messages) are
//! `tandem_core::apiextensions::conversion_review`; the call reuses the admission webhooks'
//! client and Service resolution (`crate::webhook`). A conversion that fails answers
//! `500` with upstream's `conversion webhook for GROUP/VERSION, Kind=KIND failed: …` and
//! nothing is written.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tandem_core::apiextensions::conversion_review::{
    self as review, ConversionError, ReviewVersion,
};
use tandem_core::registry::ResourceType;

use crate::cache::Cache;
use crate::crds::{CustomResources, CustomVersion};
use crate::error::{ApiError, ApiResult};
use crate::state::State;
use crate::webhook::{Client, Endpoint};

/// How long a conversion webhook has to answer (upstream's conversion webhook timeout; the
/// call's URL carries `?timeout=30s` as upstream's does).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// How a CRD converts its objects between versions (`spec.conversion.strategy`).
#[derive(Debug, Clone, Default)]
pub enum Strategy {
    /// `None`: only `apiVersion` changes.
    #[default]
    None,
    /// `Webhook`: the CRD's conversion webhook converts.
    Webhook(Arc<ConversionWebhook>),
}

impl Strategy {
    /// The strategy of CRD `crd`; `previous` is the strategy it had when what is served was
    /// last built, whose webhook (and its idle connections) is kept if its configuration did
    /// not change.
    pub fn of(crd: &Value, previous: Option<&Strategy>) -> Strategy {
        let conversion = crd.pointer("/spec/conversion").unwrap_or(&Value::Null);
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            return Strategy::None;
        }
        let webhook = conversion.get("webhook").unwrap_or(&Value::Null);
        if let Some(Strategy::Webhook(w)) = previous
            && w.config == *webhook
        {
            return Strategy::Webhook(w.clone());
        }
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        Strategy::Webhook(Arc::new(ConversionWebhook::new(name, webhook)))
    }

    pub fn is_webhook(&self) -> bool {
        matches!(self, Strategy::Webhook(_))
    }
}

/// A CRD's conversion webhook, ready to call.
pub struct ConversionWebhook {
    /// The CRD's name, for logs.
    crd: String,
    /// `spec.conversion.webhook` as it was read, to tell whether it changed.
    config: Value,
    endpoint: Endpoint,
    /// The client, or why none could be built (an unreadable caBundle fails every call).
    client: Result<Client, String>,
    review_versions: Vec<String>,
}

impl std::fmt::Debug for ConversionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversionWebhook")
            .field("crd", &self.crd)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl ConversionWebhook {
    fn new(crd: &str, webhook: &Value) -> ConversionWebhook {
        let client_config = webhook.get("clientConfig").unwrap_or(&Value::Null);
        ConversionWebhook {
            crd: crd.to_string(),
            config: webhook.clone(),
            endpoint: Endpoint::of(client_config),
            client: crate::webhook::client_of(client_config),
            review_versions: crate::webhook::string_list(webhook, "conversionReviewVersions"),
        }
    }

    /// Converts `objects[i]` for each `i` of `indices` to `desired` in one review (upstream
    /// `webhookConverter.Convert`). `list` says whether they are the items of a list.
    async fn convert(
        &self,
        registry: &CustomResources,
        cache: &Cache,
        objects: &mut [Value],
        indices: &[usize],
        desired: &str,
        list: bool,
    ) -> Result<(), ConversionError> {
        let Some(first) = indices.first().and_then(|i| objects.get(*i)) else {
            return Ok(());
        };
        let gvk = review::gvk_of(first);
        let failed = |detail: String| ConversionError::Failed {
            gvk: gvk.clone(),
            detail,
        };
        let Some(version) = ReviewVersion::choose(&self.review_versions) else {
            return Err(ConversionError::NoReviewVersion);
        };
        let client = self.client.as_ref().map_err(|e| failed(e.clone()))?;
        let target = crate::webhook::target(&self.endpoint, TIMEOUT, registry, cache)
            .map_err(|e| failed(e.clone()))?;
        let uid = crate::meta::new_uid();
        let sent: Vec<&Value> = indices.iter().filter_map(|i| objects.get(*i)).collect();
        let body = serde_json::to_vec(&review::review(version, &uid, desired, &sent))
            .map_err(|e| failed(e.to_string()))?;
        let started = std::time::Instant::now();
        let answer = client
            .post(&target, Bytes::from(body), TIMEOUT)
            .await
            .map_err(|e| failed(e.to_string()))?;
        tracing::debug!(crd = %self.crd, objects = sent.len(), desired, elapsed = ?started.elapsed(), "conversion webhook called");
        let converted = review::parse_response(version, &uid, &answer).map_err(failed)?;
        let converted = review::check_converted(&gvk, list, &sent, converted, desired)?;
        for (i, object) in indices.iter().zip(converted) {
            if let Some(slot) = objects.get_mut(*i) {
                *slot = object;
            }
        }
        Ok(())
    }
}

/// The answer to a failed conversion: `500` with upstream's message and no reason, as
/// upstream's handlers answer an error that is not an API status (`ErrorToAPIStatus`), so
/// kubectl prints `Error from server: conversion webhook for …`.
fn conversion_error(e: ConversionError) -> ApiError {
    ApiError::new(500, "", e.to_string())
}

impl State {
    /// The served custom version behind `rt` when its CRD serves several versions (the only
    /// case where objects may need converting).
    fn multi_version(&self, rt: &ResourceType) -> Option<Arc<CustomVersion>> {
        self.registry.custom(rt).filter(|c| c.multi_version)
    }

    /// Converts the objects of `rt`'s kind among `objects` to version `version` of its group
    /// (objects of other kinds, and those already there, are left alone). `list` says
    /// whether they are a list's items. Does nothing for a kind that is not a custom resource
    /// served at several versions.
    pub(crate) async fn convert_custom(
        &self,
        rt: &ResourceType,
        objects: &mut [Value],
        version: &str,
        list: bool,
    ) -> ApiResult<()> {
        let Some(custom) = self.multi_version(rt) else {
            return Ok(());
        };
        let desired = format!("{}/{version}", rt.group);
        let indices: Vec<usize> = review::to_convert(objects, &desired)
            .into_iter()
            .filter(|i| objects[*i].get("kind").and_then(Value::as_str) == Some(rt.kind.as_str()))
            .collect();
        if indices.is_empty() {
            return Ok(());
        }
        match &custom.conversion {
            Strategy::None => {
                for i in indices {
                    if let Some(map) = objects[i].as_object_mut() {
                        map.insert("apiVersion".into(), Value::String(desired.clone()));
                    }
                }
                Ok(())
            }
            Strategy::Webhook(webhook) => webhook
                .convert(
                    &self.registry,
                    &self.cache,
                    objects,
                    &indices,
                    &desired,
                    list,
                )
                .await
                .map_err(conversion_error),
        }
    }

    /// `obj` (an object of `rt`'s kind) converted to the version `rt` serves: the form an
    /// update, patch or scale works on, as upstream's storage decodes to the request's version.
    pub(crate) async fn to_request_version(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> ApiResult<()> {
        self.convert_custom(rt, std::slice::from_mut(obj), &rt.version, false)
            .await
    }

    /// The form `obj` (an object of `rt`'s kind) is stored in: `None` when it is stored as it
    /// is, else a copy converted to its CRD's storage version.
    pub(crate) async fn storage_form(
        &self,
        rt: &ResourceType,
        obj: &Value,
    ) -> ApiResult<Option<Value>> {
        let Some(custom) = self.multi_version(rt) else {
            return Ok(None);
        };
        let storage = &custom.storage_version;
        let at_storage = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| av.strip_prefix(rt.group.as_str()))
            .and_then(|v| v.strip_prefix('/'))
            == Some(storage.as_str());
        if storage.is_empty() || at_storage {
            return Ok(None);
        }
        let mut copy = obj.clone();
        self.convert_custom(rt, std::slice::from_mut(&mut copy), storage, false)
            .await?;
        Ok(Some(copy))
    }

    /// Whether answers at `rt` are converted by a webhook: the CRD serves several versions
    /// and converts with `strategy: Webhook`.
    pub(crate) fn converts_by_webhook(&self, rt: &ResourceType) -> bool {
        self.multi_version(rt)
            .is_some_and(|c| c.conversion.is_webhook())
    }

    /// An answer at `rt` (one object, or a list's `items`) converted to the version `rt`
    /// serves. Other answers (a Status, a Scale) are left alone.
    pub(crate) async fn convert_answer(&self, rt: &ResourceType, v: &mut Value) -> ApiResult<()> {
        if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
            return self.convert_custom(rt, items, &rt.version, true).await;
        }
        self.to_request_version(rt, v).await
    }
}
