//! Property tests of the patch formats a client can send (`PATCH` with
//! `application/json-patch+json`, `merge-patch+json`, `strategic-merge-patch+json` and
//! `apply-patch+yaml`, as upstream's `patchResource` dispatches them), and of the field
//! ownership recorded on every write (`managedFields`).
//!
//! Whatever the patch, applying it to a valid object never panics and either fails with a
//! `PatchError`/`ApplyError` or yields a JSON object; a JSON merge patch is idempotent
//! (RFC 7386: applying the same patch twice changes nothing more); a JSON patch that fails leaves
//! nothing half-applied (the input is never modified, the result is all or nothing).

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

mod fuzz_support;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tandem_core::patch::{
    json_patch, merge_patch, server_side_apply, strategic_merge_patch, track_update,
};

use fuzz_support::{ensure, hostile_text, property_of, regressions};

const LIMIT: Duration = Duration::from_secs(40);

const DEFINITIONS: &[Option<&str>] = &[
    None,
    Some("io.k8s.api.core.v1.Pod"),
    Some("io.k8s.api.apps.v1.Deployment"),
    Some("io.k8s.api.core.v1.Service"),
    Some("io.k8s.api.core.v1.ConfigMap"),
];

/// Keys a patch of a pod or deployment touches, the strategic-merge directives among them.
const KEYS: &[&str] = &[
    "metadata",
    "name",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "uid",
    "managedFields",
    "spec",
    "template",
    "containers",
    "initContainers",
    "image",
    "ports",
    "containerPort",
    "protocol",
    "env",
    "value",
    "volumes",
    "volumeMounts",
    "mountPath",
    "tolerations",
    "key",
    "replicas",
    "selector",
    "status",
    "conditions",
    "type",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/finalizers",
    "$deleteFromPrimitiveList/finalizers",
    "$setElementOrder/ports",
    "apiVersion",
    "kind",
    "data",
    "a",
    "",
];

fn scalar() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..100).prop_map(Value::from),
        Just(json!(1.5)),
        proptest::sample::select(vec![
            "delete",
            "replace",
            "merge",
            "web",
            "nginx",
            "TCP",
            "a",
            "",
            "k:{\"name\":\"web\"}",
        ])
        .prop_map(Value::from),
        hostile_text(4).prop_map(Value::from),
    ]
}

/// JSON values built from [`KEYS`], up to four levels deep.
fn value() -> impl Strategy<Value = Value> + Clone {
    scalar().prop_recursive(4, 48, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..5).prop_map(
                |entries| {
                    Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect::<Map<String, Value>>(),
                    )
                }
            ),
        ]
    })
}

/// A valid object to patch: a Deployment with a pod template, as a client would have read it.
fn live_object() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "default", "uid": "u1", "resourceVersion": "5",
            "labels": {"app": "web"}, "finalizers": ["a", "b"],
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}}
            }]
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                        {"name": "side", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
                    ],
                    "tolerations": [{"key": "k", "operator": "Exists"}]
                }
            }
        },
        "status": {"conditions": [{"type": "Available", "status": "True"}]}
    })
}

/// Paths into [`live_object`] and near misses, for JSON patch operations.
fn pointer() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        4 => proptest::sample::select(vec![
            "", "/", "/spec", "/spec/replicas", "/spec/template/spec/containers",
            "/spec/template/spec/containers/0", "/spec/template/spec/containers/1/image",
            "/spec/template/spec/containers/-", "/spec/template/spec/containers/2",
            "/spec/template/spec/containers/01", "/spec/template/spec/containers/-1",
            "/spec/template/spec/containers/99999999999999999999", "/metadata/labels/app",
            "/metadata/labels/a~1b", "/metadata/labels/a~2", "/metadata/finalizers/0",
            "/metadata/finalizers/-", "/status", "/nope/deeper", "spec", "/~", "/~0~1",
        ])
        .prop_map(str::to_string),
        1 => hostile_text(6).prop_map(|s| format!("/{s}")),
    ]
}

fn json_patch_op() -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(vec![
            "add", "remove", "replace", "move", "copy", "test", "bogus",
        ]),
        pointer(),
        pointer(),
        value(),
        0u8..8,
    )
        .prop_map(|(op, path, from, value, drop)| {
            let mut o = json!({"op": op, "path": path, "from": from, "value": value});
            // Leave a member out now and then (a missing `value`, `from` or `path`).
            match drop {
                0 => {
                    o.as_object_mut().unwrap().remove("value");
                }
                1 => {
                    o.as_object_mut().unwrap().remove("from");
                }
                2 => {
                    o.as_object_mut().unwrap().remove("path");
                }
                3 => o["path"] = json!(7),
                _ => {}
            }
            o
        })
}

const JSON_PATCH_REGRESSIONS: &[&str] = &[
    r#"[{"op":"move","from":"","path":"/a/b"}]"#,
    r#"[{"op":"remove","path":"/metadata/finalizers/-"}]"#,
    r#"[{"op":"add","path":"/spec/template/spec/containers/99999999999999999999","value":1}]"#,
    r#"[{"op":"copy","from":"/spec","path":"/spec/x"}]"#,
    r#"[{"op":"move","from":"/spec","path":"/spec/template"}]"#,
    r#"[{"op":"remove","path":""}]"#,
    r#"[{"op":"replace","path":"","value":[]}]"#,
    r#"{"op":"add"}"#,
];

fn json_patch_is_all_or_nothing(patch: &Value) -> Result<(), TestCaseError> {
    let live = live_object();
    let before = live.clone();
    let result = json_patch(&live, patch);
    ensure(live == before, || "json_patch modified its input".into())?;
    if let Err(e) = &result {
        ensure(matches!(e.status_code(), 400 | 413 | 422), || {
            format!("{patch}: unexpected status {} for {e}", e.status_code())
        })?;
    }
    Ok(())
}

#[test]
fn json_patch_regressions_fail_cleanly() {
    let inputs: Vec<Value> = JSON_PATCH_REGRESSIONS
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    regressions("json-patch", LIMIT, inputs, |patch| {
        json_patch_is_all_or_nothing(patch).unwrap()
    });
}

#[test]
fn json_patches_on_a_valid_object_never_panic_and_are_all_or_nothing() {
    let patch = || {
        prop_oneof![
            4 => proptest::collection::vec(json_patch_op(), 0..6).prop_map(Value::Array),
            1 => value(),
        ]
    };
    property_of("json-patch", 1000, LIMIT, patch, |patch| {
        json_patch_is_all_or_nothing(&patch)
    });
}

#[test]
fn merge_patches_never_panic_and_are_idempotent() {
    property_of(
        "merge-patch",
        1500,
        LIMIT,
        || (value(), value()),
        |(doc, patch)| {
            for doc in [&live_object(), &doc] {
                let once = merge_patch(doc, &patch);
                let twice = merge_patch(&once, &patch);
                ensure(once == twice, || {
                    format!("{patch} applied twice to {doc} gives {twice}, once {once}")
                })?;
                if patch.is_object() {
                    ensure(once.is_object(), || format!("{patch} on {doc} gave {once}"))?;
                }
            }
            Ok(())
        },
    );
}

const STRATEGIC_REGRESSIONS: &[&str] = &[
    r#"{"spec":{"template":{"spec":{"containers":[{"$patch":"delete"}]}}}}"#,
    r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","$patch":"bogus"}]}}}}"#,
    r#"{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":1},null,[]]}}}}"#,
    r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":[{"a":1}],"finalizers":null}}"#,
    r#"{"spec":{"$retainKeys":["replicas", 1, null],"replicas":null}}"#,
    r#"{"$patch":"replace"}"#,
    r#"{"$patch":"delete"}"#,
    r#"{"spec":{"template":{"spec":{"containers":{"$patch":"replace"}}}}}"#,
];

fn strategic_patch_yields_an_object(patch: &Value) -> Result<(), TestCaseError> {
    let live = live_object();
    for definition in DEFINITIONS {
        if let Ok(out) = strategic_merge_patch(&live, patch, *definition) {
            ensure(out.is_object(), || {
                format!("{patch} with {definition:?} gave a non-object {out}")
            })?;
        }
    }
    Ok(())
}

#[test]
fn strategic_merge_patch_regressions_fail_cleanly() {
    let inputs: Vec<Value> = STRATEGIC_REGRESSIONS
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    regressions("strategic", LIMIT, inputs, |patch| {
        strategic_patch_yields_an_object(patch).unwrap()
    });
}

/// A patch shaped like the live object's path to its lists, with arbitrary contents at the
/// leaves, so the directives land where lists have merge keys.
fn shaped_patch() -> impl Strategy<Value = Value> {
    (value(), value(), value(), value()).prop_map(|(containers, meta, spec, top)| {
        let mut patch = json!({
            "metadata": meta,
            "spec": {"template": {"spec": {"containers": containers}}},
        });
        if let (Some(spec_obj), Value::Object(extra)) = (patch["spec"].as_object_mut(), spec) {
            for (k, v) in extra {
                spec_obj.entry(k).or_insert(v);
            }
        }
        if let (Some(obj), Value::Object(extra)) = (patch.as_object_mut(), top) {
            for (k, v) in extra {
                obj.entry(k).or_insert(v);
            }
        }
        patch
    })
}

#[test]
fn strategic_merge_patches_never_panic_and_yield_objects() {
    let patch = || prop_oneof![shaped_patch(), value()];
    property_of("strategic-merge-patch", 800, LIMIT, patch, |patch| {
        strategic_patch_yields_an_object(&patch)
    });
}

#[test]
fn server_side_apply_and_update_tracking_never_panic() {
    let input = || {
        (
            prop_oneof![shaped_patch(), value()],
            any::<bool>(),
            0..DEFINITIONS.len(),
        )
    };
    property_of(
        "server-side-apply",
        500,
        LIMIT,
        input,
        |(applied, force, d)| {
            let definition = DEFINITIONS[d];
            let live = live_object();
            let now = "2024-01-01T00:00:00Z";
            for base in [None, Some(&live)] {
                match server_side_apply(base, &applied, "fuzz", force, definition, now) {
                    Ok(out) => {
                        ensure(out.is_object(), || format!("apply of {applied} gave {out}"))?;
                        // A second manager applying the original object over it, and the first
                        // manager taking everything back with force.
                        let _ =
                            server_side_apply(Some(&out), &live, "other", false, definition, now);
                        let _ = server_side_apply(
                            Some(&out),
                            &json!({}),
                            "fuzz",
                            true,
                            definition,
                            now,
                        );
                    }
                    Err(e) => {
                        ensure(matches!(e.status_code(), 400 | 409 | 422 | 500), || {
                            format!("apply of {applied}: unexpected status {}", e.status_code())
                        })?;
                    }
                }
            }
            let mut updated = merge_patch(&live, &applied);
            track_update(
                Some(&live),
                &mut updated,
                "fuzz-update",
                "apps/v1",
                definition,
                now,
            );
            let mut created = applied.clone();
            track_update(None, &mut created, "fuzz-create", "", definition, now);
            Ok(())
        },
    );
}
