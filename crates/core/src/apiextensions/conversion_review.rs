//! The `apiextensions.k8s.io` ConversionReview a CRD's conversion webhook is sent, and the
//! checks on its answer. Pure functions; the API server does the HTTP call.
//!
//! Mirrors upstream's `apiextensions-apiserver/pkg/apiserver/conversion/webhook_converter.go`:
//! which objects are sent (`getObjectsToConvert`: those not at the desired version yet), the
//! review in the first version of `conversionReviewVersions` tandem speaks
//! (`createConversionReviewObjects`), the answer's kind, uid and result
//! (`getConvertedObjectsFromResponse`), and each converted object against its original: the
//! desired group-version, the same kind, name, namespace and uid (`validateConvertedObject`),
//! and the original's metadata restored but for labels and annotations (`restoreObjectMeta`).
//! Every error is worded as upstream's converter words it.

use serde_json::{Map, Value, json};

use crate::field::Path;
use crate::validation::meta::{validate_annotations, validate_labels};

/// The ConversionReview versions tandem speaks (upstream accepts the same two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    /// The versions as `conversionReviewVersions` names them, in the order upstream's
    /// validation message lists them.
    pub const NAMES: [&'static str; 2] = ["v1", "v1beta1"];

    /// The first of a CRD's `conversionReviewVersions` tandem speaks, in the CRD's order (as
    /// upstream picks it).
    pub fn choose(accepted: &[String]) -> Option<ReviewVersion> {
        accepted.iter().find_map(|v| ReviewVersion::parse(v))
    }

    /// The version named `v` (`v1`, `v1beta1`).
    pub fn parse(v: &str) -> Option<ReviewVersion> {
        match v {
            "v1" => Some(ReviewVersion::V1),
            "v1beta1" => Some(ReviewVersion::V1beta1),
            _ => None,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "apiextensions.k8s.io/v1",
            ReviewVersion::V1beta1 => "apiextensions.k8s.io/v1beta1",
        }
    }
}

/// Why a conversion failed; the texts are upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The call or its answer failed (`detail` says how).
    #[error("conversion webhook for {gvk} failed: {detail}")]
    Failed { gvk: String, detail: String },
    #[error("conversion webhook for {gvk} returned {got} objects, expected {expected}")]
    Count {
        gvk: String,
        got: usize,
        expected: usize,
    },
    /// An object of a list came back wrong (`index` as upstream counts it).
    #[error(
        "conversion webhook for {gvk} returned invalid converted object at index {index}: {detail}"
    )]
    InvalidItem {
        gvk: String,
        index: usize,
        detail: String,
    },
    /// The metadata of an object of a list came back wrong.
    #[error(
        "conversion webhook for {gvk} returned invalid metadata in object at index {index}: {detail}"
    )]
    InvalidItemMetadata {
        gvk: String,
        index: usize,
        detail: String,
    },
    /// The one object sent came back with another group-version or kind.
    #[error("conversion webhook for {gvk} returned invalid object at index 0: {detail}")]
    InvalidFirst { gvk: String, detail: String },
    /// The one object sent came back with another name, namespace or uid.
    #[error("conversion webhook for {gvk} returned invalid object: {detail}")]
    InvalidObject { gvk: String, detail: String },
    #[error("conversion webhook for {gvk} returned invalid metadata: {detail}")]
    InvalidMetadata { gvk: String, detail: String },
    /// The CRD names no ConversionReview version tandem speaks (only a CRD stored before
    /// validation required one can).
    #[error("no supported conversion review versions")]
    NoReviewVersion,
}

/// `group/version, Kind=Kind`, as Go prints a `GroupVersionKind`.
pub fn gvk(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// The GroupVersionKind of `o`, printed as [`gvk`] prints it.
pub fn gvk_of(o: &Value) -> String {
    gvk(str_at(o, "apiVersion"), str_at(o, "kind"))
}

fn str_at<'a>(o: &'a Value, key: &str) -> &'a str {
    o.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn meta_str<'a>(o: &'a Value, key: &str) -> &'a str {
    o.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The positions of the objects not at `desired` yet: the ones a review carries.
pub fn to_convert(objects: &[Value], desired: &str) -> Vec<usize> {
    objects
        .iter()
        .enumerate()
        .filter(|(_, o)| str_at(o, "apiVersion") != desired)
        .map(|(i, _)| i)
        .collect()
}

/// The ConversionReview asking for `objects` at `desired` (upstream
/// `createConversionReviewObjects`).
pub fn review(version: ReviewVersion, uid: &str, desired: &str, objects: &[&Value]) -> Value {
    json!({
        "apiVersion": version.api_version(),
        "kind": "ConversionReview",
        "request": {
            "uid": uid,
            "desiredAPIVersion": desired,
            "objects": objects,
        },
    })
}

/// Reads a webhook's answer (upstream `getConvertedObjectsFromResponse`): its kind and uid
/// (checked for `v1` reviews only, as upstream skips them for `v1beta1`) and a `Success`
/// result. `Err` is the detail of upstream's `conversion webhook for … failed: …`.
pub fn parse_response(
    version: ReviewVersion,
    uid: &str,
    body: &[u8],
) -> Result<Vec<Value>, String> {
    if body.is_empty() {
        return Err(
            "0-length response with status code: 200 and content type: application/json"
                .to_string(),
        );
    }
    let answer: Value = serde_json::from_slice(body)
        .map_err(|e| format!("couldn't get version/kind; json parse error: {e}"))?;
    if !answer.is_object() {
        return Err("couldn't get version/kind; json parse error: not an object".to_string());
    }
    if version == ReviewVersion::V1 {
        let (api_version, kind) = (str_at(&answer, "apiVersion"), str_at(&answer, "kind"));
        if api_version != version.api_version() || kind != "ConversionReview" {
            return Err(format!(
                "expected webhook response of {}, got {}",
                gvk(version.api_version(), "ConversionReview"),
                gvk(api_version, kind)
            ));
        }
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".to_string());
    };
    if version == ReviewVersion::V1 {
        let got = str_at(response, "uid");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let result = response.get("result").unwrap_or(&Value::Null);
    let status = str_at(result, "status");
    if status != "Success" {
        let message = str_at(result, "message");
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Checks the objects a webhook returned for `sent` (the objects the review carried, in
/// order) and gives them back with the originals' metadata restored. `list` says whether the
/// request converted a list (upstream words the errors of lists and single objects apart).
/// `gvk` names what was converted, as the errors show it.
pub fn check_converted(
    gvk: &str,
    list: bool,
    sent: &[&Value],
    converted: Vec<Value>,
    desired: &str,
) -> Result<Vec<Value>, ConversionError> {
    if converted.len() != sent.len() {
        return Err(ConversionError::Count {
            gvk: gvk.to_string(),
            got: converted.len(),
            expected: sent.len(),
        });
    }
    let mut out = Vec::with_capacity(converted.len());
    for (i, (original, mut object)) in sent.iter().zip(converted).enumerate() {
        // Upstream counts the object before these checks: the first is "index 1".
        let index = i + 1;
        // Go prints a GroupVersion of a named group as `group/version`: the apiVersion.
        let got_gv = str_at(&object, "apiVersion");
        let item_error = |detail: String| {
            if list {
                ConversionError::InvalidItem {
                    gvk: gvk.to_string(),
                    index,
                    detail,
                }
            } else {
                ConversionError::InvalidFirst {
                    gvk: gvk.to_string(),
                    detail,
                }
            }
        };
        if !object.is_object() {
            return Err(if list {
                ConversionError::InvalidItem {
                    gvk: gvk.to_string(),
                    index: i,
                    detail: "Object 'Kind' is missing in the converted object".to_string(),
                }
            } else {
                ConversionError::Failed {
                    gvk: gvk.to_string(),
                    detail: "Object 'Kind' is missing in the converted object".to_string(),
                }
            });
        }
        if got_gv != desired {
            return Err(item_error(format!(
                "invalid groupVersion (expected {desired}, received {got_gv})"
            )));
        }
        let (want_kind, got_kind) = (str_at(original, "kind"), str_at(&object, "kind"));
        if want_kind != got_kind {
            return Err(item_error(format!(
                "invalid kind (expected {want_kind}, received {got_kind})"
            )));
        }
        if let Err(detail) = same_identity(original, &object) {
            return Err(if list {
                ConversionError::InvalidItem {
                    gvk: gvk.to_string(),
                    index,
                    detail,
                }
            } else {
                ConversionError::InvalidObject {
                    gvk: gvk.to_string(),
                    detail,
                }
            });
        }
        if let Err(detail) = restore_metadata(original, &mut object) {
            return Err(if list {
                ConversionError::InvalidItemMetadata {
                    gvk: gvk.to_string(),
                    index,
                    detail,
                }
            } else {
                ConversionError::InvalidMetadata {
                    gvk: gvk.to_string(),
                    detail,
                }
            });
        }
        out.push(object);
    }
    Ok(out)
}

/// Upstream `validateConvertedObject`: the same kind, name, namespace and uid.
fn same_identity(original: &Value, converted: &Value) -> Result<(), String> {
    let (a, b) = (str_at(original, "kind"), str_at(converted, "kind"));
    if a != b {
        return Err(format!("must have the same kind: {a} != {b}"));
    }
    for (key, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let (a, b) = (meta_str(original, key), meta_str(converted, key));
        if a != b {
            return Err(format!("must have the same {what}: {a} != {b}"));
        }
    }
    Ok(())
}

/// Upstream `restoreObjectMeta`: the converted object gets the original's metadata, but for
/// the labels and annotations the webhook returned (checked as labels and annotations are).
fn restore_metadata(original: &Value, converted: &mut Value) -> Result<(), String> {
    let returned = match converted.get("metadata") {
        None => return Err("missing metadata in converted object".to_string()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ));
        }
    };
    let mut restored = match original.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for field in ["labels", "annotations"] {
        let response = match returned.get(field) {
            None | Some(Value::Null) => {
                restored.remove(field);
                continue;
            }
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ));
            }
        };
        let original_field = restored.get(field).and_then(Value::as_object);
        let mut changed = original_field.map_or(0, Map::len) != response.len();
        for (k, v) in response {
            if !v.is_string() {
                return Err(format!(
                    "metadata.{field}[{k}] must be a string, but is {} in converted object",
                    go_type(v)
                ));
            }
            if original_field.and_then(|o| o.get(k)) != Some(v) {
                changed = true;
            }
        }
        if changed {
            let errs = if field == "labels" {
                validate_labels(Some(response), &Path::new("metadata").child("labels"))
            } else {
                validate_annotations(Some(response), &Path::new("metadata").child("annotation"))
            };
            if !errs.is_empty() {
                let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
                return Err(if msgs.len() == 1 {
                    msgs.join("")
                } else {
                    format!("[{}]", msgs.join(", "))
                });
            }
        }
        restored.insert(field.to_string(), Value::Object(response.clone()));
    }
    if let Some(map) = converted.as_object_mut() {
        map.insert("metadata".to_string(), Value::Object(restored));
    }
    Ok(())
}

/// The Go type an unstructured JSON value decodes to, as upstream's `%T` prints it.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(version: &str, name: &str) -> Value {
        json!({
            "apiVersion": format!("tandem.test/{version}"), "kind": "Endpoint",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                "resourceVersion": "7", "labels": {"app": "a"}, "generation": 1},
            "spec": {"hostPort": "h:1"},
        })
    }

    fn answer(uid: &str, objects: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": uid, "result": {"status": "Success"}, "convertedObjects": objects},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn the_review_carries_only_objects_not_at_the_desired_version() {
        let objects = vec![object("v1", "a"), object("v2", "b"), object("v1", "c")];
        let idx = to_convert(&objects, "tandem.test/v2");
        assert_eq!(idx, [0, 2]);
        let sent: Vec<&Value> = idx.iter().map(|i| &objects[*i]).collect();
        let r = review(ReviewVersion::V1, "u-1", "tandem.test/v2", &sent);
        assert_eq!(r["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(r["kind"], "ConversionReview");
        assert_eq!(r["request"]["uid"], "u-1");
        assert_eq!(r["request"]["desiredAPIVersion"], "tandem.test/v2");
        assert_eq!(r["request"]["objects"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["request"]["objects"][1]["metadata"]["name"], "c");
    }

    #[test]
    fn the_first_review_version_tandem_speaks_is_chosen() {
        let v = |l: &[&str]| {
            ReviewVersion::choose(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(v(&["v9", "v1beta1", "v1"]), Some(ReviewVersion::V1beta1));
        assert_eq!(v(&["v1"]), Some(ReviewVersion::V1));
        assert_eq!(v(&["v2"]), None);
    }

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let ok = parse_response(ReviewVersion::V1, "u", &answer("u", json!([{"a": 1}])));
        assert_eq!(ok, Ok(vec![json!({"a": 1})]));
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", &answer("other", json!([]))),
            Err("expected response.uid=\"u\", got \"other\"".to_string())
        );
        // v1beta1 answers are not held to the uid.
        assert!(parse_response(ReviewVersion::V1beta1, "u", &answer("other", json!([]))).is_ok());
        let wrong_kind =
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {}}"#;
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", wrong_kind),
            Err("expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got admission.k8s.io/v1, Kind=AdmissionReview".to_string())
        );
        let failed = br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {"uid": "u", "result": {"status": "Failure", "message": "cannot split hostPort"}}}"#;
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", failed),
            Err("cannot split hostPort".to_string())
        );
        let bare = br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {"uid": "u", "result": {}}}"#;
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", bare),
            Err("response.result.status was '', not 'Success'".to_string())
        );
        let none = br#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}"#;
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", none),
            Err("no response provided".to_string())
        );
        assert!(parse_response(ReviewVersion::V1, "u", b"").is_err());
        assert!(parse_response(ReviewVersion::V1, "u", b"not json").is_err());
        assert!(parse_response(ReviewVersion::V1, "u", b"[1]").is_err());
    }

    #[test]
    fn converted_objects_keep_the_originals_metadata_but_labels_and_annotations() {
        let original = object("v1", "a");
        let mut converted = object("v2", "a");
        converted["metadata"]["resourceVersion"] = json!("999");
        converted["metadata"]["generation"] = json!(5);
        converted["metadata"]["labels"] = json!({"app": "b"});
        converted["metadata"]["annotations"] = json!({"converted": "yes"});
        let out = check_converted(
            "tandem.test/v1, Kind=Endpoint",
            false,
            &[&original],
            vec![converted],
            "tandem.test/v2",
        )
        .expect("valid");
        assert_eq!(out[0]["apiVersion"], "tandem.test/v2");
        assert_eq!(out[0]["metadata"]["resourceVersion"], "7");
        assert_eq!(out[0]["metadata"]["generation"], 1);
        assert_eq!(out[0]["metadata"]["labels"], json!({"app": "b"}));
        assert_eq!(
            out[0]["metadata"]["annotations"],
            json!({"converted": "yes"})
        );
        // Labels left out of the answer are dropped, as upstream drops them.
        let mut bare = object("v2", "a");
        bare["metadata"] = json!({"name": "a", "namespace": "default", "uid": "uid-a"});
        let out =
            check_converted("g", false, &[&original], vec![bare], "tandem.test/v2").expect("valid");
        assert!(out[0]["metadata"].get("labels").is_none());
        assert_eq!(out[0]["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn wrong_answers_get_upstreams_messages() {
        let gvk = "tandem.test/v1, Kind=Endpoint";
        let (a, b) = (object("v1", "a"), object("v1", "b"));
        let check = |list: bool, sent: &[&Value], got: Vec<Value>| {
            check_converted(gvk, list, sent, got, "tandem.test/v2")
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            check(true, &[&a, &b], vec![object("v2", "a")]),
            Err(format!(
                "conversion webhook for {gvk} returned 1 objects, expected 2"
            ))
        );
        assert_eq!(
            check(false, &[&a], vec![object("v3", "a")]),
            Err(format!(
                "conversion webhook for {gvk} returned invalid object at index 0: invalid groupVersion (expected tandem.test/v2, received tandem.test/v3)"
            ))
        );
        assert_eq!(
            check(true, &[&a, &b], vec![object("v2", "a"), object("v1", "b")]),
            Err(format!(
                "conversion webhook for {gvk} returned invalid converted object at index 2: invalid groupVersion (expected tandem.test/v2, received tandem.test/v1)"
            ))
        );
        let mut other_kind = object("v2", "a");
        other_kind["kind"] = json!("Other");
        assert_eq!(
            check(false, &[&a], vec![other_kind]),
            Err(format!(
                "conversion webhook for {gvk} returned invalid object at index 0: invalid kind (expected Endpoint, received Other)"
            ))
        );
        assert_eq!(
            check(false, &[&a], vec![object("v2", "z")]),
            Err(format!(
                "conversion webhook for {gvk} returned invalid object: must have the same name: a != z"
            ))
        );
        let mut bad_label = object("v2", "a");
        bad_label["metadata"]["labels"] = json!({"app": 3});
        assert_eq!(
            check(false, &[&a], vec![bad_label]),
            Err(format!(
                "conversion webhook for {gvk} returned invalid metadata: metadata.labels[app] must be a string, but is int64 in converted object"
            ))
        );
        let mut no_meta = object("v2", "a");
        no_meta.as_object_mut().map(|m| m.remove("metadata"));
        assert!(check(true, &[&a], vec![no_meta]).is_err());
        assert!(check(true, &[&a], vec![json!("x")]).is_err());
    }

    #[test]
    fn gvks_print_as_go_prints_them() {
        assert_eq!(
            gvk("tandem.test/v1", "Endpoint"),
            "tandem.test/v1, Kind=Endpoint"
        );
        assert_eq!(gvk("v1", "Pod"), "/v1, Kind=Pod");
    }
}
