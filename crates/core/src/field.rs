//! Field errors: the `details.causes` of an `Invalid` (422) Status.
//!
//! Mirrors upstream `k8s.io/apimachinery/pkg/util/validation/field`: every error names a field path
//! (`spec.containers[0].image`), a kind (`Required`, `Invalid`, …) and a detail. The API edge turns a
//! list of these into one Status whose message reads like upstream's:
//! `Pod "web" is invalid: spec.containers[0].image: Required value`.

use std::fmt;

/// The kind of a field error; `reason()` is the `FieldValue…` reason string upstream puts in causes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid,
    NotSupported,
    Forbidden,
    Duplicate,
    TooLong,
    TooMany,
    NotFound,
}

impl ErrorKind {
    /// The `reason` upstream puts in `details.causes[].reason`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::TooMany => "FieldValueTooMany",
            ErrorKind::NotFound => "FieldValueNotFound",
        }
    }
}

/// One validation failure at one field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub kind: ErrorKind,
    /// Dotted path with list indices and map keys, e.g. `spec.containers[0].ports[1].containerPort`.
    pub field: String,
    /// The offending value rendered as upstream does (quoted strings), if there is one.
    pub value: Option<String>,
    /// Extra explanation, e.g. `cannot be set for a windows pod`.
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: ErrorKind,
        field: impl Into<String>,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Required, field, None, detail)
    }
    pub fn invalid(
        field: impl Into<String>,
        value: &serde_json::Value,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::Invalid, field, Some(render_value(value)), detail)
    }
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, field, None, detail)
    }
    pub fn not_supported(
        field: impl Into<String>,
        value: &serde_json::Value,
        supported: &[&str],
    ) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        Self::new(
            ErrorKind::NotSupported,
            field,
            Some(render_value(value)),
            format!("supported values: {}", list.join(", ")),
        )
    }
    pub fn duplicate(field: impl Into<String>, value: &serde_json::Value) -> Self {
        Self::new(ErrorKind::Duplicate, field, Some(render_value(value)), "")
    }
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self::new(
            ErrorKind::TooLong,
            field,
            None,
            format!("must have at most {max} bytes"),
        )
    }

    /// The message of the cause (`details.causes[].message`): what follows the field path.
    pub fn cause_message(&self) -> String {
        let head = match self.kind {
            ErrorKind::Required => "Required value".to_string(),
            ErrorKind::Forbidden => "Forbidden".to_string(),
            ErrorKind::TooLong => "Too long".to_string(),
            ErrorKind::TooMany => "Too many".to_string(),
            ErrorKind::Invalid => match &self.value {
                Some(v) => format!("Invalid value: {v}"),
                None => "Invalid value".to_string(),
            },
            ErrorKind::NotSupported => match &self.value {
                Some(v) => format!("Unsupported value: {v}"),
                None => "Unsupported value".to_string(),
            },
            ErrorKind::Duplicate => match &self.value {
                Some(v) => format!("Duplicate value: {v}"),
                None => "Duplicate value".to_string(),
            },
            ErrorKind::NotFound => match &self.value {
                Some(v) => format!("Not found: {v}"),
                None => "Not found".to_string(),
            },
        };
        if self.detail.is_empty() {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.cause_message())
    }
}

/// Renders a value the way upstream's `field.Invalid` prints it: strings quoted, numbers bare.
pub fn render_value(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => format!("\"{s}\""),
        serde_json::Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// Go's `%q` for the strings that reach error messages (upstream quotes values this way in
/// selector and admission errors).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A field path builder: `Path::new("spec").child("containers").index(0).child("image")`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }
    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{i}]", self.0))
    }
    pub fn key(&self, k: &str) -> Self {
        Path(format!("{}[{k}]", self.0))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Path> for String {
    fn from(p: Path) -> String {
        p.0
    }
}
impl From<&Path> for String {
    fn from(p: &Path) -> String {
        p.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cause_messages_read_like_upstream() {
        let e = FieldError::required(
            Path::new("spec")
                .child("containers")
                .index(0)
                .child("image"),
            "",
        );
        assert_eq!(e.to_string(), "spec.containers[0].image: Required value");
        let e = FieldError::not_supported(
            "spec.os.name",
            &serde_json::json!("macos"),
            &["linux", "windows"],
        );
        assert_eq!(
            e.to_string(),
            "spec.os.name: Unsupported value: \"macos\": supported values: \"linux\", \"windows\""
        );
        let e = FieldError::forbidden("spec.hostPID", "cannot be set for a windows pod");
        assert_eq!(
            e.to_string(),
            "spec.hostPID: Forbidden: cannot be set for a windows pod"
        );
    }
}
