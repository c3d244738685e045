//! The webhooks of the stored ValidatingWebhookConfigurations and MutatingWebhookConfigurations,
//! read once per change: each webhook with its rules, selectors and policies compiled and its
//! client (TLS roots, idle connections) built. Requests read the current set from
//! [`HookCache`], which rebuilds it only when a configuration's resourceVersion changed, so a
//! cluster without webhooks pays one empty cache lookup per write.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use tandem_core::admission::matching::{MatchPolicy, Rule, Selector};
use tandem_core::admission::policy::CompiledConditions;
use tandem_store::Revision;

use super::client::Client;
use crate::cache::Cache;
use crate::crds::CustomResources;

/// Upstream's default and largest `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TIMEOUT_SECS: u64 = 30;

/// Where a webhook is reached (`clientConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

impl Endpoint {
    /// The endpoint of a webhook `clientConfig` (admission or CRD conversion): its `url`, else
    /// its `service` (port 443 unless set).
    pub fn of(client_config: &Value) -> Endpoint {
        let str_of = |p: &str| {
            client_config
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        match client_config.get("url").and_then(Value::as_str) {
            Some(url) => Endpoint::Url(url.to_string()),
            None => Endpoint::Service {
                namespace: str_of("/service/namespace"),
                name: str_of("/service/name"),
                port: client_config
                    .pointer("/service/port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
                path: str_of("/service/path"),
            },
        }
    }
}

/// The client of a webhook `clientConfig`, trusting its base64 `caBundle` (the system's roots
/// without one), or why none can be built.
pub(crate) fn client_of(client_config: &Value) -> Result<Client, String> {
    let ca_bundle = client_config
        .get("caBundle")
        .and_then(Value::as_str)
        .unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(ca_bundle.as_bytes())
        .map_err(|e| format!("invalid caBundle: {e}"))
        .and_then(|pem| Client::new(&pem))
}

/// One webhook of a configuration, ready to match and call.
#[derive(Debug)]
pub(crate) struct Hook {
    /// The webhook's name (`deny.example.com`), as messages name it.
    pub name: String,
    /// The configuration it belongs to.
    pub configuration: String,
    pub rules: Vec<Rule>,
    pub match_policy: MatchPolicy,
    pub namespace_selector: Selector,
    pub object_selector: Selector,
    /// `matchConditions`, compiled.
    pub match_conditions: CompiledConditions,
    /// `failurePolicy: Ignore`: a failed call lets the request through.
    pub ignore_failures: bool,
    /// `sideEffects`: `None` and `NoneOnDryRun` may be called on dry runs.
    pub side_effects: String,
    pub timeout: Duration,
    pub endpoint: Endpoint,
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks).
    pub reinvoke_if_needed: bool,
    /// The client, or why none could be built (an unreadable caBundle: every call fails by
    /// the failure policy).
    pub client: Result<Client, String>,
}

impl Hook {
    /// Whether the webhook may be called for a dry run (upstream: side effects `None` or
    /// `NoneOnDryRun`).
    pub fn dry_run_safe(&self) -> bool {
        matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun")
    }
}

/// The webhooks of every configuration, mutating ones in upstream's order (configurations by
/// name, webhooks in their order) and validating ones likewise.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    pub mutating: Vec<Arc<Hook>>,
    pub validating: Vec<Arc<Hook>>,
}

/// Reads one webhook of a configuration.
fn read_hook(configuration: &str, w: &Value, mutating: bool) -> Hook {
    let str_of = |p: &str| w.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let rules = w
        .get("rules")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(Rule::from_json).collect())
        .unwrap_or_default();
    // Selectors were validated on write; one that still fails to compile selects nothing
    // rather than everything.
    let selector =
        |key: &str| Selector::from_json(w.get(key)).unwrap_or_else(|_| Selector::nothing());
    let timeout = w
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.min(MAX_TIMEOUT_SECS)))
        .unwrap_or(DEFAULT_TIMEOUT);
    let client_config = w.get("clientConfig").unwrap_or(&Value::Null);
    let endpoint = Endpoint::of(client_config);
    let client = client_of(client_config);
    Hook {
        name: str_of("/name").to_string(),
        configuration: configuration.to_string(),
        rules,
        match_policy: MatchPolicy::parse(w.get("matchPolicy").and_then(Value::as_str)),
        namespace_selector: selector("namespaceSelector"),
        object_selector: selector("objectSelector"),
        match_conditions: CompiledConditions::compile(
            w.get("matchConditions")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        ),
        ignore_failures: str_of("/failurePolicy") == "Ignore",
        side_effects: str_of("/sideEffects").to_string(),
        timeout,
        endpoint,
        review_versions: string_list(w, "admissionReviewVersions"),
        reinvoke_if_needed: mutating && str_of("/reinvocationPolicy") == "IfNeeded",
        client,
    }
}

/// The strings of `v`'s array field `key` (none when absent; non-strings skipped): a
/// webhook's review versions, a review's audiences.
pub(crate) fn string_list(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The webhooks of configurations `configs` (name, object), in upstream's order.
fn read_hooks(configs: &mut [(String, Value)], mutating: bool) -> Vec<Arc<Hook>> {
    configs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut hooks = Vec::new();
    for (name, config) in configs.iter() {
        for w in config
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            hooks.push(Arc::new(read_hook(name, w, mutating)));
        }
    }
    hooks
}

/// The key and revision of every configuration the webhooks (or policies) were read from.
pub(crate) type Signature = Vec<(String, Revision)>;

/// The stored objects of `admissionregistration.k8s.io/v1` resources `plurals` (none for a
/// resource not served), from the watch cache, with the signature that tells whether any of
/// them changed since the last read.
pub(crate) fn read_admission_kinds<const N: usize>(
    registry: &CustomResources,
    cache: &Cache,
    plurals: [&str; N],
) -> (Signature, [Vec<Arc<crate::cache::Object>>; N]) {
    let mut signature = Vec::new();
    let objects = plurals.map(|plural| {
        let Some(rt) = registry.by_plural("admissionregistration.k8s.io", "v1", plural) else {
            return Vec::new();
        };
        let snapshot = cache.snapshot(&rt, &rt.key_prefix(), |_| true);
        signature.extend(snapshot.items.iter().map(|o| (o.key.clone(), o.rv)));
        snapshot.items
    });
    (signature, objects)
}

/// The current webhooks, rebuilt when a configuration changes.
#[derive(Default)]
pub(crate) struct HookCache {
    current: Mutex<Option<(Signature, Arc<Hooks>)>>,
}

impl HookCache {
    /// The webhooks as the cache holds them now.
    pub fn load(&self, registry: &CustomResources, cache: &Cache) -> Arc<Hooks> {
        let kinds = [
            ("mutatingwebhookconfigurations", true),
            ("validatingwebhookconfigurations", false),
        ];
        let (signature, objects) = read_admission_kinds(registry, cache, kinds.map(|(p, _)| p));
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((sig, hooks)) = current.as_ref()
            && *sig == signature
        {
            return hooks.clone();
        }
        let mut sets = kinds
            .iter()
            .zip(objects.iter())
            .map(|((_, mutating), items)| {
                let mut configs: Vec<(String, Value)> = items
                    .iter()
                    .filter_map(|o| {
                        let v = o.to_value()?;
                        let name = v.pointer("/metadata/name")?.as_str()?.to_string();
                        Some((name, v))
                    })
                    .collect();
                read_hooks(&mut configs, *mutating)
            });
        let hooks = Arc::new(Hooks {
            mutating: sets.next().unwrap_or_default(),
            validating: sets.next().unwrap_or_default(),
        });
        *current = Some((signature, hooks.clone()));
        hooks
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_webhook_reads_with_upstreams_defaults_and_bounds() {
        let w = json!({
            "name": "a.example.com",
            "clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/validate"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 99,
            "failurePolicy": "Ignore",
        });
        let hook = read_hook("cfg", &w, false);
        assert_eq!(hook.timeout, Duration::from_secs(30));
        assert!(hook.ignore_failures && hook.dry_run_safe());
        assert_eq!(
            hook.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "svc".into(),
                port: 443,
                path: "/validate".into()
            }
        );
        assert!(hook.client.is_ok(), "no caBundle: the system's roots");
        let bad = json!({"name": "b.example.com", "clientConfig": {"url": "https://x", "caBundle": "bm90IGEgY2VydA=="}});
        let hook = read_hook("cfg", &bad, true);
        assert!(
            hook.client.is_err(),
            "a bundle without a certificate is refused"
        );
        assert_eq!(hook.timeout, DEFAULT_TIMEOUT);
        assert!(!hook.ignore_failures, "Fail is the default");
    }

    #[test]
    fn configurations_are_ordered_by_name() {
        let mut configs = vec![
            ("b".to_string(), json!({"webhooks": [{"name": "b1.x.io"}]})),
            (
                "a".to_string(),
                json!({"webhooks": [{"name": "a1.x.io"}, {"name": "a2.x.io"}]}),
            ),
        ];
        let hooks = read_hooks(&mut configs, true);
        let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a1.x.io", "a2.x.io", "b1.x.io"]);
    }
}
