//! Label-selector matching over typed `LabelSelector`s, for the pod-to-pod plugins
//! (inter-pod affinity, topology spread) and preemption, on core's selector: as
//! `metav1.LabelSelectorAsSelector`, a `None` selector matches nothing, an empty one matches
//! everything, an invalid one matches nothing.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use tandem_core::selector::LabelSelector as CoreSelector;

/// A compiled label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector(CoreSelector);

impl Selector {
    /// Compiles a typed selector (see the module docs for `None` and invalid selectors).
    pub fn new(sel: Option<&LabelSelector>) -> Selector {
        Selector(
            sel.and_then(|s| CoreSelector::from_metav1(s).ok())
                .unwrap_or_else(CoreSelector::nothing),
        )
    }

    /// A selector that matches no labels.
    pub fn nothing() -> Selector {
        Selector(CoreSelector::nothing())
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches_labels(labels)
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
    fn an_invalid_selector_matches_nothing() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchExpressions": [{"key": "app", "operator": "Matches", "values": ["web"]}]
        }))
        .expect("selector");
        assert!(!Selector::new(Some(&sel)).matches(&labels(&[("app", "web")])));
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
