//! Exec sessions over websocket and SPDY, as the kubelet's CRI streaming server runs them
//! (`pkg/kubelet/cri/streaming/remotecommand`: `ServeExec`, `createStreams`, the v1–v4
//! protocol handlers) with containerd as the runtime behind it.
//!
//! - Websocket: channels 0–4 are stdin, stdout, stderr, error and resize. Once upgraded, an
//!   empty message goes out on the lowest output channel the request has (stdout, else stderr,
//!   else error) to tell the client the session is up.
//! - SPDY: the client opens one stream per `streamType` (`error`, `stdin`, `stdout`, `stderr`,
//!   and `resize` with a terminal from v3 on); the command starts once all expected streams are
//!   there (30 s at most, upstream's stream creation timeout).
//! - When the command ends, output streams are closed and the error channel carries the
//!   outcome: from v4 on a JSON `Status` (success, or `NonZeroExitCode` with the code as the
//!   `ExitCode` cause, which kubectl turns into its own exit code); before v4 only a failure's
//!   message as text. containerd words a non-zero exit as `error executing command [cmd…], exit
//!   code N`. Then the connection is closed.
//!
//! With a terminal, the command's stderr goes to stdout: a terminal has only one output.
//! Terminal resizes are read and ignored (emulated commands have no terminal).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use super::channel::{CLOSE_SIGNAL, ChannelProtocol, Version};
use super::spdy_session::{Session, StreamReader, StreamWriter};
use super::websocket::{CLOSE_NORMAL, WsReader, WsWriter};
use super::{ExecHandler, ExecIo, ExecRequest};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;

/// How long the client gets to open its SPDY streams (kubelet `StreamCreationTimeout`).
const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a finished session waits for the client to close its side.
const LINGER: Duration = Duration::from_secs(10);
/// Chunks buffered between a session's streams and the command.
const PIPE_DEPTH: usize = 16;

/// SPDY exec protocols (`X-Stream-Protocol-Version`), preferred first as the kubelet lists them
/// (`SupportedRemoteCommandProtocols`).
pub(crate) const SPDY_PROTOCOLS: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// How the command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Exited(i32),
    /// The handler failed without an exit code (it panicked).
    Failed(String),
}

#[derive(Serialize)]
struct Status<'a> {
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

/// The `metav1.Status` the kubelet writes for `outcome`, with Go's field order and omissions.
fn status(command: &[String], outcome: &Outcome) -> Status<'static> {
    match outcome {
        Outcome::Exited(0) => Status {
            metadata: Empty {},
            status: "Success",
            message: None,
            reason: None,
            details: None,
            code: None,
        },
        Outcome::Exited(code) => Status {
            metadata: Empty {},
            status: "Failure",
            message: Some(format!(
                "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                command.join(" ")
            )),
            reason: Some("NonZeroExitCode"),
            details: Some(Details {
                causes: vec![Cause {
                    reason: Some("ExitCode"),
                    message: code.to_string(),
                }],
            }),
            code: None,
        },
        Outcome::Failed(why) => {
            let cause = format!("error executing command in container: {why}");
            Status {
                metadata: Empty {},
                status: "Failure",
                message: Some(format!("Internal error occurred: {cause}")),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: cause,
                    }],
                }),
                code: Some(500),
            }
        }
    }
}

/// What goes on the error channel: the JSON status from v4 on, before that a failure's message
/// alone (kubelet `v4WriteStatusFunc` / `v1WriteStatusFunc`).
pub(crate) fn error_channel_payload(
    command: &[String],
    outcome: &Outcome,
    json: bool,
) -> Option<Vec<u8>> {
    let status = status(command, outcome);
    if json {
        serde_json::to_vec(&status).ok()
    } else {
        status.message.map(String::into_bytes)
    }
}

/// Runs the handler to completion with its output drained into `stdout`/`stderr` sinks,
/// unless `gone` (the client disconnecting) comes first, which aborts it.
async fn run_command<Out, Err, OutFut, ErrFut>(
    req: &ExecRequest,
    handler: Arc<dyn ExecHandler>,
    stdin: Option<mpsc::Receiver<Bytes>>,
    stdout_sink: Out,
    stderr_sink: Err,
    gone: impl Future<Output = ()>,
) -> Option<Outcome>
where
    Out: FnOnce(mpsc::Receiver<Bytes>) -> OutFut,
    Err: FnOnce(mpsc::Receiver<Bytes>) -> ErrFut,
    OutFut: Future<Output = ()>,
    ErrFut: Future<Output = ()>,
{
    let (stdout, stdout_rx) = mpsc::channel(PIPE_DEPTH);
    let (stderr, stderr_rx) = mpsc::channel(PIPE_DEPTH);
    let io = ExecIo {
        command: req.command.clone(),
        tty: req.tty,
        stdin,
        stdout,
        stderr,
    };
    let task = tokio::spawn(async move { handler.exec(io).await });
    let abort = task.abort_handle();
    let finished = async {
        let (code, (), ()) = tokio::join!(task, stdout_sink(stdout_rx), stderr_sink(stderr_rx));
        match code {
            Ok(code) => Outcome::Exited(code),
            Err(e) => Outcome::Failed(e.to_string()),
        }
    };
    tokio::select! {
        outcome = finished => Some(outcome),
        () = gone => {
            abort.abort();
            None
        }
    }
}

/// Serves an upgraded websocket exec connection that negotiated `proto`.
pub(crate) async fn serve_websocket<IO>(
    io: IO,
    proto: ChannelProtocol,
    req: ExecRequest,
    handler: Arc<dyn ExecHandler>,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let writer = WsWriter::new(write);
    let mut reader = WsReader::new(read, writer.clone());

    let first_output = if req.stdout {
        STDOUT
    } else if req.stderr && !req.tty {
        STDERR
    } else {
        ERROR
    };
    let (op, hello) = proto.encode(first_output, &[]);
    if writer.send(op, &hello).await.is_err() {
        return;
    }

    let (stdin_tx, stdin_rx) = mpsc::channel::<Bytes>(PIPE_DEPTH);
    let mut stdin_tx = req.stdin.then_some(stdin_tx);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel::<()>();
    let read_task = tokio::spawn(async move {
        loop {
            let message = match reader.next_message().await {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "exec websocket read failed");
                    break;
                }
            };
            match proto.decode(message) {
                Some((STDIN, data)) => {
                    if let Some(tx) = &stdin_tx
                        && tx.send(data).await.is_err()
                    {
                        stdin_tx = None;
                    }
                }
                Some((CLOSE_SIGNAL, data))
                    if proto.version == Version::V5 && data.first() == Some(&STDIN) =>
                {
                    stdin_tx = None;
                }
                // Resize events and channels the client may not write to are dropped.
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });

    let stderr_channel = if req.tty { STDOUT } else { STDERR };
    let out_enabled = req.stdout;
    let err_enabled = if req.tty { req.stdout } else { req.stderr };
    let out_writer = writer.clone();
    let err_writer = writer.clone();
    let outcome = run_command(
        &req,
        handler,
        req.stdin.then_some(stdin_rx),
        move |rx| ws_pump(rx, out_writer, proto, STDOUT, out_enabled),
        move |rx| ws_pump(rx, err_writer, proto, stderr_channel, err_enabled),
        async {
            let _ = gone_rx.await;
        },
    )
    .await;

    if let Some(outcome) = outcome {
        let json = proto.version >= Version::V4;
        if let Some(payload) = error_channel_payload(&req.command, &outcome, json) {
            let (op, message) = proto.encode(ERROR, &payload);
            let _ = writer.send(op, &message).await;
        }
        let _ = writer.close(CLOSE_NORMAL).await;
        // The client answers with its own close frame; then the connection can go.
        let _ = tokio::time::timeout(LINGER, read_task).await;
    } else {
        read_task.abort();
    }
    let _ = writer.shutdown().await;
}

/// Copies a command's output to a websocket channel (or drops it when `enabled` is false).
async fn ws_pump(
    mut rx: mpsc::Receiver<Bytes>,
    writer: WsWriter,
    proto: ChannelProtocol,
    channel: u8,
    mut enabled: bool,
) {
    while let Some(chunk) = rx.recv().await {
        if enabled && !chunk.is_empty() {
            let (op, message) = proto.encode(channel, &chunk);
            enabled = writer.send(op, &message).await.is_ok();
        }
    }
}

/// The streams of a SPDY exec session, by type.
#[derive(Default)]
struct SpdyStreams {
    error: Option<StreamWriter>,
    stdin: Option<StreamReader>,
    stdout: Option<StreamWriter>,
    stderr: Option<StreamWriter>,
}

/// Waits for the client to open the streams `req` calls for, accepting each.
async fn collect_streams(
    session: &mut Session,
    req: &ExecRequest,
    protocol: &str,
) -> Option<SpdyStreams> {
    let resizable = req.tty && protocol != "v2.channel.k8s.io" && protocol != "channel.k8s.io";
    let wanted = |kind: &str| match kind {
        "error" => true,
        "stdin" => req.stdin,
        "stdout" => req.stdout,
        "stderr" => req.stderr && !req.tty,
        "resize" => resizable,
        _ => false,
    };
    let expected = ["error", "stdin", "stdout", "stderr", "resize"]
        .iter()
        .filter(|k| wanted(k))
        .count();
    let mut streams = SpdyStreams::default();
    let mut resize_seen = false;
    let mut received = 0;
    let deadline = tokio::time::sleep(STREAM_CREATION_TIMEOUT);
    tokio::pin!(deadline);
    while received < expected {
        let incoming = tokio::select! {
            s = session.accept() => s?,
            () = &mut deadline => {
                tracing::debug!("timed out waiting for client to create streams");
                return None;
            }
        };
        let kind = incoming
            .header("streamtype")
            .unwrap_or_default()
            .to_string();
        let (reader, writer) = incoming.accept();
        if !wanted(&kind) {
            tracing::debug!(stream_type = %kind, "unexpected exec stream ignored");
            continue;
        }
        let slot_was_empty = match kind.as_str() {
            "error" => streams.error.replace(writer).is_none(),
            "stdin" => streams.stdin.replace(reader).is_none(),
            "stdout" => streams.stdout.replace(writer).is_none(),
            "stderr" => streams.stderr.replace(writer).is_none(),
            // Resize events are discarded unread.
            _ => !std::mem::replace(&mut resize_seen, true),
        };
        if slot_was_empty {
            received += 1;
        }
    }
    session.stop_accepting();
    Some(streams)
}

/// Serves an upgraded SPDY exec connection that negotiated `protocol` (one of
/// [`SPDY_PROTOCOLS`]).
pub(crate) async fn serve_spdy<IO>(
    io: IO,
    protocol: &'static str,
    req: ExecRequest,
    handler: Arc<dyn ExecHandler>,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let mut session = Session::start(read, write);
    let Some(streams) = collect_streams(&mut session, &req, protocol).await else {
        session.shutdown(Duration::ZERO).await;
        return;
    };
    let SpdyStreams {
        error,
        stdin,
        stdout,
        stderr,
    } = streams;

    let stdin_rx = stdin.map(|mut reader| {
        let (tx, rx) = mpsc::channel(PIPE_DEPTH);
        tokio::spawn(async move {
            while let Some(chunk) = reader.recv().await {
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
        });
        rx
    });
    let err_target = if req.tty {
        stdout.clone()
    } else {
        stderr.clone()
    };
    let mut closed = session.closed_signal();
    let outcome = run_command(
        &req,
        handler,
        stdin_rx,
        |rx| spdy_pump(rx, stdout.clone()),
        |rx| spdy_pump(rx, err_target),
        async {
            let _ = closed.wait_for(|c| *c).await;
        },
    )
    .await;

    if let Some(outcome) = outcome {
        for writer in [&stdout, &stderr].into_iter().flatten() {
            writer.finish();
        }
        if let Some(error) = error {
            let json = protocol == "v4.channel.k8s.io";
            if let Some(payload) = error_channel_payload(&req.command, &outcome, json) {
                let _ = error.write(Bytes::from(payload)).await;
            }
            error.finish();
        }
    }
    session.shutdown(LINGER).await;
}

/// Copies a command's output to a SPDY stream (or drops it without one).
async fn spdy_pump(mut rx: mpsc::Receiver<Bytes>, mut writer: Option<StreamWriter>) {
    while let Some(chunk) = rx.recv().await {
        if let Some(w) = &writer
            && w.write(chunk).await.is_err()
        {
            writer = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|s| s.to_string()).collect()
    }

    fn payload(outcome: Outcome, json: bool) -> Option<String> {
        error_channel_payload(&cmd(&["sh", "-c", "exit 3"]), &outcome, json)
            .and_then(|b| String::from_utf8(b).ok())
    }

    #[test]
    fn success_is_the_bare_v4_status() {
        assert_eq!(
            payload(Outcome::Exited(0), true).as_deref(),
            Some(r#"{"metadata":{},"status":"Success"}"#)
        );
        assert_eq!(payload(Outcome::Exited(0), false), None);
    }

    #[test]
    fn non_zero_exit_carries_the_code_as_kubectl_reads_it() {
        assert_eq!(
            payload(Outcome::Exited(3), true).as_deref(),
            Some(concat!(
                r#"{"metadata":{},"status":"Failure","message":"command terminated with "#,
                r#"non-zero exit code: error executing command [sh -c exit 3], exit code 3","#,
                r#""reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","#,
                r#""message":"3"}]}}"#
            ))
        );
        assert_eq!(
            payload(Outcome::Exited(3), false).as_deref(),
            Some(
                "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
            )
        );
    }

    #[test]
    fn a_failed_handler_is_an_internal_error() {
        let json = payload(Outcome::Failed("boom".into()), true).unwrap_or_default();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        assert_eq!(value["reason"], "InternalError");
        assert_eq!(value["code"], 500);
        assert_eq!(
            value["message"],
            "Internal error occurred: error executing command in container: boom"
        );
    }
}
