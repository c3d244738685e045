//! Writing core/v1 Events about objects, as the controllers' `record.EventRecorder` does upstream
//! (`source.component` names the controller, `reportingController` likewise).

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::Resource;
use kube::api::{Api, PostParams};

pub use tandem_core::events::EventType;

/// A reference to `obj` for an event's `involvedObject`.
pub fn object_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(K::kind(&()).to_string()),
        name: obj.meta().name.clone(),
        namespace: obj.meta().namespace.clone(),
        uid: obj.meta().uid.clone(),
        resource_version: obj.meta().resource_version.clone(),
        field_path: None,
    }
}

/// Records an event about `obj` from `component`. Failures are logged, not returned: an event is
/// best-effort, as upstream's recorder drops events it cannot write.
pub async fn record<K: Resource<DynamicType = ()>>(
    client: &kube::Client,
    component: &str,
    obj: &K,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let event = tandem_core::events::event(tandem_core::events::EventSpec {
        involved: object_ref(obj),
        type_,
        reason,
        message,
        component,
        host: None,
        action: Some(reason),
        at: std::time::SystemTime::now(),
    });
    let ns = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(component, reason, error = %e, "event not recorded");
    }
}
