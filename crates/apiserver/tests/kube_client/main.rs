#![allow(clippy::unwrap_used, reason = "tests fail loudly on unexpected shapes")]
//! Integration tests of the API server driven by kube-rs, the client tandem's controllers use.
//! One binary (so one link) with a module per area of the API.

#[path = "../common/mod.rs"]
mod common;

mod crud;
mod delete;
mod errors;
mod events;
mod list;
mod output;
mod patch;
mod watch;
