//! The Kubernetes channel subprotocols over websocket (apimachinery `wsstream.Conn`, kubelet
//! `remotecommand/websocket.go` and `portforward/websocket.go`): each message starts with the
//! number of the channel it belongs to. `channel.k8s.io` and the versioned names send that as
//! a byte in binary messages; the `base64.` variants as an ASCII digit followed by the
//! base64-encoded payload in text messages. `v4.` carries a JSON `Status` on the error
//! channel; `v5.` (client-go's only websocket protocol since 1.30) adds the close signal, a
//! message `[255, channel]` half-closing one channel (client-go `remotecommand` `StreamClose`).

use bytes::Bytes;

use super::base64;
use super::websocket::{Message, OP_BINARY, OP_TEXT};

/// The message that half-closes a channel in `v5.channel.k8s.io`.
pub(crate) const CLOSE_SIGNAL: u8 = 255;

/// The protocol generations that differ in what the server does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Version {
    /// `channel.k8s.io`, `base64.channel.k8s.io` or no subprotocol: errors as plain text.
    V1,
    /// `v4.`: the error channel carries a JSON `Status`.
    V4,
    /// `v5.`: as v4, plus the close signal.
    V5,
}

/// A websocket subprotocol the server accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChannelProtocol {
    /// As sent in `Sec-WebSocket-Protocol`; empty for a client that offered none.
    pub name: &'static str,
    pub version: Version,
    pub base64: bool,
}

const fn protocol(name: &'static str, version: Version, base64: bool) -> ChannelProtocol {
    ChannelProtocol {
        name,
        version,
        base64,
    }
}

/// Exec: the kubelet's list (`createWebSocketStreams`) plus v5.
pub(crate) const EXEC_PROTOCOLS: &[ChannelProtocol] = &[
    protocol("v5.channel.k8s.io", Version::V5, false),
    protocol("v4.channel.k8s.io", Version::V4, false),
    protocol("v4.base64.channel.k8s.io", Version::V4, true),
    protocol("channel.k8s.io", Version::V1, false),
    protocol("base64.channel.k8s.io", Version::V1, true),
    protocol("", Version::V1, false),
];

/// Port forwarding with one channel pair per `port` query value (kubelet
/// `handleWebSocketStreams`).
pub(crate) const PORT_FORWARD_PROTOCOLS: &[ChannelProtocol] = &[
    protocol("v4.channel.k8s.io", Version::V4, false),
    protocol("v4.base64.channel.k8s.io", Version::V4, true),
    protocol("", Version::V1, false),
];

/// The first protocol the client offers that `supported` has (x/net/websocket handshake as
/// `wsstream` configures it: the client's order wins); with nothing offered, the unnamed one.
pub(crate) fn negotiate(
    offered: &[String],
    supported: &[ChannelProtocol],
) -> Option<ChannelProtocol> {
    if offered.is_empty() {
        return supported.iter().find(|p| p.name.is_empty()).copied();
    }
    offered
        .iter()
        .find_map(|o| supported.iter().find(|p| !p.name.is_empty() && p.name == o))
        .copied()
}

impl ChannelProtocol {
    /// The websocket opcode and payload of `data` on `channel`.
    pub(crate) fn encode(&self, channel: u8, data: &[u8]) -> (u8, Vec<u8>) {
        if self.base64 {
            let mut out = vec![b'0'.wrapping_add(channel)];
            out.extend_from_slice(base64::encode(data).as_bytes());
            (OP_TEXT, out)
        } else {
            let mut out = Vec::with_capacity(data.len() + 1);
            out.push(channel);
            out.extend_from_slice(data);
            (OP_BINARY, out)
        }
    }

    /// The channel and payload of a client message; `None` for an empty message or invalid
    /// base64 (which upstream drops too).
    pub(crate) fn decode(&self, message: Message) -> Option<(u8, Bytes)> {
        let payload = message.into_payload();
        let (&first, _) = payload.split_first()?;
        let data = payload.slice(1..);
        if self.base64 {
            let channel = first.wrapping_sub(b'0');
            Some((channel, Bytes::from(base64::decode(&data)?)))
        } else {
            Some((first, data))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn negotiation_follows_the_clients_order() {
        let p = negotiate(
            &offered(&["v4.channel.k8s.io", "v5.channel.k8s.io"]),
            EXEC_PROTOCOLS,
        );
        assert_eq!(p.map(|p| p.name), Some("v4.channel.k8s.io"));
        let p = negotiate(&offered(&["x", "v5.channel.k8s.io"]), EXEC_PROTOCOLS);
        assert_eq!(p.map(|p| p.version), Some(Version::V5));
        assert_eq!(negotiate(&offered(&["x"]), EXEC_PROTOCOLS), None);
        assert_eq!(negotiate(&[], EXEC_PROTOCOLS).map(|p| p.name), Some(""));
        assert_eq!(
            negotiate(&offered(&["v5.channel.k8s.io"]), PORT_FORWARD_PROTOCOLS),
            None
        );
    }

    #[test]
    fn base64_variant_round_trips_the_upstream_example() {
        let proto = EXEC_PROTOCOLS[2];
        // "foo\n" on stdin, then "\n" on stdout.
        let msg = Message::Text(Bytes::from_static(b"0Zm9vCg=="));
        assert_eq!(proto.decode(msg), Some((0, Bytes::from_static(b"foo\n"))));
        assert_eq!(proto.encode(1, b"\n"), (OP_TEXT, b"1Cg==".to_vec()));
    }

    #[test]
    fn binary_variant_prefixes_the_channel_byte() {
        let proto = EXEC_PROTOCOLS[0];
        assert_eq!(proto.encode(2, b"x"), (OP_BINARY, vec![2, b'x']));
        let msg = Message::Binary(Bytes::from_static(&[CLOSE_SIGNAL, 0]));
        assert_eq!(
            proto.decode(msg),
            Some((CLOSE_SIGNAL, Bytes::from_static(&[0])))
        );
        assert_eq!(proto.decode(Message::Binary(Bytes::new())), None);
    }
}
