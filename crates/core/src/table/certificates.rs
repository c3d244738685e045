//! Columns and cells of CertificateSigningRequests: upstream's
//! `certificateSigningRequestColumnDefinitions` with `printCertificateSigningRequest` and
//! `extractCSRStatus` (pkg/printers/internalversion/printers.go).

use serde_json::Value;

use super::age::created;
use super::json::{arr_at, name, opt_int_at, s, str_at};
use super::{AGE, ColumnDefinition, NAME, col};

/// NAME, AGE, SIGNERNAME, REQUESTOR, REQUESTEDDURATION, CONDITION.
pub fn columns() -> Vec<ColumnDefinition> {
    vec![
        NAME,
        AGE,
        col(
            "SignerName",
            "string",
            "Requested signer for the request. It is a qualified name in the form: `scope-hostname.io/name`.",
        ),
        col("Requestor", "string", "Base64-encoded PKCS#10 CSR data"),
        col(
            "RequestedDuration",
            "string",
            "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration.",
        ),
        col(
            "Condition",
            "string",
            "Conditions applied to the request, such as approval or denial.",
        ),
    ]
}

/// `printCertificateSigningRequest`: `<none>` for an unset signer or duration; the requestor is
/// `spec.username`; the duration is `expirationSeconds` as a human duration.
pub fn cells(obj: &Value, now: i64) -> Vec<Value> {
    let signer = match str_at(obj, &["spec", "signerName"]) {
        "" => "<none>",
        signer => signer,
    };
    let duration = match opt_int_at(obj, &["spec", "expirationSeconds"]) {
        Some(secs) => super::human_duration(secs),
        None => "<none>".to_string(),
    };
    vec![
        s(name(obj)),
        created(obj, now),
        s(signer),
        s(str_at(obj, &["spec", "username"])),
        s(duration),
        s(condition(obj)),
    ]
}

/// `extractCSRStatus`: `Denied` over `Approved` over `Pending`, then `,Failed` when a `Failed`
/// condition is present and `,Issued` once `status.certificate` is set.
pub fn condition(obj: &Value) -> String {
    let types: Vec<&str> = arr_at(obj, &["status", "conditions"])
        .iter()
        .map(|c| str_at(c, &["type"]))
        .collect();
    let mut status = if types.contains(&"Denied") {
        "Denied".to_string()
    } else if types.contains(&"Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if types.contains(&"Failed") {
        status.push_str(",Failed");
    }
    if !str_at(obj, &["status", "certificate"]).is_empty() {
        status.push_str(",Issued");
    }
    status
}
