//! Test clients for the streaming server: a raw HTTP upgrade, a websocket client that masks
//! its frames as RFC 6455 requires of clients, and a SPDY client over any byte stream.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;

use super::spdy::{self, Frame, Headers};
use super::spdy_zlib::{HeaderCompressor, HeaderDecompressor};

/// How long a test waits for anything before it fails.
pub(super) const PATIENCE: Duration = Duration::from_secs(10);

/// An HTTP/1.1 response head.
pub(super) struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends a GET for `url` (an `http://127.0.0.1:PORT/path?query` URL) with `headers` and
/// reads the response head; returns the connection and any bytes read past the head.
pub(super) async fn request(url: &str, headers: &[(&str, &str)]) -> (TcpStream, Head, BytesMut) {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(authority).await.expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .expect("write request");
    let mut buf = BytesMut::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = tokio::time::timeout(PATIENCE, stream.read_buf(&mut buf))
            .await
            .expect("response in time")
            .expect("read response");
        assert!(n > 0, "connection closed before the response head");
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.advance(end + 4);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    (stream, Head { status, headers }, buf)
}

/// A websocket client over any byte stream.
pub(super) struct WsClient<S> {
    pub io: S,
    pub buf: BytesMut,
}

pub(super) const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// Opens a websocket to `url` offering `protocols` (comma-separated, or empty for none).
pub(super) async fn websocket(url: &str, protocols: &str) -> (WsClient<TcpStream>, Head) {
    let mut headers = vec![
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Version", "13"),
    ];
    if !protocols.is_empty() {
        headers.push(("Sec-WebSocket-Protocol", protocols));
    }
    let (io, head, buf) = request(url, &headers).await;
    (WsClient { io, buf }, head)
}

impl<S: AsyncRead + AsyncWrite + Unpin> WsClient<S> {
    /// Sends one masked frame.
    pub(super) async fn send(&mut self, opcode: u8, payload: &[u8]) {
        let mask = [0x5a, 0xc3, 0x01, 0xfe];
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.io.write_all(&frame).await.expect("send frame");
    }

    /// The next server frame as (opcode, payload); `None` at end of stream.
    pub(super) async fn recv(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let len7 = usize::from(self.buf[1] & 0x7f);
                assert_eq!(self.buf[1] & 0x80, 0, "server frames are not masked");
                let (len, at) = match len7 {
                    126 if self.buf.len() >= 4 => (
                        usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                        4,
                    ),
                    127 if self.buf.len() >= 10 => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&self.buf[2..10]);
                        (u64::from_be_bytes(b) as usize, 10)
                    }
                    126 | 127 => (usize::MAX, 0),
                    n => (n, 2),
                };
                if len != usize::MAX && self.buf.len() >= at + len {
                    assert_eq!(self.buf[0] & 0x80, 0x80, "server frames are not fragmented");
                    let opcode = self.buf[0] & 0x0f;
                    self.buf.advance(at);
                    return Some((opcode, self.buf.split_to(len).to_vec()));
                }
            }
            let n = tokio::time::timeout(PATIENCE, self.io.read_buf(&mut self.buf))
                .await
                .expect("frame in time")
                .expect("read frame");
            if n == 0 {
                return None;
            }
        }
    }
}

/// Carries a byte stream inside binary websocket messages, as client-go's
/// `TunnelingConnection` does: returns the end to run SPDY over.
pub(super) fn tunnel(mut ws: WsClient<TcpStream>) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let (mut read, mut write) = tokio::io::split(ours);
        let mut chunk = vec![0u8; 32 * 1024];
        loop {
            tokio::select! {
                n = read.read(&mut chunk) => match n {
                    Ok(0) | Err(_) => {
                        ws.send(0x8, &1000u16.to_be_bytes()).await;
                        break;
                    }
                    Ok(n) => ws.send(0x2, &chunk[..n]).await,
                },
                frame = ws.recv() => match frame {
                    Some((0x2, data)) => {
                        if write.write_all(&data).await.is_err() {
                            break;
                        }
                    }
                    Some((0x8, _)) | None => {
                        let _ = write.shutdown().await;
                        // Drain what the session still writes, then close.
                        let _ = read.read_to_end(&mut Vec::new()).await;
                        ws.send(0x8, &1000u16.to_be_bytes()).await;
                        break;
                    }
                    Some(_) => {}
                },
            }
        }
    });
    theirs
}

/// A SPDY client: frames out, frames in, with its own zlib streams.
pub(super) struct SpdyClient<S> {
    io: S,
    buf: BytesMut,
    deflater: HeaderCompressor,
    inflater: HeaderDecompressor,
    next_id: u32,
    /// Frames read while looking for others.
    pub seen: Vec<Frame>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> SpdyClient<S> {
    pub(super) fn new(io: S, leftover: BytesMut) -> SpdyClient<S> {
        SpdyClient {
            io,
            buf: leftover,
            deflater: HeaderCompressor::default(),
            inflater: HeaderDecompressor::default(),
            next_id: 1,
            seen: Vec::new(),
        }
    }

    pub(super) async fn send(&mut self, frame: Frame) {
        let mut wire = Vec::new();
        spdy::encode(&frame, &mut self.deflater, &mut wire);
        self.io.write_all(&wire).await.expect("send SPDY frame");
    }

    /// Opens a stream with `headers`, as spdystream's `CreateStream`; returns its id.
    pub(super) async fn open(&mut self, headers: &[(&str, &str)]) -> u32 {
        let stream_id = self.next_id;
        self.next_id += 2;
        let headers: Headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.send(Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers,
        })
        .await;
        stream_id
    }

    pub(super) async fn data(&mut self, stream_id: u32, data: &[u8], fin: bool) {
        self.send(Frame::Data {
            stream_id,
            fin,
            data: Bytes::copy_from_slice(data),
        })
        .await;
    }

    /// The next frame from the server; `None` at end of stream.
    pub(super) async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) =
                spdy::decode(&mut self.buf, &mut self.inflater).expect("valid SPDY from server")
            {
                return Some(frame);
            }
            let n = tokio::time::timeout(PATIENCE, self.io.read_buf(&mut self.buf))
                .await
                .expect("SPDY frame in time")
                .expect("read SPDY");
            if n == 0 {
                return None;
            }
        }
    }

    /// The first frame `want` matches, from those set aside earlier or else read now; the
    /// frames read past are set aside in `seen`.
    pub(super) async fn until(&mut self, want: impl Fn(&Frame) -> bool) -> Frame {
        if let Some(i) = self.seen.iter().position(&want) {
            return self.seen.remove(i);
        }
        loop {
            let frame = self.next().await.expect("connection open");
            if want(&frame) {
                return frame;
            }
            self.seen.push(frame);
        }
    }

    /// Reads `stream_id`'s data until its FIN (or until `limit` bytes when given).
    pub(super) async fn read_stream(&mut self, stream_id: u32, limit: Option<usize>) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            if limit.is_some_and(|l| out.len() >= l) {
                return out;
            }
            match self
                .until(|f| matches!(f, Frame::Data { stream_id: id, .. } if *id == stream_id))
                .await
            {
                Frame::Data { fin, data, .. } => {
                    out.extend_from_slice(&data);
                    if fin {
                        return out;
                    }
                }
                _ => unreachable!(),
            }
        }
    }
}
