//! Tests of the schema engine: one per upstream rule with upstream's exact messages, and the real
//! CRDs in `shared/fixtures/crds` with their valid and invalid examples.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::*;

fn compiled(schema: Value) -> Structural {
    match compile(&schema) {
        Ok(s) => s,
        Err(e) => panic!("schema does not compile: {e:?}"),
    }
}

/// A root schema whose `spec` is `spec_schema`.
fn with_spec(spec_schema: Value) -> Structural {
    compiled(json!({"type": "object", "properties": {"spec": spec_schema}}))
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

fn validate_spec(s: &Structural, spec: Value) -> Vec<String> {
    messages(&s.validate(&json!({"apiVersion": "x/v1", "kind": "X", "spec": spec})))
}

fn spec_props(props: Value) -> Structural {
    with_spec(json!({"type": "object", "properties": props}))
}

// ---------------------------------------------------------------- value validation

#[test]
fn wrong_type_is_type_invalid_with_kube_openapi_message() {
    let s = spec_props(json!({"limit": {"type": "integer"}}));
    assert_eq!(
        validate_spec(&s, json!({"limit": "ten"})),
        [
            r#"spec.limit: Invalid value: "string": spec.limit in body must be of type integer: "string""#
        ]
    );
    assert!(validate_spec(&s, json!({"limit": 10})).is_empty());
    // A float with an integral value is an integer to kube-openapi.
    assert!(validate_spec(&s, json!({"limit": 10.0})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"limit": 1.5})),
        [
            r#"spec.limit: Invalid value: "number": spec.limit in body must be of type integer: "number""#
        ]
    );
}

#[test]
fn integers_are_numbers_but_not_strings() {
    let s = spec_props(
        json!({"n": {"type": "number"}, "b": {"type": "boolean"}, "a": {"type": "array", "items": {"type": "string"}}}),
    );
    assert!(validate_spec(&s, json!({"n": 3})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"b": "true", "a": "x"})),
        [
            r#"spec.a: Invalid value: "string": spec.a in body must be of type array: "string""#,
            r#"spec.b: Invalid value: "string": spec.b in body must be of type boolean: "string""#,
        ]
    );
}

#[test]
fn null_is_refused_unless_nullable() {
    let s = spec_props(json!({
        "list": {"type": "array", "items": {"type": "string"}},
        "opt": {"type": "object", "nullable": true},
    }));
    assert_eq!(
        validate_spec(&s, json!({"list": [null], "opt": null})),
        [
            r#"spec.list[0]: Invalid value: "null": spec.list[0] in body must be of type string: "null""#
        ]
    );
}

#[test]
fn enum_is_not_supported_with_quoted_values() {
    let s = spec_props(json!({
        "algorithm": {"type": "string", "enum": ["RSA", "ECDSA", "Ed25519"]},
        "size": {"type": "integer", "enum": [256, 384]},
    }));
    assert_eq!(
        validate_spec(&s, json!({"algorithm": "DSA", "size": 512})),
        [
            r#"spec.algorithm: Unsupported value: "DSA": supported values: "RSA", "ECDSA", "Ed25519""#,
            r#"spec.size: Unsupported value: 512: supported values: "256", "384""#,
        ]
    );
    assert!(validate_spec(&s, json!({"algorithm": "RSA", "size": 384.0})).is_empty());
}

#[test]
fn missing_required_field_is_required_at_its_path() {
    let s = spec_props(json!({
        "ca": {"type": "object", "required": ["secretName"], "properties": {"secretName": {"type": "string"}}},
    }));
    let errs = with_spec_obj(&s, json!({"ca": {}}));
    assert_eq!(errs[0].kind, ErrorKind::Required);
    assert_eq!(messages(&errs), ["spec.ca.secretName: Required value"]);
    let root = compiled(
        json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}}),
    );
    assert_eq!(
        messages(&root.validate(&json!({}))),
        ["spec: Required value"]
    );
}

fn with_spec_obj(s: &Structural, spec: Value) -> Vec<FieldError> {
    s.validate(&json!({"spec": spec}))
}

#[test]
fn pattern_uses_go_re2_semantics() {
    let s = spec_props(json!({
        "action": {"type": "string", "pattern": "^(?i)(abort|warn)?$"},
        "digits": {"type": "string", "pattern": "^\\d+$"},
    }));
    assert!(validate_spec(&s, json!({"action": "ABORT"})).is_empty());
    assert!(validate_spec(&s, json!({"action": ""})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"action": "stop"})),
        [
            r#"spec.action: Invalid value: "stop": spec.action in body should match '^(?i)(abort|warn)?$'"#
        ]
    );
    // Go's \d is ASCII only.
    assert!(validate_spec(&s, json!({"digits": "123"})).is_empty());
    assert_eq!(validate_spec(&s, json!({"digits": "١٢٣"})).len(), 1);
}

#[test]
fn checked_formats_fail_as_type_errors_and_others_are_ignored() {
    let s = spec_props(json!({
        "at": {"type": "string", "format": "date-time"},
        "url": {"type": "string", "format": "uri"},
        "data": {"type": "string", "format": "byte"},
        "n": {"type": "integer", "format": "int32"},
        "q": {"type": "string", "format": "quantity"},
    }));
    assert!(
        validate_spec(
            &s,
            json!({"at": "2024-05-01T10:00:00Z", "url": "https://x.example/a", "data": "aGk=", "n": 1i64 << 40, "q": "anything"})
        )
        .is_empty(),
        "int32 is not checked upstream"
    );
    assert_eq!(
        validate_spec(
            &s,
            json!({"at": "yesterday", "url": "not a uri", "data": "%%"})
        ),
        [
            r#"spec.at: Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday""#,
            r#"spec.data: Invalid value: "%%": spec.data in body must be of type byte: "%%""#,
            r#"spec.url: Invalid value: "not a uri": spec.url in body must be of type uri: "not a uri""#,
        ]
    );
}

#[test]
fn numeric_bounds_and_multiple_of() {
    let s = spec_props(json!({
        "max": {"type": "integer", "maximum": 10},
        "xmax": {"type": "integer", "maximum": 10, "exclusiveMaximum": true},
        "min": {"type": "number", "minimum": 0.5},
        "xmin": {"type": "integer", "minimum": 0, "exclusiveMinimum": true},
        "mult": {"type": "integer", "multipleOf": 5},
        "fmult": {"type": "number", "multipleOf": 0.5},
    }));
    assert!(
        validate_spec(
            &s,
            json!({"max": 10, "xmax": 9, "min": 0.5, "xmin": 1, "mult": 15, "fmult": 1.5})
        )
        .is_empty()
    );
    assert_eq!(
        validate_spec(
            &s,
            json!({"max": 11, "xmax": 10, "min": 0.25, "xmin": 0, "mult": 7, "fmult": 1.25})
        ),
        [
            "spec.fmult: Invalid value: 1.25: spec.fmult in body should be a multiple of 0.5",
            "spec.max: Invalid value: 11: spec.max in body should be less than or equal to 10",
            "spec.min: Invalid value: 0.25: spec.min in body should be greater than or equal to 0.5",
            "spec.mult: Invalid value: 7: spec.mult in body should be a multiple of 5",
            "spec.xmax: Invalid value: 10: spec.xmax in body should be less than 10",
            "spec.xmin: Invalid value: 0: spec.xmin in body should be greater than 0",
        ]
    );
}

#[test]
fn string_lengths() {
    let s = spec_props(json!({
        "name": {"type": "string", "maxLength": 3},
        "code": {"type": "string", "minLength": 2},
    }));
    let errs = with_spec_obj(&s, json!({"name": "abcd", "code": "x"}));
    assert_eq!(
        messages(&errs),
        [
            r#"spec.code: Invalid value: "x": spec.code in body should be at least 2 chars long"#,
            "spec.name: Too long: may not be more than 3 bytes",
        ]
    );
    assert_eq!(errs[1].kind, ErrorKind::TooLong);
    // Lengths count characters, not bytes.
    assert!(validate_spec(&s, json!({"name": "äöü"})).is_empty());
}

#[test]
fn item_and_property_counts() {
    let s = spec_props(json!({
        "few": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "many": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "props": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 1},
    }));
    let errs = with_spec_obj(&s, json!({"few": [], "many": ["a", "b", "c"], "props": {}}));
    assert_eq!(
        messages(&errs),
        [
            "spec.few: Invalid value: 0: spec.few in body should have at least 1 items",
            "spec.many: Too many: 3: must have at most 2 items",
            "spec.props: Invalid value: 0: spec.props in body should have at least 1 properties",
        ]
    );
    assert_eq!(errs[1].kind, ErrorKind::TooMany);
    assert_eq!(
        validate_spec(&s, json!({"props": {"a": "1", "b": "2"}})),
        ["spec.props: Too many: 2: must have at most 1 items"]
    );
}

#[test]
fn additional_properties_schema_and_false() {
    let s = spec_props(json!({
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "closed": {"type": "object", "additionalProperties": false},
    }));
    assert_eq!(
        validate_spec(
            &s,
            json!({"labels": {"app": "web", "tier": 3}, "closed": {"x": 1}})
        ),
        [
            r#"spec.closed: Invalid value: "x": spec.closed.x in body is a forbidden property"#,
            r#"spec.labels.tier: Invalid value: "integer": spec.labels.tier in body must be of type string: "integer""#,
        ]
    );
}

#[test]
fn int_or_string_takes_either() {
    let s = spec_props(json!({
        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
    }));
    assert!(validate_spec(&s, json!({"port": 8080})).is_empty());
    assert!(validate_spec(&s, json!({"port": "http"})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"port": true})),
        [
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
            r#"<nil>: Invalid value: "": "spec.port" must validate at least one schema (anyOf)"#,
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer: "boolean""#,
        ]
    );
}

#[test]
fn unique_items() {
    let s = spec_props(
        json!({"u": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true}}),
    );
    assert_eq!(
        validate_spec(&s, json!({"u": [1, 2, 1]})),
        [r#"spec.u: Invalid value: "": spec.u in body shouldn't contain duplicates"#]
    );
}

#[test]
fn junctors_report_on_the_nil_path_like_upstream() {
    let s = spec_props(json!({
        "one": {"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]},
        "all": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]},
        "not": {"type": "string", "not": {"enum": ["forbidden"]}},
    }));
    assert!(validate_spec(&s, json!({"one": "ax", "all": 3, "not": "ok"})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"one": "ab", "all": 9, "not": "forbidden"})),
        [
            "spec.all: Invalid value: 9: spec.all in body should be less than or equal to 5",
            r#"<nil>: Invalid value: "": "spec.all" must validate all the schemas (allOf)"#,
            r#"<nil>: Invalid value: "": "spec.not" must not validate the schema (not)"#,
            r#"<nil>: Invalid value: "": "spec.one" must validate one and only one schema (oneOf). Found 2 valid alternatives"#,
        ]
    );
}

#[test]
fn list_type_set_and_map_report_duplicates() {
    let s = spec_props(json!({
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
        },
        "pairs": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
            "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
        },
    }));
    let errs = with_spec_obj(
        &s,
        json!({
            "tags": ["a", "b", "a", "a"],
            "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}],
            "pairs": [{"a": "x", "b": 1}, {"a": "x", "b": 2}, {"a": "x", "b": 1}],
        }),
    );
    assert!(errs.iter().all(|e| e.kind == ErrorKind::Duplicate));
    assert_eq!(
        messages(&errs),
        [
            r#"spec.pairs[2]: Duplicate value: map[string]interface {}{"a":"x", "b":1}"#,
            r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"http"}"#,
            r#"spec.tags[2]: Duplicate value: "a""#,
        ]
    );
}

#[test]
fn root_meta_fields_need_no_schema_and_metadata_restrictions_apply() {
    let s = compiled(json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}}},
            "credspec": {"type": "object"},
        },
    }));
    assert!(
        s.validate(
            &json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "abc"}, "credspec": {}})
        )
        .is_empty()
    );
    assert_eq!(
        messages(&s.validate(&json!({"metadata": {"name": "toolong"}}))),
        ["metadata.name: Too long: may not be more than 5 bytes"]
    );
}

#[test]
fn embedded_resources_need_api_version_and_kind_and_valid_metadata() {
    let s = spec_props(json!({
        "template": {
            "type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true,
        },
    }));
    assert!(
        validate_spec(
            &s,
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}})
        )
        .is_empty()
    );
    assert_eq!(
        validate_spec(
            &s,
            json!({"template": {"kind": "not_a_kind", "metadata": {"name": "a/b"}}})
        ),
        [
            "spec.template.apiVersion: Required value: must not be empty",
            r#"spec.template.kind: Invalid value: "not_a_kind": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#,
            r#"spec.template.metadata.name: Invalid value: "a/b": may not contain '/'"#,
        ]
    );
}

// ---------------------------------------------------------------- ratcheting

#[test]
fn update_ratchets_errors_in_unchanged_fields() {
    let s = spec_props(json!({
        "name": {"type": "string", "maxLength": 3},
        "other": {"type": "string"},
    }));
    let old = json!({"spec": {"name": "toolong", "other": "a"}});
    let new = json!({"spec": {"name": "toolong", "other": "b"}});
    assert!(s.validate_update(&new, &old).is_empty());
    let changed = json!({"spec": {"name": "stilltoolong", "other": "b"}});
    assert_eq!(
        messages(&s.validate_update(&changed, &old)),
        ["spec.name: Too long: may not be more than 3 bytes"]
    );
}

// ---------------------------------------------------------------- CEL

fn cel_schema(rules: Value) -> Structural {
    with_spec(json!({
        "type": "object",
        "x-kubernetes-validations": rules,
        "properties": {
            "min": {"type": "integer"}, "max": {"type": "integer"},
            "name": {"type": "string"},
            "items": {"type": "array", "items": {"type": "string"}},
            "mode": {"type": "string"},
        },
    }))
}

#[test]
fn failed_rule_without_message_names_the_rule() {
    let s = cel_schema(json!([{"rule": "self.min <= self.max"}]));
    assert!(validate_spec(&s, json!({"min": 1, "max": 2})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"min": 3, "max": 2})),
        [r#"spec: Invalid value: "object": failed rule: self.min <= self.max"#]
    );
}

#[test]
fn rule_message_message_expression_reason_and_field_path() {
    let s = cel_schema(json!([
        {"rule": "self.min <= self.max", "message": "min must not exceed max"},
        {"rule": "self.name.startsWith('x-')", "messageExpression": "'name ' + self.name + ' lacks the x- prefix'"},
        {"rule": "!has(self.mode)", "reason": "FieldValueForbidden", "message": "mode is not allowed", "fieldPath": ".mode"},
        {"rule": "has(self.items)", "reason": "FieldValueRequired", "message": "items are needed", "fieldPath": "['items']"},
    ]));
    let errs = with_spec_obj(&s, json!({"min": 3, "max": 2, "name": "web", "mode": "x"}));
    assert_eq!(
        messages(&errs),
        [
            r#"spec: Invalid value: "object": min must not exceed max"#,
            r#"spec: Invalid value: "object": name web lacks the x- prefix"#,
            "spec.mode: Forbidden: mode is not allowed",
            "spec.items: Required value: items are needed",
        ]
    );
    assert_eq!(errs[2].kind, ErrorKind::Forbidden);
}

#[test]
fn kubernetes_rules_use_macros_and_string_functions() {
    let s = cel_schema(json!([
        {"rule": "self.items.all(i, i.matches('^[a-z]+$'))", "message": "lower"},
        {"rule": "self.items.exists(i, i == 'web')", "message": "web"},
        {"rule": "self.items.exists_one(i, i.endsWith('b'))", "message": "one b"},
        {"rule": "self.items.filter(i, i.contains('e')).size() == size(self.items.map(i, i))", "message": "all e"},
        {"rule": "!has(self.mode) || self.mode in ['a', 'b']", "message": "mode"},
    ]));
    assert!(validate_spec(&s, json!({"items": ["web", "ear"], "mode": "a"})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"items": ["Web", "Cab"], "mode": "c"})),
        [
            r#"spec: Invalid value: "object": lower"#,
            r#"spec: Invalid value: "object": web"#,
            r#"spec: Invalid value: "object": one b"#,
            r#"spec: Invalid value: "object": all e"#,
            r#"spec: Invalid value: "object": mode"#,
        ]
    );
}

#[test]
fn root_rules_see_metadata_name_and_report_on_nil() {
    let s = compiled(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('ok-')"}],
        "properties": {"spec": {"type": "object"}},
    }));
    assert!(
        s.validate(&json!({"metadata": {"name": "ok-1"}, "spec": {}}))
            .is_empty()
    );
    assert_eq!(
        messages(&s.validate(&json!({"metadata": {"name": "bad"}, "spec": {}}))),
        [r#"<nil>: Invalid value: "object": failed rule: self.metadata.name.startsWith('ok-')"#]
    );
}

#[test]
fn evaluation_errors_name_the_rule() {
    let s = cel_schema(json!([{"rule": "self.name == 'a'"}]));
    assert_eq!(
        validate_spec(&s, json!({})),
        [r#"spec: Invalid value: "object": no such key: name evaluating rule: self.name == 'a'"#]
    );
}

#[test]
fn cel_duration_rules_run_instead_of_being_skipped() {
    let s = cel_schema(json!([{"rule": "duration(self.name) > duration('1s')"}]));
    assert!(validate_spec(&s, json!({"name": "5s"})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"name": "500ms"})),
        [r#"spec: Invalid value: "object": failed rule: duration(self.name) > duration('1s')"#]
    );
}

#[test]
fn escaped_property_names_are_visible() {
    let s = with_spec(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.dash__dash__name == self.__if__"}],
        "properties": {"dash-name": {"type": "string"}, "if": {"type": "string"}},
    }));
    assert!(validate_spec(&s, json!({"dash-name": "a", "if": "a"})).is_empty());
    assert_eq!(
        validate_spec(&s, json!({"dash-name": "a", "if": "b"})).len(),
        1
    );
}

#[test]
fn transition_rules_only_run_on_update() {
    let s = with_spec(json!({
        "type": "object",
        "properties": {
            "immutable": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}]},
            "grow": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "optionalOldSelf": true, "message": "may only grow"},
            ]},
        },
    }));
    let old = json!({"spec": {"immutable": "a", "grow": 5}});
    assert!(
        s.validate(&json!({"spec": {"immutable": "b", "grow": 1}}))
            .is_empty()
    );
    assert!(
        s.validate_update(&json!({"spec": {"immutable": "a", "grow": 6}}), &old)
            .is_empty()
    );
    assert_eq!(
        messages(&s.validate_update(&json!({"spec": {"immutable": "b", "grow": 4}}), &old)),
        [
            r#"spec.grow: Invalid value: "integer": may only grow"#,
            r#"spec.immutable: Invalid value: "string": is immutable"#,
        ]
    );
}

#[test]
fn map_list_items_correlate_with_old_items_by_key() {
    let s = spec_props(json!({
        "ports": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object", "required": ["name"],
                "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
            },
        },
    }));
    let old = json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}});
    let reordered = json!({"spec": {"ports": [{"name": "b", "port": 2}, {"name": "a", "port": 1}, {"name": "c", "port": 3}]}});
    assert!(s.validate_update(&reordered, &old).is_empty());
    let changed = json!({"spec": {"ports": [{"name": "b", "port": 9}]}});
    assert_eq!(
        messages(&s.validate_update(&changed, &old)),
        [r#"spec.ports[0]: Invalid value: "object": port is immutable"#]
    );
}

#[test]
fn rules_are_skipped_after_blocking_errors() {
    let s = with_spec(json!({
        "type": "object",
        "required": ["name"],
        "x-kubernetes-validations": [{"rule": "false"}],
        "properties": {"name": {"type": "string"}},
    }));
    assert_eq!(
        validate_spec(&s, json!({})),
        [
            "spec.name: Required value",
            r#"<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"#,
        ]
    );
}

#[test]
fn a_rule_that_does_not_compile_is_reported_when_it_runs() {
    let s = cel_schema(json!([{"rule": "self.min <"}]));
    let errs = validate_spec(&s, json!({"min": 1}));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with(r#"spec: Invalid value: "object": rule compile error: compilation failed: ERROR: <input>:1:11: Syntax error"#),
        "{errs:?}"
    );
}

#[test]
fn unchanged_values_ratchet_cel_errors_but_not_transition_rules() {
    let s = cel_schema(json!([{"rule": "self.min <= self.max", "message": "order"}]));
    let old = json!({"spec": {"min": 3, "max": 2}});
    assert!(s.validate_update(&old, &old).is_empty());
    assert_eq!(
        messages(&s.validate_update(&json!({"spec": {"min": 4, "max": 2}}), &old)),
        [r#"spec: Invalid value: "object": order"#]
    );
}

#[test]
fn deeply_nested_expressions_are_refused_and_deep_ones_evaluate() {
    let deep = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    let s = cel_schema(json!([{"rule": deep}]));
    let errs = validate_spec(&s, json!({}));
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("rule compile error"), "{errs:?}");
    // Deeper than the inline limit but allowed: evaluated on a big stack.
    let chain = vec!["self.min"; 40].join(" + ");
    let s = cel_schema(json!([{"rule": format!("{chain} >= 0")}]));
    assert!(validate_spec(&s, json!({"min": 1})).is_empty());
}

// ---------------------------------------------------------------- CRD-time CEL checks

#[test]
fn cel_rule_errors_report_compilation_and_shape_problems() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.a <"},
                    {"rule": "self.a == 1", "optionalOldSelf": true},
                    {"rule": "   "},
                    {"rule": "self.a == 1", "reason": "Nope"},
                ],
                "properties": {
                    "a": {"type": "integer"},
                    "list": {"type": "array", "items": {
                        "type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
                    }},
                },
            },
        },
    });
    let errs = messages(&cel_rule_errors(
        &schema,
        "spec.versions[0].schema.openAPIV3Schema",
    ));
    let p = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
    assert!(
        errs.contains(&format!(
            "{p}.x-kubernetes-validations[2].rule: Required value: rule is not specified"
        )),
        "{errs:#?}"
    );
    assert!(errs.contains(&format!(
        r#"{p}.x-kubernetes-validations[3].reason: Unsupported value: "Nope": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired""#
    )), "{errs:#?}");
    assert!(errs.contains(&format!(
        r#"{p}.properties[list].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within {p}.properties[list]"#
    )), "{errs:#?}");

    // With the malformed ones gone, compilation is checked.
    let schema = json!({"type": "object", "x-kubernetes-validations": [
        {"rule": "self.a <"},
        {"rule": "self.a == 1", "optionalOldSelf": true},
    ]});
    let errs = messages(&cel_rule_errors(&schema, "s"));
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs[0].starts_with(r#"s.x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:"self.a <", Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:9: Syntax error"#), "{errs:#?}");
    assert_eq!(
        errs[1],
        "s.x-kubernetes-validations[1].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"
    );
}

// ---------------------------------------------------------------- defaulting

#[test]
fn defaults_fill_missing_fields_recursively() {
    let s = spec_props(json!({
        "replicas": {"type": "integer", "default": 1},
        "strategy": {"type": "object", "default": {}, "properties": {"type": {"type": "string", "default": "Rolling"}}},
        "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}}}},
        "limits": {"type": "object", "additionalProperties": {"type": "object", "properties": {"unit": {"type": "string", "default": "Mi"}}}},
        "nullable": {"type": "string", "nullable": true, "default": "d"},
        "nonNullable": {"type": "string", "default": "d"},
    }));
    let mut obj = json!({"spec": {"ports": [{}, {"protocol": "UDP"}], "limits": {"mem": {}}, "nullable": null, "nonNullable": null}});
    s.default(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {
            "replicas": 1,
            "strategy": {"type": "Rolling"},
            "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}],
            "limits": {"mem": {"unit": "Mi"}},
            "nullable": null,
            "nonNullable": "d",
        }})
    );
}

#[test]
fn a_default_at_the_root_is_not_applied() {
    let s = compiled(
        json!({"type": "object", "default": {"spec": {}}, "properties": {"spec": {"type": "object"}}}),
    );
    let mut obj = json!({"kind": "X"});
    s.default(&mut obj);
    assert_eq!(obj, json!({"kind": "X"}));
}

// ---------------------------------------------------------------- pruning

#[test]
fn prune_drops_unknown_fields_and_reports_their_paths() {
    let s = compiled(json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "known": {"type": "string"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"inner": {"type": "object", "properties": {}}}},
                "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}},
                "gone": {"type": "string"},
            }},
        },
    }));
    let mut obj = json!({
        "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "whatever": 1},
        "spec": {
            "known": "k", "foo": 1,
            "list": [{"a": "1", "b": 2}],
            "free": {"anything": {"goes": true}, "inner": {"dropped": 1}},
            "tmpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {}, "extra": 1},
            "gone": null,
        },
        "status": {"x": 1},
    });
    let unknown = s.prune(&mut obj);
    assert_eq!(
        unknown,
        [
            "spec.foo",
            "spec.free.inner.dropped",
            "spec.list[0].b",
            "spec.tmpl.extra",
            "spec.tmpl.metadata.bogus",
            "status",
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "whatever": 1},
            "spec": {
                "known": "k",
                "list": [{"a": "1"}],
                "free": {"anything": {"goes": true}, "inner": {}},
                "tmpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
            },
        })
    );
}

// ---------------------------------------------------------------- structural schema rules

fn structural(schema: Value) -> Vec<String> {
    messages(&structural_errors(
        &schema,
        "spec.versions[0].schema.openAPIV3Schema",
    ))
}

const P: &str = "spec.versions[0].schema.openAPIV3Schema";

#[test]
fn every_specified_field_needs_a_type() {
    assert_eq!(
        structural(
            json!({"type": "object", "properties": {"spec": {"properties": {}}, "list": {"type": "array", "items": {}}}})
        ),
        [
            format!(
                "{P}.properties[list].items.type: Required value: must not be empty for specified array items"
            ),
            format!(
                "{P}.properties[spec].type: Required value: must not be empty for specified object fields"
            ),
        ]
    );
    assert_eq!(
        structural(json!({"properties": {}})),
        [format!(
            "{P}.type: Required value: must not be empty at the root"
        )]
    );
    assert!(
        structural(json!({"type": "object", "properties": {
            "ios": {"x-kubernetes-int-or-string": true},
            "any": {"x-kubernetes-preserve-unknown-fields": true},
        }}))
        .is_empty()
    );
}

#[test]
fn unsupported_keywords_and_shapes_are_forbidden() {
    let errs = structural(json!({
        "type": "object",
        "properties": {
            "a": {"$ref": "#/definitions/Foo"},
            "b": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "c": {"type": "array", "items": [{"type": "string"}]},
            "d": {"type": "string", "id": "x"},
        },
        "definitions": {"Foo": {"type": "string"}},
    }));
    for want in [
        format!("{P}.properties[a].$ref: Forbidden: $ref is not supported"),
        format!(
            "{P}.properties[b].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        ),
        format!(
            "{P}.properties[c].items: Forbidden: items must be a schema object and not an array"
        ),
        format!("{P}.properties[d].id: Forbidden: id is not supported"),
        format!("{P}.definitions: Forbidden: definitions is not supported"),
    ] {
        assert!(errs.contains(&want), "missing {want} in {errs:#?}");
    }
    assert!(compile(&json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}})).is_err());
}

#[test]
fn metadata_at_the_root_may_only_restrict_names() {
    assert!(
        structural(
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10}}}}})
        )
        .is_empty()
    );
    assert_eq!(
        structural(
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}}}}})
        ),
        [format!(
            "{P}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
        )]
    );
    assert_eq!(
        structural(
            json!({"type": "object", "properties": {"metadata": {"type": "object", "default": {}}}})
        ),
        [format!(
            "{P}.properties[metadata].default: Forbidden: must not be set in top-level metadata"
        )]
    );
}

#[test]
fn int_or_string_and_value_validation_rules() {
    let errs = structural(json!({"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true},
        "v": {"type": "string", "anyOf": [{"type": "string", "default": "x"}]},
        "w": {"type": "object", "properties": {"x": {"type": "string"}}, "allOf": [{"properties": {"y": {"maxLength": 1}}}]},
    }}));
    for want in [
        format!(
            "{P}.properties[port].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"
        ),
        format!("{P}.properties[v].anyOf[0].type: Forbidden: must be empty to be structural"),
        format!(
            "{P}.properties[v].anyOf[0].default: Forbidden: must be undefined to be structural"
        ),
    ] {
        assert!(errs.contains(&want), "missing {want} in {errs:#?}");
    }
    // Completeness is checked for the root's junctors.
    assert_eq!(
        structural(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "anyOf": [{"properties": {"b": {"maxLength": 1}}}]})
        ),
        [format!(
            "{P}.properties[b]: Required value: because it is defined in {P}.anyOf[0].properties[b]"
        )]
    );
}

#[test]
fn list_type_extensions_are_checked() {
    let errs = structural(json!({"type": "object", "properties": {
        "l": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        "s": {"type": "string", "x-kubernetes-list-type": "set"},
        "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
              "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
    }}));
    for want in [
        format!(
            "{P}.properties[l].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        ),
        format!(
            r#"{P}.properties[s].type: Invalid value: "string": must be array if x-kubernetes-list-type is specified"#
        ),
        format!(
            "{P}.properties[m].items.properties[k].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
        ),
    ] {
        assert!(errs.contains(&want), "missing {want} in {errs:#?}");
    }
}

// ---------------------------------------------------------------- robustness

#[test]
fn deep_objects_are_reported_not_recursed() {
    let s = spec_props(
        json!({"free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
    );
    let mut deep = json!("leaf");
    for _ in 0..120 {
        deep = json!({"a": deep});
    }
    let mut obj = json!({"spec": {"free": deep}});
    let errs = s.validate(&obj);
    assert_eq!(
        messages(&errs),
        ["<nil>: Invalid value: must not be nested more than 100 levels deep"]
    );
    s.default(&mut obj);
    let _ = s.prune(&mut obj);
}

#[test]
fn deep_schemas_fail_to_compile() {
    let mut schema = json!({"type": "string"});
    for _ in 0..120 {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    assert!(compile(&schema).is_err());
    let _ = structural_errors(&schema, "s");
    let _ = cel_rule_errors(&schema, "s");
}

#[test]
fn odd_inputs_do_not_panic() {
    for schema in [
        json!(null),
        json!("x"),
        json!({"type": 1}),
        json!({"properties": []}),
        json!({"items": 3}),
        json!({"pattern": "("}),
        json!({"x-kubernetes-validations": "nope"}),
        json!({"enum": {}}),
    ] {
        let _ = compile(&schema);
        let _ = structural_errors(&schema, "s");
        let _ = cel_rule_errors(&schema, "s");
    }
    let s = compiled(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "p": {"type": "string", "pattern": "("},
            "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"], "items": {"type": "object"}},
        }}}}),
    );
    for obj in [
        json!(null),
        json!(1),
        json!([]),
        json!({"spec": {"p": "x", "l": [1, null, {"k": 1}]}}),
    ] {
        let mut o = obj.clone();
        let _ = s.prune(&mut o);
        s.default(&mut o);
        let _ = s.validate(&o);
        let _ = s.validate_update(&o, &obj);
    }
}

#[test]
fn structural_is_shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Structural>();
}

// ---------------------------------------------------------------- real CRDs

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/crds")
}

fn read_yaml(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The schema of the CRD version an example's `apiVersion` names.
fn schema_for(crd: &Value, example: &Value) -> Value {
    let api_version = example["apiVersion"].as_str().unwrap_or_default();
    let version = api_version.rsplit('/').next().unwrap_or_default();
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let v = versions
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("no version {version}"));
    v["schema"]["openAPIV3Schema"].clone()
}

/// `*` or `...` in an expected message stands for anything.
fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").collect();
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else {
                return false;
            };
            rest = &rest[at + part.len()..];
        }
    }
    rest.is_empty()
}

/// Parses `# INVALID (kind): …; error field path: PATH (kube-apiserver: MESSAGE)`.
fn expected_error(first_line: &str) -> (String, String) {
    let (_, after) = first_line
        .split_once("error field path: ")
        .expect("field path");
    let (path, msg) = after.split_once(" (kube-apiserver: ").expect("message");
    let msg = msg.strip_suffix(')').expect("closing paren");
    (path.trim().to_string(), msg.to_string())
}

#[test]
fn real_crds_accept_their_valid_examples_and_reject_their_invalid_ones() {
    let dir = fixtures_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml"))
        .map(|n| n.trim_end_matches(".yaml").to_string())
        .collect();
    names.sort();
    assert_eq!(names.len(), 5, "{names:?}");
    for name in names {
        let crd = read_yaml(&dir.join(format!("{name}.yaml")));
        assert!(
            structural_errors(
                &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
                "s"
            )
            .is_empty(),
            "{name}: {:?}",
            structural_errors(
                &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
                "s"
            )
        );

        let valid = read_yaml(&dir.join(format!("examples/{name}-valid.yaml")));
        let schema = schema_for(&crd, &valid);
        assert!(
            cel_rule_errors(&schema, "s").is_empty(),
            "{name}: {:?}",
            cel_rule_errors(&schema, "s")
        );
        let s = compiled(schema);
        let mut obj = valid.clone();
        let unknown = s.prune(&mut obj);
        assert!(unknown.is_empty(), "{name}: valid example lost {unknown:?}");
        s.default(&mut obj);
        assert_eq!(
            messages(&s.validate(&obj)),
            Vec::<String>::new(),
            "{name} valid"
        );
        assert!(
            s.validate_update(&obj, &obj).is_empty(),
            "{name} valid update"
        );

        let path = dir.join(format!("examples/{name}-invalid.yaml"));
        let text = std::fs::read_to_string(&path).expect("invalid example");
        let (want_path, want_msg) = expected_error(text.lines().next().unwrap_or_default());
        let mut obj = read_yaml(&path);
        let s = compiled(schema_for(&crd, &obj));
        let _ = s.prune(&mut obj);
        s.default(&mut obj);
        let mut errs = s.validate(&obj);
        // kube-apiserver adds this notice when a schema with CEL rules meets a blocking error
        // (issuers has one rule); the fixtures list the one schema error only.
        if let Some(last) = errs.last()
            && last
                .detail
                .starts_with("some validation rules were not checked")
        {
            assert!(name.ends_with("issuers"), "{name}: unexpected notice");
            errs.pop();
        }
        assert_eq!(errs.len(), 1, "{name}: {:?}", messages(&errs));
        assert_eq!(errs[0].field, want_path, "{name}");
        assert!(
            glob_match(&want_msg, &errs[0].cause_message()),
            "{name}: got {:?}, want {want_msg:?}",
            errs[0].cause_message()
        );
    }
}

#[test]
fn issuers_venafi_rule_runs_on_the_real_schema() {
    let crd = read_yaml(&fixtures_dir().join("cert-manager.io_issuers.yaml"));
    let s = compiled(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone());
    let base = |venafi: Value| {
        json!({"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "v"},
               "spec": {"venafi": venafi}})
    };
    let ok = base(json!({"zone": "z", "cloud": {"apiTokenSecretRef": {"name": "t"}}}));
    assert_eq!(messages(&s.validate(&ok)), Vec::<String>::new());
    let none = base(json!({"zone": "z"}));
    assert_eq!(
        messages(&s.validate(&none)),
        [
            r#"spec.venafi: Invalid value: "object": exactly one of tpp, cloud, or ngts must be configured"#
        ]
    );
}

#[test]
fn largest_fixture_compiles_once_and_validates_fast() {
    let crd = read_yaml(&fixtures_dir().join("cert-manager.io_issuers.yaml"));
    let schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    let started = std::time::Instant::now();
    let s = compiled(schema);
    let compile_time = started.elapsed();
    let obj = read_yaml(&fixtures_dir().join("examples/cert-manager.io_issuers-valid.yaml"));
    let started = std::time::Instant::now();
    for _ in 0..200 {
        assert!(s.validate(&obj).is_empty());
    }
    let per_call = started.elapsed() / 200;
    // Generous bounds for an unoptimised build on a small machine: validating must not redo
    // compilation work (which takes far longer than a validation).
    assert!(compile_time.as_secs() < 20, "compile took {compile_time:?}");
    assert!(
        per_call.as_millis() < 20,
        "validate took {per_call:?} per call"
    );
}
