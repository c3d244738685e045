//! tandem's built-in ingress controller: the `networking.k8s.io/v1` Ingresses of the `tandem`
//! IngressClass (controller `tandem.io/ingress`, the cluster's default class) served by an
//! HTTP(S) reverse proxy on the node, as ingress-nginx and k3s' Traefik serve theirs.
//!
//! [`class`] decides which Ingresses are ours, [`routing`] turns them with Services and
//! EndpointSlices into a host/path table of backends, [`tls`] picks a certificate per SNI name
//! from `kubernetes.io/tls` Secrets, [`server`] answers HTTP and HTTPS with that table, and
//! [`controller`] keeps both tables in step with the API and writes the Ingresses' status.

pub mod class;
pub mod controller;
pub mod routing;
pub mod server;
pub mod tls;

pub use class::{CLASS_NAME, CONTROLLER_NAME};
pub use controller::{IngressConfig, IngressController, StartError, ensure_class};
