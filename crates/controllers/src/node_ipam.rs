//! Pod CIDR allocation — upstream's `pkg/controller/nodeipam` with the `RangeAllocator`
//! (`ipam/range_allocator.go`, `ipam/cidrset`).
//!
//! The cluster CIDR (default `10.244.0.0/16`) is cut into per-node blocks (`/24` by default). Every
//! Node without `spec.podCIDR` gets the next free block in `spec.podCIDR` and `spec.podCIDRs`;
//! blocks a node already has (the node agent may set one at registration) are marked used first,
//! so they are never handed out again. A block is released only when its Node is deleted. As
//! cidrset does, the search for a free block starts after the last block handed out, so a block
//! just released is not reused at once. Only IPv4 is supported.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::events::{self, EventType};
use crate::informer::{Change, Informer};

/// Upstream's `--cluster-cidr` default in tandem (flannel's default network).
pub const DEFAULT_CLUSTER_CIDR: &str = "10.244.0.0/16";
/// Upstream's default `--node-cidr-mask-size` for IPv4.
pub const DEFAULT_NODE_MASK: u8 = 24;

/// What can go wrong configuring the allocator.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
    #[error("node mask /{node} does not fit in cluster CIDR /{cluster}")]
    MaskTooSmall { cluster: u8, node: u8 },
}

/// Which ranges the allocator hands out.
#[derive(Debug, Clone)]
pub struct NodeIpamOptions {
    /// The cluster's pod network.
    pub cluster_cidr: String,
    /// The prefix length of each node's block.
    pub node_mask_size: u8,
}

impl Default for NodeIpamOptions {
    fn default() -> Self {
        NodeIpamOptions {
            cluster_cidr: DEFAULT_CLUSTER_CIDR.into(),
            node_mask_size: DEFAULT_NODE_MASK,
        }
    }
}

/// Parses `a.b.c.d/n` into the network address (host bits cleared) and prefix length.
pub fn parse_cidr(s: &str) -> Result<(u32, u8), IpamError> {
    let bad = || IpamError::InvalidCidr(s.to_string());
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    if len > 32 {
        return Err(bad());
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((u32::from(ip) & mask, len))
}

/// The blocks of a cluster CIDR and which are in use — upstream's `cidrset.CidrSet`.
#[derive(Debug)]
pub struct CidrSet {
    base: u32,
    cluster_len: u8,
    node_len: u8,
    used: BTreeSet<u32>,
    next_candidate: u32,
}

impl CidrSet {
    /// A set of `/node_len` blocks of `cluster`.
    pub fn new(cluster: &str, node_len: u8) -> Result<Self, IpamError> {
        let (base, cluster_len) = parse_cidr(cluster)?;
        if node_len < cluster_len || node_len > 32 || node_len - cluster_len > 24 {
            return Err(IpamError::MaskTooSmall {
                cluster: cluster_len,
                node: node_len,
            });
        }
        Ok(CidrSet {
            base,
            cluster_len,
            node_len,
            used: BTreeSet::new(),
            next_candidate: 0,
        })
    }

    fn max_blocks(&self) -> u32 {
        1u32 << (self.node_len - self.cluster_len)
    }

    fn block(&self, index: u32) -> String {
        let shift = 32 - u32::from(self.node_len);
        let addr = self.base | (index.checked_shl(shift).unwrap_or(0));
        format!("{}/{}", Ipv4Addr::from(addr), self.node_len)
    }

    /// The block index of `cidr` when it is one of this set's blocks.
    pub fn index_of(&self, cidr: &str) -> Option<u32> {
        let (addr, len) = parse_cidr(cidr).ok()?;
        if len != self.node_len {
            return None;
        }
        let cluster_mask = if self.cluster_len == 0 {
            0
        } else {
            u32::MAX << (32 - self.cluster_len)
        };
        if addr & cluster_mask != self.base {
            return None;
        }
        let shift = 32 - u32::from(self.node_len);
        Some((addr - self.base).checked_shr(shift).unwrap_or(0))
    }

    /// Marks `cidr` used; false when it was already used or is not one of this set's blocks.
    pub fn occupy(&mut self, cidr: &str) -> bool {
        self.index_of(cidr).is_some_and(|i| self.used.insert(i))
    }

    /// Frees `cidr`.
    pub fn release(&mut self, cidr: &str) {
        if let Some(i) = self.index_of(cidr) {
            self.used.remove(&i);
        }
    }

    /// The next free block after the last one handed out, or `None` when all are used.
    pub fn allocate_next(&mut self) -> Option<String> {
        let max = self.max_blocks();
        for step in 0..max {
            let i = (self.next_candidate + step) % max;
            if self.used.insert(i) {
                self.next_candidate = (i + 1) % max;
                return Some(self.block(i));
            }
        }
        None
    }
}

fn pod_cidr(node: &Node) -> Option<String> {
    let spec = node.spec.as_ref()?;
    spec.pod_cidr
        .clone()
        .or_else(|| spec.pod_cidrs.as_ref()?.first().cloned())
        .filter(|c| !c.is_empty())
}

struct Allocator {
    client: kube::Client,
    cidrs: CidrSet,
    /// Node name → the block it holds (from this set).
    held: HashMap<String, String>,
}

impl Allocator {
    /// Records a node's existing block (upstream `occupyCIDRs`).
    async fn observe(&mut self, node: &Node) {
        let name = node.name_any();
        let Some(cidr) = pod_cidr(node) else { return };
        if self.held.get(&name) == Some(&cidr) {
            return;
        }
        if self.cidrs.index_of(&cidr).is_none() {
            // Outside the cluster CIDR: not ours to track.
            return;
        }
        if self.cidrs.occupy(&cidr) || !self.held.values().any(|c| *c == cidr) {
            self.held.insert(name, cidr);
        } else {
            tracing::warn!(node = %name, cidr = %cidr, "pod CIDR already used by another node");
            events::record(
                &self.client,
                "cidrAllocator",
                node,
                EventType::Warning,
                "CIDRNotAvailable",
                &format!(
                    "Node {name} has pod CIDR {cidr}, which is already assigned to another node"
                ),
            )
            .await;
        }
    }

    /// Gives a node without a pod CIDR the next free block (upstream `AllocateOrOccupyCIDR`).
    async fn allocate(&mut self, node: &Node) {
        if pod_cidr(node).is_some() || node.metadata.deletion_timestamp.is_some() {
            return;
        }
        let name = node.name_any();
        if let Some(cidr) = self.held.get(&name).cloned() {
            // Allocated before but the update has not reached the cache yet, or it failed.
            self.write(node, &cidr).await;
            return;
        }
        let Some(cidr) = self.cidrs.allocate_next() else {
            events::record(
                &self.client,
                "cidrAllocator",
                node,
                EventType::Normal,
                "CIDRNotAvailable",
                &format!("Node {name} status is now: CIDRNotAvailable"),
            )
            .await;
            return;
        };
        self.held.insert(name, cidr.clone());
        self.write(node, &cidr).await;
    }

    async fn write(&mut self, node: &Node, cidr: &str) {
        let name = node.name_any();
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({ "spec": { "podCIDR": cidr, "podCIDRs": [cidr] } });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(node = %name, cidr, "pod CIDR allocated"),
            Err(e) => {
                tracing::debug!(node = %name, error = %e, "setting pod CIDR failed");
                // The node may be gone or have got a CIDR of its own meanwhile; the next event
                // for it settles which.
            }
        }
    }

    fn forget(&mut self, node: &Node) {
        if let Some(cidr) = self.held.remove(&node.name_any())
            && !self.held.values().any(|c| *c == cidr)
        {
            self.cidrs.release(&cidr);
        }
    }
}

/// Runs the range allocator until the runtime stops. Fails only on an invalid configuration.
pub async fn run(
    client: kube::Client,
    nodes: Informer<Node>,
    options: NodeIpamOptions,
) -> Result<(), IpamError> {
    let cidrs = CidrSet::new(&options.cluster_cidr, options.node_mask_size)?;
    let mut events = nodes.subscribe();
    nodes.wait_ready().await;
    let mut alloc = Allocator {
        client,
        cidrs,
        held: HashMap::new(),
    };
    let existing = nodes.list();
    for n in &existing {
        alloc.observe(n).await;
    }
    for n in &existing {
        alloc.allocate(n).await;
    }
    while let Some(Change { old, new }) = events.recv().await {
        match new {
            Some(n) => {
                alloc.observe(&n).await;
                alloc.allocate(&n).await;
            }
            None => {
                if let Some(o) = old {
                    alloc.forget(&o);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_handed_out_in_order_and_skip_used_ones() -> Result<(), IpamError> {
        let mut set = CidrSet::new("10.244.0.0/16", 24)?;
        assert!(set.occupy("10.244.1.0/24"));
        assert!(!set.occupy("10.244.1.0/24"));
        assert!(!set.occupy("10.99.0.0/24"), "outside the cluster CIDR");
        assert_eq!(set.allocate_next().as_deref(), Some("10.244.0.0/24"));
        assert_eq!(set.allocate_next().as_deref(), Some("10.244.2.0/24"));
        set.release("10.244.0.0/24");
        assert_eq!(
            set.allocate_next().as_deref(),
            Some("10.244.3.0/24"),
            "a released block is not reused at once"
        );
        Ok(())
    }

    #[test]
    fn an_exhausted_range_allocates_nothing() -> Result<(), IpamError> {
        let mut set = CidrSet::new("10.0.0.0/23", 24)?;
        assert!(set.allocate_next().is_some());
        assert!(set.allocate_next().is_some());
        assert_eq!(set.allocate_next(), None);
        Ok(())
    }
}
