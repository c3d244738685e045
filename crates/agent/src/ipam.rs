//! Pod IP allocation from the node's pod CIDR (IPv4), as a host-local IPAM plugin does: the
//! network address and the first host (the bridge gateway) are never handed out.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use crate::config::ConfigError;

/// An IPv4 pod CIDR and the addresses in use.
#[derive(Clone, Debug)]
pub struct PodCidr {
    base: u32,
    prefix: u8,
    used: BTreeSet<u32>,
}

impl PodCidr {
    /// Parses `10.244.1.0/24`. Only IPv4 is supported; prefixes longer than /30 leave no room.
    pub fn parse(cidr: &str) -> Result<PodCidr, ConfigError> {
        let bad = || {
            ConfigError::Invalid(format!(
                "pod CIDR {cidr:?} is not an IPv4 CIDR with prefix ≤ 30"
            ))
        };
        let (addr, prefix) = cidr.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 30 {
            return Err(bad());
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Ok(PodCidr {
            base: u32::from(addr) & mask,
            prefix,
            used: BTreeSet::new(),
        })
    }

    fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// Marks an address as in use (an address re-adopted after an agent restart).
    pub fn reserve(&mut self, ip: &str) {
        if let Ok(a) = ip.parse::<Ipv4Addr>() {
            self.used.insert(u32::from(a));
        }
    }

    /// Hands out the lowest free address, or `None` when the range is exhausted.
    pub fn allocate(&mut self) -> Option<String> {
        let last = self.size() - 1; // broadcast
        (2..last)
            .map(|off| self.base.wrapping_add(off as u32))
            .find(|a| !self.used.contains(a))
            .map(|a| {
                self.used.insert(a);
                Ipv4Addr::from(a).to_string()
            })
    }

    /// Returns an address to the pool.
    pub fn release(&mut self, ip: &str) {
        if let Ok(a) = ip.parse::<Ipv4Addr>() {
            self.used.remove(&u32::from(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_skipping_network_and_gateway_and_reuses_released() {
        let mut c = PodCidr::parse("10.244.1.0/30").expect("valid");
        assert_eq!(c.allocate().as_deref(), Some("10.244.1.2"));
        assert_eq!(c.allocate(), None);
        c.release("10.244.1.2");
        c.reserve("10.244.1.2");
        assert_eq!(c.allocate(), None);
        let mut c = PodCidr::parse("10.244.1.7/24").expect("valid");
        assert_eq!(c.allocate().as_deref(), Some("10.244.1.2"));
        assert!(PodCidr::parse("fd00::/64").is_err());
        assert!(PodCidr::parse("10.0.0.0/31").is_err());
    }
}
