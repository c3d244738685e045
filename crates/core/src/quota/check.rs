//! The decision of the ResourceQuota admission plugin for one write, after upstream's
//! `CheckRequest` (`k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`).
//!
//! For each quota of the namespace that covers the object (see [`Evaluator::matches`]): the
//! pod constraints must hold (`failed quota: q: must specify requests.cpu for: app`), the quota
//! must have usage for every resource it limits (`status unknown for quota: q, resources:
//! pods`), and its usage plus the object's must stay within `status.hard` (`exceeded quota: q,
//! requested: pods=1, used: pods=2, limited: pods=2`). The result is the usage each quota must
//! be charged with; the caller writes it with a compare-and-swap and retries on conflict.

use std::collections::BTreeSet;

use serde_json::Value;

use super::evaluator::{Evaluator, ResourceList, add, mask, resource_list};

/// The new `status.used` of one quota, by its index in the slice given to [`check_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub index: usize,
    pub used: ResourceList,
}

/// Upstream `prettyPrint`: `name=value` pairs in name order, joined by commas.
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn quota_name(quota: &Value) -> &str {
    quota
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Upstream `quota.SubtractWithNonNegativeResult`: `a - b` per key of `a`, never below zero.
fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    a.iter()
        .map(|(k, v)| {
            let d = match b.get(k) {
                Some(o) => *v - *o,
                None => *v,
            };
            let d = if d.is_negative() {
                super::amount::Amount::ZERO
            } else {
                d
            };
            (k.clone(), d)
        })
        .collect()
}

/// Decides whether `obj` (a create when `old` is `None`, else an update of `old`) fits the
/// namespace's `quotas`; returns the usage to charge to each covering quota, or the message
/// of the 403 to answer (without the `pods "x" is forbidden: ` prefix). `now` is Unix seconds.
pub fn check_request(
    quotas: &[Value],
    evaluator: &Evaluator,
    obj: &Value,
    old: Option<&Value>,
    now: i64,
) -> Result<Vec<Charge>, String> {
    if old.is_some() && !evaluator.handles_update() {
        return Ok(Vec::new());
    }
    let mut interesting = Vec::new();
    for (i, quota) in quotas.iter().enumerate() {
        if !evaluator.matches(quota, obj) {
            continue;
        }
        let name = quota_name(quota);
        let hard = resource_list(quota.pointer("/status/hard"));
        let restricted = evaluator.matching_resources(hard.keys());
        evaluator
            .constraints(&restricted, obj)
            .map_err(|e| format!("failed quota: {name}: {e}"))?;
        let used = resource_list(quota.pointer("/status/used"));
        if restricted.iter().any(|r| !used.contains_key(r)) {
            let mut names = restricted.clone();
            names.sort();
            return Err(format!(
                "status unknown for quota: {name}, resources: {}",
                names.join(",")
            ));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(Vec::new());
    }
    let input = evaluator.usage(obj, now);
    let negative: Vec<&str> = input
        .iter()
        .filter(|(_, v)| v.is_negative())
        .map(|(k, _)| k.as_str())
        .collect();
    if !negative.is_empty() {
        return Err(format!(
            "quota usage is negative for resource(s): {}",
            negative.join(",")
        ));
    }
    let previous = old.map(|o| (o, evaluator.usage(o, now)));
    let mut charges = Vec::new();
    for i in interesting {
        let quota = &quotas[i];
        let delta = match &previous {
            Some((o, prev)) if evaluator.matches(quota, o) => subtract_non_negative(&input, prev),
            _ => input.clone(),
        };
        let delta: ResourceList = delta.into_iter().filter(|(_, v)| !v.is_zero()).collect();
        if delta.is_empty() {
            continue;
        }
        let hard = resource_list(quota.pointer("/status/hard"));
        let used = resource_list(quota.pointer("/status/used"));
        let hard_names: BTreeSet<String> = hard.keys().cloned().collect();
        let requested = mask(&delta, &hard_names);
        let new_used = add(&used, &requested);
        let exceeded: BTreeSet<String> = requested
            .keys()
            .filter(|k| {
                let (Some(n), Some(h)) = (new_used.get(*k), hard.get(*k)) else {
                    return false;
                };
                n.cmp_value(*h).is_gt()
            })
            .cloned()
            .collect();
        if !exceeded.is_empty() {
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                quota_name(quota),
                pretty_print(&mask(&requested, &exceeded)),
                pretty_print(&mask(&used, &exceeded)),
                pretty_print(&mask(&hard, &exceeded)),
            ));
        }
        charges.push(Charge {
            index: i,
            used: new_used,
        });
    }
    Ok(charges)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn quota(name: &str, hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": {"hard": hard}, "status": {"hard": hard, "used": used}})
    }

    fn pod(cpu: Option<&str>) -> Value {
        let resources = match cpu {
            Some(c) => json!({"requests": {"cpu": c}}),
            None => json!({}),
        };
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "resources": resources}]}})
    }

    #[test]
    fn pod_within_quota_is_charged() {
        let q = quota(
            "q",
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "500m"}),
        );
        let charges =
            check_request(&[q], &Evaluator::Pods, &pod(Some("250m")), None, 0).expect("fits");
        assert_eq!(charges.len(), 1);
        assert_eq!(pretty_print(&charges[0].used), "pods=2,requests.cpu=750m");
    }

    #[test]
    fn pod_over_quota_is_refused_with_upstream_message() {
        let q = quota(
            "q",
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "2", "requests.cpu": "500m"}),
        );
        let err =
            check_request(&[q], &Evaluator::Pods, &pod(Some("100m")), None, 0).expect_err("over");
        assert_eq!(
            err,
            "exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        );
    }

    #[test]
    fn pod_without_cpu_request_fails_a_cpu_quota() {
        let q = quota(
            "compute",
            json!({"requests.cpu": "1"}),
            json!({"requests.cpu": "0"}),
        );
        let err = check_request(&[q], &Evaluator::Pods, &pod(None), None, 0).expect_err("missing");
        assert_eq!(
            err,
            "failed quota: compute: must specify requests.cpu for: app"
        );
    }

    #[test]
    fn quota_without_usage_yet_refuses_with_status_unknown() {
        let q = json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "2", "count/pods": "3"}}});
        let err = check_request(&[q], &Evaluator::Pods, &pod(None), None, 0).expect_err("unknown");
        assert_eq!(
            err,
            "status unknown for quota: q, resources: count/pods,pods"
        );
    }

    #[test]
    fn quota_the_controller_has_not_seen_covers_nothing() {
        // Upstream reads status.hard: an unsynced quota constrains nothing yet.
        let q = json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "0"}}});
        assert_eq!(
            check_request(&[q], &Evaluator::Pods, &pod(None), None, 0),
            Ok(vec![])
        );
    }

    #[test]
    fn scoped_quota_skips_pods_outside_its_scope() {
        let mut q = quota("be", json!({"pods": "0"}), json!({"pods": "0"}));
        q["spec"]["scopes"] = json!(["BestEffort"]);
        assert_eq!(
            check_request(
                std::slice::from_ref(&q),
                &Evaluator::Pods,
                &pod(Some("1")),
                None,
                0
            ),
            Ok(vec![])
        );
        assert!(check_request(&[q], &Evaluator::Pods, &pod(None), None, 0).is_err());
    }

    #[test]
    fn service_update_is_charged_only_the_difference() {
        let q = quota(
            "svc",
            json!({"services.loadbalancers": "1", "services": "5"}),
            json!({"services.loadbalancers": "1", "services": "1"}),
        );
        let old = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        let new = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        let err = check_request(
            std::slice::from_ref(&q),
            &Evaluator::Services,
            &new,
            Some(&old),
            0,
        )
        .expect_err("over");
        assert_eq!(
            err,
            "exceeded quota: svc, requested: services.loadbalancers=1, used: services.loadbalancers=1, limited: services.loadbalancers=1"
        );
        // Same type: nothing new to charge.
        assert_eq!(
            check_request(&[q], &Evaluator::Services, &old, Some(&old), 0),
            Ok(vec![])
        );
    }

    #[test]
    fn object_count_quota_limits_config_maps() {
        let q = quota(
            "cm",
            json!({"count/configmaps": "1"}),
            json!({"count/configmaps": "1"}),
        );
        let e = Evaluator::for_resource("", "configmaps");
        let err = check_request(&[q], &e, &json!({}), None, 0).expect_err("over");
        assert_eq!(
            err,
            "exceeded quota: cm, requested: count/configmaps=1, used: count/configmaps=1, limited: count/configmaps=1"
        );
    }
}
