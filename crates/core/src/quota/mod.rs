//! ResourceQuota accounting as pure functions: what objects cost ([`evaluator`]), whether a
//! write fits a namespace's quotas ([`check`], the admission plugin's decision), and the status
//! the quota controller writes ([`status`], upstream `pkg/controller/resourcequota`'s
//! `syncResourceQuota` with `quota.CalculateUsage`).
//!
//! Quantities are added and printed as upstream's `resource.Quantity` does ([`amount`]), so
//! `status.used` and the refusal messages read the same as a Kubernetes cluster's.

pub mod amount;
pub mod check;
pub mod evaluator;

use std::collections::BTreeSet;

use serde_json::{Value, json};

pub use amount::Amount;
pub use check::{Charge, check_request, pretty_print};
pub use evaluator::{Evaluator, ResourceList, ScopeSelector, resource_list, scope_selectors};

/// The evaluator a quota resource name belongs to, or `None` for names no evaluator tracks.
pub fn evaluator_of(name: &str) -> Option<Evaluator> {
    if let Some(gr) = name.strip_prefix("count/") {
        let (resource, group) = gr.split_once('.').unwrap_or((gr, ""));
        if resource.is_empty() {
            return None;
        }
        return Some(Evaluator::for_resource(group, resource));
    }
    [
        Evaluator::Pods,
        Evaluator::Services,
        Evaluator::PersistentVolumeClaims,
    ]
    .into_iter()
    .chain(
        [
            "configmaps",
            "secrets",
            "replicationcontrollers",
            "resourcequotas",
        ]
        .into_iter()
        .map(|r| Evaluator::for_resource("", r)),
    )
    .find(|e| e.tracks(name))
}

/// The evaluators a quota needs (one per kind it limits), from `spec.hard`.
pub fn evaluators_for(quota: &Value) -> Vec<Evaluator> {
    let mut out: Vec<Evaluator> = Vec::new();
    for name in resource_list(quota.pointer("/spec/hard")).keys() {
        if let Some(e) = evaluator_of(name)
            && !out.contains(&e)
        {
            out.push(e);
        }
    }
    out
}

/// The usage of `objects` (all of the evaluator's kind, in the quota's namespace) that the
/// quota counts: each resource of `spec.hard` the evaluator tracks, starting at zero, summed
/// over the objects in every scope of the quota (upstream `CalculateUsageStats`).
pub fn usage_of(quota: &Value, evaluator: &Evaluator, objects: &[Value], now: i64) -> ResourceList {
    let hard = resource_list(quota.pointer("/spec/hard"));
    let names: BTreeSet<String> = evaluator
        .matching_resources(hard.keys())
        .into_iter()
        .collect();
    let scopes = scope_selectors(quota);
    let mut used: ResourceList = names.iter().map(|n| (n.clone(), Amount::ZERO)).collect();
    for obj in objects {
        if !scopes.iter().all(|s| evaluator.matches_scope(s, obj)) {
            continue;
        }
        let usage = evaluator::mask(&evaluator.usage(obj, now), &names);
        used = evaluator::add(&used, &usage);
    }
    used
}

/// The status the controller writes: `hard` is `spec.hard`, `used` the sum of `usages` (one per
/// evaluator of [`evaluators_for`]). Quantities are in canonical form.
pub fn status(quota: &Value, usages: &[ResourceList]) -> Value {
    let hard = resource_list(quota.pointer("/spec/hard"));
    let used = usages
        .iter()
        .fold(ResourceList::new(), |acc, u| evaluator::add(&acc, u));
    json!({"hard": evaluator::to_value(&hard), "used": evaluator::to_value(&used)})
}

/// Whether two quota statuses say the same (quantities compared by value).
pub fn same_status(a: Option<&Value>, b: &Value) -> bool {
    let Some(a) = a else {
        return false;
    };
    ["hard", "used"].iter().all(|k| {
        a.get(*k).is_some() == b.get(*k).is_some()
            && evaluator::equals(&resource_list(a.get(*k)), &resource_list(b.get(*k)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_map_to_their_kinds() {
        assert_eq!(evaluator_of("requests.cpu"), Some(Evaluator::Pods));
        assert_eq!(evaluator_of("count/pods"), Some(Evaluator::Pods));
        assert_eq!(
            evaluator_of("services.nodeports"),
            Some(Evaluator::Services)
        );
        assert_eq!(
            evaluator_of("requests.storage"),
            Some(Evaluator::PersistentVolumeClaims)
        );
        assert_eq!(
            evaluator_of("count/deployments.apps"),
            Some(Evaluator::ObjectCount {
                group: "apps".into(),
                resource: "deployments".into()
            })
        );
        assert_eq!(
            evaluator_of("secrets"),
            Some(Evaluator::ObjectCount {
                group: "".into(),
                resource: "secrets".into()
            })
        );
        assert_eq!(evaluator_of("nonsense"), None);
    }

    #[test]
    fn controller_status_counts_running_pods_and_copies_hard() {
        let quota =
            json!({"spec": {"hard": {"pods": "5", "requests.cpu": "2", "count/pods": "9"}}});
        let pods = vec![
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]}}),
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Failed"}}),
        ];
        let evaluators = evaluators_for(&quota);
        assert_eq!(evaluators, vec![Evaluator::Pods]);
        let used = usage_of(&quota, &Evaluator::Pods, &pods, 0);
        let s = status(&quota, &[used]);
        assert_eq!(
            s["hard"],
            json!({"count/pods": "9", "pods": "5", "requests.cpu": "2"})
        );
        assert_eq!(
            s["used"],
            json!({"count/pods": "2", "pods": "1", "requests.cpu": "500m"})
        );
        assert!(same_status(Some(&s), &s));
        assert!(!same_status(None, &s));
    }

    #[test]
    fn unused_resources_show_zero() {
        let quota = json!({"spec": {"hard": {"services": "3", "configmaps": "2"}}});
        let used: Vec<ResourceList> = evaluators_for(&quota)
            .iter()
            .map(|e| usage_of(&quota, e, &[], 0))
            .collect();
        assert_eq!(
            status(&quota, &used)["used"],
            json!({"configmaps": "0", "services": "0"})
        );
    }
}
