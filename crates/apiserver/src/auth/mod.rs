//! Who makes a request and what they may do: authentication (client certificates, static tokens,
//! ServiceAccount tokens, bootstrap tokens), impersonation, and authorization (the Node
//! authorizer, then RBAC), as kube-apiserver's `--authorization-mode=Node,RBAC` chain with the
//! `system:masters` group always allowed.
//!
//! - [`authn`]: the authenticators and the user they yield ([`UserInfo`]).
//! - [`impersonation`]: `Impersonate-User`/`-Group`/`-Uid`/`-Extra-*` headers.
//! - [`authz`]: request attributes, the authorizer chain and upstream's 403 message.
//! - [`rbac`]: the RBAC authorizer over the watch cache's Roles and bindings.
//! - [`node`]: the Node authorizer and the NodeRestriction admission plugin.
//! - [`reviews`]: SubjectAccessReview and friends, TokenReview, SelfSubjectReview.
//! - [`sa_token`]: signing and verifying ServiceAccount tokens; OIDC discovery.
//! - [`token_request`]: the `serviceaccounts/token` subresource.
//! - [`escalation`]: RBAC's escalation prevention on Role and binding writes.

pub mod authn;
pub mod authz;
pub mod escalation;
pub mod impersonation;
pub mod node;
pub mod rbac;
pub mod reviews;
pub mod sa_token;
pub mod token_request;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members bypass authorization (upstream's `SystemPrivilegedGroup`).
pub const MASTERS: &str = "system:masters";
/// The group of node agents.
pub const NODES: &str = "system:nodes";
/// The user-name prefix of node agents.
pub const NODE_USER_PREFIX: &str = "system:node:";

/// An authenticated user, as upstream's `user.Info` and `authentication.k8s.io/v1` `UserInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    #[serde(rename = "username")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with the given groups, plus `system:authenticated` (upstream's group adder).
    pub fn authenticated(name: &str, uid: &str, groups: Vec<String>) -> UserInfo {
        let mut user = UserInfo {
            name: name.to_string(),
            uid: uid.to_string(),
            groups,
            extra: BTreeMap::new(),
        };
        user.add_authenticated();
        user
    }

    /// Adds `system:authenticated` unless present (or the user is anonymous).
    pub fn add_authenticated(&mut self) {
        if self.name != "system:anonymous" && !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.to_string());
        }
    }

    /// The server itself, for the requests it makes on its own behalf.
    pub fn internal(name: &str) -> UserInfo {
        UserInfo {
            name: name.to_string(),
            groups: vec![MASTERS.to_string(), AUTHENTICATED.to_string()],
            ..UserInfo::default()
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The node name of a node agent (`system:node:NAME` in `system:nodes`).
    pub fn node_name(&self) -> Option<&str> {
        if !self.in_group(NODES) {
            return None;
        }
        self.name
            .strip_prefix(NODE_USER_PREFIX)
            .filter(|n| !n.is_empty())
    }

    /// `groups=["a","b"]` as upstream prints a user's groups in escalation messages.
    pub fn groups_display(&self) -> String {
        let quoted: Vec<String> = self.groups.iter().map(|g| format!("{g:?}")).collect();
        format!("[{}]", quoted.join(" "))
    }
}

/// Authentication and authorization state of the server.
#[derive(Debug)]
pub struct Auth {
    pub authn: authn::Authenticator,
    pub rbac: rbac::Rbac,
}

/// Records the requester in a new CertificateSigningRequest (`spec.username`, `uid`, `groups`,
/// `extra`), as upstream's CSR strategy does on create: what a client sends there is replaced.
pub fn set_requester(
    user: &UserInfo,
    rt: &tandem_core::registry::ResourceType,
    obj: &mut serde_json::Value,
) {
    if rt.group != "certificates.k8s.io" || rt.kind != "CertificateSigningRequest" {
        return;
    }
    let Some(spec) = obj
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    spec.insert("username".into(), serde_json::json!(user.name));
    spec.remove("uid");
    if !user.uid.is_empty() {
        spec.insert("uid".into(), serde_json::json!(user.uid));
    }
    spec.insert("groups".into(), serde_json::json!(user.groups));
    spec.remove("extra");
    if !user.extra.is_empty() {
        spec.insert("extra".into(), serde_json::json!(user.extra));
    }
}

/// The authorization-side checks on a write, run after decoding and admission: NodeRestriction
/// and RBAC's escalation prevention. `verb` is `create`, `update` or `delete`; `obj` is the new
/// object (none for deletes) and `old` the stored one.
pub fn admit_write(
    state: &crate::state::State,
    user: &UserInfo,
    verb: &str,
    rt: &tandem_core::registry::ResourceType,
    sub: Option<&str>,
    obj: Option<&serde_json::Value>,
    old: Option<&serde_json::Value>,
) -> Result<(), crate::error::ApiError> {
    node::admit(state, user, verb, rt, sub, obj, old)?;
    if sub.is_none()
        && verb != "delete"
        && let Some(obj) = obj
    {
        escalation::check(state, user, rt, obj, old)?;
    }
    Ok(())
}
