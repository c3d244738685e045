//! Standard base64 (RFC 4648, padded) for the websocket accept key and the
//! `base64.channel.k8s.io` subprotocols, over the `base64` crate.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

pub(crate) fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// `None` for text that is not valid padded base64.
pub(crate) fn decode(text: &[u8]) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", &[0xff, 0x00, 0x7f]] {
            assert_eq!(decode(encode(data).as_bytes()).as_deref(), Some(data));
        }
        assert_eq!(encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(decode(b"not base64!"), None);
    }
}
