//! `Test-NetConnection` (`tnc`): a TCP connect with `-Port`, an ICMP echo without one (or when
//! the connect failed), shown as PowerShell's result object.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::powershell::{self, Param, PsObject, View, switch, value};
use super::resolver::resolve_host;
use super::shell::Call;
use super::term::Output;
use super::{Env, note};

/// How long the TCP test waits.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the ping test waits.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The name tested when none is given, as on Windows.
const DEFAULT_TARGET: &str = "internetbeacon.msedge.net";
/// The adapter name the pod's address is shown on.
pub(super) const WINDOWS_ADAPTER: &str = "vEthernet (Ethernet)";

const PARAMS: [Param; 6] = [
    value("ComputerName", &["RemoteAddress", "cn"]),
    value("Port", &["RemotePort"]),
    value("CommonTCPPort", &[]),
    value("InformationLevel", &[]),
    switch("TraceRoute", &[]),
    value("Hops", &[]),
];

/// Always 0, as the cmdlet reports failures in its result.
pub(super) async fn run(env: &Env<'_>, out: &Output, call: &Call<'_>) -> i32 {
    const FULL: &str = "Test-NetConnection";
    let bound = match powershell::bind(call.args, &PARAMS) {
        Ok(bound) => bound,
        Err(e) => {
            out.err(&powershell::bind_error(call.text, FULL, FULL, &e))
                .await;
            return 1;
        }
    };
    let target = bound
        .get_or_positional("ComputerName", 0)
        .unwrap_or(DEFAULT_TARGET)
        .to_string();
    let port: Option<u16> = match (bound.get("Port"), bound.get("CommonTCPPort")) {
        (Some(p), _) => match p.parse() {
            Ok(p) => Some(p),
            Err(_) => {
                out.err(&powershell::error_record(
                    call.text,
                    &powershell::ErrorRecord {
                        command: FULL,
                        message: &format!("Cannot bind parameter 'Port'. Cannot convert value \"{p}\" to type \"System.Int32\"."),
                        category: "InvalidArgument",
                        target: ":",
                        reason: "ParameterBindingException",
                        error_id: "CannotConvertArgumentNoMessage,Test-NetConnection",
                    },
                ))
                .await;
                return 1;
            }
        },
        (None, Some(common)) => match common.to_ascii_uppercase().as_str() {
            "HTTP" => Some(80),
            "RDP" => Some(3389),
            "SMB" => Some(445),
            "WINRM" => Some(5985),
            _ => None,
        },
        (None, None) => bound.positional.get(1).and_then(|p| p.parse().ok()),
    };
    if bound.on("TraceRoute") {
        out.err(&note("Test-NetConnection -TraceRoute is not emulated"))
            .await;
    }
    let quiet = bound
        .get("InformationLevel")
        .is_some_and(|l| l.eq_ignore_ascii_case("quiet"));
    let source = env.ctx.ip.map(|ip| ip.to_string()).unwrap_or_default();
    let mut object = PsObject::default().with("ComputerName", target.clone());
    let ip = match resolve_host(env, &target).await {
        Ok(found) => found.addrs.first().copied(),
        Err(_) => None,
    };
    let Some(ip) = ip else {
        out.err(&format!("WARNING: Name resolution of {target} failed\n"))
            .await;
        if quiet {
            out.out("False\n").await;
            return 0;
        }
        let object = object
            .with("RemoteAddress", "")
            .with("InterfaceAlias", "")
            .with("SourceAddress", "")
            .with("PingSucceeded", "False");
        powershell::emit(out, &[object], View::List, call.select).await;
        return 0;
    };
    object = object.with("RemoteAddress", ip.to_string());
    if let Some(port) = port {
        object = object.with("RemotePort", port.to_string());
    }
    object = object
        .with("InterfaceAlias", WINDOWS_ADAPTER)
        .with("SourceAddress", source);
    let tcp = match port {
        Some(port) => {
            let addr = SocketAddr::new(ip, port);
            let connected = tokio::time::timeout(
                CONNECT_TIMEOUT,
                env.ctx.net.tcp_connect(addr, CONNECT_TIMEOUT),
            )
            .await
            .is_ok_and(|r| r.is_ok());
            if !connected {
                out.err(&format!("WARNING: TCP connect to ({ip} : {port}) failed\n"))
                    .await;
            }
            Some(connected)
        }
        None => None,
    };
    if tcp != Some(true) {
        let echo = match ip {
            IpAddr::V4(v4) => {
                tokio::time::timeout(PING_TIMEOUT, env.ctx.net.icmp_echo(v4, 1, PING_TIMEOUT)).await
            }
            IpAddr::V6(_) => Ok(Ok(None)),
        };
        let rtt = match echo {
            Ok(Ok(Some((rtt, _)))) => Some(rtt),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                tokio::time::sleep(PING_TIMEOUT).await;
                out.err(&note(&format!(
                    "ICMP to {ip} is not answered: the Windows data plane routes ICMP only within the cluster network"
                )))
                .await;
                None
            }
            _ => None,
        };
        if rtt.is_none() {
            out.err(&format!(
                "WARNING: Ping to {ip} failed with status: TimedOut\n"
            ))
            .await;
        }
        if quiet && tcp.is_none() {
            out.out(if rtt.is_some() { "True\n" } else { "False\n" })
                .await;
            return 0;
        }
        object = object
            .with(
                "PingSucceeded",
                if rtt.is_some() { "True" } else { "False" },
            )
            .with(
                "PingReplyDetails (RTT)",
                rtt.map(|r| format!("{} ms", r.as_millis()))
                    .unwrap_or_else(|| "0 ms".to_string()),
            );
    }
    if let Some(ok) = tcp {
        if quiet {
            out.out(if ok { "True\n" } else { "False\n" }).await;
            return 0;
        }
        object = object.with("TcpTestSucceeded", if ok { "True" } else { "False" });
    }
    powershell::emit(out, &[object], View::List, call.select).await;
    0
}
