//! HTTP/1.1 from inside the pod, for curl, wget and Invoke-WebRequest: URL parsing, name
//! resolution with the pod's rules, a TCP connection through [`PodNetwork`](super::PodNetwork),
//! one exchange (hyper), and redirects. Each step reports errors the tools turn into their own
//! messages.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::resolver::{HostAddrs, HostError, resolve_host};
use super::term::Output;
use super::{Env, MAX_BODY_BYTES};

/// Where a URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Url {
    pub(super) scheme: String,
    /// Without brackets for IPv6.
    pub(super) host: String,
    pub(super) port: u16,
    /// Origin form: `/path?query`.
    pub(super) path: String,
}

impl Url {
    /// `Host:` as a client sends it: the port only when not the scheme's default.
    pub(super) fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub(super) fn to_display(&self) -> String {
        format!("{}://{}{}", self.scheme, self.host_header(), self.path)
    }
}

/// Why a URL cannot be fetched.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum UrlError {
    #[error("URL {0:?} is malformed")]
    Malformed(String),
    #[error("protocol {0:?} is not supported (tandem's emulation speaks http:// only)")]
    Scheme(String),
}

/// Parses `raw` as curl does: no scheme means `http://`; the fragment is dropped.
pub(super) fn parse_url(raw: &str) -> Result<Url, UrlError> {
    let raw = raw.trim();
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let without_fragment = with_scheme.split('#').next().unwrap_or_default();
    let uri: http::Uri = without_fragment
        .parse()
        .map_err(|_| UrlError::Malformed(raw.to_string()))?;
    let scheme = uri.scheme_str().unwrap_or("http").to_ascii_lowercase();
    if scheme != "http" {
        return Err(UrlError::Scheme(scheme));
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| UrlError::Malformed(raw.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(UrlError::Malformed(raw.to_string()));
    }
    Ok(Url {
        scheme,
        host,
        port: uri.port_u16().unwrap_or(80),
        path: uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".to_string()),
    })
}

/// What to send.
#[derive(Clone, Debug)]
pub(super) struct Request {
    pub(super) method: Method,
    pub(super) url: Url,
    /// Sent as given, after `Host` (unless given here), `User-Agent` and `Accept`.
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Bytes,
    pub(super) user_agent: String,
}

/// What came back.
#[derive(Debug)]
pub(super) struct Response {
    pub(super) status: StatusCode,
    pub(super) version: http::Version,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    /// The body was longer than [`MAX_BODY_BYTES`]; the rest was dropped.
    pub(super) truncated: bool,
    pub(super) remote: SocketAddr,
    /// The URL that answered, after redirects.
    pub(super) url: Url,
}

/// Why a fetch failed, in the order the steps run.
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: HostError,
    },
    #[error("cannot connect to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to {addr} timed out")]
    ConnectTimeout { addr: SocketAddr },
    #[error("the transfer timed out after {elapsed:?} with {received} bytes received")]
    Timeout { elapsed: Duration, received: usize },
    #[error("the server closed the connection without a reply")]
    EmptyReply,
    #[error("the server's reply is not HTTP/1.x")]
    BadReply,
    #[error("receiving failed")]
    Recv(#[source] std::io::Error),
    #[error("more than {0} redirects")]
    TooManyRedirects(u32),
    #[error("the request is invalid")]
    BadRequest(#[source] http::Error),
}

/// How to fetch: time limits, redirects, and whether to narrate as `curl -v` does.
pub(super) struct Fetch<'a> {
    pub(super) connect_timeout: Duration,
    /// The whole fetch, redirects included.
    pub(super) max_time: Duration,
    pub(super) max_redirects: u32,
    pub(super) verbose: Option<&'a Output>,
}

/// Fetches `request`, following up to `max_redirects` redirects (303, and 301/302 after a
/// POST, become GETs without a body, as browsers and curl do).
pub(super) async fn fetch(
    env: &Env<'_>,
    mut request: Request,
    how: &Fetch<'_>,
) -> Result<Response, FetchError> {
    let start = Instant::now();
    let deadline = start + how.max_time;
    let mut redirects = 0;
    loop {
        let response = fetch_once(env, &request, how, start, deadline).await?;
        let location = response
            .headers
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok());
        let Some(location) = location.filter(|_| response.status.is_redirection()) else {
            return Ok(response);
        };
        if how.max_redirects == 0 {
            return Ok(response);
        }
        if redirects >= how.max_redirects {
            return Err(FetchError::TooManyRedirects(how.max_redirects));
        }
        redirects += 1;
        let next = join_url(&request.url, location)?;
        if let Some(out) = how.verbose {
            out.err(&format!(
                "* Issue another request to this URL: '{}'\n",
                next.to_display()
            ))
            .await;
        }
        let status = response.status.as_u16();
        if status == 303 || (matches!(status, 301 | 302) && request.method == Method::POST) {
            request.method = Method::GET;
            request.body = Bytes::new();
        }
        if next.host != request.url.host || next.port != request.url.port {
            request
                .headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("host"));
        }
        request.url = next;
    }
}

/// A `Location` relative to `base`.
fn join_url(base: &Url, location: &str) -> Result<Url, UrlError> {
    if location.contains("://") {
        return parse_url(location);
    }
    if let Some(rest) = location.strip_prefix("//") {
        return parse_url(&format!("{}://{rest}", base.scheme));
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = base
            .path
            .split('?')
            .next()
            .and_then(|p| p.rsplit_once('/'))
            .map(|(dir, _)| dir)
            .unwrap_or_default();
        format!("{dir}/{location}")
    };
    Ok(Url {
        path,
        ..base.clone()
    })
}

/// The host's addresses as the pod resolves them.
pub(super) async fn resolve(env: &Env<'_>, host: &str) -> Result<HostAddrs, FetchError> {
    resolve_host(env, host)
        .await
        .map_err(|source| FetchError::Resolve {
            host: host.to_string(),
            source,
        })
}

/// A connection to the first address that accepts, each tried within `timeout`.
pub(super) async fn connect(
    env: &Env<'_>,
    addrs: &[IpAddr],
    port: u16,
    timeout: Duration,
    verbose: Option<&Output>,
) -> Result<(TcpStream, SocketAddr), FetchError> {
    let mut last = None;
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        if let Some(out) = verbose {
            out.err(&format!("*   Trying {addr}...\n")).await;
        }
        let attempt = tokio::time::timeout(timeout, env.ctx.net.tcp_connect(addr, timeout)).await;
        match attempt {
            Ok(Ok(stream)) => return Ok((stream, addr)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                last = Some(FetchError::ConnectTimeout { addr });
            }
            Ok(Err(source)) => last = Some(FetchError::Connect { addr, source }),
            Err(_) => last = Some(FetchError::ConnectTimeout { addr }),
        }
    }
    Err(last.unwrap_or(FetchError::Resolve {
        host: String::new(),
        source: HostError::NotFound(String::new()),
    }))
}

async fn fetch_once(
    env: &Env<'_>,
    request: &Request,
    how: &Fetch<'_>,
    start: Instant,
    deadline: Instant,
) -> Result<Response, FetchError> {
    let timed_out = |received| FetchError::Timeout {
        elapsed: start.elapsed(),
        received,
    };
    let url = &request.url;
    let resolved = tokio::time::timeout_at(deadline, resolve(env, &url.host))
        .await
        .map_err(|_| timed_out(0))??;
    if let Some(out) = how.verbose
        && resolved
            .addrs
            .first()
            .is_some_and(|ip| ip.to_string() != url.host)
    {
        let ips: Vec<String> = resolved.addrs.iter().map(ToString::to_string).collect();
        out.err(&format!(
            "* Host {}:{} was resolved.\n* IPv4: {}\n",
            url.host,
            url.port,
            ips.join(", ")
        ))
        .await;
    }
    let connect_timeout = how
        .connect_timeout
        .min(deadline.saturating_duration_since(Instant::now()));
    let (stream, remote) = connect(env, &resolved.addrs, url.port, connect_timeout, how.verbose)
        .await
        .map_err(|e| match e {
            FetchError::ConnectTimeout { .. } if Instant::now() >= deadline => timed_out(0),
            other => other,
        })?;
    if let Some(out) = how.verbose {
        out.err(&format!(
            "* Connected to {} ({}) port {}\n",
            url.host,
            remote.ip(),
            url.port
        ))
        .await;
    }
    let headers = request_headers(request);
    if let Some(out) = how.verbose {
        let mut text = format!("> {} {} HTTP/1.1\n", request.method, url.path);
        for (k, v) in &headers {
            text.push_str(&format!("> {k}: {v}\n"));
        }
        text.push_str("> \n");
        out.err(&text).await;
    }
    let mut builder = http::Request::builder()
        .method(request.method.clone())
        .uri(url.path.as_str());
    for (k, v) in &headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let http_request = builder
        .body(Full::new(request.body.clone()))
        .map_err(FetchError::BadRequest)?;
    let mut received = 0usize;
    let exchange = exchange(stream, http_request, &mut received);
    let (parts, body, truncated) = tokio::time::timeout_at(deadline, exchange)
        .await
        .map_err(|_| timed_out(received))??;
    Ok(Response {
        status: parts.status,
        version: parts.version,
        headers: parts.headers,
        body,
        truncated,
        remote,
        url: url.clone(),
    })
}

/// The headers sent, in order: `Host`, `User-Agent`, `Accept`, then the caller's (a caller's
/// `Host`, `User-Agent` or `Accept` replaces the default), and `Content-Length` with a body.
fn request_headers(request: &Request) -> Vec<(String, String)> {
    let given = |name: &str| {
        request
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    let mut headers = Vec::new();
    if !given("host") {
        headers.push(("Host".to_string(), request.url.host_header()));
    }
    if !given("user-agent") && !request.user_agent.is_empty() {
        headers.push(("User-Agent".to_string(), request.user_agent.clone()));
    }
    if !given("accept") {
        headers.push(("Accept".to_string(), "*/*".to_string()));
    }
    headers.extend(request.headers.iter().cloned());
    if !request.body.is_empty() && !given("content-length") {
        headers.push(("Content-Length".to_string(), request.body.len().to_string()));
    }
    headers
}

/// Sends the request on `stream` and reads the response, keeping at most [`MAX_BODY_BYTES`].
async fn exchange(
    stream: TcpStream,
    request: http::Request<Full<Bytes>>,
    received: &mut usize,
) -> Result<(http::response::Parts, Bytes, bool), FetchError> {
    // Title-case names on the wire, as curl and .NET send them (some servers and tests care).
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(map_hyper)?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    async {
        let response = sender.send_request(request).await.map_err(map_hyper)?;
        let (parts, mut body) = response.into_parts();
        let mut collected = Vec::new();
        let mut truncated = false;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(map_hyper)?;
            if let Ok(data) = frame.into_data() {
                *received += data.len();
                let room = MAX_BODY_BYTES.saturating_sub(collected.len());
                if data.len() > room {
                    collected.extend_from_slice(&data[..room]);
                    truncated = true;
                    break;
                }
                collected.extend_from_slice(&data);
            }
        }
        Ok((parts, Bytes::from(collected), truncated))
    }
    .await
}

/// Stops the connection task when the exchange ends or is dropped (timed out).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn map_hyper(error: hyper::Error) -> FetchError {
    if error.is_incomplete_message() || error.is_canceled() {
        return FetchError::EmptyReply;
    }
    if error.is_parse() || error.is_parse_status() {
        return FetchError::BadReply;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&error);
    while let Some(inner) = source {
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            return FetchError::Recv(std::io::Error::new(io.kind(), io.to_string()));
        }
        source = inner.source();
    }
    FetchError::Recv(std::io::Error::other(error.to_string()))
}

/// A header name as most servers write it (`content-type` → `Content-Type`); hyper keeps names
/// lowercase.
pub(super) fn title_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = true;
    for c in name.chars() {
        out.push(if upper { c.to_ascii_uppercase() } else { c });
        upper = c == '-';
    }
    out
}

/// The status line's reason phrase (`OK`, `Not Found`), empty for unknown codes.
pub(super) fn reason(status: StatusCode) -> &'static str {
    status.canonical_reason().unwrap_or("")
}

/// `HTTP/1.1`.
pub(super) fn version_text(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_09 => "HTTP/0.9",
        _ => "HTTP/1.1",
    }
}

/// The status line and headers as the server sent them (names title-cased), ending in a blank
/// line, with `\r\n` line ends when `crlf`.
pub(super) fn head_text(response: &Response, crlf: bool) -> String {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut text = format!(
        "{} {} {}{eol}",
        version_text(response.version),
        response.status.as_u16(),
        reason(response.status)
    );
    for (name, value) in &response.headers {
        text.push_str(&format!(
            "{}: {}{eol}",
            title_case(name.as_str()),
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    text.push_str(eol);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_as_curl_reads_them() {
        assert_eq!(
            parse_url("web:8080/a?b=c#frag"),
            Ok(Url {
                scheme: "http".into(),
                host: "web".into(),
                port: 8080,
                path: "/a?b=c".into()
            })
        );
        assert_eq!(
            parse_url("http://10.0.0.1").map(|u| u.path),
            Ok("/".to_string())
        );
        assert_eq!(
            parse_url("https://web/"),
            Err(UrlError::Scheme("https".to_string()))
        );
        assert!(parse_url("http://").is_err());
        assert_eq!(
            parse_url("http://[::1]:81/").map(|u| u.host_header()),
            Ok("[::1]:81".to_string())
        );
    }

    #[test]
    fn redirects_join_relative_locations() {
        let base = parse_url("http://web:81/a/b?x").expect("valid");
        assert_eq!(join_url(&base, "c").map(|u| u.path), Ok("/a/c".to_string()));
        assert_eq!(join_url(&base, "/d").map(|u| u.path), Ok("/d".to_string()));
        assert_eq!(
            join_url(&base, "//other/e").map(|u| (u.host, u.port)),
            Ok(("other".to_string(), 80))
        );
    }

    #[test]
    fn header_names_are_title_cased() {
        assert_eq!(title_case("content-type"), "Content-Type");
        assert_eq!(title_case("x-request-id"), "X-Request-Id");
    }
}
