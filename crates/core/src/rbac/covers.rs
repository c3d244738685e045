//! The escalation check: whether the rules a user holds cover the rules they ask to grant.
//! Ports upstream's `Covers`, `BreakdownRule` and `ruleCovers`
//! (pkg/registry/rbac/validation/policy_comparator.go), with `CompactRules`
//! (policy_compact.go) and `CompactString` (pkg/apis/rbac/v1/helpers.go) for the message that
//! lists what is missing.

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::rules::url_prefix_covers;
use super::{API_GROUP_ALL, RESOURCE_ALL, VERB_ALL};
use crate::field::go_quote;

/// Whether `owner` covers `requested`, and the atoms it does not (upstream `Covers`).
///
/// Each requested rule is broken into atoms ([`breakdown_rule`]): one verb, one group, one
/// resource and at most one resource name, or one verb and one non-resource URL. An atom is
/// covered when a single owner rule covers it; because atoms are that small, this is exact.
/// The API server refuses to create or update a Role/ClusterRole (without the `escalate` verb)
/// when this returns false, listing the uncovered atoms (see [`compact_rules`]).
///
/// As upstream, owner `*` matches any verb, group or resource, owner `*/<sub>` covers that
/// subresource of any resource, an owner without resource names covers any names, and an owner
/// URL ending in `*` covers the URLs it prefixes. A requested rule whose fields are all empty
/// breaks into nothing and so is always covered.
pub fn covers(owner: &[PolicyRule], requested: &[PolicyRule]) -> (bool, Vec<PolicyRule>) {
    let uncovered: Vec<PolicyRule> = requested
        .iter()
        .flat_map(breakdown_rule)
        .filter(|atom| !owner.iter().any(|o| rule_covers(o, atom)))
        .collect();
    (uncovered.is_empty(), uncovered)
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or(&[])
}

fn one(s: &str) -> Option<Vec<String>> {
    Some(vec![s.to_string()])
}

/// Upstream `BreakdownRule`: the equivalent list of rules with at most one verb, one group, one
/// resource and one resource name each (groups × resources × verbs [× names]), then one per
/// non-resource URL × verb.
pub fn breakdown_rule(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut atoms = Vec::new();
    for group in list(&rule.api_groups) {
        for resource in list(&rule.resources) {
            for verb in &rule.verbs {
                let atom = |name: Option<Vec<String>>| PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: vec![verb.clone()],
                    resource_names: name,
                    non_resource_urls: None,
                };
                let names = list(&rule.resource_names);
                if names.is_empty() {
                    atoms.push(atom(None));
                } else {
                    atoms.extend(names.iter().map(|n| atom(one(n))));
                }
            }
        }
    }
    for url in list(&rule.non_resource_urls) {
        for verb in &rule.verbs {
            atoms.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: vec![verb.clone()],
                ..PolicyRule::default()
            });
        }
    }
    atoms
}

fn has(set: &[String], s: &str) -> bool {
    set.iter().any(|x| x == s)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

/// Upstream `resourceCoversAll`: `*`, every resource by name, or `*/<sub>` for each
/// `<resource>/<sub>` not named.
fn resource_covers_all(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, RESOURCE_ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

/// Upstream `nonResourceURLsCoversAll`.
fn urls_cover_all(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|path| {
        owner
            .iter()
            .any(|o| o == path || url_prefix_covers(o, path))
    })
}

/// Upstream `ruleCovers`: whether one owner rule covers an atom of [`breakdown_rule`].
fn rule_covers(owner: &PolicyRule, atom: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, VERB_ALL) || has_all(&owner.verbs, &atom.verbs);
    let owner_groups = list(&owner.api_groups);
    let groups = has(owner_groups, API_GROUP_ALL) || has_all(owner_groups, list(&atom.api_groups));
    let resources = resource_covers_all(list(&owner.resources), list(&atom.resources));
    let urls = urls_cover_all(
        list(&owner.non_resource_urls),
        list(&atom.non_resource_urls),
    );
    let owner_names = list(&owner.resource_names);
    let atom_names = list(&atom.resource_names);
    let names = if atom_names.is_empty() {
        owner_names.is_empty()
    } else {
        owner_names.is_empty() || has_all(owner_names, atom_names)
    };
    verbs && groups && resources && names && urls
}

/// Upstream `CompactRules`: merges "simple" rules (one group, one resource, at most one resource
/// name, no URLs) that differ only by verb, as the uncovered atoms of [`covers`] are. Other
/// rules are kept as they are, first; the merged ones follow in order of first appearance
/// (upstream's order comes from a Go map, and its callers sort the rendered lines).
pub fn compact_rules(rules: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut compacted = Vec::new();
    let mut simple: Vec<(SimpleKey, PolicyRule)> = Vec::new();
    for rule in rules {
        match simple_key(rule) {
            Some(key) => match simple.iter_mut().find(|(k, _)| *k == key) {
                Some((_, existing)) => existing.verbs.extend(rule.verbs.iter().cloned()),
                None => simple.push((key, rule.clone())),
            },
            None => compacted.push(rule.clone()),
        }
    }
    compacted.extend(simple.into_iter().map(|(_, r)| r));
    compacted
}

/// (group, resource, resource name) of a simple rule (upstream's `simpleResource`).
type SimpleKey = (String, String, Option<String>);

/// Upstream `isSimpleResourceRule`: the key of a rule holding exactly one group and one
/// resource, at most one resource name and no non-resource URLs.
fn simple_key(rule: &PolicyRule) -> Option<SimpleKey> {
    let names = list(&rule.resource_names);
    if names.len() > 1 || !list(&rule.non_resource_urls).is_empty() {
        return None;
    }
    match (list(&rule.api_groups), list(&rule.resources)) {
        ([group], [resource]) => Some((group.clone(), resource.clone(), names.first().cloned())),
        _ => None,
    }
}

/// Upstream `CompactString`: the rule as escalation errors print it, e.g.
/// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}` (only non-empty
/// fields, each list in Go's `%q` form).
pub fn compact_string(rule: &PolicyRule) -> String {
    let quoted = |items: &[String]| {
        let inner: Vec<String> = items.iter().map(|i| go_quote(i)).collect();
        format!("[{}]", inner.join(" "))
    };
    let fields = [
        ("APIGroups", list(&rule.api_groups)),
        ("Resources", list(&rule.resources)),
        ("NonResourceURLs", list(&rule.non_resource_urls)),
        ("ResourceNames", list(&rule.resource_names)),
        ("Verbs", rule.verbs.as_slice()),
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter(|(_, items)| !items.is_empty())
        .map(|(label, items)| format!("{label}:{}", quoted(items)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}
