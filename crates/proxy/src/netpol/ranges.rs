//! Sets of IPv4 addresses as sorted, disjoint, non-adjacent ranges: what a NetworkPolicy rule's
//! peers come to once pod selectors are resolved to addresses and `ipBlock.except` is taken out
//! of `ipBlock.cidr` (upstream `networking/v1` `IPBlock` semantics). nftables interval sets take
//! them as they are.

use std::net::Ipv4Addr;

use crate::rules::Cidr;

/// A set of IPv4 addresses. Always normalised: ranges sorted by start, disjoint, and never
/// touching (adjacent ranges are merged), so two equal sets compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct IpRanges(Vec<(u32, u32)>);

impl IpRanges {
    /// No address.
    pub fn none() -> IpRanges {
        IpRanges(Vec::new())
    }

    /// Every IPv4 address (`0.0.0.0/0`).
    pub fn all() -> IpRanges {
        IpRanges(vec![(0, u32::MAX)])
    }

    /// One address.
    pub fn single(ip: Ipv4Addr) -> IpRanges {
        let ip = u32::from(ip);
        IpRanges(vec![(ip, ip)])
    }

    /// The addresses of a prefix (host bits of its base are ignored, as Go's `net.ParseCIDR`).
    pub fn cidr(cidr: Cidr) -> IpRanges {
        let mask = if cidr.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(cidr.prefix))
        };
        let first = u32::from(cidr.base) & mask;
        IpRanges(vec![(first, first | !mask)])
    }

    /// The set of any inclusive ranges, in any order, overlapping or not.
    pub fn from_ranges(mut ranges: Vec<(u32, u32)>) -> IpRanges {
        ranges.retain(|(a, b)| a <= b);
        ranges.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (a, b) in ranges {
            match out.last_mut() {
                Some((_, last)) if a <= last.saturating_add(1) => *last = (*last).max(b),
                _ => out.push((a, b)),
            }
        }
        IpRanges(out)
    }

    /// The set of these addresses.
    pub fn from_ips(ips: impl IntoIterator<Item = Ipv4Addr>) -> IpRanges {
        IpRanges::from_ranges(
            ips.into_iter()
                .map(|ip| (u32::from(ip), u32::from(ip)))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether this is every address.
    pub fn is_all(&self) -> bool {
        self.0 == [(0, u32::MAX)]
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        // The last range starting at or before `ip`.
        let at = self.0.partition_point(|(a, _)| *a <= ip);
        at > 0 && self.0[at - 1].1 >= ip
    }

    /// Adds every address of `other`.
    pub fn add(&mut self, other: &IpRanges) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            self.0.clone_from(&other.0);
            return;
        }
        // Both are sorted: merge them in one pass, coalescing as we go.
        let (a, b) = (&self.0, &other.0);
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let next = if j >= b.len() || (i < a.len() && a[i].0 <= b[j].0) {
                i += 1;
                a[i - 1]
            } else {
                j += 1;
                b[j - 1]
            };
            match out.last_mut() {
                Some((_, last)) if next.0 <= last.saturating_add(1) => *last = (*last).max(next.1),
                _ => out.push(next),
            }
        }
        self.0 = out;
    }

    /// Takes out every address of `other`.
    pub fn subtract(&mut self, other: &IpRanges) {
        if other.is_empty() || self.is_empty() {
            return;
        }
        let mut out = Vec::with_capacity(self.0.len());
        let mut cut = other.0.iter().peekable();
        for &(mut a, b) in &self.0 {
            // Skip cuts that end before this range.
            while cut.peek().is_some_and(|(_, e)| *e < a) {
                cut.next();
            }
            let mut rest = Some((a, b));
            let mut look = cut.clone();
            while let (Some((ra, rb)), Some(&&(ca, ce))) = (rest, look.peek()) {
                if ca > rb {
                    break;
                }
                if ca > ra {
                    out.push((ra, ca - 1));
                }
                if ce >= rb {
                    rest = None;
                } else {
                    a = ce + 1;
                    rest = Some((a, rb));
                    look.next();
                }
            }
            if let Some(r) = rest {
                out.push(r);
            }
        }
        self.0 = out;
    }

    /// The ranges, first and last address of each, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = (Ipv4Addr, Ipv4Addr)> + '_ {
        self.0
            .iter()
            .map(|&(a, b)| (Ipv4Addr::from(a), Ipv4Addr::from(b)))
    }

    /// The ranges as inclusive `u32` pairs, ascending.
    pub fn raw(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.0.iter().copied()
    }

    /// How many ranges the set has (the elements it takes in an nftables interval set).
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    fn cidr(s: &str) -> IpRanges {
        IpRanges::cidr(Cidr::parse(s).unwrap_or(Cidr {
            base: Ipv4Addr::UNSPECIFIED,
            prefix: 32,
        }))
    }

    fn shown(r: &IpRanges) -> Vec<String> {
        r.ranges().map(|(a, b)| format!("{a}-{b}")).collect()
    }

    #[test]
    fn adjacent_and_overlapping_addresses_merge_into_one_range() {
        let r = IpRanges::from_ips([
            ip("10.0.0.3"),
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.0.9"),
        ]);
        assert_eq!(shown(&r), ["10.0.0.1-10.0.0.3", "10.0.0.9-10.0.0.9"]);
        let mut r = cidr("10.0.0.0/25");
        r.add(&cidr("10.0.0.128/25"));
        assert_eq!(shown(&r), ["10.0.0.0-10.0.0.255"]);
        assert_eq!(r, cidr("10.0.0.0/24"));
    }

    #[test]
    fn adding_interleaved_sets_gives_their_union() {
        let mut a = IpRanges::from_ranges(vec![(1, 3), (10, 12), (20, 30)]);
        a.add(&IpRanges::from_ranges(vec![
            (0, 0),
            (4, 5),
            (11, 25),
            (40, 40),
        ]));
        assert_eq!(a, IpRanges::from_ranges(vec![(0, 5), (10, 30), (40, 40)]));
        let mut b = IpRanges::single(ip("10.0.0.1"));
        b.add(&IpRanges::all());
        assert!(b.is_all());
    }

    #[test]
    fn cidr_ignores_host_bits_and_zero_prefix_is_everything() {
        assert_eq!(shown(&cidr("10.1.2.3/16")), ["10.1.0.0-10.1.255.255"]);
        assert!(cidr("0.0.0.0/0").is_all());
        assert_eq!(shown(&cidr("192.168.1.7/32")), ["192.168.1.7-192.168.1.7"]);
    }

    #[test]
    fn except_blocks_are_cut_out_of_the_cidr() {
        let mut r = cidr("10.0.0.0/16");
        r.subtract(&IpRanges::from_ranges(vec![
            (u32::from(ip("10.0.1.0")), u32::from(ip("10.0.1.255"))),
            (u32::from(ip("10.0.5.7")), u32::from(ip("10.0.5.7"))),
        ]));
        assert_eq!(
            shown(&r),
            [
                "10.0.0.0-10.0.0.255",
                "10.0.2.0-10.0.5.6",
                "10.0.5.8-10.0.255.255"
            ]
        );
        assert!(r.contains(ip("10.0.0.200")));
        assert!(!r.contains(ip("10.0.1.1")));
        assert!(!r.contains(ip("10.0.5.7")));
        assert!(r.contains(ip("10.0.5.8")));
        assert!(!r.contains(ip("10.1.0.0")));
    }

    #[test]
    fn subtracting_everything_or_the_edges_leaves_the_rest() {
        let mut r = cidr("10.0.0.0/24");
        r.subtract(&cidr("10.0.0.0/16"));
        assert!(r.is_empty());
        let mut r = cidr("10.0.0.0/24");
        r.subtract(&IpRanges::from_ips([ip("10.0.0.0"), ip("10.0.0.255")]));
        assert_eq!(shown(&r), ["10.0.0.1-10.0.0.254"]);
        let mut r = IpRanges::all();
        r.subtract(&IpRanges::single(ip("0.0.0.0")));
        r.subtract(&IpRanges::single(ip("255.255.255.255")));
        assert_eq!(shown(&r), ["0.0.0.1-255.255.255.254"]);
    }

    #[test]
    fn one_cut_can_span_several_ranges() {
        let mut r = IpRanges::from_ips([ip("10.0.0.1"), ip("10.0.0.5"), ip("10.0.0.9")]);
        r.subtract(&IpRanges::from_ranges(vec![(
            u32::from(ip("10.0.0.0")),
            u32::from(ip("10.0.0.6")),
        )]));
        assert_eq!(shown(&r), ["10.0.0.9-10.0.0.9"]);
    }
}
