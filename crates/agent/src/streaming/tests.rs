//! End-to-end tests: a real server on 127.0.0.1 driven by the clients of [`super::testing`],
//! speaking each protocol the way kubectl does (client-go `remotecommand`, `portforward`).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::spdy::Frame;
use super::testing::{KEY, SpdyClient, WsClient, request, tunnel, websocket};
use super::websocket::accept_key;
use super::{ExecHandler, ExecIo, ExecRequest, PortForwardHandler, StreamingServer};

/// Echoes stdin upper-cased (or, without stdin, prints its command), says `warn` on stderr,
/// and exits with `exit`.
struct Shout {
    exit: i32,
}

#[async_trait]
impl ExecHandler for Shout {
    async fn exec(&self, mut io: ExecIo) -> i32 {
        let _ = io.stderr.send(Bytes::from_static(b"warn\n")).await;
        match io.stdin.take() {
            Some(mut stdin) => {
                while let Some(chunk) = stdin.recv().await {
                    let _ = io
                        .stdout
                        .send(Bytes::from(chunk.to_ascii_uppercase()))
                        .await;
                }
            }
            None => {
                let _ = io.stdout.send(Bytes::from(io.command.join(" "))).await;
            }
        }
        self.exit
    }
}

/// Every port leads to one echo server, except port 1, which refuses.
struct ToEcho {
    addr: SocketAddr,
}

#[async_trait]
impl PortForwardHandler for ToEcho {
    async fn connect(&self, port: u16) -> io::Result<TcpStream> {
        if port == 1 {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "connection refused",
            ));
        }
        TcpStream::connect(self.addr).await
    }
}

/// A TCP echo server on 127.0.0.1 that half-closes after echoing its client's last byte.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let addr = listener.local_addr().expect("echo addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = conn.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    });
    addr
}

fn exec_request(command: &[&str], stdin: bool, tty: bool) -> ExecRequest {
    ExecRequest {
        command: command.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    }
}

const SPDY_HEADERS: [(&str, &str); 2] = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];

async fn spdy(url: &str, protocol: &str) -> SpdyClient<TcpStream> {
    let mut headers = SPDY_HEADERS.to_vec();
    headers.push(("X-Stream-Protocol-Version", protocol));
    let (io, head, leftover) = request(url, &headers).await;
    assert_eq!(head.status, 101);
    assert_eq!(head.header("upgrade"), Some("SPDY/3.1"));
    assert_eq!(head.header("x-stream-protocol-version"), Some(protocol));
    SpdyClient::new(io, leftover)
}

fn status_json(exit: i32) -> serde_json::Value {
    if exit == 0 {
        return serde_json::json!({"metadata": {}, "status": "Success"});
    }
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command [cat], exit code {exit}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": exit.to_string()}]},
    })
}

#[tokio::test]
async fn unknown_used_and_mistyped_tokens_are_not_found() {
    let server = StreamingServer::start().await.expect("start");
    let url = server.exec_url(
        exec_request(&["true"], false, false),
        Arc::new(Shout { exit: 0 }),
    );
    let (_, head, _) = request(&format!("{url}x"), &[]).await;
    assert_eq!(head.status, 404);

    // The first request consumes the token even when it is no upgrade.
    let (_, head, _) = request(&url, &[]).await;
    assert_eq!(head.status, 400);
    let (_, head, _) = request(&url, &[]).await;
    assert_eq!(head.status, 404);

    let handler = Arc::new(ToEcho {
        addr: echo_server().await,
    });
    let pf = server.port_forward_url("pod-a", handler);
    let (_, head, _) = request(&pf.replace("/portforward/", "/exec/"), &[]).await;
    assert_eq!(head.status, 404);
}

/// What a binary-channel exec session sent until its normal close.
struct ExecFrames {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    error: Vec<u8>,
    /// The payload of a pong, if one came.
    pong: Option<Vec<u8>>,
}

/// Reads a websocket exec session's messages until the server's close (code 1000), sorting
/// channels 1–3; any other message or frame fails the test.
async fn exec_frames(ws: &mut WsClient<TcpStream>) -> ExecFrames {
    let mut out = ExecFrames {
        stdout: Vec::new(),
        stderr: Vec::new(),
        error: Vec::new(),
        pong: None,
    };
    loop {
        match ws.recv().await.expect("open until close") {
            (0x2, msg) => match msg.split_first() {
                Some((1, data)) => out.stdout.extend_from_slice(data),
                Some((2, data)) => out.stderr.extend_from_slice(data),
                Some((3, data)) => out.error.extend_from_slice(data),
                other => panic!("unexpected message {other:?}"),
            },
            (0xa, payload) => out.pong = Some(payload),
            (0x8, payload) => {
                assert_eq!(payload, 1000u16.to_be_bytes());
                return out;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

#[tokio::test]
async fn websocket_v5_exec_streams_stdin_and_reports_the_exit_code() {
    let server = StreamingServer::start().await.expect("start");
    let url = server.exec_url(
        exec_request(&["cat"], true, false),
        Arc::new(Shout { exit: 3 }),
    );
    let (mut ws, head) = websocket(&url, "v5.channel.k8s.io, v4.channel.k8s.io").await;
    assert_eq!(head.status, 101);
    assert_eq!(
        head.header("sec-websocket-accept"),
        Some(accept_key(KEY).as_str())
    );
    assert_eq!(
        head.header("sec-websocket-protocol"),
        Some("v5.channel.k8s.io")
    );

    // The session announces itself with an empty stdout message.
    assert_eq!(ws.recv().await, Some((0x2, vec![1])));
    ws.send(0x2, b"\x00hello ").await;
    ws.send(0x9, b"k8s-heartbeat").await;
    ws.send(0x2, b"\x00world").await;
    ws.send(0x2, &[255, 0]).await;

    let ExecFrames {
        stdout,
        stderr,
        error,
        pong,
    } = exec_frames(&mut ws).await;
    assert_eq!(stdout, b"HELLO WORLD");
    assert_eq!(stderr, b"warn\n");
    assert_eq!(pong.as_deref(), Some(&b"k8s-heartbeat"[..]));
    let status: serde_json::Value = serde_json::from_slice(&error).expect("status JSON");
    assert_eq!(status, status_json(3));

    ws.send(0x8, &1000u16.to_be_bytes()).await;
    assert_eq!(ws.recv().await, None);
}

#[tokio::test]
async fn websocket_base64_exec_with_a_terminal_sends_stderr_on_stdout() {
    let server = StreamingServer::start().await.expect("start");
    let url = server.exec_url(
        exec_request(&["ls", "/"], false, true),
        Arc::new(Shout { exit: 0 }),
    );
    let (mut ws, head) = websocket(&url, "v4.base64.channel.k8s.io").await;
    assert_eq!(
        head.header("sec-websocket-protocol"),
        Some("v4.base64.channel.k8s.io")
    );
    assert_eq!(ws.recv().await, Some((0x1, b"1".to_vec())));
    let mut stdout = Vec::new();
    let mut error = Vec::new();
    loop {
        match ws.recv().await.expect("open until close") {
            (0x1, msg) => {
                let data = super::base64::decode(&msg[1..]).expect("base64");
                match msg[0] {
                    b'1' => stdout.extend_from_slice(&data),
                    b'3' => error.extend_from_slice(&data),
                    other => panic!("unexpected channel {other}"),
                }
            }
            (0x8, _) => break,
            other => panic!("unexpected frame {other:?}"),
        }
    }
    let stdout = String::from_utf8(stdout).expect("utf-8");
    assert!(
        stdout.contains("warn\n") && stdout.contains("ls /"),
        "{stdout:?}"
    );
    let status: serde_json::Value = serde_json::from_slice(&error).expect("status JSON");
    assert_eq!(status, status_json(0));
}

#[tokio::test]
async fn unsupported_protocols_are_refused_before_upgrading() {
    let server = StreamingServer::start().await.expect("start");
    let handler = Arc::new(Shout { exit: 0 });
    let url = server.exec_url(exec_request(&["true"], false, false), handler.clone());
    let (_, head) = websocket(&url, "v9.channel.k8s.io").await;
    assert_eq!(head.status, 403);

    let url = server.exec_url(exec_request(&["true"], false, false), handler);
    let mut headers = SPDY_HEADERS.to_vec();
    headers.push(("X-Stream-Protocol-Version", "v9.channel.k8s.io"));
    let (_, head, _) = request(&url, &headers).await;
    assert_eq!(head.status, 403);
    assert_eq!(
        head.header("x-accepted-stream-protocol-versions"),
        Some("v4.channel.k8s.io")
    );
}

#[tokio::test]
async fn spdy_v4_exec_runs_once_the_streams_are_open() {
    let server = StreamingServer::start().await.expect("start");
    let url = server.exec_url(
        exec_request(&["cat"], true, false),
        Arc::new(Shout { exit: 7 }),
    );
    let mut client = spdy(&url, "v4.channel.k8s.io").await;
    // client-go's order: error, stdin, stdout, stderr.
    let error = client.open(&[("streamType", "error")]).await;
    let stdin = client.open(&[("streamType", "stdin")]).await;
    let stdout = client.open(&[("streamType", "stdout")]).await;
    let stderr = client.open(&[("streamType", "stderr")]).await;
    for id in [error, stdin, stdout, stderr] {
        let reply = client
            .until(|f| matches!(f, Frame::SynReply { stream_id, .. } if *stream_id == id))
            .await;
        assert!(matches!(reply, Frame::SynReply { fin: false, .. }));
    }
    client.data(stdin, b"abc", false).await;
    client.data(stdin, b"def", true).await;

    assert_eq!(client.read_stream(stdout, None).await, b"ABCDEF");
    assert_eq!(client.read_stream(stderr, None).await, b"warn\n");
    let status = client.read_stream(error, None).await;
    let status: serde_json::Value = serde_json::from_slice(&status).expect("status JSON");
    assert_eq!(status, status_json(7));

    let goaway = client.until(|f| matches!(f, Frame::GoAway { .. })).await;
    assert_eq!(
        goaway,
        Frame::GoAway {
            last_good_stream_id: stderr,
            status: 0
        }
    );
    assert_eq!(client.next().await, None);
}

/// One kubectl-style forwarded connection: error stream (closed at once by the client), then
/// data stream; sends `payload`, half-closes, and returns what came back with the error
/// stream's text.
async fn forward_once<S>(
    client: &mut SpdyClient<S>,
    port: u16,
    request_id: &str,
    payload: &[u8],
) -> (Vec<u8>, String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let port = port.to_string();
    let headers = |kind| {
        vec![
            ("streamType", kind),
            ("port", port.as_str()),
            ("requestID", request_id),
        ]
    };
    let error = client.open(&headers("error")).await;
    client.data(error, b"", true).await;
    let data = client.open(&headers("data")).await;
    for chunk in payload.chunks(16 * 1024) {
        client.data(data, chunk, false).await;
    }
    client.data(data, b"", true).await;
    let echoed = client.read_stream(data, None).await;
    let message = client.read_stream(error, None).await;
    (echoed, String::from_utf8(message).expect("utf-8"))
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 256) as u8).collect()
}

#[tokio::test]
async fn spdy_port_forward_copies_both_ways_past_the_window_and_reports_dial_errors() {
    let server = StreamingServer::start().await.expect("start");
    let handler = Arc::new(ToEcho {
        addr: echo_server().await,
    });
    let url = server.port_forward_url("pod-a", handler);
    let mut client = spdy(&url, "portforward.k8s.io").await;

    let (echoed, message) = forward_once(&mut client, 8080, "0", b"ping").await;
    assert_eq!((echoed.as_slice(), message.as_str()), (&b"ping"[..], ""));

    // More than a 64 KiB window each way, from a client that never sends WINDOW_UPDATE.
    let big = payload(200 * 1024);
    let (echoed, message) = forward_once(&mut client, 8080, "1", &big).await;
    assert_eq!(echoed.len(), big.len());
    assert!(echoed == big && message.is_empty());
    let acknowledged: u32 = client
        .seen
        .iter()
        .filter_map(|f| match f {
            Frame::WindowUpdate {
                stream_id: 0,
                delta,
            } => Some(*delta),
            _ => None,
        })
        .sum();
    assert!(acknowledged >= 128 * 1024, "{acknowledged}");

    let (echoed, message) = forward_once(&mut client, 1, "2", b"lost").await;
    assert!(echoed.is_empty());
    assert_eq!(
        message,
        "error forwarding port 1 to pod pod-a, uid : connection refused"
    );

    // A stream without a port is reset, as upstream does.
    let bad = client.open(&[("streamType", "data")]).await;
    let rst = client
        .until(|f| matches!(f, Frame::RstStream { stream_id, .. } if *stream_id == bad))
        .await;
    assert!(matches!(rst, Frame::RstStream { status: 5, .. }));

    client.send(Frame::Ping { id: 1 }).await;
    client.until(|f| matches!(f, Frame::Ping { id: 1 })).await;
    client
        .send(Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        })
        .await;
    client.until(|f| matches!(f, Frame::GoAway { .. })).await;
    assert_eq!(client.next().await, None);
}

#[tokio::test]
async fn port_forward_tunnelled_in_a_websocket_works_like_plain_spdy() {
    let server = StreamingServer::start().await.expect("start");
    let handler = Arc::new(ToEcho {
        addr: echo_server().await,
    });
    let url = server.port_forward_url("pod-a", handler);
    let (ws, head) = websocket(&url, "SPDY/3.1+portforward.k8s.io").await;
    assert_eq!(head.status, 101);
    assert_eq!(
        head.header("sec-websocket-protocol"),
        Some("SPDY/3.1+portforward.k8s.io")
    );
    let mut client = SpdyClient::new(tunnel(ws), Default::default());
    let big = payload(100 * 1024);
    let (echoed, message) = forward_once(&mut client, 80, "0", &big).await;
    assert!(echoed == big && message.is_empty());
    let (_, message) = forward_once(&mut client, 1, "1", b"x").await;
    assert!(message.starts_with("error forwarding port 1 to pod pod-a"));
}

#[tokio::test]
async fn websocket_port_forward_opens_a_channel_pair_per_port() {
    let server = StreamingServer::start().await.expect("start");
    let handler = Arc::new(ToEcho {
        addr: echo_server().await,
    });
    let url = server.port_forward_url("pod-a", handler);
    let (mut ws, head) = websocket(&format!("{url}?port=8080&port=1"), "v4.channel.k8s.io").await;
    assert_eq!(head.status, 101);
    // Every channel first carries its port, little-endian.
    let mut hellos = Vec::new();
    for _ in 0..4 {
        hellos.push(ws.recv().await.expect("hello"));
    }
    let port = 8080u16.to_le_bytes();
    assert_eq!(
        hellos,
        [
            (0x2, vec![0, port[0], port[1]]),
            (0x2, vec![1, port[0], port[1]]),
            (0x2, vec![2, 1, 0]),
            (0x2, vec![3, 1, 0]),
        ]
    );
    ws.send(0x2, b"\x00hi").await;
    let mut echoed = Vec::new();
    let mut error = Vec::new();
    while echoed.len() < 2 || error.is_empty() {
        let (_, msg) = ws.recv().await.expect("message");
        match msg.split_first() {
            Some((0, data)) => echoed.extend_from_slice(data),
            Some((3, data)) => error.extend_from_slice(data),
            other => panic!("unexpected message {other:?}"),
        }
    }
    assert_eq!(echoed, b"hi");
    assert_eq!(
        String::from_utf8_lossy(&error),
        "error forwarding port 1 to pod pod-a, uid : connection refused"
    );
    ws.send(0x8, &1000u16.to_be_bytes()).await;
    assert_eq!(ws.recv().await.map(|(op, _)| op), Some(0x8));
    let mut rest = Vec::new();
    let _ = ws.io.read_to_end(&mut rest).await;
}

/// A front like the agent's for a real runtime: every websocket request is answered by
/// [`super::translate_v5`] toward the exec URL `runtime_url` (served over SPDY here by
/// tandem's own streaming server in the role of containerd's).
async fn translating_front(runtime_url: String, streams: super::Streams) -> SocketAddr {
    use std::convert::Infallible;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind front");
    let addr = listener.local_addr().expect("front addr");
    tokio::spawn(async move {
        let Ok((conn, _)) = listener.accept().await else {
            return;
        };
        let service = hyper::service::service_fn(move |req| {
            let url = runtime_url.clone();
            async move { Ok::<_, Infallible>(super::translate_v5(req, &url, streams).await) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(conn), service)
            .with_upgrades()
            .await;
    });
    addr
}

#[tokio::test]
async fn v5_is_translated_to_spdy_for_a_runtime_that_stops_at_v4() {
    let server = StreamingServer::start().await.expect("start");
    let runtime_url = server.exec_url(
        exec_request(&["cat"], true, false),
        Arc::new(Shout { exit: 3 }),
    );
    let streams = super::Streams {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let front = translating_front(runtime_url, streams).await;
    let (mut ws, head) = websocket(&format!("http://{front}/exec"), "v5.channel.k8s.io").await;
    assert_eq!(head.status, 101);
    assert_eq!(
        head.header("sec-websocket-protocol"),
        Some("v5.channel.k8s.io")
    );
    assert_eq!(ws.recv().await, Some((0x2, vec![1])));
    ws.send(0x2, b"\x00hello ").await;
    ws.send(0x2, b"\x00world").await;
    // The command reads stdin to its end: only the close signal lets it finish.
    ws.send(0x2, &[255, 0]).await;

    let ExecFrames {
        stdout,
        stderr,
        error,
        pong,
    } = exec_frames(&mut ws).await;
    assert_eq!(pong, None);
    assert_eq!(stdout, b"HELLO WORLD");
    assert_eq!(stderr, b"warn\n");
    let status: serde_json::Value = serde_json::from_slice(&error).expect("status JSON");
    assert_eq!(status, status_json(3));
    ws.send(0x8, &1000u16.to_be_bytes()).await;
    assert_eq!(ws.recv().await, None);
}

#[tokio::test]
async fn a_spent_runtime_token_is_refused_before_the_client_upgrades() {
    let server = StreamingServer::start().await.expect("start");
    let runtime_url = server.exec_url(
        exec_request(&["true"], false, false),
        Arc::new(Shout { exit: 0 }),
    );
    // Spend the token.
    let (_, head, _) = request(&runtime_url, &[]).await;
    assert_eq!(head.status, 400);
    let streams = super::Streams {
        stdout: true,
        ..super::Streams::default()
    };
    let front = translating_front(runtime_url, streams).await;
    let (_, head) = websocket(&format!("http://{front}/exec"), "v5.channel.k8s.io").await;
    assert_eq!(head.status, 404);
}
