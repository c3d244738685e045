//! The `authorizer` library.

use super::*;

#[test]
fn authorizer_checks_resources_as_the_requesting_user() {
    let p = policy(json!({"validations": [
        {"expression": "authorizer.group('apps').resource('deployments').namespace('x').name('y').check('create').allowed()"},
        {"expression": "!authorizer.group('').resource('pods').subresource('exec').check('get').allowed()"}]}));
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(1));
    assert_eq!(
        evaluate(&p, &with_authorizer(&req, &obj, &authz)).failures,
        vec![]
    );
    let calls = authz.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0],
        AuthzAttributes {
            user: AuthzUser {
                name: "alice".to_string(),
                uid: "a-1".to_string(),
                groups: vec!["dev".to_string(), "system:authenticated".to_string()],
                extra: vec![],
            },
            verb: "create".to_string(),
            target: AuthzTarget::Resource(ResourceAttributes {
                group: "apps".to_string(),
                resource: "deployments".to_string(),
                namespace: "x".to_string(),
                name: "y".to_string(),
                ..ResourceAttributes::default()
            }),
        }
    );
    assert_eq!(
        calls[1].target,
        AuthzTarget::Resource(ResourceAttributes {
            resource: "pods".to_string(),
            subresource: "exec".to_string(),
            ..ResourceAttributes::default()
        })
    );
}

#[test]
fn authorizer_paths_request_resource_service_accounts_and_decisions() {
    let p = policy(json!({"validations": [
        {"expression": "authorizer.path('/healthz').check('get').reason() == 'no rule'"},
        {"expression": "authorizer.requestResource.check('create').allowed()"},
        {"expression": "!authorizer.serviceAccount('kube-system', 'ctrl').group('').resource('pods').check('create').allowed()"},
        {"expression": "authorizer.path('/x').check('explode').errored() && authorizer.path('/x').check('explode').error() == 'webhook unreachable'"},
        {"expression": "authorizer.path('/x').check('get').error() == '' && !authorizer.path('/x').check('get').errored()"}]}));
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(1));
    assert_eq!(
        evaluate(&p, &with_authorizer(&req, &obj, &authz)).failures,
        vec![]
    );
    let calls = authz.calls();
    assert_eq!(
        calls[1].target,
        AuthzTarget::Resource(ResourceAttributes {
            group: "apps".to_string(),
            resource: "deployments".to_string(),
            namespace: "ns".to_string(),
            name: "web".to_string(),
            ..ResourceAttributes::default()
        })
    );
    assert_eq!(calls[2].user.name, "system:serviceaccount:kube-system:ctrl");
    assert_eq!(
        calls[2].user.groups,
        vec![
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system"
        ]
    );
}

#[test]
fn authorizer_errors() {
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(1));
    let cases = [
        (
            "authorizer.path(' ').check('get').allowed()",
            "path must not be empty",
        ),
        (
            "authorizer.group('apps').resource('').check('get').allowed()",
            "resource must not be empty",
        ),
        (
            "authorizer.serviceAccount('ns', 'Bad_Name').path('/').check('get').allowed()",
            "Invalid service account name",
        ),
        (
            "authorizer.serviceAccount('a.b', 'ok').path('/').check('get').allowed()",
            "Invalid service account namespace",
        ),
        (
            "authorizer.path(1).check('get').allowed()",
            "no such overload",
        ),
        ("object.name('x') == 1", "no such overload"),
        // Two checks fit in an expression's cost limit, three do not.
        (
            "[1, 2, 3].all(i, authorizer.path('/x').check('get').allowed() || true)",
            "operation cancelled: actual cost limit exceeded",
        ),
    ];
    for (expression, error) in cases {
        let p = policy(json!({"validations": [{"expression": expression}]}));
        let e = evaluate(&p, &with_authorizer(&req, &obj, &authz));
        assert_eq!(
            e.failures.first().map(|f| f.message.clone()),
            Some(format!(
                "expression '{expression}' resulted in error: {error}"
            )),
        );
    }
    // Without an authorizer, expressions reading it fail.
    let p = policy(
        json!({"validations": [{"expression": "authorizer.path('/x').check('get').allowed()"}]}),
    );
    let e = evaluate(&p, &create(&req, &obj));
    assert_eq!(e.failures[0].kind, FailureKind::EvaluationError);
}

#[test]
fn every_authz_function_is_registered() {
    // `Context::add_function` refuses names the environment declares; a refused one would make
    // the library's calls fail with an undeclared reference.
    let p = policy(json!({"validations": [
        {"expression": "authorizer.group('').resource('pods').fieldSelector('spec.nodeName=n').labelSelector('a=b').check('list').allowed()"}]}));
    let authz = Arc::new(FakeAuthorizer::default());
    let (req, obj) = (request("CREATE"), deployment(1));
    let e = evaluate(&p, &with_authorizer(&req, &obj, &authz));
    assert_eq!(e.failures.len(), 1);
    assert_eq!(e.failures[0].kind, FailureKind::Violation);
    let calls = authz.calls();
    assert_eq!(
        calls[0].target,
        AuthzTarget::Resource(ResourceAttributes {
            resource: "pods".to_string(),
            field_selector: "spec.nodeName=n".to_string(),
            label_selector: "a=b".to_string(),
            ..ResourceAttributes::default()
        })
    );
}
