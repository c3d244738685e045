//! The content of `securityContext.windowsOptions`: upstream
//! `validateWindowsSecurityContextOptions` (`pkg/apis/core/validation/validation.go`), applied
//! at pod level and to every container, whatever the pod's OS.
//!
//! - `gmsaCredentialSpecName` must be a DNS-1123 subdomain (the name of a GMSACredentialSpec);
//! - `gmsaCredentialSpec` must not be empty and must be under 64 KiB;
//! - `runAsUserName` must not be empty, contain control characters or more than one backslash;
//!   its domain (before the backslash) must be under 256 characters and a NetBIOS or DNS name;
//!   its user must be 1–104 characters, not only dots/spaces, and free of `"/\:;|=,+*?<>@[]`.
//!
//! Lengths are in bytes, as Go's `len`. Values are reported the way upstream renders them.

use serde_json::{Value, json};

use crate::field::{FieldError, Path};
use crate::validation::names;
use crate::windows::pod_os::containers;

/// Upstream `maxGMSACredentialSpecLengthInKiB`.
pub const MAX_GMSA_CREDENTIAL_SPEC_KIB: usize = 64;
/// Upstream `maxGMSACredentialSpecLength` (bytes).
pub const MAX_GMSA_CREDENTIAL_SPEC_LENGTH: usize = MAX_GMSA_CREDENTIAL_SPEC_KIB * 1024;
/// Upstream `maxRunAsUserNameDomainLength`.
pub const MAX_RUN_AS_USER_NAME_DOMAIN_LENGTH: usize = 256;
/// Upstream `maxRunAsUserNameUserLength`.
pub const MAX_RUN_AS_USER_NAME_USER_LENGTH: usize = 104;

/// `windowsOptions` at pod level and in every container of the pod spec at `path`.
pub fn validate_spec(spec: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(wo) = spec
        .get("securityContext")
        .and_then(|s| s.get("windowsOptions"))
    {
        errs.extend(validate(
            wo,
            &path.child("securityContext").child("windowsOptions"),
        ));
    }
    for (cpath, c) in containers(spec, path) {
        if let Some(wo) = c
            .get("securityContext")
            .and_then(|s| s.get("windowsOptions"))
        {
            errs.extend(validate(
                wo,
                &cpath.child("securityContext").child("windowsOptions"),
            ));
        }
    }
    errs
}

/// Upstream `validateWindowsSecurityContextOptions` for one `windowsOptions` object at `path`.
pub fn validate(options: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !options.is_object() {
        return errs;
    }
    if let Some(name) = options
        .get("gmsaCredentialSpecName")
        .and_then(Value::as_str)
    {
        for msg in names::dns1123_subdomain(name) {
            errs.push(FieldError::invalid(
                path.child("gmsaCredentialSpecName"),
                &json!(name),
                msg,
            ));
        }
    }
    if let Some(spec) = options.get("gmsaCredentialSpec").and_then(Value::as_str) {
        let p = path.child("gmsaCredentialSpec");
        if spec.is_empty() {
            errs.push(FieldError::invalid(
                p,
                &json!(spec),
                "gmsaCredentialSpec cannot be an empty string",
            ));
        } else if spec.len() > MAX_GMSA_CREDENTIAL_SPEC_LENGTH {
            errs.push(FieldError::invalid(
                p,
                &json!(spec),
                format!("gmsaCredentialSpec size must be under {MAX_GMSA_CREDENTIAL_SPEC_KIB} KiB"),
            ));
        }
    }
    if let Some(user_name) = options.get("runAsUserName").and_then(Value::as_str) {
        let p = path.child("runAsUserName");
        for msg in run_as_user_name_errors(user_name) {
            errs.push(FieldError::invalid(&p, &json!(user_name), msg));
        }
    }
    errs
}

/// The messages upstream gives for an invalid `runAsUserName`, in its order.
pub fn run_as_user_name_errors(value: &str) -> Vec<String> {
    if value.is_empty() {
        return vec!["runAsUserName cannot be an empty string".into()];
    }
    if value.chars().any(is_control) {
        return vec!["runAsUserName cannot contain control characters".into()];
    }
    let parts: Vec<&str> = value.split('\\').collect();
    if parts.len() > 2 {
        return vec!["runAsUserName cannot contain more than one backslash".into()];
    }
    let (domain, user) = match parts.as_slice() {
        [user] => (None, *user),
        [domain, user] => (Some(*domain), *user),
        _ => return Vec::new(),
    };
    let mut errs = Vec::new();
    let domain_text = domain.unwrap_or_default();
    if domain_text.len() >= MAX_RUN_AS_USER_NAME_DOMAIN_LENGTH {
        errs.push(format!(
            "runAsUserName's Domain length must be under {MAX_RUN_AS_USER_NAME_DOMAIN_LENGTH} characters"
        ));
    }
    if let Some(domain) = domain
        && !(is_netbios_domain(domain) || is_dns_domain(domain))
    {
        errs.push("runAsUserName's Domain doesn't match the NetBios nor the DNS format".into());
    }
    if user.is_empty() {
        errs.push("runAsUserName's User cannot be empty".into());
    } else if user.len() > MAX_RUN_AS_USER_NAME_USER_LENGTH {
        errs.push(format!(
            "runAsUserName's User length must not be longer than {MAX_RUN_AS_USER_NAME_USER_LENGTH} characters"
        ));
    }
    if !user.is_empty() && user.chars().all(|c| c == '.' || c == ' ') {
        errs.push("runAsUserName's User cannot contain only periods or spaces".into());
    }
    if user.chars().any(|c| INVALID_USER_CHARS.contains(c)) {
        errs.push(
            r#"runAsUserName's User cannot contain the following characters: "/\:;|=,+*?<>@[]"#
                .into(),
        );
    }
    errs
}

/// POSIX `[[:cntrl:]]` as Go's regexp reads it: ASCII control characters.
fn is_control(c: char) -> bool {
    (c as u32) < 0x20 || c as u32 == 0x7f
}

const NETBIOS_FORBIDDEN: &str = "\\/:*?\"<>|";
const INVALID_USER_CHARS: &str = "\"/\\:;|=,+*?<>@[]";

/// Upstream `validNetBiosRegex`: 1–15 characters, none of `\/:*?"<>|`, not starting with a dot.
fn is_netbios_domain(domain: &str) -> bool {
    let chars: Vec<char> = domain.chars().collect();
    match chars.first() {
        None => false,
        Some(&first) => {
            chars.len() <= 15
                && first != '.'
                && chars.iter().all(|c| !NETBIOS_FORBIDDEN.contains(*c))
        }
    }
}

/// Upstream `validWindowsUserDomainDNSRegex`: dot-separated labels of letters, digits and inner
/// dashes, each 1–63 characters.
fn is_dns_domain(domain: &str) -> bool {
    domain.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn windows_run_as_user_name_rules_match_upstream_messages() {
        let long_domain = format!("{}\\user", "a".repeat(256));
        let long_user = "u".repeat(105);
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("ContainerUser", vec![]),
            ("NT AUTHORITY\\NETWORK SERVICE", vec![]),
            ("CORP\\svc-billing", vec![]),
            ("corp.example.com\\svc", vec![]),
            ("", vec!["runAsUserName cannot be an empty string"]),
            (
                "user\tname",
                vec!["runAsUserName cannot contain control characters"],
            ),
            (
                "a\\b\\c",
                vec!["runAsUserName cannot contain more than one backslash"],
            ),
            (
                "\\user",
                vec!["runAsUserName's Domain doesn't match the NetBios nor the DNS format"],
            ),
            (
                ".corp\\user",
                vec!["runAsUserName's Domain doesn't match the NetBios nor the DNS format"],
            ),
            (
                "thisnetbiosnameistoolong-and.not_dns\\user",
                vec!["runAsUserName's Domain doesn't match the NetBios nor the DNS format"],
            ),
            ("CORP\\", vec!["runAsUserName's User cannot be empty"]),
            (
                "...",
                vec!["runAsUserName's User cannot contain only periods or spaces"],
            ),
            (
                "  ",
                vec!["runAsUserName's User cannot contain only periods or spaces"],
            ),
            (
                "user@corp",
                vec![
                    r#"runAsUserName's User cannot contain the following characters: "/\:;|=,+*?<>@[]"#,
                ],
            ),
            (
                "a/b",
                vec![
                    r#"runAsUserName's User cannot contain the following characters: "/\:;|=,+*?<>@[]"#,
                ],
            ),
        ];
        for (value, want) in cases {
            assert_eq!(run_as_user_name_errors(value), want, "{value:?}");
        }
        assert_eq!(
            run_as_user_name_errors(&long_domain),
            vec![
                "runAsUserName's Domain length must be under 256 characters",
                "runAsUserName's Domain doesn't match the NetBios nor the DNS format",
            ]
        );
        assert_eq!(
            run_as_user_name_errors(&long_user),
            vec!["runAsUserName's User length must not be longer than 104 characters"]
        );
        assert!(run_as_user_name_errors(&"u".repeat(104)).is_empty());
    }

    #[test]
    fn windows_options_errors_are_invalid_at_their_field_paths() {
        let spec = json!({
            "securityContext": {"windowsOptions": {"runAsUserName": "", "gmsaCredentialSpecName": "Bad_Name"}},
            "containers": [{"name": "c", "securityContext": {"windowsOptions": {"gmsaCredentialSpec": ""}}}],
        });
        let errs: Vec<String> = validate_spec(&spec, &Path::new("spec"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(errs[0].starts_with("spec.securityContext.windowsOptions.gmsaCredentialSpecName: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", errs[0]);
        assert_eq!(
            errs[1],
            "spec.securityContext.windowsOptions.runAsUserName: Invalid value: \"\": runAsUserName cannot be an empty string"
        );
        assert_eq!(
            errs[2],
            "spec.containers[0].securityContext.windowsOptions.gmsaCredentialSpec: Invalid value: \"\": gmsaCredentialSpec cannot be an empty string"
        );
    }

    #[test]
    fn windows_gmsa_credential_spec_over_64_kib_is_invalid() {
        let big = "x".repeat(MAX_GMSA_CREDENTIAL_SPEC_LENGTH + 1);
        let errs = validate(&json!({"gmsaCredentialSpec": big}), &Path::new("w"));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].detail,
            "gmsaCredentialSpec size must be under 64 KiB"
        );
        let ok = "x".repeat(MAX_GMSA_CREDENTIAL_SPEC_LENGTH);
        assert!(validate(&json!({"gmsaCredentialSpec": ok}), &Path::new("w")).is_empty());
    }

    #[test]
    fn windows_options_validation_never_panics_on_odd_shapes() {
        for v in [
            json!(null),
            json!(1),
            json!({"runAsUserName": 1, "gmsaCredentialSpec": []}),
            json!({"runAsUserName": "é\\ü"}),
        ] {
            let _ = validate(&v, &Path::new("w"));
            let _ = validate_spec(
                &json!({"securityContext": {"windowsOptions": v}, "containers": [{"securityContext": 1}]}),
                &Path::new("spec"),
            );
        }
    }
}
