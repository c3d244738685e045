//! Writing a prometheus-client registry out as a scrape response, with the content negotiation of
//! client_golang's `promhttp` handler (which the kubelet's endpoints use): the OpenMetrics text
//! format 1.0.0 when the scraper's `Accept` asks for `application/openmetrics-text`, otherwise
//! the Prometheus text format 0.0.4.
//!
//! prometheus-client encodes OpenMetrics only; the 0.0.4 form is derived from it. The two
//! differ in three places: a counter family is named without `_total` in OpenMetrics and with it
//! in 0.0.4 (its samples are `…_total` in both), OpenMetrics has `# UNIT` lines and an `# EOF`
//! terminator, and its `unknown` type is 0.0.4's `untyped`.

use prometheus_client::registry::Registry;

/// `Content-Type` of the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of the OpenMetrics text format 1.0.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics (Prometheus sends
/// `application/openmetrics-text;version=1.0.0,…;q=0.5,text/plain;version=0.0.4;q=0.3,…`).
pub fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut params = range.split(';').map(str::trim);
        let media = params.next().unwrap_or("");
        let refused = params.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
    })
}

/// `registry` encoded for a scraper whose `Accept` header is `accept`: the content type and the
/// body.
pub fn encode(
    registry: &Registry,
    accept: &str,
) -> Result<(&'static str, String), std::fmt::Error> {
    let mut openmetrics = String::new();
    prometheus_client::encoding::text::encode(&mut openmetrics, registry)?;
    if wants_openmetrics(accept) {
        Ok((OPENMETRICS_CONTENT_TYPE, openmetrics))
    } else {
        Ok((TEXT_CONTENT_TYPE, to_text_format(&openmetrics)))
    }
}

/// The Prometheus text format 0.0.4 form of an OpenMetrics exposition written by
/// prometheus-client.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A `# HELP` line waits for its `# TYPE`, which tells how to name the family.
    let mut help: Option<(&str, &str)> = None;
    let push_help = |out: &mut String, name: &str, text: &str| {
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    };
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, text)) = help.take() {
                push_help(&mut out, name, text);
            }
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            if let Some((_, text)) = help.take() {
                push_help(&mut out, &name, text);
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            continue;
        }
        if let Some((name, text)) = help.take() {
            push_help(&mut out, name, text);
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some((name, text)) = help {
        push_help(&mut out, name, text);
    }
    out
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;

    use super::*;

    #[test]
    fn the_text_format_names_counter_families_with_total_and_has_no_eof() {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        counter.inc_by(3);
        registry.register("requests", "Requests served", counter);
        let gauge: Gauge = Gauge::default();
        gauge.set(7);
        registry.register("in_flight", "Requests in flight", gauge);

        let (content_type, text) = encode(&registry, "text/plain").expect("encodes");
        assert_eq!(content_type, TEXT_CONTENT_TYPE);
        assert_eq!(
            text,
            "# HELP requests_total Requests served.\n\
             # TYPE requests_total counter\n\
             requests_total 3\n\
             # HELP in_flight Requests in flight.\n\
             # TYPE in_flight gauge\n\
             in_flight 7\n"
        );

        let (content_type, om) = encode(
            &registry,
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .expect("encodes");
        assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
        assert!(
            om.contains("# TYPE requests counter\nrequests_total 3\n"),
            "{om}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");
    }

    #[test]
    fn openmetrics_is_chosen_only_when_asked_for_and_not_refused() {
        assert!(wants_openmetrics(
            "application/openmetrics-text; version=0.0.1"
        ));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics(""));
    }

    #[test]
    fn unit_lines_are_dropped_and_unknown_is_untyped() {
        let om = "# HELP t Time.\n# TYPE t_seconds unknown\n# UNIT t_seconds seconds\nt_seconds 1\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# HELP t_seconds Time.\n# TYPE t_seconds untyped\nt_seconds 1\n"
        );
    }
}
