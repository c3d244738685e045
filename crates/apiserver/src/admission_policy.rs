//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`), as upstream's
//! `ValidatingAdmissionPolicy` admission plugin: for every policy whose `matchConstraints`
//! match a request, each binding naming it whose `matchResources` match too is evaluated
//! (once per param) by `tandem_core::admission::policy`, and its `validationActions` decide:
//! Deny refuses the request, Warn adds a warning. Runs in the validating phase, before the
//! validating webhooks (upstream's plugin order).
//!
//! Policies and bindings are read from the watch cache and compiled once per change
//! ([`PolicyCache`]), so a request in a cluster without policies pays two empty cache lookups.
//! Not here yet: the `authorizer` variable (expressions reading it fail, and the failure
//! policy decides), audit annotations (there is no audit log), and `status.typeChecking`.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tandem_core::admission::matching::{self, MatchPolicy, Rule, Selector};
use tandem_core::admission::policy::{self, Activation, CompiledPolicy, Decisions, ParamScope};

use crate::cache::Cache;
use crate::crds::CustomResources;
use crate::error::{ApiError, ApiResult};
use crate::state::State;
use crate::webhook::{Attempt, Signature};

/// `matchConstraints` of a policy or `matchResources` of a binding.
#[derive(Debug)]
struct MatchResources {
    namespace_selector: Selector,
    object_selector: Selector,
    rules: Vec<Rule>,
    exclude: Vec<Rule>,
    policy: MatchPolicy,
}

impl MatchResources {
    fn from_json(v: &Value) -> MatchResources {
        let rules = |key: &str| -> Vec<Rule> {
            v.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Rule::from_json).collect())
                .unwrap_or_default()
        };
        let selector =
            |key: &str| Selector::from_json(v.get(key)).unwrap_or_else(|_| Selector::nothing());
        MatchResources {
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            rules: rules("resourceRules"),
            exclude: rules("excludeResourceRules"),
            policy: MatchPolicy::parse(v.get("matchPolicy").and_then(Value::as_str)),
        }
    }
}

/// A policy with its bindings, compiled.
struct PolicyEntry {
    name: String,
    compiled: CompiledPolicy,
    constraints: Option<MatchResources>,
    bindings: Vec<BindingEntry>,
}

struct BindingEntry {
    object: Value,
    resources: Option<MatchResources>,
}

/// The current policies and bindings, compiled when one changes.
#[derive(Default)]
pub(crate) struct PolicyCache {
    current: Mutex<Option<(Signature, Arc<Vec<PolicyEntry>>)>>,
}

impl PolicyCache {
    fn load(&self, registry: &CustomResources, cache: &Cache) -> Arc<Vec<PolicyEntry>> {
        let (signature, objects) = crate::webhook::read_admission_kinds(
            registry,
            cache,
            [
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ],
        );
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((sig, entries)) = current.as_ref()
            && *sig == signature
        {
            return entries.clone();
        }
        let [policies, bindings] = objects;
        let bindings: Vec<Value> = bindings.iter().filter_map(|o| o.to_value()).collect();
        let mut entries: Vec<PolicyEntry> = policies
            .iter()
            .filter_map(|o| o.to_value())
            .map(|p| {
                let name = text(&p, "/metadata/name").to_string();
                PolicyEntry {
                    compiled: policy::compile(&p),
                    constraints: p
                        .pointer("/spec/matchConstraints")
                        .filter(|m| m.is_object())
                        .map(MatchResources::from_json),
                    bindings: bindings
                        .iter()
                        .filter(|b| text(b, "/spec/policyName") == name)
                        .map(|b| BindingEntry {
                            object: b.clone(),
                            resources: b
                                .pointer("/spec/matchResources")
                                .filter(|m| m.is_object())
                                .map(MatchResources::from_json),
                        })
                        .collect(),
                    name,
                }
            })
            .filter(|e| !e.bindings.is_empty())
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let entries = Arc::new(entries);
        *current = Some((signature, entries.clone()));
        entries
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl State {
    /// Evaluates the ValidatingAdmissionPolicies that apply to the request; the first denial
    /// refuses it, warnings are added to `warnings`.
    pub(crate) fn validating_policies(
        &self,
        warnings: &mut Vec<String>,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if matching::is_exempt(&attempt.rt.group, &attempt.rt.plural) {
            return Ok(());
        }
        let entries = self.policies.load(&self.registry, &self.cache);
        if entries.is_empty() {
            return Ok(());
        }
        let mut namespace_labels = None;
        let mut namespace_object = None;
        for entry in entries.iter() {
            let Some(constraints) = &entry.constraints else {
                continue;
            };
            let labels = namespace_labels
                .get_or_insert_with(|| self.admission_namespace_labels(attempt, obj, old));
            let Some((group, version)) =
                self.resources_match(constraints, attempt, obj, old, labels, false)
            else {
                continue;
            };
            let mut decisions = Decisions::new(&entry.compiled);
            let mut evaluated = false;
            let request = crate::webhook::review_request(attempt, &group, &version, obj, old);
            let request_json = request.to_json();
            for binding in &entry.bindings {
                if let Some(resources) = &binding.resources
                    && self
                        .resources_match(resources, attempt, obj, old, labels, true)
                        .is_none()
                {
                    continue;
                }
                let binding_name = text(&binding.object, "/metadata/name").to_string();
                let candidates = match self.param_candidates(&entry.compiled) {
                    Ok(c) => c,
                    Err(e) => {
                        decisions.add_config_error(Some(&binding.object), &e);
                        evaluated = true;
                        continue;
                    }
                };
                let scope = match self.param_scope(&entry.compiled) {
                    Some(true) => ParamScope::Namespaced,
                    _ => ParamScope::Cluster,
                };
                let namespace = (!attempt.namespace.is_empty()).then_some(attempt.namespace);
                let params = match policy::resolve_params(
                    &binding.object,
                    &entry.compiled,
                    &candidates,
                    scope,
                    namespace,
                ) {
                    Ok(p) => p,
                    Err(e) => {
                        decisions.add_config_error(Some(&binding.object), &e.to_string());
                        evaluated = true;
                        continue;
                    }
                };
                let ns_object = namespace_object
                    .get_or_insert_with(|| self.namespace_object(attempt.namespace));
                for param in params {
                    let mut act = Activation::new(&request_json);
                    act.object = request.object.as_ref();
                    act.old_object = request.old_object.as_ref();
                    act.params = param;
                    act.namespace_object = ns_object.as_ref();
                    let evaluation = policy::evaluate(&entry.compiled, &act);
                    decisions.add_evaluation(&binding.object, &evaluation);
                    evaluated = true;
                    self.count_policy_check(
                        &entry.name,
                        &binding_name,
                        &binding.object,
                        &evaluation,
                    );
                }
            }
            if !evaluated {
                continue;
            }
            let verdict = decisions.finish();
            warnings.extend(verdict.warnings);
            if let Some(denial) = verdict.denial {
                let reason = crate::error::reason_for(Some(&denial.reason), denial.code);
                let group_resource = attempt.rt.group_resource();
                return Err(ApiError::new(
                    denial.code,
                    reason,
                    denial.status_message(&group_resource, attempt.name),
                ));
            }
        }
        Ok(())
    }

    /// The group and version through which `m` covers the request (upstream
    /// `matching.Matcher.Matches`): selectors, then excluded rules, then rules. A binding's
    /// `matchResources` without rules covers whatever its policy covers.
    fn resources_match(
        &self,
        m: &MatchResources,
        attempt: &Attempt<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
        namespace_labels: &serde_json::Map<String, Value>,
        binding: bool,
    ) -> Option<(String, String)> {
        let attrs = self.attributes(attempt);
        if !m
            .namespace_selector
            .matches_namespace(&attrs, Some(namespace_labels))
            .unwrap_or(false)
            || !m.object_selector.matches_objects(obj, old)
        {
            return None;
        }
        let named = |rules: &[Rule]| -> Vec<Rule> {
            rules
                .iter()
                .filter(|r| {
                    r.resource_names.is_empty()
                        || r.resource_names.iter().any(|n| n == attempt.name)
                })
                .cloned()
                .collect()
        };
        let exclude = named(&m.exclude);
        if !exclude.is_empty() && self.rules_match(&exclude, m.policy, attempt).is_some() {
            return None;
        }
        if binding && m.rules.is_empty() {
            return Some((attempt.rt.group.clone(), attempt.rt.version.clone()));
        }
        self.rules_match(&named(&m.rules), m.policy, attempt)
    }

    /// Every object of the policy's `paramKind` (none without one); an unknown kind is an
    /// error (upstream: `failed to find resource referenced by paramKind`).
    fn param_candidates(&self, compiled: &CompiledPolicy) -> Result<Vec<Value>, String> {
        let Some(kind) = compiled.param_kind() else {
            return Ok(Vec::new());
        };
        let rt = self
            .registry
            .by_kind(&kind.api_version, &kind.kind)
            .ok_or_else(|| {
                format!(
                    "failed to find resource referenced by paramKind: '{}, Kind={}'",
                    kind.api_version, kind.kind
                )
            })?;
        Ok(self
            .cache
            .snapshot(&rt, &rt.key_prefix(), |_| true)
            .items
            .iter()
            .filter_map(|o| o.to_value())
            .collect())
    }

    /// Whether the policy's paramKind is namespaced.
    fn param_scope(&self, compiled: &CompiledPolicy) -> Option<bool> {
        let kind = compiled.param_kind()?;
        Some(
            self.registry
                .by_kind(&kind.api_version, &kind.kind)?
                .namespaced,
        )
    }

    /// `apiserver_validating_admission_policy_check_total` for one evaluation.
    fn count_policy_check(
        &self,
        policy_name: &str,
        binding_name: &str,
        binding: &Value,
        evaluation: &policy::Evaluation,
    ) {
        let Some(m) = &self.options.server_metrics else {
            return;
        };
        let failed = !evaluation.failures.is_empty();
        let error_type = if evaluation
            .failures
            .iter()
            .any(|f| f.kind == policy::FailureKind::EvaluationError)
        {
            "invalid_error"
        } else {
            "no_error"
        };
        if !failed {
            m.api
                .count_policy_check(policy_name, binding_name, error_type, "allow");
            return;
        }
        let actions = binding
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for action in actions.iter().filter_map(Value::as_str) {
            let label = match action {
                "Deny" => "deny",
                "Warn" => "warn",
                "Audit" => "audit",
                _ => continue,
            };
            m.api
                .count_policy_check(policy_name, binding_name, error_type, label);
        }
    }
}
