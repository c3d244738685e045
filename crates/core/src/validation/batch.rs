//! Job and CronJob validation, including the cron schedule syntax.
//!
//! Mirrors upstream `pkg/apis/batch/validation/validation.go` (`ValidateJob`,
//! `validateGeneratedSelector`, `ValidateJobSpec`, `validateJobSpec`, `ValidateJobSpecUpdate`,
//! `ValidateCronJobCreate`, `validateCronJobSpec`, `validateScheduleFormat`, `validateTimeZone`,
//! `ValidateJobTemplateSpec`) and the error texts of `github.com/robfig/cron/v3`'s
//! `ParseStandard`.

use serde_json::{Map, Value, json};

use super::apps::{selector_matches, template_labels_mismatch, validate_label_selector};
use super::json::{bool_at, go_string_map, i64_at, path as jpath, str_at};
use super::meta::immutable;
use super::names;
use super::pod::{nonnegative, validate_pod_template};
use crate::field::{ErrorKind, FieldError, Path};

/// `batch.kubernetes.io/controller-uid`, the label the generated Job selector matches.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The legacy unprefixed `controller-uid` label.
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// `batch.kubernetes.io/job-name`.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The legacy unprefixed `job-name` label.
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

const MAX_PARALLELISM_FOR_INDEXED_JOB: i64 = 100_000;

/// Upstream `validateJobSpec`: the parts shared by Jobs and CronJob job templates.
fn validate_job_spec_common(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        nonnegative(spec, key, path, errs);
    }
    let mode = str_at(spec, "completionMode");
    if let Some(mode) = mode {
        if mode != "NonIndexed" && mode != "Indexed" {
            errs.push(FieldError::not_supported(
                path.child("completionMode"),
                &json!(mode),
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode == "Indexed" {
            if i64_at(spec, "completions").is_none() {
                errs.push(FieldError::required(
                    path.child("completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(p) = i64_at(spec, "parallelism")
                && p > MAX_PARALLELISM_FOR_INDEXED_JOB
            {
                errs.push(FieldError::invalid(
                    path.child("parallelism"),
                    &json!(p),
                    format!("must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is Indexed"),
                ));
            }
        }
    }
    if spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null())
        && mode != Some("Indexed")
    {
        errs.push(FieldError::forbidden(
            path.child("backoffLimitPerIndex"),
            "requires indexed completion mode",
        ));
    }
    let has_pfp = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    if let Some(prp) = str_at(spec, "podReplacementPolicy") {
        if has_pfp && prp != "Failed" {
            errs.push(FieldError::not_supported(
                path.child("podReplacementPolicy"),
                &json!(prp),
                &["Failed"],
            ));
        } else if prp != "TerminatingOrFailed" && prp != "Failed" {
            errs.push(FieldError::not_supported(
                path.child("podReplacementPolicy"),
                &json!(prp),
                &["TerminatingOrFailed", "Failed"],
            ));
        }
    }
    let null = Value::Null;
    let template = spec.get("template").unwrap_or(&null);
    let tp = path.child("template");
    errs.extend(validate_pod_template(template, &tp));
    let rp = tp.child("spec").child("restartPolicy");
    match jpath(template, &["spec", "restartPolicy"])
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "" | "Always" => errs.push(FieldError::required(
            &rp,
            "valid values: \"OnFailure\", \"Never\"",
        )),
        "OnFailure" if has_pfp => errs.push(FieldError::invalid(
            &rp,
            &json!("OnFailure"),
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        other => errs.push(FieldError::not_supported(
            &rp,
            &json!(other),
            &["OnFailure", "Never"],
        )),
    }
}

/// Upstream `ValidateJobSpec`: common rules plus a required, matching selector.
fn validate_job_spec(spec: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    validate_job_spec_common(spec, path, errs);
    match spec.get("selector").filter(|s| s.is_object()) {
        None => errs.push(FieldError::required(path.child("selector"), "")),
        Some(sel) => {
            errs.extend(validate_label_selector(sel, &path.child("selector")));
            let template = spec.get("template").unwrap_or(&Value::Null);
            if !selector_matches(
                sel,
                jpath(template, &["metadata", "labels"]).and_then(Value::as_object),
            ) {
                errs.push(template_labels_mismatch(&path.child("template"), template));
            }
        }
    }
}

/// Upstream `ValidateHasLabel`.
fn has_label(
    labels: Option<&Map<String, Value>>,
    key: &str,
    expected: &str,
    errs: &mut Vec<FieldError>,
) {
    let path = Path::new("spec")
        .child("template")
        .child("metadata")
        .child("labels")
        .key(key);
    match labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
        None => errs.push(FieldError::required(path, expected)),
        Some(v) if v != expected => {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                path,
                Some(go_string_map(labels)),
                format!("must be '{expected}'"),
            ));
        }
        Some(_) => {}
    }
}

/// Upstream `validateGeneratedSelector`: unless `manualSelector`, the template carries the
/// generated labels and the selector selects them.
fn validate_generated_selector(obj: &Value, errs: &mut Vec<FieldError>) {
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    if bool_at(spec, "manualSelector") == Some(true) {
        return;
    }
    let Some(labels) = jpath(spec, &["template", "metadata", "labels"]).and_then(Value::as_object)
    else {
        return;
    };
    let uid = jpath(obj, &["metadata", "uid"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = jpath(obj, &["metadata", "name"])
        .and_then(Value::as_str)
        .unwrap_or_default();
    if uid.is_empty() {
        errs.push(FieldError::required("metadata.uid", ""));
    }
    has_label(Some(labels), LEGACY_CONTROLLER_UID_LABEL, uid, errs);
    has_label(Some(labels), LEGACY_JOB_NAME_LABEL, name, errs);
    has_label(Some(labels), CONTROLLER_UID_LABEL, uid, errs);
    has_label(Some(labels), JOB_NAME_LABEL, name, errs);
    if let Some(sel) = spec.get("selector").filter(|s| s.is_object()) {
        let mut expected = Map::new();
        expected.insert(CONTROLLER_UID_LABEL.into(), json!(uid));
        expected.insert(JOB_NAME_LABEL.into(), json!(name));
        if !selector_matches(sel, Some(&expected)) {
            errs.push(FieldError::invalid(
                "spec.selector",
                sel,
                "`selector` not auto-generated",
            ));
        }
    }
}

/// Upstream `ValidateJob` (after metadata).
pub fn validate_job(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_generated_selector(obj, &mut errs);
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    validate_job_spec(spec, &Path::new("spec"), &mut errs);
    if str_at(spec, "completionMode") == Some("Indexed")
        && let Some(c) = i64_at(spec, "completions").filter(|c| *c > 0)
    {
        let name = jpath(obj, &["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or_default();
        let host = format!("{name}-{}", c - 1);
        if !names::dns1123_label(&host).is_empty() {
            errs.push(FieldError::invalid(
                "metadata.name",
                &json!(name),
                format!("will not able to create pod with invalid DNS label: {host}"),
            ));
        }
    }
    errs
}

/// Upstream `ValidateJobSpecUpdate`: selector, completion mode, pod failure policy are
/// immutable; completions only for elastic Indexed Jobs; the template only while suspended and
/// never started (scheduling directives, labels and annotations).
pub fn validate_job_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_job(new);
    let null = Value::Null;
    let ns = new.get("spec").unwrap_or(&null);
    let os = old.get("spec").unwrap_or(&null);
    let path = Path::new("spec");
    if str_at(ns, "completionMode") == Some("Indexed") {
        if let Some(c) = i64_at(ns, "completions")
            && i64_at(ns, "completions") != i64_at(os, "completions")
            && Some(c) != i64_at(ns, "parallelism")
        {
            errs.push(FieldError::invalid(
                path.child("completions"),
                &json!(c),
                "can only be modified in tandem with spec.parallelism",
            ));
        }
    } else {
        errs.extend(immutable(
            ns.get("completions"),
            os.get("completions"),
            &path.child("completions"),
        ));
    }
    errs.extend(immutable(
        ns.get("selector"),
        os.get("selector"),
        &path.child("selector"),
    ));
    let mut old_template = os.get("template").cloned().unwrap_or(Value::Null);
    let new_template = ns.get("template").cloned().unwrap_or(Value::Null);
    let never_started = jpath(old, &["status", "startTime"]).is_none_or(Value::is_null);
    if bool_at(ns, "suspend") == Some(true) && never_started {
        for (outer, key) in [
            ("metadata", "labels"),
            ("metadata", "annotations"),
            ("spec", "nodeSelector"),
            ("spec", "tolerations"),
            ("spec", "schedulingGates"),
            ("spec", "affinity"),
        ] {
            let replacement = jpath(&new_template, &[outer, key]).cloned();
            if let Some(section) = old_template.get_mut(outer).and_then(Value::as_object_mut) {
                match replacement {
                    Some(v) => section.insert(key.into(), v),
                    None => section.remove(key),
                };
            }
        }
    }
    errs.extend(immutable(
        Some(&new_template),
        Some(&old_template),
        &path.child("template"),
    ));
    for key in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
    ] {
        errs.extend(immutable(ns.get(key), os.get(key), &path.child(key)));
    }
    errs
}

/// Upstream `ValidateCronJobCreate`/`validateCronJobSpec` (after metadata). `old` is the
/// previous object on update (then the 52-character name limit is not checked).
pub fn validate_cron_job(obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    let old_spec = old.map(|o| o.get("spec").unwrap_or(&null));
    let path = Path::new("spec");
    let schedule = str_at(spec, "schedule").unwrap_or_default();
    if schedule.is_empty() {
        errs.push(FieldError::required(path.child("schedule"), ""));
    } else {
        let allow_tz = old_spec
            .and_then(|o| str_at(o, "schedule"))
            .is_some_and(|s| s.contains("TZ"));
        if let Err(e) = parse_standard_cron(schedule) {
            errs.push(FieldError::invalid(
                path.child("schedule"),
                &json!(schedule),
                e,
            ));
        }
        if allow_tz && schedule.contains("TZ") && present_str(spec, "timeZone") {
            errs.push(FieldError::invalid(
                path.child("schedule"),
                &json!(schedule),
                "cannot use both timeZone field and TZ or CRON_TZ in schedule",
            ));
        } else if !allow_tz && schedule.contains("TZ") {
            errs.push(FieldError::invalid(
                path.child("schedule"),
                &json!(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    nonnegative(spec, "startingDeadlineSeconds", &path, &mut errs);
    let tz = spec.get("timeZone").and_then(Value::as_str);
    if old_spec.is_none_or(|o| o.get("timeZone").and_then(Value::as_str) != tz)
        && let Some(tz) = tz
    {
        validate_time_zone(tz, &path.child("timeZone"), &mut errs);
    }
    match str_at(spec, "concurrencyPolicy").unwrap_or_default() {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(path.child("concurrencyPolicy"), "")),
        other => errs.push(FieldError::not_supported(
            path.child("concurrencyPolicy"),
            &json!(other),
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let jt = spec.get("jobTemplate").unwrap_or(&null);
    let jtp = path.child("jobTemplate");
    let jspec = jt.get("spec").unwrap_or(&null);
    validate_job_spec_common(jspec, &jtp.child("spec"), &mut errs);
    if let Some(sel) = jspec.get("selector").filter(|s| !s.is_null()) {
        errs.push(FieldError::invalid(
            jtp.child("spec").child("selector"),
            sel,
            "`selector` will be auto-generated",
        ));
    }
    if bool_at(jspec, "manualSelector") == Some(true) {
        errs.push(FieldError::not_supported(
            jtp.child("spec").child("manualSelector"),
            &json!(true),
            &["nil", "false"],
        ));
    }
    errs.extend(super::meta::validate_labels(
        jpath(jt, &["metadata", "labels"]).and_then(Value::as_object),
        &jtp.child("metadata").child("labels"),
    ));
    nonnegative(spec, "successfulJobsHistoryLimit", &path, &mut errs);
    nonnegative(spec, "failedJobsHistoryLimit", &path, &mut errs);
    if old.is_none() {
        let name = jpath(obj, &["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.len() > 52 {
            errs.push(FieldError::invalid(
                "metadata.name",
                &json!(name),
                "must be no more than 52 characters",
            ));
        }
    }
    errs
}

fn present_str(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|v| !v.is_null())
}

/// Upstream `validateTimeZone`, without the tz database lookup (no I/O in core).
fn validate_time_zone(tz: &str, path: &Path, errs: &mut Vec<FieldError>) {
    if tz.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &json!(tz),
            "timeZone must be nil or non-empty string",
        ));
        return;
    }
    let part_ok = |p: &str| {
        p != "."
            && p != ".."
            && !p.starts_with('-')
            && (1..=14).contains(&p.len())
            && p.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_' | b'+'))
    };
    if !tz.split('/').all(part_ok) {
        errs.push(FieldError::invalid(
            path,
            &json!(tz),
            format!("unknown time zone {tz}"),
        ));
        return;
    }
    if tz.eq_ignore_ascii_case("local") {
        errs.push(FieldError::invalid(
            path,
            &json!(tz),
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const MONTH_NAMES: &[(&str, u32)] = &[
    ("jan", 1),
    ("feb", 2),
    ("mar", 3),
    ("apr", 4),
    ("may", 5),
    ("jun", 6),
    ("jul", 7),
    ("aug", 8),
    ("sep", 9),
    ("oct", 10),
    ("nov", 11),
    ("dec", 12),
];
const DOW_NAMES: &[(&str, u32)] = &[
    ("sun", 0),
    ("mon", 1),
    ("tue", 2),
    ("wed", 3),
    ("thu", 4),
    ("fri", 5),
    ("sat", 6),
];
const FIELD_BOUNDS: [Bounds; 5] = [
    Bounds {
        min: 0,
        max: 59,
        names: &[],
    },
    Bounds {
        min: 0,
        max: 23,
        names: &[],
    },
    Bounds {
        min: 1,
        max: 31,
        names: &[],
    },
    Bounds {
        min: 1,
        max: 12,
        names: MONTH_NAMES,
    },
    Bounds {
        min: 0,
        max: 6,
        names: DOW_NAMES,
    },
];

fn must_parse_int(expr: &str) -> Result<u32, String> {
    let parsed = if expr.is_empty()
        || !expr
            .trim_start_matches(['+', '-'])
            .bytes()
            .all(|c| c.is_ascii_digit())
    {
        None
    } else {
        expr.parse::<i64>().ok()
    };
    match parsed {
        None => Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing \"{expr}\": invalid syntax"
        )),
        Some(n) if n < 0 => Err(format!("negative number ({n}) not allowed: {expr}")),
        Some(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

fn parse_int_or_name(expr: &str, names: &[(&str, u32)]) -> Result<u32, String> {
    let lower = expr.to_ascii_lowercase();
    if let Some((_, n)) = names.iter().find(|(name, _)| *name == lower) {
        return Ok(*n);
    }
    must_parse_int(expr)
}

fn check_range(expr: &str, b: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end) = if low_high[0] == "*" || low_high[0] == "?" {
        (b.min, b.max)
    } else {
        let start = parse_int_or_name(low_high[0], b.names)?;
        match low_high.len() {
            1 => (start, start),
            2 => (start, parse_int_or_name(low_high[1], b.names)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_parse_int(range_and_step[1])?;
            if low_high.len() == 1 {
                end = b.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < b.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            b.min
        ));
    }
    if end > b.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            b.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

/// Checks a schedule like robfig/cron's `ParseStandard`: five fields (minute hour
/// day-of-month month day-of-week), or a descriptor (`@hourly`, `@every 1h30m`, …), with an
/// optional `TZ=`/`CRON_TZ=` prefix. Returns the library's error text.
pub fn parse_standard_cron(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".to_string());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let i = spec.find(' ').unwrap_or(spec.len());
        let loc = spec[..i]
            .split_once('=')
            .map(|(_, l)| l)
            .unwrap_or_default();
        if loc.is_empty() {
            return Err(format!(
                "provided bad location {loc}: unknown time zone {loc}"
            ));
        }
        spec = spec[i..].trim();
    }
    if let Some(descriptor) = spec.strip_prefix('@') {
        return match descriptor {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => {
                let dur = d["every ".len()..].trim();
                if parse_go_duration(dur) {
                    Ok(())
                } else {
                    Err(format!(
                        "failed to parse duration {spec}: time: invalid duration \"{dur}\""
                    ))
                }
            }
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    for (field, bounds) in fields.iter().zip(FIELD_BOUNDS.iter()) {
        for expr in field.split(',').filter(|e| !e.is_empty()) {
            check_range(expr, bounds)?;
        }
    }
    Ok(())
}

/// Whether `s` is a Go `time.ParseDuration` string such as `1h30m` or `90s`.
fn parse_go_duration(s: &str) -> bool {
    crate::time::parse_go_duration(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_parse_like_robfig() {
        for ok in [
            "*/5 * * * *",
            "0 0 1 jan-mar mon-fri",
            "@hourly",
            "@every 1h30m",
            "15,45 9-17 * * 1-5",
            "0 0 * * ?",
        ] {
            assert_eq!(parse_standard_cron(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            parse_standard_cron("* * * *"),
            Err("expected exactly 5 fields, found 4: [* * * *]".to_string())
        );
        assert_eq!(
            parse_standard_cron("60 * * * *"),
            Err("end of range (60) above maximum (59): 60".to_string())
        );
        assert_eq!(
            parse_standard_cron("@fortnightly"),
            Err("unrecognized descriptor: @fortnightly".to_string())
        );
        assert_eq!(
            parse_standard_cron("x * * * *"),
            Err(
                "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
                    .to_string()
            )
        );
        assert_eq!(
            parse_standard_cron("* * 0 * *"),
            Err("beginning of range (0) below minimum (1): 0".to_string())
        );
    }
}
