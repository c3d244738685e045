//! The `admission.k8s.io` AdmissionReview an admission webhook is sent, and what its answer
//! means: allowed or denied (with upstream's `admission webhook "NAME" denied the request: …`),
//! a JSONPatch for mutating webhooks, warnings and audit annotations. Pure functions; the API
//! server does the HTTP call.
//!
//! Mirrors upstream's `k8s.io/apiserver/pkg/admission/plugin/webhook/request`
//! (`CreateAdmissionObjects`, `VerifyAdmissionResponse`) and `.../webhook/errors`
//! (`ToStatusErr`).

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The AdmissionReview versions tandem speaks, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    /// The first version of a webhook's `admissionReviewVersions` tandem speaks (upstream sends
    /// the first one it knows, in the webhook's order).
    pub fn choose(accepted: &[String]) -> Option<ReviewVersion> {
        accepted.iter().find_map(|v| match v.as_str() {
            "v1" => Some(ReviewVersion::V1),
            "v1beta1" => Some(ReviewVersion::V1beta1),
            _ => None,
        })
    }

    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

/// A group, version and kind or resource, as the review spells them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupVersion {
    pub group: String,
    pub version: String,
    /// The kind (`Pod`) or the resource (`pods`).
    pub name: String,
}

/// What one admission request is about (upstream `admission.Attributes` plus the version the
/// webhook matched).
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub uid: String,
    /// The kind and resource at the version the webhook asked for (after `matchPolicy`).
    pub kind: GroupVersion,
    pub resource: GroupVersion,
    pub sub_resource: String,
    /// The kind and resource the client's request named.
    pub request_kind: GroupVersion,
    pub request_resource: GroupVersion,
    pub name: String,
    pub namespace: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// `{username, uid, groups, extra}`.
    pub user_info: Value,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
    /// The operation's options (`CreateOptions`, `UpdateOptions`, `DeleteOptions`,
    /// `PodExecOptions`, …), `null` when there are none.
    pub options: Value,
}

impl Request {
    /// The `request` field of an AdmissionReview (the same shape in v1 and v1beta1). CEL
    /// expressions of `matchConditions` and policies see this as `request`.
    pub fn to_json(&self) -> Value {
        let kind =
            |g: &GroupVersion| json!({"group": g.group, "version": g.version, "kind": g.name});
        let resource =
            |g: &GroupVersion| json!({"group": g.group, "version": g.version, "resource": g.name});
        let mut r = Map::new();
        r.insert("uid".into(), json!(self.uid));
        r.insert("kind".into(), kind(&self.kind));
        r.insert("resource".into(), resource(&self.resource));
        if !self.sub_resource.is_empty() {
            r.insert("subResource".into(), json!(self.sub_resource));
            r.insert("requestSubResource".into(), json!(self.sub_resource));
        }
        r.insert("requestKind".into(), kind(&self.request_kind));
        r.insert("requestResource".into(), resource(&self.request_resource));
        if !self.name.is_empty() {
            r.insert("name".into(), json!(self.name));
        }
        if !self.namespace.is_empty() {
            r.insert("namespace".into(), json!(self.namespace));
        }
        r.insert("operation".into(), json!(self.operation));
        r.insert("userInfo".into(), self.user_info.clone());
        r.insert("object".into(), self.object.clone().unwrap_or(Value::Null));
        r.insert(
            "oldObject".into(),
            self.old_object.clone().unwrap_or(Value::Null),
        );
        r.insert("dryRun".into(), json!(self.dry_run));
        r.insert("options".into(), self.options.clone());
        Value::Object(r)
    }

    /// The AdmissionReview sent to a webhook.
    pub fn review(&self, version: ReviewVersion) -> Value {
        json!({
            "apiVersion": version.api_version(),
            "kind": "AdmissionReview",
            "request": self.to_json(),
        })
    }
}

/// A webhook's answer, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    pub allowed: bool,
    /// The `status` of a denial (`code`, `message`, `reason`, `details`), if given.
    pub status: Option<Value>,
    /// The decoded JSONPatch of a mutating webhook.
    pub patch: Option<Vec<u8>>,
    pub warnings: Vec<String>,
    pub audit_annotations: Vec<(String, String)>,
}

/// Checks and reads a webhook's answer (upstream `VerifyAdmissionResponse`). Errors are the
/// detail of upstream's `failed calling webhook` message.
pub fn parse_response(
    version: ReviewVersion,
    uid: &str,
    mutating: bool,
    body: &[u8],
) -> Result<Response, String> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = review.get("kind").and_then(Value::as_str).unwrap_or("");
    let strict = version == ReviewVersion::V1;
    if strict && (api_version != version.api_version() || kind != "AdmissionReview") {
        let (group, ver) = api_version.split_once('/').unwrap_or(("", api_version));
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{ver}, Kind={kind}"
        ));
    }
    let Some(response) = review.get("response").and_then(Value::as_object) else {
        return Err("webhook response was absent".to_string());
    };
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if strict && got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let patch_type = response.get("patchType").and_then(Value::as_str);
    let patch = match response.get("patch") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(s.as_bytes())
                .map_err(|e| format!("received invalid webhook response: response.patch: {e}"))?,
        ),
        Some(_) => {
            return Err(
                "received invalid webhook response: response.patch must be a base64 string"
                    .to_string(),
            );
        }
    };
    if patch.is_some() {
        if !mutating {
            return Err("validating webhook may not return response.patch".to_string());
        }
        match patch_type {
            Some("JSONPatch") => {}
            None | Some("") if strict => {
                return Err(
                    "webhook returned response.patch but not response.patchType".to_string()
                );
            }
            None | Some("") => {}
            Some(other) => {
                return Err(format!(
                    "webhook returned invalid response.patchType of {other:?}"
                ));
            }
        }
    } else if strict && patch_type.is_some_and(|t| !t.is_empty()) {
        return Err("webhook returned response.patchType but not response.patch".to_string());
    }
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let audit_annotations = response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Response {
        allowed,
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        warnings,
        audit_annotations,
    })
}

/// The Status of a webhook's denial (upstream `webhookerrors.ToStatusErr`): the webhook's code
/// when it is an error code (else 403), its reason and details, and the message
/// `admission webhook "NAME" denied the request: MESSAGE` (or its reason, or "without
/// explanation").
pub fn denial_status(webhook: &str, status: Option<&Value>) -> Value {
    let empty = Map::new();
    let given = status.and_then(Value::as_object).unwrap_or(&empty);
    let code = given
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| (400..600).contains(c))
        .unwrap_or(403);
    let text = |k: &str| {
        given
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let denied = format!("admission webhook {webhook:?} denied the request");
    let message = match (text("message"), text("reason")) {
        (Some(m), _) => format!("{denied}: {m}"),
        (None, Some(r)) => format!("{denied}: {r}"),
        (None, None) => format!("{denied} without explanation"),
    };
    let mut out = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    });
    if let Some(reason) = text("reason") {
        out["reason"] = json!(reason);
    }
    if let Some(details) = given.get("details").filter(|d| d.is_object()) {
        out["details"] = details.clone();
    }
    out
}

/// Applies a mutating webhook's JSONPatch to `object`.
pub fn apply_patch(object: &Value, patch: &[u8]) -> Result<Value, String> {
    let ops: json_patch::Patch =
        serde_json::from_slice(patch).map_err(|e| format!("invalid JSON patch: {e}"))?;
    let mut out = object.clone();
    json_patch::patch(&mut out, &ops).map_err(|e| format!("JSON patch error: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn review_carries_the_request_and_user() {
        let req = Request {
            uid: "u1".into(),
            kind: GroupVersion {
                group: "".into(),
                version: "v1".into(),
                name: "Pod".into(),
            },
            resource: GroupVersion {
                group: "".into(),
                version: "v1".into(),
                name: "pods".into(),
            },
            request_kind: GroupVersion {
                group: "".into(),
                version: "v1".into(),
                name: "Pod".into(),
            },
            request_resource: GroupVersion {
                group: "".into(),
                version: "v1".into(),
                name: "pods".into(),
            },
            name: "p".into(),
            namespace: "ns".into(),
            operation: "CREATE".into(),
            user_info: json!({"username": "alice", "groups": ["dev"]}),
            object: Some(json!({"metadata": {"name": "p"}})),
            options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
            ..Default::default()
        };
        let r = req.review(ReviewVersion::V1);
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(r["request"]["uid"], "u1");
        assert_eq!(r["request"]["resource"]["resource"], "pods");
        assert_eq!(r["request"]["userInfo"]["username"], "alice");
        assert_eq!(r["request"]["oldObject"], Value::Null);
        assert_eq!(r["request"]["object"]["metadata"]["name"], "p");
        assert!(r["request"].get("subResource").is_none());
    }

    #[test]
    fn versions_follow_the_webhooks_order() {
        assert_eq!(
            ReviewVersion::choose(&["v1beta1".into(), "v1".into()]),
            Some(ReviewVersion::V1beta1)
        );
        assert_eq!(
            ReviewVersion::choose(&["v2".into(), "v1".into()]),
            Some(ReviewVersion::V1)
        );
        assert_eq!(ReviewVersion::choose(&["v2".into()]), None);
    }

    #[test]
    fn v1_answers_are_checked_as_upstream() {
        let ok = answer(
            json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"warnings":["careful"],"auditAnnotations":{"k":"v"}}}),
        );
        let r = parse_response(ReviewVersion::V1, "u", false, &ok).expect("valid");
        assert!(r.allowed);
        assert_eq!(r.warnings, vec!["careful".to_string()]);
        assert_eq!(
            r.audit_annotations,
            vec![("k".to_string(), "v".to_string())]
        );
        let wrong_uid = answer(
            json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true}}),
        );
        let e = parse_response(ReviewVersion::V1, "u", false, &wrong_uid).expect_err("uid");
        assert_eq!(e, "expected response.uid=\"u\", got \"x\"");
        let wrong_kind = answer(json!({"apiVersion":"v1","kind":"Status"}));
        let e = parse_response(ReviewVersion::V1, "u", false, &wrong_kind).expect_err("kind");
        assert!(
            e.starts_with("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview"),
            "{e}"
        );
        assert!(parse_response(ReviewVersion::V1, "u", false, b"not json").is_err());
    }

    #[test]
    fn patches_need_a_type_and_a_mutating_webhook() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let typed = answer(
            json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"patch":patch,"patchType":"JSONPatch"}}),
        );
        let r = parse_response(ReviewVersion::V1, "u", true, &typed).expect("valid");
        let patched = apply_patch(&json!({"metadata":{"name":"p"}}), &r.patch.expect("patch"))
            .expect("applies");
        assert_eq!(patched["metadata"]["labels"]["a"], "b");
        assert!(parse_response(ReviewVersion::V1, "u", false, &typed).is_err());
        let untyped = answer(
            json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"patch":patch}}),
        );
        assert_eq!(
            parse_response(ReviewVersion::V1, "u", true, &untyped).expect_err("no type"),
            "webhook returned response.patch but not response.patchType"
        );
        assert!(
            apply_patch(
                &json!({}),
                br#"[{"op":"replace","path":"/missing","value":1}]"#
            )
            .is_err()
        );
    }

    #[test]
    fn denials_read_as_upstream() {
        let s = denial_status(
            "deny.example.com",
            Some(&json!({"code": 403, "message": "no pods today"})),
        );
        assert_eq!(
            s["message"],
            "admission webhook \"deny.example.com\" denied the request: no pods today"
        );
        assert_eq!(s["code"], 403);
        let s = denial_status(
            "w.example.com",
            Some(&json!({"code": 200, "reason": "Forbidden"})),
        );
        assert_eq!(s["code"], 403, "a success code becomes 403");
        assert_eq!(
            s["message"],
            "admission webhook \"w.example.com\" denied the request: Forbidden"
        );
        let s = denial_status("w.example.com", None);
        assert_eq!(
            s["message"],
            "admission webhook \"w.example.com\" denied the request without explanation"
        );
        let s = denial_status(
            "w.example.com",
            Some(&json!({"code": 422, "message": "bad"})),
        );
        assert_eq!(s["code"], 422);
    }
}
