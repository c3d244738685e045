//! CertificateSigningRequest validation, as upstream's `pkg/apis/certificates/validation`:
//! `spec.request` is a PEM `CERTIFICATE REQUEST` block, `spec.signerName` a qualified
//! `domain/path` name, `spec.usages` known and unique, `spec.expirationSeconds` at least ten
//! minutes, and status conditions of known types, each at most once. Whether the request's
//! signature and subject suit its signer is the signer's check (the CSR controllers), as
//! upstream.

use serde_json::{Value, json};

use crate::field::{FieldError, Path};

/// Upstream's `KeyUsage` values.
pub const KEY_USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

const CONDITION_TYPES: &[&str] = &["Approved", "Denied", "Failed"];

/// Validates a new CertificateSigningRequest.
pub fn validate_csr(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec_path = Path::new("spec");
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let request_path = spec_path.child("request");
    match spec.get("request").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(&request_path, "")),
        Some(b64) => {
            let decoded: Option<k8s_openapi::ByteString> = serde_json::from_value(json!(b64)).ok();
            let text = decoded.and_then(|b| String::from_utf8(b.0).ok());
            let ok = text.as_deref().is_some_and(|t| {
                t.contains("-----BEGIN CERTIFICATE REQUEST-----")
                    && t.contains("-----END CERTIFICATE REQUEST-----")
            });
            if !ok {
                errs.push(FieldError::invalid(
                    &request_path,
                    &json!("<request>"),
                    "PEM block type must be CERTIFICATE REQUEST",
                ));
            }
        }
    }
    let signer_path = spec_path.child("signerName");
    match spec.get("signerName").and_then(Value::as_str) {
        None | Some("") => errs.push(FieldError::required(&signer_path, "")),
        Some(name) => {
            if let Some(msg) = signer_name_problem(name) {
                errs.push(FieldError::invalid(&signer_path, &json!(name), msg));
            }
        }
    }
    let usages_path = spec_path.child("usages");
    let mut seen: Vec<&str> = Vec::new();
    for (i, u) in spec
        .get("usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = usages_path.index(i);
        let Some(u) = u.as_str() else {
            errs.push(FieldError::invalid(&p, u, "must be a string"));
            continue;
        };
        if !KEY_USAGES.contains(&u) {
            errs.push(FieldError::not_supported(&p, &json!(u), KEY_USAGES));
        } else if seen.contains(&u) {
            errs.push(FieldError::duplicate(&p, &json!(u)));
        }
        seen.push(u);
    }
    if let Some(secs) = spec.get("expirationSeconds").filter(|v| !v.is_null())
        && secs.as_i64().is_none_or(|s| s < 600)
    {
        errs.push(FieldError::invalid(
            spec_path.child("expirationSeconds"),
            secs,
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errs.extend(validate_conditions(obj));
    errs
}

/// Validates the status conditions (status and approval updates).
pub fn validate_conditions(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = Path::new("status").child("conditions");
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let p = path.index(i);
        let kind = c.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind.is_empty() {
            errs.push(FieldError::required(p.child("type"), ""));
            continue;
        }
        if CONDITION_TYPES.contains(&kind) && seen.contains(&kind) {
            errs.push(FieldError::duplicate(p.child("type"), &json!(kind)));
        }
        seen.push(kind);
        let status = c.get("status").and_then(Value::as_str).unwrap_or_default();
        if !matches!(status, "True" | "False" | "Unknown") {
            if status.is_empty() {
                errs.push(FieldError::required(p.child("status"), ""));
            } else {
                errs.push(FieldError::not_supported(
                    p.child("status"),
                    &json!(status),
                    &["False", "True", "Unknown"],
                ));
            }
        }
    }
    if seen.contains(&"Approved") && seen.contains(&"Denied") {
        errs.push(FieldError::invalid(
            &path,
            obj.pointer("/status/conditions").unwrap_or(&Value::Null),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    errs
}

/// Upstream's signer name rule: `<domain>/<path>`, the domain a DNS subdomain.
fn signer_name_problem(name: &str) -> Option<&'static str> {
    let Some((domain, path)) = name.split_once('/') else {
        return Some(
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        );
    };
    if path.is_empty()
        || !domain.contains('.')
        || !crate::validation::names::dns1123_subdomain(domain).is_empty()
    {
        return Some(
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(request: &str, signer: &str, usages: Value) -> Value {
        json!({"spec": {"request": request, "signerName": signer, "usages": usages}})
    }

    fn pem_b64() -> String {
        // base64 of a PEM envelope; the signature is the signer's to check.
        let pem = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
        serde_json::to_value(k8s_openapi::ByteString(pem.as_bytes().to_vec()))
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    #[test]
    fn a_well_formed_request_passes() {
        let v = csr(
            &pem_b64(),
            "kubernetes.io/kube-apiserver-client-kubelet",
            json!(["digital signature", "client auth"]),
        );
        assert_eq!(validate_csr(&v), Vec::new());
    }

    #[test]
    fn bad_fields_are_named() {
        let v = csr(
            "bm9wZQ==",
            "nodomain",
            json!(["client auth", "client auth", "flying"]),
        );
        let fields: Vec<String> = validate_csr(&v).iter().map(|e| e.to_string()).collect();
        assert!(
            fields
                .iter()
                .any(|e| e.starts_with("spec.request: Invalid value")),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|e| e.starts_with("spec.signerName: Invalid value")),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|e| e.starts_with("spec.usages[1]: Duplicate value")),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|e| e.starts_with("spec.usages[2]: Unsupported value: \"flying\"")),
            "{fields:?}"
        );
    }

    #[test]
    fn approved_and_denied_exclude_each_other() {
        let v = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}});
        assert_eq!(validate_conditions(&v).len(), 1);
    }
}
