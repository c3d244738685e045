//! The DefaultTolerationSeconds admission plugin: upstream
//! `plugin/pkg/admission/defaulttolerationseconds/admission.go`.
//!
//! Every pod gets `node.kubernetes.io/not-ready:NoExecute` and
//! `node.kubernetes.io/unreachable:NoExecute` tolerations (`Exists`, `tolerationSeconds: 300`)
//! unless it already tolerates that taint: a toleration with that key, or an empty key, and the
//! `NoExecute` effect or an empty one.

use serde_json::{Value, json};

/// The taint a node gets while its Ready condition is false.
pub const TAINT_NODE_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint a node gets while its Ready condition is unknown.
pub const TAINT_NODE_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Upstream's `--default-not-ready-toleration-seconds` / `--default-unreachable-toleration-seconds`.
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// The `tolerationSeconds` of the two added tolerations (kube-apiserver's
/// `--default-not-ready-toleration-seconds` and `--default-unreachable-toleration-seconds`,
/// 300 each by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultTolerations {
    pub not_ready_seconds: i64,
    pub unreachable_seconds: i64,
}

impl Default for DefaultTolerations {
    fn default() -> Self {
        DefaultTolerations {
            not_ready_seconds: DEFAULT_TOLERATION_SECONDS,
            unreachable_seconds: DEFAULT_TOLERATION_SECONDS,
        }
    }
}

/// Upstream's own check in this plugin, deliberately looser than
/// `scheduling::taints::tolerates` (which needs a taint's value): a toleration with the taint's
/// key or an empty key, and the `NoExecute` effect or an empty one, counts whatever its operator.
fn tolerates(tolerations: &[Value], taint: &str) -> bool {
    tolerations.iter().any(|t| {
        let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
        (key == taint || key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

/// Adds the default not-ready/unreachable tolerations the pod lacks, with upstream's 300 s.
/// Objects without an object `spec` are left alone.
pub fn admit(pod: &mut Value) {
    admit_with(pod, DefaultTolerations::default());
}

/// [`admit`] with the given `tolerationSeconds`.
pub fn admit_with(pod: &mut Value, seconds: DefaultTolerations) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let existing = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut added = Vec::new();
    for (taint, secs) in [
        (TAINT_NODE_NOT_READY, seconds.not_ready_seconds),
        (TAINT_NODE_UNREACHABLE, seconds.unreachable_seconds),
    ] {
        if !tolerates(&existing, taint) {
            added.push(json!({
                "key": taint,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": secs,
            }));
        }
    }
    if added.is_empty() {
        return;
    }
    let mut all = existing;
    all.extend(added);
    spec.insert("tolerations".into(), Value::Array(all));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn not_ready() -> Value {
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    }
    fn unreachable() -> Value {
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    }

    #[test]
    fn configured_toleration_seconds_are_used() {
        let mut pod = json!({"spec": {"tolerations": [not_ready()]}});
        admit_with(
            &mut pod,
            DefaultTolerations {
                not_ready_seconds: 7,
                unreachable_seconds: 5,
            },
        );
        let mut want = unreachable();
        want["tolerationSeconds"] = json!(5);
        assert_eq!(pod["spec"]["tolerations"], json!([not_ready(), want]));
    }

    #[test]
    fn default_tolerations_are_added_when_absent_and_kept_when_present() {
        let own_not_ready = json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60});
        let os =
            json!({"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"});
        let cases: Vec<(Option<Value>, Value)> = vec![
            (None, json!([not_ready(), unreachable()])),
            (
                Some(json!([os.clone()])),
                json!([os.clone(), not_ready(), unreachable()]),
            ),
            (
                Some(json!([own_not_ready.clone()])),
                json!([own_not_ready.clone(), unreachable()]),
            ),
            // An empty key with Exists tolerates everything.
            (
                Some(json!([{"operator": "Exists"}])),
                json!([{"operator": "Exists"}]),
            ),
            // An empty effect covers NoExecute.
            (
                Some(json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}])),
                json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}, not_ready()]),
            ),
            // A NoSchedule toleration for the taint does not count.
            (
                Some(
                    json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]),
                ),
                json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}, not_ready(), unreachable()]),
            ),
            (
                Some(json!([not_ready(), unreachable()])),
                json!([not_ready(), unreachable()]),
            ),
        ];
        for (given, want) in cases {
            let mut pod = json!({"spec": {"containers": []}});
            if let Some(t) = &given {
                pod["spec"]["tolerations"] = t.clone();
            }
            admit(&mut pod);
            assert_eq!(pod["spec"]["tolerations"], want, "given {given:?}");
        }
    }

    #[test]
    fn default_tolerations_never_panic_on_odd_shapes() {
        for mut p in [
            json!(null),
            json!({"spec": 1}),
            json!({"spec": {"tolerations": "x"}}),
            json!({"spec": {"tolerations": [1, null]}}),
        ] {
            admit(&mut p);
        }
    }
}
