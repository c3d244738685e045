//! The commands end to end against a fake pod network: a tiny HTTP server and a tiny DNS
//! server on 127.0.0.1, and an ICMP that answers only for loopback. The fake refuses every
//! other destination, so nothing here leaves 127.0.0.1.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hickory_proto::op::{Message, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, PTR};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;

use super::*;

/// Every test run must end within this.
const RUN_LIMIT: Duration = Duration::from_secs(20);
const BODY: &str = "hello from web\n";
const WINDOWS_LABEL: &str = "[emulated by tandem: no process runs;";

/// What the fake ICMP does for a destination.
#[derive(Clone, Copy)]
enum FakeIcmp {
    Reply(Duration, u8),
    /// As the Windows data plane: ICMP outside the cluster network is not answered.
    Refused,
}

struct FakeNet {
    icmp: HashMap<Ipv4Addr, FakeIcmp>,
}

#[async_trait::async_trait]
impl PodNetwork for FakeNet {
    async fn tcp_connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
        if addr.ip() != IpAddr::V4(Ipv4Addr::LOCALHOST) {
            return Err(std::io::ErrorKind::NetworkUnreachable.into());
        }
        tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
    }

    async fn udp_socket(&self) -> std::io::Result<UdpSocket> {
        UdpSocket::bind("127.0.0.1:0").await
    }

    async fn icmp_echo(
        &self,
        dst: Ipv4Addr,
        _seq: u16,
        _timeout: Duration,
    ) -> std::io::Result<Option<(Duration, u8)>> {
        match self.icmp.get(&dst) {
            Some(FakeIcmp::Reply(rtt, ttl)) => Ok(Some((*rtt, *ttl))),
            Some(FakeIcmp::Refused) => Err(std::io::ErrorKind::PermissionDenied.into()),
            None => Ok(None),
        }
    }
}

/// The fake pod network plus the servers it reaches.
struct Fixture {
    http_port: u16,
    dns_port: u16,
    closed_port: u16,
}

impl Fixture {
    async fn start() -> Self {
        let http = TcpListener::bind("127.0.0.1:0").await.expect("bind HTTP");
        let http_port = http.local_addr().expect("HTTP address").port();
        tokio::spawn(serve_http(http));
        let (udp, tcp) = dns_sockets().await;
        let dns_port = udp.local_addr().expect("DNS address").port();
        tokio::spawn(serve_dns_udp(udp));
        tokio::spawn(serve_dns_tcp(tcp));
        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let closed_port = closed.local_addr().expect("address").port();
        drop(closed);
        Self {
            http_port,
            dns_port,
            closed_port,
        }
    }

    fn context(&self, os: Os) -> ExecContext {
        let ttl = match os {
            Os::Windows => 128,
            Os::Linux => 64,
        };
        let mut icmp = HashMap::new();
        icmp.insert(
            Ipv4Addr::LOCALHOST,
            FakeIcmp::Reply(Duration::from_micros(500), ttl),
        );
        icmp.insert(Ipv4Addr::new(192, 0, 2, 1), FakeIcmp::Refused);
        ExecContext {
            windows_build: (os == Os::Windows).then(|| "10.0.17763".to_string()),
            namespace: "default".to_string(),
            pod: "web-0".to_string(),
            hostname: "web-0".to_string(),
            container: "main".to_string(),
            image: "example/image:1".to_string(),
            node: "node-1".to_string(),
            ip: Some(Ipv4Addr::new(10, 244, 1, 5)),
            prefix_len: 24,
            gateway: Some(Ipv4Addr::new(10, 244, 1, 1)),
            mac: None,
            dns: DnsSettings {
                nameservers: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                searches: vec![
                    "default.svc.cluster.local".to_string(),
                    "svc.cluster.local".to_string(),
                    "cluster.local".to_string(),
                ],
                ndots: 5,
            },
            net: Arc::new(FakeNet { icmp }),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://web:{}{path}", self.http_port)
    }
}

/// A UDP socket and a TCP listener on the same loopback port.
async fn dns_sockets() -> (UdpSocket, TcpListener) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind UDP");
        let port = udp.local_addr().expect("UDP address").port();
        if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
            return (udp, tcp);
        }
    }
    panic!("no loopback port free for both UDP and TCP");
}

/// The zone: `web` and `kubernetes` in `default`, `big` (truncated over UDP), and the PTR of
/// 127.0.0.1 as kube-dns.
fn answer(query: &Message, over_tcp: bool) -> Message {
    let mut reply = Message::response(query.metadata.id, OpCode::Query);
    reply.metadata.authoritative = true;
    reply.metadata.recursion_desired = query.metadata.recursion_desired;
    let Some(question) = query.queries.first() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return reply;
    };
    reply.add_query(question.clone());
    let name = question.name().to_ascii().to_ascii_lowercase();
    let record = |data| Record::from_rdata(question.name().clone(), 30, data);
    match (name.as_str(), question.query_type()) {
        (
            "web.default.svc.cluster.local."
            | "kubernetes.default.svc.cluster.local."
            | "big.default.svc.cluster.local.",
            RecordType::A,
        ) => {
            if name.starts_with("big.") && !over_tcp {
                reply.metadata.truncation = true;
            } else {
                reply.add_answer(record(RData::A(A(Ipv4Addr::LOCALHOST))));
            }
        }
        ("web.default.svc.cluster.local." | "kubernetes.default.svc.cluster.local.", _) => {}
        ("1.0.0.127.in-addr.arpa.", RecordType::PTR) => {
            let target =
                Name::from_ascii("kube-dns.kube-system.svc.cluster.local.").expect("valid name");
            reply.add_answer(record(RData::PTR(PTR(target))));
        }
        _ => reply.metadata.response_code = ResponseCode::NXDomain,
    }
    reply
}

async fn serve_dns_udp(socket: UdpSocket) {
    let mut buffer = vec![0u8; 4096];
    while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
        let Ok(query) = Message::from_vec(&buffer[..len]) else {
            continue;
        };
        if let Ok(bytes) = answer(&query, false).to_vec() {
            let _ = socket.send_to(&bytes, from).await;
        }
    }
}

async fn serve_dns_tcp(listener: TcpListener) {
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut prefix = [0u8; 2];
            while stream.read_exact(&mut prefix).await.is_ok() {
                let mut body = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
                if stream.read_exact(&mut body).await.is_err() {
                    return;
                }
                let Ok(query) = Message::from_vec(&body) else {
                    return;
                };
                let Ok(bytes) = answer(&query, true).to_vec() else {
                    return;
                };
                let len = u16::try_from(bytes.len()).unwrap_or(0).to_be_bytes();
                if stream.write_all(&len).await.is_err() || stream.write_all(&bytes).await.is_err()
                {
                    return;
                }
            }
        });
    }
}

/// `/` says hello, `/json` is JSON, `/missing` is 404, `/redirect` goes to `/`, POST echoes.
async fn serve_http(listener: TcpListener) {
    while let Ok((mut stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let Ok(n) = stream.read(&mut chunk).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                request.extend_from_slice(&chunk[..n]);
                if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
            };
            let head = String::from_utf8_lossy(&request[..head_end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while request.len() < head_end + length {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&chunk[..n]),
                }
            }
            let body = request[head_end..].to_vec();
            let mut parts = head.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            let (status, content_type, extra, content) = match (method.as_str(), path.as_str()) {
                ("POST", _) => ("200 OK", "text/plain", String::new(), body),
                (_, "/") => (
                    "200 OK",
                    "text/plain",
                    String::new(),
                    BODY.as_bytes().to_vec(),
                ),
                (_, "/json") => (
                    "200 OK",
                    "application/json",
                    String::new(),
                    br#"{"name":"web","ready":true}"#.to_vec(),
                ),
                (_, "/redirect") => (
                    "302 Found",
                    "text/plain",
                    "Location: /\r\n".to_string(),
                    Vec::new(),
                ),
                (_, "/agent") => {
                    let agent = head
                        .lines()
                        .find_map(|l| l.strip_prefix("User-Agent: "))
                        .unwrap_or_default();
                    (
                        "200 OK",
                        "text/plain",
                        String::new(),
                        format!("{agent}\n").into_bytes(),
                    )
                }
                _ => (
                    "404 Not Found",
                    "text/plain",
                    String::new(),
                    b"not here\n".to_vec(),
                ),
            };
            let mut response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
                content.len()
            )
            .into_bytes();
            if method != "HEAD" {
                response.extend_from_slice(&content);
            }
            let _ = stream.write_all(&response).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// What one run printed and returned.
#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn collect(mut rx: mpsc::Receiver<Bytes>) -> String {
    let mut text = Vec::new();
    while let Some(chunk) = rx.recv().await {
        text.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Runs `argv` in `ctx`, with `stdin` sent in one chunk and then closed when given.
async fn exec_with(
    fixture: &Fixture,
    ctx: &ExecContext,
    argv: &[&str],
    stdin: Option<&str>,
    tty: bool,
) -> Ran {
    exec_within(RUN_LIMIT, fixture, ctx, argv, stdin, tty).await
}

/// [`exec_with`] that must end within `limit`.
async fn exec_within(
    limit: Duration,
    fixture: &Fixture,
    ctx: &ExecContext,
    argv: &[&str],
    stdin: Option<&str>,
    tty: bool,
) -> Ran {
    let (out_tx, out_rx) = mpsc::channel(16);
    let (err_tx, err_rx) = mpsc::channel(16);
    let stdin = stdin.map(|text| {
        let (tx, rx) = mpsc::channel(4);
        let text = Bytes::copy_from_slice(text.as_bytes());
        tokio::spawn(async move {
            let _ = tx.send(text).await;
        });
        rx
    });
    let io = ExecIo {
        stdin,
        stdout: out_tx,
        stderr: err_tx,
        tty,
    };
    let argv = argv.iter().map(|a| a.to_string()).collect();
    let run = run_with_dns_port(ctx, argv, io, fixture.dns_port);
    let all = async { tokio::join!(run, collect(out_rx), collect(err_rx)) };
    let (code, stdout, stderr) = tokio::time::timeout(limit, all)
        .await
        .expect("the command ends in time");
    Ran {
        code,
        stdout,
        stderr,
    }
}

async fn exec(fixture: &Fixture, os: Os, argv: &[&str]) -> Ran {
    exec_with(fixture, &fixture.context(os), argv, None, false).await
}

#[test]
fn run_is_send_so_it_can_be_spawned() {
    fn assert_send<T: Send>(_: &T) {}
    let (stdout, _) = mpsc::channel(1);
    let (stderr, _) = mpsc::channel(1);
    let net: Arc<dyn PodNetwork> = Arc::new(FakeNet {
        icmp: HashMap::new(),
    });
    let ctx = ExecContext {
        windows_build: None,
        namespace: String::new(),
        pod: String::new(),
        hostname: String::new(),
        container: String::new(),
        image: String::new(),
        node: String::new(),
        ip: None,
        prefix_len: 0,
        gateway: None,
        mac: None,
        dns: DnsSettings {
            nameservers: Vec::new(),
            searches: Vec::new(),
            ndots: 1,
        },
        net,
    };
    let future = run(
        &ctx,
        Vec::new(),
        ExecIo {
            stdin: None,
            stdout,
            stderr,
            tty: false,
        },
    );
    assert_send(&future);
}

#[tokio::test]
async fn windows_resolve_dnsname_single_label_gets_the_namespace_suffix() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["Resolve-DnsName", "web"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("Name"), "{ran:?}");
    assert!(
        ran.stdout
            .lines()
            .any(|l| l.starts_with("web.default.svc.cluster.local")
                && l.contains(" A ")
                && l.contains("Answer")
                && l.ends_with("127.0.0.1")),
        "{ran:?}"
    );
    assert!(ran.stderr.starts_with(WINDOWS_LABEL), "{ran:?}");
}

#[tokio::test]
async fn windows_resolve_dnsname_name_with_a_dot_is_not_suffixed_and_fails() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["Resolve-DnsName", "web.default"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr
            .contains("Resolve-DnsName : web.default : DNS name does not exist"),
        "{ran:?}"
    );
    assert!(ran.stderr.contains("DNS_ERROR_RCODE_NAME_ERROR"), "{ran:?}");
    assert!(ran.stdout.is_empty(), "{ran:?}");
}

#[tokio::test]
async fn windows_resolve_dnsname_full_name_resolves() {
    let f = Fixture::start().await;
    let ran = exec(
        &f,
        Os::Windows,
        &[
            "Resolve-DnsName",
            "-Name",
            "kubernetes.default.svc.cluster.local",
            "-Type",
            "A",
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("kubernetes.default.svc.cluster.local"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn windows_nslookup_uses_the_same_single_suffix_rule() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["nslookup", "web"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.starts_with(
            "Server:  kube-dns.kube-system.svc.cluster.local\nAddress:  127.0.0.1\n\n"
        ),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("Name:    web.default.svc.cluster.local\nAddress:  127.0.0.1\n"),
        "{ran:?}"
    );
    let ran = exec(&f, Os::Windows, &["nslookup.exe", "web.default"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr.contains(
            "*** kube-dns.kube-system.svc.cluster.local can't find web.default: Non-existent domain"
        ),
        "{ran:?}"
    );
}

#[tokio::test]
async fn linux_nslookup_partial_name_resolves_through_the_search_list() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["nslookup", "web.default"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.starts_with("Server:\t\t127.0.0.1\n"), "{ran:?}");
    assert!(
        ran.stdout
            .contains("Name:\tweb.default.svc.cluster.local\nAddress: 127.0.0.1\n"),
        "{ran:?}"
    );
    let ran = exec(&f, Os::Linux, &["nslookup", "nope"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stdout.contains("** server can't find nope: NXDOMAIN"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn truncated_udp_replies_are_asked_again_over_tcp() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["nslookup", "big"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout
            .contains("Name:\tbig.default.svc.cluster.local\nAddress: 127.0.0.1"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn curl_prints_the_body_on_both_personalities() {
    let f = Fixture::start().await;
    let url = f.url("/");
    for (os, name) in [(Os::Linux, "curl"), (Os::Windows, "curl.exe")] {
        let ran = exec(&f, os, &[name, "-s", &url]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        assert_eq!(ran.stdout, BODY);
        assert_eq!(ran.stderr, label(name));
    }
}

#[tokio::test]
async fn curl_connection_refused_is_exit_7_with_curls_message() {
    let f = Fixture::start().await;
    let url = format!("http://web:{}/", f.closed_port);
    let ran = exec(&f, Os::Linux, &["curl", "-s", &url]).await;
    assert_eq!(ran.code, 7, "{ran:?}");
    assert!(
        ran.stderr.contains(&format!(
            "curl: (7) Failed to connect to web port {} after 0 ms: Couldn't connect to server",
            f.closed_port
        )),
        "{ran:?}"
    );
    assert!(ran.stdout.is_empty());
}

#[tokio::test]
async fn curl_unresolvable_host_is_exit_6() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["curl", "http://web.default/"]).await;
    assert_eq!(ran.code, 6, "{ran:?}");
    assert!(
        ran.stderr
            .contains("curl: (6) Could not resolve host: web.default"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn curl_options_head_include_write_out_fail_follow_and_post() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["curl", "-sI", &f.url("/")]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.starts_with("HTTP/1.1 200 OK\r\n"), "{ran:?}");
    assert!(ran.stdout.contains("Content-Length: 15\r\n"), "{ran:?}");
    assert!(!ran.stdout.contains(BODY));

    let ran = exec(&f, Os::Linux, &["curl", "-i", &f.url("/")]).await;
    assert!(ran.stdout.starts_with("HTTP/1.1 200 OK\r\n") && ran.stdout.ends_with(BODY));

    let ran = exec(
        &f,
        Os::Linux,
        &[
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}\\n",
            &f.url("/missing"),
        ],
    )
    .await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "404\n"));

    let ran = exec(&f, Os::Linux, &["curl", "-sf", &f.url("/missing")]).await;
    assert_eq!(ran.code, 22, "{ran:?}");
    assert!(
        ran.stderr
            .contains("curl: (22) The requested URL returned error: 404")
    );

    let ran = exec(&f, Os::Linux, &["curl", "-sL", &f.url("/redirect")]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, BODY));

    let ran = exec(&f, Os::Linux, &["curl", "-d", "a=1", &f.url("/")]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "a=1"));

    let ran = exec(&f, Os::Linux, &["curl", "-v", &f.url("/")]).await;
    assert!(ran.stderr.contains("> GET / HTTP/1.1\n"), "{ran:?}");
    assert!(ran.stderr.contains("< HTTP/1.1 200 OK\n"), "{ran:?}");

    let ran = exec(&f, Os::Linux, &["curl", "--bogus", &f.url("/")]).await;
    assert_eq!(ran.code, 2, "{ran:?}");

    let ran = exec(&f, Os::Linux, &["curl", "https://web/"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stderr.contains("Protocol \"https\" not supported"));
}

#[tokio::test]
async fn wget_quiet_to_stdout_prints_the_body() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["wget", "-qO-", &f.url("/")]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, BODY), "{ran:?}");
    let url = format!("http://web:{}/", f.closed_port);
    let ran = exec(&f, Os::Linux, &["wget", "-qO-", &url]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr
            .contains("wget: can't connect to remote host (127.0.0.1): Connection refused"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn invoke_webrequest_shows_the_response_object() {
    let f = Fixture::start().await;
    let ran = exec(
        &f,
        Os::Windows,
        &["Invoke-WebRequest", "-Uri", &f.url("/"), "-UseBasicParsing"],
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("StatusCode        : 200\n"), "{ran:?}");
    assert!(ran.stdout.contains("StatusDescription : OK\n"), "{ran:?}");
    assert!(
        ran.stdout.contains("Content           : hello from web\n"),
        "{ran:?}"
    );
    assert!(ran.stdout.contains("RawContentLength  : 15\n"), "{ran:?}");
}

#[tokio::test]
async fn invoke_webrequest_connection_refused_is_an_error_record() {
    let f = Fixture::start().await;
    let url = format!("http://web:{}/", f.closed_port);
    let ran = exec(&f, Os::Windows, &["iwr", &url]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr
            .contains("Invoke-WebRequest : Unable to connect to the remote server"),
        "{ran:?}"
    );
    assert!(
        ran.stderr.contains("WebCmdletWebResponseException"),
        "{ran:?}"
    );
    assert!(ran.stdout.is_empty());
}

#[tokio::test]
async fn invoke_webrequest_http_error_shows_the_body_as_message() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["iwr", &f.url("/missing")]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(
        ran.stderr.contains("Invoke-WebRequest : not here"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn powershell_member_access_and_curl_alias() {
    let f = Fixture::start().await;
    let line = format!("(iwr -Uri {} -UseBasicParsing).Content", f.url("/"));
    let ran = exec(
        &f,
        Os::Windows,
        &["powershell", "-NoProfile", "-Command", &line],
    )
    .await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, BODY), "{ran:?}");
    assert_eq!(ran.stderr, label("powershell"));

    let line = format!(
        "curl {} | Select-Object -ExpandProperty StatusCode",
        f.url("/")
    );
    let ran = exec(&f, Os::Windows, &["powershell.exe", "-c", &line]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "200\n"), "{ran:?}");

    let line = format!("curl.exe -s {}", f.url("/agent"));
    let ran = exec(&f, Os::Windows, &["powershell", "-c", &line]).await;
    assert_eq!(ran.stdout, "curl/8.5.0\n", "{ran:?}");
}

#[tokio::test]
async fn invoke_restmethod_shows_json_as_a_table() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["irm", &f.url("/json")]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(
        ran.stdout, "\nname ready\n---- -----\nweb  True\n\n",
        "{ran:?}"
    );
}

#[tokio::test]
async fn unknown_commands_are_not_emulated() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["dig", "web"]).await;
    assert_eq!(ran.code, 127, "{ran:?}");
    assert!(ran.stderr.contains("\"dig\" is not emulated"), "{ran:?}");
    assert!(
        ran.stderr
            .contains("Emulated commands: curl, wget, nslookup"),
        "{ran:?}"
    );
    assert!(ran.stdout.is_empty());

    let ran = exec(&f, Os::Windows, &["Get-Process"]).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stderr.contains("Resolve-DnsName"), "{ran:?}");

    let ran = exec(&f, Os::Linux, &["sh", "-c", "echo one; dig web"]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (127, "one\n"), "{ran:?}");
}

#[tokio::test]
async fn powershell_command_runs_hostname() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["powershell", "-Command", "hostname"]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "web-0\n"), "{ran:?}");
    assert!(ran.stderr.starts_with(WINDOWS_LABEL), "{ran:?}");

    let ran = exec(&f, Os::Windows, &["cmd", "/c", "hostname & echo done"]).await;
    assert_eq!(ran.stdout, "web-0\ndone\n", "{ran:?}");
}

#[tokio::test]
async fn powershell_repl_runs_lines_from_stdin_until_exit() {
    let f = Fixture::start().await;
    let ctx = f.context(Os::Windows);
    let ran = exec_with(
        &f,
        &ctx,
        &["powershell"],
        Some("hostname\r\nexit 3\r\nhostname\r\n"),
        false,
    )
    .await;
    assert_eq!(ran.code, 3, "{ran:?}");
    assert_eq!(ran.stdout.matches("web-0\n").count(), 1, "{ran:?}");
    assert!(ran.stdout.contains("PS C:\\> web-0\nPS C:\\> "), "{ran:?}");

    // A TTY: typed characters are echoed, Backspace edits, Enter is \r, output ends in \r\n.
    let ran = exec_with(&f, &ctx, &["cmd"], Some("hostnamX\x7fe\rexit\r"), true).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout
            .contains("C:\\>hostnamX\x08 \x08e\r\nweb-0\r\nC:\\>"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn shell_repl_ends_at_end_of_input_with_the_last_status() {
    let f = Fixture::start().await;
    let ctx = f.context(Os::Linux);
    let ran = exec_with(&f, &ctx, &["/bin/sh"], Some("echo hi\nfalse\n"), false).await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert_eq!(ran.stdout, "/ # hi\n/ # / # ", "{ran:?}");
}

#[tokio::test]
async fn sh_c_sequences_and_resolver_files() {
    let f = Fixture::start().await;
    let ran = exec(
        &f,
        Os::Linux,
        &[
            "sh",
            "-c",
            "false && echo no || echo yes; cat /etc/resolv.conf",
        ],
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(
        ran.stdout,
        "yes\nsearch default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:5\n"
    );
    let ran = exec(&f, Os::Linux, &["sh", "-c", "curl web | head"]).await;
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("pipes are not emulated"), "{ran:?}");
}

#[tokio::test]
async fn windows_ping_replies_and_statistics() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["ping", "-n", "2", "web"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.starts_with(
            "\nPinging web.default.svc.cluster.local [127.0.0.1] with 32 bytes of data:\nReply from 127.0.0.1: bytes=32 time<1ms TTL=128\nReply from 127.0.0.1: bytes=32 time<1ms TTL=128\n"
        ),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("Packets: Sent = 2, Received = 2, Lost = 0 (0% loss),"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn windows_ping_outside_the_cluster_times_out_and_says_why() {
    let f = Fixture::start().await;
    let ran = exec(
        &f,
        Os::Windows,
        &["ping", "-n", "1", "-w", "50", "192.0.2.1"],
    )
    .await;
    assert_eq!(ran.code, 1, "{ran:?}");
    assert!(ran.stdout.contains("Request timed out.\n"), "{ran:?}");
    assert!(ran.stdout.contains("Lost = 1 (100% loss)"), "{ran:?}");
    assert!(
        ran.stderr
            .contains("[emulated by tandem: ICMP to 192.0.2.1 is not answered"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn linux_ping_prints_iputils_lines() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["ping", "-c", "1", "web"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout.starts_with(
            "PING web.default.svc.cluster.local (127.0.0.1) 56(84) bytes of data.\n64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.500 ms\n"
        ),
        "{ran:?}"
    );
    assert!(
        ran.stdout
            .contains("1 packets transmitted, 1 received, 0% packet loss")
    );
    let ran = exec(&f, Os::Linux, &["ping", "-c", "1", "nope"]).await;
    assert_eq!(ran.code, 2, "{ran:?}");
    assert!(ran.stderr.contains("ping: nope: Name or service not known"));
}

#[tokio::test]
async fn test_netconnection_reports_tcp_success_and_failure() {
    let f = Fixture::start().await;
    let port = f.http_port.to_string();
    let ran = exec(
        &f,
        Os::Windows,
        &["Test-NetConnection", "web", "-Port", &port],
    )
    .await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("TcpTestSucceeded : True"), "{ran:?}");
    assert!(
        ran.stdout.contains("RemoteAddress    : 127.0.0.1"),
        "{ran:?}"
    );

    let closed = f.closed_port.to_string();
    let ran = exec(
        &f,
        Os::Windows,
        &["tnc", "web", "-Port", &closed, "-InformationLevel", "Quiet"],
    )
    .await;
    assert_eq!(ran.stdout, "False\n", "{ran:?}");
    assert!(ran.stderr.contains(&format!(
        "WARNING: TCP connect to (127.0.0.1 : {closed}) failed"
    )));
}

#[tokio::test]
async fn ipconfig_shows_the_one_dns_suffix() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["ipconfig", "/all"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout
            .contains("DNS Suffix Search List. . . . . . : default.svc.cluster.local\n")
    );
    assert!(
        ran.stdout
            .contains("IPv4 Address. . . . . . . . . . . : 10.244.1.5(Preferred)\n")
    );
    assert!(
        ran.stdout
            .contains("Physical Address. . . . . . . . . : 00-15-5D-F4-01-05\n")
    );
}

#[tokio::test]
async fn linux_ip_addr_shows_the_pod_address() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Linux, &["ip", "a"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(
        ran.stdout
            .contains("inet 10.244.1.5/24 brd 10.244.1.255 scope global eth0")
    );
    let ran = exec(&f, Os::Linux, &["ip", "route"]).await;
    assert!(ran.stdout.starts_with("default via 10.244.1.1 dev eth0"));
}

#[tokio::test(start_paused = true)]
async fn sleep_is_capped_and_ctrl_c_stops_it() {
    let f = Fixture {
        http_port: 0,
        dns_port: 0,
        closed_port: 0,
    };
    let ctx = f.context(Os::Linux);
    let started = tokio::time::Instant::now();
    let limit = MAX_SLEEP + RUN_LIMIT;
    let ran = exec_within(limit, &f, &ctx, &["sleep", "infinity"], None, false).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_eq!(started.elapsed(), MAX_SLEEP);
    assert!(ran.stderr.contains("sleep is capped at 600 s"));

    let ran = exec_with(&f, &ctx, &["sleep", "5"], Some("\x03"), true).await;
    assert_eq!(ran.code, 130, "{ran:?}");
}

#[tokio::test]
async fn resolve_dnsname_of_an_address_asks_for_its_ptr() {
    let f = Fixture::start().await;
    let ran = exec(&f, Os::Windows, &["Resolve-DnsName", "127.0.0.1"]).await;
    assert_eq!(ran.code, 0, "{ran:?}");
    assert!(ran.stdout.contains("NameHost"), "{ran:?}");
    assert!(
        ran.stdout
            .contains("kube-dns.kube-system.svc.cluster.local"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn powershell_member_access_works_for_test_netconnection() {
    let f = Fixture::start().await;
    let line = format!("(tnc web -Port {}).TcpTestSucceeded", f.http_port);
    let ran = exec(&f, Os::Windows, &["pwsh", "-c", &line]).await;
    assert_eq!((ran.code, ran.stdout.as_str()), (0, "True\n"), "{ran:?}");
}
