//! core/v1 Events as tandem's components record them, built in one place: what upstream's
//! `record.EventRecorder` (`k8s.io/client-go/tools/record`) fills in for the kubelet, the
//! scheduler, the controllers and kube-proxy. Writing them is the caller's (this crate does no
//! I/O); the name, timestamps, source and reporting fields are the same for every component.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

/// `Normal` or `Warning`, the two event types the API accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an event says and who says it.
#[derive(Debug, Clone)]
pub struct EventSpec<'a> {
    /// The object the event is about; its namespace is the event's (`default` without one).
    pub involved: ObjectReference,
    pub type_: EventType,
    pub reason: &'a str,
    pub message: &'a str,
    /// `source.component`, `reportingComponent` (`kubelet`, `default-scheduler`, …).
    pub component: &'a str,
    /// `source.host` and `reportingInstance` when the reporter runs on a node; otherwise the
    /// instance is the component.
    pub host: Option<&'a str>,
    /// `action`, when the reporter sets one. With an action the event also carries
    /// `eventTime` (microseconds), which the API then requires reporting fields and an action
    /// for; without one it is a legacy event, as the kubelet and kube-proxy write them.
    pub action: Option<&'a str>,
    pub at: SystemTime,
}

/// The Event to create: named `<object>.<hex nanoseconds>` as upstream names them, counted
/// once, first and last seen `at`.
pub fn event(spec: EventSpec<'_>) -> Event {
    let (secs, micros) = crate::time::unix(spec.at);
    let nanos = spec
        .at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let second = Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
    let micro = Timestamp::from_microsecond(secs.saturating_mul(1_000_000) + i64::from(micros))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let namespace = spec
        .involved
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let object = spec
        .involved
        .name
        .clone()
        .unwrap_or_else(|| "object".into());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{object}.{nanos:x}")),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        involved_object: spec.involved,
        reason: Some(spec.reason.to_string()),
        message: Some(spec.message.to_string()),
        type_: Some(spec.type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(spec.component.to_string()),
            host: spec.host.map(str::to_string),
        }),
        reporting_component: Some(spec.component.to_string()),
        reporting_instance: Some(spec.host.unwrap_or(spec.component).to_string()),
        action: spec.action.map(str::to_string),
        first_timestamp: Some(Time(second)),
        last_timestamp: Some(Time(second)),
        event_time: spec.action.is_some().then_some(MicroTime(micro)),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_event_names_its_object_reporter_and_time() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        let ev = event(EventSpec {
            involved: ObjectReference {
                kind: Some("Service".into()),
                name: Some("web".into()),
                namespace: Some("shop".into()),
                ..ObjectReference::default()
            },
            type_: EventType::Warning,
            reason: "EndpointsNotReachable",
            message: "m",
            component: "tandem-proxy",
            host: Some("linux-1"),
            action: None,
            at,
        });
        let v = serde_json::to_value(&ev).unwrap_or_default();
        assert_eq!(v["metadata"]["name"], "web.187afca76f25ca00");
        assert_eq!(v["metadata"]["namespace"], "shop");
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["source"]["component"], "tandem-proxy");
        assert_eq!(v["source"]["host"], "linux-1");
        assert_eq!(v["reportingInstance"], "linux-1");
        assert_eq!(v["firstTimestamp"], "2025-11-24T16:00:00Z");
        assert_eq!(v["count"], 1);
        assert!(v.get("action").is_none());
        assert!(v.get("eventTime").is_none());
    }

    #[test]
    fn an_object_without_a_namespace_gets_the_default_one_and_the_component_reports() {
        let ev = event(EventSpec {
            involved: ObjectReference {
                kind: Some("Node".into()),
                name: Some("n1".into()),
                ..ObjectReference::default()
            },
            type_: EventType::Normal,
            reason: "Scheduled",
            message: "m",
            component: "default-scheduler",
            host: None,
            action: Some("Binding"),
            at: SystemTime::UNIX_EPOCH,
        });
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("default-scheduler"));
        assert_eq!(ev.action.as_deref(), Some("Binding"));
        let v = serde_json::to_value(&ev).unwrap_or_default();
        assert_eq!(v["eventTime"], "1970-01-01T00:00:00.000000Z");
        assert_eq!(ev.source.and_then(|s| s.host), None);
    }
}
