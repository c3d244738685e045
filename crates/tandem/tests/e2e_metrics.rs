//! End-to-end: the Prometheus `/metrics` of the API server, scheduler and controllers (issue 21),
//! scraped as upstream's is — `kubectl get --raw /metrics` as cluster-admin and as a member of
//! `system:monitoring` (upstream's bootstrap role for it), parsed by a strict parser of the
//! Prometheus text format 0.0.4 ([`prom_text`]); upstream's 403 for anybody else; OpenMetrics
//! 1.0.0 when the Accept header asks for it, as Prometheus' scraper does.
#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::Server;
use http_body_util::BodyExt;

const WAIT: Duration = Duration::from_secs(60);

/// A strict parser of the Prometheus text exposition format 0.0.4 (and, in its OpenMetrics
/// mode, of what OpenMetrics 1.0.0 adds: `# UNIT`, the `# EOF` ending, counters named without
/// `_total`), written for these tests: it refuses what Prometheus' own parser refuses
/// (malformed names, labels and values, samples before their family's `# TYPE`, a family's
/// samples split up, duplicate samples or labels, samples that do not belong to their family's
/// type) rather than guessing.
mod prom_text {
    use std::collections::{BTreeMap, HashSet};

    #[derive(Debug, Clone, PartialEq)]
    pub struct Sample {
        pub name: String,
        pub labels: BTreeMap<String, String>,
        pub value: f64,
    }

    #[derive(Debug, Clone, PartialEq)]
    pub struct Family {
        pub name: String,
        pub kind: String,
        pub help: Option<String>,
        pub samples: Vec<Sample>,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Format {
        Text004,
        OpenMetrics,
    }

    fn is_metric_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn is_label_name(s: &str) -> bool {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    fn parse_value(s: &str) -> Result<f64, String> {
        match s {
            "+Inf" | "Inf" => Ok(f64::INFINITY),
            "-Inf" => Ok(f64::NEG_INFINITY),
            "NaN" => Ok(f64::NAN),
            _ => s.parse::<f64>().map_err(|_| format!("bad value {s:?}")),
        }
    }

    /// `name{a="b",…} value [timestamp]`.
    fn parse_sample(line: &str) -> Result<Sample, String> {
        let name_end = line.find(['{', ' ']).ok_or("a sample without a value")?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(format!("bad metric name {name:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(body) = rest.strip_prefix('{') {
            let mut chars = body.char_indices().peekable();
            // Where the label set ends: one past its '}'.
            let consumed = loop {
                // A label name up to '=', or the end of the set.
                let start = match chars.peek() {
                    Some((i, '}')) => break i + 1,
                    Some((i, _)) => *i,
                    None => return Err("unterminated label set".into()),
                };
                let eq = body[start..].find('=').ok_or("a label without '='")? + start;
                let label = &body[start..eq];
                if !is_label_name(label) {
                    return Err(format!("bad label name {label:?}"));
                }
                while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                    chars.next();
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(format!("label {label} has no quoted value"));
                }
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((_, '\\')) => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => return Err(format!("bad escape {other:?}")),
                        },
                        Some((_, '\n')) | None => return Err("unterminated label value".into()),
                        Some((_, c)) => value.push(c),
                    }
                }
                if labels.insert(label.to_string(), value).is_some() {
                    return Err(format!("label {label} repeated"));
                }
                match chars.next() {
                    Some((_, ',')) => {}
                    Some((i, '}')) => break i + 1,
                    other => return Err(format!("unexpected {other:?} after a label")),
                }
            };
            rest = &body[consumed..];
        }
        let rest = rest.strip_prefix(' ').ok_or("no space before the value")?;
        let mut fields = rest.split(' ');
        let value = parse_value(fields.next().ok_or("no value")?)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| format!("bad timestamp {ts:?}"))?;
        }
        if fields.next().is_some() {
            return Err("trailing fields".into());
        }
        Ok(Sample {
            name: name.to_string(),
            labels,
            value,
        })
    }

    /// The sample names a family of `kind` called `family` may have.
    fn belongs(format: Format, kind: &str, family: &str, sample: &str) -> bool {
        let suffix = sample.strip_prefix(family);
        match (format, kind) {
            (Format::OpenMetrics, "counter") => matches!(suffix, Some("_total" | "_created")),
            (_, "histogram") => matches!(suffix, Some("_bucket" | "_sum" | "_count" | "_created")),
            (_, "summary") => matches!(suffix, Some("" | "_sum" | "_count")),
            _ => suffix == Some(""),
        }
    }

    /// Parses a whole exposition.
    pub fn parse(text: &str, format: Format) -> Result<Vec<Family>, String> {
        let mut families: Vec<Family> = Vec::new();
        let mut seen_families = HashSet::new();
        let mut seen_samples = HashSet::new();
        let mut helps: Vec<(String, String)> = Vec::new();
        let mut eof = false;
        for (n, line) in text.lines().enumerate() {
            let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
            if eof {
                return Err(at("content after # EOF".into()));
            }
            if line.is_empty() {
                if format == Format::OpenMetrics {
                    return Err(at("blank line".into()));
                }
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                let comment = comment.strip_prefix(' ').unwrap_or(comment);
                let mut words = comment.splitn(3, ' ');
                match (words.next(), words.next(), words.next()) {
                    (Some("HELP"), Some(name), text) => {
                        if !is_metric_name(name) {
                            return Err(at(format!("bad name {name:?}")));
                        }
                        if helps.iter().any(|(h, _)| h == name)
                            || families.iter().any(|f| f.name == name && f.help.is_some())
                        {
                            return Err(at("a second HELP".into()));
                        }
                        helps.push((name.to_string(), text.unwrap_or_default().to_string()));
                    }
                    (Some("TYPE"), Some(name), Some(kind)) => {
                        let kinds: &[&str] = match format {
                            Format::Text004 => {
                                &["counter", "gauge", "histogram", "summary", "untyped"]
                            }
                            Format::OpenMetrics => &[
                                "counter",
                                "gauge",
                                "histogram",
                                "summary",
                                "unknown",
                                "info",
                                "stateset",
                                "gaugehistogram",
                            ],
                        };
                        if !is_metric_name(name) || !kinds.contains(&kind) {
                            return Err(at("bad TYPE".into()));
                        }
                        if !seen_families.insert(name.to_string()) {
                            return Err(at(format!("family {name} declared twice")));
                        }
                        let help = helps
                            .iter()
                            .position(|(h, _)| h == name)
                            .map(|i| helps.remove(i).1);
                        families.push(Family {
                            name: name.to_string(),
                            kind: kind.to_string(),
                            help,
                            samples: Vec::new(),
                        });
                    }
                    (Some("UNIT"), Some(_), _) if format == Format::OpenMetrics => {}
                    (Some("EOF"), None, None) if format == Format::OpenMetrics => eof = true,
                    _ if format == Format::Text004 => {} // any other comment
                    _ => return Err(at("unknown descriptor".into())),
                }
                continue;
            }
            let sample = parse_sample(line).map_err(at)?;
            let family = families
                .last_mut()
                .filter(|f| belongs(format, &f.kind, &f.name, &sample.name))
                .ok_or_else(|| at("a sample outside its family (or before its TYPE)".into()))?;
            if family.kind == "histogram"
                && sample.name.ends_with("_bucket")
                && !sample.labels.contains_key("le")
            {
                return Err(at("a bucket without le".into()));
            }
            let key = format!("{}{:?}", sample.name, sample.labels);
            if !seen_samples.insert(key) {
                return Err(at("a duplicate sample".into()));
            }
            family.samples.push(sample);
        }
        if format == Format::OpenMetrics && !eof {
            return Err("no # EOF at the end".into());
        }
        if let Some((name, _)) = helps.first() {
            return Err(format!("HELP for {name} without a TYPE"));
        }
        Ok(families)
    }

    /// The value of the sample `name` whose labels include every one of `labels`.
    pub fn value(families: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        families
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == name)
            .find(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    #[test]
    fn the_parser_refuses_what_prometheus_refuses() {
        let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\\\"\"} 2\n";
        let f = parse(ok, Format::Text004).unwrap();
        assert_eq!(f[0].samples[0].labels["x"], "1\"");
        for bad in [
            "a 1\n",                                      // no TYPE
            "# TYPE a gauge\na{x=1} 1\n",                 // unquoted value
            "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n",     // repeated label
            "# TYPE a gauge\na 1\na 2\n",                 // duplicate sample
            "# TYPE a gauge\na one\n",                    // bad value
            "# TYPE a gauge\n# TYPE b gauge\nb 1\na 2\n", // split family
            "# TYPE h histogram\nh_bucket 1\n",           // bucket without le
            "# TYPE a gauge\n# TYPE a gauge\n",           // declared twice
        ] {
            assert!(parse(bad, Format::Text004).is_err(), "accepted {bad:?}");
        }
        let om = "# TYPE a counter\na_total 1\n# EOF\n";
        assert!(parse(om, Format::OpenMetrics).is_ok());
        assert!(parse("# TYPE a counter\na_total 1\n", Format::OpenMetrics).is_err());
        assert!(
            parse(om, Format::Text004).is_err(),
            "a counter sample named _total"
        );
    }
}

use prom_text::{Format, parse, value};

/// `tandem kubeconfig --user USER [--group G]…` for `s` (as e2e_auth mints people).
fn mint(s: &Server, user: &str, groups: &[&str]) -> PathBuf {
    let path = s.dir().join(format!("{user}.kubeconfig"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    cmd.arg("kubeconfig")
        .arg("--data-dir")
        .arg(s.data_dir())
        .args(["--server", &s.url(), "--user", user, "-o"])
        .arg(&path);
    for g in groups {
        cmd.args(["--group", g]);
    }
    common::run(cmd, format!("tandem kubeconfig --user {user}"), None, WAIT).ok();
    path
}

/// `kubectl get --raw /metrics` (as `kubeconfig`, else the admin), parsed strictly.
#[track_caller]
fn scrape(s: &Server, kubeconfig: Option<&PathBuf>) -> Vec<prom_text::Family> {
    let mut args = Vec::new();
    if let Some(k) = kubeconfig {
        args.extend(["--kubeconfig", k.to_str().unwrap()]);
    }
    args.extend(["get", "--raw", "/metrics"]);
    let out = s.kubectl(&args);
    parse(out.ok(), Format::Text004)
        .unwrap_or_else(|e| panic!("not the text format 0.0.4: {e}\n{}", out.stdout))
}

#[test]
fn metrics_show_requests_scheduling_and_workqueues_in_the_text_format() {
    let s = Server::start_up(Some("linux=1"));
    s.kubectl_stdin(&["apply", "-f", "-"], &common::pod("scraped", None))
        .ok();
    s.eventually("the pod is scheduled", WAIT, || {
        let pod = s.get_json(&["pod", "scraped"])?;
        pod["spec"]["nodeName"].as_str().map(str::to_string)
    });
    s.create(&common::deployment("web", 1));

    let families = s.eventually("the controllers' and scheduler's figures", WAIT, || {
        let f = scrape(&s, None);
        let sched = value(
            &f,
            "scheduler_schedule_attempts_total",
            &[("result", "scheduled"), ("profile", "default-scheduler")],
        );
        let adds = value(&f, "workqueue_adds_total", &[("name", "deployment")]);
        (sched >= Some(1.0) && adds >= Some(1.0)).then_some(f)
    });
    // `kubectl apply` of a new pod is a create: POST, 201, with upstream's labels.
    let creates = value(
        &families,
        "apiserver_request_total",
        &[
            ("verb", "POST"),
            ("dry_run", ""),
            ("group", ""),
            ("version", "v1"),
            ("resource", "pods"),
            ("subresource", ""),
            ("scope", "resource"),
            ("component", "apiserver"),
            ("code", "201"),
        ],
    );
    assert!(
        creates >= Some(1.0),
        "no pod create in apiserver_request_total"
    );
    let family = |name: &str| families.iter().find(|f| f.name == name);
    let kinds = [
        ("apiserver_request_total", "counter"),
        ("apiserver_request_duration_seconds", "histogram"),
        ("apiserver_current_inflight_requests", "gauge"),
        ("apiserver_longrunning_requests", "gauge"),
        ("apiserver_registered_watchers", "gauge"),
        ("apiserver_storage_objects", "gauge"),
        ("scheduler_schedule_attempts_total", "counter"),
        ("scheduler_scheduling_attempt_duration_seconds", "histogram"),
        ("scheduler_pending_pods", "gauge"),
        ("scheduler_preemption_attempts_total", "counter"),
        ("workqueue_depth", "gauge"),
        ("workqueue_adds_total", "counter"),
        ("workqueue_queue_duration_seconds", "histogram"),
        ("workqueue_work_duration_seconds", "histogram"),
        ("workqueue_retries_total", "counter"),
        ("process_start_time_seconds", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
    ];
    for (name, kind) in kinds {
        let f = family(name).unwrap_or_else(|| panic!("no family {name}"));
        assert_eq!(f.kind, kind, "{name}");
        assert!(f.help.is_some(), "{name} has no HELP");
    }
    // The controllers' watches are long-running requests and registered watchers.
    assert!(
        value(
            &families,
            "apiserver_longrunning_requests",
            &[("verb", "WATCH")]
        ) >= Some(1.0)
    );
    assert!(
        value(
            &families,
            "apiserver_registered_watchers",
            &[("group", ""), ("version", "v1"), ("kind", "Pod")]
        ) >= Some(1.0)
    );
    assert!(
        value(
            &families,
            "apiserver_storage_objects",
            &[("resource", "pods")]
        ) >= Some(1.0)
    );
    assert!(
        value(
            &families,
            "apiserver_storage_objects",
            &[("resource", "deployments.apps")]
        ) >= Some(1.0)
    );
    // A histogram's +Inf bucket counts every observation.
    let labels = [
        ("verb", "POST"),
        ("resource", "pods"),
        ("subresource", ""),
        ("dry_run", ""),
    ];
    let count = value(
        &families,
        "apiserver_request_duration_seconds_count",
        &labels,
    );
    let mut inf = labels.to_vec();
    inf.push(("le", "+Inf"));
    assert_eq!(
        value(&families, "apiserver_request_duration_seconds_bucket", &inf),
        count
    );
    for queue in ["active", "backoff", "unschedulable", "gated"] {
        assert!(
            value(&families, "scheduler_pending_pods", &[("queue", queue)]).is_some(),
            "{queue}"
        );
    }
    let started = value(&families, "process_start_time_seconds", &[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started > now - 3600.0 && started <= now,
        "{started} vs {now}"
    );
    assert!(value(&families, "process_resident_memory_bytes", &[]) > Some(1.0e6));
}

#[test]
fn metrics_need_the_monitoring_role_and_speak_openmetrics_when_asked() {
    let s = Server::start();

    // Nobody in particular: upstream's 403 for a non-resource URL.
    let jane = mint(&s, "jane", &[]);
    let out = s.kubectl(&[
        "--kubeconfig",
        jane.to_str().unwrap(),
        "get",
        "--raw",
        "/metrics",
    ]);
    let err = out.err();
    assert!(
        err.contains(
            r#"Error from server (Forbidden): forbidden: User "jane" cannot get path "/metrics""#
        ),
        "{err}"
    );

    // The bootstrap policy's `system:monitoring` group may scrape.
    let monitor = mint(&s, "prometheus", &["system:monitoring"]);
    let families = scrape(&s, Some(&monitor));
    assert!(families.iter().any(|f| f.name == "apiserver_request_total"));

    // OpenMetrics, as Prometheus asks for it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (content_type, body) = rt.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(s.kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let req = http::Request::get("/metrics")
            .header(
                "Accept",
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            )
            .body(Vec::new())
            .unwrap();
        let resp = client.send(req.map(Into::into)).await.unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (ct, String::from_utf8(body.to_vec()).unwrap())
    });
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let families = parse(&body, Format::OpenMetrics)
        .unwrap_or_else(|e| panic!("not OpenMetrics 1.0.0: {e}\n{body}"));
    let requests = families
        .iter()
        .find(|f| f.name == "apiserver_request")
        .unwrap_or_else(|| panic!("no apiserver_request counter family in\n{body}"));
    assert_eq!(requests.kind, "counter");
    assert!(
        requests
            .samples
            .iter()
            .all(|s| s.name == "apiserver_request_total")
    );
}
