//! The Priority admission plugin: upstream `plugin/pkg/admission/priority/admission.go`.
//!
//! - A new pod's `spec.priorityClassName` is resolved to its `scheduling.k8s.io/v1`
//!   PriorityClass, whose `value` and `preemptionPolicy` become the pod's `spec.priority` and
//!   `spec.preemptionPolicy` (`admitPod`). A pod naming no class gets the global default class
//!   (and its name), or priority 0 and `PreemptLowerPriority` when there is none
//!   (`getDefaultPriority`). A name that resolves to nothing is Forbidden, and so is a pod that
//!   sets a `priority` (or `preemptionPolicy`) other than the one computed.
//! - On pod update the stored priority and preemption policy are kept when the new object
//!   leaves them out (validation then refuses any other change to them).
//! - A PriorityClass may only be marked `globalDefault` when no other class is
//!   (`validatePriorityClass`).
//!
//! Only pods are mutated: pod templates of workloads are not, as upstream. The reserved
//! `system-` prefix and the value range are field validation's business.

use serde_json::{Value, json};

use super::{AdmissionError, Operation};

/// Upstream `scheduling.DefaultPriorityWhenNoDefaultClassExists`.
pub const DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS: i64 = 0;
/// Upstream `v1.PreemptLowerPriority`: what a PriorityClass's `preemptionPolicy` defaults to.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_global_default(class: &Value) -> bool {
    class.get("globalDefault").and_then(Value::as_bool) == Some(true)
}

fn value_of(class: &Value) -> i64 {
    class.get("value").and_then(Value::as_i64).unwrap_or(0)
}

fn preemption_policy_of(class: &Value) -> &str {
    class
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or(PREEMPT_LOWER_PRIORITY)
}

/// The global default PriorityClass among `classes`: the one marked `globalDefault`, and when a
/// race let several be marked, the one with the lowest value (upstream
/// `getDefaultPriorityClass`).
pub fn default_class(classes: &[Value]) -> Option<&Value> {
    classes
        .iter()
        .filter(|c| is_global_default(c))
        .min_by_key(|c| value_of(c))
}

/// The class name (empty when none), priority and preemption policy a pod gets: from the class
/// it names (`named`, already looked up by the caller; `None` when there is no such class), or
/// when it names none from the global default among `classes`.
fn resolve(
    class_name: &str,
    named: Option<&Value>,
    classes: &[Value],
) -> Result<(String, i64, String), AdmissionError> {
    if class_name.is_empty() {
        return Ok(match default_class(classes) {
            Some(dc) => (
                name_of(dc).to_string(),
                value_of(dc),
                preemption_policy_of(dc).to_string(),
            ),
            None => (
                String::new(),
                DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS,
                PREEMPT_LOWER_PRIORITY.to_string(),
            ),
        });
    }
    match named {
        Some(pc) => Ok((
            class_name.to_string(),
            value_of(pc),
            preemption_policy_of(pc).to_string(),
        )),
        None => Err(AdmissionError::Forbidden(format!(
            "no PriorityClass with name {class_name} was found"
        ))),
    }
}

/// The `spec.priorityClassName` of a pod, empty when unset.
pub fn class_name(pod: &Value) -> &str {
    pod.pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Mutates a new pod as upstream's `admitPod` does on create. `named` is the PriorityClass the
/// pod names (`None` when it names none or the class does not exist); `classes` are every
/// PriorityClass, read only when the pod names none (for the global default). A pod without an
/// object `spec` is left alone (validation reports it).
pub fn admit_pod_create(
    pod: &mut Value,
    named: Option<&Value>,
    classes: &[Value],
) -> Result<(), AdmissionError> {
    let wanted = class_name(pod).to_string();
    let (class, priority, policy) = resolve(&wanted, named, classes)?;
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(given) = spec.get("priority").filter(|v| !v.is_null()) {
        let given_n = given.as_i64();
        if given_n != Some(priority) {
            let shown = given_n.map_or_else(|| given.to_string(), |n| n.to_string());
            return Err(AdmissionError::Forbidden(format!(
                "the integer value of priority ({shown}) must not be provided in pod spec; \
                 priority admission controller computed {priority} from the given PriorityClass name"
            )));
        }
    }
    if let Some(given) = spec
        .get("preemptionPolicy")
        .and_then(Value::as_str)
        .filter(|p| *p != policy)
    {
        return Err(AdmissionError::Forbidden(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
             priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    if wanted.is_empty() && !class.is_empty() {
        spec.insert("priorityClassName".into(), json!(class));
    }
    spec.insert("priority".into(), json!(priority));
    spec.insert("preemptionPolicy".into(), json!(policy));
    Ok(())
}

/// On pod update, keeps the stored `priority` and `preemptionPolicy` when the new object leaves
/// them out (upstream `admitPod` on update).
pub fn admit_pod_update(pod: &mut Value, old: &Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["priority", "preemptionPolicy"] {
        let missing = spec.get(field).is_none_or(Value::is_null);
        if missing
            && let Some(v) = old.get("spec").and_then(|s| s.get(field))
            && !v.is_null()
        {
            spec.insert(field.into(), v.clone());
        }
    }
}

/// Refuses a PriorityClass marked `globalDefault` while another class is the default (upstream
/// `validatePriorityClass`). `classes` are the stored PriorityClasses.
pub fn validate_priority_class(
    op: Operation,
    class: &Value,
    classes: &[Value],
) -> Result<(), AdmissionError> {
    if !is_global_default(class) {
        return Ok(());
    }
    let Some(existing) = default_class(classes) else {
        return Ok(());
    };
    let existing_name = name_of(existing);
    if op == Operation::Create || existing_name != name_of(class) {
        return Err(AdmissionError::Forbidden(format!(
            "PriorityClass {existing_name} is already marked as default. Only one default can exist"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, global_default: bool) -> Value {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": global_default,
            "preemptionPolicy": "PreemptLowerPriority"})
    }

    fn pod(spec_extra: Value) -> Value {
        let mut spec = json!({"containers": [{"name": "c", "image": "pause"}]});
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
            s.extend(extra.clone());
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": spec})
    }

    #[test]
    fn pod_naming_a_class_gets_its_value_and_preemption_policy() {
        let mut high = class("high", 1000, false);
        high["preemptionPolicy"] = json!("Never");
        let mut p = pod(json!({"priorityClassName": "high"}));
        admit_pod_create(&mut p, Some(&high), &[]).expect("accepted");
        assert_eq!(p["spec"]["priority"], json!(1000));
        assert_eq!(p["spec"]["preemptionPolicy"], json!("Never"));
        assert_eq!(p["spec"]["priorityClassName"], json!("high"));
    }

    #[test]
    fn pod_naming_an_unknown_class_is_forbidden_with_upstreams_message() {
        let mut p = pod(json!({"priorityClassName": "nope"}));
        let err = admit_pod_create(&mut p, None, &[]).expect_err("refused");
        assert_eq!(err.code(), 403);
        assert_eq!(
            err.status_message("pods", "p"),
            "pods \"p\" is forbidden: no PriorityClass with name nope was found"
        );
    }

    #[test]
    fn pod_without_class_gets_the_global_default_and_its_name() {
        let classes = [class("a", 5, false), class("def", 7, true)];
        let mut p = pod(json!({}));
        admit_pod_create(&mut p, None, &classes).expect("accepted");
        assert_eq!(p["spec"]["priorityClassName"], json!("def"));
        assert_eq!(p["spec"]["priority"], json!(7));
        assert_eq!(p["spec"]["preemptionPolicy"], json!("PreemptLowerPriority"));
    }

    #[test]
    fn pod_without_class_and_no_default_gets_priority_zero() {
        let mut p = pod(json!({}));
        admit_pod_create(&mut p, None, &[class("a", 5, false)]).expect("accepted");
        assert_eq!(p["spec"]["priority"], json!(0));
        assert_eq!(p["spec"]["preemptionPolicy"], json!("PreemptLowerPriority"));
        assert!(p["spec"].get("priorityClassName").is_none());
    }

    #[test]
    fn several_global_defaults_resolve_to_the_lowest_value() {
        let classes = [class("big", 100, true), class("small", 10, true)];
        assert_eq!(
            name_of(default_class(&classes).expect("a default class")),
            "small"
        );
    }

    #[test]
    fn pod_setting_a_different_priority_is_forbidden() {
        let high = class("high", 1000, false);
        let mut p = pod(json!({"priorityClassName": "high", "priority": 5}));
        let err = admit_pod_create(&mut p, Some(&high), &[]).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the integer value of priority (5) must not be provided in pod spec; priority \
             admission controller computed 1000 from the given PriorityClass name"
        );
    }

    #[test]
    fn pod_setting_the_computed_priority_is_accepted() {
        let high = class("high", 1000, false);
        let mut p = pod(json!({"priorityClassName": "high", "priority": 1000}));
        admit_pod_create(&mut p, Some(&high), &[]).expect("accepted");
        assert_eq!(p["spec"]["priority"], json!(1000));
    }

    #[test]
    fn pod_setting_a_different_preemption_policy_is_forbidden() {
        let high = class("high", 1000, false);
        let mut p = pod(json!({"priorityClassName": "high", "preemptionPolicy": "Never"}));
        let err = admit_pod_create(&mut p, Some(&high), &[]).expect_err("refused");
        assert!(
            err.to_string()
                .starts_with("the string value of PreemptionPolicy (Never) must not be provided"),
            "{err}"
        );
    }

    #[test]
    fn pod_update_keeps_the_stored_priority_when_left_out() {
        let old = pod(json!({"priority": 1000, "preemptionPolicy": "PreemptLowerPriority"}));
        let mut new = pod(json!({}));
        admit_pod_update(&mut new, &old);
        assert_eq!(new["spec"]["priority"], json!(1000));
        assert_eq!(
            new["spec"]["preemptionPolicy"],
            json!("PreemptLowerPriority")
        );
    }

    #[test]
    fn second_global_default_class_is_forbidden_naming_the_first() {
        let existing = [class("first", 1, true)];
        let err = validate_priority_class(Operation::Create, &class("second", 2, true), &existing)
            .expect_err("refused");
        assert_eq!(
            err.status_message("priorityclasses.scheduling.k8s.io", "second"),
            "priorityclasses.scheduling.k8s.io \"second\" is forbidden: PriorityClass first is \
             already marked as default. Only one default can exist"
        );
        // Marking another existing class default is refused too.
        assert!(
            validate_priority_class(Operation::Update, &class("second", 2, true), &existing)
                .is_err()
        );
    }

    #[test]
    fn the_default_class_may_be_updated_and_non_defaults_created_freely() {
        let existing = [class("first", 1, true)];
        validate_priority_class(Operation::Update, &class("first", 3, true), &existing)
            .expect("accepted");
        validate_priority_class(Operation::Create, &class("other", 3, false), &existing)
            .expect("accepted");
        validate_priority_class(Operation::Create, &class("only", 3, true), &[]).expect("accepted");
    }
}
