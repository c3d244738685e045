//! Tests of the policy evaluator: compile, evaluate and decide together, as the API server
//! calls them, with upstream's messages.

mod actions;
mod authz;
mod conditions;
mod limits;
mod params;
mod request;
mod validations;
mod variables;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::*;

fn policy(spec: Value) -> CompiledPolicy {
    compile(&json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"}, "spec": spec}))
}

fn binding(actions: &[&str]) -> Value {
    json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": actions}})
}

fn request(operation: &str) -> Value {
    json!({
        "uid": "0001",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": "web",
        "namespace": "ns",
        "operation": operation,
        "userInfo": {"username": "alice", "uid": "a-1", "groups": ["dev", "system:authenticated"]},
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
    })
}

fn deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "ratio": 0.5, "names": ["b", "a"]}})
}

/// Evaluates `p` once for `b` and decides.
fn verdict(p: &CompiledPolicy, b: &Value, act: &Activation<'_>) -> Verdict {
    let mut d = Decisions::new(p);
    d.add_evaluation(b, &evaluate(p, act));
    d.finish()
}

fn denial_message(v: &Verdict) -> &str {
    v.denial.as_ref().map_or("", |d| d.message.as_str())
}

fn create<'a>(req: &'a Value, obj: &'a Value) -> Activation<'a> {
    Activation {
        object: Some(obj),
        ..Activation::new(req)
    }
}

fn replicas_policy(extra: Value) -> CompiledPolicy {
    let mut validation = json!({"expression": "object.spec.replicas <= 5"});
    if let (Some(v), Some(e)) = (validation.as_object_mut(), extra.as_object()) {
        v.extend(e.clone());
    }
    policy(json!({"validations": [validation]}))
}

/// Counts the checks it answers; allows `alice` to `create`, denies the rest.
#[derive(Default)]
struct FakeAuthorizer {
    calls: Mutex<Vec<AuthzAttributes>>,
}

impl FakeAuthorizer {
    fn calls(&self) -> Vec<AuthzAttributes> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Authorizer for FakeAuthorizer {
    fn authorize(&self, attributes: &AuthzAttributes) -> AuthzResponse {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(attributes.clone());
        }
        if attributes.verb == "explode" {
            return AuthzResponse {
                decision: AuthzDecision::NoOpinion,
                reason: String::new(),
                error: Some("webhook unreachable".to_string()),
            };
        }
        let allowed = attributes.user.name == "alice" && attributes.verb == "create";
        AuthzResponse {
            decision: if allowed {
                AuthzDecision::Allow
            } else {
                AuthzDecision::NoOpinion
            },
            reason: if allowed { "RBAC: allowed" } else { "no rule" }.to_string(),
            error: None,
        }
    }
}

fn with_authorizer<'a>(
    req: &'a Value,
    obj: &'a Value,
    authz: &Arc<FakeAuthorizer>,
) -> Activation<'a> {
    Activation {
        authorizer: Some(Arc::clone(authz) as Arc<dyn Authorizer>),
        ..create(req, obj)
    }
}
