//! Custom resources: what the established CustomResourceDefinitions add to the API, and the
//! controllers upstream's apiextensions-apiserver runs beside it.
//!
//! [`CustomResources`] is the registry the server routes with: the built-in types plus one
//! type per served version of every established CRD, with each version's compiled schema and
//! printer columns. It is rebuilt whenever a CRD changes (`start` follows the watch cache):
//! - the naming controller (`pkg/controller/status/naming_controller.go`) decides
//!   `NamesAccepted` against other CRDs and the built-in resources, and a CRD whose names are
//!   accepted is `Established` (upstream's establishing controller);
//! - the finalizer controller (`pkg/controller/finalizer`) deletes every object of a CRD being
//!   deleted, then removes the `customresourcecleanup.apiextensions.k8s.io` finalizer.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use serde_json::Value;
use tandem_core::apiextensions::crd::{self, PrinterColumn};
use tandem_core::apiextensions::schema::Structural;
use tandem_core::registry::{Registry, ResourceType};

use crate::error::ApiError;
use crate::rest::Ctx;
use crate::state::State;

/// The finalizer every CRD carries until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// One served version of a custom resource.
pub struct CustomVersion {
    /// The CRD's name (`certificates.cert-manager.io`).
    pub crd_name: String,
    /// The version objects are written at (objects written before a change of storage version
    /// stay at the one they were written at until written again).
    pub storage_version: String,
    /// The compiled `openAPIV3Schema` (absent only if it failed to compile).
    pub schema: Option<Arc<Structural>>,
    /// `additionalPrinterColumns`, or NAME and AGE.
    pub columns: Vec<PrinterColumn>,
    /// `selectableFields` JSON paths (`.spec.color`).
    pub selectable_fields: Vec<String>,
    /// Whether the CRD serves more than one version: objects are then converted to the
    /// requested version (`crate::conversion_webhook`).
    pub multi_version: bool,
    /// `subresources.scale`: where the replicas and the selector live.
    pub scale: Option<ScalePaths>,
    /// How objects are converted between the CRD's versions (`spec.conversion`).
    pub conversion: crate::conversion_webhook::Strategy,
}

/// A CRD's `subresources.scale` paths (`.spec.replicas`-style JSON paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl ScalePaths {
    fn of(version: &Value) -> Option<ScalePaths> {
        let scale = version.pointer("/subresources/scale")?;
        let path = |k: &str| scale.get(k).and_then(Value::as_str).map(str::to_string);
        Some(ScalePaths {
            spec_replicas: path("specReplicasPath")?,
            status_replicas: path("statusReplicasPath")?,
            label_selector: path("labelSelectorPath"),
        })
    }
}

/// The JSON pointer of a simple `.a.b` path, as scale paths and selectable fields are
/// (validation allows only dotted field names there).
pub fn json_pointer(path: &str) -> String {
    path.split('.')
        .filter(|s| !s.is_empty())
        .map(|s| format!("/{}", s.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Sets the `apiVersion` of an object of `kind` (or of every item of a list) to `api_version`,
/// as `conversion: None` converts between versions.
pub fn convert_none(v: &mut Value, api_version: &str, kind: &str) {
    let set = |o: &mut Value| {
        if o.get("kind").and_then(Value::as_str) == Some(kind)
            && let Some(map) = o.as_object_mut()
        {
            map.insert("apiVersion".into(), Value::String(api_version.to_string()));
        }
    };
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(set);
    }
    if let Some(object) = v.get_mut("object") {
        set(object);
    }
    set(v);
}

/// What the API serves now.
pub struct Served {
    pub registry: Arc<Registry>,
    versions: HashMap<(String, String, String), Arc<CustomVersion>>,
    /// The established CRDs, for the OpenAPI documents.
    pub established: Vec<Arc<Value>>,
    /// `/openapi/v2` with the custom kinds, as JSON and as protobuf, built on first use.
    v2: OnceLock<Value>,
    v2_protobuf: OnceLock<Result<Vec<u8>, String>>,
    /// The `/openapi/v3` index with the custom group-versions.
    v3_index: OnceLock<Value>,
}

impl Served {
    fn crds(&self) -> Vec<&Value> {
        self.established.iter().map(|c| c.as_ref()).collect()
    }

    /// The OpenAPI v2 document: the built-in one, with the custom kinds merged in.
    pub fn openapi_v2(&self) -> &Value {
        if self.established.is_empty() {
            return tandem_core::openapi::v2();
        }
        self.v2
            .get_or_init(|| tandem_core::openapi::v2_with_crds(&self.crds()))
    }

    /// The OpenAPI v2 document in gnostic protobuf.
    pub fn openapi_v2_protobuf(&self) -> Result<&[u8], String> {
        if self.established.is_empty() {
            return crate::openapi_pb::v2_protobuf().map_err(|e| e.to_string());
        }
        self.v2_protobuf
            .get_or_init(|| {
                crate::openapi_pb::encode_v2(self.openapi_v2()).map_err(|e| e.to_string())
            })
            .as_ref()
            .map(Vec::as_slice)
            .map_err(Clone::clone)
    }

    /// The `/openapi/v3` index.
    pub fn openapi_v3_index(&self) -> &Value {
        self.v3_index
            .get_or_init(|| tandem_core::openapi::v3_index_with_crds(&self.crds()))
    }

    /// One `/openapi/v3/…` document: a built-in group-version or a custom one.
    pub fn openapi_v3(&self, path: &str) -> Option<Value> {
        match tandem_core::openapi::v3_group_version(path) {
            Some(doc) => Some(doc.clone()),
            None => tandem_core::openapi::v3_document_for_path(&self.crds(), path),
        }
    }
}

/// The registry of built-in and custom types, swapped whole when CRDs change.
pub struct CustomResources {
    builtin: Registry,
    current: RwLock<Arc<Served>>,
}

impl Default for CustomResources {
    fn default() -> Self {
        Self::with_builtin(Registry::builtin())
    }
}

impl CustomResources {
    /// Serves `builtin` (the built-in types, less any switched off) and the custom resources.
    pub fn with_builtin(builtin: Registry) -> Self {
        CustomResources {
            current: RwLock::new(Arc::new(Served {
                registry: Arc::new(builtin.clone()),
                versions: HashMap::new(),
                established: Vec::new(),
                v2: OnceLock::new(),
                v2_protobuf: OnceLock::new(),
                v3_index: OnceLock::new(),
            })),
            builtin,
        }
    }
}

impl CustomResources {
    /// What is served now.
    pub fn served(&self) -> Arc<Served> {
        self.current
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The current registry.
    pub fn load(&self) -> Arc<Registry> {
        self.served().registry.clone()
    }

    /// The type served at `/<group>/<version>/<plural>`.
    pub fn by_plural(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.load().by_plural(group, version, plural)
    }

    /// The type of an `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.load().by_kind(api_version, kind)
    }

    /// The custom version behind `rt`, if `rt` is a custom resource.
    pub fn custom(&self, rt: &ResourceType) -> Option<Arc<CustomVersion>> {
        let served = self.served();
        // Asked on every write (and answer) of every kind: a cluster without CRDs answers
        // without building the key.
        if served.versions.is_empty() {
            return None;
        }
        served
            .versions
            .get(&(rt.group.clone(), rt.version.clone(), rt.plural.clone()))
            .cloned()
    }

    /// Rebuilds what is served from the current CRDs.
    fn rebuild(&self, crds: &[Arc<Value>]) {
        let previous = self.served();
        let mut extra = Vec::new();
        let mut versions = HashMap::new();
        let mut established = Vec::new();
        for c in crds {
            if !crd::is_established(c) {
                continue;
            }
            established.push(c.clone());
            let storage_version = crd::storage_version(c).unwrap_or_default();
            let name = c
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let served = crd::served_versions(c);
            let multi_version = served.len() > 1;
            // A conversion webhook whose configuration did not change keeps its client.
            let previous_strategy = previous
                .versions
                .values()
                .find(|v| v.crd_name == name)
                .map(|v| v.conversion.clone());
            let conversion = crate::conversion_webhook::Strategy::of(c, previous_strategy.as_ref());
            for v in served {
                let Some(rt) = crd::resource_type(c, &v) else {
                    continue;
                };
                let spec_version = version_spec(c, &v);
                let schema = spec_version
                    .and_then(|s| s.pointer("/schema/openAPIV3Schema"))
                    .and_then(|s| match tandem_core::apiextensions::schema::compile(s) {
                        Ok(s) => Some(Arc::new(s)),
                        Err(errors) => {
                            tracing::warn!(crd = %name, version = %v, ?errors, "schema does not compile");
                            None
                        }
                    });
                let selectable_fields = spec_version
                    .and_then(|s| s.get("selectableFields"))
                    .and_then(Value::as_array)
                    .map(|fields| {
                        fields
                            .iter()
                            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                versions.insert(
                    (rt.group.clone(), rt.version.clone(), rt.plural.clone()),
                    Arc::new(CustomVersion {
                        crd_name: name.clone(),
                        storage_version: storage_version.clone(),
                        schema,
                        columns: crd::printer_columns(c, &v),
                        selectable_fields,
                        multi_version,
                        scale: spec_version.and_then(ScalePaths::of),
                        conversion: conversion.clone(),
                    }),
                );
                extra.push(rt);
            }
        }
        let served = Served {
            registry: Arc::new(self.builtin.with_extra(extra)),
            versions,
            established,
            v2: OnceLock::new(),
            v2_protobuf: OnceLock::new(),
            v3_index: OnceLock::new(),
        };
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(served),
            Err(p) => *p.into_inner() = Arc::new(served),
        }
    }
}

/// The `spec.versions[]` entry named `version`.
fn version_spec<'a>(c: &'a Value, version: &str) -> Option<&'a Value> {
    c.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
}

/// The CRD type itself.
fn crd_type(state: &State) -> Option<Arc<ResourceType>> {
    state
        .registry
        .by_plural(crd::GROUP, "v1", "customresourcedefinitions")
}

/// The CRDs in the cache.
fn current_crds(state: &State, rt: &ResourceType) -> Vec<Arc<Value>> {
    state
        .cache
        .snapshot(rt, &rt.key_prefix(), |_| true)
        .items
        .iter()
        .map(|o| Arc::new(o.value().into_owned()))
        .collect()
}

/// Follows CRD changes: names, conditions, cleanup, and what is served.
pub fn start(state: Arc<State>) {
    let Some(rt) = crd_type(&state) else {
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
        reconcile(&state, &rt).await;
        loop {
            match live.recv().await {
                Ok(ev) if *ev.type_prefix == *prefix => {}
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
            // Let a burst of CRD writes (an `apply -f` of several) settle into one pass.
            tokio::time::sleep(Duration::from_millis(20)).await;
            while live.try_recv().is_ok() {}
            reconcile(&state, &rt).await;
        }
    });
}

/// One pass: clean up deleted CRDs, decide names and conditions, serve what is established,
/// then write the statuses that changed. What is served is rebuilt from the statuses about to
/// be written, so a client that sees `Established` can use the resource at once.
async fn reconcile(state: &Arc<State>, rt: &Arc<ResourceType>) {
    let crds = current_crds(state, rt);
    let now = tandem_core::time::now_rfc3339();
    let builtin = Registry::builtin();
    let mut next: Vec<Arc<Value>> = Vec::with_capacity(crds.len());
    let mut writes = Vec::new();
    for c in &crds {
        let name = c
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if c.pointer("/metadata/deletionTimestamp").is_some() {
            if let Err(e) = clean_up(state, c, &name).await {
                tracing::warn!(crd = %name, error = %e.message, "cannot remove the objects of a deleted CRD yet");
            }
            continue;
        }
        // Names are judged against the CRDs whose names were already accepted, as upstream's
        // naming controller does: the first to claim a name keeps it.
        let others: Vec<&Value> = crds
            .iter()
            .filter(|o| o.pointer("/metadata/name") != c.pointer("/metadata/name"))
            .filter(|o| crd::is_established(o))
            .map(|o| o.as_ref())
            .collect();
        let names = crd::names_accepted(c, &others, &builtin);
        let status = crd::status_conditions(c, names, &now);
        if c.get("status") == Some(&status) {
            next.push(c.clone());
            continue;
        }
        let mut updated = c.as_ref().clone();
        updated["status"] = status;
        // The status is the controller's alone: written without a precondition.
        if let Some(meta) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        next.push(Arc::new(updated.clone()));
        writes.push((name, updated));
    }
    state.registry.rebuild(&next);
    sync_api_services(state, &next).await;
    for (name, updated) in writes {
        let mut ctx = Ctx::internal("system:apiextensions-apiserver");
        if let Err(e) = state
            .update(&mut ctx, rt, None, &name, updated, Some("status"))
            .await
        {
            tracing::debug!(crd = %name, error = %e.message, "CRD status not written (retried on the next change)");
        }
    }
}

/// The `APIService`s of custom resources, as upstream's crdregistration controller keeps
/// them: one local, `Available` APIService per group-version an established CRD serves
/// (automanaged, group priority 1000, version priority 100), deleted once no CRD serves it
/// and no built-in type does either.
async fn sync_api_services(state: &Arc<State>, crds: &[Arc<Value>]) {
    let mut wanted = std::collections::BTreeSet::new();
    for c in crds.iter().filter(|c| crd::is_established(c)) {
        let Some(group) = c.pointer("/spec/group").and_then(Value::as_str) else {
            continue;
        };
        for v in c
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        {
            if let Some(version) = v.get("name").and_then(Value::as_str) {
                wanted.insert((group.to_string(), version.to_string()));
            }
        }
    }
    for (group, version) in &wanted {
        if let Err(e) = crate::bootstrap::ensure_api_service(state, group, version).await {
            tracing::debug!(group, version, error = %e.message, "APIService not written (retried on the next change)");
        }
    }
    let Ok(rt) = state.resource("apiregistration.k8s.io", "v1", "apiservices") else {
        return;
    };
    let builtin: std::collections::BTreeSet<(String, String)> =
        Registry::builtin().group_versions().into_iter().collect();
    let existing = state.cache.snapshot(&rt, &rt.key_prefix(), |_| true).items;
    for o in existing {
        let v = o.value();
        let automanaged = v
            .pointer("/metadata/labels/kube-aggregator.kubernetes.io~1automanaged")
            .and_then(Value::as_str)
            == Some("true");
        let local = v.pointer("/spec/service").is_none_or(Value::is_null);
        let key = (
            v.pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            v.pointer("/spec/version")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        );
        if !automanaged || !local || wanted.contains(&key) || builtin.contains(&key) {
            continue;
        }
        let Some(name) = v.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let mut ctx = Ctx::internal("system:apiserver");
        if let Err(e) = state.delete(&mut ctx, &rt, None, name, &Value::Null).await
            && e.code != 404
        {
            tracing::debug!(apiservice = name, error = %e.message, "APIService not deleted (retried on the next change)");
        }
    }
}

fn has_finalizer(c: &Value) -> bool {
    c.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x == CLEANUP_FINALIZER))
}

/// Deletes every stored object of a CRD being deleted, then drops its cleanup finalizer.
async fn clean_up(state: &Arc<State>, c: &Value, name: &str) -> Result<(), ApiError> {
    let Some((plural, group)) = name.split_once('.') else {
        return Ok(());
    };
    let prefix = format!("/registry/{plural}.{group}/");
    let list = state.store.list(&prefix, None, None, None).await?;
    for kv in list.items {
        match state.store.delete(&kv.key, None).await {
            Ok(_) | Err(tandem_store::StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if has_finalizer(c) {
        let Some(rt) = crd_type(state) else {
            return Ok(());
        };
        let mut updated = c.clone();
        let finalizers: Vec<Value> = c
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter(|x| *x != CLEANUP_FINALIZER)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        updated["metadata"]["finalizers"] = Value::Array(finalizers);
        let mut ctx = Ctx::internal("system:apiextensions-apiserver");
        state
            .update(&mut ctx, &rt, None, name, updated, None)
            .await?;
    }
    Ok(())
}
