//! Admission webhooks (`admissionregistration.k8s.io/v1` MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration), as upstream's `MutatingAdmissionWebhook` and
//! `ValidatingAdmissionWebhook` plugins: the write pipeline asks [`State::mutating_webhooks`]
//! after the built-in admission plugins and before validation, and
//! [`State::validating_webhooks`] after validation, just before the object is stored; deletes
//! and the CONNECT subresources ask both with no new object.
//!
//! Shaped as the service proxy is: the configurations are read from the watch cache into
//! compiled [`config::Hook`]s once per change (`config`), which ones apply is decided by pure
//! predicates (`tandem_core::admission::matching`, and `conditions` for `matchConditions`), the
//! review and its answer are pure (`tandem_core::admission::review`), where a call goes is
//! resolved from the cache (`resolve`), and one thin file does the HTTP (`client`). `dispatch`
//! puts them together in upstream's order.
//!
//! [`State::mutating_webhooks`]: crate::state::State::mutating_webhooks
//! [`State::validating_webhooks`]: crate::state::State::validating_webhooks

mod client;
mod conditions;
mod config;
mod dispatch;
mod resolve;

pub(crate) use client::{Client, trust_roots};
pub(crate) use config::{
    Endpoint, HookCache, Signature, client_of, read_admission_kinds, string_list,
};
pub(crate) use dispatch::{Attempt, review_request};
pub(crate) use resolve::target;
