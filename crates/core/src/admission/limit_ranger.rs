//! The LimitRanger admission plugin (upstream `plugin/pkg/admission/limitranger`), over JSON.
//!
//! On pod creation, every LimitRange of the namespace first fills in the `default` limits and
//! `defaultRequest` requests of its `Container` items for containers and init containers that
//! do not state them, recording what it set in the `kubernetes.io/limit-ranger` annotation
//! (`LimitRanger plugin set: cpu request for container app; cpu limit for container app`).
//! Then each LimitRange's `min`, `max` and `maxLimitRequestRatio` are checked per container
//! (`Container` items) and for the pod's totals (`Pod` items); claims are checked against
//! `PersistentVolumeClaim` items' `min`/`max` storage. The first LimitRange with violations
//! refuses the write with all of its messages, as upstream's aggregate error prints them:
//! one message alone, several as `[a, b]`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::quota::Amount;
use crate::quota::evaluator::{ResourceList, pod_limits, pod_requests, resource_list};

/// The annotation recording the defaults the plugin applied.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

fn items<'a>(range: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(move |i| i.get("type").and_then(Value::as_str) == Some(kind))
}

/// Upstream `defaultContainerResourceRequirements`: the `Container` items' defaults, later
/// items overriding earlier ones. Returns (requests, limits) as raw JSON values.
fn container_defaults(range: &Value) -> (Map<String, Value>, Map<String, Value>) {
    let mut requests = Map::new();
    let mut limits = Map::new();
    for item in items(range, "Container") {
        for (field, out) in [("defaultRequest", &mut requests), ("default", &mut limits)] {
            if let Some(m) = item.get(field).and_then(Value::as_object) {
                for (k, v) in m {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    (requests, limits)
}

/// Fills one container's missing requests and limits; returns the annotation parts.
fn merge_container(
    c: &mut Value,
    requests: &Map<String, Value>,
    limits: &Map<String, Value>,
    label: &str,
    notes: &mut Vec<String>,
) {
    let name = c
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(obj) = c.as_object_mut() else {
        return;
    };
    let resources = object_entry(obj, "resources");
    let set_limits = fill_missing(resources, "limits", limits);
    let set_requests = fill_missing(resources, "requests", requests);
    for (set, what) in [(set_requests, "request"), (set_limits, "limit")] {
        if !set.is_empty() {
            notes.push(format!("{} {what} for {label} {name}", set.join(", ")));
        }
    }
}

/// Copies into `resources[field]` the `defaults` it lacks; returns their names, sorted. With
/// no defaults the field is left as it is (not created).
fn fill_missing(
    resources: &mut Map<String, Value>,
    field: &str,
    defaults: &Map<String, Value>,
) -> Vec<String> {
    if defaults.is_empty() {
        return Vec::new();
    }
    let target = object_entry(resources, field);
    let mut names = Vec::new();
    for (k, v) in defaults {
        if !target.contains_key(k) {
            target.insert(k.clone(), v.clone());
            names.push(k.clone());
        }
    }
    names.sort();
    names
}

/// `obj[key]` as an object, a missing or non-object value replaced by `{}`.
fn object_entry<'a>(obj: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = obj.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Value::Object(m) = v else {
        unreachable!("replaced by an object above")
    };
    m
}

/// Upstream `PodMutateLimitFunc` for each range in turn: applies the `Container` defaults of
/// `ranges` to `pod` and sets the annotation (the last range that set something wins, as
/// upstream overwrites it per range).
pub fn default_pod(pod: &mut Value, ranges: &[Value]) {
    for range in ranges {
        let (requests, limits) = container_defaults(range);
        if requests.is_empty() && limits.is_empty() {
            continue;
        }
        let mut notes = Vec::new();
        for (list, label) in [
            ("containers", "container"),
            ("initContainers", "init container"),
        ] {
            if let Some(cs) = pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
            {
                for c in cs {
                    merge_container(c, &requests, &limits, label, &mut notes);
                }
            }
        }
        if notes.is_empty() {
            continue;
        }
        let value = format!("LimitRanger plugin set: {}", notes.join("; "));
        if let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
            object_entry(meta, "annotations").insert(ANNOTATION.to_string(), Value::String(value));
        }
    }
}

/// Compares at milli precision, as upstream's `requestLimitEnforcedValues` does for values
/// that fit.
fn milli(a: Amount) -> i128 {
    a.millis()
}

/// Which side of a `min`/`max` an amount must stay on.
#[derive(Debug, Clone, Copy)]
enum Bound {
    Min,
    Max,
}

impl Bound {
    fn word(self) -> &'static str {
        match self {
            Bound::Min => "minimum",
            Bound::Max => "maximum",
        }
    }

    fn violated_by(self, value: Amount, enforced: Amount) -> bool {
        match self {
            Bound::Min => milli(value) < milli(enforced),
            Bound::Max => milli(value) > milli(enforced),
        }
    }
}

/// Upstream `minConstraint`, `maxConstraint` and `maxRequestConstraint` in one: `required` (a
/// name such as `request` and its list) must state `res` and stay within the bound, then
/// `optional`, when it states `res`, must too. The first violation is the message.
fn bound_constraint(
    bound: Bound,
    kind: &str,
    res: &str,
    enforced: Amount,
    required: (&str, &ResourceList),
    optional: Option<(&str, &ResourceList)>,
) -> Option<String> {
    let word = bound.word();
    let (name, list) = required;
    let Some(value) = list.get(res) else {
        return Some(format!(
            "{word} {res} usage per {kind} is {enforced}.  No {name} is specified"
        ));
    };
    let stated = optional.and_then(|(name, list)| list.get(res).map(|v| (name, v)));
    std::iter::once((name, value))
        .chain(stated)
        .find(|(_, v)| bound.violated_by(**v, enforced))
        .map(|(name, v)| format!("{word} {res} usage per {kind} is {enforced}, but {name} is {v}"))
}

fn ratio_constraint(
    kind: &str,
    res: &str,
    enforced: Amount,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let req = requests.get(res).map(|q| milli(*q)).unwrap_or(0);
    if req == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    }
    let lim = limits.get(res).map(|q| milli(*q)).unwrap_or(0);
    if lim == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    let observed = lim as f64 / req as f64;
    let max = milli(enforced) as f64 / 1000.0;
    (observed > max).then(|| {
        format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but provided ratio is {observed:.6}"
        )
    })
}

/// Runs `min`, `max` and `maxLimitRequestRatio` of one item against requests and limits.
fn check_item(
    item: &Value,
    kind: &str,
    requests: &ResourceList,
    limits: &ResourceList,
    errs: &mut Vec<String>,
) {
    let (request, limit) = (("request", requests), ("limit", limits));
    // Upstream `minConstraint`: a request is required; it and any limit are at least `min`.
    for (k, v) in resource_list(item.get("min")) {
        errs.extend(bound_constraint(
            Bound::Min,
            kind,
            &k,
            v,
            request,
            Some(limit),
        ));
    }
    // Upstream `maxConstraint`: a limit is required; it and any request are at most `max`.
    for (k, v) in resource_list(item.get("max")) {
        errs.extend(bound_constraint(
            Bound::Max,
            kind,
            &k,
            v,
            limit,
            Some(request),
        ));
    }
    for (k, v) in resource_list(item.get("maxLimitRequestRatio")) {
        errs.extend(ratio_constraint(kind, &k, v, requests, limits));
    }
}

/// Upstream `utilerrors.NewAggregate(errs).Error()`: one message alone, several (duplicates
/// dropped) inside brackets.
fn aggregate(errs: Vec<String>) -> Result<(), String> {
    let mut seen = BTreeMap::new();
    let unique: Vec<String> = errs
        .into_iter()
        .filter(|e| seen.insert(e.clone(), ()).is_none())
        .collect();
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

/// Upstream `PodValidateLimitFunc` for one LimitRange.
fn validate_pod_range(pod: &Value, range: &Value) -> Result<(), String> {
    let mut errs = Vec::new();
    for item in range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("Container") => {
                for list in ["containers", "initContainers"] {
                    for c in pod
                        .pointer(&format!("/spec/{list}"))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let requests = resource_list(c.pointer("/resources/requests"));
                        let limits = resource_list(c.pointer("/resources/limits"));
                        check_item(item, "Container", &requests, &limits, &mut errs);
                    }
                }
            }
            Some("Pod") => {
                let requests = pod_requests(pod, false);
                let limits = pod_limits(pod, false);
                check_item(item, "Pod", &requests, &limits, &mut errs);
            }
            _ => {}
        }
    }
    aggregate(errs)
}

/// Checks a pod (after [`default_pod`]) against each LimitRange; the error is the message of
/// the 403 (without the `pods "x" is forbidden: ` prefix).
pub fn validate_pod(pod: &Value, ranges: &[Value]) -> Result<(), String> {
    ranges.iter().try_for_each(|r| validate_pod_range(pod, r))
}

/// Upstream `PersistentVolumeClaimValidateLimitFunc`: a claim's requested storage against the
/// `PersistentVolumeClaim` items' `min` and `max`.
pub fn validate_claim(pvc: &Value, ranges: &[Value]) -> Result<(), String> {
    let requests = resource_list(pvc.pointer("/spec/resources/requests"));
    let request = ("request", &requests);
    for range in ranges {
        let mut errs = Vec::new();
        for item in items(range, "PersistentVolumeClaim") {
            // Upstream `minConstraint` and `maxRequestConstraint`: a claim's limits are not
            // user input, so only its request is checked.
            for (field, bound) in [("min", Bound::Min), ("max", Bound::Max)] {
                for (k, v) in resource_list(item.get(field)) {
                    let kind = "PersistentVolumeClaim";
                    errs.extend(bound_constraint(bound, kind, &k, v, request, None));
                }
            }
        }
        aggregate(errs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn range(limits: Value) -> Value {
        json!({"metadata": {"name": "lr"}, "spec": {"limits": limits}})
    }

    #[test]
    fn defaults_fill_missing_requests_and_limits_and_annotate() {
        let lr = range(
            json!([{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"}}]),
        );
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}}}]
        }});
        default_pod(&mut pod, &[lr]);
        let app = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(app["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
        assert_eq!(app["requests"], json!({"cpu": "100m"}));
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu request for container app; cpu limit for container app; \
             cpu request for init container init; cpu, memory limit for init container init"
        );
    }

    #[test]
    fn pod_without_defaults_to_apply_is_not_annotated() {
        let lr = range(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        default_pod(&mut pod, &[lr]);
        assert!(pod["metadata"].get("annotations").is_none());
    }

    #[test]
    fn container_min_and_max_violations_are_listed_together() {
        let lr =
            range(json!([{"type": "Container", "min": {"cpu": "100m"}, "max": {"memory": "1Gi"}}]));
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {
            "requests": {"cpu": "50m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}
        }}]}});
        assert_eq!(
            validate_pod(&pod, &[lr]),
            Err("[minimum cpu usage per Container is 100m, but request is 50m, maximum memory usage per Container is 1Gi, but limit is 2Gi]".into())
        );
    }

    #[test]
    fn single_violation_is_not_bracketed() {
        let lr = range(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}}]}});
        assert_eq!(
            validate_pod(&pod, &[lr]),
            Err("maximum cpu usage per Container is 1, but limit is 2".into())
        );
    }

    #[test]
    fn missing_limit_under_a_max_is_refused() {
        let lr = range(json!([{"type": "Container", "max": {"cpu": "1"}}]));
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            validate_pod(&pod, &[lr]),
            Err("maximum cpu usage per Container is 1.  No limit is specified".into())
        );
    }

    #[test]
    fn pod_totals_are_checked_against_pod_items() {
        let lr = range(json!([{"type": "Pod", "max": {"cpu": "1"}}]));
        let c = |cpu: &str| json!({"name": "a", "resources": {"limits": {"cpu": cpu}, "requests": {"cpu": cpu}}});
        let pod = json!({"spec": {"containers": [c("600m"), c("600m")]}});
        assert_eq!(
            validate_pod(&pod, &[lr]),
            Err("maximum cpu usage per Pod is 1, but limit is 1200m".into())
        );
    }

    #[test]
    fn limit_to_request_ratio_is_enforced() {
        let lr = range(json!([{"type": "Container", "maxLimitRequestRatio": {"memory": "2"}}]));
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": {
            "requests": {"memory": "100Mi"}, "limits": {"memory": "300Mi"}
        }}]}});
        assert_eq!(
            validate_pod(&pod, &[lr]),
            Err("memory max limit to request ratio per Container is 2, but provided ratio is 3.000000".into())
        );
    }

    #[test]
    fn claims_are_held_to_storage_min_and_max() {
        let lr = range(
            json!([{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]),
        );
        let pvc = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(validate_claim(&pvc("5Gi"), std::slice::from_ref(&lr)).is_ok());
        assert_eq!(
            validate_claim(&pvc("20Gi"), std::slice::from_ref(&lr)),
            Err(
                "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
                    .into()
            )
        );
        assert_eq!(
            validate_claim(&pvc("500Mi"), &[lr]),
            Err(
                "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
                    .into()
            )
        );
    }
}
