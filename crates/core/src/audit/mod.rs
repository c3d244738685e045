//! Auditing as upstream's `k8s.io/apiserver/pkg/audit`: which requests are recorded and at what
//! level ([`policy`], an `audit.k8s.io/v1` Policy). Pure: the API server supplies the request's
//! attributes.

pub mod policy;
