//! The `Accept` header as content negotiation reads it: goautoneg's `ParseAccept`, which
//! client_golang's `expfmt.Negotiate` (metrics scrapes) and kube-openapi's
//! `RegisterOpenAPIVersionedService` (`/openapi/v2`) both sort clauses with. Each caller then
//! takes the first clause that names something it serves.

/// One media range of an `Accept` header (`application/openmetrics-text;version=1.0.0;q=0.5`).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaRange<'a> {
    /// The type (`application`, or `*`), as written.
    pub type_: &'a str,
    /// The subtype (`json`, or `*`), as written.
    pub subtype: &'a str,
    /// The weight: 1 unless a `q` parameter says otherwise.
    pub q: f32,
    /// The other parameters, in order, keys and values trimmed.
    pub params: Vec<(&'a str, &'a str)>,
}

impl MediaRange<'_> {
    /// The value of parameter `key` (case-insensitive), or "" when it is absent.
    pub fn param(&self, key: &str) -> &str {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map_or("", |(_, v)| v)
    }

    /// Whether parameter `key` (case-insensitive) is present, even with an empty value.
    pub fn has_param(&self, key: &str) -> bool {
        self.params.iter().any(|(k, _)| k.eq_ignore_ascii_case(key))
    }

    /// Whether the range is exactly `type_/subtype` (case-insensitive, no wildcards).
    pub fn is(&self, type_: &str, subtype: &str) -> bool {
        self.type_.eq_ignore_ascii_case(type_) && self.subtype.eq_ignore_ascii_case(subtype)
    }

    /// Whether the range accepts `type_/subtype`, wildcards included (`*/*`, `application/*`).
    pub fn accepts(&self, type_: &str, subtype: &str) -> bool {
        (self.type_ == "*" || self.type_.eq_ignore_ascii_case(type_))
            && (self.subtype == "*" || self.subtype.eq_ignore_ascii_case(subtype))
    }
}

/// The media ranges of `accept` in order of preference: by `q`, then the more specific first
/// (no wildcard type, then no wildcard subtype), then as listed. Unlike goautoneg, a range with
/// `q=0` is a refusal and is left out, as is one that is not `type/subtype` or whose `q` is not a
/// number.
pub fn preferred(accept: &str) -> Vec<MediaRange<'_>> {
    let mut ranges: Vec<MediaRange<'_>> = accept
        .split(',')
        .filter_map(|clause| {
            let mut parts = clause.split(';');
            let (type_, subtype) = parts.next()?.trim().split_once('/')?;
            let mut q = 1.0f32;
            let mut params = Vec::new();
            let mut q_seen = false;
            for p in parts {
                let Some((k, v)) = p.split_once('=') else {
                    params.push((p.trim(), ""));
                    continue;
                };
                let (k, v) = (k.trim(), v.trim());
                if k.eq_ignore_ascii_case("q") {
                    if !q_seen {
                        q = v.parse().ok()?;
                        q_seen = true;
                    }
                } else {
                    params.push((k, v));
                }
            }
            (q > 0.0).then_some(MediaRange {
                type_: type_.trim(),
                subtype: subtype.trim(),
                q,
                params,
            })
        })
        .collect();
    // A stable sort: ranges of equal weight and specificity keep the client's order.
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| (a.type_ == "*").cmp(&(b.type_ == "*")))
            .then_with(|| (a.subtype == "*").cmp(&(b.subtype == "*")))
    });
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(accept: &str) -> Vec<String> {
        preferred(accept)
            .iter()
            .map(|r| format!("{}/{}", r.type_, r.subtype))
            .collect()
    }

    #[test]
    fn ranges_are_ordered_by_weight_then_specificity_then_as_listed() {
        assert_eq!(
            order("*/*;q=0.5, text/*;q=0.5, text/plain;q=0.5, application/json"),
            ["application/json", "text/plain", "text/*", "*/*"]
        );
        assert_eq!(order("a/b, c/d"), ["a/b", "c/d"]);
        assert_eq!(order("a/b;q=0.1, c/d;q=0.9"), ["c/d", "a/b"]);
    }

    #[test]
    fn refusals_and_malformed_ranges_are_left_out() {
        assert_eq!(order("a/b;q=0, c/d;Q=x, text, , e/f"), ["e/f"]);
        assert!(preferred("").is_empty());
    }

    #[test]
    fn parameters_and_matching_ignore_case_and_spaces() {
        let r = &preferred(" Application/OpenMetrics-Text ; Version = 1.0.0 ; q=0.5")[0];
        assert!(r.is("application", "openmetrics-text"));
        assert_eq!(r.param("version"), "1.0.0");
        assert_eq!(r.param("charset"), "");
        assert!(r.has_param("VERSION") && !r.has_param("charset"));
        assert!(preferred("a/b;as=")[0].has_param("as"));
        assert_eq!(r.q, 0.5);
        let any = &preferred("*/*")[0];
        assert!(any.accepts("application", "json") && !any.is("application", "json"));
        assert!(preferred("application/*")[0].accepts("application", "json"));
        assert!(!preferred("text/*")[0].accepts("application", "json"));
    }
}
