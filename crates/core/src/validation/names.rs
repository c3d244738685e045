//! String formats of the Kubernetes API, with upstream's exact messages.
//!
//! Mirrors `k8s.io/apimachinery/pkg/util/validation` (`IsDNS1123Label`, `IsDNS1123Subdomain`,
//! `IsDNS1035Label`, `IsQualifiedName`, `IsValidLabelValue`, `IsValidPortName`,
//! `IsConfigMapKey`, `IsRelaxedEnvVarName`, `IsHTTPHeaderName`, `IsValidPercent`) and the
//! name validators of `k8s.io/apimachinery/pkg/api/validation` (`NameIsDNSSubdomain`, …,
//! `ValidatePathSegmentName`). Each returns the list of failure messages (empty when valid).

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Upstream `MaxLenError`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Upstream `RegexError`, including its quirky double space between examples.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// Upstream `InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// Upstream `IsDNS1123Label`.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Upstream `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream `IsDNS1035Label`.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    let ok = matches_dns1123_label(s) && s.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    if !ok {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// Upstream `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of at most
/// 63 characters.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream `IsValidLabelValue`.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !s.is_empty() && !matches_qualified_name_part(s) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Upstream `IsValidPortName` (IANA service names).
pub fn port_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 15 {
        errs.push(max_len_error(15));
    }
    if s.is_empty() || !s.bytes().all(|c| is_lower_alnum(c) || c == b'-') {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if s.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if s.starts_with('-') || s.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// Upstream `IsValidPortNum`.
pub fn port_num(p: i64) -> Vec<String> {
    if (1..=65535).contains(&p) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

fn ch_dir_prefix(s: &str) -> Option<String> {
    match s {
        "." => Some("must not be '.'".to_string()),
        ".." => Some("must not be '..'".to_string()),
        _ if s.starts_with("..") => Some("must not start with '..'".to_string()),
        _ => None,
    }
}

/// Upstream `IsConfigMapKey`: keys of ConfigMap and Secret data.
pub fn config_map_key(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if s.is_empty()
        || !s
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
    {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    errs.extend(ch_dir_prefix(s));
    errs
}

/// Upstream `IsRelaxedEnvVarName` (the `RelaxedEnvironmentVariableValidation` gate is on in
/// v1.32): any printable ASCII except `=`.
pub fn env_var_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.is_empty() {
        errs.push("environment variable name must be non-empty".to_string());
    }
    if s.chars()
        .any(|c| !c.is_ascii() || c.is_ascii_control() || c == '=')
    {
        errs.push("a valid environment variable name must consist only of printable ASCII characters other than '='".to_string());
    }
    errs
}

/// Upstream `IsHTTPHeaderName`.
pub fn http_header_name(s: &str) -> Vec<String> {
    if !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid HTTP header must consist of alphanumeric characters or '-'",
            "[-A-Za-z0-9]+",
            &["X-Header-Name"],
        )]
    }
}

/// Upstream `IsValidPercent`.
pub fn percent(s: &str) -> Vec<String> {
    let digits = s.strip_suffix('%').unwrap_or("");
    if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
        Vec::new()
    } else {
        vec![regex_error(
            "a valid percent string must be a numeric string followed by an ending '%'",
            "[0-9]+%",
            &["1%", "93%"],
        )]
    }
}

/// Upstream `ValidatePathSegmentName`: names used as a single URL path segment.
pub fn path_segment_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s == "." || s == ".." {
        errs.push(format!("may not be '{s}'"));
    }
    for bad in ["/", "%"] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_label_messages_match_upstream() {
        assert!(dns1123_label("web-1").is_empty());
        assert_eq!(
            dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert_eq!(
            dns1123_label("Web")[0],
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            dns1123_label(&"a".repeat(64))[0],
            "must be no more than 63 characters"
        );
        assert!(dns1035_label("1abc").len() == 1);
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
    }

    #[test]
    fn qualified_names_and_label_values() {
        for ok in ["app", "kubernetes.io/os", "A_b.c-D", "x/y"] {
            assert!(qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            qualified_name("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(qualified_name("-x")[0].starts_with("name part must consist"));
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3").is_empty());
        assert!(label_value("bad value")[0].starts_with("a valid label must be an empty string"));
        assert!(port_name("http").is_empty());
        assert!(!port_name("80").is_empty());
        assert!(percent("25%").is_empty());
        assert!(!percent("x%").is_empty());
    }
}
