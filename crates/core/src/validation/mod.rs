//! Validation of objects on create and update, as upstream `pkg/apis/*/validation` does.
