//! A small DNS client for the tests, speaking hickory's wire format over loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// How long a test waits for any one reply.
pub const REPLY_WAIT: Duration = Duration::from_secs(5);

pub fn query(id: u16, name: &str, qtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(
        Name::from_ascii(name).expect("test names are valid"),
        qtype,
    ));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        message.set_edns(e);
    }
    message.to_vec().expect("test queries encode")
}

/// Sends `packet` over UDP and returns the raw reply.
pub async fn udp_raw(server: SocketAddr, packet: &[u8]) -> Result<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").await?;
    socket.connect(server).await?;
    socket.send(packet).await?;
    let mut buffer = vec![0u8; 65535];
    let len = tokio::time::timeout(REPLY_WAIT, socket.recv(&mut buffer))
        .await
        .context("no UDP reply")??;
    buffer.truncate(len);
    Ok(buffer)
}

pub async fn udp_ask(server: SocketAddr, packet: &[u8]) -> Result<Message> {
    let bytes = udp_raw(server, packet).await?;
    let reply = Message::from_vec(&bytes)?;
    if bytes[..2] != packet[..2] {
        bail!("reply id differs");
    }
    Ok(reply)
}

/// Sends length-prefixed `packets` on one TCP connection and reads as many replies.
pub async fn tcp_ask_many(server: SocketAddr, packets: &[Vec<u8>]) -> Result<Vec<Message>> {
    let mut stream = tokio::time::timeout(REPLY_WAIT, TcpStream::connect(server))
        .await
        .context("TCP connect timed out")??;
    for packet in packets {
        stream
            .write_all(&u16::try_from(packet.len())?.to_be_bytes())
            .await?;
        stream.write_all(packet).await?;
    }
    let mut replies = Vec::new();
    for _ in packets {
        let mut prefix = [0u8; 2];
        tokio::time::timeout(REPLY_WAIT, stream.read_exact(&mut prefix))
            .await
            .context("no TCP reply")??;
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(prefix))];
        stream.read_exact(&mut body).await?;
        replies.push(Message::from_vec(&body)?);
    }
    Ok(replies)
}

pub async fn tcp_ask(server: SocketAddr, packet: &[u8]) -> Result<Message> {
    let mut replies = tcp_ask_many(server, &[packet.to_vec()]).await?;
    replies.pop().context("no reply")
}

/// The answer records' data as text.
pub fn data(reply: &Message) -> Vec<String> {
    reply.answers.iter().map(|r| r.data.to_string()).collect()
}

/// SplitMix64: a small deterministic generator, so a failure reproduces.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next() % n as u64) as usize
    }
}
