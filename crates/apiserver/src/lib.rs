//! The Kubernetes-compatible HTTP(S) API server of tandem.
