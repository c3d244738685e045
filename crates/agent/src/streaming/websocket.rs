//! WebSocket (RFC 6455), server side, as much as the kubelet's streaming server speaks: the
//! opening handshake's accept key, masked client frames, fragmented messages, and the control
//! frames. Upstream's server is `golang.org/x/net/websocket` (behind apimachinery's
//! `wsstream.Conn`) and its clients are gorilla/websocket (client-go): those send a ping every
//! 5 s and give up when no pong comes back within a minute (client-go `remotecommand`
//! heartbeat), so pings are answered as they arrive.

use std::io;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::base64;

/// Appended to the client's key before hashing (RFC 6455 §1.3).
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Messages larger than this close the connection (1009): kubectl sends stdin in 32 KiB pieces
/// and tunnelled SPDY frames are at most 16 MiB.
const MAX_MESSAGE: usize = 17 << 20;

pub(crate) const OP_CONTINUATION: u8 = 0x0;
pub(crate) const OP_TEXT: u8 = 0x1;
pub(crate) const OP_BINARY: u8 = 0x2;
pub(crate) const OP_CLOSE: u8 = 0x8;
pub(crate) const OP_PING: u8 = 0x9;
pub(crate) const OP_PONG: u8 = 0xa;

/// Close codes (RFC 6455 §7.4.1).
pub(crate) const CLOSE_NORMAL: u16 = 1000;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_TOO_BIG: u16 = 1009;

/// Why a websocket connection ended badly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WsError {
    #[error("websocket connection failed")]
    Io(#[from] io::Error),
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub(crate) fn accept_key(key: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(key.trim().as_bytes());
    ctx.update(ACCEPT_GUID.as_bytes());
    base64::encode(ctx.finish().as_ref())
}

/// Whether a request asks for a websocket: `Upgrade: websocket` and a `Connection` naming
/// `upgrade` (apimachinery `wsstream.IsWebSocketRequest`).
pub(crate) fn is_websocket_request(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    upgrade && connection_names_upgrade(headers)
}

/// Whether any `Connection` header lists the `upgrade` token.
pub(crate) fn connection_names_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// The subprotocols a client offers, in its order of preference.
pub(crate) fn offered_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// A data message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    Text(Bytes),
    Binary(Bytes),
}

impl Message {
    pub(crate) fn into_payload(self) -> Bytes {
        match self {
            Message::Text(b) | Message::Binary(b) => b,
        }
    }
}

/// One frame as read off the wire, unmasked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Bytes,
}

/// Takes one complete client frame off the front of `buf`; `Ok(None)` until one has arrived.
pub(crate) fn parse_client_frame(buf: &mut BytesMut) -> Result<Option<Frame>, WsError> {
    let [b0, b1, ..] = buf[..] else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(WsError::Protocol("reserved bits set without an extension"));
    }
    if b1 & 0x80 == 0 {
        // RFC 6455 §5.1: a server closes the connection on an unmasked client frame.
        return Err(WsError::Protocol("client frame is not masked"));
    }
    let (len, mut at) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
            Some(b) => (u64::from_be_bytes(b), 10),
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    if len > MAX_MESSAGE as u64 {
        return Err(WsError::Protocol("frame too large"));
    }
    let len = len as usize;
    let Some(mask) = buf
        .get(at..at + 4)
        .and_then(|m| <[u8; 4]>::try_from(m).ok())
    else {
        return Ok(None);
    };
    at += 4;
    if buf.len() < at + len {
        buf.reserve(at + len - buf.len());
        return Ok(None);
    }
    let opcode = b0 & 0x0f;
    let fin = b0 & 0x80 != 0;
    if opcode >= 0x8 && (!fin || len > 125) {
        return Err(WsError::Protocol("control frame fragmented or too long"));
    }
    buf.advance(at);
    let mut payload = buf.split_to(len);
    for (i, byte) in payload.iter_mut().enumerate() {
        *byte ^= mask[i % 4];
    }
    Ok(Some(Frame {
        fin,
        opcode,
        payload: payload.freeze(),
    }))
}

/// An unmasked server frame with `payload`.
pub(crate) fn encode_server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;
type BoxRead = Box<dyn AsyncRead + Send + Unpin>;

/// The sending half; cheap to clone, frames from clones never interleave.
#[derive(Clone)]
pub(crate) struct WsWriter {
    inner: Arc<Mutex<WriterState>>,
}

struct WriterState {
    io: BoxWrite,
    close_sent: bool,
}

impl WsWriter {
    pub(crate) fn new(io: impl AsyncWrite + Send + Unpin + 'static) -> WsWriter {
        WsWriter {
            inner: Arc::new(Mutex::new(WriterState {
                io: Box::new(io),
                close_sent: false,
            })),
        }
    }

    /// Sends one unfragmented frame. Data after our close frame is refused (RFC 6455 §5.5.1).
    pub(crate) async fn send(&self, opcode: u8, payload: &[u8]) -> io::Result<()> {
        let mut state = self.inner.lock().await;
        if state.close_sent {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "websocket close already sent",
            ));
        }
        if opcode == OP_CLOSE {
            state.close_sent = true;
        }
        state
            .io
            .write_all(&encode_server_frame(opcode, payload))
            .await?;
        state.io.flush().await
    }

    pub(crate) async fn binary(&self, payload: &[u8]) -> io::Result<()> {
        self.send(OP_BINARY, payload).await
    }

    /// Sends a close frame with `code` unless one was sent already.
    pub(crate) async fn close(&self, code: u16) -> io::Result<()> {
        if self.inner.lock().await.close_sent {
            return Ok(());
        }
        self.send(OP_CLOSE, &code.to_be_bytes()).await
    }

    /// Shuts the write direction of the underlying connection down.
    pub(crate) async fn shutdown(&self) -> io::Result<()> {
        self.inner.lock().await.io.shutdown().await
    }
}

/// The receiving half: yields data messages and answers control frames itself.
pub(crate) struct WsReader {
    io: BoxRead,
    buf: BytesMut,
    writer: WsWriter,
    /// Opcode and payload so far of a fragmented message.
    partial: Option<(u8, BytesMut)>,
}

impl WsReader {
    /// `writer` answers pings and close frames.
    pub(crate) fn new(io: impl AsyncRead + Send + Unpin + 'static, writer: WsWriter) -> WsReader {
        WsReader {
            io: Box::new(io),
            buf: BytesMut::with_capacity(16 * 1024),
            writer,
            partial: None,
        }
    }

    /// The next data message; `Ok(None)` once the client closed (close frame or end of stream).
    /// A protocol violation closes the connection with the matching code and is returned.
    pub(crate) async fn next_message(&mut self) -> Result<Option<Message>, WsError> {
        match self.next_message_inner().await {
            Err(WsError::Protocol(what)) => {
                let code = if what == "frame too large" || what == "message too large" {
                    CLOSE_TOO_BIG
                } else {
                    CLOSE_PROTOCOL_ERROR
                };
                let _ = self.writer.close(code).await;
                Err(WsError::Protocol(what))
            }
            other => other,
        }
    }

    async fn next_message_inner(&mut self) -> Result<Option<Message>, WsError> {
        loop {
            let Some(frame) = self.next_frame().await? else {
                return Ok(None);
            };
            match frame.opcode {
                OP_PING => {
                    // A failed pong shows up as a read error soon enough.
                    let _ = self.writer.send(OP_PONG, &frame.payload).await;
                }
                OP_PONG => {}
                OP_CLOSE => {
                    // Echo the status code, as gorilla and x/net do.
                    let code = match frame.payload.get(..2) {
                        Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]),
                        _ => CLOSE_NORMAL,
                    };
                    let _ = self.writer.close(code).await;
                    return Ok(None);
                }
                OP_TEXT | OP_BINARY => {
                    if self.partial.is_some() {
                        return Err(WsError::Protocol("new message inside a fragmented one"));
                    }
                    if frame.fin {
                        return Ok(Some(message(frame.opcode, frame.payload)));
                    }
                    self.partial = Some((frame.opcode, BytesMut::from(&frame.payload[..])));
                }
                OP_CONTINUATION => {
                    let Some((opcode, mut data)) = self.partial.take() else {
                        return Err(WsError::Protocol("continuation without a message"));
                    };
                    if data.len() + frame.payload.len() > MAX_MESSAGE {
                        return Err(WsError::Protocol("message too large"));
                    }
                    data.extend_from_slice(&frame.payload);
                    if frame.fin {
                        return Ok(Some(message(opcode, data.freeze())));
                    }
                    self.partial = Some((opcode, data));
                }
                _ => return Err(WsError::Protocol("unknown opcode")),
            }
        }
    }

    async fn next_frame(&mut self) -> Result<Option<Frame>, WsError> {
        loop {
            if let Some(frame) = parse_client_frame(&mut self.buf)? {
                return Ok(Some(frame));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(16 * 1024);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }
}

fn message(opcode: u8, payload: Bytes) -> Message {
    if opcode == OP_TEXT {
        Message::Text(payload)
    } else {
        Message::Binary(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        let mask = [0x11, 0x22, 0x33, 0x44];
        let mut out = vec![if fin { 0x80 } else { 0 } | opcode];
        if payload.len() < 126 {
            out.push(0x80 | payload.len() as u8);
        } else {
            out.push(0x80 | 126);
            out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn frames_parse_only_once_complete() {
        let wire = masked(OP_BINARY, true, &[7u8; 300]);
        let mut buf = BytesMut::from(&wire[..10]);
        assert_eq!(parse_client_frame(&mut buf).ok(), Some(None));
        buf.extend_from_slice(&wire[10..]);
        let frame = parse_client_frame(&mut buf).ok().flatten();
        assert_eq!(frame.map(|f| f.payload), Some(Bytes::from(vec![7u8; 300])));
        assert!(buf.is_empty());
    }

    #[test]
    fn unmasked_client_frames_are_refused() {
        let mut buf = BytesMut::from(&[0x82u8, 0x01, 0x00][..]);
        assert!(parse_client_frame(&mut buf).is_err());
    }

    #[tokio::test]
    async fn fragments_join_and_pings_are_answered() {
        let mut wire = masked(OP_BINARY, false, b"he");
        wire.extend(masked(OP_PING, true, b"hb"));
        wire.extend(masked(OP_CONTINUATION, true, b"llo"));
        wire.extend(masked(OP_CLOSE, true, &1000u16.to_be_bytes()));
        let (client, server) = tokio::io::duplex(4096);
        let (server_read, server_write) = tokio::io::split(server);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(&wire).await.ok();
        let writer = WsWriter::new(server_write);
        let mut reader = WsReader::new(server_read, writer);
        let first = reader.next_message().await.ok().flatten();
        assert_eq!(first, Some(Message::Binary(Bytes::from_static(b"hello"))));
        assert!(matches!(reader.next_message().await, Ok(None)));
        let mut echoed = [0u8; 8];
        client_read.read_exact(&mut echoed).await.ok();
        // A pong with the ping's payload, then the close echo.
        assert_eq!(echoed, [0x8a, 2, b'h', b'b', 0x88, 2, 0x03, 0xe8]);
    }
}
