//! Validation of objects on create and update, as upstream `pkg/apis/*/validation` does.
//!
//! The API server calls [`validate_create`], [`validate_update`] and
//! [`validate_status_update`] after defaulting ([`crate::defaults`]) and the strategies
//! ([`crate::strategy`]); a non-empty result becomes a 422 `Invalid` Status. Objects are plain
//! JSON; every check tolerates odd shapes (missing or mistyped fields read as absent) and
//! never panics.
//!
//! Layout follows upstream: [`meta`] (ObjectMeta), [`pod`] (PodSpec and templates), [`apps`]
//! (workloads and selectors), [`batch`] (Job, CronJob, cron syntax), [`service`] (Service,
//! Endpoints, EndpointSlice), [`storage`] (PVC, PV), [`config`] (ConfigMap, Secret), [`rbac`]
//! (roles and bindings), [`networking`] (Ingress, IngressClass, NetworkPolicy), [`policy`]
//! (PodDisruptionBudget), [`scheduling`] (PriorityClass), [`storage_api`] (StorageClass, CSI
//! objects, VolumeAttachment), [`apiregistration`] (APIService), [`admissionregistration`]
//! (webhook configurations, ValidatingAdmissionPolicies and their bindings), [`autoscaling`]
//! (HorizontalPodAutoscaler) and [`cluster`] (everything
//! else), over [`names`] (string formats) and [`quantity`].

pub mod admissionregistration;
pub mod apiregistration;
pub mod apps;
pub mod autoscaling;
pub mod batch;
pub mod certificates;
pub mod cluster;
pub mod config;
pub mod ephemeral;
pub(crate) mod json;
pub mod meta;
pub mod names;
pub mod networking;
pub mod pod;
pub mod policy;
pub mod quantity;
pub mod rbac;
pub mod scheduling;
pub mod service;
pub mod storage;
pub mod storage_api;
pub mod storage_capacity;

use serde_json::Value;

use crate::field::{FieldError, Path};
use crate::registry::ResourceType;
use meta::NameRule;

/// The rule `metadata.name` follows for a kind (upstream's per-kind `ValidateNameFunc`).
pub fn name_rule(rt: &ResourceType) -> NameRule {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035,
        ("", "Event") => NameRule::PathSegment,
        // Upstream `ValidateRBACName`: `system:node` is a valid role name.
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        // Upstream `ValidateAPIService`: a path segment, then `<version>.<group>` (checked by
        // `apiregistration::validate_api_service`).
        ("apiregistration.k8s.io", "APIService") => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

/// Kind-specific validation of a new object (everything after ObjectMeta).
fn is_crd(rt: &ResourceType) -> bool {
    rt.group == crate::apiextensions::crd::GROUP && rt.kind == "CustomResourceDefinition"
}

fn validate_kind(rt: &ResourceType, obj: &Value) -> Vec<FieldError> {
    let null = Value::Null;
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => pod::validate_pod_spec(obj.get("spec").unwrap_or(&null), &Path::new("spec")),
        ("", "PodTemplate") => {
            pod::validate_pod_template(obj.get("template").unwrap_or(&null), &Path::new("template"))
        }
        ("", "ReplicationController") => apps::validate_replication_controller(obj),
        ("", "Service") => service::validate_service(obj),
        ("", "Endpoints") => service::validate_endpoints(obj),
        ("", "ConfigMap") => config::validate_config_map(obj),
        ("", "Secret") => config::validate_secret(obj),
        ("", "Namespace") => cluster::validate_namespace(obj),
        ("", "Node") => cluster::validate_node(obj),
        ("", "PersistentVolumeClaim") => {
            storage::validate_pvc_spec(obj.get("spec").unwrap_or(&null), &Path::new("spec"))
        }
        ("", "PersistentVolume") => storage::validate_pv(obj),
        ("", "LimitRange") => cluster::validate_limit_range(obj),
        ("", "ResourceQuota") => cluster::validate_resource_quota(obj),
        ("", "Event") => cluster::validate_core_event(obj),
        ("apps", "Deployment") => apps::validate_deployment(obj),
        ("apps", "ReplicaSet") => apps::validate_replica_set(obj),
        ("apps", "DaemonSet") => apps::validate_daemon_set(obj),
        ("apps", "StatefulSet") => apps::validate_stateful_set(obj),
        ("apps", "ControllerRevision") => apps::validate_controller_revision(obj),
        ("batch", "Job") => batch::validate_job(obj),
        ("batch", "CronJob") => batch::validate_cron_job(obj, None),
        ("node.k8s.io", "RuntimeClass") => cluster::validate_runtime_class(obj),
        ("coordination.k8s.io", "Lease") => cluster::validate_lease(obj),
        ("discovery.k8s.io", "EndpointSlice") => service::validate_endpoint_slice(obj),
        ("events.k8s.io", "Event") => cluster::validate_events_v1_event(obj),
        ("windows.k8s.io", "GMSACredentialSpec") => cluster::validate_gmsa_credential_spec(obj),
        ("certificates.k8s.io", "CertificateSigningRequest") => certificates::validate_csr(obj),
        ("rbac.authorization.k8s.io", "Role") => rbac::validate_role(obj),
        ("rbac.authorization.k8s.io", "ClusterRole") => rbac::validate_cluster_role(obj),
        ("rbac.authorization.k8s.io", "RoleBinding") => rbac::validate_role_binding(obj),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            rbac::validate_cluster_role_binding(obj)
        }
        ("networking.k8s.io", "Ingress") => networking::validate_ingress(obj),
        ("networking.k8s.io", "IngressClass") => networking::validate_ingress_class(obj),
        ("networking.k8s.io", "NetworkPolicy") => networking::validate_network_policy(obj),
        ("policy", "PodDisruptionBudget") => policy::validate_pdb(obj),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaling::validate_hpa(obj, None),
        ("scheduling.k8s.io", "PriorityClass") => scheduling::validate_priority_class(obj),
        ("storage.k8s.io", "StorageClass") => storage_api::validate_storage_class(obj),
        ("storage.k8s.io", "CSIDriver") => storage_api::validate_csi_driver(obj),
        ("storage.k8s.io", "CSINode") => storage_api::validate_csi_node(obj),
        ("storage.k8s.io", "VolumeAttachment") => storage_api::validate_volume_attachment(obj),
        ("storage.k8s.io", "CSIStorageCapacity") => {
            storage_capacity::validate_csi_storage_capacity(obj)
        }
        ("apiregistration.k8s.io", "APIService") => apiregistration::validate_api_service(obj),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            admissionregistration::validate_webhook_configuration(obj, false)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            admissionregistration::validate_webhook_configuration(obj, true)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            admissionregistration::validate_validating_admission_policy(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            admissionregistration::validate_validating_admission_policy_binding(obj)
        }
        _ => Vec::new(),
    }
}

/// Validates an object about to be created: ObjectMeta (name format per kind, namespace per
/// scope, labels, annotations, finalizers, owner references) and then the kind's own rules.
/// Mirrors each upstream strategy's `Validate`.
pub fn validate_create(rt: &ResourceType, obj: &Value) -> Vec<FieldError> {
    if is_crd(rt) {
        // Upstream's CRD validation checks its ObjectMeta itself (the name is plural.group).
        return crate::apiextensions::crd::validate_crd(obj);
    }
    let mut errs = meta::validate_object_meta(obj, rt.namespaced, name_rule(rt));
    errs.extend(validate_kind(rt, obj));
    if rt.group.is_empty() && rt.kind == "Pod" {
        errs.extend(ephemeral::validate_pod_create(obj));
    }
    errs
}

/// Validates an update of the main resource: ObjectMeta update rules, then the kind's update
/// rules (immutable fields, the pod update restrictions, …) and its create rules where upstream
/// re-validates the whole object. Mirrors each upstream strategy's `ValidateUpdate`.
pub fn validate_update(rt: &ResourceType, new: &Value, old: &Value) -> Vec<FieldError> {
    if is_crd(rt) {
        return crate::apiextensions::crd::validate_crd_update(new, old);
    }
    let mut errs = meta::validate_object_meta_update(new, old);
    let kind_errs = match (rt.group.as_str(), rt.kind.as_str()) {
        // Upstream `ValidatePodUpdate` does not re-run `ValidatePodSpec`: it allows a fixed set
        // of changes and forbids the rest.
        ("", "Pod") => pod::validate_pod_spec_update(new, old),
        ("", "Service") => service::validate_service_update(new, old),
        ("", "ConfigMap") => config::validate_config_map_update(new, old),
        ("", "Secret") => config::validate_secret_update(new, old),
        ("", "Node") => cluster::validate_node_update(new, old),
        ("", "PersistentVolumeClaim") => storage::validate_pvc_update(new, old),
        ("", "PersistentVolume") => storage::validate_pv_update(new, old),
        ("batch", "Job") => batch::validate_job_update(new, old),
        ("batch", "CronJob") => batch::validate_cron_job(new, Some(old)),
        ("autoscaling", "HorizontalPodAutoscaler") => autoscaling::validate_hpa(new, Some(old)),
        ("node.k8s.io", "RuntimeClass") => cluster::validate_runtime_class_update(new, old),
        ("discovery.k8s.io", "EndpointSlice") => service::validate_endpoint_slice_update(new, old),
        ("networking.k8s.io", "Ingress") => networking::validate_ingress_update(new, old),
        ("networking.k8s.io", "IngressClass") => {
            networking::validate_ingress_class_update(new, old)
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            scheduling::validate_priority_class_update(new, old)
        }
        ("storage.k8s.io", "StorageClass") => storage_api::validate_storage_class_update(new, old),
        ("storage.k8s.io", "CSIDriver") => storage_api::validate_csi_driver_update(new, old),
        ("storage.k8s.io", "CSINode") => storage_api::validate_csi_node_update(new, old),
        ("storage.k8s.io", "CSIStorageCapacity") => {
            storage_capacity::validate_csi_storage_capacity_update(new, old)
        }
        ("storage.k8s.io", "VolumeAttachment") => {
            storage_api::validate_volume_attachment_update(new, old)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            admissionregistration::validate_webhook_configuration_update(new, old, false)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            admissionregistration::validate_webhook_configuration_update(new, old, true)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            admissionregistration::validate_validating_admission_policy_update(new, old)
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            let mut e = validate_kind(rt, new);
            e.extend(rbac::validate_binding_update(new, old));
            e
        }
        ("apps", kind) => {
            let mut e = validate_kind(rt, new);
            e.extend(apps::validate_apps_update(kind, new, old));
            e
        }
        _ => validate_kind(rt, new),
    };
    errs.extend(kind_errs);
    errs
}

/// Validates a write to the `status` subresource: ObjectMeta update rules and the status rules
/// upstream checks (non-negative replica counters for workloads, the Namespace phase).
/// Mirrors each upstream status strategy's `ValidateUpdate`.
pub fn validate_status_update(rt: &ResourceType, new: &Value, old: &Value) -> Vec<FieldError> {
    if is_crd(rt) {
        return crate::apiextensions::crd::validate_crd_status_update(new, old);
    }
    let mut errs = meta::validate_object_meta_update(new, old);
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    let sp = Path::new("status");
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => errs.extend(cluster::validate_namespace_status(new)),
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            errs.extend(certificates::validate_conditions(new));
        }
        ("networking.k8s.io", "Ingress") => errs.extend(networking::validate_ingress_status(new)),
        ("policy", "PodDisruptionBudget") => errs.extend(policy::validate_pdb_status(new)),
        // Upstream's VolumeAttachment status strategy runs the full update validation.
        ("storage.k8s.io", "VolumeAttachment") => {
            errs.extend(storage_api::validate_volume_attachment_update(new, old));
        }
        ("apiregistration.k8s.io", "APIService") => {
            errs.extend(apiregistration::validate_api_service_status(new));
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            errs.extend(admissionregistration::validate_validating_admission_policy_status(new));
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            errs.extend(autoscaling::validate_hpa_status(new));
        }
        ("apps", _) | ("", "ReplicationController") | ("batch", "Job") => {
            for key in [
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
                "unavailableReplicas",
                "fullyLabeledReplicas",
                "currentReplicas",
                "observedGeneration",
                "collisionCount",
                "currentNumberScheduled",
                "numberMisscheduled",
                "desiredNumberScheduled",
                "numberReady",
                "updatedNumberScheduled",
                "numberAvailable",
                "numberUnavailable",
                "terminatingReplicas",
                "active",
                "succeeded",
                "failed",
                "ready",
                "terminating",
            ] {
                pod::nonnegative(status, key, &sp, &mut errs);
            }
        }
        _ => {}
    }
    errs
}

#[cfg(test)]
mod tests;
