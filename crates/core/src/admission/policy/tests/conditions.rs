//! matchConditions, of policies and of webhooks.

use super::*;

#[test]
fn false_match_condition_skips_the_policy() {
    let p = policy(json!({
        "matchConditions": [
            {"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"},
            {"name": "is-web", "expression": "object.metadata.name == 'db'"}],
        "validations": [{"expression": "false"}]}));
    let (req, obj) = (request("CREATE"), deployment(3));
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(
        e,
        Evaluation {
            skipped_by_match_conditions: true,
            ..Evaluation::default()
        }
    );
    assert_eq!(
        verdict(&p, &binding(&["Deny"]), &create(&req, &obj)),
        Verdict::default()
    );
}

#[test]
fn match_condition_errors_follow_the_failure_policy() {
    let spec = |failure_policy: &str| {
        json!({"failurePolicy": failure_policy,
            "matchConditions": [{"name": "broken", "expression": "object.spec.nothing == 1"}],
            "validations": [{"expression": "true"}]})
    };
    let (req, obj) = (request("CREATE"), deployment(3));
    let fail = policy(spec("Fail"));
    let v = verdict(&fail, &binding(&["Deny"]), &create(&req, &obj));
    assert_eq!(
        denial_message(&v),
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'object.spec.nothing == 1' resulted in error: no such key: nothing"
    );
    let ignore = policy(spec("Ignore"));
    assert_eq!(
        verdict(&ignore, &binding(&["Deny"]), &create(&req, &obj)),
        Verdict::default()
    );
}

#[test]
fn webhook_match_conditions() {
    let (req, obj) = (request("CREATE"), deployment(3));
    let act = create(&req, &obj);
    let cond = |name: &str, expression: &str| json!({"name": name, "expression": expression});
    assert_eq!(match_conditions(&[], &act), Ok(true));
    assert_eq!(
        match_conditions(
            &[
                cond("a", "request.operation == 'CREATE'"),
                cond("b", "has(object.spec)")
            ],
            &act
        ),
        Ok(true)
    );
    // A false condition wins over errors.
    assert_eq!(
        match_conditions(&[cond("err", "1/0 == 1"), cond("no", "false")], &act),
        Ok(false)
    );
    let one = match_conditions(&[cond("err", "1/0 == 1"), cond("yes", "true")], &act);
    assert_eq!(
        one,
        Err(MatchConditionError::Failed(vec![ConditionFailure {
            name: "err".to_string(),
            message: "expression '1/0 == 1' resulted in error: division by zero".to_string(),
        }]))
    );
    let two = match_conditions(&[cond("x", "1/0 == 1"), cond("y", "params.a")], &act);
    assert_eq!(
        two.map_err(|e| e.to_string()),
        Err("[expression '1/0 == 1' resulted in error: division by zero, compilation error: compilation failed: ERROR: <input>: undeclared reference to 'params' (in container '')]".to_string())
    );
    // Compiled once, evaluated for many requests.
    let compiled = CompiledConditions::compile(&[cond("ns", "request.namespace == 'ns'")]);
    assert!(!compiled.is_empty());
    assert_eq!(compiled.evaluate(&act), Ok(true));
    let other = json!({"namespace": "other"});
    assert_eq!(compiled.evaluate(&Activation::new(&other)), Ok(false));
}
