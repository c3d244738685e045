//! The string formats kube-apiserver checks in custom resources.
//!
//! Upstream strips every format outside a fixed list before validating
//! (`StripUnsupportedFormatsPostProcess`, `pkg/apiserver/validation/formats.go`), so `int32`,
//! `int64`, `float`, `double` and anything unknown are not checked at all. The rest are checked
//! with kube-openapi's `strfmt` registry (`pkg/validation/strfmt/default.go`), whose names are
//! normalised by dropping dashes (`date-time` is `datetime`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use regex::Regex;

/// A format upstream validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    BsonObjectId,
    Uri,
    Email,
    Hostname,
    Ipv4,
    Ipv6,
    Cidr,
    Mac,
    Uuid,
    Uuid3,
    Uuid4,
    Uuid5,
    Isbn,
    Isbn10,
    Isbn13,
    CreditCard,
    Ssn,
    HexColor,
    RgbColor,
    Byte,
    Password,
    Date,
    Duration,
    DateTime,
}

impl Format {
    /// The format named `name` if upstream checks it (after dropping dashes).
    pub fn supported(name: &str) -> Option<Format> {
        let normalized = name.replace('-', "");
        Some(match normalized.as_str() {
            "bsonobjectid" => Format::BsonObjectId,
            "uri" => Format::Uri,
            "email" => Format::Email,
            "hostname" => Format::Hostname,
            "ipv4" => Format::Ipv4,
            "ipv6" => Format::Ipv6,
            "cidr" => Format::Cidr,
            "mac" => Format::Mac,
            "uuid" => Format::Uuid,
            "uuid3" => Format::Uuid3,
            "uuid4" => Format::Uuid4,
            "uuid5" => Format::Uuid5,
            "isbn" => Format::Isbn,
            "isbn10" => Format::Isbn10,
            "isbn13" => Format::Isbn13,
            "creditcard" => Format::CreditCard,
            "ssn" => Format::Ssn,
            "hexcolor" => Format::HexColor,
            "rgbcolor" => Format::RgbColor,
            "byte" => Format::Byte,
            "password" => Format::Password,
            "date" => Format::Date,
            "duration" => Format::Duration,
            "datetime" => Format::DateTime,
            _ => return None,
        })
    }

    /// Whether `s` is valid in this format.
    pub fn validates(self, s: &str) -> bool {
        match self {
            Format::BsonObjectId => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
            Format::Uri => is_request_uri(s),
            Format::Email => is_email(s),
            Format::Hostname => is_hostname(s),
            Format::Ipv4 => parse_ip_sloppy(s).is_some() && s.contains('.'),
            Format::Ipv6 => s.parse::<Ipv6Addr>().is_ok(),
            Format::Cidr => is_cidr(s),
            Format::Mac => is_mac(s),
            Format::Uuid => matches(s, 0),
            Format::Uuid3 => matches(s, 1),
            Format::Uuid4 => matches(s, 2),
            Format::Uuid5 => matches(s, 3),
            Format::Isbn => is_isbn10(s) || is_isbn13(s),
            Format::Isbn10 => is_isbn10(s),
            Format::Isbn13 => is_isbn13(s),
            Format::CreditCard => is_credit_card(s),
            Format::Ssn => matches(s, 4),
            Format::HexColor => matches(s, 5),
            Format::RgbColor => matches(s, 6),
            Format::Byte => matches(s, 7),
            Format::Password => true,
            Format::Date => is_date(s),
            Format::Duration => is_duration(s),
            Format::DateTime => is_date_time(s),
        }
    }
}

/// The fixed regexes of strfmt and govalidator, compiled once.
fn regexes() -> &'static [Option<Regex>] {
    static RES: OnceLock<Vec<Option<Regex>>> = OnceLock::new();
    RES.get_or_init(|| {
        [
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            r"^[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}$",
            r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$",
            r"^rgb\(\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*\)$",
            r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
            r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
            r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
            // RE2's `\d` and `\s` are ASCII only.
            r"(([0-9]+)[\t\n\f\r ]*([A-Za-zµ]+))",
        ]
        .iter()
        .map(|p| Regex::new(p).ok())
        .collect()
    })
}

fn matches(s: &str, i: usize) -> bool {
    regexes()
        .get(i)
        .and_then(Option::as_ref)
        .is_some_and(|re| re.is_match(s))
}

/// strfmt `IsHostname`: the regex, at most 255 bytes, labels of at most 63.
fn is_hostname(s: &str) -> bool {
    matches(s, 8) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// Go's `net/url.ParseRequestURI` succeeding: an absolute URI (`scheme:…`) or an absolute path,
/// no fragment handling, no control characters or spaces in the host.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    let (scheme, rest) = match scheme_split(s) {
        Ok(Some(parts)) => parts,
        Ok(None) => {
            // No scheme: only an absolute path is a request URI.
            return s.starts_with('/') && valid_escapes(s);
        }
        Err(()) => return false,
    };
    if scheme.is_empty() {
        return false;
    }
    if let Some(after) = rest.strip_prefix("//") {
        let authority_end = after.find(['/', '?']).unwrap_or(after.len());
        let authority = &after[..authority_end];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host.contains(' ') {
            return false;
        }
        if let Some(port_part) = host.strip_prefix('[') {
            // `[ipv6]:port`
            let Some((ip, tail)) = port_part.split_once(']') else {
                return false;
            };
            if ip
                .split('%')
                .next()
                .and_then(|p| p.parse::<Ipv6Addr>().ok())
                .is_none()
            {
                return false;
            }
            if !(tail.is_empty()
                || tail
                    .strip_prefix(':')
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit())))
            {
                return false;
            }
        } else if let Some((_, port)) = host.rsplit_once(':')
            && !port.bytes().all(|b| b.is_ascii_digit())
        {
            return false;
        }
    }
    valid_escapes(rest)
}

/// Go's `getScheme`: `Ok(None)` when there is no scheme, `Err` when the first character makes
/// the URI invalid ("missing protocol scheme").
fn scheme_split(s: &str) -> Result<Option<(&str, &str)>, ()> {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' => {
                if i == 0 {
                    return Err(());
                }
                return Ok(Some((&s[..i], &s[i + 1..])));
            }
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// Go's `net/mail.ParseAddress` accepting the string, approximately: an optional display name
/// with the address in angle brackets, or a bare `local@domain` whose local part is a dot-atom
/// or quoted string and whose domain is a dot-atom or a literal.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.ends_with('>')) {
        (Some(i), true) => &s[i + 1..s.len() - 1],
        (None, false) => s,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    let dot_atom =
        |p: &str| !p.is_empty() && p.split('.').all(|a| !a.is_empty() && a.chars().all(atext));
    let local_ok = if local.len() >= 2 && local.starts_with('"') && local.ends_with('"') {
        true
    } else {
        dot_atom(local)
    };
    let domain_ok = (domain.starts_with('[') && domain.ends_with(']')) || dot_atom(domain);
    local_ok && domain_ok
}

/// Go's `netutils.ParseIPSloppy`: IPv4 dotted quads may have leading zeros.
fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if s.contains(':') {
        return None;
    }
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        octets[i] = p.parse::<u8>().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(octets)))
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Some(addr) = parse_ip_sloppy(ip) else {
        return false;
    };
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let max = if addr.is_ipv4() { 32 } else { 128 };
    bits.parse::<u32>().is_ok_and(|n| n <= max)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets separated by `:` or `-`, or groups of four hex digits
/// separated by `.`.
fn is_mac(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let ok_count = |n: usize| n == 6 || n == 8 || n == 20;
    if s.contains('.') {
        let groups: Vec<&str> = s.split('.').collect();
        return ok_count(groups.len() * 2) && groups.iter().all(|g| hex(g, 4));
    }
    for sep in [':', '-'] {
        if s.contains(sep) {
            let parts: Vec<&str> = s.split(sep).collect();
            return ok_count(parts.len()) && parts.iter().all(|p| hex(p, 2));
        }
    }
    false
}

fn is_isbn10(s: &str) -> bool {
    let d: Vec<char> = s.chars().filter(|c| *c != ' ' && *c != '-').collect();
    if d.len() != 10 {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in d.iter().enumerate() {
        let v = match c.to_digit(10) {
            Some(v) if i < 10 => v,
            None if i == 9 && *c == 'X' => 10,
            _ => return false,
        };
        sum += (i as u32 + 1) * v;
    }
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let d: Vec<u32> = s
        .chars()
        .filter(|c| *c != ' ' && *c != '-')
        .map(|c| c.to_digit(10).unwrap_or(99))
        .collect();
    if d.len() != 13 || d.iter().any(|v| *v > 9) {
        return false;
    }
    let sum: u32 = d[..12]
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { *v } else { v * 3 })
        .sum();
    (10 - sum % 10) % 10 == d[12]
}

/// govalidator `IsCreditCard`: digits (other characters dropped) matching a card prefix, and
/// the Luhn checksum.
fn is_credit_card(s: &str) -> bool {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    let re = RE.get_or_init(|| {
        Regex::new(r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35[0-9]{3})[0-9]{11}|6[27][0-9]{14})$").ok()
    });
    if !re.as_ref().is_some_and(|re| re.is_match(&digits)) {
        return false;
    }
    let mut sum = 0;
    for (i, c) in digits.bytes().rev().enumerate() {
        let mut v = u32::from(c - b'0');
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum % 10 == 0
}

/// `time.Parse("2006-01-02", s)`: four-digit year, two-digit month and day, a real date.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`: a date, a `t` (any case), then `hh:mm:ss[.frac](z|±hh:mm)`.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(re) = regexes().get(9).and_then(Option::as_ref) else {
        return false;
    };
    let Some(caps) = re.captures(parts[1]) else {
        return false;
    };
    let get = |i: usize| caps.get(i).map_or("", |m| m.as_str());
    get(1) <= "23" && get(2) <= "59" && get(3) <= "59"
}

/// strfmt `IsDuration`: [`parse_duration`] reads it.
fn is_duration(s: &str) -> bool {
    parse_duration(s).is_some()
}

/// strfmt `ParseDuration`, in signed nanoseconds: Go's `time.ParseDuration`, or else every
/// `<n> <unit>` pair in Scala's style (`3 days`, `22 ns`, `1 week`) summed, wrapping on
/// overflow as Go's `time.Duration` arithmetic does. `None` when neither reads `s` (or a count
/// does not fit in an `i64`, strfmt's `strconv.Atoi` error). This is how kube-apiserver reads a
/// `format: duration` string both to validate it and to give it to CEL as a duration.
pub(crate) fn parse_duration(s: &str) -> Option<i64> {
    if let Ok(nanos) = crate::time::parse_go_duration(s) {
        return Some(nanos);
    }
    let re = regexes().get(10).and_then(Option::as_ref)?;
    const SECOND: i64 = 1_000_000_000;
    // strfmt's `timeUnits`: the last spelling of each also matches as a prefix (`minutes`).
    const UNITS: [(&[&str], i64); 8] = [
        (&["ns", "nano"], 1),
        (&["us", "µs", "micro"], 1_000),
        (&["ms", "milli"], 1_000_000),
        (&["s", "sec"], SECOND),
        (&["m", "min"], 60 * SECOND),
        (&["h", "hr", "hour"], 3_600 * SECOND),
        (&["d", "day"], 86_400 * SECOND),
        (&["w", "wk", "week"], 7 * 86_400 * SECOND),
    ];
    let mut total: i64 = 0;
    let mut ok = false;
    for caps in re.captures_iter(s) {
        let count: i64 = caps.get(2)?.as_str().parse().ok()?;
        let unit = caps.get(3).map_or("", |m| m.as_str()).trim().to_lowercase();
        for (variants, multiplier) in UNITS {
            let last = variants.len() - 1;
            for (i, v) in variants.iter().enumerate() {
                if (i == last && unit.starts_with(v)) || *v == unit {
                    ok = true;
                    total = total.wrapping_add(count.wrapping_mul(multiplier));
                }
            }
        }
    }
    ok.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_accept_and_reject_like_strfmt() {
        let cases: &[(Format, &str, bool)] = &[
            (Format::DateTime, "2024-01-02T03:04:05Z", true),
            (Format::DateTime, "2024-01-02T03:04:05.123+02:00", true),
            (Format::DateTime, "2024-01-02 03:04:05", false),
            (Format::DateTime, "2024-13-02T03:04:05Z", false),
            (Format::Date, "2024-02-29", true),
            (Format::Date, "2023-02-29", false),
            (Format::Byte, "aGVsbG8=", true),
            (Format::Byte, "not base64!", false),
            (Format::Uri, "https://example.com/a?b=c", true),
            (Format::Uri, "/just/a/path", true),
            (Format::Uri, "relative/path", false),
            (Format::Uri, "http://exa mple.com", false),
            (Format::Email, "admin@example.com", true),
            (Format::Email, "Admin <admin@example.com>", true),
            (Format::Email, "not-an-email", false),
            (Format::Hostname, "example.com", true),
            (Format::Hostname, "-bad-.com", false),
            (Format::Ipv4, "10.0.0.1", true),
            (Format::Ipv4, "010.0.0.1", true),
            (Format::Ipv4, "::1", false),
            (Format::Ipv6, "::1", true),
            (Format::Cidr, "10.0.0.0/8", true),
            (Format::Cidr, "10.0.0.0/33", false),
            (Format::Mac, "01:23:45:67:89:ab", true),
            (Format::Mac, "0123.4567.89ab", true),
            (Format::Mac, "01:23:45", false),
            (Format::Uuid, "244818ae-87ac-4fcd-92ec-e79e5252348a", true),
            (Format::Uuid4, "244818ae-87ac-3fcd-92ec-e79e5252348a", false),
            (Format::Duration, "1h30m", true),
            (Format::Duration, "3 days", true),
            (Format::Duration, "soon", false),
            (Format::Duration, "99999999999999999999h", false),
            (Format::Isbn10, "0321751043", true),
            (Format::Isbn13, "978-0321751041", true),
            (Format::CreditCard, "4111 1111 1111 1111", true),
            (Format::CreditCard, "4111 1111 1111 1112", false),
            (Format::HexColor, "#ffF", true),
            (Format::RgbColor, "rgb(255, 0, 10)", true),
            (Format::Ssn, "123-45-6789", true),
            (Format::BsonObjectId, "507f1f77bcf86cd799439011", true),
        ];
        for (f, s, want) in cases {
            assert_eq!(f.validates(s), *want, "{f:?} {s:?}");
        }
        assert_eq!(Format::supported("date-time"), Some(Format::DateTime));
        const SECOND: i64 = 1_000_000_000;
        assert_eq!(parse_duration("1h30m"), Some(5_400 * SECOND));
        assert_eq!(parse_duration("3 days"), Some(3 * 86_400 * SECOND));
        assert_eq!(
            parse_duration("1 week 2 hours"),
            Some((7 * 24 + 2) * 3_600 * SECOND)
        );
        assert_eq!(parse_duration("5 minutes"), Some(300 * SECOND));
        assert_eq!(parse_duration("١ day"), None);
        assert_eq!(Format::supported("int32"), None);
        assert_eq!(Format::supported("int-or-string"), None);
    }
}
