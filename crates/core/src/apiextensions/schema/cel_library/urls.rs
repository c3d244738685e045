//! The Kubernetes URL library (upstream `library/urls.go`): `url(s)`, `isURL(s)`, and on a URL
//! `getScheme()`, `getHost()`, `getHostname()`, `getPort()`, `getEscapedPath()`, `getQuery()`.
//!
//! What is accepted follows Go's `net/url`: `isURL` and `url` require `url.ParseRequestURI` to
//! succeed (an absolute URL, or an absolute path), and the parts are read as `url.Parse` splits
//! them (a fragment is dropped). Errors read like Go's: `parse "…": invalid URI for request`.

use std::collections::HashMap;

use cel::common::types::{CelList, CelMap, CelMapKey, CelString, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, boolean, charge_str, error, opaque_type, str_arg, string, take};
use crate::apiextensions::schema::cel_cost;
use crate::field::go_quote;

/// A URL as Go's `url.URL` holds it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Url {
    scheme: String,
    opaque: String,
    host: String,
    /// The unescaped path.
    path: String,
    /// The path as written, when it was escaped.
    raw_path: String,
    raw_query: String,
}

opaque_type!(Url, URL_TYPE, "kubernetes.URL");

impl Url {
    /// Go's `url.URL.EscapedPath`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded_path(&self.raw_path)
            && unescape(&self.raw_path, Mode::Path).as_deref() == Ok(self.path.as_str())
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_string();
        }
        escape_path(&self.path)
    }

    /// Go's `url.URL.Hostname`: the host without port or IPv6 brackets.
    fn hostname(&self) -> &str {
        let (host, _) = split_host_port(&self.host);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// Go's `url.URL.Port`.
    fn port(&self) -> &str {
        split_host_port(&self.host).1
    }
}

fn split_host_port(host: &str) -> (&str, &str) {
    if let Some(i) = host.rfind(':') {
        let port = &host[i + 1..];
        if port.bytes().all(|b| b.is_ascii_digit()) && !host[i..].contains(']') {
            return (&host[..i], port);
        }
    }
    (host, "")
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Query,
}

/// Go's `shouldEscape` for the modes used here.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
        return false;
    }
    match mode {
        Mode::Host => !matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        ),
        Mode::Path => !matches!(
            c,
            b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'@'
        ),
        Mode::Query => true,
    }
}

/// Go's `unescape`: decodes `%XX` (and `+` in queries), refusing malformed escapes and, in
/// hosts, characters that would need escaping.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                let Some(hex) = hex else {
                    let end = (i + 3).min(b.len());
                    return Err(format!(
                        "invalid URL escape {}",
                        go_quote(&String::from_utf8_lossy(&b[i..end]))
                    ));
                };
                let v =
                    u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("00"), 16).unwrap_or(0);
                out.push(v);
                i += 3;
            }
            b'+' if mode == Mode::Query => {
                out.push(b' ');
                i += 1;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&(c as char).to_string())
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "invalid UTF-8 in URL".to_string())
}

fn escape_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if should_escape(c, Mode::Path) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(c as char);
        }
    }
    out
}

/// Go's `validEncoded` for paths.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, Mode::Path)
    })
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
    }
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_userinfo(s: &str) -> bool {
    s.bytes().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b':'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b'@'
            )
    })
}

/// Go's `getScheme`.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        if c.is_ascii_alphabetic() {
            continue;
        }
        if c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.') {
            if i == 0 {
                return Ok(("", raw));
            }
            continue;
        }
        if c == b':' {
            if i == 0 {
                return Err("missing protocol scheme".to_string());
            }
            return Ok((&raw[..i], &raw[i + 1..]));
        }
        return Ok(("", raw));
    }
    Ok(("", raw))
}

/// Go's `url.parse(raw, viaRequest)`, without the error wrapping.
fn parse_inner(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_string());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = "*".to_string();
        return Ok(url);
    }
    let (scheme, rest) = split_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        url.raw_query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_string());
        }
        let segment = rest.split('/').next().unwrap_or("");
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///"))
        && rest.starts_with("//")
    {
        let after = &rest[2..];
        let (authority, tail) = match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        };
        let host_part = match authority.rfind('@') {
            Some(i) => {
                if !valid_userinfo(&authority[..i]) {
                    return Err("net/url: invalid userinfo".to_string());
                }
                &authority[i + 1..]
            }
            None => authority,
        };
        url.host = parse_host(host_part)?;
        rest = tail;
    }
    url.path = unescape(rest, Mode::Path)?;
    if escape_path(&url.path) != rest {
        url.raw_path = rest.to_string();
    }
    Ok(url)
}

/// Go's `url.ParseRequestURI`.
pub(crate) fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse_inner(raw, true).map_err(|e| format!("parse {}: {e}", go_quote(raw)))
}

/// Go's `url.Parse`.
fn parse(raw: &str) -> Result<Url, String> {
    let without_fragment = raw.split_once('#').map_or(raw, |(u, _)| u);
    parse_inner(without_fragment, false)
        .map_err(|e| format!("parse {}: {e}", go_quote(without_fragment)))
}

/// Go's `url.ParseQuery`, skipping malformed pairs as `URL.Query` does; keys in order of
/// first appearance.
fn parse_query(raw: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for pair in raw.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Ok(k), Ok(v)) = (unescape(k, Mode::Query), unescape(v, Mode::Query)) else {
            continue;
        };
        match out.iter_mut().find(|(key, _)| *key == k) {
            Some((_, values)) => values.push(v),
            None => out.push((k, vec![v])),
        }
    }
    out
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    let url = || URL_TYPE.to_owned();
    env.add_member_overload("getScheme", "url_get_scheme", url(), vec![], get_scheme)?;
    env.add_member_overload("getHost", "url_get_host", url(), vec![], get_host)?;
    env.add_member_overload(
        "getHostname",
        "url_get_hostname",
        url(),
        vec![],
        get_hostname,
    )?;
    env.add_member_overload("getPort", "url_get_port", url(), vec![], get_port)?;
    env.add_member_overload(
        "getEscapedPath",
        "url_get_escaped_path",
        url(),
        vec![],
        get_escaped_path,
    )?;
    env.add_member_overload("getQuery", "url_get_query", url(), vec![], get_query)?;
    Ok(())
}

fn to_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    parse_request_uri(s).map_err(|e| {
        error(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    })?;
    let url = parse(s).map_err(|e| {
        error(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    })?;
    Ok(CowVal::owned(url))
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(boolean(parse_request_uri(s).is_ok()))
}

fn getter<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    f: impl FnOnce(&Url) -> String,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [u] = take(args)?;
    cel_cost::charge(1)?;
    Ok(string(f(arg::<Url>(u.as_ref())?)))
}

fn get_scheme<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    getter(args, |u| u.scheme.clone())
}

fn get_host<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    getter(args, |u| u.host.clone())
}

fn get_hostname<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    getter(args, |u| u.hostname().to_string())
}

fn get_port<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    getter(args, |u| u.port().to_string())
}

fn get_escaped_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    getter(args, Url::escaped_path)
}

fn get_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [u] = take(args)?;
    let u = arg::<Url>(u.as_ref())?;
    cel_cost::charge(1 + cel_cost::string_traversal(u.raw_query.len() as u64))?;
    let mut map: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = HashMap::new();
    for (k, values) in parse_query(&u.raw_query) {
        let list: Vec<Box<dyn Val + 'v>> = values
            .into_iter()
            .map(|v| Box::new(CelString::from(v)) as Box<dyn Val + 'v>)
            .collect();
        map.insert(CelMapKey::from(k), Box::new(CelList::from(list)));
    }
    Ok(CowVal::owned(CelMap::from(map)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/urls_test.go`.
    #[test]
    fn url_parts_read_as_go_splits_them() {
        let u = "url('https://user:pass@kubernetes.io:80/path?query=val#fragment')";
        assert_true(&format!("{u}.getScheme() == 'https'"));
        assert_true(&format!("{u}.getHost() == 'kubernetes.io:80'"));
        assert_true(&format!("{u}.getHostname() == 'kubernetes.io'"));
        assert_true(&format!("{u}.getPort() == '80'"));
        assert_true(&format!("{u}.getEscapedPath() == '/path'"));
        assert_true(&format!("{u}.getQuery() == {{'query': ['val']}}"));
    }

    #[test]
    fn ipv6_hosts_keep_brackets_in_host_only() {
        assert_true("url('https://[::1]:80/').getHost() == '[::1]:80'");
        assert_true("url('https://[::1]:80/').getHostname() == '::1'");
        assert_true("url('https://[::1]:80/').getPort() == '80'");
        assert_true("url('https://[::1]/').getPort() == ''");
        assert_true("url('https://kubernetes.io/').getPort() == ''");
    }

    #[test]
    fn paths_and_queries() {
        assert_true("url('/path').getScheme() == ''");
        assert_true("url('/path').getHost() == ''");
        assert_true(
            "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'",
        );
        assert_true(
            "url('https://example.com/path%20with%20spaces/').getEscapedPath() == '/path%20with%20spaces/'",
        );
        assert_true(
            "url('https://example.com/?k=a&k=b&x=1').getQuery() == {'k': ['a', 'b'], 'x': ['1']}",
        );
        assert_true("url('https://example.com/?k=a+b').getQuery().k[0] == 'a b'");
        assert_true("url('https://example.com/').getQuery() == {}");
    }

    #[test]
    fn is_url_follows_parse_request_uri() {
        assert_true("isURL('https://kubernetes.io/')");
        assert_true("isURL('https://kubernetes.io:80/path')");
        assert_true("isURL('/absolute-path')");
        assert_true("isURL('mailto:someone@example.com')");
        assert_true("!isURL('kubernetes.io')");
        assert_true("!isURL('../relative-path')");
        assert_true("!isURL('')");
        assert_true("!isURL('https://kubernetes.io:foo/')");
        assert_true("!isURL('https://[::1/')");
        assert_true("!isURL('https://kubernetes.io/%zz')");
        assert_true("!isURL('https://kube rnetes.io/')");
    }

    #[test]
    fn url_of_an_invalid_string_is_an_error() {
        assert_error(
            "url('../relative-path')",
            "URL parse error during conversion from string: parse \"../relative-path\": invalid URI for request",
        );
        assert_true("url('https://a.io/') == url('https://a.io/')");
    }
}
