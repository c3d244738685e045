//! `ping`: ICMP echoes through [`PodNetwork::icmp_echo`](super::PodNetwork::icmp_echo), shown as
//! Windows' ping or Linux's iputils ping shows them. Refused echoes (the Windows data plane
//! does not answer ICMP outside the cluster network) are shown as timeouts, after the timeout,
//! with a note saying why.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio::time::Instant;

use super::resolver::{HostError, resolve_host};
use super::term::{Input, Output};
use super::{Env, MAX_PING_COUNT, Os, cap_timeout, note, parse_seconds};

/// Shortest interval between echoes on Linux (iputils' limit for non-root users).
const MIN_INTERVAL: Duration = Duration::from_millis(200);

/// ping's settings, either personality.
#[derive(Debug, PartialEq)]
struct PingOptions {
    host: String,
    count: u32,
    /// Per-echo wait.
    timeout: Duration,
    interval: Duration,
    /// Linux `-w`: stop after this long.
    deadline: Option<Duration>,
    size: u32,
    quiet: bool,
    /// The count was capped or implied; said in a note.
    capped: bool,
}

fn parse_windows(args: &[String]) -> Result<PingOptions, String> {
    let mut options = PingOptions {
        host: String::new(),
        count: 4,
        timeout: Duration::from_millis(4000),
        interval: Duration::from_secs(1),
        deadline: None,
        size: 32,
        quiet: false,
        capped: false,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(flag) = arg.strip_prefix(['-', '/']).filter(|f| !f.is_empty()) else {
            options.host = arg.clone();
            continue;
        };
        let flag = flag.to_ascii_lowercase();
        let mut number = |what: &str| -> Result<u64, String> {
            let text = rest
                .next()
                .ok_or_else(|| format!("Value must be supplied for option -{what}."))?;
            text.parse::<u64>().map_err(|_| {
                format!("Bad value for option -{what}, valid range is from 1 to 4294967295.")
            })
        };
        match flag.as_str() {
            "n" => {
                let n = number("n")?;
                options.count = u32::try_from(n).unwrap_or(u32::MAX).max(1);
            }
            "w" => options.timeout = Duration::from_millis(number("w")?),
            "l" => options.size = u32::try_from(number("l")?).unwrap_or(65500).min(65500),
            "i" => {
                number("i")?;
            }
            "t" => {
                options.count = MAX_PING_COUNT;
                options.capped = true;
            }
            "4" | "a" => {}
            _ => return Err(format!("Bad option {arg}.")),
        }
    }
    if options.host.is_empty() {
        return Err("IP address must be specified.".to_string());
    }
    Ok(options)
}

fn parse_linux(args: &[String]) -> Result<PingOptions, String> {
    let mut options = PingOptions {
        host: String::new(),
        count: MAX_PING_COUNT,
        timeout: Duration::from_secs(2),
        interval: Duration::from_secs(1),
        deadline: None,
        size: 56,
        quiet: false,
        capped: true,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(cluster) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            options.host = arg.clone();
            continue;
        };
        let chars: Vec<char> = cluster.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            if !matches!(c, 'c' | 'W' | 'i' | 'w' | 's' | 't') {
                match c {
                    'q' => options.quiet = true,
                    '4' | 'n' | 'v' | 'D' | 'O' => {}
                    _ => return Err(format!("invalid option -- '{c}'")),
                }
                continue;
            }
            let attached: String = chars[i + 1..].iter().collect();
            let value = if attached.is_empty() {
                rest.next()
                    .cloned()
                    .ok_or_else(|| format!("option requires an argument -- '{c}'"))?
            } else {
                attached
            };
            let invalid = || format!("invalid argument: '{value}'");
            match c {
                'c' => {
                    let n: u64 = value.parse().map_err(|_| invalid())?;
                    if n == 0 {
                        return Err(format!(
                            "invalid argument: '{value}': out of range: 1 <= value <= 9223372036854775807"
                        ));
                    }
                    options.count = u32::try_from(n).unwrap_or(u32::MAX);
                    options.capped = false;
                }
                'W' => options.timeout = parse_seconds(&value).ok_or_else(invalid)?,
                'i' => options.interval = parse_seconds(&value).ok_or_else(invalid)?,
                'w' => options.deadline = Some(parse_seconds(&value).ok_or_else(invalid)?),
                's' => options.size = value.parse::<u32>().map_err(|_| invalid())?.min(65507),
                _ => {}
            }
            break;
        }
    }
    if options.host.is_empty() {
        return Err("usage error: Destination address required".to_string());
    }
    Ok(options)
}

/// What happened to one echo.
enum Echo {
    Reply(Duration, u8),
    Lost,
    Refused,
    Failed(std::io::Error),
}

/// `ping`: 0 when any echo was answered; otherwise 1 (Linux: 2 for errors before sending).
pub(super) async fn ping(env: &Env<'_>, out: &Output, input: &mut Input, args: &[String]) -> i32 {
    let parsed = match env.os {
        Os::Windows => parse_windows(args),
        Os::Linux => parse_linux(args),
    };
    let mut options = match parsed {
        Ok(options) => options,
        Err(e) => {
            match env.os {
                Os::Windows => out.out(&format!("{e}\n")).await,
                Os::Linux => out.err(&format!("ping: {e}\n")).await,
            }
            return match env.os {
                Os::Windows => 1,
                Os::Linux => 2,
            };
        }
    };
    if options.count > MAX_PING_COUNT {
        options.count = MAX_PING_COUNT;
        options.capped = true;
    }
    options.timeout = cap_timeout(options.timeout);
    options.interval = options.interval.max(MIN_INTERVAL);
    let resolved = resolve_host(env, &options.host).await;
    let (shown_name, ip) = match resolved {
        Ok(found) => {
            let v4 = found.addrs.iter().find_map(|a| match a {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            });
            match v4 {
                Some(v4) => (found.canonical, v4),
                None => return unknown_host(env, out, &options.host).await,
            }
        }
        Err(HostError::NotFound(_) | HostError::Dns { .. }) => {
            return unknown_host(env, out, &options.host).await;
        }
    };
    if options.capped {
        out.err(&note(&format!(
            "ping sends at most {MAX_PING_COUNT} echoes here; Ctrl-C stops it"
        )))
        .await;
    }
    let is_ip = options.host.parse::<Ipv4Addr>().is_ok();
    match env.os {
        Os::Windows => {
            let target = if is_ip {
                ip.to_string()
            } else {
                format!("{shown_name} [{ip}]")
            };
            out.out(&format!(
                "\nPinging {target} with {} bytes of data:\n",
                options.size
            ))
            .await;
        }
        Os::Linux => {
            out.out(&format!(
                "PING {} ({ip}) {}({}) bytes of data.\n",
                if is_ip {
                    ip.to_string()
                } else {
                    shown_name.clone()
                },
                options.size,
                options.size + 28
            ))
            .await;
        }
    }
    let start = Instant::now();
    let mut rtts: Vec<Duration> = Vec::new();
    let mut sent = 0u32;
    let mut refused = false;
    let mut errors = 0u32;
    for seq in 1..=options.count {
        if let Some(deadline) = options.deadline
            && start.elapsed() >= deadline
        {
            break;
        }
        let began = Instant::now();
        let echo = tokio::select! {
            echo = echo_once(env, ip, seq, options.timeout) => echo,
            () = input.interrupted() => {
                if env.os == Os::Windows {
                    out.out("Control-C\n").await;
                }
                break;
            }
        };
        sent += 1;
        let last = seq == options.count;
        match echo {
            Echo::Reply(rtt, ttl) => {
                rtts.push(rtt);
                if !options.quiet {
                    out.out(&reply_line(env.os, ip, seq, ttl, rtt, options.size))
                        .await;
                }
            }
            Echo::Lost | Echo::Refused => {
                refused |= matches!(echo, Echo::Refused);
                if env.os == Os::Windows {
                    out.out("Request timed out.\n").await;
                }
            }
            Echo::Failed(e) => {
                errors += 1;
                match env.os {
                    Os::Windows => out.out("General failure.\n").await,
                    Os::Linux => {
                        out.err(&format!("ping: sendmsg: {}\n", super::web::io_text(&e)))
                            .await
                    }
                }
            }
        }
        if last {
            break;
        }
        let wait = options.interval.saturating_sub(began.elapsed());
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = input.interrupted() => {
                if env.os == Os::Windows {
                    out.out("Control-C\n").await;
                }
                break;
            }
        }
    }
    let received = u32::try_from(rtts.len()).unwrap_or(u32::MAX);
    let summary = match env.os {
        Os::Windows => windows_summary(ip, sent, &rtts),
        Os::Linux => linux_summary(
            &if is_ip { ip.to_string() } else { shown_name },
            sent,
            errors,
            &rtts,
            start.elapsed(),
        ),
    };
    out.out(&summary).await;
    if refused {
        let why = match env.os {
            Os::Windows => {
                "the Windows data plane routes ICMP only within the cluster network; use curl.exe or Test-NetConnection -Port to test TCP instead"
            }
            Os::Linux => "the pod network does not route ICMP there; use curl to test TCP instead",
        };
        out.err(&note(&format!("ICMP to {ip} is not answered: {why}")))
            .await;
    }
    if received > 0 { 0 } else { 1 }
}

async fn unknown_host(env: &Env<'_>, out: &Output, host: &str) -> i32 {
    match env.os {
        Os::Windows => {
            out.out(&format!(
                "Ping request could not find host {host}. Please check the name and try again.\n"
            ))
            .await;
            1
        }
        Os::Linux => {
            out.err(&format!("ping: {host}: Name or service not known\n"))
                .await;
            2
        }
    }
}

/// One echo; a refused one is waited out like a lost one.
async fn echo_once(env: &Env<'_>, ip: Ipv4Addr, seq: u32, timeout: Duration) -> Echo {
    let began = Instant::now();
    let seq16 = u16::try_from(seq).unwrap_or(u16::MAX);
    let result = tokio::time::timeout(timeout, env.ctx.net.icmp_echo(ip, seq16, timeout)).await;
    match result {
        Ok(Ok(Some((rtt, ttl)))) => Echo::Reply(rtt, ttl),
        Ok(Ok(None)) | Err(_) => Echo::Lost,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tokio::time::sleep(timeout.saturating_sub(began.elapsed())).await;
            Echo::Refused
        }
        Ok(Err(e)) => Echo::Failed(e),
    }
}

fn reply_line(os: Os, ip: Ipv4Addr, seq: u32, ttl: u8, rtt: Duration, size: u32) -> String {
    match os {
        Os::Windows => {
            let ms = rtt.as_millis();
            let time = if ms < 1 {
                "time<1ms".to_string()
            } else {
                format!("time={ms}ms")
            };
            format!("Reply from {ip}: bytes={size} {time} TTL={ttl}\n")
        }
        Os::Linux => format!(
            "{} bytes from {ip}: icmp_seq={seq} ttl={ttl} time={}\n",
            size + 8,
            linux_ms(rtt)
        ),
    }
}

/// iputils' precision: three decimals below 100 ms.
fn linux_ms(rtt: Duration) -> String {
    let ms = rtt.as_secs_f64() * 1000.0;
    if ms < 100.0 {
        format!("{ms:.3} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

fn windows_summary(ip: Ipv4Addr, sent: u32, rtts: &[Duration]) -> String {
    let received = u32::try_from(rtts.len()).unwrap_or(u32::MAX);
    let lost = sent.saturating_sub(received);
    let loss = (lost * 100).checked_div(sent).unwrap_or(0);
    let mut text = format!(
        "\nPing statistics for {ip}:\n    Packets: Sent = {sent}, Received = {received}, Lost = {lost} ({loss}% loss),\n"
    );
    if let (Some(min), Some(max)) = (rtts.iter().min(), rtts.iter().max()) {
        let total: u128 = rtts.iter().map(Duration::as_millis).sum();
        let average = total / rtts.len().max(1) as u128;
        text.push_str(&format!(
            "Approximate round trip times in milli-seconds:\n    Minimum = {}ms, Maximum = {}ms, Average = {average}ms\n",
            min.as_millis(),
            max.as_millis()
        ));
    }
    text
}

fn linux_summary(
    shown: &str,
    sent: u32,
    errors: u32,
    rtts: &[Duration],
    elapsed: Duration,
) -> String {
    let received = u32::try_from(rtts.len()).unwrap_or(u32::MAX);
    let loss = (sent.saturating_sub(received) * 100)
        .checked_div(sent)
        .unwrap_or(0);
    let errors = if errors > 0 {
        format!(", +{errors} errors")
    } else {
        String::new()
    };
    let mut text = format!(
        "\n--- {shown} ping statistics ---\n{sent} packets transmitted, {received} received{errors}, {loss}% packet loss, time {}ms\n",
        elapsed.as_millis()
    );
    if !rtts.is_empty() {
        let ms: Vec<f64> = rtts.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        let n = ms.len() as f64;
        let min = ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = ms.iter().copied().fold(0.0, f64::max);
        let avg = ms.iter().sum::<f64>() / n;
        let mdev = (ms.iter().map(|m| (m - avg) * (m - avg)).sum::<f64>() / n).sqrt();
        text.push_str(&format!(
            "rtt min/avg/max/mdev = {min:.3}/{avg:.3}/{max:.3}/{mdev:.3} ms\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn windows_options() {
        let o = parse_windows(&args(&["-n", "2", "/w", "500", "web"])).expect("parses");
        assert_eq!(
            (o.count, o.timeout, o.host.as_str()),
            (2, Duration::from_millis(500), "web")
        );
        assert!(parse_windows(&args(&["-n"])).is_err());
        assert!(parse_windows(&args(&["-n", "1"])).is_err());
    }

    #[test]
    fn linux_options() {
        let o = parse_linux(&args(&["-c1", "-W", "0.5", "-q", "web"])).expect("parses");
        assert_eq!(o.count, 1);
        assert_eq!(o.timeout, Duration::from_millis(500));
        assert!(o.quiet && !o.capped);
        assert!(parse_linux(&args(&["-c", "0", "web"])).is_err());
        assert!(parse_linux(&args(&["web"])).is_ok_and(|o| o.capped));
    }

    #[test]
    fn windows_statistics() {
        let text = windows_summary(Ipv4Addr::LOCALHOST, 2, &[Duration::from_micros(300)]);
        assert!(text.contains("Sent = 2, Received = 1, Lost = 1 (50% loss)"));
        assert!(text.contains("Minimum = 0ms, Maximum = 0ms, Average = 0ms"));
    }
}
