//! The `apiextensions.k8s.io` machinery: CustomResourceDefinitions and the custom resources they
//! define. Mirrors upstream `k8s.io/apiextensions-apiserver`.

pub mod conversion_review;
pub mod crd;
pub mod schema;
