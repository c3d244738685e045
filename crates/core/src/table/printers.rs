//! Row cells for every resource but pods: one function per upstream `print<Kind>` in
//! pkg/printers/internalversion/printers.go, reading the v1 JSON of the object.

use std::collections::BTreeSet;

use serde_json::Value;

use super::age::{self, created};
use super::json::{
    arr_at, arr_len, format_label_selector, format_labels, get, int_at, load_balancer_ingress,
    map_len, n, name, obj_at, opt_bool_at, opt_int_at, s, str_at,
};
use crate::selector::LabelSelector;

fn or_none(x: &str) -> String {
    if x.is_empty() {
        "<none>".to_string()
    } else {
        x.to_string()
    }
}

/// `layoutContainerCells`: container names and images, comma-joined.
fn container_cells(pod_spec: Option<&Value>) -> (Value, Value) {
    let containers = pod_spec.map(|p| arr_at(p, &["containers"])).unwrap_or(&[]);
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    (s(names.join(",")), s(images.join(",")))
}

/// `printBoolPtr`.
fn bool_ptr(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

/// `spec.replicas`, which v1 defaulting sets to 1 when omitted.
fn desired_replicas(obj: &Value) -> i64 {
    opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1)
}

/// `net.JoinHostPort`.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `listWithMoreString`.
fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let joined = list.join(",");
    if more {
        return format!("{joined} + {} more...", count.saturating_sub(max));
    }
    if joined.is_empty() {
        "<unset>".to_string()
    } else {
        joined
    }
}

/// `helper.GetAccessModesAsString`.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|x| x.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// `GetPersistentVolumeClass` / `GetPersistentVolumeClaimClass`: the beta annotation wins.
fn storage_class(obj: &Value) -> String {
    match get(
        obj,
        &[
            "metadata",
            "annotations",
            "volume.beta.kubernetes.io/storage-class",
        ],
    )
    .and_then(Value::as_str)
    {
        Some(class) => class.to_string(),
        None => str_at(obj, &["spec", "storageClassName"]).to_string(),
    }
}

/// A quantity field as printed (`Quantity.String()`); the zero quantity prints `0`.
fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(q)) if !q.is_empty() => q.clone(),
        Some(Value::Number(x)) => x.to_string(),
        _ => "0".to_string(),
    }
}

/// `printNode`.
pub fn node(obj: &Value, now: i64) -> Vec<Value> {
    // The last Ready condition wins, as upstream builds a map by type.
    let ready = arr_at(obj, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready");
    let mut status: Vec<&str> = match ready {
        Some(c) if str_at(c, &["status"]) == "True" => vec!["Ready"],
        Some(_) => vec!["NotReady"],
        None => vec!["Unknown"],
    };
    if opt_bool_at(obj, &["spec", "unschedulable"]) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles = BTreeSet::new();
    for (k, v) in obj_at(obj, &["metadata", "labels"]).into_iter().flatten() {
        if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.insert(role.to_string());
            }
        } else if k == "kubernetes.io/role"
            && let Some(role) = v.as_str().filter(|r| !r.is_empty())
        {
            roles.insert(role.to_string());
        }
    }
    let roles = roles.into_iter().collect::<Vec<_>>().join(",");
    let address = |kind: &str| {
        arr_at(obj, &["status", "addresses"])
            .iter()
            .find(|a| str_at(a, &["type"]) == kind)
            .map_or_else(
                || "<none>".to_string(),
                |a| str_at(a, &["address"]).to_string(),
            )
    };
    let info = |field: &str| {
        let v = str_at(obj, &["status", "nodeInfo", field]);
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        s(name(obj)),
        s(status.join(",")),
        s(or_none(&roles)),
        created(obj, now),
        s(str_at(obj, &["status", "nodeInfo", "kubeletVersion"])),
        s(address("InternalIP")),
        s(address("ExternalIP")),
        s(info("osImage")),
        s(info("kernelVersion")),
        s(info("containerRuntimeVersion")),
    ]
}

/// `printNamespace`.
pub fn namespace(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(str_at(obj, &["status", "phase"])),
        created(obj, now),
    ]
}

/// `getServiceExternalIP` (wide, so never clipped).
fn service_external_ip(obj: &Value) -> String {
    let external: Vec<&str> = arr_at(obj, &["spec", "externalIPs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match str_at(obj, &["spec", "type"]) {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut all = load_balancer_ingress(obj);
            if !external.is_empty() {
                all.extend(external);
                return all.join(",");
            }
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => str_at(obj, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// `makePortString`: `80/TCP`, `80:30080/TCP`.
fn service_ports(obj: &Value) -> String {
    arr_at(obj, &["spec", "ports"])
        .iter()
        .map(|p| {
            let port = int_at(p, &["port"]);
            let protocol = match str_at(p, &["protocol"]) {
                "" => "TCP",
                other => other,
            };
            match int_at(p, &["nodePort"]) {
                np if np > 0 => format!("{port}:{np}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `printService`.
pub fn service(obj: &Value, now: i64) -> Vec<Value> {
    let cluster_ip = arr_at(obj, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(obj, &["spec", "clusterIP"]));
    let ports = service_ports(obj);
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "type"])),
        s(or_none(cluster_ip)),
        s(service_external_ip(obj)),
        s(or_none(&ports)),
        created(obj, now),
        s(format_labels(obj_at(obj, &["spec", "selector"]))),
    ]
}

/// `formatEndpoints` with all ports: up to three `ip:port`, then `+ N more...`.
fn format_endpoints(obj: &Value) -> String {
    let subsets = arr_at(obj, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in subsets {
        let addresses = arr_at(ss, &["addresses"]);
        let ports = arr_at(ss, &["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_at(a, &["ip"]).to_string());
            }
            continue;
        }
        for p in ports {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(str_at(a, &["ip"]), int_at(p, &["port"])));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count.saturating_sub(MAX))
    } else {
        joined
    }
}

/// `printEndpoints`.
pub fn endpoints(obj: &Value, now: i64) -> Vec<Value> {
    vec![s(name(obj)), s(format_endpoints(obj)), created(obj, now)]
}

/// `printConfigMap`.
pub fn config_map(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        n(map_len(obj, &["data"]) + map_len(obj, &["binaryData"])),
        created(obj, now),
    ]
}

/// `printSecret`.
pub fn secret(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(str_at(obj, &["type"])),
        n(map_len(obj, &["data"])),
        created(obj, now),
    ]
}

/// `printServiceAccount`.
pub fn service_account(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        n(arr_len(obj, &["secrets"])),
        created(obj, now),
    ]
}

/// An Event as the printer sees it (the internal type), read from either API group's JSON.
pub struct EventView<'a> {
    obj: &'a Value,
    first_timestamp: Option<&'a Value>,
    last_timestamp: Option<&'a Value>,
    event_time: Option<&'a Value>,
    count: i64,
    series: Option<&'a Value>,
    involved: Option<&'a Value>,
    source_component: &'a str,
    source_host: &'a str,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
    message: &'a str,
}

impl<'a> EventView<'a> {
    /// A `v1` Event.
    pub fn core(obj: &'a Value) -> Self {
        EventView {
            obj,
            first_timestamp: get(obj, &["firstTimestamp"]),
            last_timestamp: get(obj, &["lastTimestamp"]),
            event_time: get(obj, &["eventTime"]),
            count: int_at(obj, &["count"]),
            series: get(obj, &["series"]).filter(|v| v.is_object()),
            involved: get(obj, &["involvedObject"]),
            source_component: str_at(obj, &["source", "component"]),
            source_host: str_at(obj, &["source", "host"]),
            reporting_controller: str_at(obj, &["reportingComponent"]),
            reporting_instance: str_at(obj, &["reportingInstance"]),
            message: str_at(obj, &["message"]),
        }
    }

    /// An `events.k8s.io/v1` Event, mapped as upstream's conversion to the internal type does.
    pub fn events_v1(obj: &'a Value) -> Self {
        EventView {
            obj,
            first_timestamp: get(obj, &["deprecatedFirstTimestamp"]),
            last_timestamp: get(obj, &["deprecatedLastTimestamp"]),
            event_time: get(obj, &["eventTime"]),
            count: int_at(obj, &["deprecatedCount"]),
            series: get(obj, &["series"]).filter(|v| v.is_object()),
            involved: get(obj, &["regarding"]),
            source_component: str_at(obj, &["deprecatedSource", "component"]),
            source_host: str_at(obj, &["deprecatedSource", "host"]),
            reporting_controller: str_at(obj, &["reportingController"]),
            reporting_instance: str_at(obj, &["reportingInstance"]),
            message: str_at(obj, &["note"]),
        }
    }
}

/// `printEvent` (wide): LAST SEEN, TYPE, REASON, OBJECT, SUBOBJECT, SOURCE, MESSAGE,
/// FIRST SEEN, COUNT, NAME.
pub fn event(e: &EventView<'_>, now: i64) -> Vec<Value> {
    let first = if age::timestamp(e.first_timestamp).is_some() {
        age::since(e.first_timestamp, now)
    } else {
        age::since(e.event_time, now)
    };
    let mut last = if age::timestamp(e.last_timestamp).is_some() {
        age::since(e.last_timestamp, now)
    } else {
        first.clone()
    };
    let mut count = e.count;
    if let Some(series) = e.series {
        last = age::since(get(series, &["lastObservedTime"]), now);
        count = int_at(series, &["count"]);
    } else if count == 0 {
        count = 1;
    }
    let involved = e.involved.unwrap_or(&Value::Null);
    let kind = str_at(involved, &["kind"]).to_lowercase();
    let involved_name = str_at(involved, &["name"]);
    let target = if involved_name.is_empty() {
        kind
    } else {
        format!("{kind}/{involved_name}")
    };
    let component = if e.source_component.is_empty() {
        e.reporting_controller
    } else {
        e.source_component
    };
    let instance = if e.source_host.is_empty() {
        e.reporting_instance
    } else {
        e.source_host
    };
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        s(last),
        s(str_at(e.obj, &["type"])),
        s(str_at(e.obj, &["reason"])),
        s(target),
        s(str_at(involved, &["fieldPath"])),
        s(source),
        s(e.message.trim()),
        s(first),
        n(count),
        s(name(e.obj)),
    ]
}

/// The row `printReplicationController` and `printReplicaSet` share: desired, current and
/// ready replicas, age, containers, images, then `selector` (formatted as each kind's
/// selector type prints).
fn replicas_row(obj: &Value, now: i64, selector: String) -> Vec<Value> {
    let (names, images) = container_cells(get(obj, &["spec", "template", "spec"]));
    vec![
        s(name(obj)),
        n(desired_replicas(obj)),
        n(int_at(obj, &["status", "replicas"])),
        n(int_at(obj, &["status", "readyReplicas"])),
        created(obj, now),
        names,
        images,
        s(selector),
    ]
}

/// `printReplicationController`: the selector is a plain label map.
pub fn replication_controller(obj: &Value, now: i64) -> Vec<Value> {
    let selector = format_labels(obj_at(obj, &["spec", "selector"]));
    replicas_row(obj, now, selector)
}

/// `printPersistentVolumeClaim`.
pub fn persistent_volume_claim(obj: &Value, now: i64) -> Vec<Value> {
    let deleting = age::timestamp(get(obj, &["metadata", "deletionTimestamp"])).is_some();
    let phase = if deleting {
        "Terminating"
    } else {
        str_at(obj, &["status", "phase"])
    };
    let volume = str_at(obj, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(get(obj, &["status", "capacity", "storage"])),
            access_modes(arr_at(obj, &["status", "accessModes"])),
        )
    };
    let unset = |path: &[&str]| match get(obj, path).and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => "<unset>".to_string(),
    };
    vec![
        s(name(obj)),
        s(phase),
        s(volume),
        s(capacity),
        s(modes),
        s(storage_class(obj)),
        s(unset(&["spec", "volumeAttributesClassName"])),
        created(obj, now),
        s(unset(&["spec", "volumeMode"])),
    ]
}

/// `printPersistentVolume`.
pub fn persistent_volume(obj: &Value, now: i64) -> Vec<Value> {
    let claim = match get(obj, &["spec", "claimRef"]).filter(|c| c.is_object()) {
        Some(c) => format!("{}/{}", str_at(c, &["namespace"]), str_at(c, &["name"])),
        None => String::new(),
    };
    let deleting = age::timestamp(get(obj, &["metadata", "deletionTimestamp"])).is_some();
    let phase = if deleting {
        "Terminating"
    } else {
        str_at(obj, &["status", "phase"])
    };
    let unset = |path: &[&str]| match get(obj, path).and_then(Value::as_str) {
        Some(v) => v.to_string(),
        None => "<unset>".to_string(),
    };
    vec![
        s(name(obj)),
        s(quantity(get(obj, &["spec", "capacity", "storage"]))),
        s(access_modes(arr_at(obj, &["spec", "accessModes"]))),
        s(str_at(obj, &["spec", "persistentVolumeReclaimPolicy"])),
        s(phase),
        s(claim),
        s(storage_class(obj)),
        s(unset(&["spec", "volumeAttributesClassName"])),
        s(str_at(obj, &["status", "reason"])),
        created(obj, now),
        s(unset(&["spec", "volumeMode"])),
    ]
}

/// `printResourceQuota` (v1.32 layout: NAME, AGE, REQUEST, LIMIT): `resource: used/hard`
/// per hard limit, sorted, `limits.*` in the LIMIT column.
pub fn resource_quota(obj: &Value, now: i64) -> Vec<Value> {
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    if let Some(hard) = obj_at(obj, &["status", "hard"]) {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort_unstable();
        for r in resources {
            let used = quantity(get(obj, &["status", "used", r]));
            let cell = format!("{r}: {used}/{}", quantity(hard.get(r)));
            let is_limit = r.split('.').count() > 1 && r.split('.').next() == Some("limits");
            if is_limit {
                limits.push(cell)
            } else {
                requests.push(cell)
            }
        }
    }
    vec![
        s(name(obj)),
        created(obj, now),
        s(requests.join(", ")),
        s(limits.join(", ")),
    ]
}

/// `printPodTemplate`.
pub fn pod_template(obj: &Value) -> Vec<Value> {
    let (names, images) = container_cells(get(obj, &["template", "spec"]));
    vec![
        s(name(obj)),
        names,
        images,
        s(format_labels(obj_at(
            obj,
            &["template", "metadata", "labels"],
        ))),
    ]
}

/// `printDeployment`: the selector column uses `LabelSelectorAsSelector` directly, so an
/// empty selector prints empty and an invalid one `<invalid>`.
pub fn deployment(obj: &Value, now: i64) -> Vec<Value> {
    let (names, images) = container_cells(get(obj, &["spec", "template", "spec"]));
    let selector =
        match LabelSelector::from_json(get(obj, &["spec", "selector"]).unwrap_or(&Value::Null)) {
            Ok(sel) => sel.to_string(),
            Err(_) => "<invalid>".to_string(),
        };
    vec![
        s(name(obj)),
        s(format!(
            "{}/{}",
            int_at(obj, &["status", "readyReplicas"]),
            desired_replicas(obj)
        )),
        n(int_at(obj, &["status", "updatedReplicas"])),
        n(int_at(obj, &["status", "availableReplicas"])),
        created(obj, now),
        names,
        images,
        s(selector),
    ]
}

/// `printReplicaSet`: the selector is a `LabelSelector`.
pub fn replica_set(obj: &Value, now: i64) -> Vec<Value> {
    let selector = format_label_selector(get(obj, &["spec", "selector"]));
    replicas_row(obj, now, selector)
}

/// `printDaemonSet`.
pub fn daemon_set(obj: &Value, now: i64) -> Vec<Value> {
    let (names, images) = container_cells(get(obj, &["spec", "template", "spec"]));
    vec![
        s(name(obj)),
        n(int_at(obj, &["status", "desiredNumberScheduled"])),
        n(int_at(obj, &["status", "currentNumberScheduled"])),
        n(int_at(obj, &["status", "numberReady"])),
        n(int_at(obj, &["status", "updatedNumberScheduled"])),
        n(int_at(obj, &["status", "numberAvailable"])),
        s(format_labels(obj_at(
            obj,
            &["spec", "template", "spec", "nodeSelector"],
        ))),
        created(obj, now),
        names,
        images,
        s(format_label_selector(get(obj, &["spec", "selector"]))),
    ]
}

/// `printStatefulSet`.
pub fn stateful_set(obj: &Value, now: i64) -> Vec<Value> {
    let (names, images) = container_cells(get(obj, &["spec", "template", "spec"]));
    vec![
        s(name(obj)),
        s(format!(
            "{}/{}",
            int_at(obj, &["status", "readyReplicas"]),
            desired_replicas(obj)
        )),
        created(obj, now),
        names,
        images,
    ]
}

/// `printControllerRevision`: the controller as `kind.group/name`, lower-cased.
pub fn controller_revision(obj: &Value, now: i64) -> Vec<Value> {
    let controller = arr_at(obj, &["metadata", "ownerReferences"])
        .iter()
        .find(|r| opt_bool_at(r, &["controller"]) == Some(true))
        .map_or_else(
            || "<none>".to_string(),
            |r| {
                let api_version = str_at(r, &["apiVersion"]);
                let group = api_version.split_once('/').map_or("", |(g, _)| g);
                let kind = str_at(r, &["kind"]);
                let ref_name = str_at(r, &["name"]);
                if group.is_empty() && kind.is_empty() {
                    ref_name.to_string()
                } else if group.is_empty() {
                    format!("{}/{ref_name}", kind.to_lowercase())
                } else {
                    format!(
                        "{}.{}/{ref_name}",
                        kind.to_lowercase(),
                        group.to_lowercase()
                    )
                }
            },
        );
    vec![
        s(name(obj)),
        s(controller),
        n(int_at(obj, &["revision"])),
        created(obj, now),
    ]
}

/// `hasJobCondition`: the first condition of the type decides.
fn has_job_condition(obj: &Value, type_: &str) -> bool {
    arr_at(obj, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == type_)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

/// `printJob`.
pub fn job(obj: &Value, now: i64) -> Vec<Value> {
    let succeeded = int_at(obj, &["status", "succeeded"]);
    let completions = match opt_int_at(obj, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match opt_int_at(obj, &["spec", "parallelism"]).unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = age::timestamp(get(obj, &["status", "startTime"]));
    let completion = age::timestamp(get(obj, &["status", "completionTime"]));
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(st), None) => age::human_duration(now.saturating_sub(st)),
        (Some(st), Some(done)) => age::human_duration(done.saturating_sub(st)),
    };
    let deleting = age::timestamp(get(obj, &["metadata", "deletionTimestamp"])).is_some();
    let status = if has_job_condition(obj, "Complete") {
        "Complete"
    } else if has_job_condition(obj, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if has_job_condition(obj, "Suspended") {
        "Suspended"
    } else if has_job_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = container_cells(get(obj, &["spec", "template", "spec"]));
    vec![
        s(name(obj)),
        s(status),
        s(completions),
        s(duration),
        created(obj, now),
        names,
        images,
        s(format_label_selector(get(obj, &["spec", "selector"]))),
    ]
}

/// `printCronJob`.
pub fn cron_job(obj: &Value, now: i64) -> Vec<Value> {
    let last_schedule = match get(obj, &["status", "lastScheduleTime"]).filter(|v| !v.is_null()) {
        Some(t) => age::since(Some(t), now),
        None => "<none>".to_string(),
    };
    let time_zone = get(obj, &["spec", "timeZone"])
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let (names, images) = container_cells(get(
        obj,
        &["spec", "jobTemplate", "spec", "template", "spec"],
    ));
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "schedule"])),
        s(time_zone),
        s(bool_ptr(opt_bool_at(obj, &["spec", "suspend"]))),
        n(arr_len(obj, &["status", "active"])),
        s(last_schedule),
        created(obj, now),
        names,
        images,
        s(format_label_selector(get(
            obj,
            &["spec", "jobTemplate", "spec", "selector"],
        ))),
    ]
}

/// `printRuntimeClass`.
pub fn runtime_class(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(str_at(obj, &["handler"])),
        created(obj, now),
    ]
}

/// `printLease`.
pub fn lease(obj: &Value, now: i64) -> Vec<Value> {
    vec![
        s(name(obj)),
        s(str_at(obj, &["spec", "holderIdentity"])),
        created(obj, now),
    ]
}

/// `printEndpointSlice`: up to three ports (`*` when unnamed and unnumbered) and addresses.
pub fn endpoint_slice(obj: &Value, now: i64) -> Vec<Value> {
    const MAX: usize = 3;
    let ports = arr_at(obj, &["ports"]);
    let port_list: Vec<String> = ports
        .iter()
        .take(MAX)
        .map(|p| {
            match (
                opt_int_at(p, &["port"]),
                get(p, &["name"]).and_then(Value::as_str),
            ) {
                (Some(num), _) => num.to_string(),
                (None, Some(port_name)) => port_name.to_string(),
                (None, None) => "*".to_string(),
            }
        })
        .collect();
    let addresses: Vec<String> = arr_at(obj, &["endpoints"])
        .iter()
        .flat_map(|e| arr_at(e, &["addresses"]).iter())
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    let shown: Vec<String> = addresses.iter().take(MAX).cloned().collect();
    vec![
        s(name(obj)),
        s(str_at(obj, &["addressType"])),
        s(list_with_more(
            &port_list,
            ports.len() > MAX,
            ports.len(),
            MAX,
        )),
        s(list_with_more(
            &shown,
            addresses.len() > MAX,
            addresses.len(),
            MAX,
        )),
        created(obj, now),
    ]
}

/// `rest.defaultTableConvertor`: NAME and the creation time as RFC 3339 UTC (Go's zero time
/// when unset).
pub fn created_at(obj: &Value) -> Vec<Value> {
    let at = get(obj, &["metadata", "creationTimestamp"])
        .and_then(Value::as_str)
        .and_then(age::parse_rfc3339);
    let formatted = match at {
        Some(secs) => crate::time::format_rfc3339(secs),
        None => "0001-01-01T00:00:00Z".to_string(),
    };
    vec![s(name(obj)), s(formatted)]
}

/// The custom resource table convertor's default `Age` column (a `date` column on
/// `.metadata.creationTimestamp`): null when absent, `<invalid>` when unparseable.
pub fn custom_resource(obj: &Value, now: i64) -> Vec<Value> {
    let age_cell = match get(obj, &["metadata", "creationTimestamp"]) {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(t)) if age::parse_rfc3339(t).is_none() => s("<invalid>"),
        Some(Value::String(t)) => s(age::since(Some(&Value::String(t.clone())), now)),
        Some(_) => s("<invalid>"),
    };
    vec![s(name(obj)), age_cell]
}
