//! Per-resource create/update strategies: what the server resets, copies and bumps before
//! validation (upstream `PrepareForCreate`/`PrepareForUpdate` in `pkg/registry/*/*/strategy.go`,
//! plus the generic `rest.BeforeUpdate` bookkeeping of ObjectMeta).
//!
//! The API server runs, in order: [`crate::defaults::apply_defaults`], then
//! [`prepare_for_create`] / [`prepare_for_update`] / [`prepare_for_status_update`], then
//! [`crate::validation`]. All functions tolerate odd JSON shapes and never panic.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::registry::ResourceType;
use crate::validation::batch::{
    CONTROLLER_UID_LABEL, JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, LEGACY_JOB_NAME_LABEL,
};
use crate::validation::json::{ensure_obj, str_at};
use crate::validation::quantity::{self, Quantity};

/// Whether the kind's `status` is owned by its `status` subresource, so that writes to the main
/// resource cannot change it (upstream: strategies that reset/copy status).
pub fn has_status_subresource(rt: &ResourceType) -> bool {
    rt.has_subresource("status")
}

fn add_finalizer(obj: &mut Value, finalizer: &str) {
    let Some(meta) = meta_mut(obj) else {
        return;
    };
    let list = meta
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list
        && !list.iter().any(|f| f == finalizer)
    {
        list.push(json!(finalizer));
    }
}

fn is_crd(rt: &ResourceType) -> bool {
    rt.group == crate::apiextensions::crd::GROUP && rt.kind == "CustomResourceDefinition"
}

/// Whether upstream tracks `metadata.generation` for the kind: 1 on create, +1 whenever the
/// desired state changes.
pub fn tracks_generation(rt: &ResourceType) -> bool {
    matches!(
        (rt.group.as_str(), rt.kind.as_str()),
        (
            "apps",
            "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet"
        ) | ("batch", "Job" | "CronJob")
            | ("", "ReplicationController" | "PodTemplate")
            | ("discovery.k8s.io", "EndpointSlice")
            | (
                "networking.k8s.io",
                "Ingress" | "IngressClass" | "NetworkPolicy"
            )
            | ("policy", "PodDisruptionBudget")
            | ("admissionregistration.k8s.io", _)
    )
}

fn meta_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    ensure_obj(obj, "metadata").and_then(Value::as_object_mut)
}

fn set(obj: &mut Value, key: &str, v: Value) {
    if let Some(m) = obj.as_object_mut() {
        m.insert(key.to_string(), v);
    }
}

/// The fresh status upstream's `PrepareForCreate` leaves (as it serializes: non-omitempty
/// counters show as zero).
fn initial_status(rt: &ResourceType, obj: &Value) -> Option<Value> {
    Some(match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            let mut status = json!({"phase": "Pending", "qosClass": pod_qos_class(obj)});
            let gated = obj
                .get("spec")
                .and_then(|s| s.get("schedulingGates"))
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            if gated {
                set(
                    &mut status,
                    "conditions",
                    json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}]),
                );
            }
            status
        }
        ("", "Service") => json!({"loadBalancer": {}}),
        ("", "PersistentVolumeClaim" | "PersistentVolume") => json!({"phase": "Pending"}),
        ("", "Namespace") => json!({"phase": "Active"}),
        ("", "ReplicationController") | ("apps", "ReplicaSet") => json!({"replicas": 0}),
        ("apps", "StatefulSet") => json!({"replicas": 0, "availableReplicas": 0}),
        ("apps", "DaemonSet") => {
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0})
        }
        // Upstream's empty statuses as they serialize (non-omitempty fields show).
        ("networking.k8s.io", "Ingress") => json!({"loadBalancer": {}}),
        ("policy", "PodDisruptionBudget") => {
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
        }
        ("storage.k8s.io", "VolumeAttachment") => json!({"attached": false}),
        // `desiredReplicas` is the one field of upstream's v2 status without `omitempty`.
        ("autoscaling", "HorizontalPodAutoscaler") => json!({"desiredReplicas": 0}),
        // Nodes are created by their agent with a status: upstream keeps it.
        ("", "Node") => return None,
        _ if has_status_subresource(rt) => json!({}),
        _ => return None,
    })
}

/// Upstream `PrepareForCreate` of the kind's strategy: resets status owned by the status
/// subresource, sets `metadata.generation = 1` for generation-tracked kinds, generates the Job
/// selector from `uid` (unless `manualSelector`), adds the Namespace name label and `kubernetes`
/// finalizer, folds Secret `stringData` into `data`, and mirrors Service `clusterIP` into
/// `clusterIPs`. Sets `metadata.uid` to `uid` when it is empty.
pub fn prepare_for_create(rt: &ResourceType, obj: &mut Value, uid: &str) {
    if !obj.is_object() {
        return;
    }
    if let Some(meta) = meta_mut(obj)
        && meta
            .get("uid")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        && !uid.is_empty()
    {
        meta.insert("uid".into(), json!(uid));
    }
    if let Some(status) = initial_status(rt, obj) {
        set(obj, "status", status);
    }
    if is_crd(rt) {
        crate::apiextensions::crd::prepare_for_create(obj);
        // Upstream's finalizer controller removes the CRD's objects before the CRD goes.
        add_finalizer(obj, "customresourcecleanup.apiextensions.k8s.io");
    }
    if tracks_generation(rt)
        && let Some(meta) = meta_mut(obj)
    {
        meta.insert("generation".into(), json!(1));
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("batch", "Job") => generate_job_selector(obj),
        ("", "Namespace") => {
            namespace_label(obj);
            if let Some(spec) = ensure_obj(obj, "spec") {
                let has_kube = spec
                    .get("finalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|f| f.iter().any(|f| f == "kubernetes"));
                if !has_kube {
                    match spec.get_mut("finalizers").and_then(Value::as_array_mut) {
                        Some(list) => list.push(json!("kubernetes")),
                        None => set(spec, "finalizers", json!(["kubernetes"])),
                    }
                }
            }
        }
        ("", "Secret") => fold_string_data(obj),
        ("", "Service") => normalize_cluster_ips(obj),
        _ => {}
    }
}

/// Upstream `generateSelectorIfNeeded` of the Job strategy: the template gets `job-name`,
/// `controller-uid` and their `batch.kubernetes.io/` forms; the selector matches the prefixed
/// controller-uid. Labels the user already set are left alone (validation rejects conflicts).
fn generate_job_selector(obj: &mut Value) {
    let manual = obj
        .get("spec")
        .and_then(|s| s.get("manualSelector"))
        .and_then(Value::as_bool)
        == Some(true);
    if manual {
        return;
    }
    let uid = obj
        .get("metadata")
        .and_then(|m| str_at(m, "uid"))
        .unwrap_or_default()
        .to_string();
    let name = obj
        .get("metadata")
        .and_then(|m| str_at(m, "name"))
        .unwrap_or_default()
        .to_string();
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    if let Some(template) = ensure_obj(spec, "template")
        && let Some(tmeta) = ensure_obj(template, "metadata")
        && let Some(labels) = ensure_obj(tmeta, "labels").and_then(Value::as_object_mut)
    {
        for key in [LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL] {
            labels.entry(key).or_insert_with(|| json!(name));
        }
        for key in [LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL] {
            labels.entry(key).or_insert_with(|| json!(uid));
        }
    }
    if let Some(selector) = ensure_obj(spec, "selector")
        && let Some(ml) = ensure_obj(selector, "matchLabels").and_then(Value::as_object_mut)
    {
        ml.entry(CONTROLLER_UID_LABEL).or_insert_with(|| json!(uid));
    }
    // Upstream re-runs `SetDefaults_Job` whenever the stored Job is read, so a Job created
    // without labels shows the (now generated) template labels: do it once here.
    let template_labels = obj
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .cloned();
    if let Some(labels) = template_labels
        && let Some(meta) = meta_mut(obj)
        && meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
    {
        meta.insert("labels".into(), labels);
    }
}

fn namespace_label(obj: &mut Value) {
    let name = obj
        .get("metadata")
        .and_then(|m| str_at(m, "name"))
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return;
    }
    if let Some(meta) = ensure_obj(obj, "metadata")
        && let Some(labels) = ensure_obj(meta, "labels").and_then(Value::as_object_mut)
    {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The v1 Secret conversion: `stringData` entries overwrite `data` (base64-encoded) and
/// `stringData` is dropped.
fn fold_string_data(obj: &mut Value) {
    let Some(string_data) = obj.as_object_mut().and_then(|m| m.remove("stringData")) else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        return;
    };
    if let Some(data) = ensure_obj(obj, "data").and_then(Value::as_object_mut) {
        for (k, v) in entries {
            if let Some(s) = v.as_str() {
                data.insert(k.clone(), json!(base64(s.as_bytes())));
            }
        }
    }
}

/// The service REST storage keeps `clusterIP` and `clusterIPs[0]` in step.
fn normalize_cluster_ips(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let ip = str_at(spec, "clusterIP")
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let ips_empty = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    match (ip, ips_empty) {
        (Some(ip), true) => set(spec, "clusterIPs", json!([ip])),
        (None, false) => {
            if let Some(first) = spec.get("clusterIPs").and_then(|a| a.get(0)).cloned() {
                set(spec, "clusterIP", first);
            }
        }
        _ => {}
    }
}

/// The generic `rest.BeforeUpdate` bookkeeping: generation, uid, creation and deletion
/// timestamps come from the stored object.
fn keep_system_meta(new: &mut Value, old: &Value) {
    let Some(om) = old.get("metadata").and_then(Value::as_object) else {
        return;
    };
    let Some(nm) = meta_mut(new) else { return };
    match om.get("generation") {
        Some(g) => nm.insert("generation".into(), g.clone()),
        None => nm.remove("generation"),
    };
    if nm
        .get("uid")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && let Some(uid) = om.get("uid")
    {
        nm.insert("uid".into(), uid.clone());
    }
    for key in ["creationTimestamp", "deletionTimestamp"] {
        if let Some(v) = om.get(key).filter(|v| !v.is_null()) {
            nm.insert(key.into(), v.clone());
        }
    }
    if nm
        .get("deletionGracePeriodSeconds")
        .is_none_or(Value::is_null)
        && let Some(v) = om
            .get("deletionGracePeriodSeconds")
            .filter(|v| !v.is_null())
    {
        nm.insert("deletionGracePeriodSeconds".into(), v.clone());
    }
}

fn copy_field(new: &mut Value, old: &Value, key: &str) {
    let Some(m) = new.as_object_mut() else { return };
    match old.get(key) {
        Some(v) => m.insert(key.to_string(), v.clone()),
        None => m.remove(key),
    };
}

/// Upstream `PrepareForUpdate` of the kind's strategy (after `rest.BeforeUpdate`): the stored
/// status is kept when the status subresource owns it, `metadata.generation` is bumped when the
/// desired state changed (for Deployments also annotations), Namespace finalizers and name label
/// are kept, Secret `stringData` is folded, and Service allocations (cluster IPs, node ports)
/// omitted by the client are carried over.
pub fn prepare_for_update(rt: &ResourceType, new: &mut Value, old: &Value) {
    if !new.is_object() {
        return;
    }
    keep_system_meta(new, old);
    if has_status_subresource(rt) {
        copy_field(new, old, "status");
    }
    if is_crd(rt) {
        crate::apiextensions::crd::prepare_for_update(new, old);
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => {
            let finalizers = old.get("spec").and_then(|s| s.get("finalizers")).cloned();
            if let Some(spec) = ensure_obj(new, "spec") {
                match finalizers {
                    Some(f) => set(spec, "finalizers", f),
                    None => {
                        if let Some(m) = spec.as_object_mut() {
                            m.remove("finalizers");
                        }
                    }
                }
            }
            namespace_label(new);
        }
        ("", "Secret") => fold_string_data(new),
        ("", "Service") => carry_service_allocations(new, old),
        // Upstream's CSR strategy: the request is immutable once made.
        ("certificates.k8s.io", "CertificateSigningRequest") => copy_field(new, old, "spec"),
        _ => {}
    }
    if tracks_generation(rt) && desired_state_changed(rt, new, old) {
        let g = old
            .get("metadata")
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if let Some(meta) = meta_mut(new) {
            meta.insert("generation".into(), json!(g + 1));
        }
    }
}

fn desired_state_changed(rt: &ResourceType, new: &Value, old: &Value) -> bool {
    match rt.kind.as_str() {
        "PodTemplate" => new.get("template") != old.get("template"),
        "EndpointSlice" => ["endpoints", "ports", "addressType"]
            .iter()
            .any(|k| new.get(*k) != old.get(*k)),
        "Deployment" => {
            let ann = |o: &Value| {
                o.get("metadata")
                    .and_then(|m| m.get("annotations"))
                    .filter(|a| !a.is_null())
                    .cloned()
            };
            new.get("spec") != old.get("spec") || ann(new) != ann(old)
        }
        // Upstream's webhook configuration strategies compare the webhooks.
        "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
            new.get("webhooks") != old.get("webhooks")
        }
        _ => new.get("spec") != old.get("spec"),
    }
}

/// The service REST storage's `patchAllocatedValues`: a client that omits allocated values
/// (cluster IPs, node ports, health-check node port) keeps the stored ones.
fn carry_service_allocations(new: &mut Value, old: &Value) {
    drop_type_dependent_fields(new, old);
    let Some(os) = old.get("spec") else { return };
    let Some(ns) = new.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let old_type = str_at(os, "type").unwrap_or("ClusterIP");
    let new_type = str_at(ns, "type").unwrap_or("ClusterIP").to_string();
    if old_type != "ExternalName" && new_type != "ExternalName" {
        for key in ["clusterIP", "clusterIPs"] {
            let missing = match ns.get(key) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if missing && let Some(v) = os.get(key) {
                set(ns, key, v.clone());
            }
        }
        normalize_cluster_ips(new);
    }
    let Some(ns) = new.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let needs_node_ports = |t: &str| t == "NodePort" || t == "LoadBalancer";
    if needs_node_ports(old_type) && needs_node_ports(&new_type) {
        let mut allocated: HashMap<(String, i64), Value> = HashMap::new();
        for p in os
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(port), Some(np)) = (
                p.get("port").and_then(Value::as_i64),
                p.get("nodePort").filter(|n| n.as_i64().unwrap_or(0) != 0),
            ) {
                allocated.insert(
                    (str_at(p, "protocol").unwrap_or("TCP").to_string(), port),
                    np.clone(),
                );
            }
        }
        if let Some(ports) = ns.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                let unset = p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0;
                let key = (
                    str_at(p, "protocol").unwrap_or("TCP").to_string(),
                    p.get("port").and_then(Value::as_i64).unwrap_or(0),
                );
                if unset && let Some(np) = allocated.get(&key) {
                    set(p, "nodePort", np.clone());
                }
            }
        }
        if new_type == "LoadBalancer"
            && ns
                .get("healthCheckNodePort")
                .is_none_or(|v| v.as_i64().unwrap_or(0) == 0)
            && let Some(h) = os
                .get("healthCheckNodePort")
                .filter(|v| v.as_i64().unwrap_or(0) != 0)
            && str_at(ns, "externalTrafficPolicy") == Some("Local")
        {
            set(ns, "healthCheckNodePort", h.clone());
        }
    }
}

/// Upstream's `dropTypeDependentFields` (pkg/registry/core/service/storage): when a Service's
/// type changes, the fields only the old type needs are dropped if the update left them as they
/// were — so `{"spec": {"type": "ClusterIP"}}` on a NodePort Service works without also
/// clearing its node ports by hand. A value the user changed is kept (and validation says why
/// it is wrong for the new type).
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let Some(os) = old.get("spec") else { return };
    let Some(ns) = new.get_mut("spec").filter(|s| s.is_object()) else {
        return;
    };
    let old_type = str_at(os, "type").unwrap_or("ClusterIP");
    let new_type = str_at(ns, "type").unwrap_or("ClusterIP").to_string();
    if old_type == new_type {
        return;
    }
    let node_ports = |t: &str| t == "NodePort" || t == "LoadBalancer";
    let node_ports_of = |spec: &Value| -> Vec<i64> {
        spec.get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
            .filter(|n| *n != 0)
            .collect()
    };
    let unchanged = |ns: &Value, key: &str| ns.get(key) == os.get(key);
    if node_ports(old_type) && !node_ports(&new_type) {
        let before = node_ports_of(os);
        if node_ports_of(ns).iter().all(|n| before.contains(n))
            && let Some(ports) = ns.get_mut("ports").and_then(Value::as_array_mut)
        {
            for p in ports {
                if let Some(m) = p.as_object_mut() {
                    m.remove("nodePort");
                }
            }
        }
        if unchanged(ns, "externalTrafficPolicy")
            && let Some(m) = ns.as_object_mut()
        {
            m.remove("externalTrafficPolicy");
        }
    }
    if old_type == "LoadBalancer" && new_type != "LoadBalancer" {
        for key in [
            "healthCheckNodePort",
            "allocateLoadBalancerNodePorts",
            "loadBalancerClass",
            "loadBalancerIP",
            "loadBalancerSourceRanges",
        ] {
            if unchanged(ns, key)
                && let Some(m) = ns.as_object_mut()
            {
                m.remove(key);
            }
        }
    }
    if new_type == "ExternalName" && old_type != "ExternalName" {
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if unchanged(ns, key)
                && let Some(m) = ns.as_object_mut()
            {
                m.remove(key);
            }
        }
    }
}

/// Upstream status strategies' `PrepareForUpdate`: a write to `/status` changes only `status`
/// (and ordinary metadata). Everything else — spec and any other top-level field — comes from
/// the stored object; workloads also keep their stored labels, Pods their owner references.
pub fn prepare_for_status_update(rt: &ResourceType, new: &mut Value, old: &Value) {
    if !new.is_object() {
        return;
    }
    keep_system_meta(new, old);
    let keys: Vec<String> = new
        .as_object()
        .map(|m| m.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(
            old.as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default(),
        )
        .collect();
    for key in keys {
        if !matches!(key.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
            copy_field(new, old, &key);
        }
    }
    let old_meta = old.get("metadata").cloned().unwrap_or(Value::Null);
    let keep_meta = |new: &mut Value, key: &str| {
        if let Some(nm) = meta_mut(new) {
            match old_meta.get(key) {
                Some(v) => nm.insert(key.to_string(), v.clone()),
                None => nm.remove(key),
            };
        }
    };
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("apps", _) | ("", "ReplicationController") => keep_meta(new, "labels"),
        ("", "Pod") => keep_meta(new, "ownerReferences"),
        _ => {}
    }
}

/// Upstream `podEphemeralContainersStrategy.PrepareForUpdate` (`dropNonEphemeralContainerUpdates`):
/// a write to `pods/<name>/ephemeralcontainers` changes only `spec.ephemeralContainers`; every
/// other field, status and metadata included, stays as stored (the resourceVersion the client
/// sent is kept for the precondition).
pub fn prepare_for_ephemeral_containers_update(new: &mut Value, old: &Value) {
    let ephemeral = new
        .pointer("/spec/ephemeralContainers")
        .filter(|v| !v.is_null())
        .cloned();
    let rv = new.pointer("/metadata/resourceVersion").cloned();
    *new = old.clone();
    if let (Some(rv), Some(m)) = (rv, meta_mut(new)) {
        m.insert("resourceVersion".into(), rv);
    }
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        match ephemeral {
            Some(list) => spec.insert("ephemeralContainers".into(), list),
            None => spec.remove("ephemeralContainers"),
        };
    }
}

/// Upstream `qos.GetPodQOS`: `Guaranteed` when every container (init included) sets cpu and
/// memory limits and the requests equal them, `BestEffort` when nothing sets a non-zero cpu or
/// memory request or limit, `Burstable` otherwise. Requests default to limits first, as
/// `SetDefaults_Pod` does.
pub fn pod_qos_class(pod: &Value) -> &'static str {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let mut requests: HashMap<&str, Quantity> = HashMap::new();
    let mut limits: HashMap<&str, Quantity> = HashMap::new();
    let mut guaranteed = true;
    let containers = ["containers", "initContainers"]
        .into_iter()
        .flat_map(|k| spec.get(k).and_then(Value::as_array).into_iter().flatten());
    for c in containers {
        let res = c.get("resources").unwrap_or(&Value::Null);
        let lim = res.get("limits").and_then(Value::as_object);
        let req = res.get("requests").and_then(Value::as_object);
        let mut found_limits = 0;
        for name in ["cpu", "memory"] {
            let l = lim
                .and_then(|m| m.get(name))
                .and_then(quantity::from_value)
                .filter(|q| !q.is_zero());
            let r = req
                .and_then(|m| m.get(name))
                .and_then(quantity::from_value)
                .filter(|q| !q.is_zero())
                .or(l);
            if let Some(r) = r {
                let e = requests
                    .entry(name)
                    .or_insert(Quantity::parse("0").unwrap_or(r));
                *e = e.saturating_add(r);
            }
            if let Some(l) = l {
                found_limits += 1;
                let e = limits
                    .entry(name)
                    .or_insert(Quantity::parse("0").unwrap_or(l));
                *e = e.saturating_add(l);
            }
        }
        if found_limits < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.iter().all(|(k, r)| limits.get(k) == Some(r))
        && requests.len() == limits.len()
    {
        return "Guaranteed";
    }
    "Burstable"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn rt(api_version: &str, kind: &str) -> std::sync::Arc<ResourceType> {
        Registry::builtin()
            .by_kind(api_version, kind)
            .expect("registered kind")
    }

    #[test]
    fn job_selector_is_generated_from_uid() {
        let mut job = json!({"metadata": {"name": "pi", "labels": {"app": "pi"}}, "spec": {"template": {"metadata": {"labels": {"app": "pi"}}, "spec": {}}}, "status": {"active": 3}});
        prepare_for_create(&rt("batch/v1", "Job"), &mut job, "uid-1");
        assert_eq!(job["metadata"]["uid"], "uid-1");
        assert_eq!(job["metadata"]["generation"], 1);
        assert_eq!(job["status"], json!({}));
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}})
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({"app": "pi", "batch.kubernetes.io/controller-uid": "uid-1", "batch.kubernetes.io/job-name": "pi", "controller-uid": "uid-1", "job-name": "pi"})
        );
        assert_eq!(
            job["metadata"]["labels"],
            json!({"app": "pi"}),
            "a job with its own labels keeps them"
        );
        let mut bare = json!({"metadata": {"name": "b"}, "spec": {"template": {"spec": {}}}});
        prepare_for_create(&rt("batch/v1", "Job"), &mut bare, "uid-3");
        assert_eq!(
            bare["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            "uid-3"
        );
        assert_eq!(bare["metadata"]["labels"]["job-name"], "b");
        let mut manual = json!({"metadata": {"name": "m"}, "spec": {"manualSelector": true, "selector": {"matchLabels": {"a": "b"}}}});
        prepare_for_create(&rt("batch/v1", "Job"), &mut manual, "uid-2");
        assert_eq!(
            manual["spec"]["selector"],
            json!({"matchLabels": {"a": "b"}})
        );
    }

    #[test]
    fn pod_status_is_reset_with_qos_class() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}, "status": {"phase": "Running"}});
        prepare_for_create(&rt("v1", "Pod"), &mut pod, "u");
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Guaranteed"})
        );
        assert!(
            pod["metadata"].get("generation").is_none(),
            "pods are not generation-tracked in v1.32"
        );
        for (spec, want) in [
            (json!({"containers": [{"name": "a"}]}), "BestEffort"),
            (
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}]}),
                "Burstable",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1024Mi"}}}]}),
                "Guaranteed",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}),
                "Burstable",
            ),
            (
                json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"name": "b"}]}),
                "Burstable",
            ),
        ] {
            assert_eq!(pod_qos_class(&json!({"spec": spec})), want, "{spec}");
        }
    }

    #[test]
    fn update_keeps_status_and_bumps_generation_on_spec_change() {
        let d = rt("apps/v1", "Deployment");
        let old = json!({"metadata": {"name": "d", "uid": "u", "generation": 4, "creationTimestamp": "t"}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut same = json!({"metadata": {"name": "d", "generation": 9}, "spec": {"replicas": 1}, "status": {"replicas": 7}});
        prepare_for_update(&d, &mut same, &old);
        assert_eq!(same["metadata"]["generation"], 4);
        assert_eq!(same["metadata"]["uid"], "u");
        assert_eq!(same["metadata"]["creationTimestamp"], "t");
        assert_eq!(same["status"], json!({"replicas": 1}));
        let mut changed = json!({"metadata": {"name": "d"}, "spec": {"replicas": 3}});
        prepare_for_update(&d, &mut changed, &old);
        assert_eq!(changed["metadata"]["generation"], 5);
        let mut annotated =
            json!({"metadata": {"name": "d", "annotations": {"x": "y"}}, "spec": {"replicas": 1}});
        prepare_for_update(&d, &mut annotated, &old);
        assert_eq!(annotated["metadata"]["generation"], 5);
    }

    #[test]
    fn status_update_keeps_spec_and_workload_labels() {
        let d = rt("apps/v1", "Deployment");
        let old = json!({"metadata": {"name": "d", "labels": {"a": "1"}, "generation": 2}, "spec": {"replicas": 1}, "status": {}});
        let mut new = json!({"metadata": {"name": "d", "labels": {"a": "2"}}, "spec": {"replicas": 5}, "status": {"replicas": 1}});
        prepare_for_status_update(&d, &mut new, &old);
        assert_eq!(new["spec"], json!({"replicas": 1}));
        assert_eq!(new["status"], json!({"replicas": 1}));
        assert_eq!(new["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(new["metadata"]["generation"], 2);
    }

    #[test]
    fn namespace_create_adds_finalizer_label_and_phase() {
        let mut ns = json!({"metadata": {"name": "web"}});
        prepare_for_create(&rt("v1", "Namespace"), &mut ns, "u");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "web"
        );
        let mut upd =
            json!({"metadata": {"name": "web", "labels": {}}, "spec": {"finalizers": []}});
        prepare_for_update(&rt("v1", "Namespace"), &mut upd, &ns);
        assert_eq!(upd["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(
            upd["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "web"
        );
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let mut s = json!({"stringData": {"user": "admin", "k": "ab"}, "data": {"user": "b2xk"}});
        prepare_for_create(&rt("v1", "Secret"), &mut s, "u");
        assert_eq!(s["data"], json!({"user": "YWRtaW4=", "k": "YWI="}));
        assert!(s.get("stringData").is_none());
    }

    #[test]
    fn service_update_keeps_allocated_cluster_ip_and_node_ports() {
        let svc = rt("v1", "Service");
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}});
        prepare_for_update(&svc, &mut new, &old);
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.0.0.5"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
    }

    #[test]
    fn changing_a_load_balancer_to_cluster_ip_drops_its_unchanged_node_ports_and_policy() {
        let svc = rt("v1", "Service");
        let old = json!({"spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.5",
            "externalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": true,
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        prepare_for_update(&svc, &mut new, &old);
        assert!(new["spec"]["ports"][0].get("nodePort").is_none());
        assert!(new["spec"].get("externalTrafficPolicy").is_none());
        assert!(new["spec"].get("allocateLoadBalancerNodePorts").is_none());
        assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
    }

    #[test]
    fn a_node_port_the_user_changed_with_the_type_is_kept_for_validation() {
        let svc = rt("v1", "Service");
        let old = json!({"spec": {"type": "NodePort",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let mut new = json!({"spec": {"type": "ClusterIP",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30099}]}});
        prepare_for_update(&svc, &mut new, &old);
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30099);
    }

    #[test]
    fn an_ephemeral_containers_write_changes_only_the_ephemeral_containers() {
        let old = json!({"metadata": {"name": "p", "resourceVersion": "7", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "app", "image": "busybox"}], "nodeName": "n1"},
            "status": {"phase": "Running"}});
        let mut new = json!({"metadata": {"name": "p", "resourceVersion": "7", "labels": {"a": "2"}},
            "spec": {"containers": [{"name": "app", "image": "alpine"}],
                     "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]},
            "status": {"phase": "Failed"}});
        prepare_for_ephemeral_containers_update(&mut new, &old);
        assert_eq!(new["metadata"]["labels"]["a"], "1");
        assert_eq!(new["spec"]["containers"][0]["image"], "busybox");
        assert_eq!(new["spec"]["nodeName"], "n1");
        assert_eq!(new["status"]["phase"], "Running");
        assert_eq!(new["spec"]["ephemeralContainers"][0]["name"], "dbg");
    }

    #[test]
    fn an_ephemeral_containers_write_without_the_list_removes_it_for_validation_to_refuse() {
        let old = json!({"metadata": {"name": "p"},
            "spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox"}]}});
        let mut new = json!({"metadata": {"name": "p"}, "spec": {}});
        prepare_for_ephemeral_containers_update(&mut new, &old);
        assert!(new["spec"].get("ephemeralContainers").is_none());
    }
}
