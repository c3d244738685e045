//! One SPDY/3.1 session: the counterpart of moby/spdystream's `Connection` as apimachinery's
//! `httpstream/spdy` drives it. Server side (for kubectl): the client opens every stream with
//! SYN_STREAM; the server answers an accepted one with an empty SYN_REPLY (spdystream's
//! `CreateStream` waits for it) or refuses it with RST_STREAM. Client side
//! ([`Session::start_client`], for a runtime's streaming server behind the agent): streams are
//! opened with [`Session::open`], which waits for that reply. DATA with FIN half-closes a
//! stream, the peer's PINGs are echoed, GOAWAY stops new streams.
//!
//! Flow control (SPDY/3.1 §2.6.8): data the application consumes is acknowledged with
//! WINDOW_UPDATE, for the stream and for the connection, each time half a window's worth has
//! been consumed. Sending respects the peer's windows once the peer shows it keeps them, by
//! sending SETTINGS_INITIAL_WINDOW_SIZE or any WINDOW_UPDATE. spdystream does neither, and it
//! ignores the windows of what it sends, so with kubectl the windows are counted but never
//! waited on: waiting would stall every transfer past 64 KiB for good. What keeps memory
//! bounded then is TCP: a stream holds at most one window of unread data before the session
//! stops reading the connection, as spdystream's unbuffered stream channels do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::spdy::{
    DEFAULT_WINDOW, Frame, Headers, RST_PROTOCOL_ERROR, RST_REFUSED_STREAM,
    SETTINGS_INITIAL_WINDOW_SIZE, decode, encode, header,
};
use super::spdy_zlib::{HeaderCompressor, HeaderDecompressor};

/// Our receive window, per stream and for the connection; never changed by SETTINGS.
const RECV_WINDOW: u32 = DEFAULT_WINDOW;
/// The largest DATA frame sent.
const MAX_DATA_FRAME: usize = 32 * 1024;
/// DATA bytes queued for the socket before senders wait.
const WRITE_BUDGET: usize = 256 * 1024;
/// Bytes of encoded frames gathered into one socket write.
const WRITE_BATCH: usize = 64 * 1024;
/// GOAWAY status OK.
const GOAWAY_OK: u32 = 0;
/// GOAWAY status PROTOCOL_ERROR.
const GOAWAY_PROTOCOL_ERROR: u32 = 1;

/// A write on a stream that was reset, finished, or whose session is gone.
#[derive(Debug, thiserror::Error)]
#[error("SPDY stream {0} is closed")]
pub(crate) struct StreamClosed(pub u32);

/// A running session. Dropping it tears the connection down at once; [`Session::shutdown`]
/// ends it cleanly.
pub(crate) struct Session {
    shared: Arc<Shared>,
    incoming: mpsc::UnboundedReceiver<IncomingStream>,
    closed: watch::Receiver<bool>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled whenever a send window grows or a stream or the session closes.
    window_changed: Notify,
    out: mpsc::UnboundedSender<Outgoing>,
    write_budget: Arc<Semaphore>,
}

enum Outgoing {
    Frame(Frame, Option<OwnedSemaphorePermit>),
    /// Flush, then shut the write direction down.
    Shutdown,
}

struct State {
    streams: HashMap<u32, StreamState>,
    conn_send_window: i64,
    initial_send_window: i64,
    /// The peer sent SETTINGS_INITIAL_WINDOW_SIZE or WINDOW_UPDATE: its windows bind us.
    peer_flow_control: bool,
    conn_recv_unacked: u32,
    last_peer_stream: u32,
    /// The connection is gone (peer EOF, read or write error).
    closed: bool,
    /// GOAWAY went out or came in: no new streams.
    going_away: bool,
    /// This side opens the streams (odd ids) and the peer's pings have even ids.
    client: bool,
    /// The id of the next stream this side opens.
    next_local_stream: u32,
    /// Streams this side opened that await the peer's SYN_REPLY (`true`) or RST (`false`).
    pending_replies: HashMap<u32, oneshot::Sender<bool>>,
}

struct StreamState {
    send_window: i64,
    recv_unacked: u32,
    /// FIN or RST from the peer.
    remote_closed: bool,
    /// FIN or RST from us.
    local_closed: bool,
    /// The application dropped its reader; data for the stream is discarded.
    reader_gone: bool,
    inbound: Option<Inbound>,
}

#[derive(Clone)]
struct Inbound {
    tx: mpsc::UnboundedSender<(Bytes, u32)>,
    /// Bytes (capped at one window per frame) delivered but not yet consumed.
    budget: Arc<Semaphore>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send(&self, frame: Frame) {
        // After the writer ended nothing can be sent; the session is closed by then.
        let _ = self.out.send(Outgoing::Frame(frame, None));
    }

    /// Records `len` consumed bytes of `stream` (or of a discarded frame, for `None`) and
    /// acknowledges them once half a window has built up.
    fn consumed(&self, stream: Option<u32>, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let mut updates = Vec::new();
        {
            let mut st = self.lock();
            if st.closed {
                return;
            }
            st.conn_recv_unacked = st.conn_recv_unacked.saturating_add(len);
            if st.conn_recv_unacked >= RECV_WINDOW / 2 {
                updates.push((0, st.conn_recv_unacked));
                st.conn_recv_unacked = 0;
            }
            if let Some(s) = stream.and_then(|id| st.streams.get_mut(&id).map(|s| (id, s))) {
                let (id, s) = s;
                s.recv_unacked = s.recv_unacked.saturating_add(len);
                if s.recv_unacked >= RECV_WINDOW / 2 && !s.remote_closed {
                    updates.push((id, s.recv_unacked));
                    s.recv_unacked = 0;
                }
            }
        }
        for (stream_id, delta) in updates {
            self.send(Frame::WindowUpdate { stream_id, delta });
        }
    }

    /// Forgets a stream once neither side will use it again.
    fn maybe_remove(&self, st: &mut State, id: u32) {
        let done = st
            .streams
            .get(&id)
            .is_some_and(|s| s.local_closed && (s.remote_closed || s.reader_gone));
        if done {
            st.streams.remove(&id);
        }
    }

    /// The session is over: every reader sees the end, every writer an error.
    fn close(&self) {
        {
            let mut st = self.lock();
            st.closed = true;
            st.going_away = true;
            for s in st.streams.values_mut() {
                s.inbound = None;
            }
            st.pending_replies.clear();
        }
        self.write_budget.close();
        self.window_changed.notify_waiters();
    }
}

impl Session {
    /// Serves a session over an upgraded connection's two halves.
    pub(crate) fn start<R, W>(read: R, write: W) -> Session
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        Session::start_as(read, write, false)
    }

    /// Runs the client side of a session over an upgraded connection's two halves: this side
    /// opens the streams ([`Session::open`]); streams the peer opens are refused.
    pub(crate) fn start_client<R, W>(read: R, write: W) -> Session
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let mut session = Session::start_as(read, write, true);
        session.stop_accepting();
        session
    }

    fn start_as<R, W>(read: R, write: W, client: bool) -> Session
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                streams: HashMap::new(),
                conn_send_window: i64::from(DEFAULT_WINDOW),
                initial_send_window: i64::from(DEFAULT_WINDOW),
                peer_flow_control: false,
                conn_recv_unacked: 0,
                last_peer_stream: 0,
                closed: false,
                going_away: false,
                client,
                next_local_stream: 1,
                pending_replies: HashMap::new(),
            }),
            window_changed: Notify::new(),
            out: out_tx,
            write_budget: Arc::new(Semaphore::new(WRITE_BUDGET)),
        });
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let (closed_tx, closed) = watch::channel(false);
        let reader = tokio::spawn(read_loop(read, shared.clone(), incoming_tx, closed_tx));
        let writer = tokio::spawn(write_loop(write, out_rx, shared.clone()));
        Session {
            shared,
            incoming,
            closed,
            reader,
            writer,
        }
    }

    /// Opens a stream with `headers` (SYN_STREAM) and waits up to `timeout` for the peer's
    /// SYN_REPLY, as spdystream's `CreateStream` then `WaitTimeout` do. A reset, a timeout or
    /// the session's end is an error.
    pub(crate) async fn open(
        &self,
        headers: Headers,
        timeout: Duration,
    ) -> Result<(StreamReader, StreamWriter), StreamClosed> {
        let (tx, rx) = mpsc::unbounded_channel();
        let budget = Arc::new(Semaphore::new(RECV_WINDOW as usize));
        let (reply_tx, reply_rx) = oneshot::channel();
        let stream_id = {
            let mut st = self.shared.lock();
            let id = st.next_local_stream;
            if st.closed || st.going_away || id > 0x7fff_ffff {
                return Err(StreamClosed(id));
            }
            st.next_local_stream += 2;
            let send_window = st.initial_send_window;
            st.streams.insert(
                id,
                StreamState {
                    send_window,
                    recv_unacked: 0,
                    remote_closed: false,
                    local_closed: false,
                    reader_gone: false,
                    inbound: Some(Inbound {
                        tx,
                        budget: budget.clone(),
                    }),
                },
            );
            st.pending_replies.insert(id, reply_tx);
            // Sent under the lock so that stream ids reach the wire in increasing order.
            self.shared.send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers,
            });
            id
        };
        let replied = tokio::time::timeout(timeout, reply_rx).await;
        if !matches!(replied, Ok(Ok(true))) {
            let mut st = self.shared.lock();
            st.pending_replies.remove(&stream_id);
            st.streams.remove(&stream_id);
            return Err(StreamClosed(stream_id));
        }
        let reader = StreamReader {
            id: stream_id,
            rx: Some(rx),
            budget,
            shared: self.shared.clone(),
        };
        let writer = StreamWriter {
            id: stream_id,
            shared: self.shared.clone(),
        };
        Ok((reader, writer))
    }

    /// The next stream the client opened; `None` once it sent GOAWAY or the connection ended.
    pub(crate) async fn accept(&mut self) -> Option<IncomingStream> {
        self.incoming.recv().await
    }

    /// Refuses every stream opened from now on (RST_STREAM REFUSED_STREAM).
    pub(crate) fn stop_accepting(&mut self) {
        self.incoming.close();
        while let Ok(stream) = self.incoming.try_recv() {
            stream.reject(RST_REFUSED_STREAM);
        }
    }

    /// A signal that turns `true` once the client's side of the connection has ended.
    pub(crate) fn closed_signal(&self) -> watch::Receiver<bool> {
        self.closed.clone()
    }

    /// Ends the session like spdystream's `Close`: GOAWAY naming the last stream seen, then
    /// the write direction is shut once everything queued is out. Waits up to `linger` for
    /// the client to close its side (closing while its data is unread would reset the
    /// connection under data it has not read yet), then drops the connection.
    pub(crate) async fn shutdown(mut self, linger: Duration) {
        let last_good_stream_id = {
            let mut st = self.shared.lock();
            st.going_away = true;
            st.last_peer_stream
        };
        self.shared.send(Frame::GoAway {
            last_good_stream_id,
            status: GOAWAY_OK,
        });
        let _ = self.shared.out.send(Outgoing::Shutdown);
        let mut closed = self.closed.clone();
        let writer = &mut self.writer;
        let flushed_then_closed = async move {
            let _ = writer.await;
            let _ = closed.wait_for(|c| *c).await;
        };
        let _ = tokio::time::timeout(linger, flushed_then_closed).await;
        self.stop_accepting();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.shared.close();
    }
}

/// A stream the client opened, waiting to be accepted or refused. Dropped unanswered, it is
/// refused.
pub(crate) struct IncomingStream {
    pub id: u32,
    pub headers: Headers,
    reader: Option<StreamReader>,
    shared: Arc<Shared>,
}

impl IncomingStream {
    /// The value of one of the stream's headers.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Answers with an empty SYN_REPLY and hands out the stream's two directions.
    pub(crate) fn accept(mut self) -> (StreamReader, StreamWriter) {
        self.shared.send(Frame::SynReply {
            stream_id: self.id,
            fin: false,
            headers: Headers::new(),
        });
        let writer = StreamWriter {
            id: self.id,
            shared: self.shared.clone(),
        };
        let reader = self.reader.take().unwrap_or_else(|| StreamReader {
            id: self.id,
            rx: None,
            budget: Arc::new(Semaphore::new(0)),
            shared: self.shared.clone(),
        });
        (reader, writer)
    }

    /// Refuses the stream with RST_STREAM `status`, as spdystream's `Reset`.
    pub(crate) fn reject(mut self, status: u32) {
        self.refuse(status);
    }

    fn refuse(&mut self, status: u32) {
        if self.reader.take().is_none() {
            return;
        }
        self.shared.send(Frame::RstStream {
            stream_id: self.id,
            status,
        });
        let mut st = self.shared.lock();
        st.streams.remove(&self.id);
    }
}

impl Drop for IncomingStream {
    fn drop(&mut self) {
        self.refuse(RST_REFUSED_STREAM);
    }
}

/// The receiving direction of a stream.
pub(crate) struct StreamReader {
    id: u32,
    rx: Option<mpsc::UnboundedReceiver<(Bytes, u32)>>,
    budget: Arc<Semaphore>,
    shared: Arc<Shared>,
}

impl StreamReader {
    /// The next chunk the client sent; `None` after its FIN, a reset, or the session's end.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        let (data, permits) = self.rx.as_mut()?.recv().await?;
        self.budget.add_permits(permits as usize);
        self.shared.consumed(Some(self.id), data.len());
        Some(data)
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        self.budget.close();
        let mut discarded = 0;
        if let Some(rx) = self.rx.as_mut() {
            rx.close();
            while let Ok((data, _)) = rx.try_recv() {
                discarded += data.len();
            }
        }
        if discarded > 0 {
            self.shared.consumed(None, discarded);
        }
        let mut st = self.shared.lock();
        if let Some(s) = st.streams.get_mut(&self.id) {
            s.reader_gone = true;
            s.inbound = None;
        }
        self.shared.maybe_remove(&mut st, self.id);
    }
}

/// The sending direction of a stream; clones write to the same stream.
#[derive(Clone)]
pub(crate) struct StreamWriter {
    id: u32,
    shared: Arc<Shared>,
}

impl StreamWriter {
    /// Sends `data` as DATA frames, within the peer's windows when it keeps them.
    pub(crate) async fn write(&self, mut data: Bytes) -> Result<(), StreamClosed> {
        while !data.is_empty() {
            let n = self.reserve_window(data.len()).await?;
            let chunk = data.split_to(n);
            let permit = self
                .shared
                .write_budget
                .clone()
                .acquire_many_owned(n as u32)
                .await
                .map_err(|_| StreamClosed(self.id))?;
            let frame = Frame::Data {
                stream_id: self.id,
                fin: false,
                data: chunk,
            };
            self.shared
                .out
                .send(Outgoing::Frame(frame, Some(permit)))
                .map_err(|_| StreamClosed(self.id))?;
        }
        Ok(())
    }

    /// Half-closes the stream with an empty DATA frame carrying FIN (spdystream `Close`).
    /// Later calls do nothing.
    pub(crate) fn finish(&self) {
        let mut st = self.shared.lock();
        let Some(s) = st.streams.get_mut(&self.id) else {
            return;
        };
        if s.local_closed {
            return;
        }
        s.local_closed = true;
        self.shared.send(Frame::Data {
            stream_id: self.id,
            fin: true,
            data: Bytes::new(),
        });
        self.shared.maybe_remove(&mut st, self.id);
    }

    /// Waits until some of `wanted` bytes may be sent and takes them out of the windows.
    async fn reserve_window(&self, wanted: usize) -> Result<usize, StreamClosed> {
        loop {
            let notified = self.shared.window_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.shared.lock();
                if st.closed {
                    return Err(StreamClosed(self.id));
                }
                let enforce = st.peer_flow_control;
                let conn_window = st.conn_send_window;
                let Some(s) = st.streams.get_mut(&self.id).filter(|s| !s.local_closed) else {
                    return Err(StreamClosed(self.id));
                };
                let allowed = if enforce {
                    s.send_window.min(conn_window)
                } else {
                    i64::MAX
                };
                if allowed > 0 {
                    let n = wanted
                        .min(MAX_DATA_FRAME)
                        .min(usize::try_from(allowed).unwrap_or(usize::MAX));
                    s.send_window -= n as i64;
                    st.conn_send_window -= n as i64;
                    return Ok(n);
                }
            }
            notified.await;
        }
    }
}

async fn read_loop<R>(
    mut io: R,
    shared: Arc<Shared>,
    incoming: mpsc::UnboundedSender<IncomingStream>,
    closed: watch::Sender<bool>,
) where
    R: AsyncRead + Unpin,
{
    let mut inflater = HeaderDecompressor::default();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut incoming = Some(incoming);
    loop {
        let frame = match decode(&mut buf, &mut inflater) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                if buf.capacity() - buf.len() < 8 * 1024 {
                    buf.reserve(64 * 1024);
                }
                match io.read_buf(&mut buf).await {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "SPDY connection read failed");
                        break;
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "SPDY protocol error; going away");
                let last_good_stream_id = shared.lock().last_peer_stream;
                shared.send(Frame::GoAway {
                    last_good_stream_id,
                    status: GOAWAY_PROTOCOL_ERROR,
                });
                break;
            }
        };
        handle_frame(frame, &shared, &mut incoming).await;
    }
    shared.close();
    let _ = closed.send(true);
}

async fn handle_frame(
    frame: Frame,
    shared: &Arc<Shared>,
    incoming: &mut Option<mpsc::UnboundedSender<IncomingStream>>,
) {
    match frame {
        Frame::SynStream {
            stream_id,
            fin,
            headers,
            ..
        } => open_stream(stream_id, fin, headers, shared, incoming),
        Frame::Data {
            stream_id,
            fin,
            data,
        } => deliver(stream_id, fin, data, shared).await,
        Frame::Headers {
            stream_id,
            fin: true,
            ..
        } => deliver(stream_id, true, Bytes::new(), shared).await,
        Frame::SynReply { stream_id, .. } => {
            if let Some(reply) = shared.lock().pending_replies.remove(&stream_id) {
                let _ = reply.send(true);
            }
        }
        Frame::RstStream { stream_id, .. } => {
            let mut st = shared.lock();
            if let Some(reply) = st.pending_replies.remove(&stream_id) {
                let _ = reply.send(false);
            }
            if let Some(s) = st.streams.get_mut(&stream_id) {
                s.remote_closed = true;
                s.local_closed = true;
                s.inbound = None;
            }
            shared.maybe_remove(&mut st, stream_id);
            drop(st);
            shared.window_changed.notify_waiters();
        }
        Frame::Settings { entries } => {
            let mut st = shared.lock();
            for (id, value) in entries {
                if id == SETTINGS_INITIAL_WINDOW_SIZE {
                    let value = i64::from(value & 0x7fff_ffff);
                    let delta = value - st.initial_send_window;
                    st.initial_send_window = value;
                    st.peer_flow_control = true;
                    for s in st.streams.values_mut() {
                        s.send_window += delta;
                    }
                }
            }
            drop(st);
            shared.window_changed.notify_waiters();
        }
        Frame::WindowUpdate { stream_id, delta } => {
            let mut st = shared.lock();
            st.peer_flow_control = true;
            if stream_id == 0 {
                st.conn_send_window += i64::from(delta);
            } else if let Some(s) = st.streams.get_mut(&stream_id) {
                s.send_window += i64::from(delta);
            }
            drop(st);
            shared.window_changed.notify_waiters();
        }
        // The peer's pings are echoed: a client's have odd ids, a server's even ones; the
        // others would answer pings of ours, never sent here.
        Frame::Ping { id } if id.is_multiple_of(2) == shared.lock().client => {
            shared.send(Frame::Ping { id })
        }
        Frame::GoAway { .. } => {
            shared.lock().going_away = true;
            *incoming = None;
        }
        Frame::Ping { .. } | Frame::Headers { .. } | Frame::Unknown { .. } => {}
    }
}

fn open_stream(
    stream_id: u32,
    fin: bool,
    headers: Headers,
    shared: &Arc<Shared>,
    incoming: &mut Option<mpsc::UnboundedSender<IncomingStream>>,
) {
    let refusal = {
        let mut st = shared.lock();
        if stream_id.is_multiple_of(2) != st.client || stream_id <= st.last_peer_stream {
            // spdystream's validateStreamId: client ids are odd, server ids even, and they
            // increase.
            Some(RST_PROTOCOL_ERROR)
        } else {
            st.last_peer_stream = stream_id;
            if st.going_away || incoming.is_none() {
                Some(RST_REFUSED_STREAM)
            } else {
                None
            }
        }
    };
    if let Some(status) = refusal {
        shared.send(Frame::RstStream { stream_id, status });
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let budget = Arc::new(Semaphore::new(RECV_WINDOW as usize));
    {
        let mut st = shared.lock();
        let send_window = st.initial_send_window;
        st.streams.insert(
            stream_id,
            StreamState {
                send_window,
                recv_unacked: 0,
                remote_closed: fin,
                local_closed: false,
                reader_gone: false,
                inbound: (!fin).then(|| Inbound {
                    tx,
                    budget: budget.clone(),
                }),
            },
        );
    }
    let stream = IncomingStream {
        id: stream_id,
        headers,
        reader: Some(StreamReader {
            id: stream_id,
            rx: Some(rx),
            budget,
            shared: shared.clone(),
        }),
        shared: shared.clone(),
    };
    if let Some(Err(mpsc::error::SendError(stream))) = incoming.as_ref().map(|tx| tx.send(stream)) {
        // The application stopped accepting: dropping the stream refuses it.
        drop(stream);
        *incoming = None;
    }
}

/// Hands a DATA frame's payload to the stream's reader. Waits while the reader already holds a
/// window's worth of unread data, which stops the connection being read.
async fn deliver(stream_id: u32, fin: bool, data: Bytes, shared: &Arc<Shared>) {
    let inbound = {
        let mut st = shared.lock();
        match st.streams.get_mut(&stream_id) {
            Some(s) if !s.remote_closed => {
                if fin {
                    s.remote_closed = true;
                    s.inbound.take()
                } else {
                    s.inbound.clone()
                }
            }
            _ => None,
        }
    };
    let len = data.len();
    let delivered = match inbound {
        Some(inbound) if len > 0 => {
            let permits = len.min(RECV_WINDOW as usize) as u32;
            match inbound.budget.acquire_many(permits).await {
                Ok(permit) => {
                    permit.forget();
                    inbound.tx.send((data, permits)).is_ok()
                }
                Err(_) => false,
            }
        }
        _ => false,
    };
    if !delivered && len > 0 {
        shared.consumed(None, len);
    }
    if fin {
        let mut st = shared.lock();
        shared.maybe_remove(&mut st, stream_id);
    }
}

async fn write_loop<W>(mut io: W, mut rx: mpsc::UnboundedReceiver<Outgoing>, shared: Arc<Shared>)
where
    W: AsyncWrite + Unpin,
{
    let mut deflater = HeaderCompressor::default();
    let mut buf = Vec::with_capacity(WRITE_BATCH);
    let mut permits = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut shutdown = false;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Outgoing::Frame(frame, permit) => {
                    encode(&frame, &mut deflater, &mut buf);
                    permits.extend(permit);
                }
                Outgoing::Shutdown => {
                    shutdown = true;
                    break;
                }
            }
            if buf.len() < WRITE_BATCH {
                next = rx.try_recv().ok();
            }
        }
        let written = async {
            io.write_all(&buf).await?;
            io.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!(error = %e, "SPDY connection write failed");
            break;
        }
        buf.clear();
        permits.clear();
        if shutdown {
            // Frames queued after this are dropped with the channel.
            let _ = io.shutdown().await;
            return;
        }
    }
    shared.close();
}

#[cfg(test)]
mod tests {
    use tokio::io::DuplexStream;

    use super::super::spdy::{RST_CANCEL, TYPE_PING};
    use super::super::testing::SpdyClient;
    use super::*;

    fn start() -> (Session, SpdyClient<DuplexStream>) {
        let (server, client) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(server);
        (
            Session::start(read, write),
            SpdyClient::new(client, BytesMut::new()),
        )
    }

    /// Opens a stream from the client and accepts it on the server.
    async fn open(
        session: &mut Session,
        client: &mut SpdyClient<DuplexStream>,
    ) -> (u32, StreamReader, StreamWriter) {
        let id = client.open(&[("streamtype", "data")]).await;
        let incoming = session.accept().await.expect("stream arrives");
        assert_eq!(incoming.header("streamType"), Some("data"));
        let (reader, writer) = incoming.accept();
        let reply = client.until(|f| matches!(f, Frame::SynReply { .. })).await;
        assert_eq!(
            reply,
            Frame::SynReply {
                stream_id: id,
                fin: false,
                headers: Headers::new()
            }
        );
        (id, reader, writer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_keeps_windows_is_held_to_both_of_them() {
        let (mut session, mut client) = start();
        client
            .send(Frame::Settings {
                entries: vec![(SETTINGS_INITIAL_WINDOW_SIZE, 1000)],
            })
            .await;
        let (id, _reader, writer) = open(&mut session, &mut client).await;
        let sender =
            tokio::spawn(
                async move { writer.write(Bytes::from(vec![7u8; 100_000])).await.is_ok() },
            );

        assert_eq!(client.read_stream(id, Some(1000)).await.len(), 1000);
        // The paused clock only moves once every task is idle: the sender is stuck.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!sender.is_finished());

        // A wide stream window leaves the connection's 64 KiB as the limit.
        client
            .send(Frame::WindowUpdate {
                stream_id: id,
                delta: 1_000_000,
            })
            .await;
        assert_eq!(client.read_stream(id, Some(64_536)).await.len(), 64_536);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!sender.is_finished());

        client
            .send(Frame::WindowUpdate {
                stream_id: 0,
                delta: 1_000_000,
            })
            .await;
        assert_eq!(client.read_stream(id, Some(34_464)).await.len(), 34_464);
        assert!(sender.await.unwrap_or(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_without_flow_control_gets_everything_like_spdystream() {
        let (mut session, mut client) = start();
        let (id, _reader, writer) = open(&mut session, &mut client).await;
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let expected = payload.clone();
        let sender = tokio::spawn(async move {
            let sent = writer.write(Bytes::from(payload)).await.is_ok();
            writer.finish();
            sent
        });
        assert_eq!(client.read_stream(id, None).await, expected);
        assert!(sender.await.unwrap_or(false));
    }

    #[tokio::test(start_paused = true)]
    async fn consumed_data_is_acknowledged_per_stream_and_connection() {
        let (mut session, mut client) = start();
        let (id, mut reader, _writer) = open(&mut session, &mut client).await;
        for _ in 0..7 {
            client.data(id, &[1u8; 16 * 1024], false).await;
        }
        let mut total = 0;
        while total < 7 * 16 * 1024 {
            total += reader.recv().await.map_or(0, |chunk| chunk.len());
        }
        // A ping's echo comes after every update queued before it.
        client.send(Frame::Ping { id: 1 }).await;
        client.until(|f| matches!(f, Frame::Ping { id: 1 })).await;
        let acked = |stream: u32| -> u32 {
            client
                .seen
                .iter()
                .filter_map(|f| match f {
                    Frame::WindowUpdate { stream_id, delta } if *stream_id == stream => {
                        Some(*delta)
                    }
                    _ => None,
                })
                .sum()
        };
        // Three half-windows' worth of the 112 KiB consumed so far.
        assert_eq!(acked(0), 3 * 32 * 1024);
        assert_eq!(acked(id), 3 * 32 * 1024);
    }

    #[tokio::test(start_paused = true)]
    async fn resets_invalid_ids_and_refusals_reach_the_client() {
        let (mut session, mut client) = start();
        // Client stream ids are odd.
        client
            .send(Frame::SynStream {
                stream_id: 2,
                associated_to: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers: Headers::new(),
            })
            .await;
        let rst = client.until(|f| matches!(f, Frame::RstStream { .. })).await;
        assert_eq!(
            rst,
            Frame::RstStream {
                stream_id: 2,
                status: RST_PROTOCOL_ERROR
            }
        );
        let id = client.open(&[("port", "x")]).await;
        session.accept().await.expect("stream").reject(RST_CANCEL);
        let rst = client.until(|f| matches!(f, Frame::RstStream { .. })).await;
        assert_eq!(
            rst,
            Frame::RstStream {
                stream_id: id,
                status: RST_CANCEL
            }
        );
        // Even ping ids would answer server pings: never echoed. Odd ones are.
        client.send(Frame::Ping { id: 4 }).await;
        client.send(Frame::Ping { id: 5 }).await;
        let ping = client.until(|f| matches!(f, Frame::Ping { .. })).await;
        assert_eq!(ping, Frame::Ping { id: 5 });
        assert_eq!(TYPE_PING, 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_reset_fails_the_writer_and_ends_the_reader() {
        let (mut session, mut client) = start();
        let (id, mut reader, writer) = open(&mut session, &mut client).await;
        client
            .send(Frame::RstStream {
                stream_id: id,
                status: RST_CANCEL,
            })
            .await;
        assert_eq!(reader.recv().await, None);
        assert!(writer.write(Bytes::from_static(b"late")).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_sends_goaway_and_half_closes() {
        let (mut session, mut client) = start();
        let (id, _reader, _writer) = open(&mut session, &mut client).await;
        let closing = tokio::spawn(session.shutdown(Duration::from_secs(1)));
        let goaway = client.until(|f| matches!(f, Frame::GoAway { .. })).await;
        assert_eq!(
            goaway,
            Frame::GoAway {
                last_good_stream_id: id,
                status: 0
            }
        );
        assert_eq!(client.next().await, None);
        assert!(closing.await.is_ok());
    }
}
