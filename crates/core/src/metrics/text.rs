//! A reader of the Prometheus text exposition format (version 0.0.4): what the API server's
//! resource metrics scraper reads from node agents (metrics-server decodes the kubelet's
//! `/metrics/resource` with `prometheus/common/expfmt`'s text parser, and this follows the same
//! grammar: `# HELP`/`# TYPE` comments, `name{label="value",…} value [timestamp]` samples, label
//! values with `\\`, `\"` and `\n` escapes, `NaN` and `±Inf` values), and what tests read
//! scrapes with.
//!
//! A malformed line is an error naming its line number; nothing in a body is trusted.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the line carries one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`, or "".
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map(String::as_str).unwrap_or("")
    }
}

/// Why a body is not the text format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("text format parsing error in line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

/// Every sample of `body`, in order. Comments and blank lines are skipped.
pub fn parse(body: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in body.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_line(line).map_err(|reason| ParseError {
            line: i + 1,
            reason,
        })?;
        samples.push(sample);
    }
    Ok(samples)
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    is_name_start(c) || c.is_ascii_digit()
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .char_indices()
        .find(|&(_, c)| !is_name_char(c))
        .map(|(i, _)| i)
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !name.starts_with(is_name_start) {
        return Err(format!("invalid metric name in {line:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or_else(|| format!("expected a value after {name:?}"))?;
    let value = parse_value(value)?;
    let timestamp_ms = fields
        .next()
        .map(|t| {
            t.parse::<i64>()
                .map_err(|_| format!("expected an integer timestamp, got {t:?}"))
        })
        .transpose()?;
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the timestamp"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Reads `label="value",…}` into `labels`; returns what follows the closing brace.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let name_end = s
            .char_indices()
            .find(|&(_, c)| !is_name_char(c) || c == ':')
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        let name = &s[..name_end];
        if name.is_empty() || !name.starts_with(is_name_start) {
            return Err(format!("invalid label name at {s:?}"));
        }
        s = s[name_end..].trim_start();
        s = s
            .strip_prefix('=')
            .ok_or_else(|| format!("expected '=' after label {name:?}"))?
            .trim_start();
        s = s
            .strip_prefix('"')
            .ok_or_else(|| format!("expected '\"' to open the value of label {name:?}"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated value of label {name:?}")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => {
                        return Err(format!(
                            "invalid escape {:?} in label {name:?}",
                            other.map(|(_, c)| c)
                        ));
                    }
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name:?} given twice"));
        }
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err(format!("expected ',' or '}}' after label {name:?}"));
        }
    }
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => s
            .parse::<f64>()
            .map_err(|_| format!("expected a float value, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn reads_the_kubelet_resource_metrics_shape() {
        let body = "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time\n\
# TYPE container_cpu_usage_seconds_total counter\n\
container_cpu_usage_seconds_total{container=\"web\",namespace=\"default\",pod=\"web-1\"} 2.5 1624396427000\n\
node_memory_working_set_bytes 1.048576e+06\n\
resource_scrape_error 0\n";
        let samples = parse(body).unwrap();
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].name, "container_cpu_usage_seconds_total");
        assert_eq!(samples[0].label("pod"), "web-1");
        assert_eq!(samples[0].label("container"), "web");
        assert_eq!(samples[0].value, 2.5);
        assert_eq!(samples[0].timestamp_ms, Some(1_624_396_427_000));
        assert_eq!(samples[1].value, 1_048_576.0);
        assert_eq!(samples[1].timestamp_ms, None);
        assert!(samples[1].labels.is_empty());
    }

    #[test]
    fn label_values_unescape() {
        let s = parse("m{a=\"x\\\"y\\\\z\\n\", b=\"\"} +Inf\n").unwrap();
        assert_eq!(s[0].label("a"), "x\"y\\z\n");
        assert_eq!(s[0].label("b"), "");
        assert!(s[0].value.is_infinite());
    }

    #[test]
    fn malformed_lines_are_errors_with_their_line_number() {
        for (body, line) in [
            ("ok 1\n9bad 1\n", 2),
            ("m{a=\"x} 1\n", 1),
            ("m{a=x} 1\n", 1),
            ("m{a=\"x\",a=\"y\"} 1\n", 1),
            ("m\n", 1),
            ("m one\n", 1),
            ("m 1 two\n", 1),
            ("m 1 2 3\n", 1),
            ("# c\n\nm{a=\"\\q\"} 1\n", 3),
        ] {
            let err = parse(body).expect_err(body);
            assert_eq!(err.line, line, "{body:?}: {err}");
        }
    }
}
