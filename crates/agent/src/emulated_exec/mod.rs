//! `kubectl exec` into emulated pods: a small interpreter for the commands a user debugging the
//! network reaches for first, answered from inside the pod's network namespace.
//!
//! No process runs in an emulated pod. Each command below is answered by tandem, with real
//! sockets opened in the pod's network namespace through [`PodNetwork`] (TCP, UDP, ICMP echo),
//! and the pod's DNS settings ([`DnsSettings`]). Every run starts with one line on **stderr**,
//! so that stdout stays what the real command would print (`curl -s URL | jq` still works):
//!
//! ```text
//! [emulated by tandem: no process runs; curl is answered by tandem's emulation]
//! ```
//!
//! Later notes (a capped value, ICMP the Windows data plane does not answer, a body that could
//! not be saved) use the same `[emulated by tandem: …]` form, also on stderr.
//!
//! # Windows personality (pods on emulated Windows nodes)
//!
//! Command names are case-insensitive and `.exe` is optional. PowerShell cmdlets are also
//! accepted directly as the command (`kubectl exec POD -- Resolve-DnsName web`), which a real
//! Windows container would refuse.
//!
//! | command | supported |
//! |---|---|
//! | `curl.exe` (and `curl` outside Windows PowerShell) | `-s` `-S` `-v` `-i` `-I` `-L` `-f` `-k` `-o FILE` `-w FORMAT` `-m`/`--max-time S` `--connect-timeout S` `-H "K: V"` `-X METHOD` `-d`/`--data`/`--data-raw`/`--data-binary` `-A UA` `--url U` `-4` `--http1.1` `--compressed`; `-w` knows `%{http_code}` `%{time_total}` `%{size_download}` `%{remote_ip}` `%{remote_port}` `%{content_type}` `%{url_effective}` `%{exitcode}`; `http://` URLs |
//! | `Invoke-WebRequest`, `iwr` (and `wget`; `curl` inside Windows PowerShell 5.1, as there) | `[-Uri] U` `-Method` `-Body` `-Headers @{K="V"}` `-ContentType` `-UserAgent` `-TimeoutSec` `-MaximumRedirection` `-UseBasicParsing` `-OutFile` `-PassThru` `-SkipHttpErrorCheck` `-Verbose` |
//! | `Invoke-RestMethod`, `irm` | as `iwr`; a JSON body is shown as PowerShell shows objects (a table up to 4 properties, else a list) |
//! | `Resolve-DnsName` | `[-Name] N` `[-Type] A\|AAAA\|CNAME\|PTR\|SRV\|TXT\|NS\|SOA\|MX\|ANY` (default A) `-Server S`, `-DnsOnly` `-NoHostsFile` `-QuickTimeout` (no effect); an IP address queries its PTR |
//! | `nslookup` | `NAME [SERVER]`, `-type=T` (`-q=`, `-querytype=`) |
//! | `ping` | `-n N` `-w MS` `-l SIZE` `-t` (at most [`MAX_PING_COUNT`]) `-4` `-i TTL` `-a`, also spelt `/n`, `HOST` |
//! | `Test-NetConnection`, `tnc` | `[-ComputerName] H` `-Port N` `-CommonTCPPort HTTP\|RDP\|SMB\|WINRM` `-InformationLevel Quiet` |
//! | `ipconfig` | `/all`, `/flushdns` |
//! | `Get-NetIPAddress` | `-InterfaceAlias` `-InterfaceIndex` `-IPAddress` `-AddressFamily` |
//! | `hostname` | |
//! | `echo`/`Write-Output` (one line per argument; in `cmd`, the words on one line), `Write-Host` (`-NoNewline`) | |
//! | `Start-Sleep`, `sleep` | `[-Seconds] N` `-Milliseconds N` |
//! | `powershell`, `pwsh` | `-Command`/`-c` "…" or a first non-option word, `-Command -` (lines from stdin); `-NoProfile` `-NonInteractive` `-NoLogo` `-ExecutionPolicy X` ignored; without a command and with stdin, a line REPL (`PS C:\> `) |
//! | `cmd` | `/c …`, `/k …` (then the REPL); without a command and with stdin, a line REPL (`C:\>`) |
//! | `exit [N]` | in the shells |
//!
//! PowerShell lines split on `;` (and PowerShell 7's `&&`, `||`); quotes, backtick escapes,
//! `@{…}` hashtables and `& 'path\tool.exe'` work; `(cmdlet …).Property` and
//! `cmdlet … | Select-Object -ExpandProperty Property` print one property of the result
//! (`(iwr URL -UseBasicParsing).Content`, `(tnc web -Port 80).TcpTestSucceeded`);
//! `| Format-List`, `| Out-String` and the like change nothing; other pipelines, redirections
//! and subexpressions are refused with a message. `cmd` lines split on `&`, `&&`, `||`.

//! Name resolution follows the Windows DNS client as Kubernetes documents it for Windows pods:
//! one suffix only, the pod's namespace suffix (the first search domain, `NS.svc.cluster.local`),
//! and a name with a dot is fully qualified. So in namespace `default`, `web` and
//! `web.default.svc.cluster.local` resolve but `web.default` does not (NXDOMAIN).
//!
//! ICMP: the network may refuse echo requests the Windows data plane would not route back
//! (outside the cluster network, see [`PodNetwork::icmp_echo`]); `ping` then prints
//! `Request timed out.` after its timeout, as on a real node, and a note says why.
//!
//! # Linux personality (pods on emulated Linux nodes)
//!
//! Commands may be given by path (`/bin/sh`).
//!
//! | command | supported |
//! |---|---|
//! | `curl` | as `curl.exe` above |
//! | `wget` (busybox) | `-q` `-O FILE` (`-O-` for stdout) `-S` `-T S`/`--timeout=S` `--spider` `-U UA` `--header "K: V"` `--post-data D`; `-Y` `-t` `-c` ignored |
//! | `nslookup` | `NAME [SERVER]`, `-type=T` (`-query=`, `-q=`), `-port=N` |
//! | `ping` | `-c N` (without it, at most [`MAX_PING_COUNT`]) `-W S` (default 2) `-i S` (at least 0.2) `-w S` `-s SIZE` `-q` `-4` `-n` `HOST` |
//! | `hostname` | `-i`, `-s` |
//! | `ip` | `addr`/`a`, `route`/`r`, `link`/`l` (any prefix, as iproute2); `-br`; `-4` ignored |
//! | `ifconfig` | |
//! | `cat` | `/etc/resolv.conf`, `/etc/hosts` (as the kubelet writes them), `/etc/hostname` |
//! | `echo` (`-n`, `-e`), `true`, `false` | |
//! | `sleep` | `N`, `Ns`/`Nm`/`Nh`/`Nd`, `infinity` (all capped at [`MAX_SLEEP`]) |
//! | `sh`, `bash`, `ash` | `-c "…"`; without `-c` and with stdin, a line REPL (`/ # `) |
//! | `exit [N]` | in the shells |
//!
//! sh lines split on `;`, `&&`, `||` and newlines, with `'…'`, `"…"`, `\` escapes and `#`
//! comments; pipes, redirections, `$(…)` and subshells are refused with a message (exit 2).
//! Variables are not expanded.

//! Name resolution follows glibc's `res_search` with the pod's resolv.conf: a name with fewer
//! dots than `ndots` tries each search domain before the name itself; with at least `ndots`
//! dots the name is tried first; a trailing dot means no search.
//!
//! # Exit codes
//!
//! - A command tandem does not emulate: a message listing the supported commands on stderr,
//!   exit **127** on Linux (the shell's "command not found") and **1** on Windows (what
//!   PowerShell's `-Command` returns for an unknown command).
//! - Otherwise what the real tool returns: curl's codes (1 unsupported protocol, 2 bad usage,
//!   3 bad URL, 6 cannot resolve, 7 cannot connect, 22 HTTP error with `-f`, 28 timeout, 47 too
//!   many redirects, 52 empty reply, 56 receive failure), busybox wget 1 on failure, `ping` 0
//!   when any reply came (otherwise 1; Linux 2 for an unknown host or bad options), nslookup 1
//!   when the name was not found, PowerShell cmdlets 1 on an error record (`Test-NetConnection`
//!   always 0), `sleep` 130 when Ctrl-C stopped it, `exit N` N; a line of statements returns
//!   its last statement's code.
//!
//! # Limits
//!
//! Every network operation is bounded: HTTP transfers by [`MAX_NET_TIMEOUT`] (curl's `-m` and
//! iwr's `-TimeoutSec` are capped there), one DNS resolution by [`DNS_DEADLINE`], each echo by
//! [`MAX_NET_TIMEOUT`], `ping` to [`MAX_PING_COUNT`] echoes, `sleep` to [`MAX_SLEEP`], bodies to
//! [`MAX_BODY_BYTES`]. Only `http://` is spoken (no TLS). The pod has no filesystem: `-o FILE`,
//! `-O FILE` and `-OutFile` discard the body (with a note). Ctrl-C (byte 0x03 on stdin, as
//! `kubectl exec -it` sends it) stops `ping` and `sleep`. With [`ExecIo::tty`] the REPLs echo
//! and edit input as a terminal would (Backspace, Ctrl-C drops the line, Ctrl-D ends).

mod dns_tools;
mod http_client;
mod info;
mod ping;
mod powershell;
mod resolver;
mod shell;
mod term;
mod test_netconnection;
mod web;
mod web_cmdlets;
mod words;

#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;

/// Longest any single network wait may last: curl's `-m`, iwr's `-TimeoutSec`, connect
/// timeouts and ping's per-echo wait are capped at this.
pub const MAX_NET_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest one name resolution (all candidates, servers and attempts) may last.
pub const DNS_DEADLINE: Duration = Duration::from_secs(15);
/// Most echoes one `ping` sends (`-n`, `-c`, and `-t` or no count on Linux).
pub const MAX_PING_COUNT: u32 = 100;
/// Longest `sleep`/`Start-Sleep`.
pub const MAX_SLEEP: Duration = Duration::from_secs(600);
/// Largest HTTP body kept; the rest is dropped with a note.
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// The port nameservers are asked on.
const DNS_PORT: u16 = 53;

/// What an emulated command may do on the network, always from inside the pod's network
/// namespace.
#[async_trait::async_trait]
pub trait PodNetwork: Send + Sync {
    /// A TCP connection from the pod to `addr`.
    async fn tcp_connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream>;
    /// A UDP socket bound to 0.0.0.0:0 inside the pod.
    async fn udp_socket(&self) -> std::io::Result<UdpSocket>;
    /// One ICMP echo from the pod; Ok(Some(rtt, ttl)) on a reply, Ok(None) on timeout.
    ///
    /// An error of kind [`std::io::ErrorKind::PermissionDenied`] means the data plane does not
    /// answer ICMP to `dst` (Windows: destinations outside the cluster network); `ping` shows it
    /// as a timeout, waiting the timeout out first, and says why in a note. Other errors are
    /// shown as send failures.
    async fn icmp_echo(
        &self,
        dst: Ipv4Addr,
        seq: u16,
        timeout: Duration,
    ) -> std::io::Result<Option<(Duration, u8)>>;
}

/// Everything a command may know about the pod it runs in.
pub struct ExecContext {
    /// `Some("10.0.17763")` on the Windows personality, `None` on Linux.
    pub windows_build: Option<String>,
    pub namespace: String,
    pub pod: String,
    pub hostname: String,
    pub container: String,
    pub image: String,
    pub node: String,
    /// The pod's address; `None` before its network is set up.
    pub ip: Option<Ipv4Addr>,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
    /// `aa:bb:cc:dd:ee:ff`; a stable one is made up from the IP when `None`.
    pub mac: Option<String>,
    pub dns: DnsSettings,
    pub net: Arc<dyn PodNetwork>,
}

/// The pod's resolver configuration, as its resolv.conf says (Linux) or as the CNI gives it to
/// HNS (Windows: only the first search domain is used).
pub struct DnsSettings {
    /// Asked in order on port 53; the first answering one decides.
    pub nameservers: Vec<IpAddr>,
    pub searches: Vec<String>,
    pub ndots: u32,
}

/// Where output goes (stdout/stderr chunks) and where stdin comes from.
pub struct ExecIo {
    /// `None` when kubectl attached no stdin (no `-i`).
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    pub stdout: mpsc::Sender<Bytes>,
    pub stderr: mpsc::Sender<Bytes>,
    /// `kubectl exec -t`: the client's terminal is raw, so the REPLs echo what is typed, take
    /// `\r` as Enter, Backspace, Ctrl-C and Ctrl-D as a terminal would, and every `\n` written
    /// becomes `\r\n`. With a TTY, Kubernetes has no separate stderr stream: the caller may give
    /// a `stderr` that forwards to stdout.
    pub tty: bool,
}

/// Runs one command line (argv as kubectl passed it); returns the exit code.
///
/// Returns when the command is done; output is sent as it is produced, and a closed output
/// channel is ignored (the client went away). Dropping the future stops the command.
pub async fn run(ctx: &ExecContext, argv: Vec<String>, io: ExecIo) -> i32 {
    run_with_dns_port(ctx, argv, io, DNS_PORT).await
}

/// [`run`] with nameservers asked on `dns_port` (tests cannot bind port 53).
async fn run_with_dns_port(ctx: &ExecContext, argv: Vec<String>, io: ExecIo, dns_port: u16) -> i32 {
    let env = Env {
        ctx,
        os: match &ctx.windows_build {
            Some(_) => Os::Windows,
            None => Os::Linux,
        },
        dns_port,
    };
    shell::run_top(&env, argv, term::Term::new(io)).await
}

/// Which operating system the emulated pod pretends to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Os {
    Linux,
    Windows,
}

/// What every command sees: the pod, its OS, and where DNS is asked.
struct Env<'a> {
    ctx: &'a ExecContext,
    os: Os,
    dns_port: u16,
}

impl Env<'_> {
    /// `10.0.17763` or a generic build when the node did not say.
    fn windows_build(&self) -> &str {
        self.ctx.windows_build.as_deref().unwrap_or("10.0.17763")
    }
}

/// The line every run starts with, on stderr.
fn label(command: &str) -> String {
    format!("[emulated by tandem: no process runs; {command} is answered by tandem's emulation]\n")
}

/// A later note, in the same form as [`label`].
fn note(text: &str) -> String {
    format!("[emulated by tandem: {text}]\n")
}

/// `d` capped at [`MAX_NET_TIMEOUT`].
fn cap_timeout(d: Duration) -> Duration {
    d.min(MAX_NET_TIMEOUT)
}

/// Seconds as given on a command line (`5`, `0.5`), refusing negatives and non-numbers.
fn parse_seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.trim().parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(value.min(1.0e9)))
}
