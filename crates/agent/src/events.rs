//! The API side of a pod worker: pod status writes (the kubelet's status manager), core/v1
//! Events with `source.component: kubelet` (the kubelet's event recorder, with its
//! count-and-lastTimestamp aggregation of repeats), and the final pod deletion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod, PodStatus};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};

use crate::clock::{self, Clock};
use crate::pod_worker::{EventType, ReportError, Reporter};

/// (pod uid, field path, reason, message): what makes two events the same for aggregation.
type EventKey = (String, String, String, String);

/// Writes pod status and events through the API.
pub struct ApiReporter {
    client: Client,
    node: String,
    clock: Clock,
    /// (pod uid, field path, reason, message) → (event name, count).
    seen: Arc<Mutex<HashMap<EventKey, (String, i32)>>>,
}

impl ApiReporter {
    pub fn new(client: Client, node: &str, clock: Clock) -> ApiReporter {
        ApiReporter {
            client,
            node: node.to_string(),
            clock,
            seen: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn pods(&self, pod: &Pod) -> Api<Pod> {
        Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }
}

fn gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[async_trait]
impl Reporter for ApiReporter {
    async fn status(&self, pod: &Pod, status: &PodStatus) -> Result<(), ReportError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let patch = serde_json::json!({ "status": status });
        match self
            .pods(pod)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(p) if p.metadata.uid == pod.metadata.uid => Ok(()),
            Ok(_) => Err(ReportError::Gone),
            Err(e) if gone(&e) => Err(ReportError::Gone),
            Err(e) => Err(ReportError::Api(e)),
        }
    }

    /// Events are written in the background, as the kubelet's recorder does: a slow API never
    /// delays a pod's lifecycle.
    async fn event(
        &self,
        pod: &Pod,
        field_path: Option<&str>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let writer = EventWriter {
            client: self.client.clone(),
            node: self.node.clone(),
            seen: self.seen.clone(),
        };
        // The event names its pod; the task keeps only that, not a copy of the whole pod.
        let pod = PodRef {
            name: pod.metadata.name.clone(),
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let field_path = field_path.map(str::to_string);
        let (reason, message) = (reason.to_string(), message.to_string());
        let now = self.clock.now();
        tokio::spawn(async move {
            writer
                .write(pod, field_path.as_deref(), type_, &reason, &message, now)
                .await
        });
    }

    async fn delete(&self, pod: &Pod) -> Result<(), ReportError> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.pods(pod).delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if gone(&e) || matches!(&e, kube::Error::Api(s) if s.code == 409) => Ok(()),
            Err(e) => Err(ReportError::Api(e)),
        }
    }
}

/// The pod an event is about.
struct PodRef {
    name: Option<String>,
    namespace: String,
    uid: String,
}

/// Writes one event (or bumps the count of a repeat), off the worker's path.
struct EventWriter {
    client: Client,
    node: String,
    seen: Arc<Mutex<HashMap<EventKey, (String, i32)>>>,
}

impl EventWriter {
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        pod: PodRef,
        field_path: Option<&str>,
        type_: EventType,
        reason: &str,
        message: &str,
        now: std::time::SystemTime,
    ) {
        let PodRef {
            name: pod_name,
            namespace: ns,
            uid,
        } = pod;
        let key = (
            uid.clone(),
            field_path.unwrap_or_default().to_string(),
            reason.to_string(),
            message.to_string(),
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let repeat = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() > 20_000 {
                seen.clear();
            }
            seen.get_mut(&key).map(|(name, count)| {
                *count += 1;
                (name.clone(), *count)
            })
        };
        if let Some((name, count)) = repeat {
            let patch = serde_json::json!({ "count": count, "lastTimestamp": clock::time(now) });
            if api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                return;
            }
        }
        let ev = tandem_core::events::event(tandem_core::events::EventSpec {
            involved: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod_name,
                namespace: Some(ns),
                uid: Some(uid),
                field_path: field_path.map(str::to_string),
                resource_version: None,
            },
            type_,
            reason,
            message,
            component: "kubelet",
            host: Some(&self.node),
            action: None,
            at: now,
        });
        let name = ev.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => {
                let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                seen.insert(key, (name, 1));
            }
            Err(e) => tracing::debug!(error = %e, reason, "event not recorded"),
        }
    }
}
