//! Validation actions (Deny, Warn, Audit) and auditAnnotations.

use super::*;

#[test]
fn warn_action_warns_without_denying() {
    let p = replicas_policy(json!({"message": "too many"}));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = verdict(&p, &binding(&["Warn"]), &create(&req, &obj));
    assert_eq!(
        v,
        Verdict {
            denial: None,
            warnings: vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': too many"
                    .to_string()
            ],
            audit_annotations: vec![],
        }
    );
}

#[test]
fn audit_action_records_the_failure() {
    let p = policy(json!({"validations": [
        {"expression": "true"},
        {"expression": "false", "message": "<bad> & \"quoted\""}]}));
    let (req, obj) = (request("CREATE"), deployment(9));
    let v = verdict(&p, &binding(&["Audit", "Warn"]), &create(&req, &obj));
    assert_eq!(v.denial, None);
    assert_eq!(v.warnings.len(), 1);
    assert_eq!(
        v.audit_annotations,
        vec![(
            "validation.policy.admission.k8s.io/validation_failure".to_string(),
            r#"[{"message":"\u003cbad\u003e \u0026 \"quoted\"","policy":"p","binding":"b","expressionIndex":1,"validationActions":["Audit","Warn"]}]"#.to_string()
        )]
    );
}

#[test]
fn audit_annotations_are_published_under_the_policy_name() {
    let p = policy(
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "auditAnnotations": [
            {"key": "high-replicas", "valueExpression": "object.spec.replicas > 5 ? 'replicas: ' + params.data.max : null"},
            {"key": "empty", "valueExpression": "'   '"},
            {"key": "none", "valueExpression": "null"}]}),
    );
    let (req, obj) = (request("CREATE"), deployment(9));
    let b = binding(&["Deny"]);
    let (p1, p2) = (json!({"data": {"max": "1"}}), json!({"data": {"max": "2"}}));
    let mut d = Decisions::new(&p);
    for param in [&p1, &p2, &p1] {
        let act = Activation {
            params: Some(param),
            ..create(&req, &obj)
        };
        d.add_evaluation(&b, &evaluate(&p, &act));
    }
    let v = d.finish();
    assert_eq!(v.denial, None);
    assert_eq!(
        v.audit_annotations,
        vec![(
            "p/high-replicas".to_string(),
            "replicas: 1, replicas: 2".to_string()
        )]
    );
}

#[test]
fn audit_annotation_failures() {
    let spec = |fp: &str, expression: &str| json!({"failurePolicy": fp, "auditAnnotations": [{"key": "k", "valueExpression": expression}]});
    let (req, obj) = (request("CREATE"), deployment(9));
    let b = binding(&["Warn"]);
    // A value of the wrong type refuses the request whatever the failure policy.
    for fp in ["Fail", "Ignore"] {
        let v = verdict(
            &policy(spec(fp, "object.spec.replicas")),
            &b,
            &create(&req, &obj),
        );
        assert_eq!(
            denial_message(&v),
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: valueExpression 'object.spec.replicas' resulted in unsupported return type: int. Return type must be either string or null.",
            "{fp}"
        );
    }
    // An evaluation error only under Fail.
    let v = verdict(
        &policy(spec("Fail", "object.spec.nope")),
        &b,
        &create(&req, &obj),
    );
    assert_eq!(
        denial_message(&v),
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'object.spec.nope' resulted in error: no such key: nope"
    );
    let v = verdict(
        &policy(spec("Ignore", "object.spec.nope")),
        &b,
        &create(&req, &obj),
    );
    assert_eq!(v, Verdict::default());
}
