//! The `authorizer` variable: Kubernetes' CEL authz library (upstream
//! `k8s.io/apiserver/pkg/cel/library/authz.go`), over an [`Authorizer`] the API server gives.
//!
//! ```text
//! authorizer.group('apps').resource('deployments').namespace('x').name('y').check('create').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'sa').group('').resource('pods').check('list').errored()
//! authorizer.requestResource.check('update').allowed()
//! ```
//!
//! Checks are made as the requesting user (`request.userInfo`), or as the service account
//! `serviceAccount(namespace, name)` names. Each `check` costs 350,000 units as upstream (two
//! checks fit in one expression's limit); the other functions cost one.

use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::types::{CelBool, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Context, ExecutionError, FunctionContext};
use serde_json::Value;

use crate::apiextensions::schema::cel_cost;
use crate::validation::names::{dns1123_label, dns1123_subdomain};

/// Answers authorization checks for CEL expressions (upstream `authorizer.Authorizer`). The API
/// server implements it over its authorizers (RBAC, Node, webhooks), ideally caching answers
/// for the duration of one request as upstream's `CachingAuthorizer` does.
pub trait Authorizer: Send + Sync {
    fn authorize(&self, attributes: &AuthzAttributes) -> AuthzResponse;
}

/// Who a check is made for (upstream `user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthzUser {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

impl AuthzUser {
    /// The user of an AdmissionRequest's `userInfo`.
    pub fn from_user_info(user_info: Option<&Value>) -> AuthzUser {
        let s = |k: &str| {
            user_info
                .and_then(|u| u.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        AuthzUser {
            name: s("username"),
            uid: s("uid"),
            groups: user_info
                .and_then(|u| u.get("groups"))
                .map(strings)
                .unwrap_or_default(),
            extra: user_info
                .and_then(|u| u.get("extra"))
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default(),
        }
    }

    /// upstream `serviceaccount.ServiceAccountInfo.UserInfo`.
    fn service_account(namespace: &str, name: &str) -> AuthzUser {
        AuthzUser {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ],
            extra: Vec::new(),
        }
    }
}

/// What a check asks (upstream `authorizer.AttributesRecord`). Resource checks are for any API
/// version (`*`), as upstream's are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzAttributes {
    pub user: AuthzUser,
    pub verb: String,
    pub target: AuthzTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthzTarget {
    Resource(ResourceAttributes),
    /// A non-resource URL path (`/healthz`).
    NonResource {
        path: String,
    },
}

/// An API resource check; empty strings are unset (the core group, cluster scope, all names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The raw `fieldSelector(…)` / `labelSelector(…)` given, empty when none.
    pub field_selector: String,
    pub label_selector: String,
}

/// upstream `authorizer.Decision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthzDecision {
    Allow,
    Deny,
    NoOpinion,
}

/// An authorizer's answer: `allowed()` is true only for [`AuthzDecision::Allow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthzResponse {
    pub decision: AuthzDecision,
    pub reason: String,
    /// The error the check met, read by `errored()` and `error()`.
    pub error: Option<String>,
}

macro_rules! receiver_only {
    ($ty:ty, $static:ident, $name:literal) => {
        static $static: LazyLock<Type> = LazyLock::new(|| Type::new_opaque_type($name));

        impl Val for $ty {
            fn get_type(&self) -> &Type {
                &$static
            }

            fn cel_type() -> &'static Type {
                &$static
            }

            /// upstream `receiverOnlyObjectVal.Equal`: values of the same type are equal.
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$ty>().is_some()
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }

        impl StaticVal for $ty {}
    };
}

/// `kubernetes.authorization.Authorizer`.
#[derive(Clone)]
struct AuthorizerVal {
    authz: Arc<dyn Authorizer>,
    user: Arc<AuthzUser>,
}

impl fmt::Debug for AuthorizerVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizerVal")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct PathCheckVal {
    authorizer: AuthorizerVal,
    path: String,
}

#[derive(Debug, Clone)]
struct GroupCheckVal {
    authorizer: AuthorizerVal,
    group: String,
}

#[derive(Debug, Clone)]
struct ResourceCheckVal {
    authorizer: AuthorizerVal,
    attributes: ResourceAttributes,
}

#[derive(Debug, Clone)]
struct DecisionVal(AuthzResponse);

receiver_only!(
    AuthorizerVal,
    AUTHORIZER_TYPE,
    "kubernetes.authorization.Authorizer"
);
receiver_only!(
    PathCheckVal,
    PATH_CHECK_TYPE,
    "kubernetes.authorization.PathCheck"
);
receiver_only!(
    GroupCheckVal,
    GROUP_CHECK_TYPE,
    "kubernetes.authorization.GroupCheck"
);
receiver_only!(
    ResourceCheckVal,
    RESOURCE_CHECK_TYPE,
    "kubernetes.authorization.ResourceCheck"
);
receiver_only!(
    DecisionVal,
    DECISION_TYPE,
    "kubernetes.authorization.Decision"
);

/// The `authorizer` and `authorizer.requestResource` variables of one request.
#[derive(Debug, Clone)]
pub(super) struct Binding {
    authorizer: AuthorizerVal,
    request_resource: ResourceCheckVal,
}

impl Binding {
    /// upstream `NewAuthorizerVal` and `NewResourceAuthorizerVal`: checks as the request's user;
    /// `requestResource` is the resource, subresource, namespace and name the request targets.
    pub(super) fn new(authz: Arc<dyn Authorizer>, request: &Value) -> Binding {
        let user = Arc::new(AuthzUser::from_user_info(request.get("userInfo")));
        let authorizer = AuthorizerVal { authz, user };
        let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let resource = request
            .get("requestResource")
            .filter(|v| v.is_object())
            .or_else(|| request.get("resource"));
        let subresource = request
            .get("requestSubResource")
            .or_else(|| request.get("subResource"));
        let attributes = ResourceAttributes {
            group: s(resource.and_then(|r| r.get("group"))),
            resource: s(resource.and_then(|r| r.get("resource"))),
            subresource: s(subresource),
            namespace: s(request.get("namespace")),
            name: s(request.get("name")),
            ..ResourceAttributes::default()
        };
        Binding {
            request_resource: ResourceCheckVal {
                authorizer: authorizer.clone(),
                attributes,
            },
            authorizer,
        }
    }

    /// Binds the variables and the library's functions in `ctx`.
    pub(super) fn bind(&self, ctx: &mut Context<'_, '_>) {
        ctx.add_variable_as_val("authorizer", Box::new(self.authorizer.clone()));
        ctx.add_variable_as_val(
            "authorizer.requestResource",
            Box::new(self.request_resource.clone()),
        );
        for (name, f) in FUNCTIONS {
            // Only fails if the environment declared the name, which `rule_env` does not
            // (a test checks every function answers).
            let _ = ctx.add_function(name, Box::new(f) as Native);
        }
    }
}

type Native = Box<
    dyn for<'c, 'call> Fn(
            &mut FunctionContext<'c, 'call>,
        ) -> Result<CowVal<'c, 'call>, ExecutionError>
        + Send
        + Sync,
>;

type Function =
    for<'c, 'call> fn(&mut FunctionContext<'c, 'call>) -> Result<CowVal<'c, 'call>, ExecutionError>;

const FUNCTIONS: [(&str, Function); 14] = [
    ("path", path),
    ("group", group),
    ("serviceAccount", service_account),
    ("resource", resource),
    ("subresource", subresource),
    ("namespace", namespace),
    ("name", name),
    ("fieldSelector", field_selector),
    ("labelSelector", label_selector),
    ("check", check),
    ("allowed", allowed),
    ("reason", reason),
    ("errored", errored),
    ("error", error),
];

/// upstream `MaybeNoSuchOverloadErr`: the receiver or arguments are not what the function takes.
fn no_overload(ftx: &FunctionContext<'_, '_>) -> ExecutionError {
    let types = ftx
        .this
        .iter()
        .chain(ftx.args.iter())
        .map(|v| v.get_type().name().to_string())
        .collect();
    ExecutionError::no_such_member_overload(ftx.name, types)
}

fn receiver<'a, T: StaticVal>(ftx: &'a FunctionContext<'_, '_>) -> Option<&'a T> {
    ftx.this.as_ref().and_then(|v| v.downcast_ref::<T>())
}

/// The string arguments, exactly `N` of them.
fn strings<'a, const N: usize>(ftx: &'a FunctionContext<'_, '_>) -> Option<[&'a str; N]> {
    if ftx.args.len() != N {
        return None;
    }
    let mut out = [""; N];
    for (slot, arg) in out.iter_mut().zip(&ftx.args) {
        *slot = arg.downcast_ref::<CelString>()?.inner();
    }
    Some(out)
}

fn failure(function: &str, message: &str) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn path<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(1)?;
    let (Some(a), Some([path])) = (receiver::<AuthorizerVal>(ftx), strings::<1>(ftx)) else {
        return Err(no_overload(ftx));
    };
    if path.trim().is_empty() {
        return Err(failure("path", "path must not be empty"));
    }
    Ok(CowVal::owned(PathCheckVal {
        authorizer: a.clone(),
        path: path.to_string(),
    }))
}

fn group<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(1)?;
    let (Some(a), Some([group])) = (receiver::<AuthorizerVal>(ftx), strings::<1>(ftx)) else {
        return Err(no_overload(ftx));
    };
    Ok(CowVal::owned(GroupCheckVal {
        authorizer: a.clone(),
        group: group.to_string(),
    }))
}

fn service_account<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(1)?;
    let (Some(a), Some([namespace, name])) = (receiver::<AuthorizerVal>(ftx), strings::<2>(ftx))
    else {
        return Err(no_overload(ftx));
    };
    if !dns1123_subdomain(name).is_empty() {
        return Err(failure("serviceAccount", "Invalid service account name"));
    }
    if !dns1123_label(namespace).is_empty() {
        return Err(failure(
            "serviceAccount",
            "Invalid service account namespace",
        ));
    }
    Ok(CowVal::owned(AuthorizerVal {
        authz: Arc::clone(&a.authz),
        user: Arc::new(AuthzUser::service_account(namespace, name)),
    }))
}

fn resource<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(1)?;
    let (Some(g), Some([resource])) = (receiver::<GroupCheckVal>(ftx), strings::<1>(ftx)) else {
        return Err(no_overload(ftx));
    };
    if resource.trim().is_empty() {
        return Err(failure("resource", "resource must not be empty"));
    }
    Ok(CowVal::owned(ResourceCheckVal {
        authorizer: g.authorizer.clone(),
        attributes: ResourceAttributes {
            group: g.group.clone(),
            resource: resource.to_string(),
            ..ResourceAttributes::default()
        },
    }))
}

/// A `ResourceCheck` builder: a copy of the receiver with one attribute set.
fn set_attribute<'c, 'call>(
    ftx: &FunctionContext<'c, 'call>,
    set: fn(&mut ResourceAttributes, &str),
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(1)?;
    let (Some(r), Some([value])) = (receiver::<ResourceCheckVal>(ftx), strings::<1>(ftx)) else {
        return Err(no_overload(ftx));
    };
    let mut out = r.clone();
    set(&mut out.attributes, value);
    Ok(CowVal::owned(out))
}

fn subresource<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    set_attribute(ftx, |a, v| a.subresource = v.to_string())
}

fn namespace<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    set_attribute(ftx, |a, v| a.namespace = v.to_string())
}

fn name<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    set_attribute(ftx, |a, v| a.name = v.to_string())
}

fn field_selector<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    set_attribute(ftx, |a, v| a.field_selector = v.to_string())
}

fn label_selector<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    set_attribute(ftx, |a, v| a.label_selector = v.to_string())
}

/// Upstream's fixed cost of an authorization check.
const CHECK_COST: u64 = 350_000;

fn check<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    cel_cost::charge(CHECK_COST)?;
    let Some([verb]) = strings::<1>(ftx) else {
        return Err(no_overload(ftx));
    };
    let (authorizer, target) = if let Some(p) = receiver::<PathCheckVal>(ftx) {
        (
            &p.authorizer,
            AuthzTarget::NonResource {
                path: p.path.clone(),
            },
        )
    } else if let Some(r) = receiver::<ResourceCheckVal>(ftx) {
        (&r.authorizer, AuthzTarget::Resource(r.attributes.clone()))
    } else {
        return Err(no_overload(ftx));
    };
    let attributes = AuthzAttributes {
        user: (*authorizer.user).clone(),
        verb: verb.to_string(),
        target,
    };
    Ok(CowVal::owned(DecisionVal(
        authorizer.authz.authorize(&attributes),
    )))
}

fn decision<'a>(ftx: &'a FunctionContext<'_, '_>) -> Result<&'a AuthzResponse, ExecutionError> {
    cel_cost::charge(1)?;
    match receiver::<DecisionVal>(ftx) {
        Some(d) if ftx.args.is_empty() => Ok(&d.0),
        _ => Err(no_overload(ftx)),
    }
}

fn allowed<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    let d = decision(ftx)?;
    Ok(CowVal::owned(CelBool::from(
        d.decision == AuthzDecision::Allow,
    )))
}

fn reason<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    let d = decision(ftx)?;
    Ok(CowVal::owned(CelString::from(d.reason.clone())))
}

fn errored<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    let d = decision(ftx)?;
    Ok(CowVal::owned(CelBool::from(d.error.is_some())))
}

fn error<'c, 'call>(
    ftx: &mut FunctionContext<'c, 'call>,
) -> Result<CowVal<'c, 'call>, ExecutionError> {
    let d = decision(ftx)?;
    Ok(CowVal::owned(CelString::from(
        d.error.clone().unwrap_or_default(),
    )))
}
