//! The PodSecurity admission plugin in the write pipeline (upstream's built-in plugin, on by
//! default): the rules are `tandem_core::admission::pod_security`; this file reads what they
//! need (the namespace's labels, its pods) from the watch cache and turns their answers into a
//! 403, warnings, or the 422 of a namespace with bad labels. It runs as a validating plugin
//! does: after mutating webhooks and object validation, before validating webhooks.

use std::collections::BTreeMap;

use serde_json::Value;
use tandem_core::admission::pod_security::{self as pss, Configuration, Level, Policy};
use tandem_core::admission::{Operation, at};
use tandem_core::registry::ResourceType;

use crate::error::{ApiError, ApiResult};
use crate::meta;
use crate::rest::Ctx;
use crate::state::State;

/// The plugin's configuration, checked once at start.
#[derive(Debug, Clone, Default)]
pub struct PodSecurity {
    pub defaults: Policy,
    pub exemptions: pss::Exemptions,
}

impl PodSecurity {
    /// From a `PodSecurityConfiguration`; its bad defaults are an error naming each field.
    pub fn from_configuration(c: &Configuration) -> Result<PodSecurity, String> {
        Ok(PodSecurity {
            defaults: c.policy()?,
            exemptions: c.exemptions.clone(),
        })
    }

    fn exempt_namespace(&self, ns: &str) -> bool {
        !ns.is_empty() && self.exemptions.namespaces.iter().any(|n| n == ns)
    }

    fn exempt_user(&self, user: &str) -> bool {
        !user.is_empty() && self.exemptions.usernames.iter().any(|u| u == user)
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        spec.get("runtimeClassName")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .is_some_and(|c| self.exemptions.runtime_classes.iter().any(|r| r == c))
    }
}

fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

impl State {
    /// A namespace's labels from the watch cache's precomputed attributes (no decoding of the
    /// object: this runs on every pod write).
    fn namespace_labels(&self, ns: &str) -> BTreeMap<String, String> {
        let Some(rt) = self.registry.by_plural("", "v1", "namespaces") else {
            return BTreeMap::new();
        };
        let Some(o) = self.cache.get(&rt, &rt.key(None, ns)) else {
            return BTreeMap::new();
        };
        o.attrs(&rt)
            .labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect()
    }

    /// The pods of `ns` as (name, metadata, spec), from the watch cache.
    fn namespace_pods(&self, ns: &str) -> Vec<(String, Value, Value)> {
        let Some(rt) = self.registry.by_plural("", "v1", "pods") else {
            return Vec::new();
        };
        let prefix = format!("{}{ns}/", rt.key_prefix());
        self.cache
            .snapshot(&rt, &prefix, |_| true)
            .items
            .iter()
            .filter_map(|o| {
                let v = o.to_value()?;
                let name = meta::name(&v)?.to_string();
                let metadata = v.get("metadata").cloned().unwrap_or(Value::Null);
                let spec = v.get("spec").cloned().unwrap_or(Value::Null);
                Some((name, metadata, spec))
            })
            .collect()
    }

    /// Runs the PodSecurity plugin on a write of `obj` (`old` for an update) through
    /// subresource `sub`: pods against the namespace's enforce and warn levels, workload
    /// templates against its warn level, namespaces for their labels (and, when the enforce
    /// level rises, their existing pods). Warnings go into `ctx`.
    pub(crate) fn pod_security(
        &self,
        ctx: &mut Ctx,
        op: Operation,
        rt: &ResourceType,
        sub: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let config = &self.options.pod_security;
        if rt.group.is_empty() && rt.kind == "Namespace" {
            return self.pod_security_namespace(ctx, op, rt, sub, obj, old);
        }
        let Some(location) = tandem_core::admission::pod_spec_location(rt) else {
            return Ok(());
        };
        let is_pod = rt.group.is_empty() && rt.kind == "Pod";
        // Pods are checked through the pod itself and `ephemeralcontainers`; other
        // subresources (status, binding, exec …) never are.
        match sub {
            None => {}
            Some("ephemeralcontainers") if is_pod => {}
            Some(_) => return Ok(()),
        }
        if !matches!(op, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let ns = meta::namespace(obj).unwrap_or_default();
        if config.exempt_namespace(ns) || config.exempt_user(&ctx.user.name) {
            return Ok(());
        }
        let ns_labels = self.namespace_labels(ns);
        let (policy, label_errors) = pss::policy_from_labels(&ns_labels, config.defaults);
        if label_errors.is_empty() && policy.fully_privileged() {
            return Ok(());
        }
        let Some(spec) = at(obj, location) else {
            return Ok(());
        };
        // The pod template's metadata sits beside its spec.
        let metadata_path: Vec<&str> = location[..location.len() - 1]
            .iter()
            .copied()
            .chain(["metadata"])
            .collect();
        let metadata = at(obj, &metadata_path).cloned().unwrap_or(Value::Null);
        if config.exempt_runtime_class(spec) {
            return Ok(());
        }
        if is_pod {
            if op == Operation::Update
                && let Some(old_spec) = old.and_then(|o| o.get("spec"))
                && !pss::is_significant_update(spec, old_spec)
            {
                return Ok(());
            }
            let violations = pss::evaluate(policy.enforce, &metadata, spec);
            if !violations.is_empty() {
                return Err(ApiError::forbidden_object(
                    rt,
                    meta::name(obj).unwrap_or_default(),
                    &pss::enforce_message(policy.enforce, &violations),
                ));
            }
        } else if policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged
        {
            return Ok(());
        }
        let violations = pss::evaluate(policy.warn, &metadata, spec);
        if !violations.is_empty() {
            ctx.warnings
                .push(pss::warn_message(policy.warn, &violations));
        }
        Ok(())
    }

    fn pod_security_namespace(
        &self,
        ctx: &mut Ctx,
        op: Operation,
        rt: &ResourceType,
        sub: Option<&str>,
        obj: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if sub.is_some() {
            return Ok(());
        }
        let config = &self.options.pod_security;
        let name = meta::name(obj).unwrap_or_default();
        let (policy, errors) = pss::policy_from_labels(&labels(obj), config.defaults);
        match (op, old) {
            (Operation::Create, _) => {
                if !errors.is_empty() {
                    return Err(ApiError::invalid(rt, name, &errors));
                }
                Ok(())
            }
            (Operation::Update, Some(old)) => {
                let (old_policy, old_errors) =
                    pss::policy_from_labels(&labels(old), config.defaults);
                // Bad labels are refused when they are new (a namespace stored with bad labels
                // can still be updated otherwise).
                if !errors.is_empty() && (old_errors.is_empty() || errors != old_errors) {
                    return Err(ApiError::invalid(rt, name, &errors));
                }
                let (new, old) = (policy.enforce, old_policy.enforce);
                if new == old
                    || new.level == Level::Privileged
                    || (new.version == old.version && new.level <= old.level)
                    || config.exempt_namespace(name)
                {
                    return Ok(());
                }
                let pods = self.namespace_pods(name);
                ctx.warnings
                    .extend(pss::evaluate_existing_pods(name, new, &pods));
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Reads `--admission-control-config-file` (an `apiserver.config.k8s.io/v1`
/// `AdmissionConfiguration`) for the PodSecurity plugin's entry, given inline
/// (`configuration:`) or in a file of its own (`path:`, relative to the configuration file).
/// Entries of other plugins are accepted and ignored; no entry leaves upstream's defaults.
pub fn load_admission_config(path: &std::path::Path) -> Result<PodSecurity, String> {
    let read = |p: &std::path::Path| -> Result<Value, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let doc = read(path)?;
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind != "AdmissionConfiguration" {
        return Err(format!(
            "{}: kind must be AdmissionConfiguration, not {kind:?}",
            path.display()
        ));
    }
    let Some(entry) = doc
        .get("plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str) == Some("PodSecurity"))
    else {
        return Ok(PodSecurity::default());
    };
    let configuration = match (entry.get("configuration"), entry.get("path")) {
        (Some(c), _) if !c.is_null() => c.clone(),
        (_, Some(Value::String(p))) => {
            let p = std::path::Path::new(p);
            let full = if p.is_absolute() {
                p.to_path_buf()
            } else {
                path.parent().unwrap_or(std::path::Path::new(".")).join(p)
            };
            read(&full)?
        }
        _ => return Ok(PodSecurity::default()),
    };
    let kind = configuration
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "PodSecurityConfiguration" {
        return Err(format!(
            "PodSecurity: configuration kind must be PodSecurityConfiguration, not {kind:?}"
        ));
    }
    let parsed: Configuration = serde_json::from_value(configuration)
        .map_err(|e| format!("PodSecurity: invalid configuration: {e}"))?;
    PodSecurity::from_configuration(&parsed).map_err(|e| format!("PodSecurity: defaults: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_core::admission::pod_security::{LevelVersion, Version};

    #[test]
    fn the_admission_configuration_file_sets_defaults_and_exemptions() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("admission.yaml");
        std::fs::write(
            &file,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  configuration:\n    apiVersion: pod-security.admission.config.k8s.io/v1\n    kind: PodSecurityConfiguration\n    defaults: {enforce: baseline, enforce-version: v1.30}\n    exemptions: {namespaces: [kube-system]}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let p = load_admission_config(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.defaults.enforce,
            LevelVersion {
                level: Level::Baseline,
                version: Version::Minor(30)
            }
        );
        assert!(p.exempt_namespace("kube-system"));
        // In a file of its own, with a bad level.
        std::fs::write(
            dir.path().join("pss.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults: {enforce: strict}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            &file,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: pss.yaml\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            load_admission_config(&file).err().as_deref(),
            Some("PodSecurity: defaults: enforce: must be one of privileged, baseline, restricted")
        );
    }
}
