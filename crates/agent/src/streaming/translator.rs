//! Exec and attach over websocket `v5.channel.k8s.io` for a runtime whose streaming server
//! does not speak it (containerd 1.6 knows websocket only up to `v4.channel.k8s.io`): the agent
//! answers the client's websocket itself and speaks SPDY (`v4.channel.k8s.io`) to the runtime,
//! as upstream's `StreamTranslatorHandler` does in the API server since 1.30.
//!
//! Channels map to SPDY streams one to one: 0 stdin, 1 stdout, 2 stderr, 3 error (the v4 JSON
//! `Status` passes through unchanged), 4 resize (the same JSON terminal sizes). The v5 close
//! signal (`[255, 0]`) half-closes the stdin stream with FIN, which is what v5 exists for: a
//! command reading its input to the end (`cat`, `wc`) sees it end. The session ends when the
//! runtime has closed the error stream and every output stream, or when either side goes away.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::channel::{CLOSE_SIGNAL, ChannelProtocol};
use super::spdy::Headers;
use super::spdy_session::{Session, StreamReader, StreamWriter};
use super::websocket::{CLOSE_NORMAL, WsReader, WsWriter};

/// The SPDY protocol asked of the runtime: the newest every CRI runtime's server speaks.
const RUNTIME_PROTOCOL: &str = "v4.channel.k8s.io";
/// How long the runtime gets to answer the upgrade and each stream (client-go's timeouts).
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a finished session waits for the websocket client to close its side.
const LINGER: Duration = Duration::from_secs(5);
/// The largest response head accepted from the runtime.
const MAX_HEAD: usize = 16 * 1024;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// The streams the client asked for (the runtime expects exactly these).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    /// Ignored with a terminal, whose stderr is its stdout.
    pub stderr: bool,
    pub tty: bool,
}

/// Why the runtime's session could not be opened; said to the client before its upgrade.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    #[error("the runtime's streaming URL is not http://host:port/path: {0}")]
    Url(String),
    #[error("cannot reach the runtime's streaming server: {0}")]
    Connect(#[source] std::io::Error),
    /// The runtime refused the upgrade: its status and body.
    #[error("the runtime's streaming server answered {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the runtime's streaming server did not open the {0} stream")]
    Stream(&'static str),
}

/// The SPDY side: one session to the runtime with the streams `streams` calls for.
pub struct RuntimeSession {
    session: Session,
    error: StreamReader,
    stdin: Option<StreamWriter>,
    stdout: Option<StreamReader>,
    stderr: Option<StreamReader>,
    resize: Option<StreamWriter>,
}

/// Connects to the runtime's streaming `url` (`http://127.0.0.1:PORT/exec/TOKEN`), upgrades to
/// SPDY/3.1 with `v4.channel.k8s.io` and opens the streams as client-go's v4 executor does
/// (error first, then stdin, stdout, stderr, resize).
pub async fn connect_runtime(
    url: &str,
    streams: Streams,
) -> Result<RuntimeSession, TranslateError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| TranslateError::Url(url.to_string()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut tcp = tokio::time::timeout(RUNTIME_TIMEOUT, TcpStream::connect(authority))
        .await
        .map_err(|_| TranslateError::Connect(std::io::ErrorKind::TimedOut.into()))?
        .map_err(TranslateError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: {RUNTIME_PROTOCOL}\r\nContent-Length: 0\r\n\r\n"
    );
    tcp.write_all(request.as_bytes())
        .await
        .map_err(TranslateError::Connect)?;
    let (head, leftover) = tokio::time::timeout(RUNTIME_TIMEOUT, read_head(&mut tcp))
        .await
        .map_err(|_| TranslateError::Connect(std::io::ErrorKind::TimedOut.into()))?
        .map_err(TranslateError::Connect)?;
    let status = status_code(&head);
    if status != 101 {
        let body = head
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default()
            .to_string()
            + &String::from_utf8_lossy(&leftover);
        return Err(TranslateError::Refused {
            status,
            body: body.trim().to_string(),
        });
    }
    let (read, write) = tcp.into_split();
    let read = std::io::Cursor::new(leftover).chain(read);
    let session = Session::start_client(read, write);
    let open = |kind: &'static str| {
        let headers: Headers = vec![("streamtype".to_string(), kind.to_string())];
        let session = &session;
        async move {
            session
                .open(headers, RUNTIME_TIMEOUT)
                .await
                .map_err(|_| TranslateError::Stream(kind))
        }
    };
    let (error, _) = open("error").await?;
    let stdin = match streams.stdin {
        true => Some(open("stdin").await?.1),
        false => None,
    };
    let stdout = match streams.stdout {
        true => Some(open("stdout").await?.0),
        false => None,
    };
    let stderr = match streams.stderr && !streams.tty {
        true => Some(open("stderr").await?.0),
        false => None,
    };
    let resize = match streams.tty {
        true => Some(open("resize").await?.1),
        false => None,
    };
    Ok(RuntimeSession {
        session,
        error,
        stdin,
        stdout,
        stderr,
        resize,
    })
}

/// Reads an HTTP response head; returns it (with any body bytes that came along, for an error)
/// and the bytes after it.
async fn read_head(io: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head_len = end + 4;
            let status = status_code(&String::from_utf8_lossy(&buf[..head_len]));
            if status == 101 {
                let rest = buf.split_off(head_len);
                return Ok((String::from_utf8_lossy(&buf).into_owned(), rest));
            }
            // A refusal: read what body arrives quickly, for the message.
            let _ = tokio::time::timeout(Duration::from_millis(200), async {
                while buf.len() < MAX_HEAD {
                    match io.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            })
            .await;
            return Ok((String::from_utf8_lossy(&buf).into_owned(), Vec::new()));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("response head too large"));
        }
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn status_code(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Runs the translation over the client's upgraded websocket until the session ends.
pub async fn serve<IO>(io: IO, proto: ChannelProtocol, runtime: RuntimeSession)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let writer = WsWriter::new(write);
    let mut reader = WsReader::new(read, writer.clone());
    let RuntimeSession {
        session,
        mut error,
        stdin,
        stdout,
        stderr,
        resize,
    } = runtime;

    // The kubelet's first message: an empty one on the lowest output channel, saying the
    // session is up.
    let first = if stdout.is_some() {
        STDOUT
    } else if stderr.is_some() {
        STDERR
    } else {
        ERROR
    };
    let (op, payload) = proto.encode(first, &[]);
    let _ = writer.send(op, &payload).await;

    // Client → runtime: stdin, its close signal, and terminal sizes.
    let from_client = async move {
        let mut stdin = stdin;
        while let Ok(Some(message)) = reader.next_message().await {
            let Some((channel, data)) = proto.decode(message) else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(w) = &stdin
                        && w.write(data).await.is_err()
                    {
                        stdin = None;
                    }
                }
                RESIZE => {
                    if let Some(w) = &resize {
                        let _ = w.write(data).await;
                    }
                }
                CLOSE_SIGNAL if data.first() == Some(&STDIN) => {
                    if let Some(w) = stdin.take() {
                        w.finish();
                    }
                }
                _ => {}
            }
        }
        // The client is gone (or closed): the runtime's stdin ends with it.
        if let Some(w) = stdin {
            w.finish();
        }
    };

    // Runtime → client: outputs, then the error stream's status once they are done.
    let to_client = {
        let writer = writer.clone();
        async move {
            let pump = |reader: Option<StreamReader>, channel: u8| {
                let writer = writer.clone();
                async move {
                    let Some(mut reader) = reader else {
                        return;
                    };
                    while let Some(chunk) = reader.recv().await {
                        if !send(&writer, proto, channel, &chunk).await {
                            return;
                        }
                    }
                }
            };
            let mut status = Vec::new();
            let error_done = async {
                while let Some(chunk) = error.recv().await {
                    status.extend_from_slice(&chunk);
                }
            };
            tokio::join!(pump(stdout, STDOUT), pump(stderr, STDERR), error_done);
            if !status.is_empty() {
                send(&writer, proto, ERROR, &status).await;
            }
        }
    };

    let mut read_task = tokio::spawn(from_client);
    let finished = tokio::select! {
        () = to_client => true,
        // The client left: nothing more can be delivered.
        _ = &mut read_task => false,
    };
    let _ = writer.close(CLOSE_NORMAL).await;
    if finished {
        // The client answers with its own close frame; then the connection can go.
        let _ = tokio::time::timeout(LINGER, &mut read_task).await;
    }
    read_task.abort();
    session.shutdown(Duration::ZERO).await;
    let _ = writer.shutdown().await;
}

async fn send(writer: &WsWriter, proto: ChannelProtocol, channel: u8, data: &[u8]) -> bool {
    let (op, payload) = proto.encode(channel, data);
    writer.send(op, &payload).await.is_ok()
}
