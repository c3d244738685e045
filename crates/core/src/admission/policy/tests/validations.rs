//! Validations, their messages and reasons; compile and evaluation errors under each failurePolicy.

use super::*;

#[test]
fn failing_validation_denies_with_its_message() {
    let p = replicas_policy(json!({"message": "  too many replicas  "}));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert_eq!(
        v.denial,
        Some(Denial {
            message:
                "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many replicas"
                    .to_string(),
            reason: "Invalid".to_string(),
            code: 422,
        })
    );
    let d = v
        .denial
        .as_ref()
        .map(|d| d.status_message("deployments.apps", "web"));
    assert_eq!(
        d.as_deref(),
        Some(
            "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many replicas"
        )
    );
}

#[test]
fn passing_validation_admits() {
    let p = replicas_policy(json!({}));
    let (req, obj) = (request("CREATE"), deployment(3));
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert_eq!(v, Verdict::default());
}

#[test]
fn validation_without_message_reports_the_expression() {
    let p = replicas_policy(json!({}));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert_eq!(
        denial_message(&v),
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: object.spec.replicas <= 5"
    );
}

#[test]
fn message_expression_gives_the_message() {
    let p = replicas_policy(json!({"message": "static",
        "messageExpression": "'replicas ' + string(object.spec.replicas) + ' exceed 5'"}));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert!(
        denial_message(&v).ends_with("denied request: replicas 9 exceed 5"),
        "{v:?}"
    );
}

#[test]
fn unusable_message_expressions_fall_back_to_the_message() {
    let (req, obj) = (request("CREATE"), deployment(9));
    for message_expression in [
        "42",
        "'two\\nlines'",
        "'   '",
        "'x'.repeat(10)",
        "object.missing.field",
        "'x' + 'y' * 2",
        "(",
        "authorizer.path('/x').check('get').reason()",
    ] {
        let p = replicas_policy(
            json!({"message": "fallback", "messageExpression": message_expression}),
        );
        let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
        assert!(
            denial_message(&v).ends_with("denied request: fallback"),
            "{message_expression}: {v:?}"
        );
    }
    let long = format!("'{}'", "x".repeat(5 * 1024 + 1));
    let p = replicas_policy(json!({"messageExpression": long}));
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert!(
        denial_message(&v).ends_with("failed expression: object.spec.replicas <= 5"),
        "{v:?}"
    );
}

#[test]
fn reason_sets_the_status_code() {
    let (req, obj) = (request("CREATE"), deployment(9));
    for (reason, code) in [
        ("Invalid", 422),
        ("Forbidden", 403),
        ("Unauthorized", 401),
        ("RequestEntityTooLarge", 413),
    ] {
        let p = replicas_policy(json!({"reason": reason}));
        let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
        let d = v.denial.unwrap_or_else(|| panic!("{reason}: denied"));
        assert_eq!((d.reason.as_str(), d.code), (reason, code));
    }
}

#[test]
fn non_boolean_validation_fails_like_false() {
    let p = policy(json!({"validations": [{"expression": "object.metadata.name"}]}));
    let (req, obj) = (request("CREATE"), deployment(1));
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(e.failures.len(), 1);
    assert_eq!(e.failures[0].kind, FailureKind::Violation);
    assert_eq!(
        e.failures[0].message,
        "failed expression: object.metadata.name"
    );
}

#[test]
fn every_failed_validation_is_reported_in_order() {
    let p = policy(json!({"validations": [
        {"expression": "false", "message": "first"},
        {"expression": "true"},
        {"expression": "1 == 2", "message": "third"}]}));
    let (req, obj) = (request("CREATE"), deployment(1));
    let e = evaluate(&p, &create(&req, &obj));
    let got: Vec<(usize, &str)> = e
        .failures
        .iter()
        .map(|f| (f.expression_index, f.message.as_str()))
        .collect();
    assert_eq!(got, vec![(0, "first"), (2, "third")]);
    // The first one denies.
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &obj));
    assert!(denial_message(&v).ends_with(": first"));
}

#[test]
fn compile_errors_follow_the_failure_policy() {
    let spec = |fp: &str| json!({"failurePolicy": fp, "validations": [{"expression": "object.spec.replicas <"}]});
    let (req, obj) = (request("CREATE"), deployment(3));
    let fail = policy(spec("Fail"));
    assert_eq!(fail.compile_errors().len(), 1);
    let v = verdict(&fail, &binding(&["Deny"]), &create(&req, &obj));
    assert!(
        denial_message(&v).starts_with(
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: compilation error: compilation failed: ERROR: <input>:1:"
        ),
        "{v:?}"
    );
    assert_eq!(v.denial.map(|d| d.code), Some(422));
    let ignore = policy(spec("Ignore"));
    assert_eq!(
        verdict(&ignore, &binding(&["Deny"]), &create(&req, &obj)),
        Verdict::default()
    );
}

#[test]
fn evaluation_errors_go_through_the_validation_actions() {
    let p = policy(json!({"validations": [{"expression": "object.spec.nothing > 1"}]}));
    let (req, obj) = (request("CREATE"), deployment(3));
    let v = verdict(&p, &binding(&["Warn"]), &create(&req, &obj));
    assert_eq!(v.denial, None);
    assert_eq!(
        v.warnings,
        vec![
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': expression 'object.spec.nothing > 1' resulted in error: no such key: nothing"
        ]
    );
}

#[test]
fn params_are_undeclared_without_a_param_kind() {
    let p = policy(json!({"validations": [{"expression": "params.max > 1"}]}));
    assert_eq!(
        p.compile_errors(),
        vec![
            "spec.validations[0].expression: compilation failed: ERROR: <input>: undeclared reference to 'params' (in container '')"
        ]
    );
    // Comprehension variables named like admission variables are not them.
    let p = policy(json!({"validations": [{"expression": "[1].all(params, params == 1)"}]}));
    assert!(p.compile_errors().is_empty(), "{:?}", p.compile_errors());
}
