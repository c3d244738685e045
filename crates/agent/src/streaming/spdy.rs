//! SPDY/3.1 framing (SPDY/3 draft §2.2 and §2.6, SPDY/3.1's connection-level WINDOW_UPDATE),
//! as moby/spdystream's `spdy.Framer` writes and reads it for kubectl: control frames carry
//! version 3; header blocks are `u32` counts and lengths, lower-case names, and values joined
//! with NUL, compressed by [`super::spdy_zlib`].

use bytes::{Buf, Bytes, BytesMut};

use super::spdy_zlib::{HeaderCompressor, HeaderDecompressor, ZlibError};

pub(crate) const VERSION: u16 = 3;

pub(crate) const TYPE_SYN_STREAM: u16 = 1;
pub(crate) const TYPE_SYN_REPLY: u16 = 2;
pub(crate) const TYPE_RST_STREAM: u16 = 3;
pub(crate) const TYPE_SETTINGS: u16 = 4;
pub(crate) const TYPE_PING: u16 = 6;
pub(crate) const TYPE_GOAWAY: u16 = 7;
pub(crate) const TYPE_HEADERS: u16 = 8;
pub(crate) const TYPE_WINDOW_UPDATE: u16 = 9;

pub(crate) const FLAG_FIN: u8 = 0x01;
pub(crate) const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status codes (§2.6.3).
pub(crate) const RST_PROTOCOL_ERROR: u32 = 1;
pub(crate) const RST_REFUSED_STREAM: u32 = 3;
pub(crate) const RST_CANCEL: u32 = 5;

/// `SETTINGS_INITIAL_WINDOW_SIZE` (§2.6.4).
pub(crate) const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// The window every stream and the connection start with (§2.6.8).
pub(crate) const DEFAULT_WINDOW: u32 = 64 * 1024;

/// A frame's payload length is 24 bits.
pub(crate) const MAX_FRAME_PAYLOAD: usize = 0xff_ffff;

/// Inflated header blocks larger than this are refused.
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// Name/value pairs in the order sent; a name whose value had NULs appears once per value.
pub(crate) type Headers = Vec<(String, String)>;

/// The value of header `name` (names are lower-case on the wire; compared without case).
pub(crate) fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    Data {
        stream_id: u32,
        fin: bool,
        data: Bytes,
    },
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        fin: bool,
        unidirectional: bool,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    /// `(id, value)` pairs; the per-entry flags are dropped.
    Settings {
        entries: Vec<(u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        fin: bool,
        headers: Headers,
    },
    /// Stream 0 is the connection's window (SPDY/3.1).
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    /// A control frame of a type this side does not know; the draft says to ignore it.
    Unknown {
        frame_type: u16,
    },
}

/// A frame the peer sent that cannot be understood.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("SPDY frame too short for its type")]
    Truncated,
    #[error("malformed SPDY header block")]
    HeaderBlock,
    #[error("SPDY header block could not be inflated")]
    Zlib(#[from] ZlibError),
}

/// Takes one complete frame off the front of `buf`; `Ok(None)` until one has arrived.
pub(crate) fn decode(
    buf: &mut BytesMut,
    inflater: &mut HeaderDecompressor,
) -> Result<Option<Frame>, FrameError> {
    let Some(head) = buf.get(..8) else {
        return Ok(None);
    };
    let word = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let flags = head[4];
    let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
    if buf.len() < 8 + len {
        buf.reserve(8 + len - buf.len());
        return Ok(None);
    }
    buf.advance(8);
    let mut payload = buf.split_to(len).freeze();
    let fin = flags & FLAG_FIN != 0;
    if word & 0x8000_0000 == 0 {
        return Ok(Some(Frame::Data {
            stream_id: word & 0x7fff_ffff,
            fin,
            data: payload,
        }));
    }
    let version = ((word >> 16) & 0x7fff) as u16;
    let frame_type = (word & 0xffff) as u16;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let frame = match frame_type {
        TYPE_SYN_STREAM => {
            need(&payload, 10)?;
            let stream_id = payload.get_u32() & 0x7fff_ffff;
            let associated_to = payload.get_u32() & 0x7fff_ffff;
            let priority = payload.get_u8() >> 5;
            let _slot = payload.get_u8();
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                fin,
                unidirectional: flags & FLAG_UNIDIRECTIONAL != 0,
                headers: header_block(&payload, inflater)?,
            }
        }
        TYPE_SYN_REPLY | TYPE_HEADERS => {
            need(&payload, 4)?;
            let stream_id = payload.get_u32() & 0x7fff_ffff;
            let headers = header_block(&payload, inflater)?;
            if frame_type == TYPE_SYN_REPLY {
                Frame::SynReply {
                    stream_id,
                    fin,
                    headers,
                }
            } else {
                Frame::Headers {
                    stream_id,
                    fin,
                    headers,
                }
            }
        }
        TYPE_RST_STREAM => {
            need(&payload, 8)?;
            Frame::RstStream {
                stream_id: payload.get_u32() & 0x7fff_ffff,
                status: payload.get_u32(),
            }
        }
        TYPE_SETTINGS => {
            need(&payload, 4)?;
            let count = payload.get_u32() as usize;
            if payload.len() / 8 < count {
                return Err(FrameError::Truncated);
            }
            let entries = (0..count)
                .map(|_| (payload.get_u32() & 0x00ff_ffff, payload.get_u32()))
                .collect();
            Frame::Settings { entries }
        }
        TYPE_PING => {
            need(&payload, 4)?;
            Frame::Ping {
                id: payload.get_u32(),
            }
        }
        TYPE_GOAWAY => {
            need(&payload, 4)?;
            let last_good_stream_id = payload.get_u32() & 0x7fff_ffff;
            // SPDY/2 peers send no status.
            let status = if payload.len() >= 4 {
                payload.get_u32()
            } else {
                0
            };
            Frame::GoAway {
                last_good_stream_id,
                status,
            }
        }
        TYPE_WINDOW_UPDATE => {
            need(&payload, 8)?;
            Frame::WindowUpdate {
                stream_id: payload.get_u32() & 0x7fff_ffff,
                delta: payload.get_u32() & 0x7fff_ffff,
            }
        }
        other => Frame::Unknown { frame_type: other },
    };
    Ok(Some(frame))
}

fn need(payload: &Bytes, len: usize) -> Result<(), FrameError> {
    if payload.len() < len {
        Err(FrameError::Truncated)
    } else {
        Ok(())
    }
}

/// Inflates and parses one header block.
fn header_block(
    compressed: &[u8],
    inflater: &mut HeaderDecompressor,
) -> Result<Headers, FrameError> {
    let raw = inflater.decompress(compressed, MAX_HEADER_BLOCK)?;
    let mut block = &raw[..];
    let count = take_u32(&mut block)? as usize;
    // Each pair needs at least its two lengths.
    if count > block.len() / 8 {
        return Err(FrameError::HeaderBlock);
    }
    let mut headers = Headers::with_capacity(count);
    for _ in 0..count {
        let name = take_string(&mut block)?.to_ascii_lowercase();
        let value = take_string(&mut block)?;
        for v in value.split('\0') {
            headers.push((name.clone(), v.to_string()));
        }
    }
    Ok(headers)
}

fn take_u32(block: &mut &[u8]) -> Result<u32, FrameError> {
    let (head, rest) = block
        .split_first_chunk::<4>()
        .ok_or(FrameError::HeaderBlock)?;
    *block = rest;
    Ok(u32::from_be_bytes(*head))
}

fn take_string(block: &mut &[u8]) -> Result<String, FrameError> {
    let len = take_u32(block)? as usize;
    if block.len() < len {
        return Err(FrameError::HeaderBlock);
    }
    let (s, rest) = block.split_at(len);
    *block = rest;
    String::from_utf8(s.to_vec()).map_err(|_| FrameError::HeaderBlock)
}

/// Serialises a header block: one entry per name, repeated names' values joined with NUL.
fn encode_header_block(headers: &Headers) -> Vec<u8> {
    let mut names: Vec<&str> = Vec::new();
    for (k, _) in headers {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(k)) {
            names.push(k);
        }
    }
    let mut out = (names.len() as u32).to_be_bytes().to_vec();
    for name in names {
        let values: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect();
        let value = values.join("\0");
        let name = name.to_ascii_lowercase();
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn control(out: &mut Vec<u8>, frame_type: u16, flags: u8, payload: &[u8]) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&frame_type.to_be_bytes());
    let len = payload.len().min(MAX_FRAME_PAYLOAD) as u32;
    out.extend_from_slice(&((u32::from(flags) << 24) | len).to_be_bytes());
    out.extend_from_slice(payload);
}

fn fin_flag(fin: bool) -> u8 {
    if fin { FLAG_FIN } else { 0 }
}

/// Appends `frame`'s wire form to `out`. Header blocks go through `deflater`, so frames must
/// be written in the order they are encoded. A DATA frame's payload must fit 24 bits.
pub(crate) fn encode(frame: &Frame, deflater: &mut HeaderCompressor, out: &mut Vec<u8>) {
    match frame {
        Frame::Data {
            stream_id,
            fin,
            data,
        } => {
            out.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
            let len = data.len().min(MAX_FRAME_PAYLOAD);
            let flags_len = (u32::from(fin_flag(*fin)) << 24) | len as u32;
            out.extend_from_slice(&flags_len.to_be_bytes());
            out.extend_from_slice(&data[..len]);
        }
        Frame::SynStream {
            stream_id,
            associated_to,
            priority,
            fin,
            unidirectional,
            headers,
        } => {
            let mut payload = stream_id.to_be_bytes().to_vec();
            payload.extend_from_slice(&associated_to.to_be_bytes());
            payload.push((priority & 0x7) << 5);
            payload.push(0);
            payload.extend(deflater.compress(&encode_header_block(headers)));
            let flags = fin_flag(*fin)
                | if *unidirectional {
                    FLAG_UNIDIRECTIONAL
                } else {
                    0
                };
            control(out, TYPE_SYN_STREAM, flags, &payload);
        }
        Frame::SynReply {
            stream_id,
            fin,
            headers,
        }
        | Frame::Headers {
            stream_id,
            fin,
            headers,
        } => {
            let frame_type = if matches!(frame, Frame::SynReply { .. }) {
                TYPE_SYN_REPLY
            } else {
                TYPE_HEADERS
            };
            let mut payload = stream_id.to_be_bytes().to_vec();
            payload.extend(deflater.compress(&encode_header_block(headers)));
            control(out, frame_type, fin_flag(*fin), &payload);
        }
        Frame::RstStream { stream_id, status } => {
            let mut payload = stream_id.to_be_bytes().to_vec();
            payload.extend_from_slice(&status.to_be_bytes());
            control(out, TYPE_RST_STREAM, 0, &payload);
        }
        Frame::Settings { entries } => {
            let mut payload = (entries.len() as u32).to_be_bytes().to_vec();
            for (id, value) in entries {
                payload.extend_from_slice(&(id & 0x00ff_ffff).to_be_bytes());
                payload.extend_from_slice(&value.to_be_bytes());
            }
            control(out, TYPE_SETTINGS, 0, &payload);
        }
        Frame::Ping { id } => control(out, TYPE_PING, 0, &id.to_be_bytes()),
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            let mut payload = last_good_stream_id.to_be_bytes().to_vec();
            payload.extend_from_slice(&status.to_be_bytes());
            control(out, TYPE_GOAWAY, 0, &payload);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            let mut payload = stream_id.to_be_bytes().to_vec();
            payload.extend_from_slice(&(delta & 0x7fff_ffff).to_be_bytes());
            control(out, TYPE_WINDOW_UPDATE, 0, &payload);
        }
        Frame::Unknown { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frames: &[Frame]) -> Vec<Frame> {
        let mut deflater = HeaderCompressor::default();
        let mut wire = Vec::new();
        for f in frames {
            encode(f, &mut deflater, &mut wire);
        }
        let mut inflater = HeaderDecompressor::default();
        let mut buf = BytesMut::from(&wire[..]);
        let mut out = Vec::new();
        while let Ok(Some(f)) = decode(&mut buf, &mut inflater) {
            out.push(f);
        }
        assert!(buf.is_empty());
        out
    }

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_frame_type_round_trips() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 3,
                fin: false,
                unidirectional: false,
                headers: headers(&[("streamtype", "error"), ("port", "80")]),
            },
            Frame::SynReply {
                stream_id: 1,
                fin: false,
                headers: Headers::new(),
            },
            Frame::Data {
                stream_id: 1,
                fin: true,
                data: Bytes::from_static(b"payload"),
            },
            Frame::Headers {
                stream_id: 3,
                fin: true,
                headers: headers(&[("a", "1"), ("a", "2")]),
            },
            Frame::RstStream {
                stream_id: 3,
                status: RST_CANCEL,
            },
            Frame::Settings {
                entries: vec![(SETTINGS_INITIAL_WINDOW_SIZE, 1000)],
            },
            Frame::Ping { id: 7 },
            Frame::GoAway {
                last_good_stream_id: 3,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 0,
                delta: 4096,
            },
        ];
        assert_eq!(round_trip(&frames), frames);
    }

    #[test]
    fn matches_spdystreams_wire_layout() {
        let mut wire = Vec::new();
        let mut deflater = HeaderCompressor::default();
        encode(&Frame::Ping { id: 1 }, &mut deflater, &mut wire);
        encode(
            &Frame::Data {
                stream_id: 5,
                fin: true,
                data: Bytes::new(),
            },
            &mut deflater,
            &mut wire,
        );
        assert_eq!(
            wire,
            [
                0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5, 1, 0, 0, 0
            ]
        );
    }

    #[test]
    fn short_and_foreign_frames_are_errors_not_panics() {
        let mut inflater = HeaderDecompressor::default();
        let mut short_ping = BytesMut::from(&[0x80u8, 3, 0, 6, 0, 0, 0, 2, 0, 0][..]);
        assert!(decode(&mut short_ping, &mut inflater).is_err());
        let mut v2 = BytesMut::from(&[0x80u8, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert!(matches!(
            decode(&mut v2, &mut inflater),
            Err(FrameError::Version(2))
        ));
        let mut unknown = BytesMut::from(&[0x80u8, 3, 0, 42, 0, 0, 0, 1, 9][..]);
        assert!(matches!(
            decode(&mut unknown, &mut inflater),
            Ok(Some(Frame::Unknown { frame_type: 42 }))
        ));
        let mut huge_settings =
            BytesMut::from(&[0x80u8, 3, 0, 4, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff][..]);
        assert!(decode(&mut huge_settings, &mut inflater).is_err());
    }
}
