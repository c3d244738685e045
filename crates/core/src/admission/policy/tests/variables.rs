//! Composited variables: composition, laziness, errors.

use super::*;

#[test]
fn variables_compose() {
    let p = policy(json!({
        "variables": [
            {"name": "replicas", "expression": "object.spec.replicas"},
            {"name": "tooMany", "expression": "variables.replicas > 5"}],
        "validations": [{"expression": "!variables.tooMany",
            "messageExpression": "'replicas: ' + string(variables.replicas)"}]}));
    assert!(p.compile_errors().is_empty(), "{:?}", p.compile_errors());
    let req = request("CREATE");
    let (small, big) = (deployment(2), deployment(7));
    assert_eq!(
        verdict(&p, &binding(&["Deny"]), &create(&req, &small)),
        Verdict::default()
    );
    let v = verdict(&p, &binding(&["Deny"]), &create(&req, &big));
    assert!(
        denial_message(&v).ends_with("denied request: replicas: 7"),
        "{v:?}"
    );
}

#[test]
fn variable_values_behave_like_the_values_they_hold() {
    let p = policy(json!({
        "variables": [
            {"name": "names", "expression": "object.spec.names"},
            {"name": "obj", "expression": "object"},
            {"name": "labels", "expression": "object.metadata.labels"},
            {"name": "n", "expression": "object.spec.replicas"}],
        "validations": [
            {"expression": "variables.names.join(',') == 'b,a'"},
            {"expression": "!variables.names.isSorted()"},
            {"expression": "size(variables.names) == 2 && variables.names[1] == 'a'"},
            {"expression": "'a' in variables.names && 'app' in variables.labels"},
            {"expression": "[variables.obj][0].spec.replicas == 3"},
            {"expression": "variables.obj == object && variables.obj.metadata.name.startsWith('w')"},
            {"expression": "variables.n + 1 == 4 && variables.n * 2 == 6 && -variables.n < 0"},
            {"expression": "variables.names.map(x, x + '!') == ['b!', 'a!']"},
            {"expression": "variables['n'] == 3 && has(variables.obj.spec)"},
            {"expression": "variables.labels.app == 'web' && variables.obj.spec.ratio == 0.5"}]}));
    assert!(p.compile_errors().is_empty(), "{:?}", p.compile_errors());
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(e.failures, vec![]);
}

#[test]
fn variables_cannot_read_later_ones_or_unknown_ones() {
    let p = policy(json!({
        "variables": [
            {"name": "a", "expression": "variables.b"},
            {"name": "b", "expression": "1"}],
        "validations": [{"expression": "variables.nope == 1"}, {"expression": "variables.a == 1"}]}));
    let errors = p.compile_errors();
    assert_eq!(
        errors,
        vec![
            "spec.variables[0].expression: compilation failed: ERROR: <input>: undefined field 'b'",
            "spec.validations[0].expression: compilation failed: ERROR: <input>: undefined field 'nope'",
        ]
    );
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(
        e.failures[1].message,
        "expression 'variables.a == 1' resulted in error: composited variable \"a\" fails to compile: compilation failed: ERROR: <input>: undefined field 'b'"
    );
}

#[test]
fn variable_errors_are_reported_through_the_expression_reading_them() {
    let p = policy(json!({
        "variables": [{"name": "missing", "expression": "object.spec.nothing"}],
        "validations": [{"expression": "variables.missing == 1"}]}));
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(
        e.failures,
        vec![Failure {
            expression_index: 0,
            message: "expression 'variables.missing == 1' resulted in error: composited variable \"missing\" fails to evaluate: no such key: nothing".to_string(),
            reason: "Invalid".to_string(),
            kind: FailureKind::EvaluationError,
        }]
    );
}

#[test]
fn variables_are_evaluated_lazily_and_once_per_phase() {
    let p = policy(json!({
        "variables": [
            {"name": "allowed", "expression": "authorizer.path('/x').check('get').allowed()"},
            {"name": "unused", "expression": "authorizer.path('/y').check('get').allowed()"}],
        "validations": [
            {"expression": "!variables.allowed && !variables.allowed"},
            {"expression": "!variables.allowed"}]}));
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &with_authorizer(&req, &obj, &authz));
    assert_eq!(e.failures, vec![]);
    let paths: Vec<AuthzTarget> = authz.calls().into_iter().map(|c| c.target).collect();
    assert_eq!(
        paths,
        vec![AuthzTarget::NonResource {
            path: "/x".to_string()
        }]
    );
}

#[test]
fn a_variable_holding_variables_makes_no_cycle_and_no_panic() {
    let p = policy(json!({
        "variables": [{"name": "all", "expression": "variables"},
                      {"name": "list", "expression": "[variables, variables.all]"}],
        "validations": [{"expression": "size(variables.list) == 2"},
                        {"expression": "variables.all.all == 1"}]}));
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &create(&req, &obj));
    // Inside a variable, `variables` shows only those declared before it.
    assert_eq!(
        e.failures,
        vec![Failure {
            expression_index: 1,
            message: "expression 'variables.all.all == 1' resulted in error: no such key: all"
                .to_string(),
            reason: "Invalid".to_string(),
            kind: FailureKind::EvaluationError,
        }]
    );
}
