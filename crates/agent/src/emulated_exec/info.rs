//! Commands answered from the pod's description alone: its name and addresses (`hostname`,
//! `ipconfig`, `Get-NetIPAddress`, `ip`, `ifconfig`), its resolver files (`cat`), and the
//! shell built-ins (`echo`, `Write-Output`, `Write-Host`, `sleep`, `Start-Sleep`).

use std::net::Ipv4Addr;
use std::time::Duration;

use super::powershell::{self, Param, PsObject, View, switch, value};
use super::shell::Call;
use super::term::{Input, Output};
use super::test_netconnection::WINDOWS_ADAPTER;
use super::{Env, MAX_SLEEP, Os, note, parse_seconds};

/// The pod's interface on Linux.
const LINUX_INTERFACE: &str = "eth0";
/// What `eth0@ifN` names as the host side of the pod's veth.
const PEER_INDEX: u32 = 3;
/// The pod's interface index on Windows.
const WINDOWS_INTERFACE_INDEX: u32 = 17;

fn netmask(prefix: u8) -> Ipv4Addr {
    let prefix = u32::from(prefix.min(32));
    let bits = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    Ipv4Addr::from(bits)
}

fn network(ip: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ip) & u32::from(netmask(prefix)))
}

fn broadcast(ip: Ipv4Addr, prefix: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(ip) | !u32::from(netmask(prefix)))
}

/// The pod's MAC: the one given, or `00:15:5d` (Hyper-V's prefix) and the IP's last three
/// bytes.
fn mac(env: &Env<'_>) -> [u8; 6] {
    if let Some(text) = &env.ctx.mac {
        let bytes: Vec<u8> = text
            .split([':', '-'])
            .filter_map(|b| u8::from_str_radix(b, 16).ok())
            .collect();
        if let Ok(mac) = <[u8; 6]>::try_from(bytes.as_slice()) {
            return mac;
        }
    }
    match env.ctx.ip {
        Some(ip) => {
            let o = ip.octets();
            [0x00, 0x15, 0x5d, o[1], o[2], o[3]]
        }
        None => [0; 6],
    }
}

fn mac_text(mac: [u8; 6], separator: &str, upper: bool) -> String {
    mac.iter()
        .map(|b| {
            if upper {
                format!("{b:02X}")
            } else {
                format!("{b:02x}")
            }
        })
        .collect::<Vec<_>>()
        .join(separator)
}

/// The one DNS suffix a Windows pod has: its first search domain.
fn windows_suffix<'a>(env: &Env<'a>) -> &'a str {
    env.ctx
        .dns
        .searches
        .first()
        .map(String::as_str)
        .unwrap_or("")
}

/// `hostname` (Linux `-i` prints the address).
pub(super) async fn hostname(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let ctx = env.ctx;
    let text = match (env.os, args.first().map(String::as_str)) {
        (Os::Linux, Some("-i" | "-I" | "--ip-address" | "--all-ip-addresses")) => {
            ctx.ip.map(|ip| ip.to_string()).unwrap_or_default()
        }
        (Os::Linux, Some("-s" | "--short")) => ctx
            .hostname
            .split('.')
            .next()
            .unwrap_or_default()
            .to_string(),
        _ => ctx.hostname.clone(),
    };
    out.out(&format!("{text}\n")).await;
    0
}

/// `ipconfig [/all]`, `ipconfig /flushdns`.
pub(super) async fn ipconfig(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let ctx = env.ctx;
    let option = args.first().map(|a| a.to_ascii_lowercase());
    let all = match option.as_deref() {
        None => false,
        Some("/all" | "-all") => true,
        Some("/flushdns" | "-flushdns") => {
            out.out("\nWindows IP Configuration\n\nSuccessfully flushed the DNS Resolver Cache.\n")
                .await;
            return 0;
        }
        Some(other) => {
            out.out(&format!(
                "\nError: unrecognized or incomplete command line.\n\nUSAGE:\n    ipconfig [/all] [/flushdns]\n{}",
                note(&format!("ipconfig {other} is not emulated"))
            ))
            .await;
            return 1;
        }
    };
    let suffix = windows_suffix(env);
    let mut text = String::from("\nWindows IP Configuration\n\n");
    if all {
        text.push_str(&format!(
            "   Host Name . . . . . . . . . . . . : {}\n   Primary Dns Suffix  . . . . . . . : \n   Node Type . . . . . . . . . . . . : Hybrid\n   IP Routing Enabled. . . . . . . . : No\n   WINS Proxy Enabled. . . . . . . . : No\n   DNS Suffix Search List. . . . . . : {suffix}\n",
            ctx.hostname
        ));
    }
    text.push_str(&format!("\nEthernet adapter {WINDOWS_ADAPTER}:\n\n"));
    text.push_str(&format!(
        "   Connection-specific DNS Suffix  . : {suffix}\n"
    ));
    if all {
        text.push_str(&format!(
            "   Description . . . . . . . . . . . : Hyper-V Virtual Ethernet Container Adapter\n   Physical Address. . . . . . . . . : {}\n   DHCP Enabled. . . . . . . . . . . : No\n   Autoconfiguration Enabled . . . . : Yes\n",
            mac_text(mac(env), "-", true)
        ));
    }
    match ctx.ip {
        Some(ip) => {
            let preferred = if all { "(Preferred)" } else { "" };
            text.push_str(&format!(
                "   IPv4 Address. . . . . . . . . . . : {ip}{preferred}\n   Subnet Mask . . . . . . . . . . . : {}\n",
                netmask(ctx.prefix_len)
            ));
        }
        None => text.push_str("   Media State . . . . . . . . . . . : Media disconnected\n"),
    }
    text.push_str(&format!(
        "   Default Gateway . . . . . . . . . : {}\n",
        ctx.gateway.map(|g| g.to_string()).unwrap_or_default()
    ));
    if all {
        let servers: Vec<String> = ctx
            .dns
            .nameservers
            .iter()
            .map(ToString::to_string)
            .collect();
        text.push_str(&format!(
            "   DNS Servers . . . . . . . . . . . : {}\n   NetBIOS over Tcpip. . . . . . . . : Disabled\n   Connection-specific DNS Suffix Search List :\n                                       {suffix}\n",
            servers.join("\n                                       ")
        ));
    }
    out.out(&text).await;
    0
}

const NET_IP_PARAMS: [Param; 5] = [
    value("AddressFamily", &[]),
    value("InterfaceAlias", &[]),
    value("InterfaceIndex", &["ifIndex"]),
    value("IPAddress", &[]),
    switch("IncludeAllCompartments", &[]),
];

/// `Get-NetIPAddress`: the pod's IPv4 address and loopback.
pub(super) async fn get_net_ip_address(env: &Env<'_>, out: &Output, call: &Call<'_>) -> i32 {
    const FULL: &str = "Get-NetIPAddress";
    let bound = match powershell::bind(call.args, &NET_IP_PARAMS) {
        Ok(bound) => bound,
        Err(e) => {
            out.err(&powershell::bind_error(call.text, FULL, FULL, &e))
                .await;
            return 1;
        }
    };
    let address = |ip: String, index: u32, alias: &str, prefix: u8| {
        PsObject::default()
            .with("IPAddress", ip)
            .with("InterfaceIndex", index.to_string())
            .with("InterfaceAlias", alias)
            .with("AddressFamily", "IPv4")
            .with("Type", "Unicast")
            .with("PrefixLength", prefix.to_string())
            .with("PrefixOrigin", "Manual")
            .with("SuffixOrigin", "Manual")
            .with("AddressState", "Preferred")
            .with("ValidLifetime", "Infinite ([TimeSpan]::MaxValue)")
            .with("PreferredLifetime", "Infinite ([TimeSpan]::MaxValue)")
            .with("SkipAsSource", "False")
            .with("PolicyStore", "ActiveStore")
    };
    let mut objects = Vec::new();
    if let Some(ip) = env.ctx.ip {
        objects.push(address(
            ip.to_string(),
            WINDOWS_INTERFACE_INDEX,
            WINDOWS_ADAPTER,
            env.ctx.prefix_len,
        ));
    }
    objects.push(address(
        "127.0.0.1".to_string(),
        1,
        "Loopback Pseudo-Interface 1",
        8,
    ));
    let keep = |o: &PsObject, param: &str, prop: &str| {
        bound.get(param).is_none_or(|wanted| {
            o.props
                .iter()
                .any(|(n, v)| n == prop && v.eq_ignore_ascii_case(wanted))
        })
    };
    let objects: Vec<PsObject> = objects
        .into_iter()
        .filter(|o| {
            keep(o, "InterfaceAlias", "InterfaceAlias")
                && keep(o, "InterfaceIndex", "InterfaceIndex")
                && keep(o, "IPAddress", "IPAddress")
        })
        .collect();
    if bound
        .get("AddressFamily")
        .is_some_and(|f| f.eq_ignore_ascii_case("ipv6"))
    {
        return 0;
    }
    powershell::emit(out, &objects, View::List, call.select).await;
    0
}

/// `ip [-4] [-br] addr|route|link [show]`.
pub(super) async fn ip(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let mut brief = false;
    let mut object = None;
    for arg in args {
        match arg.as_str() {
            "-4" | "-6" | "-c" | "-color" | "--color" | "-d" | "-details" | "-o" | "-oneline" => {}
            "-br" | "-brief" => brief = true,
            other if object.is_none() => object = Some(other.to_string()),
            _ => {}
        }
    }
    let object = object.unwrap_or_default();
    let is = |full: &str| !object.is_empty() && full.starts_with(object.as_str());
    let text = if is("address") {
        ip_addr(env, brief)
    } else if is("route") {
        ip_route(env)
    } else if is("link") {
        ip_link(env, brief)
    } else {
        let shown = if object.is_empty() {
            "help".to_string()
        } else {
            object.clone()
        };
        out.err(&format!(
            "Object \"{shown}\" is unknown, try \"ip help\".\n{}",
            note("ip addr, ip route and ip link are emulated")
        ))
        .await;
        return 1;
    };
    out.out(&text).await;
    0
}

fn ip_addr(env: &Env<'_>, brief: bool) -> String {
    let ctx = env.ctx;
    let eth = format!("{LINUX_INTERFACE}@if{PEER_INDEX}");
    if brief {
        let mut text = format!("{:<16} {:<14} 127.0.0.1/8 ::1/128 \n", "lo", "UNKNOWN");
        if let Some(ip) = ctx.ip {
            text.push_str(&format!(
                "{eth:<16} {:<14} {ip}/{} \n",
                "UP", ctx.prefix_len
            ));
        }
        return text;
    }
    let mut text = String::from(
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000\n    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n    inet 127.0.0.1/8 scope host lo\n       valid_lft forever preferred_lft forever\n",
    );
    if let Some(ip) = ctx.ip {
        text.push_str(&format!(
            "2: {eth}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP group default \n    link/ether {} brd ff:ff:ff:ff:ff:ff link-netnsid 0\n    inet {ip}/{} brd {} scope global {LINUX_INTERFACE}\n       valid_lft forever preferred_lft forever\n",
            mac_text(mac(env), ":", false),
            ctx.prefix_len,
            broadcast(ip, ctx.prefix_len)
        ));
    }
    text
}

fn ip_route(env: &Env<'_>) -> String {
    let ctx = env.ctx;
    let mut text = String::new();
    if let Some(gateway) = ctx.gateway {
        text.push_str(&format!("default via {gateway} dev {LINUX_INTERFACE} \n"));
    }
    if let Some(ip) = ctx.ip {
        text.push_str(&format!(
            "{}/{} dev {LINUX_INTERFACE} proto kernel scope link src {ip} \n",
            network(ip, ctx.prefix_len),
            ctx.prefix_len
        ));
    }
    text
}

fn ip_link(env: &Env<'_>, brief: bool) -> String {
    let mac = mac_text(mac(env), ":", false);
    let eth = format!("{LINUX_INTERFACE}@if{PEER_INDEX}");
    let present = env.ctx.ip.is_some();
    if brief {
        let mut text = format!(
            "{:<16} {:<14} 00:00:00:00:00:00 <LOOPBACK,UP,LOWER_UP> \n",
            "lo", "UNKNOWN"
        );
        if present {
            text.push_str(&format!(
                "{eth:<16} {:<14} {mac} <BROADCAST,MULTICAST,UP,LOWER_UP> \n",
                "UP"
            ));
        }
        return text;
    }
    let mut text = String::from(
        "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\n    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n",
    );
    if present {
        text.push_str(&format!(
            "2: {eth}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default \n    link/ether {mac} brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
        ));
    }
    text
}

/// `ifconfig` as net-tools prints it (without counters, which the emulation does not keep).
pub(super) async fn ifconfig(env: &Env<'_>, out: &Output, _args: &[String]) -> i32 {
    let ctx = env.ctx;
    let mut text = String::new();
    if let Some(ip) = ctx.ip {
        text.push_str(&format!(
            "{LINUX_INTERFACE}: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500\n        inet {ip}  netmask {}  broadcast {}\n        ether {}  txqueuelen 0  (Ethernet)\n\n",
            netmask(ctx.prefix_len),
            broadcast(ip, ctx.prefix_len),
            mac_text(mac(env), ":", false)
        ));
    }
    text.push_str(
        "lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536\n        inet 127.0.0.1  netmask 255.0.0.0\n        loop  txqueuelen 1000  (Local Loopback)\n\n",
    );
    out.out(&text).await;
    0
}

/// The pod's resolv.conf, as the kubelet writes it.
fn resolv_conf(env: &Env<'_>) -> String {
    let dns = &env.ctx.dns;
    let mut text = String::new();
    if !dns.searches.is_empty() {
        text.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.nameservers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    text.push_str(&format!("options ndots:{}\n", dns.ndots));
    text
}

/// The kubelet-managed hosts file (`pkg/kubelet/kubelet_pods.go`: `managedHostsFileContent`).
fn hosts_file(env: &Env<'_>) -> String {
    let mut text = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if let Some(ip) = env.ctx.ip {
        text.push_str(&format!("{ip}\t{}\n", env.ctx.hostname));
    }
    text
}

/// `cat` of the files the emulation knows: `/etc/resolv.conf`, `/etc/hosts`, `/etc/hostname`.
pub(super) async fn cat(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let files: Vec<&String> = args
        .iter()
        .filter(|a| !a.starts_with('-') || *a == "-")
        .collect();
    if files.is_empty() || files.iter().any(|f| *f == "-") {
        out.err(&format!(
            "cat: reading stdin is not emulated\n{}",
            note("cat answers /etc/resolv.conf, /etc/hosts and /etc/hostname")
        ))
        .await;
        return 1;
    }
    let mut code = 0;
    for file in files {
        match file.as_str() {
            "/etc/resolv.conf" => out.out(&resolv_conf(env)).await,
            "/etc/hosts" => out.out(&hosts_file(env)).await,
            "/etc/hostname" => out.out(&format!("{}\n", env.ctx.hostname)).await,
            other => {
                out.err(&format!(
                    "cat: {other}: not emulated (the pod has no filesystem; tandem answers /etc/resolv.conf, /etc/hosts and /etc/hostname)\n"
                ))
                .await;
                code = 1;
            }
        }
    }
    code
}

/// `echo` of sh (`-n`, `-e` for `\n` and `\t`) and of cmd (the words as one line; `ECHO is
/// on.` without any).
pub(super) async fn echo(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    if env.os == Os::Windows {
        let text = if args.is_empty() {
            "ECHO is on.".to_string()
        } else {
            args.join(" ")
        };
        out.out(&format!("{text}\n")).await;
        return 0;
    }
    let mut newline = true;
    let mut escapes = false;
    let mut words = args;
    while let Some(flag) = words.first().filter(|w| {
        w.len() > 1 && w.starts_with('-') && w[1..].chars().all(|c| matches!(c, 'n' | 'e' | 'E'))
    }) {
        newline &= !flag.contains('n');
        escapes = flag.contains('e');
        words = &words[1..];
    }
    let mut text = words.join(" ");
    if escapes {
        text = text.replace("\\n", "\n").replace("\\t", "\t");
    }
    if newline {
        text.push('\n');
    }
    out.out(&text).await;
    0
}

/// `Write-Output`/`echo` in PowerShell: each argument on its own line.
pub(super) async fn write_output(out: &Output, call: &Call<'_>) -> i32 {
    let args: Vec<&String> = call
        .args
        .iter()
        .filter(|a| {
            !a.eq_ignore_ascii_case("-NoEnumerate") && !a.eq_ignore_ascii_case("-InputObject")
        })
        .collect();
    let mut text = String::new();
    for arg in args {
        text.push_str(arg);
        text.push('\n');
    }
    out.out(&text).await;
    0
}

/// `Write-Host`: the words on one line (`-NoNewline`; colours ignored).
pub(super) async fn write_host(out: &Output, args: &[String]) -> i32 {
    let mut newline = true;
    let mut words = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let lower = arg.to_ascii_lowercase();
        match lower.as_str() {
            "-nonewline" => newline = false,
            "-foregroundcolor" | "-backgroundcolor" | "-separator" | "-object" => {
                if lower != "-object" {
                    rest.next();
                }
            }
            _ => words.push(arg.as_str()),
        }
    }
    let mut text = words.join(" ");
    if newline {
        text.push('\n');
    }
    out.out(&text).await;
    0
}

/// Sleeps up to [`MAX_SLEEP`]; Ctrl-C ends it early with 130.
async fn sleep_for(out: &Output, input: &mut Input, wanted: Duration) -> i32 {
    if wanted > MAX_SLEEP {
        out.err(&note(&format!(
            "sleep is capped at {} s",
            MAX_SLEEP.as_secs()
        )))
        .await;
    }
    tokio::select! {
        () = tokio::time::sleep(wanted.min(MAX_SLEEP)) => 0,
        () = input.interrupted() => 130,
    }
}

/// coreutils `sleep`: the sum of its operands (`5`, `0.5`, `2m`, `1h`, `infinity`).
pub(super) async fn sleep(out: &Output, input: &mut Input, args: &[String]) -> i32 {
    if args.is_empty() {
        out.err("sleep: missing operand\nTry 'sleep --help' for more information.\n")
            .await;
        return 1;
    }
    let mut total = Duration::ZERO;
    for arg in args {
        let parsed = if arg == "infinity" {
            Some(Duration::MAX)
        } else {
            let (number, unit) = match arg.char_indices().last() {
                Some((at, c @ ('s' | 'm' | 'h' | 'd'))) => (&arg[..at], c),
                _ => (arg.as_str(), 's'),
            };
            let factor = match unit {
                'm' => 60.0,
                'h' => 3600.0,
                'd' => 86400.0,
                _ => 1.0,
            };
            parse_seconds(number).map(|d| d.mul_f64(factor))
        };
        let Some(d) = parsed else {
            out.err(&format!(
                "sleep: invalid time interval '{arg}'\nTry 'sleep --help' for more information.\n"
            ))
            .await;
            return 1;
        };
        total = total.saturating_add(d);
    }
    sleep_for(out, input, total).await
}

const START_SLEEP_PARAMS: [Param; 2] = [
    value("Seconds", &["s"]),
    value("Milliseconds", &["m", "ms"]),
];

/// `Start-Sleep [-Seconds] N | -Milliseconds N`.
pub(super) async fn start_sleep(out: &Output, input: &mut Input, call: &Call<'_>) -> i32 {
    const FULL: &str = "Microsoft.PowerShell.Commands.StartSleepCommand";
    let bound = match powershell::bind(call.args, &START_SLEEP_PARAMS) {
        Ok(bound) => bound,
        Err(e) => {
            out.err(&powershell::bind_error(call.text, "Start-Sleep", FULL, &e))
                .await;
            return 1;
        }
    };
    let wanted = match (
        bound.get_or_positional("Seconds", 0),
        bound.get("Milliseconds"),
    ) {
        (_, Some(ms)) => parse_seconds(ms).map(|d| d / 1000),
        (Some(s), None) => parse_seconds(s),
        (None, None) => None,
    };
    let Some(wanted) = wanted else {
        out.err(&powershell::error_record(
            call.text,
            &powershell::ErrorRecord {
                command: "Start-Sleep",
                message: "Cannot process command because of one or more missing mandatory parameters: Seconds.",
                category: "InvalidArgument",
                target: ":",
                reason: "ParameterBindingException",
                error_id: &format!("MissingMandatoryParameter,{FULL}"),
            },
        ))
        .await;
        return 1;
    };
    sleep_for(out, input, wanted).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_networks_and_broadcasts() {
        let ip = Ipv4Addr::new(10, 244, 1, 5);
        assert_eq!(netmask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(netmask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(network(ip, 24), Ipv4Addr::new(10, 244, 1, 0));
        assert_eq!(broadcast(ip, 24), Ipv4Addr::new(10, 244, 1, 255));
    }
}
