//! Typeless access to every registered resource, for controllers that work across types.

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use tandem_core::registry::ResourceType;

/// The kube-rs `ApiResource` of a registered type.
pub fn api_resource(rt: &ResourceType) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&rt.group, &rt.version, &rt.kind),
        &rt.plural,
    )
}

/// An `Api` for one object's type, scoped to its namespace when the type is namespaced.
pub fn api_for(
    client: &kube::Client,
    rt: &ResourceType,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let ar = api_resource(rt);
    match (rt.namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    }
}
