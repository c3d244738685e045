//! The Kubernetes-compatible HTTP(S) API server of tandem: discovery, OpenAPI, CRUD, watch, patch,
//! tables and subresources over the revisioned store, with a watch cache in front.

mod admission;
mod admission_policy;
mod aggregator;
pub mod auth;
mod binding;
pub mod bootstrap;
pub mod cache;
pub mod conversion_webhook;
pub mod crds;
pub mod discovery;
pub mod error;
pub mod eviction;
pub mod flowcontrol;
pub mod meta;
pub mod metrics;
pub mod metrics_api;
pub mod node_proxy;
pub mod openapi_pb;
pub mod output;
mod pipeline;
pub mod pki;
pub mod pod_security;
pub mod protobuf;
mod quota;
pub mod request;
pub mod rest;
pub mod server;
pub mod service_alloc;
mod service_claims;
mod service_resolve;
pub mod state;
pub mod watch;
mod webhook;

pub use server::{ApiServer, Config, StartError};
pub use state::Options;
