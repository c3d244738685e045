//! Prometheus metrics as text, shared by every component that serves or reads a scrape (the API
//! server's `/metrics`, the node agent's `/metrics`, `/metrics/cadvisor` and
//! `/metrics/resource`, the API server's scraper of node agents): choosing the exposition format
//! from `Accept` and deriving the Prometheus text format from prometheus-client's OpenMetrics
//! ([`exposition`]), reading the text format back ([`text`]), and working out a process's start
//! from `/proc` texts ([`process`]). All are functions of their inputs: the callers read files
//! and sockets.

pub mod exposition;
pub mod process;
pub mod text;
