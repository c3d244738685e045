//! The RBAC authorizer (upstream's `plugin/pkg/auth/authorizer/rbac`): a request is allowed when
//! a rule of a role bound to the user, one of their groups, or their ServiceAccount allows it —
//! cluster-wide through ClusterRoleBindings, in a namespace through that namespace's
//! RoleBindings. Nothing is ever denied explicitly.
//!
//! The bindings and roles are compiled into an [`Index`] (subject → rule sets) from the watch
//! cache and rebuilt when an RBAC object changes (a watcher of the cache bumps a generation).
//! Decisions are cached per request attributes (user, groups, verb, group, resource,
//! subresource, namespace, name) — never per stored object — and the cache is dropped with the
//! index, so a change to RBAC is seen by the next request after the cache reflects it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use tandem_core::rbac::{RequestAttributes, rule_allows};

use super::UserInfo;
use super::authz::{Attributes, Decision};
use super::sa_token::service_account_user;
use crate::cache::Cache;
use crate::state::State;

/// The four RBAC resources, whose changes rebuild the index.
const RBAC_PLURALS: [&str; 4] = [
    "roles",
    "clusterroles",
    "rolebindings",
    "clusterrolebindings",
];
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// How many decisions are cached before the cache starts over.
const DECISION_CACHE_LIMIT: usize = 16_384;

/// Who a binding names: a user (ServiceAccounts become their user name) or a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    User(String),
    Group(String),
}

/// The rules of one bound role, with where the binding applies.
#[derive(Debug, Clone)]
pub struct Grant {
    pub rules: Arc<Vec<PolicyRule>>,
    /// Why the binding grants nothing (its role is missing), for upstream's `RBAC: …` reason.
    pub error: Option<String>,
}

/// The compiled RBAC state.
#[derive(Debug, Default)]
pub struct Index {
    cluster: HashMap<Subject, Vec<Grant>>,
    namespaced: HashMap<(String, Subject), Vec<Grant>>,
}

impl Index {
    /// Compiles the cache's RBAC objects.
    pub fn build(state: &State) -> Index {
        let items = |plural: &str| -> Vec<Arc<crate::cache::Object>> {
            match state.registry.by_plural(RBAC_GROUP, "v1", plural) {
                Some(rt) => state.cache.snapshot(&rt, &rt.key_prefix(), |_| true).items,
                None => Vec::new(),
            }
        };
        let cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>> = items("clusterroles")
            .iter()
            .filter_map(|o| parse::<ClusterRole>(o))
            .map(|r| {
                (
                    r.metadata.name.unwrap_or_default(),
                    Arc::new(r.rules.unwrap_or_default()),
                )
            })
            .collect();
        let roles: HashMap<(String, String), Arc<Vec<PolicyRule>>> = items("roles")
            .iter()
            .filter_map(|o| parse::<Role>(o))
            .map(|r| {
                (
                    (
                        r.metadata.namespace.unwrap_or_default(),
                        r.metadata.name.unwrap_or_default(),
                    ),
                    Arc::new(r.rules.unwrap_or_default()),
                )
            })
            .collect();
        let grant = |kind: &str, ns: &str, name: &str| -> Grant {
            let found = match kind {
                "ClusterRole" => cluster_roles.get(name).cloned(),
                "Role" => roles.get(&(ns.to_string(), name.to_string())).cloned(),
                _ => None,
            };
            match found {
                Some(rules) => Grant { rules, error: None },
                None => Grant {
                    rules: Arc::default(),
                    error: Some(format!(
                        "{}.rbac.authorization.k8s.io {name:?} not found",
                        kind.to_lowercase()
                    )),
                },
            }
        };
        let mut index = Index::default();
        for b in items("clusterrolebindings")
            .iter()
            .filter_map(|o| parse::<ClusterRoleBinding>(o))
        {
            let g = grant(&b.role_ref.kind, "", &b.role_ref.name);
            for s in subjects(b.subjects.as_deref().unwrap_or(&[]), "") {
                index.cluster.entry(s).or_default().push(g.clone());
            }
        }
        for b in items("rolebindings")
            .iter()
            .filter_map(|o| parse::<RoleBinding>(o))
        {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let g = grant(&b.role_ref.kind, &ns, &b.role_ref.name);
            for s in subjects(b.subjects.as_deref().unwrap_or(&[]), &ns) {
                index
                    .namespaced
                    .entry((ns.clone(), s))
                    .or_default()
                    .push(g.clone());
            }
        }
        index
    }

    /// Every grant that applies to `user` in `namespace` (cluster-wide ones first).
    pub fn grants<'a>(&'a self, user: &UserInfo, namespace: &str) -> Vec<&'a Grant> {
        let keys: Vec<Subject> = std::iter::once(Subject::User(user.name.clone()))
            .chain(user.groups.iter().map(|g| Subject::Group(g.clone())))
            .collect();
        let mut out = Vec::new();
        for k in &keys {
            out.extend(self.cluster.get(k).into_iter().flatten());
        }
        if !namespace.is_empty() {
            for k in keys {
                out.extend(
                    self.namespaced
                        .get(&(namespace.to_string(), k))
                        .into_iter()
                        .flatten(),
                );
            }
        }
        out
    }

    /// Upstream's `RBACAuthorizer.Authorize` over this index.
    pub fn decide(&self, user: &UserInfo, a: &Attributes) -> Decision {
        let req = request_attributes(a);
        let mut errors = Vec::new();
        for g in self.grants(user, &a.namespace) {
            if g.rules.iter().any(|r| rule_allows(r, &req)) {
                return Decision::Allow;
            }
            if let Some(e) = &g.error
                && !errors.contains(e)
            {
                errors.push(e.clone());
            }
        }
        if errors.is_empty() {
            Decision::NoOpinion(String::new())
        } else if errors.len() == 1 {
            Decision::NoOpinion(format!("RBAC: {}", errors[0]))
        } else {
            Decision::NoOpinion(format!("RBAC: [{}]", errors.join(", ")))
        }
    }

    /// The rules `user` holds in `namespace` (cluster-wide rules included), for escalation
    /// checks and SelfSubjectRulesReview, with the errors met resolving their roles.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        for g in self.grants(user, namespace) {
            rules.extend(g.rules.iter().cloned());
            if let Some(e) = &g.error {
                errors.push(e.clone());
            }
        }
        (rules, errors)
    }
}

/// A cached object as its typed form (`None` if it does not fit, which validation prevents).
fn parse<T: serde::de::DeserializeOwned>(o: &crate::cache::Object) -> Option<T> {
    serde_json::from_slice(&o.json).ok()
}

/// A binding's subjects as index keys; a ServiceAccount without a namespace takes the binding's.
fn subjects(subjects: &[k8s_openapi::api::rbac::v1::Subject], default_ns: &str) -> Vec<Subject> {
    subjects
        .iter()
        .filter_map(|s| match s.kind.as_str() {
            "User" => Some(Subject::User(s.name.clone())),
            "Group" => Some(Subject::Group(s.name.clone())),
            "ServiceAccount" => {
                let ns = s
                    .namespace
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(default_ns);
                (!ns.is_empty()).then(|| Subject::User(service_account_user(ns, &s.name)))
            }
            _ => None,
        })
        .collect()
}

/// Core's view of the attributes.
pub fn request_attributes(a: &Attributes) -> RequestAttributes<'_> {
    RequestAttributes {
        verb: &a.verb,
        api_group: &a.api_group,
        resource: &a.resource,
        subresource: &a.subresource,
        name: &a.name,
        namespace: &a.namespace,
        resource_request: a.resource_request,
        path: &a.path,
    }
}

/// What a decision depends on: the user, their groups and the request's attributes.
type DecisionKey = (String, Vec<String>, Attributes);

/// The RBAC authorizer with its index and decision cache.
#[derive(Debug, Default)]
pub struct Rbac {
    /// Bumped by the cache watcher on every change to an RBAC object.
    generation: Arc<AtomicU64>,
    index: RwLock<Option<(u64, Arc<Index>)>>,
    decisions: Mutex<(u64, HashMap<DecisionKey, Decision>)>,
}

impl Rbac {
    /// Follows the cache's RBAC changes so the index is rebuilt after each.
    pub fn watch(&self, cache: &Arc<Cache>, registry: &tandem_core::registry::Registry) {
        let prefixes: Vec<String> = RBAC_PLURALS
            .iter()
            .filter_map(|p| registry.by_plural(RBAC_GROUP, "v1", p))
            .map(|rt| rt.key_prefix())
            .collect();
        let Some(first) = registry.by_plural(RBAC_GROUP, "v1", "roles") else {
            return;
        };
        let Ok(sub) = cache.subscribe(&first, &first.key_prefix(), Some(cache.revision()), false)
        else {
            return;
        };
        let generation = self.generation.clone();
        let mut live = sub.live;
        // The index may have been built before the subscription: start from a fresh one.
        generation.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            loop {
                match live.recv().await {
                    Ok(ev) => {
                        if prefixes.iter().any(|p| **p == *ev.type_prefix) {
                            generation.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        generation.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// The current index, rebuilt if RBAC changed since it was built.
    pub fn index(&self, state: &State) -> (u64, Arc<Index>) {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Ok(guard) = self.index.read()
            && let Some((g, index)) = guard.as_ref()
            && *g == generation
        {
            return (*g, index.clone());
        }
        let index = Arc::new(Index::build(state));
        if let Ok(mut guard) = self.index.write() {
            *guard = Some((generation, index.clone()));
        }
        (generation, index)
    }

    /// Authorizes through the decision cache.
    pub fn authorize(&self, state: &State, user: &UserInfo, a: &Attributes) -> Decision {
        let (generation, index) = self.index(state);
        let key = (user.name.clone(), user.groups.clone(), a.clone());
        if let Ok(cache) = self.decisions.lock()
            && cache.0 == generation
            && let Some(d) = cache.1.get(&key)
        {
            return d.clone();
        }
        let decision = index.decide(user, a);
        if let Ok(mut cache) = self.decisions.lock() {
            if cache.0 != generation || cache.1.len() >= DECISION_CACHE_LIMIT {
                cache.0 = generation;
                cache.1.clear();
            }
            cache.1.insert(key, decision.clone());
        }
        decision
    }
}
