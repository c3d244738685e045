//! storage.k8s.io/v1 CSIStorageCapacity validation.
//!
//! Mirrors upstream `pkg/apis/storage/validation/validation.go`: `ValidateCSIStorageCapacity`
//! (the name is a DNS subdomain, checked with the metadata; a valid `nodeTopology` selector, a
//! class name that is a DNS subdomain, a capacity that is not negative) and
//! `ValidateCSIStorageCapacityUpdate` (the inputs of the CSI `GetCapacity` call, `nodeTopology`
//! and `storageClassName`, are immutable).

use serde_json::{Value, json};

use super::apps::validate_label_selector;
use super::json::str_at;
use super::meta::immutable;
use super::names;
use super::quantity::{self, Quantity};
use crate::field::{FieldError, Path};

/// Upstream `ValidateCSIStorageCapacity` (after metadata).
pub fn validate_csi_storage_capacity(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(sel) = obj.get("nodeTopology").filter(|v| !v.is_null()) {
        errs.extend(validate_label_selector(sel, &Path::new("nodeTopology")));
    }
    let class = str_at(obj, "storageClassName").unwrap_or_default();
    for msg in names::dns1123_subdomain(class) {
        errs.push(FieldError::invalid(
            Path::new("storageClassName"),
            &json!(class),
            msg,
        ));
    }
    if let Some(q) = obj.get("capacity").filter(|v| !v.is_null()) {
        let zero = Quantity::parse("0");
        if quantity::from_value(q).is_some_and(|v| Some(v) < zero) {
            errs.push(FieldError::invalid(
                Path::new("capacity"),
                &json!(quantity::text(q)),
                "must be greater than or equal to 0",
            ));
        }
    }
    errs
}

/// Upstream `ValidateCSIStorageCapacityUpdate`.
pub fn validate_csi_storage_capacity_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_csi_storage_capacity(new);
    for key in ["nodeTopology", "storageClassName"] {
        errs.extend(immutable(new.get(key), old.get(key), &Path::new(key)));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(class: &str, capacity: &str) -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
               "metadata": {"name": "c", "namespace": "default"},
               "storageClassName": class, "capacity": capacity,
               "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": "a"}}})
    }

    #[test]
    fn a_capacity_with_class_and_topology_is_valid() {
        assert!(validate_csi_storage_capacity(&capacity("standard", "1Gi")).is_empty());
    }

    #[test]
    fn a_bad_class_name_and_negative_capacity_are_refused_with_their_paths() {
        let errs = validate_csi_storage_capacity(&capacity("Not_A_Name", "-1Gi"));
        let paths: Vec<String> = errs.iter().map(|e| e.field.clone()).collect();
        assert!(paths.contains(&"storageClassName".to_string()), "{paths:?}");
        assert!(paths.contains(&"capacity".to_string()), "{paths:?}");
    }

    #[test]
    fn class_and_topology_are_immutable_but_capacity_may_change() {
        let old = capacity("standard", "1Gi");
        assert!(
            validate_csi_storage_capacity_update(&capacity("standard", "2Gi"), &old).is_empty()
        );
        let errs = validate_csi_storage_capacity_update(&capacity("fast", "1Gi"), &old);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].field, "storageClassName");
    }
}
