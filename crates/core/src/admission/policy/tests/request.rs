//! The request's variables: object, oldObject, request, namespaceObject.

use super::*;

#[test]
fn object_is_null_for_delete_and_old_object_for_create() {
    let p = policy(json!({"validations": [
        {"expression": "request.operation != 'DELETE' || object == null", "message": "delete"},
        {"expression": "request.operation != 'CREATE' || oldObject == null", "message": "create"}]}));
    let old = deployment(3);
    let delete_req = request("DELETE");
    let delete = Activation {
        old_object: Some(&old),
        ..Activation::new(&delete_req)
    };
    assert_eq!(evaluate(&p, &delete).failures, vec![]);
    let create_req = request("CREATE");
    assert_eq!(evaluate(&p, &create(&create_req, &old)).failures, vec![]);
}

#[test]
fn old_object_is_visible_on_update() {
    let p = policy(json!({"validations": [{
        "expression": "object.spec.replicas >= oldObject.spec.replicas",
        "messageExpression": "'cannot scale down from ' + string(oldObject.spec.replicas)"}]}));
    let req = request("UPDATE");
    let (old, new) = (deployment(5), deployment(2));
    let act = Activation {
        object: Some(&new),
        old_object: Some(&old),
        ..Activation::new(&req)
    };
    let v = verdict(&p, &binding(&["Deny"]), &act);
    assert!(
        denial_message(&v).ends_with(": cannot scale down from 5"),
        "{v:?}"
    );
}

#[test]
fn request_fields_are_visible() {
    let p = policy(json!({"validations": [
        {"expression": "request.userInfo.username == 'alice'"},
        {"expression": "'dev' in request.userInfo.groups"},
        {"expression": "request.kind.kind == 'Deployment' && request.resource.resource == 'deployments'"},
        {"expression": "request.name == 'web' && request.namespace == 'ns' && request.dryRun == false"},
        {"expression": "request.options.kind == 'CreateOptions'"},
        {"expression": "!has(request.object) && !has(request.oldObject)"}]}));
    let mut req = request("CREATE");
    if let Some(m) = req.as_object_mut() {
        m.insert("object".to_string(), json!({"spec": {}}));
    }
    let obj = deployment(1);
    assert_eq!(evaluate(&p, &create(&req, &obj)).failures, vec![]);
}

#[test]
fn namespace_object_shows_its_labels_and_hides_other_metadata() {
    let p = policy(json!({"validations": [
        {"expression": "namespaceObject.metadata.labels.env == 'prod'", "message": "not prod"},
        {"expression": "!has(namespaceObject.metadata.managedFields)"},
        {"expression": "namespaceObject.status.phase == 'Active'"}]}));
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "ns", "labels": {"env": "prod"},
            "managedFields": [{"manager": "kubectl"}]},
        "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
    let (req, obj) = (request("CREATE"), deployment(1));
    let act = Activation {
        namespace_object: Some(&ns),
        ..create(&req, &obj)
    };
    assert_eq!(evaluate(&p, &act).failures, vec![]);
    // Cluster-scoped: null.
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(e.failures.len(), 3);
    assert_eq!(e.failures[0].kind, FailureKind::EvaluationError);
}

#[test]
fn numbers_are_ints_when_integral_and_doubles_otherwise() {
    let p = policy(json!({"validations": [
        {"expression": "object.i == 3 && type(object.i) == int"},
        {"expression": "object.d == 0.5 && type(object.d) == double"},
        {"expression": "type(object.big) == double"},
        {"expression": "type(object.f) == double"}]}));
    let obj = json!({"i": 3, "d": 0.5, "big": u64::MAX, "f": 1.0});
    let req = request("CREATE");
    assert_eq!(evaluate(&p, &create(&req, &obj)).failures, vec![]);
}
