//! The one place where failures become Kubernetes `Status` responses (reason, code, causes), as
//! upstream's `k8s.io/apimachinery/pkg/api/errors` constructs them.

use serde_json::{Value, json};
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;

/// An API failure, carrying everything the `Status` body needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    /// Upstream `StatusReason` (`NotFound`, `AlreadyExists`, `Invalid`, …).
    pub reason: &'static str,
    pub message: String,
    /// `details` (name, group, kind, causes, retryAfterSeconds), when there are any.
    pub details: Option<Value>,
}

/// The `StatusReason` to report for a reason given by someone else (a webhook's Status): one of
/// upstream's reasons as given, else the one its code implies.
pub fn reason_for(given: Option<&str>, code: u16) -> &'static str {
    const KNOWN: [&str; 19] = [
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    if let Some(known) = given.and_then(|g| KNOWN.iter().find(|k| **k == g)) {
        return known;
    }
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

pub type ApiResult<T> = Result<T, ApiError>;

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": rt.plural});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest: malformed body, bad parameters.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 503 ServiceUnavailable: a proxy target with nothing behind it.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 404 NotFound for an object: `pods "web" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", rt.group_resource()),
            )
        }
    }

    /// 404 for a path that names no resource.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 AlreadyExists: `pods "web" already exists`.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", rt.group_resource()),
            )
        }
    }

    /// 409 Conflict on a stale resourceVersion, with upstream's wording.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::conflict_msg(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a specific explanation.
    pub fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    rt.group_resource()
                ),
            )
        }
    }

    /// 422 Invalid with one cause per field error: `Pod "web" is invalid: spec.containers: Required value`.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        let message = if list.len() == 1 {
            format!("{} \"{name}\" is invalid: {}", rt.kind, list[0])
        } else {
            format!("{} \"{name}\" is invalid: [{}]", rt.kind, list.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.kind.reason(), "message": e.cause_message(), "field": e.field}))
            .collect();
        let mut d = json!({"name": name, "kind": rt.kind, "causes": causes});
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        ApiError {
            details: Some(d),
            ..Self::new(422, "Invalid", message)
        }
    }

    /// 403 Forbidden with a message.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 403 Forbidden for an object: `pods "web" is forbidden: REASON` (upstream
    /// `errors.NewForbidden`).
    pub fn forbidden_object(rt: &ResourceType, name: &str, reason: &str) -> Self {
        let resource = if rt.group.is_empty() {
            rt.plural.clone()
        } else {
            format!("{}.{}", rt.plural, rt.group)
        };
        ApiError {
            details: Some(details(rt, name)),
            ..Self::new(
                403,
                "Forbidden",
                format!("{resource} \"{name}\" is forbidden: {reason}"),
            )
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 410 Gone (Expired): a resourceVersion or continue token that is too old.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/strategic-merge-patch+json, application/json-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 500 InternalError; the cause is logged, not sent.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        // Upstream omits an unknown (empty) reason.
        if self.reason.is_empty()
            && let Some(map) = s.as_object_mut()
        {
            map.remove("reason");
        }
        s
    }

    /// The `Status` as upstream's JSON serializer writes it: Go's struct field order (`kind`,
    /// `apiVersion`, `metadata`, `status`, `message`, `reason`, `details`, `code`; inside
    /// `details`: `name`, `group`, `kind`, `uid`, `causes`, `retryAfterSeconds`) and a
    /// trailing newline. Clients compare this text (the Python client's tests compare a 409).
    pub fn status_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"#,
        );
        push_json(&mut out, &json!(self.message));
        out.extend_from_slice(br#","reason":"#);
        push_json(&mut out, &json!(self.reason));
        if let Some(Value::Object(d)) = &self.details {
            out.extend_from_slice(br#","details":"#);
            push_ordered(&mut out, d, DETAILS_ORDER);
        }
        out.extend_from_slice(br#","code":"#);
        out.extend_from_slice(self.code.to_string().as_bytes());
        out.extend_from_slice(b"}\n");
        out
    }
}

const DETAILS_ORDER: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];
const CAUSE_ORDER: &[&str] = &["reason", "message", "field"];

fn push_json(out: &mut Vec<u8>, v: &Value) {
    // Serializing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Writes an object with the keys of `order` first, in that order, then any others.
fn push_ordered(out: &mut Vec<u8>, map: &serde_json::Map<String, Value>, order: &[&str]) {
    out.push(b'{');
    let mut first = true;
    let keys = order
        .iter()
        .copied()
        .filter(|k| map.contains_key(*k))
        .chain(
            map.keys()
                .map(String::as_str)
                .filter(|k| !order.contains(k)),
        );
    for key in keys {
        let Some(value) = map.get(key) else { continue };
        if !first {
            out.push(b',');
        }
        first = false;
        push_json(out, &json!(key));
        out.push(b':');
        match (key, value) {
            ("causes", Value::Array(causes)) => {
                out.push(b'[');
                for (i, c) in causes.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    match c {
                        Value::Object(c) => push_ordered(out, c, CAUSE_ORDER),
                        other => push_json(out, other),
                    }
                }
                out.push(b']');
            }
            _ => push_json(out, value),
        }
    }
    out.push(b'}');
}

impl From<tandem_store::StoreError> for ApiError {
    fn from(e: tandem_store::StoreError) -> Self {
        use tandem_store::StoreError;
        match e {
            StoreError::Compacted { requested, .. } => {
                ApiError::gone(format!("too old resource version: {requested}"))
            }
            StoreError::FutureRevision { requested, current } => ApiError::timeout(format!(
                "Too large resource version: {requested}, current: {current}"
            )),
            other => {
                tracing::error!(error = %other, source = ?std::error::Error::source(&other), "store failure");
                // The whole chain of causes: what the client must learn is at its end ("no
                // space left on device", "read-only file system").
                let mut message = format!("storage error: {other}");
                let mut cause = std::error::Error::source(&other);
                while let Some(c) = cause.take() {
                    message.push_str(": ");
                    message.push_str(&c.to_string());
                    cause = c.source();
                }
                ApiError::internal(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_written_in_upstreams_field_order() {
        let registry = tandem_core::registry::Registry::builtin();
        let cm = registry.by_kind("v1", "ConfigMap").expect("configmaps");
        let body = ApiError::already_exists(&cm, "x").status_json();
        assert_eq!(
            String::from_utf8(body).expect("utf-8"),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"x\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"x\",\"kind\":\"configmaps\"},\"code\":409}\n"
        );
        let invalid =
            ApiError::invalid(&cm, "x", &[FieldError::required("data", "")]).status_json();
        let text = String::from_utf8(invalid).expect("utf-8");
        assert!(
            text.contains("\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":\"Required value\",\"field\":\"data\"}]"),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(
            parsed,
            ApiError::invalid(&cm, "x", &[FieldError::required("data", "")]).status()
        );
    }
}
