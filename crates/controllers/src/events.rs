//! Writing core/v1 Events about objects, as the controllers' `record.EventRecorder` does upstream
//! (`source.component` names the controller, `reportingController` likewise).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

/// `Normal` or `Warning`, the two event types the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

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
    let now = k8s_openapi::jiff::Timestamp::now();
    let ns = obj
        .meta()
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                obj.name_any(),
                now.as_nanosecond().unsigned_abs()
            )),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: object_ref(obj),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(component.to_string()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(component.to_string()),
        action: Some(reason.to_string()),
        count: Some(1),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(component, reason, error = %e, "event not recorded");
    }
}
