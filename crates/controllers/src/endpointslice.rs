//! The EndpointSlice controller — upstream's `pkg/controller/endpointslice` — and the legacy
//! Endpoints controller (`pkg/controller/endpoint`), which read the same inputs.
//!
//! For every Service with a selector, the pods it selects that have an IP become endpoints:
//! `ready` (pod Ready and not terminating; always when `publishNotReadyAddresses`), `serving`
//! (pod Ready, even while terminating), `terminating` (pod being deleted), with `nodeName` and a
//! `targetRef` to the pod. Ports come from the Service's ports, a named `targetPort` resolved
//! against each pod's container ports; pods resolving ports differently go into different slices,
//! at most 100 endpoints per slice. Slices are labelled `kubernetes.io/service-name` and
//! `endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io` and owned by the
//! Service. The Endpoints object of the same name lists ready addresses and `notReadyAddresses`
//! (terminating pods are left out, as upstream).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort as CoreEndpointPort, EndpointSubset, Endpoints, ObjectReference,
    Pod, Service,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;

use crate::controller_utils::{
    self as cu, SyncResult, controller_ref, map_selector_matches, pod_is_ready,
};
use crate::informer::{Informer, queue_key, split_key};
use crate::workqueue::WorkQueue;

/// Label naming a slice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages a slice.
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY`].
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// Upstream's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

struct Ctx {
    client: kube::Client,
    services: Informer<Service>,
    pods: Informer<Pod>,
    slices: Informer<EndpointSlice>,
    endpoints: Informer<Endpoints>,
    queue: WorkQueue,
}

/// Runs the EndpointSlice and Endpoints controllers until the runtime stops.
pub async fn run(client: kube::Client, pods: Informer<Pod>) {
    let services = Informer::<Service>::start(client.clone());
    let slices = Informer::<EndpointSlice>::start_with(
        Api::all(client.clone()),
        watcher::Config::default().labels(&format!("{MANAGED_BY}={CONTROLLER_NAME}")),
    );
    let endpoints = Informer::<Endpoints>::start(client.clone());
    let ctx = Arc::new(Ctx {
        client,
        services,
        pods,
        slices,
        endpoints,
        queue: WorkQueue::named("endpoint_slice"),
    });
    let mut svc_events = ctx.services.subscribe();
    let mut pod_events = ctx.pods.subscribe();
    let mut slice_events = ctx.slices.subscribe();
    let mut ep_events = ctx.endpoints.subscribe();
    crate::informer::wait_for_cache_sync(&[&ctx.services, &ctx.pods, &ctx.slices, &ctx.endpoints])
        .await;
    ctx.queue.add_keys(&ctx.services.list());
    ctx.queue
        .run_workers_for(4, "endpointslice", &ctx, |ctx, key| async move {
            sync(&ctx, &key).await
        });
    loop {
        tokio::select! {
            Some(change) = svc_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            Some(change) = pod_events.recv() => {
                for pod in change.objects() {
                    let ns = pod.namespace().unwrap_or_default();
                    for svc in ctx.services.list_namespace(&ns) {
                        if selector(&svc).is_some_and(|sel| map_selector_matches(sel, pod.metadata.labels.as_ref())) {
                            ctx.queue.add(queue_key(svc.as_ref()));
                        }
                    }
                }
            }
            Some(change) = slice_events.recv() => {
                for s in change.objects() {
                    if let Some(svc) = s.labels().get(SERVICE_NAME) {
                        ctx.queue.add(format!("{}/{svc}", s.namespace().unwrap_or_default()));
                    }
                }
            }
            Some(change) = ep_events.recv() => {
                ctx.queue.add_keys(change.objects());
            }
            else => return,
        }
    }
}

fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// Resolves a Service port's target against a pod — upstream's `podutil.FindPort`.
fn resolve_port(pod: &Pod, target: Option<&IntOrString>, port: i32, protocol: &str) -> Option<i32> {
    match target {
        None => Some(port),
        Some(IntOrString::Int(i)) => Some(*i),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find_map(|p| {
                (p.name.as_deref() == Some(name.as_str())
                    && p.protocol.as_deref().unwrap_or("TCP") == protocol)
                    .then_some(p.container_port)
            }),
    }
}

/// One slice's worth: address type, ports, endpoints.
type SliceContent = (String, Vec<EndpointPort>, Vec<Endpoint>);

/// One pod as an endpoint, before grouping.
struct PodEndpoint {
    ip: String,
    ready: bool,
    serving: bool,
    terminating: bool,
    node: Option<String>,
    /// `spec.hostname` of a pod whose `spec.subdomain` names the Service (a StatefulSet's pods
    /// behind their governing Service): cluster DNS answers `<hostname>.<service>.<ns>.svc`.
    hostname: Option<String>,
    target: ObjectReference,
    ports: Vec<EndpointPort>,
}

fn endpoints_for(svc: &Service, pods: &[Arc<Pod>]) -> Vec<PodEndpoint> {
    let spec = svc.spec.clone().unwrap_or_default();
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    let mut out = Vec::new();
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty())
        else {
            continue;
        };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let is_ready = pod_is_ready(pod);
        let ports = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|sp| {
                let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
                let port = resolve_port(pod, sp.target_port.as_ref(), sp.port, &protocol)?;
                Some(EndpointPort {
                    name: Some(sp.name.clone().unwrap_or_default()),
                    port: Some(port),
                    protocol: Some(protocol),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        // Upstream's `podToEndpoint`: the hostname is published only when the pod's subdomain
        // is this Service.
        let hostname = pod.spec.as_ref().and_then(|s| {
            let sub = s.subdomain.as_deref()?;
            (Some(sub) == svc.metadata.name.as_deref())
                .then(|| s.hostname.clone())
                .flatten()
                .filter(|h| !h.is_empty())
        });
        out.push(PodEndpoint {
            ip,
            hostname,
            ready: (is_ready || publish_not_ready) && !terminating,
            serving: is_ready || publish_not_ready,
            terminating,
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            target: ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: pod.uid(),
                ..ObjectReference::default()
            },
            ports,
        });
    }
    out.sort_by(|a, b| {
        a.ip.cmp(&b.ip)
            .then_with(|| a.target.name.cmp(&b.target.name))
    });
    out
}

async fn sync(ctx: &Ctx, key: &str) -> SyncResult {
    let (ns, name) = split_key(key);
    let ep_api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    let Some(svc) = ctx.services.get(ns, name) else {
        // Slices are owned by the Service and go with it; Endpoints are deleted here.
        if ctx.endpoints.get(ns, name).is_some() {
            match ep_api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if cu::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(None);
    };
    let Some(sel) = selector(&svc) else {
        return Ok(None);
    };
    if svc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .list_namespace(ns)
        .into_iter()
        .filter(|p| map_selector_matches(sel, p.metadata.labels.as_ref()))
        .collect();
    let eps = endpoints_for(&svc, &pods);
    sync_slices(ctx, &svc, &eps).await?;
    sync_endpoints(ctx, &svc, &eps).await?;
    Ok(None)
}

async fn sync_slices(ctx: &Ctx, svc: &Service, eps: &[PodEndpoint]) -> Result<(), cu::Error> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    // Group by (address type, ports), then chunk.
    let mut groups: BTreeMap<(String, String), (Vec<EndpointPort>, Vec<Endpoint>)> =
        BTreeMap::new();
    for e in eps {
        let address_type = if e.ip.contains(':') { "IPv6" } else { "IPv4" };
        let ports_key = serde_json::to_string(&e.ports)?;
        let entry = groups
            .entry((address_type.to_string(), ports_key))
            .or_insert_with(|| (e.ports.clone(), Vec::new()));
        entry.1.push(Endpoint {
            addresses: vec![e.ip.clone()],
            conditions: Some(EndpointConditions {
                ready: Some(e.ready),
                serving: Some(e.serving),
                terminating: Some(e.terminating),
            }),
            node_name: e.node.clone(),
            hostname: e.hostname.clone(),
            target_ref: Some(e.target.clone()),
            ..Endpoint::default()
        });
    }
    let mut desired: Vec<SliceContent> = Vec::new();
    for ((address_type, _), (ports, endpoints)) in groups {
        for chunk in endpoints.chunks(MAX_ENDPOINTS_PER_SLICE) {
            desired.push((address_type.clone(), ports.clone(), chunk.to_vec()));
        }
    }
    if desired.is_empty() {
        // A Service with no endpoints still gets one (empty) slice, as upstream.
        let ports = svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                p.target_port
                    .as_ref()
                    .is_none_or(|t| matches!(t, IntOrString::Int(_)))
            })
            .map(|sp| EndpointPort {
                name: Some(sp.name.unwrap_or_default()),
                port: Some(match sp.target_port {
                    Some(IntOrString::Int(i)) => i,
                    _ => sp.port,
                }),
                protocol: Some(sp.protocol.unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol,
            })
            .collect();
        desired.push(("IPv4".into(), ports, Vec::new()));
    }

    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let svc_uid = svc.uid().unwrap_or_default();
    let mut existing: Vec<Arc<EndpointSlice>> = ctx
        .slices
        .list_namespace(&ns)
        .into_iter()
        .filter(|s| {
            s.labels().get(SERVICE_NAME) == Some(&name) && s.metadata.deletion_timestamp.is_none()
        })
        .collect();
    existing.sort_by_key(|s| s.name_any());
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME.into(), name.clone());
    labels.insert(MANAGED_BY.into(), CONTROLLER_NAME.into());
    let mut unused: Vec<Arc<EndpointSlice>> = Vec::new();
    let mut remaining = desired;
    // Reuse slices that already hold a group's address type and ports.
    let mut keep: Vec<(Arc<EndpointSlice>, SliceContent)> = Vec::new();
    for s in existing {
        let ports = s.ports.clone().unwrap_or_default();
        match remaining
            .iter()
            .position(|(t, p, _)| *t == s.address_type && *p == ports)
        {
            Some(i) => keep.push((s, remaining.remove(i))),
            None => unused.push(s),
        }
    }
    for (s, (_, _, endpoints)) in keep {
        let owned = s
            .owner_references()
            .iter()
            .any(|o| o.uid == svc_uid && o.controller == Some(true));
        if s.endpoints == endpoints && owned && s.metadata.labels.as_ref() == Some(&labels) {
            continue;
        }
        let mut updated = s.as_ref().clone();
        updated.endpoints = endpoints;
        updated.metadata.labels = Some(labels.clone());
        updated.metadata.owner_references =
            Some(vec![controller_ref("v1", "Service", &name, &svc_uid)]);
        match api
            .replace(&s.name_any(), &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (address_type, ports, endpoints) in remaining {
        // Prefer rewriting a slice that is no longer needed over create + delete.
        if let Some(old) = unused.pop() {
            let mut updated = old.as_ref().clone();
            updated.address_type = address_type;
            updated.ports = Some(ports);
            updated.endpoints = endpoints;
            updated.metadata.labels = Some(labels.clone());
            updated.metadata.owner_references =
                Some(vec![controller_ref("v1", "Service", &name, &svc_uid)]);
            api.replace(&old.name_any(), &PostParams::default(), &updated)
                .await?;
            continue;
        }
        let slice = EndpointSlice {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: Some(ns.clone()),
                labels: Some(labels.clone()),
                owner_references: Some(vec![controller_ref("v1", "Service", &name, &svc_uid)]),
                ..ObjectMeta::default()
            },
            address_type,
            endpoints,
            ports: Some(ports),
        };
        match api.create(&PostParams::default(), &slice).await {
            Ok(_) => {}
            Err(e) if cu::is_namespace_terminating(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for s in unused {
        match api.delete(&s.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if cu::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn sync_endpoints(ctx: &Ctx, svc: &Service, eps: &[PodEndpoint]) -> Result<(), cu::Error> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let mut subsets: BTreeMap<String, EndpointSubset> = BTreeMap::new();
    for e in eps.iter().filter(|e| !e.terminating) {
        let ports: Vec<CoreEndpointPort> = e
            .ports
            .iter()
            .map(|p| CoreEndpointPort {
                name: p.name.clone().filter(|n| !n.is_empty()),
                port: p.port.unwrap_or(0),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        if ports.is_empty()
            && svc
                .spec
                .as_ref()
                .and_then(|s| s.ports.as_ref())
                .is_some_and(|p| !p.is_empty())
        {
            continue;
        }
        let subset = subsets
            .entry(serde_json::to_string(&ports)?)
            .or_insert_with(|| EndpointSubset {
                ports: Some(ports),
                ..EndpointSubset::default()
            });
        let addr = EndpointAddress {
            ip: e.ip.clone(),
            node_name: e.node.clone(),
            target_ref: Some(e.target.clone()),
            hostname: e.hostname.clone(),
        };
        if e.ready {
            subset.addresses.get_or_insert_default().push(addr);
        } else {
            subset
                .not_ready_addresses
                .get_or_insert_default()
                .push(addr);
        }
    }
    let subsets: Vec<EndpointSubset> = subsets.into_values().collect();
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        "endpointslice.kubernetes.io/skip-mirror".into(),
        "true".into(),
    );
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &ns);
    let subsets = (!subsets.is_empty()).then_some(subsets);
    match ctx.endpoints.get(&ns, &name) {
        Some(cur) => {
            if cur.subsets == subsets && cur.metadata.labels.as_ref() == Some(&labels) {
                return Ok(());
            }
            let mut updated = cur.as_ref().clone();
            updated.subsets = subsets;
            updated.metadata.labels = Some(labels);
            match api.replace(&name, &PostParams::default(), &updated).await {
                Ok(_) => Ok(()),
                Err(e) if cu::is_not_found(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        None => {
            let ep = Endpoints {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(ns),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                subsets,
            };
            match api.create(&PostParams::default(), &ep).await {
                Ok(_) => Ok(()),
                Err(e) if cu::is_already_exists(&e) || cu::is_namespace_terminating(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    }
}
