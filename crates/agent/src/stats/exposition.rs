//! Writing a prometheus-client registry out as a scrape response, with the content negotiation of
//! client_golang's `promhttp` handler (which the kubelet's endpoints use): the OpenMetrics text
//! format 1.0.0 when the scraper prefers `application/openmetrics-text`, otherwise the
//! Prometheus text format 0.0.4, derived from prometheus-client's OpenMetrics. The choice and the
//! derivation are `tandem_core::metrics::exposition`'s, shared with the API server's `/metrics`.

use prometheus_client::registry::Registry;
use tandem_core::metrics::exposition::{ExpositionFormat, openmetrics_to_text};
pub use tandem_core::metrics::exposition::{OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};

/// `registry` encoded for a scraper whose `Accept` header is `accept`: the content type and the
/// body.
pub fn encode(
    registry: &Registry,
    accept: &str,
) -> Result<(&'static str, String), std::fmt::Error> {
    let mut openmetrics = String::new();
    prometheus_client::encoding::text::encode(&mut openmetrics, registry)?;
    let format = ExpositionFormat::negotiate(Some(accept));
    let body = match format {
        ExpositionFormat::OpenMetrics => openmetrics,
        ExpositionFormat::Text => openmetrics_to_text(&openmetrics),
    };
    Ok((format.content_type(), body))
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
}
