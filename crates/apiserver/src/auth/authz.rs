//! Authorization: the attributes of a request (upstream's `authorizer.Attributes`, built as its
//! `RequestInfoFactory` does), the chain `system:masters` → Node → RBAC, and upstream's 403
//! `Status` (`responsewriters.Forbidden`).

use serde_json::json;

use super::UserInfo;
use crate::error::ApiError;
use crate::request::{ResourceRequest, Verb};
use crate::state::State;

/// What a request asks to do, in authorization's terms.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The URL path of a non-resource request.
    pub path: String,
}

impl Attributes {
    /// The attributes of a resource request.
    pub fn of_request(rr: &ResourceRequest) -> Attributes {
        let verb = match rr.verb {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        };
        // Upstream authorizes pods/exec, attach and portforward as `create` whatever the method
        // (a websocket upgrade is a GET), and pods/log and nodes/proxy as the method's verb.
        let verb = match rr.subresource.as_deref() {
            Some("exec" | "attach" | "portforward") => "create",
            _ => verb,
        };
        // As upstream's RequestInfoFactory: `/api/v1/namespaces/NAME` is in the namespace NAME,
        // so a RoleBinding there may grant reading (or deleting) the Namespace itself.
        let mut namespace = rr.namespace.clone().unwrap_or_default();
        if rr.group.is_empty()
            && rr.resource == "namespaces"
            && let Some(name) = &rr.name
        {
            namespace = name.clone();
        }
        Attributes {
            verb: verb.to_string(),
            resource_request: true,
            api_group: rr.group.clone(),
            api_version: rr.version.clone(),
            resource: rr.resource.clone(),
            subresource: rr.subresource.clone().unwrap_or_default(),
            namespace,
            name: rr.name.clone().unwrap_or_default(),
            path: String::new(),
        }
    }

    /// The attributes of a request for a non-resource URL (`/version`, `/apis`, `/openapi/v2`).
    pub fn non_resource(method: &http::Method, path: &str) -> Attributes {
        let verb = match *method {
            http::Method::GET | http::Method::HEAD => "get",
            http::Method::POST => "post",
            http::Method::PUT => "put",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "options",
        };
        Attributes {
            verb: verb.to_string(),
            path: path.to_string(),
            ..Attributes::default()
        }
    }

    /// A resource request's attributes from their parts (reviews, escalation checks).
    pub fn resource(verb: &str, group: &str, resource: &str, namespace: &str, name: &str) -> Self {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            verb: verb.to_string(),
            resource_request: true,
            api_group: group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            ..Attributes::default()
        }
    }
}

/// An authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Not allowed, with the reason upstream appends to its message (often empty).
    NoOpinion(String),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow)
    }
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow => "",
            Decision::NoOpinion(r) => r,
        }
    }
}

/// Which authorizers run: upstream's `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizationMode {
    /// `Node,RBAC`.
    #[default]
    NodeRbac,
    /// `AlwaysAllow`: every authenticated request is allowed.
    AlwaysAllow,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let modes: Vec<&str> = s.split(',').map(str::trim).collect();
        match modes.as_slice() {
            ["Node", "RBAC"] | ["RBAC", "Node"] => Ok(AuthorizationMode::NodeRbac),
            ["AlwaysAllow"] => Ok(AuthorizationMode::AlwaysAllow),
            _ => Err(format!(
                "unsupported authorization mode {s:?}: tandem runs \"Node,RBAC\" or \"AlwaysAllow\""
            )),
        }
    }
}

/// Runs the chain for `user` and `attrs`.
pub fn authorize(state: &State, user: &UserInfo, attrs: &Attributes) -> Decision {
    if state.options.authorization == AuthorizationMode::AlwaysAllow
        || user.in_group(super::MASTERS)
    {
        return Decision::Allow;
    }
    let node = super::node::authorize(state, user, attrs);
    if node.allowed() {
        return node;
    }
    let rbac = state.auth.rbac.authorize(state, user, attrs);
    match (rbac, node) {
        (Decision::Allow, _) => Decision::Allow,
        // The Node authorizer's reason explains a node's refusal better than RBAC's silence.
        (Decision::NoOpinion(r), Decision::NoOpinion(n)) if r.is_empty() => Decision::NoOpinion(n),
        (d, _) => d,
    }
}

/// Authorizes and turns a refusal into upstream's 403 Status.
pub fn check(state: &State, user: &UserInfo, attrs: &Attributes) -> Result<(), ApiError> {
    let decision = authorize(state, user, attrs);
    if decision.allowed() {
        return Ok(());
    }
    Err(forbidden(user, attrs, decision.reason()))
}

/// Upstream's `forbiddenMessage` without the resource prefix.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if !a.resource_request {
        return format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path);
    }
    let mut resource = a.resource.clone();
    if !a.subresource.is_empty() {
        resource = format!("{resource}/{}", a.subresource);
    }
    if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.name, a.verb, resource, a.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.name, a.verb, resource, a.api_group, a.namespace
        )
    }
}

/// Upstream's `responsewriters.Forbidden`: `pods "x" is forbidden: User "jane" cannot …`.
pub fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    let mut msg = forbidden_message(user, a);
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    forbidden_status(&a.api_group, &a.resource, &a.name, &msg)
}

/// `apierrors.NewForbidden(group-resource, name, err)`.
pub fn forbidden_status(group: &str, resource: &str, name: &str, err: &str) -> ApiError {
    let qualified = match (resource.is_empty(), group.is_empty()) {
        (true, _) => String::new(),
        (false, true) => resource.to_string(),
        (false, false) => format!("{resource}.{group}"),
    };
    let message = if qualified.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} {name:?} is forbidden: {err}")
    };
    let mut details = serde_json::Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    if !resource.is_empty() {
        details.insert("kind".into(), json!(resource));
    }
    let mut e = ApiError::forbidden(message);
    e.details = Some(serde_json::Value::Object(details));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jane() -> UserInfo {
        UserInfo::authenticated("jane", "", vec![])
    }

    #[test]
    fn messages_match_upstream() {
        let a = Attributes::resource("list", "", "pods", "default", "");
        assert_eq!(
            forbidden(&jane(), &a, "").message,
            "pods is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let a = Attributes::resource("get", "apps", "deployments/scale", "ns", "web");
        assert_eq!(
            forbidden(&jane(), &a, "").message,
            "deployments.apps \"web\" is forbidden: User \"jane\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"ns\""
        );
        let a = Attributes::resource("list", "", "nodes", "", "");
        assert_eq!(
            forbidden(
                &jane(),
                &a,
                "RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
            )
            .message,
            "nodes is forbidden: User \"jane\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"x\" not found"
        );
        let a = Attributes::non_resource(&http::Method::GET, "/metrics");
        assert_eq!(
            forbidden(&jane(), &a, "").message,
            "forbidden: User \"jane\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn modes_parse_as_upstream_spells_them() {
        assert_eq!("Node,RBAC".parse(), Ok(AuthorizationMode::NodeRbac));
        assert_eq!("AlwaysAllow".parse(), Ok(AuthorizationMode::AlwaysAllow));
        assert!("ABAC".parse::<AuthorizationMode>().is_err());
    }
}
