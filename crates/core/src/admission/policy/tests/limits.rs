//! Cost limits, expression depth, and inputs that must not panic.

use super::*;

#[test]
fn an_expression_over_the_per_call_limit_fails() {
    // A loop is charged before it runs: 300,000 iterations of a few units each pass 1,000,000.
    let items: Vec<i64> = (0..300_000).collect();
    let obj = json!({"items": items});
    let p = policy(json!({"validations": [{"expression": "object.items.all(x, x >= 0)"}]}));
    let req = request("CREATE");
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(
        e.failures[0].message,
        "expression 'object.items.all(x, x >= 0)' resulted in error: operation cancelled: actual cost limit exceeded"
    );
}

#[test]
fn the_runtime_budget_stops_evaluation() {
    let check = json!({"expression": "authorizer.path('/a').check('get').allowed() || authorizer.path('/b').check('get').allowed() || true"});
    let validations: Vec<Value> = (0..15).map(|_| check.clone()).collect();
    let p = policy(json!({"validations": validations}));
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(1));
    let e = evaluate(&p, &with_authorizer(&req, &obj, &authz));
    assert_eq!(
        e.failures,
        vec![Failure {
            expression_index: 0,
            message: "validation failed due to running out of cost budget, no further validation rules will be run".to_string(),
            reason: "Invalid".to_string(),
            kind: FailureKind::EvaluationError,
        }]
    );
    // Under Ignore that is no refusal.
    let mut spec = json!({"validations": (0..15).map(|_| check.clone()).collect::<Vec<_>>()});
    spec["failurePolicy"] = json!("Ignore");
    let p = policy(spec);
    let v = verdict(
        &p,
        &binding(&["Deny"]),
        &with_authorizer(&req, &obj, &authz),
    );
    assert_eq!(v, Verdict::default());
}

#[test]
fn deep_expressions_run_on_a_large_stack_and_deeper_ones_are_refused() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let p = policy(json!({"validations": [{"expression": format!("size({}) == 1", nested(40))}]}));
    assert!(p.compile_errors().is_empty(), "{:?}", p.compile_errors());
    let (req, obj) = (request("CREATE"), deployment(1));
    assert_eq!(evaluate(&p, &create(&req, &obj)).failures, vec![]);

    // Variables add their depth to those reading them.
    let variables: Vec<Value> = (0..4)
        .map(|i| {
            let read = if i == 0 { "1".to_string() } else { format!("variables.v{}", i - 1) };
            json!({"name": format!("v{i}"), "expression": format!("size({}) == 1 ? {read} : 0", nested(20))})
        })
        .collect();
    let p = policy(
        json!({"variables": variables, "validations": [{"expression": "variables.v3 == 1"}]}),
    );
    // A chain within the limit evaluates (on the large stack).
    let chain = policy(
        json!({"variables": variables[..2], "validations": [{"expression": "variables.v1 == 1"}]}),
    );
    assert!(
        chain.compile_errors().is_empty(),
        "{:?}",
        chain.compile_errors()
    );
    assert_eq!(evaluate(&chain, &create(&req, &obj)).failures, vec![]);

    // Each variable nests about 24 levels: v2 reads v1 which reads v0, over 64.
    let errors = p.compile_errors();
    assert_eq!(
        errors,
        vec![
            "spec.variables[2].expression: compilation failed: ERROR: <input>: expression nested too deeply with the variables it reads (more than 64 levels)"
        ]
    );
    let e = evaluate(&p, &create(&req, &obj));
    assert!(
        e.failures[0]
            .message
            .contains("composited variable \"v2\" fails to compile"),
        "{e:?}"
    );
}

#[test]
fn malformed_policies_bindings_and_objects_do_not_panic() {
    let deep = (0..300).fold(json!(1), |acc, _| json!({"a": [acc]}));
    let specs = [
        json!(null),
        json!(5),
        json!({"validations": "x", "variables": {}, "matchConditions": 3}),
        json!({"validations": [1, null, {"expression": 5}, {"expression": ""}, {}],
            "auditAnnotations": [{"key": 1}], "paramKind": "x", "failurePolicy": 7}),
        json!({"variables": [{}, {"name": "x", "expression": "variables.x"}, {"name": "y", "expression": "variables.y"}],
            "validations": [{"expression": "variables.x == variables.y"}]}),
        json!({"matchConditions": [{"expression": "("}, {"name": "n"}], "validations": [{"expression": "true"}]}),
        json!({"validations": [
            {"expression": "1/0 == 1"}, {"expression": "'a' + 1 == 'a1'"}, {"expression": "self"},
            {"expression": "object.a[0].a[0].a[0] == object"}, {"expression": "string(object) == ''"},
            {"expression": "dyn(object).a.size() > 0"}, {"expression": "object.a.exists(x, x.a == 1)"},
            {"expression": "oldObject.a"}, {"expression": "request[0]"}, {"expression": "params"},
            {"expression": "[variables][0]"}, {"expression": "variables[1]"}, {"expression": "variables['x' + 'y']"},
            {"expression": "'ü' + '\u{1F600}' == 'x'", "messageExpression": "'\u{0}'"},
            {"expression": "9223372036854775807 + 1 == 0"}, {"expression": "object.a.map(x, x).size() == 1"},
            {"expression": "timestamp('2020-01-01T00:00:00Z') > timestamp('2019-01-01T00:00:00Z')"}]}),
    ];
    let bindings = [
        json!(null),
        json!([]),
        json!({"spec": {"validationActions": "Deny", "paramRef": 5}}),
        json!({"metadata": {"name": 5}, "spec": {"validationActions": ["Deny", "Audit", "Warn", 4, "Other"],
            "paramRef": {"selector": "x", "name": 3}}}),
    ];
    let requests = [json!(null), json!([1]), request("CONNECT")];
    let objects = [
        json!(null),
        json!("s"),
        deep.clone(),
        json!({"a": [{"a": [{"a": [1]}]}]}),
    ];
    for spec in &specs {
        let p = compile(&json!({"metadata": {"name": ["x"]}, "spec": spec}));
        let _ = p.compile_errors();
        for b in &bindings {
            for req in &requests {
                for obj in &objects {
                    let _ = resolve_params(b, &p, &objects, ParamScope::Namespaced, Some("ns"));
                    let act = Activation {
                        object: Some(obj),
                        old_object: Some(obj),
                        params: Some(obj),
                        namespace_object: Some(obj),
                        ..Activation::new(req)
                    };
                    let _ = verdict(&p, b, &act);
                }
            }
        }
    }
    let weird_conditions = [
        json!(null),
        json!({"name": 1, "expression": []}),
        json!("x"),
    ];
    let req = request("CREATE");
    let _ = match_conditions(&weird_conditions, &create(&req, &deep));
}

#[test]
fn compiled_policies_and_conditions_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<CompiledPolicy>();
    shareable::<CompiledConditions>();
    shareable::<Activation<'static>>();
    shareable::<Verdict>();
}
