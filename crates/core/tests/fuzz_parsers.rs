//! Property tests of the text parsers in `tandem-core` that read what users and clients send:
//! label and field selectors (`labels.Parse`, `fields.ParseSelector`), resource quantities
//! (`resource.ParseQuantity` and the canonical `String()`), Go durations
//! (`time.ParseDuration` / `Duration.String`), RFC 3339 timestamps (`metav1.Time`), the JSONPath
//! of CRD printer columns, image references (pull-policy defaulting, Windows build tags), CEL
//! rules of `x-kubernetes-validations`, and the selection outline of list bodies.
//!
//! Each parser must never panic on any input, and where upstream's types round-trip (a parsed
//! selector printed and parsed again is the same selector; a quantity's canonical text parses to
//! the same value; `Duration.String()` parses back to the same nanoseconds) so must ours. Inputs
//! that once failed are kept in the `*_REGRESSIONS` lists and replayed first.

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

mod fuzz_support;

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use tandem_core::apiextensions::crd::evaluate_json_path;
use tandem_core::apiextensions::schema::{cel_rule_errors, compile};
use tandem_core::defaults::default_pull_policy;
use tandem_core::quota::amount::Amount;
use tandem_core::registry::Registry;
use tandem_core::selector::{FieldSelector, LabelSelector, selection_outline};
use tandem_core::table::parse_rfc3339;
use tandem_core::time::{
    format_go_duration, format_rfc3339, format_rfc3339_micros, parse_go_duration,
};
use tandem_core::validation::quantity::Quantity;
use tandem_core::windows::build::{image_build_tag, is_known_windows_image};

use fuzz_support::{ensure, hostile_text, property, regressions};

const LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Label selectors.

/// Inputs that once panicked or failed to round-trip.
const LABEL_SELECTOR_REGRESSIONS: &[&str] = &[
    "",
    ",",
    "a in (",
    "a in ()",
    "!",
    "a<",
    "x notin (a,b,)",
    "a=b,!",
    "a>99999999999999999999",
    "日=本",
    "a in (b\u{0})",
];

fn label_selector_round_trips(text: &str) -> Result<(), TestCaseError> {
    let Ok(parsed) = LabelSelector::parse(text) else {
        return Ok(());
    };
    let printed = parsed.to_string();
    let again = LabelSelector::parse(&printed);
    ensure(again.as_ref() == Ok(&parsed), || {
        format!("{text:?} printed as {printed:?}, which parses to {again:?}, not {parsed:?}")
    })?;
    let labels = json!({"app": "web", "tier": "1", "a": "b", "x": ""});
    let _ = parsed.matches(labels.as_object().unwrap());
    Ok(())
}

#[test]
fn label_selector_regressions_still_parse_or_fail_cleanly() {
    regressions(
        "label-selector",
        LIMIT,
        LABEL_SELECTOR_REGRESSIONS.to_vec(),
        |text| label_selector_round_trips(text).unwrap(),
    );
}

#[test]
fn label_selector_text_never_panics_and_its_canonical_form_round_trips() {
    property(
        "label-selector-text",
        2000,
        LIMIT,
        hostile_text(24),
        |text| label_selector_round_trips(&text),
    );
}

fn label_key() -> impl Strategy<Value = String> + Clone {
    ("(([a-z0-9]{1,8}\\.)?[a-z]{1,6}/)?[a-zA-Z0-9]([-_.a-zA-Z0-9]{0,8}[a-zA-Z0-9])?")
        .prop_map(|s| s)
}

fn label_value() -> impl Strategy<Value = String> + Clone {
    "([a-zA-Z0-9]([-_.a-zA-Z0-9]{0,8}[a-zA-Z0-9])?)?"
}

fn label_requirement() -> impl Strategy<Value = String> {
    let values = proptest::collection::vec(label_value(), 1..4);
    prop_oneof![
        (label_key(), label_value()).prop_map(|(k, v)| format!("{k}={v}")),
        (label_key(), label_value()).prop_map(|(k, v)| format!("{k} == {v}")),
        (label_key(), label_value()).prop_map(|(k, v)| format!("{k}!={v}")),
        label_key(),
        label_key().prop_map(|k| format!("!{k}")),
        (label_key(), values.clone()).prop_map(|(k, v)| format!("{k} in ({})", v.join(","))),
        (label_key(), values).prop_map(|(k, v)| format!("{k} notin ( {} )", v.join(" , "))),
        (label_key(), 0u32..1000).prop_map(|(k, n)| format!("{k}>{n}")),
        (label_key(), 0u32..1000).prop_map(|(k, n)| format!("{k} < {n}")),
    ]
}

#[test]
fn well_formed_label_selectors_parse_and_round_trip() {
    let selector = proptest::collection::vec(label_requirement(), 1..5).prop_map(|r| r.join(","));
    property("label-selector-valid", 1500, LIMIT, selector, |text| {
        let parsed = LabelSelector::parse(&text);
        ensure(parsed.is_ok(), || {
            format!("{text:?} was refused: {parsed:?}")
        })?;
        label_selector_round_trips(&text)
    });
}

/// Arbitrary JSON in the shape of a `metav1.LabelSelector`.
fn label_selector_json() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        hostile_text(6).prop_map(Value::from),
    ];
    let op = prop_oneof![
        Just(json!("In")),
        Just(json!("NotIn")),
        Just(json!("Exists")),
        Just(json!("DoesNotExist")),
        Just(json!("Gt")),
        scalar.clone(),
    ];
    let expr = (
        prop_oneof![label_key().prop_map(Value::from), scalar.clone()],
        op,
        prop_oneof![
            proptest::collection::vec(
                prop_oneof![label_value().prop_map(Value::from), scalar.clone()],
                0..3
            )
            .prop_map(Value::from),
            scalar.clone(),
        ],
    )
        .prop_map(|(k, o, v)| json!({"key": k, "operator": o, "values": v}));
    (
        proptest::collection::btree_map(hostile_text(4), scalar.clone(), 0..3),
        proptest::collection::vec(expr, 0..3),
        any::<bool>(),
    )
        .prop_map(|(labels, exprs, odd)| {
            let labels: serde_json::Map<String, Value> = labels.into_iter().collect();
            if odd {
                json!({"matchLabels": exprs, "matchExpressions": labels})
            } else {
                json!({"matchLabels": labels, "matchExpressions": exprs})
            }
        })
}

#[test]
fn structured_label_selectors_never_panic() {
    property(
        "label-selector-json",
        1500,
        LIMIT,
        label_selector_json(),
        |v| {
            if let Ok(sel) = LabelSelector::from_json(&v) {
                let _ = sel.matches_object(&json!({"metadata": {"labels": {"a": "b"}}}));
                let _ = sel.to_string();
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Field selectors.

const FIELD_SELECTOR_REGRESSIONS: &[&str] = &[
    "",
    "=",
    "a=\\",
    "a=b\\",
    "a\\,b=c",
    "metadata.name=\\x",
    "status.phase!=Running,spec.nodeName=",
    "a==b==c",
];

fn field_selector_round_trips(text: &str) -> Result<(), TestCaseError> {
    let Ok(parsed) = FieldSelector::parse(text) else {
        return Ok(());
    };
    let printed = parsed.to_string();
    let again = FieldSelector::parse(&printed);
    // Upstream sorts the raw (escaped) terms, so the order of terms can differ after a round
    // trip (`a=\,` and `a=\=` swap); the set of terms may not.
    let sorted = |s: &FieldSelector| {
        let mut terms: Vec<String> = s
            .terms()
            .iter()
            .map(|t| format!("{}\0{:?}\0{}", t.field, t.op, t.value))
            .collect();
        terms.sort();
        terms
    };
    ensure(again.as_ref().map(sorted) == Ok(sorted(&parsed)), || {
        format!("{text:?} printed as {printed:?}, which parses to {again:?}, not {parsed:?}")
    })?;
    let registry = Registry::builtin();
    let pod = json!({"metadata": {"name": "p", "namespace": "default"},
                     "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
    for rt in registry.all().iter().take(60) {
        if parsed.validate(rt).is_ok() {
            let _ = parsed.matches(rt, &pod);
        }
    }
    Ok(())
}

#[test]
fn field_selector_regressions_still_parse_or_fail_cleanly() {
    regressions(
        "field-selector",
        LIMIT,
        FIELD_SELECTOR_REGRESSIONS.to_vec(),
        |text| field_selector_round_trips(text).unwrap(),
    );
}

#[test]
fn field_selector_text_never_panics_and_its_canonical_form_round_trips() {
    property(
        "field-selector-text",
        1500,
        LIMIT,
        hostile_text(20),
        |text| field_selector_round_trips(&text),
    );
}

#[test]
fn well_formed_field_selectors_round_trip() {
    let term = (
        prop_oneof![
            Just("metadata.name"),
            Just("metadata.namespace"),
            Just("spec.nodeName"),
            Just("status.phase"),
            Just("type"),
        ],
        prop_oneof![Just("="), Just("=="), Just("!=")],
        "([a-z0-9]|\\\\,|\\\\=|\\\\\\\\){0,8}",
    )
        .prop_map(|(f, op, v)| format!("{f}{op}{v}"));
    let selector = proptest::collection::vec(term, 1..4).prop_map(|t| t.join(","));
    property("field-selector-valid", 1000, LIMIT, selector, |text| {
        let parsed = FieldSelector::parse(&text);
        ensure(parsed.is_ok(), || {
            format!("{text:?} was refused: {parsed:?}")
        })?;
        field_selector_round_trips(&text)
    });
}

// ---------------------------------------------------------------------------------------------
// Quantities.

const QUANTITY_REGRESSIONS: &[&str] = &[
    // Exponents that overflowed the exponent arithmetic.
    "1e9223372036854775807",
    "0.1e-9223372036854775808",
    "1e-9223372036854775808",
    "-1e9223372036854775799",
    // A saturated mantissa scaled down overflowed the rounding.
    "99999999999999999999999999999999999999999999e-20",
    "-99999999999999999999999999999999999999999999e-20",
    "170141183460469231731687303715884105727n",
    "9999999999999999999999999999999999999999Ei",
    "",
    "-",
    "+.",
    ".e1",
    "1e",
    "1e+",
    "1Ki2",
    // An exponent past i64 is refused, as upstream's `strconv.ParseInt(…, 10, 64)` refuses it.
    "0E10000000000000000000",
];

fn quantity_is_consistent(text: &str) -> Result<(), TestCaseError> {
    let quantity = Quantity::parse(text);
    let amount = Amount::parse(text);
    ensure(quantity.is_some() == amount.is_some(), || {
        format!("{text:?}: Quantity {quantity:?} but Amount {amount:?}")
    })?;
    let Some(amount) = amount else {
        return Ok(());
    };
    let canonical = amount.to_string();
    let again = Amount::parse(&canonical);
    ensure(again == Some(amount), || {
        format!("{text:?} = {amount:?} prints {canonical:?}, which parses to {again:?}")
    })?;
    let twice = again.map(|a| a.to_string());
    ensure(twice.as_deref() == Some(canonical.as_str()), || {
        format!("{text:?}: canonical form {canonical:?} is not stable: {twice:?}")
    })?;
    // Arithmetic saturates; it must not overflow whatever the operands.
    let _ = (amount + amount).to_string();
    let negated = Amount::ZERO - amount;
    let _ = (negated - amount - amount).to_string();
    let _ = amount.millis();
    Ok(())
}

#[test]
fn quantity_regressions_parse_or_fail_cleanly() {
    regressions("quantity", LIMIT, QUANTITY_REGRESSIONS.to_vec(), |text| {
        quantity_is_consistent(text).unwrap()
    });
}

#[test]
fn quantity_text_never_panics_and_canonical_form_is_stable() {
    property("quantity-text", 3000, LIMIT, hostile_text(12), |text| {
        quantity_is_consistent(&text)
    });
}

#[test]
fn well_formed_quantities_parse_and_canonical_form_is_stable() {
    let quantity = (
        "[+-]?",
        "[0-9]{1,25}(\\.[0-9]{0,12})?|\\.[0-9]{1,12}",
        prop_oneof![
            "(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?",
            "[eE][+-]?[0-9]{1,3}",
            "[eE][+-]?[0-9]{15,18}",
        ],
    )
        .prop_map(|(sign, number, suffix)| format!("{sign}{number}{suffix}"));
    property("quantity-valid", 3000, LIMIT, quantity, |text| {
        ensure(Quantity::parse(&text).is_some(), || {
            format!("{text:?} was refused")
        })?;
        quantity_is_consistent(&text)
    });
}

#[test]
fn quantity_arithmetic_at_the_extremes_never_panics() {
    let extreme = prop_oneof![
        Just("170141183460469231731687303715884105727n".to_string()),
        Just("-170141183460469231731687303715884105727n".to_string()),
        Just("9Ei".to_string()),
        Just("1n".to_string()),
        Just("0".to_string()),
        hostile_text(8),
    ];
    let ops = proptest::collection::vec((extreme, any::<bool>()), 1..8);
    property("quantity-arithmetic", 1000, LIMIT, ops, |ops| {
        let mut total = Amount::ZERO;
        for (text, add) in ops {
            let Some(a) = Amount::parse(&text) else {
                continue;
            };
            total = if add { total + a } else { total - a };
            let _ = total.to_string();
            let _ = total.millis();
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Go durations.

const DURATION_REGRESSIONS: &[&str] = &[
    "",
    "-",
    "+",
    ".",
    "1.",
    ".s",
    "1..2s",
    "9223372036854775807ns",
    "-9223372036854775808ns",
    "9223372036854775808ns",
    "2562047h47m16.854775807s",
    "2562047h47m16.854775808s",
    "100000h0.000000001s",
    "0.0000000000000000000000000001s",
    "1e3s",
    "1µs1μs1us",
    "99999999999999999999999h",
];

fn duration_is_consistent(text: &str) -> Result<(), TestCaseError> {
    if let Ok(nanos) = parse_go_duration(text) {
        let printed = format_go_duration(nanos);
        let again = parse_go_duration(&printed);
        ensure(again == Ok(nanos), || {
            format!("{text:?} = {nanos}ns prints {printed:?}, which parses to {again:?}")
        })?;
    }
    Ok(())
}

#[test]
fn duration_regressions_parse_or_fail_cleanly() {
    regressions("duration", LIMIT, DURATION_REGRESSIONS.to_vec(), |text| {
        duration_is_consistent(text).unwrap()
    });
}

#[test]
fn go_duration_text_never_panics() {
    property("duration-text", 3000, LIMIT, hostile_text(12), |text| {
        duration_is_consistent(&text)
    });
}

#[test]
fn every_go_duration_string_parses_back_to_the_same_nanoseconds() {
    property("duration-round-trip", 3000, LIMIT, any::<i64>(), |nanos| {
        let printed = format_go_duration(nanos);
        let parsed = parse_go_duration(&printed);
        ensure(parsed == Ok(nanos), || {
            format!("{nanos}ns prints {printed:?}, which parses to {parsed:?}")
        })
    });
}

#[test]
fn well_formed_go_durations_parse() {
    let part = ("[0-9]{1,4}(\\.[0-9]{1,9})?", "(ns|us|µs|ms|s|m|h)");
    let duration = ("[-+]?", proptest::collection::vec(part, 1..4)).prop_map(|(sign, parts)| {
        let body: String = parts.into_iter().map(|(n, u)| format!("{n}{u}")).collect();
        format!("{sign}{body}")
    });
    property("duration-valid", 2000, LIMIT, duration, |text| {
        let parsed = parse_go_duration(&text);
        ensure(parsed.is_ok(), || {
            format!("{text:?} was refused: {parsed:?}")
        })?;
        duration_is_consistent(&text)
    });
}

// ---------------------------------------------------------------------------------------------
// RFC 3339 timestamps.

#[test]
fn rfc3339_text_never_panics() {
    let stamp = prop_oneof![
        hostile_text(24),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,9})?(Z|[+-][0-9]{2}:[0-9]{2})",
    ];
    property("rfc3339-text", 2000, LIMIT, stamp, |text| {
        let _ = parse_rfc3339(&text);
        Ok(())
    });
}

#[test]
fn formatted_timestamps_parse_back_to_the_same_second() {
    // Years 0000 to 9999, the range RFC 3339 can write.
    let secs = -62_167_219_200i64..253_402_300_800i64;
    property(
        "rfc3339-round-trip",
        2000,
        LIMIT,
        (secs, 0u32..1_000_000),
        |(secs, micros)| {
            let printed = format_rfc3339(secs);
            ensure(parse_rfc3339(&printed) == Some(secs), || {
                format!(
                    "{secs} prints {printed:?}, which parses to {:?}",
                    parse_rfc3339(&printed)
                )
            })?;
            let micro = format_rfc3339_micros(secs, micros);
            ensure(parse_rfc3339(&micro) == Some(secs), || {
                format!("{secs}.{micros} prints {micro:?}")
            })
        },
    );
    property("rfc3339-extremes", 500, LIMIT, any::<i64>(), |secs| {
        let _ = parse_rfc3339(&format_rfc3339(secs));
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// JSONPath (CRD printer columns and scale paths).

#[test]
fn json_path_text_never_panics() {
    let object = json!({
        "metadata": {"name": "x", "labels": {"a.b/c": "d"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"replicas": 3, "items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}, null, [1, 2]]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    });
    let path = prop_oneof![
        hostile_text(20),
        proptest::collection::vec(
            proptest::sample::select(vec![
                ".",
                "..",
                "spec",
                "items",
                "[",
                "]",
                "*",
                "0",
                "-1",
                ":",
                "1:3",
                "::-1",
                "?(",
                "@",
                ".type",
                "==",
                "!=",
                "<=",
                "\"Ready\"",
                "'a.b/c'",
                ")",
                "{",
                "}",
                "$",
                "name",
                "status",
                "conditions",
                "99999999999999999999",
                "-9223372036854775808",
            ]),
            0..12,
        )
        .prop_map(|v| v.concat()),
    ];
    property("json-path", 3000, LIMIT, path, move |path| {
        let _ = evaluate_json_path(&object, &path);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Image references.

#[test]
fn image_references_never_panic() {
    let image = prop_oneof![
        hostile_text(16),
        "([a-z0-9.]{1,10}(:[0-9]{1,5})?/)?[a-z0-9/_-]{1,12}(:[a-zA-Z0-9_.-]{0,12})?(@sha256:[0-9a-f]{0,64})?",
        "mcr\\.microsoft\\.com/windows/(servercore|nanoserver):(ltsc20(19|22|25)|10\\.0\\.[0-9]{1,6}\\.[0-9]{1,5}|[0-9]{4})",
    ];
    property("image-reference", 3000, LIMIT, image, |image| {
        let policy = default_pull_policy(&image);
        ensure(matches!(policy, "Always" | "IfNotPresent"), || {
            format!("{image:?}: policy {policy:?}")
        })?;
        let _ = image_build_tag(&image);
        let _ = is_known_windows_image(&image);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// CEL rules of `x-kubernetes-validations` (user-supplied in a CRD).

const CEL_REGRESSIONS: &[&str] = &[
    "",
    "self.",
    "self.a ==",
    "((((((((((",
    "'\\",
    "b'\\x",
    "self.matches('(')",
    "1/0 == 1",
    "has(self.a.b.c)",
    "self.all(x, x.all(y, y))",
    "size(self) < 9223372036854775807 + 1",
];

fn cel_rule_is_checked(rule: &str) -> Result<(), TestCaseError> {
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 10}, "n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": rule, "messageExpression": rule}],
    });
    let errors = cel_rule_errors(&schema, "openAPIV3Schema");
    // The checker runs on its own thread and turns a panic into this message: it must not
    // have to.
    ensure(
        !errors
            .iter()
            .any(|e| e.to_string().contains("could not be checked")),
        || format!("checking rule {rule:?} panicked"),
    )?;
    if errors.is_empty()
        && let Ok(structural) = compile(&schema)
    {
        let _ = structural.validate(&json!({"a": "xyz", "n": 3}));
        let _ = structural.validate(&json!({"a": 1, "n": "x"}));
    }
    Ok(())
}

#[test]
fn cel_rule_regressions_are_checked_without_panicking() {
    regressions(
        "cel",
        Duration::from_secs(60),
        CEL_REGRESSIONS.to_vec(),
        |rule| cel_rule_is_checked(rule).unwrap(),
    );
}

#[test]
fn cel_rules_are_checked_without_panicking() {
    let rule = prop_oneof![
        hostile_text(12),
        proptest::collection::vec(
            proptest::sample::select(vec![
                "self",
                ".a",
                ".n",
                " ",
                "==",
                "!=",
                "<",
                "+",
                "-",
                "*",
                "/",
                "%",
                "&&",
                "||",
                "!",
                "(",
                ")",
                "[",
                "]",
                "{",
                "}",
                ",",
                ":",
                "?",
                "'x'",
                "\"",
                "b'",
                "1",
                "0",
                "-9223372036854775808",
                "18446744073709551615u",
                "1.5e308",
                "size(",
                "has(",
                "matches(",
                "all(",
                "exists(",
                "map(",
                "filter(",
                "int(",
                "string(",
                "x",
                "oldSelf",
                "true",
                "null",
                "\\",
                "\\u",
                "in",
                "duration(",
                "timestamp(",
            ]),
            0..10,
        )
        .prop_map(|v| v.concat()),
    ];
    property("cel-rule", 400, Duration::from_secs(60), rule, |rule| {
        cel_rule_is_checked(&rule)
    });
}

// ---------------------------------------------------------------------------------------------
// The selection outline (the fields a list's selectors need, read from raw JSON).

#[test]
fn selection_outline_of_any_bytes_never_panics() {
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        hostile_text(24).prop_map(String::into_bytes),
        Just(br#"{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"nodeName":"n"}}"#.to_vec()),
    ];
    property("selection-outline", 2000, LIMIT, bytes, |bytes| {
        let _ = selection_outline(&bytes);
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// CRD schemas (user-supplied `openAPIV3Schema`), compiled and used to default, prune and
// validate objects.

/// Schema-shaped JSON: OpenAPI keywords with values of the right and wrong types.
fn schema_value() -> impl Strategy<Value = Value> {
    let keyword = proptest::sample::select(vec![
        "type",
        "properties",
        "items",
        "additionalProperties",
        "required",
        "default",
        "enum",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "multipleOf",
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "$ref",
        "spec",
        "a",
        "rule",
        "message",
    ]);
    let leaf = prop_oneof![
        proptest::sample::select(vec![
            json!("object"),
            json!("string"),
            json!("integer"),
            json!("number"),
            json!("array"),
            json!("boolean"),
            json!("int-or-string"),
            json!("date-time"),
            json!("^a+$"),
            json!("(("),
            json!(0),
            json!(-1),
            json!(1.5),
            json!(true),
            json!(null),
            json!(["a"]),
            json!([1, "x"]),
            json!({"rule": "self.size() > 0"}),
            json!([{"rule": "self.a == 1", "message": "m"}]),
            json!("atomic"),
            json!("map"),
            json!(["a", "b"]),
            json!(9_223_372_036_854_775_807i64),
        ]),
        hostile_text(4).prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 5, move |inner| {
        prop_oneof![
            proptest::collection::vec((keyword.clone(), inner.clone()), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
            proptest::collection::vec(inner, 0..3).prop_map(Value::Array),
        ]
    })
}

#[test]
fn crd_schemas_of_any_shape_compile_or_are_refused_without_panicking() {
    fuzz_support::property_of(
        "crd-schema",
        600,
        Duration::from_secs(60),
        || (schema_value(), schema_value()),
        |(schema, object)| {
            let path = "spec.versions[0].schema.openAPIV3Schema";
            let _ = tandem_core::apiextensions::schema::structural_errors(&schema, path);
            // The checker and the compiler run on threads of their own and turn a panic into
            // these messages: they must not have to.
            let hidden_panic = |errors: &[tandem_core::field::FieldError]| {
                errors.iter().any(|e| {
                    let text = e.to_string();
                    text.contains("could not be checked") || text.contains("could not be compiled")
                })
            };
            let rule_errors = cel_rule_errors(&schema, path);
            ensure(!hidden_panic(&rule_errors), || {
                format!("checking the rules of {schema} panicked")
            })?;
            let compiled = compile(&schema);
            if let Err(errors) = &compiled {
                ensure(!hidden_panic(errors), || {
                    format!("compiling {schema} panicked")
                })?;
            }
            if let Ok(structural) = compiled {
                let mut obj = object.clone();
                structural.default(&mut obj);
                let _ = structural.prune(&mut obj);
                let _ = structural.validate(&obj);
                let _ = structural.validate_update(&obj, &object);
            }
            let crd = json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "foos.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                         "names": {"plural": "foos", "kind": "Foo"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "schema": {"openAPIV3Schema": schema}}]},
            });
            let _ = tandem_core::apiextensions::crd::validate_crd(&crd);
            Ok(())
        },
    );
}
