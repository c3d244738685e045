//! tandem's service proxy: Services and their EndpointSlices programmed into the node's kernel
//! with nftables, as upstream kube-proxy's nftables mode does.
//!
//! [`model`] turns Services and EndpointSlices into service ports with their endpoints,
//! [`rules`] turns those into nftables text (a whole table, or the difference one change
//! makes), [`nft`] runs Debian's `nft`, and [`proxy`] keeps the kernel in step with the API.

pub mod model;
pub mod netpol;
pub mod nft;
pub mod proxy;
pub mod rules;
mod watch;

pub use proxy::{Applied, ProxyConfig, ProxyError, ServiceProxy, SyncStatus};
pub use rules::Cidr;
