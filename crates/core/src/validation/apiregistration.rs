//! apiregistration.k8s.io/v1 validation and defaulting: APIService.
//!
//! Mirrors upstream kube-aggregator `pkg/apis/apiregistration/validation/validation.go`
//! (`ValidateAPIService`, `ValidateAPIServiceUpdate`, `ValidateAPIServiceStatus`) and
//! `pkg/apis/apiregistration/v1/defaults.go` (`SetDefaults_ServiceReference`: port 443).
//! The name's path-segment check is the generic ObjectMeta one ([`super::name_rule`]); this
//! module adds the `<version>.<group>` rule.

use serde_json::{Value, json};

use super::json::{arr_at, bool_at, i64_at, str_at};
use super::names;
use crate::field::{FieldError, Path};

/// Upstream's detail for a name that is not `spec.version + "." + spec.group`.
fn name_mismatch(required: &str) -> String {
    format!(
        "must be `spec.version+\".\"+spec.group`: {}",
        crate::field::go_quote(required)
    )
}

/// Upstream `ValidateAPIService` (after the generic metadata checks): the name is
/// `<version>.<group>`, the group a subdomain (empty only for the legacy `v1`), the version a
/// DNS-1035 label, priorities in range, and local services (no `service`) carry neither a
/// CA bundle nor `insecureSkipTLSVerify`.
pub fn validate_api_service(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let sp = Path::new("spec");
    let group = str_at(spec, "group").unwrap_or_default();
    let version = str_at(spec, "version").unwrap_or_default();
    let name = obj
        .get("metadata")
        .and_then(|m| str_at(m, "name"))
        .unwrap_or_default();
    let required = format!("{version}.{group}");
    if !name.is_empty() && names::path_segment_name(name).is_empty() && name != required {
        errs.push(FieldError::invalid(
            "metadata.name",
            &json!(name),
            name_mismatch(&required),
        ));
    }
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            sp.child("group"),
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() {
        for msg in names::dns1123_subdomain(group) {
            errs.push(FieldError::invalid(sp.child("group"), &json!(group), msg));
        }
    }
    for msg in names::dns1035_label(version) {
        errs.push(FieldError::invalid(
            sp.child("version"),
            &json!(version),
            msg,
        ));
    }
    let group_min = i64_at(spec, "groupPriorityMinimum").unwrap_or(0);
    if group_min <= 0 || group_min > 20000 {
        errs.push(FieldError::invalid(
            sp.child("groupPriorityMinimum"),
            &json!(group_min),
            "must be positive and less than 20000",
        ));
    }
    let version_priority = i64_at(spec, "versionPriority").unwrap_or(0);
    if version_priority <= 0 || version_priority > 1000 {
        errs.push(FieldError::invalid(
            sp.child("versionPriority"),
            &json!(version_priority),
            "must be positive and less than 1000",
        ));
    }
    let ca_bundle = str_at(spec, "caBundle").unwrap_or_default();
    let insecure = bool_at(spec, "insecureSkipTLSVerify").unwrap_or(false);
    let Some(service) = spec.get("service").filter(|s| !s.is_null()) else {
        if !ca_bundle.is_empty() {
            errs.push(FieldError::invalid(
                sp.child("caBundle"),
                &json!(format!("{} bytes", decoded_len(ca_bundle))),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            errs.push(FieldError::invalid(
                sp.child("insecureSkipTLSVerify"),
                &json!(true),
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return errs;
    };
    let svc = sp.child("service");
    for key in ["namespace", "name"] {
        if str_at(service, key).unwrap_or_default().is_empty() {
            errs.push(FieldError::required(svc.child(key), ""));
        }
    }
    if let Some(port) = i64_at(service, "port") {
        let msgs = names::port_num(port);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                svc.child("port"),
                &json!(port),
                format!("port is not valid: {}", msgs.join(", ")),
            ));
        }
    }
    if insecure && !ca_bundle.is_empty() {
        errs.push(FieldError::invalid(
            sp.child("insecureSkipTLSVerify"),
            &json!(true),
            "may not be true if caBundle is present",
        ));
    }
    errs
}

/// The byte length of a base64 `caBundle` (upstream counts the decoded bytes).
fn decoded_len(b64: &str) -> usize {
    let body = b64.trim_end_matches('=');
    body.len() * 3 / 4
}

/// Upstream `ValidateAPIServiceStatus`: condition statuses are True, False or Unknown.
pub fn validate_api_service_status(new: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    for (i, c) in arr_at(status, "conditions").iter().enumerate() {
        let s = str_at(c, "status").unwrap_or_default();
        if !matches!(s, "True" | "False" | "Unknown") {
            errs.push(FieldError::not_supported(
                Path::new("status")
                    .child("conditions")
                    .index(i)
                    .child("status"),
                &json!(s),
                &["True", "False", "Unknown"],
            ));
        }
    }
    errs
}

/// Upstream `SetDefaults_ServiceReference`: a service reference's port defaults to 443.
pub fn default_api_service(obj: &mut Value) {
    if let Some(service) = obj
        .get_mut("spec")
        .and_then(|s| s.get_mut("service"))
        .filter(|s| s.is_object())
    {
        super::json::set_default(service, "port", json!(443));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_service(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn remote_api_service_with_defaults_is_valid() {
        let mut obj = api_service(
            "v1beta1.metrics.k8s.io",
            json!({"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                "service": {"namespace": "kube-system", "name": "metrics-server"}, "insecureSkipTLSVerify": true}),
        );
        default_api_service(&mut obj);
        assert_eq!(obj["spec"]["service"]["port"], 443);
        assert!(validate_api_service(&obj).is_empty());
    }

    #[test]
    fn name_must_be_version_dot_group() {
        let obj = api_service(
            "metrics",
            json!({"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100}),
        );
        assert_eq!(
            messages(&validate_api_service(&obj)),
            [
                "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\""
            ]
        );
    }

    #[test]
    fn priorities_and_local_service_rules_follow_upstream() {
        let obj = api_service(
            "v1.example.com",
            json!({"group": "example.com", "version": "v1", "groupPriorityMinimum": 0, "versionPriority": 1001,
                "insecureSkipTLSVerify": true, "caBundle": "AAAA"}),
        );
        assert_eq!(
            messages(&validate_api_service(&obj)),
            [
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
                "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
    }

    #[test]
    fn remote_service_needs_namespace_and_name_and_no_insecure_with_ca() {
        let obj = api_service(
            "v1.example.com",
            json!({"group": "example.com", "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1,
                "service": {"port": 70000}, "insecureSkipTLSVerify": true, "caBundle": "AAAA"}),
        );
        assert_eq!(
            messages(&validate_api_service(&obj)),
            [
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
    }

    #[test]
    fn status_conditions_need_known_statuses() {
        let obj = json!({"status": {"conditions": [{"type": "Available", "status": "Yes"}]}});
        assert_eq!(
            messages(&validate_api_service_status(&obj)),
            [
                "status.conditions[0].status: Unsupported value: \"Yes\": supported values: \"True\", \"False\", \"Unknown\""
            ]
        );
    }
}
