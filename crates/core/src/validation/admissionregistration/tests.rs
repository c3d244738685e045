use serde_json::{Value, json};

use super::*;

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// A webhook configuration with one webhook, defaulted as the API server defaults it.
fn configuration(mutating: bool, hook: Value) -> Value {
    let mut obj = json!({"metadata": {"name": "hooks"}, "webhooks": [hook]});
    default_webhook_configuration(&mut obj, mutating);
    obj
}

fn hook() -> Value {
    json!({
        "name": "pods.hooks.example.com",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": "hooks", "name": "svc", "path": "/validate"}},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                   "apiVersions": ["v1"], "resources": ["pods", "pods/status"]}],
        "matchConditions": [{"name": "not-kube-system",
                             "expression": "object.metadata.namespace != 'kube-system'"}]
    })
}

fn with(mut base: Value, patch: Value) -> Value {
    if let (Some(b), Some(p)) = (base.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            if v.is_null() {
                b.remove(k);
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    base
}

fn webhook_errors(mutating: bool, hook: Value) -> Vec<String> {
    messages(&validate_webhook_configuration(
        &configuration(mutating, hook),
        mutating,
    ))
}

#[test]
fn webhooks_are_defaulted_as_upstream_v1() {
    let obj = configuration(true, with(hook(), json!({"sideEffects": null})));
    let h = &obj["webhooks"][0];
    assert_eq!(h["failurePolicy"], "Fail");
    assert_eq!(h["matchPolicy"], "Equivalent");
    assert_eq!(h["namespaceSelector"], json!({}));
    assert_eq!(h["objectSelector"], json!({}));
    assert_eq!(h["timeoutSeconds"], 10);
    assert_eq!(h["reinvocationPolicy"], "Never");
    assert_eq!(h["clientConfig"]["service"]["port"], 443);
    assert_eq!(h["rules"][0]["scope"], "*");
    assert!(h.get("sideEffects").is_none(), "no v1 default: {h}");
    let validating = configuration(false, hook());
    assert!(
        validating["webhooks"][0]
            .get("reinvocationPolicy")
            .is_none()
    );
    // Set values stay.
    let obj = configuration(false, with(hook(), json!({"timeoutSeconds": 3})));
    assert_eq!(obj["webhooks"][0]["timeoutSeconds"], 3);
}

#[test]
fn a_complete_webhook_configuration_is_valid() {
    assert_eq!(webhook_errors(false, hook()), Vec::<String>::new());
    assert_eq!(webhook_errors(true, hook()), Vec::<String>::new());
    let url = with(
        hook(),
        json!({"clientConfig": {"url": "https://hooks.example.com/validate", "caBundle": "Zm9v"}}),
    );
    assert_eq!(webhook_errors(false, url), Vec::<String>::new());
}

#[test]
fn side_effects_and_review_versions_are_required_on_create() {
    let errs = webhook_errors(
        false,
        with(
            hook(),
            json!({"sideEffects": null, "admissionReviewVersions": null}),
        ),
    );
    assert_eq!(
        errs,
        [
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
        ]
    );
    let errs = webhook_errors(
        false,
        with(
            hook(),
            json!({"sideEffects": "Some", "admissionReviewVersions": ["v2", "v2"]}),
        ),
    );
    assert_eq!(
        errs,
        [
            r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#,
            r#"webhooks[0].admissionReviewVersions[1]: Invalid value: "v2": duplicate version"#,
            r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2", "v2"}: must include at least one of v1, v1beta1"#,
        ]
    );
}

#[test]
fn an_update_may_keep_what_the_stored_configuration_already_had() {
    let old = configuration(
        false,
        with(
            hook(),
            json!({"sideEffects": "Unknown", "admissionReviewVersions": ["v2"]}),
        ),
    );
    let new = configuration(
        false,
        with(
            hook(),
            json!({"sideEffects": "Some", "admissionReviewVersions": ["v3"], "timeoutSeconds": 5}),
        ),
    );
    assert!(validate_webhook_configuration_update(&new, &old, false).is_empty());
    // A configuration that met the rules must keep meeting them.
    let old = configuration(false, hook());
    let errs = messages(&validate_webhook_configuration_update(&new, &old, false));
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].starts_with("webhooks[0].sideEffects: Unsupported value"));
}

#[test]
fn names_must_be_fully_qualified_and_unique() {
    let errs = webhook_errors(false, with(hook(), json!({"name": "hook.local"})));
    assert_eq!(
        errs,
        [
            r#"webhooks[0].name: Invalid value: "hook.local": should be a domain with at least three segments separated by dots"#
        ]
    );
    let errs = webhook_errors(false, with(hook(), json!({"name": "Hook_1.example.com"})));
    assert!(
        errs[0].contains("a lowercase RFC 1123 subdomain"),
        "{errs:?}"
    );
    let mut obj = json!({"metadata": {"name": "hooks"}, "webhooks": [hook(), hook()]});
    default_webhook_configuration(&mut obj, false);
    assert_eq!(
        messages(&validate_webhook_configuration(&obj, false)),
        [r#"webhooks[1].name: Duplicate value: "pods.hooks.example.com""#]
    );
}

#[test]
fn enums_timeouts_and_client_configs_follow_upstream() {
    let errs = webhook_errors(
        true,
        with(
            hook(),
            json!({"failurePolicy": "Maybe", "matchPolicy": "Loose", "timeoutSeconds": 31,
                   "reinvocationPolicy": "Always",
                   "clientConfig": {"url": "http://hooks.example.com", "service": {"namespace": "a", "name": "b"}}}),
        ),
    );
    assert_eq!(
        errs,
        [
            r#"webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore""#,
            r#"webhooks[0].matchPolicy: Unsupported value: "Loose": supported values: "Equivalent", "Exact""#,
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            r#"webhooks[0].reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never""#,
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ]
    );
    let errs = webhook_errors(
        false,
        with(
            hook(),
            json!({"clientConfig": {"url": "http://hooks.example.com"}}),
        ),
    );
    assert_eq!(
        errs,
        [
            r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#
        ]
    );
}

#[test]
fn rules_follow_upstream_wildcard_rules() {
    let rule = |r: Value| with(hook(), json!({"rules": [r]}));
    let errs = webhook_errors(
        false,
        rule(
            json!({"operations": ["*", "CREATE", "PATCH"], "apiGroups": ["*", "apps"],
                    "apiVersions": ["", "v1"], "resources": ["*/*", "pods"], "scope": "Global"}),
        ),
    );
    assert_eq!(
        errs,
        [
            r#"webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{"*", "CREATE", "PATCH"}: if '*' is present, must not specify other operations"#,
            r#"webhooks[0].rules[0].operations[2]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE""#,
            r#"webhooks[0].rules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other API groups"#,
            "webhooks[0].rules[0].apiVersions[0]: Required value",
            r#"webhooks[0].rules[0].resources: Invalid value: []string{"*/*", "pods"}: if '*/*' is present, must not specify other resources"#,
            r#"webhooks[0].rules[0].scope: Unsupported value: "Global": supported values: "*", "Cluster", "Namespaced""#,
        ]
    );
    let errs = webhook_errors(
        false,
        rule(
            json!({"operations": [], "apiGroups": [], "apiVersions": ["v1"],
                    "resources": ["pods/*", "pods/log", "*/scale", "deployments/scale", "*", "pods"]}),
        ),
    );
    assert_eq!(
        errs,
        [
            "webhooks[0].rules[0].operations: Required value",
            "webhooks[0].rules[0].apiGroups: Required value",
            r#"webhooks[0].rules[0].resources[1]: Invalid value: "pods/log": if 'pods/*' is present, must not specify pods/log"#,
            r#"webhooks[0].rules[0].resources[3]: Invalid value: "deployments/scale": if '*/scale' is present, must not specify deployments/scale"#,
            r#"webhooks[0].rules[0].resources: Invalid value: []string{"pods/*", "pods/log", "*/scale", "deployments/scale", "*", "pods"}: if '*' is present, must not specify other resources without subresources"#,
        ]
    );
}

#[test]
fn match_conditions_need_names_and_expressions_that_compile() {
    let errs = webhook_errors(
        false,
        with(
            hook(),
            json!({"matchConditions": [
                {"name": "a", "expression": "object.metadata.name == "},
                {"name": "a", "expression": "true"},
                {"name": "bad name!", "expression": "  "}]}),
        ),
    );
    assert_eq!(errs.len(), 4, "{errs:?}");
    assert!(
        errs[0].starts_with(
            r#"webhooks[0].matchConditions[0].expression: Invalid value: "object.metadata.name ==": compilation failed: ERROR: <input>"#
        ),
        "{errs:?}"
    );
    assert_eq!(
        errs[1],
        r#"webhooks[0].matchConditions[1].name: Duplicate value: "a""#
    );
    assert_eq!(
        errs[2],
        "webhooks[0].matchConditions[2].expression: Required value"
    );
    assert!(
        errs[3].starts_with(r#"webhooks[0].matchConditions[2].name: Invalid value: "bad name!": name part must consist of"#),
        "{errs:?}"
    );
    let many: Vec<Value> = (0..65)
        .map(|i| json!({"name": format!("c{i}"), "expression": "true"}))
        .collect();
    let errs = webhook_errors(false, with(hook(), json!({"matchConditions": many})));
    assert_eq!(
        errs,
        ["webhooks[0].matchConditions: Too many: must have at most 64 items"]
    );
}

#[test]
fn selectors_with_invalid_values_may_stay_on_update_only() {
    let bad = with(
        hook(),
        json!({"objectSelector": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["-bad-"]}]}}),
    );
    let errs = webhook_errors(false, bad.clone());
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].starts_with("webhooks[0].objectSelector.matchExpressions[0].values[0]"));
    let old = configuration(false, bad.clone());
    let new = configuration(false, with(bad, json!({"timeoutSeconds": 4})));
    assert!(validate_webhook_configuration_update(&new, &old, false).is_empty());
}

fn policy(spec: Value) -> Value {
    let mut obj = json!({"metadata": {"name": "replicas.example.com"}, "spec": spec});
    default_validating_admission_policy(&mut obj);
    obj
}

fn policy_spec() -> Value {
    json!({
        "paramKind": {"apiVersion": "example.com/v1", "kind": "ReplicaLimit"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                 "operations": ["CREATE", "UPDATE"],
                                                 "resources": ["deployments"]}]},
        "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
        "validations": [{"expression": "variables.replicas <= params.maxReplicas",
                         "messageExpression": "'at most ' + string(params.maxReplicas)",
                         "reason": "Invalid"}],
        "auditAnnotations": [{"key": "high-replicas", "valueExpression": "'yes'"}]
    })
}

fn policy_errors(spec: Value) -> Vec<String> {
    messages(&validate_validating_admission_policy(&policy(spec)))
}

#[test]
fn policies_are_defaulted_as_upstream_v1() {
    let obj = policy(policy_spec());
    assert_eq!(obj["spec"]["failurePolicy"], "Fail");
    let mc = &obj["spec"]["matchConstraints"];
    assert_eq!(mc["matchPolicy"], "Equivalent");
    assert_eq!(mc["namespaceSelector"], json!({}));
    assert_eq!(mc["objectSelector"], json!({}));
    assert_eq!(mc["resourceRules"][0]["scope"], "*");
    let mut bare = json!({"metadata": {"name": "p"}});
    default_validating_admission_policy(&mut bare);
    assert_eq!(bare["spec"], json!({"failurePolicy": "Fail"}));
}

#[test]
fn a_complete_policy_is_valid() {
    assert_eq!(policy_errors(policy_spec()), Vec::<String>::new());
}

#[test]
fn a_policy_needs_validations_or_audit_annotations_and_resource_rules() {
    let errs = policy_errors(json!({"matchConstraints": {}}));
    assert_eq!(
        errs,
        [
            "spec.matchConstraints.resourceRules: Required value",
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
        ]
    );
    let errs = policy_errors(json!({"validations": [{"expression": "true"}]}));
    assert_eq!(errs, ["spec.matchConstraints: Required value"]);
}

#[test]
fn policy_expressions_reasons_and_names_follow_upstream() {
    let spec = with(
        policy_spec(),
        json!({
            "paramKind": {"apiVersion": "a/b/c"},
            "failurePolicy": "Sometimes",
            "variables": [{"name": "in", "expression": "1"}, {"name": "", "expression": ""}],
            "validations": [{"expression": "object.spec.replicas <", "reason": "Unauthorized",
                             "message": "two\nlines"},
                            {"expression": " ", "messageExpression": "  "}],
            "auditAnnotations": [{"key": "k", "valueExpression": "'v'"},
                                 {"key": "k", "valueExpression": ""}]
        }),
    );
    let errs = policy_errors(spec);
    let expected_prefixes = [
        r#"spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#,
        r#"spec.paramKind.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
        "spec.paramKind.kind: Required value",
        r#"spec.variables[0].name: Invalid value: "in": name is not a valid CEL identifier"#,
        "spec.variables[1].name: Required value: name is not specified",
        "spec.variables[1].expression: Required value: expression is not specified",
        r#"spec.validations[0].expression: Invalid value: "object.spec.replicas <": compilation failed: ERROR: <input>"#,
        r#"spec.validations[0].message: Invalid value: "two\nlines": message must not contain line breaks"#,
        r#"spec.validations[0].reason: Unsupported value: "Unauthorized": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge""#,
        "spec.validations[1].expression: Required value: expression is not specified",
        r#"spec.validations[1].messageExpression: Invalid value: "  ": must be non-empty if specified"#,
        "spec.auditAnnotations[1].valueExpression: Required value: valueExpression is not specified",
        r#"spec.auditAnnotations[1].key: Duplicate value: "k""#,
    ];
    assert_eq!(errs.len(), expected_prefixes.len(), "{errs:#?}");
    for (e, want) in errs.iter().zip(expected_prefixes) {
        assert!(e.starts_with(want), "{e}\n  wanted {want}");
    }
}

#[test]
fn unchanged_match_conditions_are_not_compiled_again_on_update() {
    let bad = with(
        policy_spec(),
        json!({"matchConditions": [{"name": "c", "expression": "object.x =="}]}),
    );
    let old = policy(bad.clone());
    assert_eq!(validate_validating_admission_policy(&old).len(), 1);
    let new = policy(with(
        bad,
        json!({"validations": [{"expression": "object.spec.replicas < 10"}]}),
    ));
    assert!(validate_validating_admission_policy_update(&new, &old).is_empty());
}

#[test]
fn policy_status_warnings_name_a_field() {
    let obj = json!({"status": {"typeChecking": {"expressionWarnings": [{"fieldRef": "", "warning": ""}]},
                                "conditions": [{"type": "Ready", "status": "Maybe", "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "R", "message": ""}]}});
    let errs = messages(&validate_validating_admission_policy_status(&obj));
    assert_eq!(
        errs[..2],
        [
            "status.typeChecking.expressionWarnings[0].warning: Required value",
            "status.typeChecking.expressionWarnings[0].fieldRef: Required value",
        ]
    );
    assert!(errs[2].starts_with("status.conditions[0].status: Unsupported value"));
}

fn binding(spec: Value) -> Value {
    let mut obj = json!({"metadata": {"name": "replicas-binding"}, "spec": spec});
    default_validating_admission_policy_binding(&mut obj);
    obj
}

fn binding_errors(spec: Value) -> Vec<String> {
    messages(&validate_validating_admission_policy_binding(&binding(
        spec,
    )))
}

#[test]
fn bindings_are_defaulted_and_validated_as_upstream() {
    let spec = json!({"policyName": "replicas.example.com",
                      "paramRef": {"name": "limits", "namespace": "ops", "parameterNotFoundAction": "Deny"},
                      "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}},
                      "validationActions": ["Deny", "Audit"]});
    let obj = binding(spec.clone());
    assert_eq!(obj["spec"]["matchResources"]["matchPolicy"], "Equivalent");
    assert_eq!(obj["spec"]["matchResources"]["objectSelector"], json!({}));
    assert_eq!(
        obj["spec"]["matchResources"]["namespaceSelector"],
        json!({"matchLabels": {"env": "prod"}})
    );
    assert_eq!(binding_errors(spec), Vec::<String>::new());

    let errs = binding_errors(json!({"paramRef": {"name": "a", "selector": {}},
                                     "validationActions": ["Deny", "Warn", "Deny", "Block"]}));
    assert_eq!(
        errs,
        [
            "spec.policyName: Required value",
            "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
            "spec.paramRef.parameterNotFoundAction: Required value",
            r#"spec.validationActions[2]: Duplicate value: "Deny""#,
            r#"spec.validationActions[3]: Unsupported value: "Block": supported values: "Audit", "Deny", "Warn""#,
            r#"spec.validationActions: Invalid value: []admissionregistration.ValidationAction{"Deny", "Warn", "Deny", "Block"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"#,
        ]
    );
    let errs = binding_errors(
        json!({"policyName": "p", "paramRef": {"parameterNotFoundAction": "Ignore"}}),
    );
    assert_eq!(
        errs,
        [
            "spec.paramRef: Required value: one of name or selector must be specified",
            r#"spec.paramRef.parameterNotFoundAction: Unsupported value: "Ignore": supported values: "Deny", "Allow""#,
            "spec.validationActions: Required value: at least one validation action is required",
        ]
    );
}

#[test]
fn odd_shapes_never_panic() {
    for odd in [
        json!(null),
        json!([]),
        json!({"webhooks": "x", "spec": 3}),
        json!({"webhooks": [null, 1, {"rules": [null], "clientConfig": {"url": 5, "service": "s"},
                                      "matchConditions": [1]}]}),
        json!({"spec": {"matchConstraints": [], "validations": [null], "paramKind": "k",
                        "paramRef": [], "validationActions": [1]}}),
    ] {
        let mut obj = odd.clone();
        default_webhook_configuration(&mut obj, true);
        default_validating_admission_policy(&mut obj);
        default_validating_admission_policy_binding(&mut obj);
        let _ = validate_webhook_configuration(&obj, true);
        let _ = validate_webhook_configuration_update(&obj, &odd, false);
        let _ = validate_validating_admission_policy(&obj);
        let _ = validate_validating_admission_policy_update(&obj, &odd);
        let _ = validate_validating_admission_policy_status(&obj);
        let _ = validate_validating_admission_policy_binding(&obj);
    }
}
