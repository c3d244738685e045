//! Port forwarding, as the kubelet's CRI streaming server serves it
//! (`pkg/kubelet/cri/streaming/portforward`) with containerd's `PortForward` behind it.
//!
//! - SPDY (`portforward.k8s.io`, every kubectl): the client opens a pair of streams per
//!   forwarded connection, `streamType: error` then `streamType: data`, both with `port` and a
//!   shared `requestID` (older clients without it are paired by stream id, as upstream does).
//!   A stream with a missing or bad `port`/`streamType` is reset. Once a pair is complete the
//!   pod's port is dialled and bytes are copied both ways; a failure to dial is written on the
//!   error stream as `error forwarding port N to pod P, uid : <cause>` (containerd names the
//!   sandbox as the pod and has no uid). Both streams are closed when the copy ends. A pair
//!   still incomplete after 30 s is dropped.
//! - SPDY tunnelled in a websocket (subprotocol `SPDY/3.1+portforward.k8s.io`, kubectl ≥ 1.31,
//!   client-go `tunneling_connection.go`): the same SPDY session, its bytes carried in binary
//!   messages.
//! - Websocket channels (`v4.channel.k8s.io`, `port` query parameters): channels `2i` (data)
//!   and `2i+1` (error) for the `i`-th port, each opened by a message holding the port as a
//!   little-endian `u16`; the websocket closes when every port's copy has ended.
//!
//! As containerd does (after socat), once one direction of a copy ends the other gets one
//! second to finish. Unlike containerd, the end of the client's data is passed on to the pod's
//! connection as a half-close.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::PortForwardHandler;
use super::channel::ChannelProtocol;
use super::spdy::RST_CANCEL;
use super::spdy_session::{IncomingStream, Session, StreamReader, StreamWriter};
use super::websocket::{CLOSE_NORMAL, Message, WsReader, WsWriter};

/// The SPDY port-forward protocol (`X-Stream-Protocol-Version`).
pub(crate) const SPDY_PROTOCOL: &str = "portforward.k8s.io";
/// The websocket subprotocol of SPDY tunnelled in websocket messages.
pub(crate) const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

/// How long the other direction gets once one is done (containerd `portForward`).
const HALF_CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long the second stream of a pair may take (kubelet `StreamCreationTimeout`).
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a finished session waits for the client to close its side.
const LINGER: Duration = Duration::from_secs(5);
/// Read size on the pod side.
const CHUNK: usize = 32 * 1024;

/// Where forwarded connections go: one pod, through the runtime's handler.
#[derive(Clone)]
pub(crate) struct Target {
    /// How error messages name the pod (containerd: the sandbox id).
    pub pod: String,
    pub handler: Arc<dyn PortForwardHandler>,
}

impl Target {
    fn failure(&self, port: u16, err: &io::Error) -> String {
        format!(
            "error forwarding port {port} to pod {}, uid : {err}",
            self.pod
        )
    }
}

/// The client's side of one forwarded connection, as the copy loop reads it.
trait FromClient: Send {
    /// The next bytes from the client; `None` once it has no more.
    fn recv(&mut self) -> impl Future<Output = Option<Bytes>> + Send;
}

/// The client's side of one forwarded connection, as the copy loop writes it.
trait ToClient: Send + Sync {
    /// Sends bytes; `false` once the client cannot take any more.
    fn send(&self, data: Bytes) -> impl Future<Output = bool> + Send;
    /// No more bytes will come.
    fn finish(&self);
}

impl FromClient for StreamReader {
    async fn recv(&mut self) -> Option<Bytes> {
        StreamReader::recv(self).await
    }
}

impl ToClient for StreamWriter {
    async fn send(&self, data: Bytes) -> bool {
        self.write(data).await.is_ok()
    }

    fn finish(&self) {
        StreamWriter::finish(self);
    }
}

impl FromClient for mpsc::Receiver<Bytes> {
    async fn recv(&mut self) -> Option<Bytes> {
        mpsc::Receiver::recv(self).await
    }
}

/// One websocket channel.
struct WsChannel {
    writer: WsWriter,
    proto: ChannelProtocol,
    channel: u8,
}

impl ToClient for WsChannel {
    async fn send(&self, data: Bytes) -> bool {
        let (op, message) = self.proto.encode(self.channel, &data);
        self.writer.send(op, &message).await.is_ok()
    }

    // A v4 channel cannot be half-closed; the websocket's close ends it.
    fn finish(&self) {}
}

/// Copies between the pod's connection and the client until both directions are done, or
/// one is and the other had its grace.
async fn splice(conn: TcpStream, mut from_client: impl FromClient, to_client: &impl ToClient) {
    let (mut pod_read, mut pod_write) = conn.into_split();
    let upstream = async {
        while let Some(chunk) = from_client.recv().await {
            if pod_write.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = pod_write.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match pod_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !to_client.send(Bytes::copy_from_slice(&buf[..n])).await {
                        break;
                    }
                }
            }
        }
        to_client.finish();
    };
    tokio::pin!(upstream, downstream);
    tokio::select! {
        () = &mut upstream => {
            let _ = tokio::time::timeout(HALF_CLOSE_GRACE, &mut downstream).await;
        }
        () = &mut downstream => {
            let _ = tokio::time::timeout(HALF_CLOSE_GRACE, &mut upstream).await;
        }
    }
}

/// A forwarded connection's streams as they arrive.
#[derive(Default)]
struct Pair {
    port: u16,
    data: Option<(StreamReader, StreamWriter)>,
    error: Option<StreamWriter>,
}

/// Checks a new stream's headers (kubelet `httpStreamReceived`): its port and kind.
fn classify(stream: &IncomingStream) -> Option<(u16, bool)> {
    let port: u16 = stream.header("port")?.trim().parse().ok()?;
    if port == 0 {
        return None;
    }
    match stream.header("streamtype")? {
        "data" => Some((port, true)),
        "error" => Some((port, false)),
        _ => None,
    }
}

/// The pair a stream belongs to: its `requestID`, or for clients without one its stream id
/// (error) or the stream id less two (data), as kubelet's `requestID` guesses.
fn request_id(stream: &IncomingStream, is_data: bool) -> String {
    match stream.header("requestid") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ if is_data => (i64::from(stream.id) - 2).to_string(),
        _ => stream.id.to_string(),
    }
}

type Expiry = Pin<Box<dyn Future<Output = String> + Send>>;

/// Serves port forwarding over a SPDY session until the client goes away.
async fn serve_session<R, W>(read: R, write: W, target: Target)
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let mut session = Session::start(read, write);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut expiries: FuturesUnordered<Expiry> = FuturesUnordered::new();
    let mut forwards = JoinSet::new();
    loop {
        tokio::select! {
            incoming = session.accept() => {
                let Some(stream) = incoming else { break };
                let Some((port, is_data)) = classify(&stream) else {
                    tracing::debug!(stream = stream.id, "port-forward stream without valid port and streamType");
                    stream.reject(RST_CANCEL);
                    continue;
                };
                let id = request_id(&stream, is_data);
                let (reader, writer) = stream.accept();
                let pair = pairs.entry(id.clone()).or_insert_with(|| {
                    let expiring = id.clone();
                    expiries.push(Box::pin(async move {
                        tokio::time::sleep(PAIR_TIMEOUT).await;
                        expiring
                    }));
                    Pair { port, ..Pair::default() }
                });
                let duplicate = if is_data {
                    // Upstream forwards to the data stream's port.
                    pair.port = port;
                    pair.data.replace((reader, writer)).is_some()
                } else {
                    pair.error.replace(writer).is_some()
                };
                if duplicate {
                    tracing::debug!(request = %id, "duplicate port-forward stream replaced");
                }
                if pair.data.is_some() && pair.error.is_some()
                    && let Some(Pair { port, data: Some((reader, writer)), error: Some(error) }) = pairs.remove(&id)
                {
                    let target = target.clone();
                    forwards.spawn(forward_pair(port, reader, writer, error, target));
                }
            }
            Some(id) = expiries.next(), if !expiries.is_empty() => {
                if let Some(pair) = pairs.remove(&id) {
                    tracing::debug!(request = %id, "timed out waiting for port-forward streams");
                    if let Some(error) = pair.error {
                        let message = format!("(request={id}) timed out waiting for streams");
                        let _ = error.write(Bytes::from(message)).await;
                        error.finish();
                    }
                    if let Some((_, writer)) = pair.data {
                        writer.finish();
                    }
                }
            }
            Some(_) = forwards.join_next(), if !forwards.is_empty() => {}
        }
    }
    // GOAWAY or end of connection: let running copies finish while the connection lasts.
    let mut closed = session.closed_signal();
    tokio::select! {
        () = async { while forwards.join_next().await.is_some() {} } => {}
        _ = closed.wait_for(|c| *c) => {}
    }
    forwards.abort_all();
    session.shutdown(LINGER).await;
}

/// Dials the pod for one stream pair and copies until done; both streams end closed.
async fn forward_pair(
    port: u16,
    data_in: StreamReader,
    data_out: StreamWriter,
    error: StreamWriter,
    target: Target,
) {
    match target.handler.connect(port).await {
        Ok(conn) => splice(conn, data_in, &data_out).await,
        Err(e) => {
            let message = target.failure(port, &e);
            tracing::debug!(%message, "port-forward dial failed");
            let _ = error.write(Bytes::from(message)).await;
        }
    }
    data_out.finish();
    error.finish();
}

/// Serves an upgraded SPDY port-forward connection.
pub(crate) async fn serve_spdy<IO>(io: IO, target: Target)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    serve_session(read, write, target).await;
}

/// Serves SPDY port forwarding tunnelled in an upgraded websocket connection.
pub(crate) async fn serve_tunnel<IO>(io: IO, target: Target)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let ws_writer = WsWriter::new(write);
    let mut ws_reader = WsReader::new(read, ws_writer.clone());
    let (spdy_side, bridge_side) = tokio::io::duplex(256 * 1024);
    let (mut bridge_read, mut bridge_write) = tokio::io::split(bridge_side);

    // Client to session: the payloads of binary messages, in order.
    let inbound = tokio::spawn(async move {
        loop {
            match ws_reader.next_message().await {
                Ok(Some(Message::Binary(data))) => {
                    if bridge_write.write_all(&data).await.is_err() {
                        break;
                    }
                }
                // client-go's tunnel refuses anything else too.
                Ok(Some(Message::Text(_))) | Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "port-forward tunnel read failed");
                    break;
                }
            }
        }
        let _ = bridge_write.shutdown().await;
    });
    // Session to client: whatever the session writes, one binary message per read.
    let outbound_writer = ws_writer.clone();
    let outbound = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match bridge_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if outbound_writer.binary(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = outbound_writer.close(CLOSE_NORMAL).await;
    };
    let (spdy_read, spdy_write) = tokio::io::split(spdy_side);
    tokio::join!(serve_session(spdy_read, spdy_write, target), outbound);
    if tokio::time::timeout(LINGER, inbound).await.is_err() {
        tracing::debug!("port-forward tunnel client did not close");
    }
    let _ = ws_writer.shutdown().await;
}

/// The ports of a websocket port-forward request: every `port` query value, each possibly a
/// comma-separated list (kubelet `NewV4Options`).
pub(crate) fn query_ports(query: &str) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "port" {
            continue;
        }
        if value.is_empty() {
            return Err("query parameter \"port\" cannot be empty".to_string());
        }
        let value = value.replace("%2C", ",").replace("%2c", ",");
        for p in value.split(',') {
            match p.trim().parse::<u16>() {
                Ok(0) => return Err(format!("port \"{value}\" must be > 0")),
                Ok(port) => ports.push(port),
                Err(_) => return Err(format!("unable to parse \"{value}\" as a port")),
            }
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".to_string());
    }
    // Two channels per port, numbered in one byte.
    if ports.len() > 127 {
        return Err("too many ports".to_string());
    }
    Ok(ports)
}

/// Serves an upgraded websocket port-forward connection for `ports` over channel pairs.
pub(crate) async fn serve_websocket<IO>(
    io: IO,
    proto: ChannelProtocol,
    ports: Vec<u16>,
    target: Target,
) where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(io);
    let writer = WsWriter::new(write);
    let mut reader = WsReader::new(read, writer.clone());

    let mut inputs = Vec::with_capacity(ports.len());
    let mut forwards = JoinSet::new();
    for (i, &port) in ports.iter().enumerate() {
        let data = WsChannel {
            writer: writer.clone(),
            proto,
            channel: (2 * i) as u8,
        };
        let error = WsChannel {
            writer: writer.clone(),
            proto,
            channel: (2 * i + 1) as u8,
        };
        let hello = Bytes::copy_from_slice(&port.to_le_bytes());
        if !data.send(hello.clone()).await || !error.send(hello).await {
            return;
        }
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        inputs.push(Some(tx));
        let target = target.clone();
        forwards.spawn(async move {
            match target.handler.connect(port).await {
                Ok(conn) => splice(conn, rx, &data).await,
                Err(e) => {
                    let _ = error.send(Bytes::from(target.failure(port, &e))).await;
                }
            }
        });
    }
    let read_task = tokio::spawn(async move {
        while let Ok(Some(message)) = reader.next_message().await {
            let Some((channel, data)) = proto.decode(message) else {
                continue;
            };
            // Clients write on data channels only.
            let Some(slot) = inputs
                .get_mut(usize::from(channel / 2))
                .filter(|_| channel.is_multiple_of(2))
            else {
                continue;
            };
            if let Some(tx) = slot
                && tx.send(data).await.is_err()
            {
                *slot = None;
            }
        }
    });
    let mut read_task = read_task;
    tokio::select! {
        () = async { while forwards.join_next().await.is_some() {} } => {
            let _ = writer.close(CLOSE_NORMAL).await;
            let _ = tokio::time::timeout(LINGER, &mut read_task).await;
        }
        _ = &mut read_task => {}
    }
    read_task.abort();
    forwards.abort_all();
    let _ = writer.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_ports_come_from_repeated_and_listed_query_values() {
        assert_eq!(
            query_ports("port=80&port=8080,9090"),
            Ok(vec![80, 8080, 9090])
        );
        assert!(query_ports("").is_err());
        assert!(query_ports("port=").is_err());
        assert!(query_ports("port=0").is_err());
        assert!(query_ports("port=x").is_err());
        assert!(query_ports("port=70000").is_err());
    }
}
