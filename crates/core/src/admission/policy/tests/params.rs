//! Params: by name, by selector, not found, misconfigured.

use super::*;

fn param_policy() -> CompiledPolicy {
    policy(json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "object.spec.replicas <= int(params.data.max)",
            "messageExpression": "'at most ' + params.data.max + ' (' + params.metadata.name + ')'"}]}))
}

fn config_map(namespace: &str, name: &str, max: &str, tier: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": namespace, "labels": {"tier": tier}},
        "data": {"max": max}})
}

fn param_binding(param_ref: Value) -> Value {
    json!({"metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny"], "paramRef": param_ref}})
}

/// Resolves the binding's params and evaluates the policy once per param.
fn decide_with_params(
    p: &CompiledPolicy,
    b: &Value,
    candidates: &[Value],
    scope: ParamScope,
    act: &Activation<'_>,
) -> Verdict {
    let mut d = Decisions::new(p);
    let namespace = act.request.get("namespace").and_then(Value::as_str);
    match resolve_params(b, p, candidates, scope, namespace) {
        Err(e) => d.add_config_error(Some(b), &e.to_string()),
        Ok(params) => {
            for param in params {
                let act = Activation {
                    params: param,
                    ..act.clone()
                };
                d.add_evaluation(b, &evaluate(p, &act));
            }
        }
    }
    d.finish()
}

#[test]
fn params_by_name_default_to_the_request_namespace() {
    let p = param_policy();
    let candidates = [
        config_map("other", "limits", "100", "a"),
        config_map("ns", "limits", "5", "a"),
    ];
    let b = param_binding(json!({"name": "limits", "parameterNotFoundAction": "Deny"}));
    let got = resolve_params(&b, &p, &candidates, ParamScope::Namespaced, Some("ns"));
    assert_eq!(got, Ok(vec![Some(&candidates[1])]));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = decide_with_params(
        &p,
        &b,
        &candidates,
        ParamScope::Namespaced,
        &create(&req, &obj),
    );
    assert!(
        denial_message(&v).ends_with("denied request: at most 5 (limits)"),
        "{v:?}"
    );
    // paramRef.namespace wins.
    let b = param_binding(json!({"name": "limits", "namespace": "other"}));
    let v = decide_with_params(
        &p,
        &b,
        &candidates,
        ParamScope::Namespaced,
        &create(&req, &obj),
    );
    assert_eq!(v, Verdict::default());
}

#[test]
fn params_by_selector_evaluate_once_per_param() {
    let p = param_policy();
    let candidates = [
        config_map("ns", "loose", "100", "gold"),
        config_map("ns", "strict", "2", "gold"),
        config_map("ns", "ignored", "1", "bronze"),
    ];
    let b = param_binding(json!({"selector": {"matchLabels": {"tier": "gold"}}}));
    let got = resolve_params(&b, &p, &candidates, ParamScope::Namespaced, Some("ns"));
    assert_eq!(got, Ok(vec![Some(&candidates[0]), Some(&candidates[1])]));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = decide_with_params(
        &p,
        &b,
        &candidates,
        ParamScope::Namespaced,
        &create(&req, &obj),
    );
    assert!(
        denial_message(&v).ends_with("denied request: at most 2 (strict)"),
        "{v:?}"
    );
    // `{}` selects every param in scope.
    let b = param_binding(json!({"selector": {}}));
    let got = resolve_params(&b, &p, &candidates, ParamScope::Namespaced, Some("ns"));
    assert_eq!(got.map(|v| v.len()), Ok(3));
}

#[test]
fn missing_params_deny_or_skip_by_parameter_not_found_action() {
    let p = param_policy();
    let (req, obj) = (request("CREATE"), deployment(9));
    let deny = param_binding(json!({"name": "absent", "parameterNotFoundAction": "Deny"}));
    assert_eq!(
        resolve_params(&deny, &p, &[], ParamScope::Namespaced, Some("ns")),
        Err(ParamsError::NotFound)
    );
    let v = decide_with_params(&p, &deny, &[], ParamScope::Namespaced, &create(&req, &obj));
    assert_eq!(
        denial_message(&v),
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    let allow = param_binding(json!({"name": "absent", "parameterNotFoundAction": "Allow"}));
    assert_eq!(
        resolve_params(&allow, &p, &[], ParamScope::Namespaced, Some("ns")),
        Ok(vec![])
    );
    let v = decide_with_params(&p, &allow, &[], ParamScope::Namespaced, &create(&req, &obj));
    assert_eq!(v, Verdict::default());
}

#[test]
fn param_configuration_errors() {
    let p = param_policy();
    let cluster_request = |b: &Value, scope| resolve_params(b, &p, &[], scope, None);
    assert_eq!(
        cluster_request(&param_binding(json!({"name": "x"})), ParamScope::Namespaced),
        Err(ParamsError::NamespacedParamsForClusterScopedRequest)
    );
    assert_eq!(
        cluster_request(
            &param_binding(json!({"name": "x", "namespace": "ns"})),
            ParamScope::Cluster
        ),
        Err(ParamsError::NamespaceForClusterScopedParams)
    );
    assert_eq!(
        cluster_request(
            &param_binding(json!({"name": "x", "selector": {}})),
            ParamScope::Cluster
        ),
        Err(ParamsError::NameAndSelector)
    );
    assert_eq!(
        cluster_request(&param_binding(json!({})), ParamScope::Cluster),
        Err(ParamsError::NoNameOrSelector)
    );
    assert!(matches!(
        cluster_request(
            &param_binding(
                json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Nope"}]}})
            ),
            ParamScope::Cluster
        ),
        Err(ParamsError::InvalidSelector(_))
    ));
    // Without paramKind, or without paramRef: one evaluation with `params: null`.
    let plain = policy(json!({"validations": [{"expression": "true"}]}));
    let b = param_binding(json!({"name": "x"}));
    assert_eq!(
        resolve_params(&b, &plain, &[], ParamScope::Cluster, None),
        Ok(vec![None])
    );
    assert_eq!(
        resolve_params(&binding(&["Deny"]), &p, &[], ParamScope::Cluster, None),
        Ok(vec![None])
    );
}

#[test]
fn params_without_type_meta_get_the_param_kind() {
    let p = policy(
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [
            {"expression": "params.kind == 'ConfigMap' && params.apiVersion == 'v1'"},
            {"expression": "params == null", "message": "unset"}]}),
    );
    let (req, obj) = (request("CREATE"), deployment(1));
    let param = json!({"metadata": {"name": "x"}});
    let act = Activation {
        params: Some(&param),
        ..create(&req, &obj)
    };
    let e = evaluate(&p, &act);
    let got: Vec<&str> = e.failures.iter().map(|f| f.message.as_str()).collect();
    assert_eq!(got, vec!["unset"]);
    // No param: `params` is null.
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(e.failures.len(), 1);
    assert_eq!(e.failures[0].expression_index, 0);
}

#[test]
fn config_errors_are_dropped_under_ignore() {
    let p = policy(json!({"failurePolicy": "Ignore", "validations": []}));
    let mut d = Decisions::new(&p);
    d.add_config_error(Some(&binding(&["Deny"])), "boom");
    d.add_config_error(None, "boom");
    assert_eq!(d.finish(), Verdict::default());
    let p = policy(json!({"validations": []}));
    let mut d = Decisions::new(&p);
    d.add_config_error(None, "paramKind kind `v1, Kind=Nope` not known");
    assert_eq!(
        d.finish().denial.map(|d| d.message),
        Some(
            "ValidatingAdmissionPolicy 'p' denied request: failed to configure policy: paramKind kind `v1, Kind=Nope` not known"
                .to_string()
        )
    );
}
