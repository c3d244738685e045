//! JSON patch, JSON merge patch, strategic merge patch and server-side apply, and the field
//! ownership (`metadata.managedFields`) of apply and non-apply writes.
//!
//! Every function here is pure: it takes the current object and the request body as
//! `serde_json::Value`s and returns the new object, never panicking whatever the input. Failures
//! are [`PatchError`]s (and [`ApplyError`]s for server-side apply) whose messages read like
//! upstream's; [`PatchError::status_code`] says which HTTP status upstream answers with.

mod apply;
mod error;
mod schema;
mod strategic;
pub mod strategy;
mod update;

use serde_json::Value;

pub use apply::{ApplyError, Conflict, server_side_apply};
pub use error::PatchError;
pub use schema::Schema;
pub use strategic::strategic_merge_patch;
pub use update::{manager_from_user_agent, track_update};

/// Upstream's limit on the operations of one JSON patch (`maxJSONPatchOperations` in
/// `k8s.io/apiserver/pkg/endpoints/handlers/patch.go`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Applies an RFC 6902 JSON patch (`application/json-patch+json`) to `doc`.
///
/// Mirrors `jsonPatcher.applyJSPatch` upstream: a body that is not a list of operations is a
/// [`PatchError::InvalidJsonPatch`] (400), more than [`MAX_JSON_PATCH_OPERATIONS`] operations is
/// [`PatchError::TooManyOperations`] (413), and an operation that does not apply — a failed
/// `test`, a path that does not exist — is a 422 naming the operation and path. The patch is
/// all-or-nothing: on error `doc` is untouched (it is never modified; the result is a new value).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Some(ops) = patch.as_array() else {
        return Err(PatchError::InvalidJsonPatch(
            "the patch must be a JSON array of operations".into(),
        ));
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            count: ops.len(),
            limit: MAX_JSON_PATCH_OPERATIONS,
        });
    }
    let parsed: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::InvalidJsonPatch(e.to_string()))?;
    let mut out = doc.clone();
    // `patch_unsafe` applies to our own copy; the crate's undo log (used by `patch`) is not
    // needed and has paths that can panic.
    json_patch::patch_unsafe(&mut out, &parsed).map_err(|e| json_patch_error(&parsed, &e))?;
    Ok(out)
}

/// Turns the crate's error into upstream's wording (evanphx/json-patch, which the API server uses).
fn json_patch_error(patch: &json_patch::Patch, err: &json_patch::PatchError) -> PatchError {
    use json_patch::{PatchErrorKind, PatchOperation};
    let op = patch.0.get(err.operation);
    let name = match op {
        Some(PatchOperation::Add(_)) => "add",
        Some(PatchOperation::Remove(_)) => "remove",
        Some(PatchOperation::Replace(_)) => "replace",
        Some(PatchOperation::Move(_)) => "move",
        Some(PatchOperation::Copy(_)) => "copy",
        Some(PatchOperation::Test(_)) | None => "test",
    };
    let path = err.path.to_string();
    let message = match &err.kind {
        PatchErrorKind::TestFailed => format!("testing value {path} failed: test failed"),
        PatchErrorKind::InvalidFromPointer => {
            let from = match op {
                Some(PatchOperation::Move(m)) => m.from.to_string(),
                Some(PatchOperation::Copy(c)) => c.from.to_string(),
                _ => String::new(),
            };
            format!("{name} operation does not apply: doc is missing from path: \"{from}\"")
        }
        PatchErrorKind::CannotMoveInsideItself => {
            format!("move operation does not apply: cannot move {path} into one of its children")
        }
        _ => format!("{name} operation does not apply: doc is missing path: \"{path}\""),
    };
    PatchError::JsonPatchFailed {
        operation: err.operation,
        message,
    }
}

/// Applies an RFC 7386 JSON merge patch (`application/merge-patch+json`): objects merge
/// recursively, `null` deletes a key, anything else (lists included) replaces. A patch that is not
/// an object replaces the whole document. Mirrors `jsonpatch.MergePatch` as the API server uses it.
pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_patch_applies_operations_in_order() {
        let doc = json!({"spec": {"replicas": 1, "list": [1, 2]}});
        let patch = json!([
            {"op": "test", "path": "/spec/replicas", "value": 1},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/spec/list/-", "value": 3},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "copy", "from": "/spec/replicas", "path": "/spec/copy"},
            {"op": "move", "from": "/spec/copy", "path": "/moved"},
        ]);
        let out = json_patch(&doc, &patch);
        assert_eq!(
            out.ok(),
            Some(json!({"spec": {"replicas": 3, "list": [2, 3]}, "moved": 3}))
        );
    }

    #[test]
    fn json_patch_test_failure_is_an_error() {
        let doc = json!({"spec": {"replicas": 1}});
        let patch = json!([{"op": "test", "path": "/spec/replicas", "value": 2}]);
        let err = json_patch(&doc, &patch).err();
        assert_eq!(
            err.as_ref().map(ToString::to_string).as_deref(),
            Some("testing value /spec/replicas failed: test failed")
        );
        assert_eq!(err.map(|e| e.status_code()), Some(422));
    }

    #[test]
    fn json_patch_on_missing_path_is_an_error() {
        let doc = json!({"spec": {}});
        for (patch, want) in [
            (
                json!([{"op": "remove", "path": "/spec/replicas"}]),
                "remove operation does not apply: doc is missing path: \"/spec/replicas\"",
            ),
            (
                json!([{"op": "replace", "path": "/spec/replicas", "value": 1}]),
                "replace operation does not apply: doc is missing path: \"/spec/replicas\"",
            ),
            (
                json!([{"op": "add", "path": "/status/phase", "value": "x"}]),
                "add operation does not apply: doc is missing path: \"/status/phase\"",
            ),
            (
                json!([{"op": "move", "from": "/nope", "path": "/x"}]),
                "move operation does not apply: doc is missing from path: \"/nope\"",
            ),
        ] {
            let err = json_patch(&doc, &patch).err();
            assert_eq!(err.map(|e| e.to_string()).as_deref(), Some(want));
        }
    }

    #[test]
    fn json_patch_rejects_malformed_bodies_as_bad_requests() {
        let doc = json!({});
        for patch in [
            json!({"op": "add"}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "path": "no-slash", "value": 1}]),
            json!([1, 2]),
        ] {
            let err = json_patch(&doc, &patch).err();
            assert_eq!(err.map(|e| e.status_code()), Some(400), "{patch}");
        }
    }

    #[test]
    fn json_patch_with_too_many_operations_is_rejected() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        let err = json_patch(&json!({}), &Value::Array(ops)).err();
        assert_eq!(err.map(|e| e.status_code()), Some(413));
    }

    #[test]
    fn json_patch_move_to_root_then_failure_does_not_panic() {
        let doc = json!({"a": {"b": 1}});
        let patch = json!([
            {"op": "move", "from": "/a", "path": ""},
            {"op": "test", "path": "/b", "value": 2},
        ]);
        assert!(json_patch(&doc, &patch).is_err());
    }

    /// A small deterministic generator of odd JSON shapes: keys that are directives or Kubernetes
    /// fields, lists where maps are expected, numbers, nulls, deep nesting.
    struct Shapes(u64);

    impl Shapes {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
            let i = usize::try_from(self.next()).unwrap_or(0) % options.len().max(1);
            options.get(i).copied().unwrap_or("")
        }

        fn value(&mut self, depth: u32) -> Value {
            const KEYS: &[&str] = &[
                "metadata",
                "spec",
                "template",
                "containers",
                "name",
                "image",
                "env",
                "ports",
                "containerPort",
                "labels",
                "finalizers",
                "volumes",
                "strategy",
                "replicas",
                "$patch",
                "$retainKeys",
                "$setElementOrder/containers",
                "$setElementOrder/finalizers",
                "$deleteFromPrimitiveList/finalizers",
                "$deleteFromPrimitiveList",
                "$setElementOrder",
                "status",
                "managedFields",
                "conditions",
                "type",
                "",
            ];
            const STRINGS: &[&str] = &["delete", "replace", "merge", "web", "a", "", "TCP"];
            let kind = if depth == 0 {
                self.next() % 5
            } else {
                self.next() % 8
            };
            match kind {
                0 => Value::Null,
                1 => json!(self.next().is_multiple_of(3)),
                2 => json!(self.next() % 100),
                3 => json!(-1.5),
                4 => json!(self.pick(STRINGS)),
                5 | 6 => {
                    let mut m = serde_json::Map::new();
                    for _ in 0..(self.next() % 4) {
                        let k = self.pick(KEYS).to_string();
                        m.insert(k, self.value(depth - 1));
                    }
                    Value::Object(m)
                }
                _ => Value::Array(
                    (0..(self.next() % 4))
                        .map(|_| self.value(depth - 1))
                        .collect(),
                ),
            }
        }
    }

    fn nested(depth: usize) -> Value {
        let mut v = json!({"x": 1});
        for i in 0..depth {
            v = if i % 2 == 0 {
                json!({"spec": v})
            } else {
                json!([v])
            };
        }
        v
    }

    #[test]
    fn fuzzish_inputs_never_panic() {
        let definitions = [
            None,
            Some("io.k8s.api.core.v1.Pod"),
            Some("io.k8s.api.apps.v1.Deployment"),
            Some("io.k8s.api.core.v1.PodSpec"),
            Some("not.a.Definition"),
        ];
        let mut shapes = Shapes(7);
        for round in 0..3000 {
            let doc = shapes.value(5);
            let patch = shapes.value(5);
            let def = definitions
                .get(round % definitions.len())
                .copied()
                .flatten();
            let _ = strategic_merge_patch(&doc, &patch, def);
            let _ = json_patch(&doc, &patch);
            let _ = merge_patch(&doc, &patch);
            let live = if round % 3 == 0 { None } else { Some(&doc) };
            let _ = server_side_apply(live, &patch, "fuzz", round % 2 == 0, def, "now");
            // Apply twice so that the recorded managedFields are read back.
            if let Ok(applied) = server_side_apply(live, &patch, "a", false, def, "now") {
                let _ = server_side_apply(Some(&applied), &doc, "b", false, def, "now");
                let _ = server_side_apply(Some(&applied), &json!({}), "a", true, def, "now");
            }
        }
        let deep = nested(1000);
        for def in definitions {
            let _ = strategic_merge_patch(&deep, &deep, def);
            let _ = server_side_apply(Some(&deep), &deep, "m", false, def, "now");
        }
        let ops = json!([
            {"op": "remove", "path": "/a/-"},
            {"op": "add", "path": "/a/99", "value": 1},
            {"op": "move", "from": "", "path": "/a/b"},
            {"op": "copy", "from": "/a", "path": "/a/c"},
        ]);
        let _ = json_patch(&json!({"a": []}), &ops);
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": true});
        let patch = json!({"a": {"b": null, "d": 4}, "l": [3]});
        assert_eq!(
            merge_patch(&doc, &patch),
            json!({"a": {"c": 2, "d": 4}, "l": [3], "keep": true})
        );
        assert_eq!(merge_patch(&doc, &json!([1])), json!([1]));
    }
}
