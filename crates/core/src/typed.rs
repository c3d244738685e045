//! Typed decoding: objects pass through their k8s-openapi type to catch wrong types and unknown fields.
