//! The admission step of the write pipeline: the Windows-aware rules of `tandem_core::admission`
//! (pod OS fields, HostProcess, RuntimeClass scheduling and overhead, gMSA credential specs,
//! default not-ready/unreachable tolerations, and warnings for what Windows nodes cannot honour),
//! with the RuntimeClass and GMSACredentialSpec objects they need looked up first; and, for new
//! pods, the ServiceAccount plugin (the default account and its token volume) and the Priority
//! plugin (PriorityClass resolution), which also keeps a second global default PriorityClass
//! out.

use serde_json::{Value, json};
use tandem_core::admission::{self, AdmissionError, AdmissionOptions, MapLookups, Operation};
use tandem_core::field::{FieldError, Path};
use tandem_core::registry::ResourceType;

use crate::error::ApiError;
use crate::meta;
use crate::state::State;

impl State {
    /// Fetches an object by type and name, from the cache or (when the cache has not caught up
    /// with a write that just happened) from the store.
    async fn lookup(&self, group: &str, plural: &str, name: &str) -> Option<Value> {
        let rt = self.registry.by_plural(group, "v1", plural)?;
        let key = rt.key(None, name);
        if let Some(o) = self.cache.get(&rt, &key) {
            return o.to_value();
        }
        let kv = self.store.get(&key).await.ok()??;
        serde_json::from_slice(&kv.value).ok()
    }

    /// Runs admission on `obj`; returns the warnings to send back. Field errors are returned as
    /// `AdmissionError::Invalid` so the caller can report them with validation's in one 422.
    pub(crate) async fn admit(
        &self,
        op: Operation,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<Vec<String>, AdmissionError> {
        self.admit_limit_ranges(op, rt, obj, old)?;
        if rt.group == "scheduling.k8s.io" && rt.kind == "PriorityClass" {
            let classes = self.priority_classes();
            admission::priority::validate_priority_class(op, obj, &classes)?;
            return Ok(Vec::new());
        }
        if op == Operation::Create && rt.group.is_empty() && rt.kind == "PersistentVolumeClaim" {
            let classes = self.storage_classes();
            admission::default_storage_class::admit(obj, &classes);
            return Ok(Vec::new());
        }
        if op == Operation::Create && rt.group == "networking.k8s.io" && rt.kind == "Ingress" {
            let classes = self.ingress_classes();
            admission::default_ingress_class::admit(obj, &classes);
            return Ok(Vec::new());
        }
        let Some(location) = admission::pod_spec_location(rt) else {
            return Ok(Vec::new());
        };
        let mut lookups = MapLookups::default();
        // The RuntimeClass of the pod or of the template (its scheduling decides the target OS
        // for warnings even where only pods get it merged).
        let spec_pointer: String = location.iter().map(|seg| format!("/{seg}")).collect();
        if let Some(name) = obj
            .pointer(&format!("{spec_pointer}/runtimeClassName"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            && let Some(rc) = self.lookup("node.k8s.io", "runtimeclasses", name).await
        {
            lookups.insert(rc);
        }
        if rt.group.is_empty() && rt.kind == "Pod" && op == Operation::Create {
            // The ServiceAccount plugin runs first upstream: the account's token volume is part
            // of the pod the other plugins see.
            let ns = meta::namespace(obj).unwrap_or_default().to_string();
            let account_name = obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("default")
                .to_string();
            let account =
                crate::auth::authn::cached_value(self, "serviceaccounts", Some(&ns), &account_name);
            let volume = meta::generate_name(admission::service_account::VOLUME_PREFIX);
            admission::service_account::admit(obj, account.as_ref(), &volume);
        }
        if rt.group.is_empty() && rt.kind == "Pod" {
            self.admit_priority(op, obj, old).await?;
            for name in gmsa_names(obj) {
                if let Some(spec) = self
                    .lookup("windows.k8s.io", "gmsacredentialspecs", &name)
                    .await
                {
                    lookups.insert(spec);
                }
            }
        }
        let options = AdmissionOptions {
            privileged_allowed: self.options.allow_privileged,
            warnings: true,
            default_tolerations: self.options.default_tolerations,
        };
        admission::admit(op, rt, obj, old, &lookups, &options)
    }
}

impl State {
    /// The pod OS rules upstream's `ValidatePodEphemeralContainersUpdate` applies through
    /// `ValidatePodSpec` (Linux-only fields in a Windows pod's ephemeral container, Windows
    /// options in a Linux pod's, HostProcess and `--allow-privileged`): tandem runs them in
    /// admission, which the `ephemeralcontainers` subresource otherwise skips.
    pub(crate) fn ephemeral_container_os_errors(&self, pod: &Value) -> Vec<FieldError> {
        let Some(spec) = pod.get("spec") else {
            return Vec::new();
        };
        let options = AdmissionOptions {
            privileged_allowed: self.options.allow_privileged,
            warnings: false,
            ..Default::default()
        };
        admission::pod_os::validate_all(spec, &Path::new("spec"), &options)
    }

    /// Every stored PriorityClass (from the cache; there are a handful).
    fn priority_classes(&self) -> Vec<Value> {
        self.cluster_objects("scheduling.k8s.io", "priorityclasses")
    }

    /// The Priority plugin for pods: resolve the class on create, keep the stored priority on
    /// update (see `admission::priority`).
    async fn admit_priority(
        &self,
        op: Operation,
        pod: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), AdmissionError> {
        match op {
            Operation::Create => {
                let name = admission::priority::class_name(pod).to_string();
                if name.is_empty() {
                    admission::priority::admit_pod_create(pod, None, &self.priority_classes())
                } else {
                    let class = self
                        .lookup("scheduling.k8s.io", "priorityclasses", &name)
                        .await;
                    admission::priority::admit_pod_create(pod, class.as_ref(), &[])
                }
            }
            Operation::Update => {
                if let Some(old) = old {
                    admission::priority::admit_pod_update(pod, old);
                }
                Ok(())
            }
        }
    }
}

impl State {
    /// Every StorageClass in the watch cache (none while the type is not served), for the
    /// DefaultStorageClass plugin.
    fn storage_classes(&self) -> Vec<Value> {
        self.cluster_objects("storage.k8s.io", "storageclasses")
    }

    /// Every IngressClass, from the watch cache.
    fn ingress_classes(&self) -> Vec<Value> {
        self.cluster_objects("networking.k8s.io", "ingressclasses")
    }

    /// Every object of a cluster-scoped v1 resource, from the watch cache.
    fn cluster_objects(&self, group: &str, plural: &str) -> Vec<Value> {
        let Some(rt) = self.registry.by_plural(group, "v1", plural) else {
            return Vec::new();
        };
        self.cache
            .snapshot(&rt, &rt.key_prefix(), |_| true)
            .items
            .iter()
            .filter_map(|o| o.to_value())
            .collect()
    }
}

/// Every `gmsaCredentialSpecName` a pod names, at pod and container level.
fn gmsa_names(pod: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let mut push = |v: Option<&Value>| {
        if let Some(n) = v.and_then(Value::as_str).filter(|n| !n.is_empty())
            && !names.iter().any(|x| x == n)
        {
            names.push(n.to_string());
        }
    };
    push(pod.pointer("/spec/securityContext/windowsOptions/gmsaCredentialSpecName"));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            push(c.pointer("/securityContext/windowsOptions/gmsaCredentialSpecName"));
        }
    }
    names
}

/// The Status for an admission refusal that is not a field error.
pub(crate) fn admission_error(rt: &ResourceType, obj: &Value, e: AdmissionError) -> ApiError {
    let name = meta::name(obj).unwrap_or_default().to_string();
    match e {
        AdmissionError::Invalid(errors) => ApiError::invalid(rt, &name, &errors),
        other => {
            let code = other.code();
            let mut err = ApiError::new(
                code,
                other.reason(),
                other.status_message(&rt.group_resource(), &name),
            );
            let mut d = json!({"name": name, "kind": rt.plural});
            if !rt.group.is_empty() {
                d["group"] = json!(rt.group);
            }
            err.details = Some(d);
            err
        }
    }
}
