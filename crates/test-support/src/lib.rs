//! Test support for the tandem workspace, in the manner of linkerd2-proxy's `linkerd-app-test`:
//! an in-process API server over a SQLite store in a temporary directory with an admin client
//! ([`server`]), and polling helpers that wait a bounded time and fail naming what they awaited
//! ([`poll`]).
//!
//! This crate is a dev-dependency only: no library crate may depend on it normally. It uses
//! `anyhow` like the tests it serves.

pub mod poll;
pub mod server;

pub use poll::{POLL_INTERVAL, eventually, wait_for, within};
pub use server::{
    ServerOptions, TestServer, client_for, start_at, start_at_with, with_server_then_stop,
};
