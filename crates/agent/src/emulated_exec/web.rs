//! `curl` (Linux `curl` and Windows `curl.exe`, the same program) and busybox `wget`: options,
//! output and error messages as those tools print them, over [`http_client`].

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use tokio::time::Instant;

use super::http_client::{self, Fetch, FetchError, Request, Response, UrlError};
use super::term::Output;
use super::{Env, Os, cap_timeout, note, parse_seconds};

/// curl's `--max-redirs` default is 50; the emulation stops sooner.
const MAX_REDIRECTS: u32 = 20;
/// What the emulated curl calls itself.
const CURL_USER_AGENT: &str = "curl/8.5.0";

/// curl's options as parsed.
#[derive(Debug, Default)]
struct CurlOptions {
    verbose: bool,
    include: bool,
    head: bool,
    follow: bool,
    fail: bool,
    output: Option<String>,
    write_out: Option<String>,
    max_time: Option<Duration>,
    connect_timeout: Option<Duration>,
    headers: Vec<(String, String)>,
    method: Option<String>,
    data: Vec<String>,
    user_agent: Option<String>,
    urls: Vec<String>,
}

/// Why curl's command line is wrong (exit 2).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum UsageError {
    #[error("option {0}: is unknown")]
    Unknown(String),
    #[error("option {0}: requires parameter")]
    MissingValue(String),
    #[error("option {0}: expected a proper numerical parameter")]
    BadNumber(String),
    #[error("no URL specified!")]
    NoUrl,
}

/// How curl's options take values.
enum Kind {
    Flag(fn(&mut CurlOptions)),
    Value(fn(&mut CurlOptions, String) -> Result<(), ()>),
}

fn seconds(value: &str) -> Result<Duration, ()> {
    parse_seconds(value).ok_or(())
}

/// curl's options: short letter, long name, and what they do. Options with no effect here
/// (`-k`, `-4`, `--http1.1`, `--compressed`, …) are accepted and ignored.
fn curl_option(short: Option<char>, long: Option<&str>) -> Option<Kind> {
    let key = match (short, long) {
        (Some(c), _) => c.to_string(),
        (None, Some(l)) => l.to_string(),
        (None, None) => return None,
    };
    Some(match key.as_str() {
        "s" | "silent" | "S" | "show-error" | "k" | "insecure" | "4" | "ipv4" | "http1.1"
        | "http1.0" | "compressed" | "N" | "no-buffer" | "no-progress-meter" | "#"
        | "progress-bar" => Kind::Flag(|_| {}),
        "v" | "verbose" => Kind::Flag(|o| o.verbose = true),
        "i" | "include" => Kind::Flag(|o| o.include = true),
        "I" | "head" => Kind::Flag(|o| o.head = true),
        "L" | "location" => Kind::Flag(|o| o.follow = true),
        "f" | "fail" => Kind::Flag(|o| o.fail = true),
        "o" | "output" => Kind::Value(|o, v| {
            o.output = Some(v);
            Ok(())
        }),
        "w" | "write-out" => Kind::Value(|o, v| {
            o.write_out = Some(v);
            Ok(())
        }),
        "m" | "max-time" => Kind::Value(|o, v| {
            o.max_time = Some(seconds(&v)?);
            Ok(())
        }),
        "connect-timeout" => Kind::Value(|o, v| {
            o.connect_timeout = Some(seconds(&v)?);
            Ok(())
        }),
        "H" | "header" => Kind::Value(|o, v| {
            if let Some((k, val)) = v.split_once(':') {
                o.headers
                    .push((k.trim().to_string(), val.trim().to_string()));
            }
            Ok(())
        }),
        "X" | "request" => Kind::Value(|o, v| {
            o.method = Some(v);
            Ok(())
        }),
        "d" | "data" | "data-raw" | "data-binary" | "data-ascii" => Kind::Value(|o, v| {
            o.data.push(v);
            Ok(())
        }),
        "A" | "user-agent" => Kind::Value(|o, v| {
            o.user_agent = Some(v);
            Ok(())
        }),
        "url" => Kind::Value(|o, v| {
            o.urls.push(v);
            Ok(())
        }),
        "e" | "referer" | "retry" | "retry-delay" | "retry-max-time" | "noproxy" | "max-redirs"
        | "resolve" => Kind::Value(|_, _| Ok(())),
        _ => return None,
    })
}

fn parse_curl(args: &[String]) -> Result<CurlOptions, UsageError> {
    let mut options = CurlOptions::default();
    let mut rest = args.iter();
    let apply = |options: &mut CurlOptions,
                 kind: Kind,
                 shown: &str,
                 value: Option<String>|
     -> Result<(), UsageError> {
        match kind {
            Kind::Flag(set) => {
                set(options);
                Ok(())
            }
            Kind::Value(set) => {
                let value = value.ok_or_else(|| UsageError::MissingValue(shown.to_string()))?;
                set(options, value).map_err(|_| UsageError::BadNumber(shown.to_string()))
            }
        }
    };
    while let Some(arg) = rest.next() {
        if let Some(long) = arg.strip_prefix("--") {
            if long.is_empty() {
                options.urls.extend(rest.by_ref().cloned());
                break;
            }
            let kind =
                curl_option(None, Some(long)).ok_or_else(|| UsageError::Unknown(arg.clone()))?;
            let value = match kind {
                Kind::Value(_) => rest.next().cloned(),
                Kind::Flag(_) => None,
            };
            apply(&mut options, kind, arg, value)?;
        } else if let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) {
            let chars: Vec<char> = cluster.chars().collect();
            for (i, &c) in chars.iter().enumerate() {
                let shown = format!("-{c}");
                let kind =
                    curl_option(Some(c), None).ok_or_else(|| UsageError::Unknown(shown.clone()))?;
                if let Kind::Value(_) = kind {
                    let attached: String = chars[i + 1..].iter().collect();
                    let value = if attached.is_empty() {
                        rest.next().cloned()
                    } else {
                        Some(attached)
                    };
                    apply(&mut options, kind, &shown, value)?;
                    break;
                }
                apply(&mut options, kind, &shown, None)?;
            }
        } else {
            options.urls.push(arg.clone());
        }
    }
    if options.urls.is_empty() {
        return Err(UsageError::NoUrl);
    }
    Ok(options)
}

/// `curl`: fetches each URL; the body (and with `-i`/`-I` the head) on stdout, `-v` on stderr,
/// errors as `curl: (N) …` with curl's exit code N. Errors are shown even with `-s`.
pub(super) async fn curl(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let options = match parse_curl(args) {
        Ok(options) => options,
        Err(e) => {
            out.err(&format!(
                "curl: {e}\ncurl: try 'curl --help' or 'curl --manual' for more information\n"
            ))
            .await;
            return 2;
        }
    };
    let mut code = 0;
    for url in &options.urls {
        code = curl_one(env, out, &options, url).await;
    }
    code
}

async fn curl_one(env: &Env<'_>, out: &Output, options: &CurlOptions, raw_url: &str) -> i32 {
    let start = Instant::now();
    let url = match http_client::parse_url(raw_url) {
        Ok(url) => url,
        Err(e) => {
            let (code, text) = match &e {
                UrlError::Scheme(scheme) => (1, format!("Protocol \"{scheme}\" not supported")),
                UrlError::Malformed(_) => (
                    3,
                    "URL rejected: Malformed input to a URL function".to_string(),
                ),
            };
            out.err(&format!("curl: ({code}) {text}\n")).await;
            if let UrlError::Scheme(_) = e {
                out.err(&note("only http:// is emulated (no TLS)")).await;
            }
            write_out(out, options, None, start, code).await;
            return code;
        }
    };
    let mut data = options.data.join("&");
    if let Some(file) = data.strip_prefix('@') {
        out.err(&format!(
            "curl: (26) Failed to open/read local data from file/application\n{}",
            note(&format!("the pod has no filesystem to read {file} from"))
        ))
        .await;
        return 26;
    }
    let method = match (&options.method, options.head, data.is_empty()) {
        (Some(m), _, _) => Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET),
        (None, true, _) => Method::HEAD,
        (None, false, false) => Method::POST,
        (None, false, true) => Method::GET,
    };
    let mut headers = options.headers.clone();
    if !data.is_empty()
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        headers.push((
            "Content-Type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        ));
    }
    if method == Method::HEAD {
        data.clear();
    }
    let request = Request {
        method,
        url: url.clone(),
        headers,
        body: Bytes::from(data),
        user_agent: options
            .user_agent
            .clone()
            .unwrap_or_else(|| CURL_USER_AGENT.to_string()),
    };
    let max_time = cap_timeout(options.max_time.unwrap_or(super::MAX_NET_TIMEOUT));
    let how = Fetch {
        connect_timeout: cap_timeout(options.connect_timeout.unwrap_or(super::MAX_NET_TIMEOUT)),
        max_time,
        max_redirects: if options.follow { MAX_REDIRECTS } else { 0 },
        verbose: options.verbose.then_some(out),
    };
    let response = match http_client::fetch(env, request, &how).await {
        Ok(response) => response,
        Err(e) => {
            let (code, text) = curl_error(&e, &url.host, url.port);
            out.err(&format!("curl: ({code}) {text}\n")).await;
            write_out(out, options, None, start, code).await;
            return code;
        }
    };
    if options.verbose {
        let head = http_client::head_text(&response, false);
        let mut text = String::new();
        for line in head.lines() {
            text.push_str(&format!("< {line}\n"));
        }
        out.err(&text).await;
    }
    if options.fail && response.status.as_u16() >= 400 {
        out.err(&format!(
            "curl: (22) The requested URL returned error: {}\n",
            response.status.as_u16()
        ))
        .await;
        write_out(out, options, Some(&response), start, 22).await;
        return 22;
    }
    let mut shown = Vec::new();
    if options.include || options.head {
        shown.extend_from_slice(http_client::head_text(&response, true).as_bytes());
    }
    shown.extend_from_slice(&response.body);
    match options.output.as_deref() {
        None | Some("-") => out.out_bytes(&shown).await,
        Some("/dev/null") | Some("NUL") | Some("nul") => {}
        Some(file) => {
            out.err(&note(&format!(
                "the pod has no filesystem: the {} bytes for {file} were discarded",
                shown.len()
            )))
            .await;
        }
    }
    if response.truncated {
        out.err(&note(&format!(
            "the body was cut at {} bytes",
            super::MAX_BODY_BYTES
        )))
        .await;
    }
    if options.verbose {
        out.err(&format!(
            "* Connection #0 to host {} left intact\n",
            response.url.host
        ))
        .await;
    }
    write_out(out, options, Some(&response), start, 0).await;
    0
}

/// curl's exit code and message for a failed fetch.
fn curl_error(error: &FetchError, host: &str, port: u16) -> (i32, String) {
    match error {
        FetchError::Url(UrlError::Scheme(s)) => (1, format!("Protocol \"{s}\" not supported")),
        FetchError::Url(UrlError::Malformed(_)) => (
            3,
            "URL rejected: Malformed input to a URL function".to_string(),
        ),
        FetchError::Resolve { host, .. } => (6, format!("Could not resolve host: {host}")),
        FetchError::Connect { addr, .. } => (
            7,
            format!(
                "Failed to connect to {host} port {} after 0 ms: Couldn't connect to server",
                addr.port()
            ),
        ),
        FetchError::ConnectTimeout { addr } => (
            28,
            format!(
                "Failed to connect to {host} port {} after {} ms: Timeout was reached",
                addr.port(),
                super::MAX_NET_TIMEOUT.as_millis().min(u128::from(u64::MAX))
            ),
        ),
        FetchError::Timeout { elapsed, received } => (
            28,
            format!(
                "Operation timed out after {} milliseconds with {received} bytes received",
                elapsed.as_millis()
            ),
        ),
        FetchError::EmptyReply => (52, "Empty reply from server".to_string()),
        FetchError::BadReply => (8, "Weird server reply".to_string()),
        FetchError::Recv(e) => (56, format!("Recv failure: {}", io_text(e))),
        FetchError::TooManyRedirects(n) => (47, format!("Maximum ({n}) redirects followed")),
        FetchError::BadRequest(_) => (
            43,
            format!(
                "A libcurl function was given a bad argument (a header or method for {host}:{port})"
            ),
        ),
    }
}

/// An I/O error as libc words it (`Connection refused`), without Rust's `(os error N)`.
pub(super) fn io_text(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// `-w`: `%{http_code}`, `%{response_code}`, `%{time_total}`, `%{size_download}`,
/// `%{remote_ip}`, `%{remote_port}`, `%{content_type}`, `%{url_effective}`, `%{exitcode}`,
/// `\n`, `\t`, `\r`, `%%`; written even when the transfer failed, as curl does.
async fn write_out(
    out: &Output,
    options: &CurlOptions,
    response: Option<&Response>,
    start: Instant,
    exit: i32,
) {
    let Some(format) = &options.write_out else {
        return;
    };
    let mut text = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => text.push('\n'),
                Some('t') => text.push('\t'),
                Some('r') => text.push('\r'),
                Some(other) => {
                    text.push('\\');
                    text.push(other);
                }
                None => text.push('\\'),
            },
            '%' if chars.peek() == Some(&'%') => {
                chars.next();
                text.push('%');
            }
            '%' if chars.peek() == Some(&'{') => {
                chars.next();
                let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                text.push_str(&variable(&name, response, start, exit));
            }
            c => text.push(c),
        }
    }
    out.out(&text).await;
}

fn variable(name: &str, response: Option<&Response>, start: Instant, exit: i32) -> String {
    match (name, response) {
        ("http_code" | "response_code", Some(r)) => format!("{:03}", r.status.as_u16()),
        ("http_code" | "response_code", None) => "000".to_string(),
        ("time_total", _) => format!("{:.6}", start.elapsed().as_secs_f64()),
        ("size_download", Some(r)) => r.body.len().to_string(),
        ("size_download", None) => "0".to_string(),
        ("remote_ip", Some(r)) => r.remote.ip().to_string(),
        ("remote_port", Some(r)) => r.remote.port().to_string(),
        ("content_type", Some(r)) => r
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        ("url_effective", Some(r)) => r.url.to_display(),
        ("exitcode", _) => exit.to_string(),
        _ => String::new(),
    }
}

/// busybox wget's options as parsed.
#[derive(Debug, Default)]
struct WgetOptions {
    quiet: bool,
    output: Option<String>,
    server_response: bool,
    timeout: Option<Duration>,
    spider: bool,
    user_agent: Option<String>,
    headers: Vec<(String, String)>,
    post_data: Option<String>,
    urls: Vec<String>,
}

fn parse_wget(args: &[String]) -> Result<WgetOptions, String> {
    let mut options = WgetOptions::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| rest.next().cloned())
                    .ok_or_else(|| format!("option '--{name}' requires an argument"))
            };
            match name {
                "quiet" => options.quiet = true,
                "spider" => options.spider = true,
                "server-response" => options.server_response = true,
                "no-check-certificate" | "continue" | "no-verbose" => {}
                "output-document" => options.output = Some(value()?),
                "timeout" => {
                    let v = value()?;
                    options.timeout =
                        Some(parse_seconds(&v).ok_or(format!("invalid number '{v}'"))?);
                }
                "user-agent" => options.user_agent = Some(value()?),
                "header" => {
                    if let Some((k, v)) = value()?.split_once(':') {
                        options
                            .headers
                            .push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                "post-data" => options.post_data = Some(value()?),
                "tries" | "proxy" | "directory-prefix" => {
                    value()?;
                }
                _ => return Err(format!("unrecognized option '{arg}'")),
            }
        } else if let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) {
            let chars: Vec<char> = cluster.chars().collect();
            for (i, &c) in chars.iter().enumerate() {
                let takes_value = matches!(c, 'O' | 'T' | 'U' | 'Y' | 't' | 'P' | 'o');
                let value = if takes_value {
                    let attached: String = chars[i + 1..].iter().collect();
                    Some(if attached.is_empty() {
                        rest.next()
                            .cloned()
                            .ok_or_else(|| format!("option requires an argument -- '{c}'"))?
                    } else {
                        attached
                    })
                } else {
                    None
                };
                match (c, value) {
                    ('q', _) => options.quiet = true,
                    ('S', _) => options.server_response = true,
                    ('c' | 'n' | 'v', _) => {}
                    ('O', Some(v)) => options.output = Some(v),
                    ('T', Some(v)) => {
                        options.timeout =
                            Some(parse_seconds(&v).ok_or(format!("invalid number '{v}'"))?);
                    }
                    ('U', Some(v)) => options.user_agent = Some(v),
                    ('Y' | 't' | 'P' | 'o', Some(_)) => {}
                    _ => return Err(format!("invalid option -- '{c}'")),
                }
                if takes_value {
                    break;
                }
            }
        } else {
            options.urls.push(arg.clone());
        }
    }
    Ok(options)
}

/// busybox `wget`: `-qO- URL` prints the body; failures as busybox words them, exit 1.
pub(super) async fn wget(env: &Env<'_>, out: &Output, args: &[String]) -> i32 {
    let options = match parse_wget(args) {
        Ok(options) => options,
        Err(e) => {
            out.err(&format!(
                "wget: {e}\nBusyBox v1.36.1 multi-call binary.\n\nUsage: wget [-cqS] [--spider] [-O FILE] [-o LOGFILE] [--header STR]\n\t[--post-data STR] [-T SEC] [-U AGENT] [-Y on/off] URL...\n"
            ))
            .await;
            return 1;
        }
    };
    if options.urls.is_empty() {
        out.err("wget: missing URL\n").await;
        return 1;
    }
    let mut code = 0;
    for url in &options.urls {
        if wget_one(env, out, &options, url).await != 0 {
            code = 1;
        }
    }
    code
}

async fn wget_one(env: &Env<'_>, out: &Output, options: &WgetOptions, raw_url: &str) -> i32 {
    let url = match http_client::parse_url(raw_url) {
        Ok(url) => url,
        Err(UrlError::Scheme(scheme)) => {
            out.err(&format!(
                "wget: not an http or ftp url: {raw_url}\n{}",
                note(&format!("{scheme}:// is not emulated (no TLS)"))
            ))
            .await;
            return 1;
        }
        Err(UrlError::Malformed(_)) => {
            out.err(&format!("wget: bad address '{raw_url}'\n")).await;
            return 1;
        }
    };
    let post = options.post_data.clone().unwrap_or_default();
    let mut headers = options.headers.clone();
    if options.post_data.is_some() {
        headers.push((
            "Content-Type".to_string(),
            "application/x-www-form-urlencoded".to_string(),
        ));
    }
    let request = Request {
        method: if options.post_data.is_some() {
            Method::POST
        } else if options.spider {
            Method::HEAD
        } else {
            Method::GET
        },
        url: url.clone(),
        headers,
        body: Bytes::from(post),
        user_agent: options
            .user_agent
            .clone()
            .unwrap_or_else(|| "Wget".to_string()),
    };
    if !options.quiet
        && let Ok(resolved) = http_client::resolve(env, &url.host).await
        && let Some(ip) = resolved.addrs.first()
    {
        out.err(&format!(
            "Connecting to {} ({ip}:{})\n",
            url.host_header(),
            url.port
        ))
        .await;
    }
    let how = Fetch {
        connect_timeout: cap_timeout(options.timeout.unwrap_or(super::MAX_NET_TIMEOUT)),
        max_time: cap_timeout(options.timeout.unwrap_or(super::MAX_NET_TIMEOUT)),
        max_redirects: MAX_REDIRECTS,
        verbose: None,
    };
    let response = match http_client::fetch(env, request, &how).await {
        Ok(response) => response,
        Err(e) => {
            let text = match &e {
                FetchError::Resolve { host, .. } => format!("bad address '{host}'"),
                FetchError::Connect { addr, source } => format!(
                    "can't connect to remote host ({}): {}",
                    addr.ip(),
                    io_text(source)
                ),
                FetchError::ConnectTimeout { addr } => {
                    format!(
                        "can't connect to remote host ({}): Connection timed out",
                        addr.ip()
                    )
                }
                FetchError::Timeout { .. } => "download timed out".to_string(),
                FetchError::EmptyReply | FetchError::BadReply => {
                    "error getting response".to_string()
                }
                FetchError::Recv(e) => format!("error getting response: {}", io_text(e)),
                FetchError::TooManyRedirects(_) => "too many redirections".to_string(),
                FetchError::Url(_) | FetchError::BadRequest(_) => {
                    format!("bad address '{raw_url}'")
                }
            };
            out.err(&format!("wget: {text}\n")).await;
            return 1;
        }
    };
    if options.server_response {
        let head = http_client::head_text(&response, false);
        let mut text = String::new();
        for line in head.lines().filter(|l| !l.is_empty()) {
            text.push_str(&format!("  {line}\n"));
        }
        out.err(&text).await;
    }
    if response.status.as_u16() >= 400 {
        out.err(&format!(
            "wget: server returned error: {} {} {}\n",
            http_client::version_text(response.version),
            response.status.as_u16(),
            http_client::reason(response.status)
        ))
        .await;
        return 1;
    }
    if options.spider {
        if !options.quiet {
            out.err("remote file exists\n").await;
        }
        return 0;
    }
    let file = options.output.clone().unwrap_or_else(|| {
        let path = url.path.split('?').next().unwrap_or_default();
        match path.rsplit('/').next() {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => "index.html".to_string(),
        }
    });
    if file == "-" {
        if !options.quiet {
            out.err("writing to stdout\n").await;
        }
        out.out_bytes(&response.body).await;
        if !options.quiet {
            out.err("written to stdout\n").await;
        }
    } else if file != "/dev/null" {
        if !options.quiet {
            out.err(&format!("saving to '{file}'\n'{file}' saved\n"))
                .await;
        }
        out.err(&note(&format!(
            "the pod has no filesystem: the {} bytes for {file} were discarded; use -O- to print them",
            response.body.len()
        )))
        .await;
    }
    0
}

/// The user agent Windows PowerShell 5.1 sends.
pub(super) fn powershell_user_agent(env: &Env<'_>) -> String {
    let build = env
        .windows_build()
        .rsplit('.')
        .next()
        .unwrap_or("17763")
        .to_string();
    match env.os {
        Os::Windows => format!(
            "Mozilla/5.0 (Windows NT; Windows NT 10.0; en-US) WindowsPowerShell/5.1.{build}.1"
        ),
        Os::Linux => CURL_USER_AGENT.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn curl_reads_clusters_attached_values_and_long_options() {
        let o = parse_curl(&args(&[
            "-sSLo/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2.5",
            "-H",
            "Host: x",
            "-XPOST",
            "http://web",
        ]))
        .expect("parses");
        assert!(o.follow);
        assert_eq!(o.output.as_deref(), Some("/dev/null"));
        assert_eq!(o.max_time, Some(Duration::from_millis(2500)));
        assert_eq!(o.headers, [("Host".to_string(), "x".to_string())]);
        assert_eq!(o.method.as_deref(), Some("POST"));
        assert_eq!(o.urls, ["http://web"]);
    }

    #[test]
    fn curl_usage_errors() {
        assert_eq!(
            parse_curl(&args(&["--bogus", "x"])).err(),
            Some(UsageError::Unknown("--bogus".to_string()))
        );
        assert_eq!(parse_curl(&args(&["-s"])).err(), Some(UsageError::NoUrl));
        assert_eq!(
            parse_curl(&args(&["-m", "soon", "x"])).err(),
            Some(UsageError::BadNumber("-m".to_string()))
        );
    }

    #[test]
    fn wget_reads_busybox_idioms() {
        let o = parse_wget(&args(&["-qO-", "--timeout=3", "http://web"])).expect("parses");
        assert!(o.quiet);
        assert_eq!(o.output.as_deref(), Some("-"));
        assert_eq!(o.timeout, Some(Duration::from_secs(3)));
        assert!(parse_wget(&args(&["-Z"])).is_err());
    }
}
