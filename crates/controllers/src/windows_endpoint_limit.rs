//! The Windows 64-backend note: Windows nodes' HNS load balancer supports at most 64 backend pods
//! (or unique destination addresses) for a single Service (Kubernetes' "Windows networking"
//! limitations). When a Service that selects Windows pods — `spec.os.name: windows`, or pods on
//! nodes labelled `kubernetes.io/os=windows` — has more than 64 endpoint addresses in its
//! EndpointSlices, a Warning event `WindowsEndpointLimit` is recorded on the Service once; it is
//! recorded again only after the count has gone back to 64 or fewer and over again. tandem-only:
//! upstream has no such controller.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;

use crate::controller_utils::{SyncResult, map_selector_matches};
use crate::endpointslice::{CONTROLLER_NAME, MANAGED_BY, SERVICE_NAME};
use crate::events::{self, EventType};
use crate::informer::{Informer, split_key};
use crate::workqueue::WorkQueue;

/// Most backends a Service may have for Windows nodes to load-balance it.
pub const WINDOWS_MAX_BACKENDS: usize = 64;
/// Reason of the warning event.
pub const REASON: &str = "WindowsEndpointLimit";

struct Ctx {
    client: kube::Client,
    services: Informer<Service>,
    slices: Informer<EndpointSlice>,
    pods: Informer<Pod>,
    nodes: Informer<Node>,
    /// Services (uid) warned about since they last had 64 or fewer endpoints.
    warned: std::sync::Mutex<HashSet<String>>,
    queue: WorkQueue,
}

/// Runs the note until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>, nodes: Informer<Node>) {
    let ctx = Arc::new(Ctx {
        services: Informer::start(client.clone()),
        slices: Informer::start_with(
            Api::all(client.clone()),
            watcher::Config::default().labels(&format!("{MANAGED_BY}={CONTROLLER_NAME}")),
        ),
        client,
        pods,
        nodes,
        warned: std::sync::Mutex::default(),
        queue: WorkQueue::named("windows-endpoint-limit"),
    });
    let mut svc_events = ctx.services.subscribe();
    let mut slice_events = ctx.slices.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.services, &ctx.slices, &ctx.pods, &ctx.nodes])
        .await;
    ctx.queue.add_keys(&ctx.services.list());
    ctx.queue
        .run_workers_for(1, "windows-endpoint-limit", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = svc_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = slice_events.recv() => {
                for s in change.objects() {
                    if let Some(svc) = s.labels().get(SERVICE_NAME) {
                        ctx.queue.add(format!("{}/{svc}", s.namespace().unwrap_or_default()));
                    }
                }
            }
            else => return,
        }
    }
}

/// Whether a pod is a Windows pod: by `spec.os.name`, or by its node's OS label.
pub fn is_windows_pod(pod: &Pod, node_os: &BTreeMap<String, String>) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.os.as_ref())
        .is_some_and(|os| os.name == "windows")
        || spec
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| node_os.get(n))
            .is_some_and(|os| os == "windows")
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let Some(svc) = ctx.services.get(ns, name) else {
        return Ok(None);
    };
    let uid = svc.uid().unwrap_or_default();
    let addresses: BTreeSet<String> = ctx
        .slices
        .list_namespace(ns)
        .iter()
        .filter(|s| s.labels().get(SERVICE_NAME).map(String::as_str) == Some(name))
        .flat_map(|s| {
            s.endpoints
                .iter()
                .flat_map(|e| e.addresses.iter().cloned())
                .collect::<Vec<_>>()
        })
        .collect();
    let count = addresses.len();
    if count <= WINDOWS_MAX_BACKENDS {
        ctx.warned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        return Ok(None);
    }
    if ctx
        .warned
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&uid)
    {
        return Ok(None);
    }
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Ok(None);
    };
    let node_os: BTreeMap<String, String> = ctx
        .nodes
        .list()
        .iter()
        .filter_map(|n| Some((n.name_any(), n.labels().get("kubernetes.io/os")?.clone())))
        .collect();
    let windows = ctx.pods.list_namespace(ns).iter().any(|p| {
        map_selector_matches(selector, p.metadata.labels.as_ref()) && is_windows_pod(p, &node_os)
    });
    if !windows {
        return Ok(None);
    }
    ctx.warned
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid);
    events::record(
        &ctx.client,
        "endpointslice-controller",
        svc.as_ref(),
        EventType::Warning,
        REASON,
        &format!(
            "Service has {count} endpoints and selects Windows pods: Windows nodes do not support \
             more than {WINDOWS_MAX_BACKENDS} backend pods (or unique destination addresses) for a \
             single Service (HNS load balancer limit); traffic through this Service from Windows \
             nodes may fail"
        ),
    )
    .await;
    Ok(None)
}
