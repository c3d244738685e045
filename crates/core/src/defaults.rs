//! Defaulting of objects on create and update, as upstream `pkg/apis/*/v1/defaults.go` does.
