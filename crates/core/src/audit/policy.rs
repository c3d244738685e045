//! An `audit.k8s.io/v1` Policy and upstream's rule matching (`policy/checker.go`): the first
//! rule that matches a request decides its level (None, Metadata, Request, RequestResponse) and
//! which stages are left out; a request no rule matches is not audited.

use serde::Deserialize;

use crate::field::{FieldError, Path};

/// How much of a request an audit event carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
pub enum Level {
    #[default]
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// The stages of a request at which events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// A group and its resources in a rule (`resources: [{group: "", resources: ["pods/log"]}]`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of a policy.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// An audit policy.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// What the policy needs to know of a request (upstream `authorizer.Attributes`).
#[derive(Debug, Clone, Default)]
pub struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    /// `None` for a non-resource request.
    pub resource: Option<ResourceAttributes<'a>>,
    /// The request path (matched by `nonResourceURLs`).
    pub path: &'a str,
}

#[derive(Debug, Clone, Default)]
pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    /// The policy's and the rule's omitted stages together.
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

impl Policy {
    /// A policy from its document (the file's YAML or JSON, decoded), validated as upstream's
    /// `ValidatePolicy`.
    pub fn from_document(value: serde_json::Value) -> Result<Policy, String> {
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let api_version = value
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or("");
        if kind != "Policy" || api_version != "audit.k8s.io/v1" {
            return Err(format!(
                "invalid audit policy: expected kind Policy in audit.k8s.io/v1, got {kind:?} in {api_version:?}"
            ));
        }
        let policy: Policy =
            serde_json::from_value(value).map_err(|e| format!("invalid audit policy: {e}"))?;
        let errors = policy.validate();
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(format!("invalid audit policy: {}", list.join(", ")));
        }
        Ok(policy)
    }

    /// Upstream's rule validation: a rule cannot name both resources and non-resource URLs, a
    /// non-resource URL's `*` may only end it, and resource names need a resource.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            let path = Path::new("rules").index(i);
            if !r.non_resource_urls.is_empty()
                && (!r.resources.is_empty() || !r.namespaces.is_empty())
            {
                errors.push(FieldError::invalid(
                    path.child("nonResourceURLs").to_string(),
                    &serde_json::json!(r.non_resource_urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            for (j, url) in r.non_resource_urls.iter().enumerate() {
                if url.find('*').is_some_and(|at| at != url.len() - 1) {
                    errors.push(FieldError::invalid(
                        path.child("nonResourceURLs").index(j).to_string(),
                        &serde_json::json!(url),
                        "non-resource URL rules may only use wildcards ('*') at the end",
                    ));
                }
            }
            for (j, g) in r.resources.iter().enumerate() {
                if !g.resource_names.is_empty() && g.resources.is_empty() {
                    errors.push(FieldError::invalid(
                        path.child("resources")
                            .index(j)
                            .child("resourceNames")
                            .to_string(),
                        &serde_json::json!(g.resource_names),
                        "using resourceNames requires at least one resource",
                    ));
                }
            }
        }
        errors
    }

    /// The level of a request: the first matching rule's, else None.
    pub fn decide(&self, attrs: &Attributes<'_>) -> Decision {
        for rule in &self.rules {
            if rule.matches(attrs) {
                let mut omit_stages = self.omit_stages.clone();
                omit_stages.extend(rule.omit_stages.iter().copied());
                return Decision {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: Vec::new(),
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

fn contains(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

impl Rule {
    /// Upstream `ruleMatches`.
    pub fn matches(&self, a: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !contains(&self.users, a.user) {
            return false;
        }
        if !self.user_groups.is_empty() && !a.groups.iter().any(|g| contains(&self.user_groups, g))
        {
            return false;
        }
        if !self.verbs.is_empty() && !contains(&self.verbs, a.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            let Some(r) = &a.resource else {
                return false;
            };
            return self.matches_resource(r);
        }
        if !self.non_resource_urls.is_empty() {
            if a.resource.is_some() {
                return false;
            }
            return self
                .non_resource_urls
                .iter()
                .any(|u| match u.strip_suffix('*') {
                    Some(prefix) => a.path.starts_with(prefix),
                    None => a.path == u,
                });
        }
        true
    }

    fn matches_resource(&self, r: &ResourceAttributes<'_>) -> bool {
        if !self.namespaces.is_empty() && !contains(&self.namespaces, r.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let full = if r.subresource.is_empty() {
            r.resource.to_string()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        let sub_wildcard = format!("*/{}", r.subresource);
        let resource_wildcard = format!("{}/*", r.resource);
        self.resources.iter().any(|g| {
            if g.group != r.group && g.group != "*" {
                return false;
            }
            let name_ok = g.resource_names.is_empty() || contains(&g.resource_names, r.name);
            if g.resources.is_empty() {
                return true;
            }
            g.resources.iter().any(|res| {
                let resource_ok = res == "*"
                    || *res == full
                    || (!r.subresource.is_empty()
                        && (*res == sub_wildcard || *res == resource_wildcard));
                resource_ok && name_ok
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, String> {
        let doc: serde_json::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        Policy::from_document(doc)
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", /version]
- level: None
  users: [system:kube-scheduler]
  verbs: [get, list, watch]
- level: Metadata
  resources: [{group: "", resources: [secrets, configmaps]}, {group: authentication.k8s.io, resources: [tokenreviews]}]
  omitStages: [ResponseStarted]
- level: Request
  resources: [{group: "", resources: ["pods/log", "*/status"]}]
  namespaces: [kube-system]
- level: RequestResponse
  verbs: [create, update, patch, delete]
  resources: [{group: apps}]
- level: Metadata
"#;

    fn resource<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: &'a str,
        namespace: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            user: "alice",
            groups: &[],
            verb,
            resource: Some(ResourceAttributes {
                group,
                resource,
                subresource,
                namespace,
                name: "x",
            }),
            path: "/api/v1/whatever",
        }
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = parse(POLICY).unwrap_or_default();
        assert_eq!(p.rules.len(), 6);
        let health = Attributes {
            user: "anyone",
            verb: "get",
            path: "/healthz/etcd",
            ..Attributes::default()
        };
        assert_eq!(p.decide(&health).level, Level::None);
        let secret = p.decide(&resource("get", "", "secrets", "", "default"));
        assert_eq!(secret.level, Level::Metadata);
        assert_eq!(
            secret.omit_stages,
            [Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert_eq!(
            p.decide(&resource("get", "", "pods", "log", "kube-system"))
                .level,
            Level::Request
        );
        assert_eq!(
            p.decide(&resource("update", "", "nodes", "status", "kube-system"))
                .level,
            Level::Request
        );
        // Outside kube-system the catch-all applies.
        assert_eq!(
            p.decide(&resource("get", "", "pods", "log", "default"))
                .level,
            Level::Metadata
        );
        assert_eq!(
            p.decide(&resource("create", "apps", "deployments", "", "default"))
                .level,
            Level::RequestResponse
        );
        assert_eq!(
            p.decide(&resource("get", "apps", "deployments", "", "default"))
                .level,
            Level::Metadata
        );
        let mut scheduler = resource("watch", "", "pods", "", "");
        scheduler.user = "system:kube-scheduler";
        assert_eq!(p.decide(&scheduler).level, Level::None);
        // No rule at all: not audited.
        assert_eq!(
            Policy::default()
                .decide(&resource("get", "", "pods", "", "default"))
                .level,
            Level::None
        );
    }

    #[test]
    fn bad_policies_are_refused_with_their_fields() {
        assert!(parse("kind: Policy\napiVersion: audit.k8s.io/v1beta1\n").is_err());
        let both = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources: [{group: \"\"}]\n  nonResourceURLs: [\"/x*y\"]\n";
        let err = parse(both).err().unwrap_or_default();
        assert!(
            err.contains("rules[0].nonResourceURLs: Invalid value")
                && err.contains("rules[0].nonResourceURLs[0]: Invalid value: \"/x*y\""),
            "{err}"
        );
        let level = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n";
        assert!(parse(level).is_err());
    }
}
