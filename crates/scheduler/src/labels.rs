//! Label-selector matching over typed `LabelSelector`s, for the pod-to-pod plugins
//! (inter-pod affinity, topology spread). Mirrors `metav1.LabelSelectorAsSelector`: a `None`
//! selector matches nothing, an empty one matches everything, an invalid one matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A compiled label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// `None` when the selector matches nothing.
    requirements: Option<Vec<(String, Op)>>,
}

impl Selector {
    /// Compiles a typed selector (see the module docs for `None` and invalid selectors).
    pub fn new(sel: Option<&LabelSelector>) -> Selector {
        let Some(sel) = sel else {
            return Selector::nothing();
        };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push((k.clone(), Op::In(vec![v.clone()])));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" if !values.is_empty() => Op::In(values),
                "NotIn" if !values.is_empty() => Op::NotIn(values),
                "Exists" if values.is_empty() => Op::Exists,
                "DoesNotExist" if values.is_empty() => Op::DoesNotExist,
                _ => return Selector::nothing(),
            };
            reqs.push((e.key.clone(), op));
        }
        Selector {
            requirements: Some(reqs),
        }
    }

    /// A selector that matches no labels.
    pub fn nothing() -> Selector {
        Selector { requirements: None }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(reqs) = &self.requirements else {
            return false;
        };
        reqs.iter().all(|(k, op)| match op {
            Op::In(vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Op::NotIn(vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Op::Exists => labels.contains_key(k),
            Op::DoesNotExist => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nil_selector_matches_nothing_and_empty_matches_everything() {
        assert!(!Selector::new(None).matches(&labels(&[("a", "b")])));
        assert!(Selector::new(Some(&LabelSelector::default())).matches(&labels(&[])));
    }

    #[test]
    fn expressions_match_like_upstream() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "env", "operator": "Exists"}
            ]
        }))
        .expect("selector");
        let s = Selector::new(Some(&sel));
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "prod"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }
}
