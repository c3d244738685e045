//! Namespace lifecycle: a namespace being deleted (Terminating) has everything in it deleted, then
//! its `kubernetes` finalizer removed through the `finalize` subresource, which lets the API server
//! remove it — upstream's `pkg/controller/namespace` (`NamespacedResourcesDeleter`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use kube::runtime::watcher;
use tandem_core::registry::Registry;
use tokio::sync::Mutex;

use crate::dynamic::api_for;

/// Runs the namespace controller until the runtime stops.
pub async fn run(client: kube::Client, registry: Registry) {
    let registry = Arc::new(registry);
    let in_progress: Arc<Mutex<HashSet<String>>> = Arc::default();
    let api: Api<Namespace> = Api::all(client.clone());
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(item) = stream.next().await {
        let ns = match item {
            Ok(watcher::Event::Apply(ns) | watcher::Event::InitApply(ns)) => ns,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "namespace watch error; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if ns.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let Some(name) = ns.metadata.name.clone() else {
            continue;
        };
        if !in_progress.lock().await.insert(name.clone()) {
            continue;
        }
        let (client, registry, in_progress) =
            (client.clone(), registry.clone(), in_progress.clone());
        crate::scope::spawn(async move {
            // Bounded: a namespace whose content never goes (a finalizer nobody removes) is retried
            // with back-off, as upstream's controller requeues it.
            let mut delay = Duration::from_millis(200);
            loop {
                match finalize(&client, &registry, &name).await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::debug!(namespace = %name, error = %e, "namespace cleanup will retry")
                    }
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            in_progress.lock().await.remove(&name);
        });
    }
}

/// The custom resource types of the established CRDs, at their storage versions (upstream's
/// deleter walks discovery, which lists them).
async fn custom_types(
    client: &kube::Client,
    registry: &Registry,
) -> Result<Vec<tandem_core::registry::ResourceType>, kube::Error> {
    use tandem_core::apiextensions::crd;
    let Some(crd_type) = registry.by_plural(crd::GROUP, "v1", "customresourcedefinitions") else {
        return Ok(Vec::new());
    };
    let list = api_for(client, &crd_type, None)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .filter(crd::is_established)
        .filter_map(|c| {
            let version = crd::storage_version(&c)?;
            crd::resource_type(&c, &version)
        })
        .collect())
}

/// One pass: delete what is left in `name`; when nothing is, remove the `kubernetes` finalizer.
/// Returns whether the namespace is finished.
async fn finalize(
    client: &kube::Client,
    registry: &Registry,
    name: &str,
) -> Result<bool, kube::Error> {
    let mut remaining = 0usize;
    let custom = custom_types(client, registry).await?;
    // Create-only kinds (LocalSubjectAccessReview) are never stored: nothing to delete.
    for rt in registry
        .all()
        .iter()
        .map(|t| t.as_ref())
        .chain(custom.iter())
        .filter(|t| t.namespaced && t.supports("list") && t.supports("deletecollection"))
        .filter(|t| tandem_core::conversion::is_storage_version(t))
    {
        let api = api_for(client, rt, Some(name));
        let list = api.list_metadata(&ListParams::default()).await?;
        if list.items.is_empty() {
            continue;
        }
        remaining += list.items.len();
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        for item in list
            .items
            .iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
        {
            if let Some(n) = &item.metadata.name {
                match api.delete(n, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    if remaining > 0 {
        return Ok(false);
    }
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ns = match api.get(name).await {
        Ok(ns) => ns,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(true),
        Err(e) => return Err(e),
    };
    if let Some(spec) = ns.spec.as_mut()
        && let Some(f) = spec.finalizers.as_mut()
    {
        f.retain(|f| f != "kubernetes");
    }
    let body = serde_json::to_vec(&ns).map_err(kube::Error::SerdeError)?;
    let req = http::Request::put(format!("/api/v1/namespaces/{name}/finalize"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    match client.request::<Namespace>(req).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
