//! The two exposition formats of a scrape and the choice between them, as client_golang's
//! `promhttp` handler with `EnableOpenMetrics` makes it (`expfmt.NegotiateIncludingOpenMetrics`):
//! the OpenMetrics text format 1.0.0 when the scraper prefers `application/openmetrics-text`,
//! otherwise the Prometheus text format 0.0.4.
//!
//! prometheus-client encodes OpenMetrics only; [`openmetrics_to_text`] derives the 0.0.4 form
//! from it. The two differ in a few places: a counter family is named without `_total` in
//! OpenMetrics and with it in 0.0.4 (its samples are `…_total` in both) and its `_created`
//! samples exist only in OpenMetrics; OpenMetrics has `# UNIT` lines and an `# EOF` terminator;
//! its `unknown` type is 0.0.4's `untyped`, and its `info` type a gauge named `…_info`.

/// `Content-Type` of the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of the OpenMetrics text format 1.0.0.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The two text formats a scrape can get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpositionFormat {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

impl ExpositionFormat {
    /// Chooses as `expfmt.NegotiateIncludingOpenMetrics` does: of the media ranges of `accept`
    /// in order of preference ([`crate::accept::preferred`]), the first that names a format
    /// served decides — `text/plain` (version 0.0.4 or none) or `application/openmetrics-text`
    /// (versions 0.0.1 and 1.0.0, or none); the text format when none does. Ranges with `q=0`
    /// are refusals and are passed over (upstream reads them as preferences of the lowest
    /// rank).
    pub fn negotiate(accept: Option<&str>) -> ExpositionFormat {
        accept
            .map(crate::accept::preferred)
            .unwrap_or_default()
            .iter()
            .find_map(|range| {
                let version = range.param("version");
                if range.is("text", "plain") && matches!(version, "" | "0.0.4") {
                    Some(ExpositionFormat::Text)
                } else if range.is("application", "openmetrics-text")
                    && matches!(version, "" | "0.0.1" | "1.0.0")
                {
                    Some(ExpositionFormat::OpenMetrics)
                } else {
                    None
                }
            })
            .unwrap_or(ExpositionFormat::Text)
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            ExpositionFormat::Text => TEXT_CONTENT_TYPE,
            ExpositionFormat::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// Rewrites prometheus-client's OpenMetrics exposition in the Prometheus text format 0.0.4: a
/// counter's family takes its samples' `_total` name in `# HELP`/`# TYPE`, its `_created`
/// samples are dropped, `unknown` is `untyped`, `info` a gauge named `_info`, and
/// `# UNIT`/`# EOF` go. Gauges, histograms and label escaping are the same in both.
pub fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len() + 512);
    // A `# HELP` line waits for its `# TYPE`, which tells how to name the family.
    let mut help: Option<(&str, &str)> = None;
    // The family whose `_created` samples are dropped.
    let mut counter: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, text)) = help.replace(rest.split_once(' ').unwrap_or((rest, ""))) {
                push_help(&mut out, name, "", text);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                "unknown" => ("", "untyped"),
                other => ("", other),
            };
            if let Some((_, text)) = help.take() {
                push_help(&mut out, name, suffix, text);
            }
            out.push_str("# TYPE ");
            out.push_str(name);
            out.push_str(suffix);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
            counter = (kind == "counter").then_some(name);
            continue;
        }
        if let Some((name, text)) = help.take() {
            push_help(&mut out, name, "", text);
        }
        if let Some(name) = counter
            && line
                .strip_prefix(name)
                .is_some_and(|r| r.starts_with("_created{") || r.starts_with("_created "))
        {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some((name, text)) = help {
        push_help(&mut out, name, "", text);
    }
    out
}

/// Writes `# HELP <name><suffix> <text>`.
fn push_help(out: &mut String, name: &str, suffix: &str, text: &str) {
    out.push_str("# HELP ");
    out.push_str(name);
    out.push_str(suffix);
    out.push(' ');
    out.push_str(text);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::ExpositionFormat::{OpenMetrics, Text};
    use super::*;

    #[test]
    fn openmetrics_is_chosen_only_when_preferred() {
        // (Accept, format) — upstream's choices for the headers scrapers send.
        let cases = [
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("application/json, */*"), Text),
            (Some("application/openmetrics-text"), OpenMetrics),
            (
                Some("application/openmetrics-text; version=0.0.1"),
                OpenMetrics,
            ),
            // Prometheus' own scrape header.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            (
                Some("text/plain;version=0.0.4,application/openmetrics-text;q=0.5"),
                Text,
            ),
            // A preferred range naming no format served does not decide.
            (Some("*/*,application/openmetrics-text;q=0.5"), OpenMetrics),
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (
                Some("text/plain;version=1.0.0,application/openmetrics-text;q=0.1"),
                OpenMetrics,
            ),
            // A refusal is no preference.
            (Some("application/openmetrics-text;q=0"), Text),
            // Ties go to the range listed first.
            (Some("application/openmetrics-text,text/plain"), OpenMetrics),
            (Some("text/plain,application/openmetrics-text"), Text),
        ];
        for (accept, want) in cases {
            assert_eq!(
                ExpositionFormat::negotiate(accept),
                want,
                "Accept: {accept:?}"
            );
        }
    }

    #[test]
    fn content_types_name_the_format_and_version() {
        assert_eq!(Text.content_type(), TEXT_CONTENT_TYPE);
        assert_eq!(OpenMetrics.content_type(), OPENMETRICS_CONTENT_TYPE);
    }

    #[test]
    fn counters_take_their_sample_name_in_the_text_format() {
        let om = "# HELP a_things Things.\n# TYPE a_things counter\n# UNIT a_things things\na_things_total{x=\"1\"} 2\na_things_created{x=\"1\"} 1.5e9\n# HELP b Bees.\n# TYPE b gauge\nb 1\n# TYPE c unknown\nc 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP a_things_total Things.\n# TYPE a_things_total counter\na_things_total{x=\"1\"} 2\n# HELP b Bees.\n# TYPE b gauge\nb 1\n# TYPE c untyped\nc 3\n"
        );
    }

    #[test]
    fn unit_lines_are_dropped_and_unknown_is_untyped() {
        let om = "# HELP t Time.\n# TYPE t_seconds unknown\n# UNIT t_seconds seconds\nt_seconds 1\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP t_seconds Time.\n# TYPE t_seconds untyped\nt_seconds 1\n"
        );
    }

    #[test]
    fn info_families_are_gauges_and_help_without_type_is_kept() {
        let om = "# HELP build Build.\n# TYPE build info\nbuild_info{v=\"1\"} 1\n# HELP lone Alone.\nlone 2\n# HELP last Last.\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP build_info Build.\n# TYPE build_info gauge\nbuild_info{v=\"1\"} 1\n# HELP lone Alone.\nlone 2\n# HELP last Last.\n"
        );
    }
}
