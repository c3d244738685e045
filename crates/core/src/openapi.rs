//! OpenAPI v2 and v3 documents for discovery, `kubectl explain` and field validation.
