//! The Kubernetes IP and CIDR libraries (upstream `library/ip.go` and `library/cidr.go`):
//! `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, `family()`, `isUnspecified()`, `isLoopback()`,
//! `isLinkLocalMulticast()`, `isLinkLocalUnicast()`, `isGlobalUnicast()`, `cidr(s)`,
//! `isCIDR(s)`, `containsIP`, `containsCIDR`, `ip()`, `masked()`, `prefixLength()` and
//! `string()` of either.
//!
//! Parsing follows Go's `net/netip` as upstream uses it: no leading zeros in IPv4 octets, no
//! zones, and IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) are refused.

use std::net::IpAddr;

use cel::common::types::STRING_TYPE;
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, boolean, charge_str, error, int, opaque_type, str_arg, string, take};
use crate::apiextensions::schema::cel_cost;
use crate::field::go_quote;

/// An IP address (`net.IP`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ip(IpAddr);

opaque_type!(Ip, IP_TYPE, "net.IP");

/// A CIDR (`net.CIDR`): an address and a prefix length, not necessarily masked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

opaque_type!(Cidr, CIDR_TYPE, "net.CIDR");

fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if raw.contains('%') {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            go_quote(raw)
        ));
    }
    let addr: IpAddr = raw.parse().map_err(|e| {
        format!(
            "IP Address {} parse error during conversion from string: {e}",
            go_quote(raw)
        )
    })?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(addr)
}

fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let bad = || {
        format!(
            "network address parse error during conversion from string: netip.ParsePrefix({}): bad bits",
            go_quote(raw)
        )
    };
    let Some((addr, bits)) = raw.rsplit_once('/') else {
        return Err(format!(
            "network address parse error during conversion from string: netip.ParsePrefix({}): no '/'",
            go_quote(raw)
        ));
    };
    let addr = parse_ip(addr)?;
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return Err(bad());
    }
    let bits: u8 = bits.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if bits > max {
        return Err(bad());
    }
    Ok(Cidr { addr, bits })
}

fn masked(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

impl Cidr {
    fn contains(&self, addr: IpAddr) -> bool {
        addr.is_ipv4() == self.addr.is_ipv4()
            && masked(addr, self.bits) == masked(self.addr, self.bits)
    }
}

fn is_link_local_multicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 224 && o[1] == 0 && o[2] == 0
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            o[0] == 0xff && o[1] & 0x0f == 0x02
        }
    }
}

fn is_link_local_unicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 169 && o[1] == 254
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            o[0] == 0xfe && o[1] & 0xc0 == 0x80
        }
    }
}

/// Go's `netip.Addr.IsGlobalUnicast`: private ranges count as global unicast.
fn is_global_unicast(a: IpAddr) -> bool {
    if let IpAddr::V4(v4) = a
        && v4.is_broadcast()
    {
        return false;
    }
    !a.is_unspecified() && !a.is_loopback() && !a.is_multicast() && !is_link_local_unicast(a)
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let ip = || IP_TYPE.to_owned();
    let cidr = || CIDR_TYPE.to_owned();
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], to_ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        is_canonical,
    )?;
    env.add_overload("string", "ip_to_string", vec![ip()], ip_string)?;
    env.add_member_overload("family", "ip_family", ip(), vec![], family)?;
    for (name, id, f) in [
        (
            "isUnspecified",
            "ip_is_unspecified",
            ip_is_unspecified as cel::common::functions::Function,
        ),
        ("isLoopback", "ip_is_loopback", ip_is_loopback),
        (
            "isLinkLocalMulticast",
            "ip_is_link_local_multicast",
            ip_is_link_local_multicast,
        ),
        (
            "isLinkLocalUnicast",
            "ip_is_link_local_unicast",
            ip_is_link_local_unicast,
        ),
        (
            "isGlobalUnicast",
            "ip_is_global_unicast",
            ip_is_global_unicast,
        ),
    ] {
        env.add_member_overload(name, id, ip(), vec![], f)?;
    }
    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], to_cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![cidr()], cidr_string)?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_ip",
        cidr(),
        vec![ip()],
        contains_ip,
    )?;
    env.add_member_overload(
        "containsIP",
        "cidr_contains_ip_string",
        cidr(),
        vec![STRING_TYPE],
        contains_ip,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_cidr",
        cidr(),
        vec![cidr()],
        contains_cidr,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_string",
        cidr(),
        vec![STRING_TYPE],
        contains_cidr,
    )?;
    env.add_member_overload("ip", "cidr_ip", cidr(), vec![], cidr_ip)?;
    env.add_member_overload("masked", "cidr_masked", cidr(), vec![], cidr_masked)?;
    env.add_member_overload(
        "prefixLength",
        "cidr_prefix_length",
        cidr(),
        vec![],
        prefix_length,
    )?;
    Ok(())
}

fn to_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(CowVal::owned(Ip(parse_ip(s).map_err(|e| error("ip", e))?)))
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(boolean(parse_ip(s).is_ok()))
}

fn is_canonical<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    let addr = parse_ip(s).map_err(|e| error("ip.isCanonical", e))?;
    Ok(boolean(addr.to_string() == s))
}

fn ip_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [ip] = take(args)?;
    cel_cost::charge(1)?;
    Ok(string(arg::<Ip>(ip.as_ref())?.0.to_string()))
}

fn family<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [ip] = take(args)?;
    cel_cost::charge(1)?;
    Ok(int(if arg::<Ip>(ip.as_ref())?.0.is_ipv4() {
        4
    } else {
        6
    }))
}

fn ip_predicate<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    f: fn(IpAddr) -> bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [ip] = take(args)?;
    cel_cost::charge(1)?;
    Ok(boolean(f(arg::<Ip>(ip.as_ref())?.0)))
}

fn ip_is_unspecified<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_predicate(args, |a| a.is_unspecified())
}

fn ip_is_loopback<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_predicate(args, |a| a.is_loopback())
}

fn ip_is_link_local_multicast<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_predicate(args, is_link_local_multicast)
}

fn ip_is_link_local_unicast<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_predicate(args, is_link_local_unicast)
}

fn ip_is_global_unicast<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_predicate(args, is_global_unicast)
}

fn to_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(CowVal::owned(parse_cidr(s).map_err(|e| error("cidr", e))?))
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(boolean(parse_cidr(s).is_ok()))
}

fn cidr_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    cel_cost::charge(1)?;
    let c = arg::<Cidr>(c.as_ref())?;
    Ok(string(format!("{}/{}", c.addr, c.bits)))
}

fn contains_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c, other] = take(args)?;
    cel_cost::charge(1)?;
    let c = arg::<Cidr>(c.as_ref())?;
    let addr = match other.downcast_ref::<Ip>() {
        Some(ip) => ip.0,
        None => parse_ip(str_arg(other.as_ref())?).map_err(|e| error("containsIP", e))?,
    };
    Ok(boolean(c.contains(addr)))
}

fn contains_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c, other] = take(args)?;
    cel_cost::charge(1)?;
    let c = arg::<Cidr>(c.as_ref())?;
    let other = match other.downcast_ref::<Cidr>() {
        Some(o) => o.clone(),
        None => parse_cidr(str_arg(other.as_ref())?).map_err(|e| error("containsCIDR", e))?,
    };
    Ok(boolean(c.contains(other.addr) && c.bits <= other.bits))
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    cel_cost::charge(1)?;
    Ok(CowVal::owned(Ip(arg::<Cidr>(c.as_ref())?.addr)))
}

fn cidr_masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    cel_cost::charge(1)?;
    let c = arg::<Cidr>(c.as_ref())?;
    Ok(CowVal::owned(Cidr {
        addr: masked(c.addr, c.bits),
        bits: c.bits,
    }))
}

fn prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [c] = take(args)?;
    cel_cost::charge(1)?;
    Ok(int(i64::from(arg::<Cidr>(c.as_ref())?.bits)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/ip_test.go`.
    #[test]
    fn ip_parses_as_netip_does() {
        assert_true("ip('192.168.0.1').family() == 4");
        assert_true("ip('::1').family() == 6");
        assert_true("isIP('192.168.0.1')");
        assert_true("isIP('2001:db8::68')");
        assert_true("!isIP('192.168.0.1/24')");
        assert_true("!isIP('192.168.000.001')");
        assert_true("!isIP('fe80::1%eth0')");
        assert_true("!isIP('::ffff:192.168.0.1')");
        assert_true("!isIP('not-an-ip')");
        assert_error("ip('::ffff:192.168.0.1')", "IPv4-mapped IPv6 address");
        assert_error("ip('fe80::1%eth0')", "with zone value is not allowed");
        assert_true("ip('127.0.0.1') == ip('127.0.0.1')");
        assert_true("string(ip('2001:db8::68')) == '2001:db8::68'");
    }

    #[test]
    fn canonical_forms() {
        assert_true("ip.isCanonical('127.0.0.1')");
        assert_true("ip.isCanonical('2001:db8::abcd')");
        assert_true("!ip.isCanonical('2001:DB8::ABCD')");
        assert_true("!ip.isCanonical('2001:db8:0:0:0:0:0:abcd')");
    }

    #[test]
    fn address_classes_follow_go() {
        assert_true("ip('0.0.0.0').isUnspecified()");
        assert_true("ip('::').isUnspecified()");
        assert_true("ip('127.0.0.1').isLoopback()");
        assert_true("ip('::1').isLoopback()");
        assert_true("ip('224.0.0.1').isLinkLocalMulticast()");
        assert_true("!ip('224.0.1.1').isLinkLocalMulticast()");
        assert_true("ip('ff02::1').isLinkLocalMulticast()");
        assert_true("ip('169.254.169.254').isLinkLocalUnicast()");
        assert_true("ip('fe80::1').isLinkLocalUnicast()");
        assert_true("ip('192.168.0.1').isGlobalUnicast()");
        assert_true("ip('2001:db8::68').isGlobalUnicast()");
        assert_true("!ip('255.255.255.255').isGlobalUnicast()");
        assert_true("!ip('ff00::1').isGlobalUnicast()");
    }

    // Cases from upstream `library/cidr_test.go`.
    #[test]
    fn cidrs_contain_addresses_and_subnets() {
        assert_true("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))");
        assert_true("cidr('192.168.0.0/24').containsIP('192.168.0.1')");
        assert_true("!cidr('192.168.0.0/24').containsIP('192.168.1.1')");
        assert_true("!cidr('192.168.0.0/24').containsIP('::1')");
        assert_true("cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))");
        assert_true("cidr('192.168.0.0/24').containsCIDR('192.168.0.128/25')");
        assert_true("!cidr('192.168.0.0/24').containsCIDR('192.168.0.0/23')");
        assert_true("cidr('2001:db8::/32').containsIP('2001:db8::1')");
    }

    #[test]
    fn cidr_parts() {
        assert_true("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')");
        assert_true("cidr('192.168.0.0/24').prefixLength() == 24");
        assert_true("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')");
        assert_true("string(cidr('192.168.0.0/24')) == '192.168.0.0/24'");
        assert_true("string(cidr('2001:db8::/32')) == '2001:db8::/32'");
        assert_true("isCIDR('192.168.0.0/24')");
        assert_true("!isCIDR('192.168.0.0')");
        assert_true("!isCIDR('192.168.0.0/33')");
        assert_true("!isCIDR('192.168.0.0/024')");
        assert_error("cidr('192.168.0.0')", "network address parse error");
    }
}
