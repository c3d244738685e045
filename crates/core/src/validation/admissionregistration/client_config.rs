//! A webhook's `clientConfig`: upstream `k8s.io/apiserver/pkg/util/webhook/validation.go`
//! (`ValidateWebhookURL`, `ValidateWebhookService`) over the parts of Go's `net/url.Parse`
//! those checks read (scheme, host, user information, query, fragment).

use serde_json::{Value, json};

use super::super::json::{i64_at, present, str_at};
use super::super::names;
use crate::field::{FieldError, Path, go_quote};

/// Upstream's hint after URL errors.
const FORM: &str = "; desired format: https://host[/path]";

/// The parts of a URL upstream's checks read, as Go's `url.Parse` splits them.
#[derive(Debug, Default, PartialEq, Eq)]
struct GoUrl<'a> {
    /// Lower-cased, as Go stores it.
    scheme: String,
    user: Option<&'a str>,
    host: &'a str,
    raw_query: &'a str,
    fragment: &'a str,
}

/// Go's `url.Parse` reduced to the fields above; `Err` holds the error text Go gives
/// (`parse "…": …`).
fn parse_url(raw: &str) -> Result<GoUrl<'_>, String> {
    let fail = |why: String| format!("parse {}: {why}", go_quote(raw));
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(fail("net/url: invalid control character in URL".into()));
    }
    let (rest, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = GoUrl {
        fragment,
        ..GoUrl::default()
    };
    // getScheme: letters, then letters, digits, '+', '-', '.', up to a ':'.
    let mut after_scheme = rest;
    for (i, c) in rest.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err(fail("missing protocol scheme".into())),
            ':' => {
                url.scheme = rest[..i].to_ascii_lowercase();
                after_scheme = &rest[i + 1..];
                break;
            }
            _ => break,
        }
    }
    let rest = after_scheme;
    let rest = match rest.strip_suffix('?') {
        Some(r) if rest.matches('?').count() == 1 => r,
        _ => match rest.split_once('?') {
            Some((r, q)) => {
                url.raw_query = q;
                r
            }
            None => rest,
        },
    };
    if !rest.starts_with('/') {
        if url.scheme.is_empty()
            && rest
                .split('/')
                .next()
                .is_some_and(|segment| segment.contains(':'))
        {
            return Err(fail(
                "first path segment in URL cannot contain colon".into(),
            ));
        }
        // An opaque URL (`https:host`) has no host.
        return Ok(url);
    }
    if let Some(after) = rest.strip_prefix("//")
        && (!url.scheme.is_empty() || !rest.starts_with("///"))
    {
        let authority = after.split('/').next().unwrap_or_default();
        let host = match authority.rsplit_once('@') {
            Some((user, host)) => {
                url.user = Some(user);
                host
            }
            None => authority,
        };
        check_host(host).map_err(fail)?;
        url.host = host;
    }
    Ok(url)
}

/// Go's `parseHost` checks: a bracketed IPv6 literal or a name, an optional numeric port, and
/// no character a host may not hold.
fn check_host(host: &str) -> Result<(), String> {
    let valid_port = |port: &str| {
        port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
    };
    let name = if let Some(inner) = host.strip_prefix('[') {
        let Some(end) = inner.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &inner[end + 1..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
        return Ok(());
    } else if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
        &host[..i]
    } else {
        host
    };
    for c in name.chars() {
        let allowed =
            c.is_ascii_alphanumeric() || !c.is_ascii() || "-_.~!$&'()*+,;=:[]<>\"%".contains(c);
        if !allowed {
            return Err(format!(
                "invalid character {} in host name",
                go_quote(&c.to_string())
            ));
        }
    }
    Ok(())
}

/// Upstream `ValidateWebhookURL` with `forceHttps`: an https URL with a host and without user
/// information, query or fragment.
pub(crate) fn webhook_url(path: &Path, raw: &str) -> Vec<FieldError> {
    let url = match parse_url(raw) {
        Ok(u) => u,
        Err(e) => {
            return vec![FieldError::required(
                path,
                format!("url must be a valid URL: {e}{FORM}"),
            )];
        }
    };
    let mut errs = Vec::new();
    if url.scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            &json!(url.scheme),
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if url.host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &json!(url.host),
            format!("host must be provided{FORM}"),
        ));
    }
    if let Some(user) = url.user {
        errs.push(FieldError::invalid(
            path,
            &json!(user),
            "user information is not permitted in the URL",
        ));
    }
    if !url.fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &json!(url.fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if !url.raw_query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &json!(url.raw_query),
            "query parameters are not permitted in the URL",
        ));
    }
    errs
}

/// Upstream `ValidateWebhookService` as the admissionregistration validation calls it. The
/// call passes the service's name where the function expects the namespace and the other way
/// round, so an empty `namespace` is reported as `service.name: Required value: service name
/// is required` (and an empty name at `service.namespace`); kept as upstream answers.
pub(crate) fn webhook_service(service: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if str_at(service, "namespace").unwrap_or_default().is_empty() {
        errs.push(FieldError::required(
            path.child("name"),
            "service name is required",
        ));
    }
    if str_at(service, "name").unwrap_or_default().is_empty() {
        errs.push(FieldError::required(
            path.child("namespace"),
            "service namespace is required",
        ));
    }
    // Defaulted to 443 when unset.
    let port = i64_at(service, "port").unwrap_or(443);
    let msgs = names::port_num(port);
    if !msgs.is_empty() {
        errs.push(FieldError::invalid(
            path.child("port"),
            &json!(port),
            format!("port is not valid: {}", msgs.join(", ")),
        ));
    }
    if !present(service, "path") {
        return errs;
    }
    let url_path = str_at(service, "path").unwrap_or_default();
    let p = path.child("path");
    if url_path.is_empty() || url_path == "/" {
        return errs;
    }
    if url_path == "//" {
        errs.push(FieldError::invalid(
            &p,
            &json!(url_path),
            "segment[0] may not be empty",
        ));
        return errs;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(
            &p,
            &json!(url_path),
            "must start with a '/'",
        ));
    }
    // Upstream drops the first character whatever it is, then one trailing '/'.
    let mut chars = url_path.chars();
    chars.next();
    let to_check = chars.as_str();
    let to_check = to_check.strip_suffix('/').unwrap_or(to_check);
    for (i, step) in to_check.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &p,
                &json!(url_path),
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for failure in names::dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &p,
                &json!(url_path),
                format!("segment[{i}]: {failure}"),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn urls_split_as_go_splits_them() {
        let u = parse_url("HTTPS://user:pw@hook.example.com:8443/a?x=1#frag").expect("parses");
        assert_eq!(u.scheme, "https");
        assert_eq!(u.user, Some("user:pw"));
        assert_eq!(u.host, "hook.example.com:8443");
        assert_eq!(u.raw_query, "x=1");
        assert_eq!(u.fragment, "frag");
        assert_eq!(parse_url("https:opaque").expect("opaque").host, "");
        assert_eq!(parse_url("hook.example.com/x").expect("path").scheme, "");
        assert_eq!(
            parse_url(":x").expect_err("no scheme"),
            r#"parse ":x": missing protocol scheme"#
        );
        assert_eq!(
            parse_url("https://a b/").expect_err("space"),
            r#"parse "https://a b/": invalid character " " in host name"#
        );
        assert_eq!(
            parse_url("https://a:80x/").expect_err("port"),
            r#"parse "https://a:80x/": invalid port ":80x" after host"#
        );
        assert!(parse_url("https://[::1]:443/x").is_ok());
    }

    #[test]
    fn webhook_urls_must_be_plain_https() {
        let p = Path::new("webhooks[0].clientConfig.url");
        assert!(webhook_url(&p, "https://hook.example.com/validate").is_empty());
        assert_eq!(
            details(&webhook_url(&p, "http://hook.example.com")),
            [
                r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#
            ]
        );
        assert_eq!(
            details(&webhook_url(&p, "https://u@h.example.com/?a=b#f")),
            [
                r#"webhooks[0].clientConfig.url: Invalid value: "u": user information is not permitted in the URL"#,
                r#"webhooks[0].clientConfig.url: Invalid value: "f": fragments are not permitted in the URL"#,
                r#"webhooks[0].clientConfig.url: Invalid value: "a=b": query parameters are not permitted in the URL"#,
            ]
        );
        assert_eq!(
            details(&webhook_url(&p, "https:///path")),
            [
                r#"webhooks[0].clientConfig.url: Invalid value: "": host must be provided; desired format: https://host[/path]"#
            ]
        );
        let bad = details(&webhook_url(&p, "https://a\u{7f}"));
        assert!(
            bad[0].starts_with(
                "webhooks[0].clientConfig.url: Required value: url must be a valid URL: parse "
            ),
            "{bad:?}"
        );
    }

    #[test]
    fn service_paths_and_ports_follow_upstream() {
        let p = Path::new("webhooks[0].clientConfig.service");
        let svc = |path: Value, port: i64| json!({"namespace": "ns", "name": "svc", "path": path, "port": port});
        assert!(webhook_service(&svc(json!("/validate/pods"), 443), &p).is_empty());
        assert!(webhook_service(&svc(json!("/"), 443), &p).is_empty());
        assert_eq!(
            details(&webhook_service(&svc(json!("validate"), 0), &p)),
            [
                "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                r#"webhooks[0].clientConfig.service.path: Invalid value: "validate": must start with a '/'"#,
            ]
        );
        let errs = details(&webhook_service(&svc(json!("/a//B"), 443), &p));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].ends_with("segment[1] may not be empty"), "{errs:?}");
        assert!(
            errs[1].contains("segment[2]: a lowercase RFC 1123"),
            "{errs:?}"
        );
        // Upstream's swapped arguments: the empty namespace is reported under `name`.
        assert_eq!(
            details(&webhook_service(&json!({"name": "svc", "port": 443}), &p)),
            ["webhooks[0].clientConfig.service.name: Required value: service name is required"]
        );
    }
}
