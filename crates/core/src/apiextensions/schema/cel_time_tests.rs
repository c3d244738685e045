//! CRD rules over timestamps and durations, as kube-apiserver evaluates them: `format:
//! date-time`, `date` and `duration` fields read as timestamps and durations (upstream
//! `UnstructuredToVal`), transition rules over them, and bad input failing the rule with an
//! evaluation error rather than skipping it.

use serde_json::{Value, json};

use super::*;

fn compiled(schema: Value) -> Structural {
    match compile(&schema) {
        Ok(s) => s,
        Err(e) => panic!("schema does not compile: {e:?}"),
    }
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// A resource whose root rule compares `spec.expiry` with a timestamp, and whose `spec` has
/// `spec_rules` over its `date`, `ttl` (a duration) and plain string `when` fields.
fn schema(spec_rules: Value) -> Value {
    json!({
        "type": "object",
        "x-kubernetes-validations": [{
            "rule": "!has(self.spec.expiry) || self.spec.expiry > timestamp('2020-01-01T00:00:00Z')",
            "message": "expiry must be after 2020",
        }],
        "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": spec_rules,
            "properties": {
                "expiry": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "ttl": {
                    "type": "string",
                    "format": "duration",
                    "x-kubernetes-validations": [{
                        "rule": "self <= duration('24h') || self <= oldSelf",
                        "message": "ttl may not grow past 24h",
                    }],
                },
                "when": {"type": "string"},
            },
        }},
    })
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": spec})
}

fn validate(s: &Structural, spec: Value) -> Vec<String> {
    messages(&s.validate(&object(spec)))
}

fn validate_update(s: &Structural, spec: Value, old: Value) -> Vec<String> {
    messages(&s.validate_update(&object(spec), &object(old)))
}

#[test]
fn crd_cel_rule_compares_a_date_time_field_as_a_timestamp() {
    let s = compiled(schema(json!([])));
    assert!(validate(&s, json!({"expiry": "2024-05-01T10:00:00Z"})).is_empty());
    assert!(validate(&s, json!({"expiry": "2020-01-01T00:00:00.000000001Z"})).is_empty());
    let refused = [r#"<nil>: Invalid value: "object": expiry must be after 2020"#];
    assert_eq!(
        validate(&s, json!({"expiry": "2019-12-31T00:00:00Z"})),
        refused
    );
    // An instant, not text: 00:30 at +01:00 is still 2019 in UTC.
    assert_eq!(
        validate(&s, json!({"expiry": "2020-01-01T00:30:00+01:00"})),
        refused
    );
}

#[test]
fn crd_cel_transition_rule_reads_duration_fields_old_and_new() {
    let s = compiled(schema(json!([])));
    // Transition rules do not run on create.
    assert!(validate(&s, json!({"ttl": "48h"})).is_empty());
    assert!(validate_update(&s, json!({"ttl": "12h"}), json!({"ttl": "1h"})).is_empty());
    assert!(validate_update(&s, json!({"ttl": "30h"}), json!({"ttl": "36h"})).is_empty());
    let refused = [r#"spec.ttl: Invalid value: "string": ttl may not grow past 24h"#];
    assert_eq!(
        validate_update(&s, json!({"ttl": "1440m1s"}), json!({"ttl": "1h"})),
        refused
    );
    // strfmt's longer spellings are durations too.
    assert_eq!(
        validate_update(&s, json!({"ttl": "3 days"}), json!({"ttl": "1h"})),
        refused
    );
}

#[test]
fn crd_cel_date_fields_are_midnight_utc_timestamps() {
    let s = compiled(schema(json!([
        {"rule": "!has(self.day) || self.day.getDayOfWeek() != 0", "message": "not on Sundays"},
        {"rule": "!has(self.day) || !has(self.expiry) || self.expiry - self.day < duration('24h')",
         "message": "expiry must be on the day"},
    ])));
    assert!(
        validate(
            &s,
            json!({"day": "2024-03-01", "expiry": "2024-03-01T23:59:59Z"})
        )
        .is_empty()
    );
    assert_eq!(
        validate(
            &s,
            json!({"day": "2024-03-03", "expiry": "2024-03-04T00:00:00Z"})
        ),
        [
            r#"spec: Invalid value: "object": not on Sundays"#,
            r#"spec: Invalid value: "object": expiry must be on the day"#,
        ]
    );
}

#[test]
fn crd_cel_rule_with_bad_time_input_fails_with_an_evaluation_error() {
    let s = compiled(schema(json!([
        {"rule": "!has(self.when) || timestamp(self.when) < timestamp('2030-01-01T00:00:00Z')"},
        {"rule": "!has(self.when) || self.when != 'soon' || duration(self.when) > duration('0')",
         "message": "when must be a time"},
    ])));
    assert!(validate(&s, json!({"when": "2024-01-01T00:00:00Z"})).is_empty());
    assert_eq!(
        validate(&s, json!({"when": "soon"})),
        [
            r#"spec: Invalid value: "object": type conversion error from 'string' to 'google.protobuf.Timestamp' evaluating rule: !has(self.when) || timestamp(self.when) < timestamp('2030-01-01T00:00:00Z')"#,
            r#"spec: Invalid value: "object": type conversion error from 'string' to 'google.protobuf.Duration' evaluating rule: when must be a time"#,
        ]
    );
    // strfmt's format check takes a lower-case `t` and `z`, but Go's RFC 3339 parser does not:
    // the rule reading such a field fails, as upstream's error value makes it.
    assert_eq!(
        validate(&s, json!({"expiry": "2024-05-01t10:00:00z"})),
        [
            r#"<nil>: Invalid value: "object": Invalid date-time formatted string 2024-05-01t10:00:00z: parsing time "2024-05-01t10:00:00z" as "2006-01-02T15:04:05Z07:00": not RFC 3339 evaluating rule: expiry must be after 2020"#,
        ]
    );
}

#[test]
fn crd_cel_rule_calling_an_unknown_function_fails_instead_of_being_skipped() {
    let s = compiled(schema(
        json!([{"rule": "!has(self.when) || nosuch(self.when)"}]),
    ));
    assert_eq!(
        validate(&s, json!({"when": "x"})),
        [
            r#"spec: Invalid value: "object": undeclared reference to 'nosuch' evaluating rule: !has(self.when) || nosuch(self.when)"#
        ]
    );
}

#[test]
fn crd_cel_time_rules_pass_the_cost_check() {
    let schema = schema(json!([
        {"rule": "!has(self.day) || self.day.getDayOfWeek('+05:30') != 0"},
        {"rule": "!has(self.ttl) || string(self.ttl) != '0s'"},
    ]));
    assert!(cel_rule_errors(&schema, "s").is_empty());
}
