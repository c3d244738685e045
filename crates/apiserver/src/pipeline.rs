//! The per-type write pipeline steps from `tandem-core` (strategy, defaults, validation), in one
//! place so the REST handlers read as the upstream sequence: prepare → default → validate.

use serde_json::Value;
use tandem_core::field::FieldError;
use tandem_core::registry::ResourceType;

pub fn prepare_for_create(_rt: &ResourceType, _obj: &mut Value, _uid: &str) {}
pub fn prepare_for_update(_rt: &ResourceType, _new: &mut Value, _old: &Value) {}
pub fn prepare_for_status_update(_rt: &ResourceType, _new: &mut Value, _old: &Value) {}
pub fn apply_defaults(_rt: &ResourceType, _obj: &mut Value) {}
pub fn validate_create(_rt: &ResourceType, _obj: &Value) -> Vec<FieldError> {
    Vec::new()
}
pub fn validate_update(_rt: &ResourceType, _new: &Value, _old: &Value) -> Vec<FieldError> {
    Vec::new()
}
pub fn validate_status_update(_rt: &ResourceType, _new: &Value, _old: &Value) -> Vec<FieldError> {
    Vec::new()
}
