//! SPDY/3 header-block compression (SPDY/3 draft, §2.6.10.1 "Compression"): every header
//! block of a connection goes through one zlib stream per direction, primed with the protocol's
//! preset dictionary and sync-flushed after each block, as Go's `spdy.Framer` (in
//! moby/spdystream, kubectl's SPDY) does with `zlib.NewWriterLevelDict`/`NewReaderDict`.
//!
//! Outgoing blocks are written as stored (uncompressed) deflate blocks, each block followed by
//! the empty stored block of a sync flush: a valid zlib stream that Go's reader decodes, and one
//! that needs no compressor state beyond "has the zlib header gone out yet". Incoming blocks
//! are inflated with miniz_oxide's streaming core over a 32 KiB window that starts out holding
//! the dictionary, so back-references into the dictionary and into earlier blocks resolve.

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

/// The SPDY/3 header compression dictionary, byte for byte as the draft specifies it.
pub(crate) const DICTIONARY: &[u8] = concat!(
    "\0\0\0\x07options\0\0\0\x04head\0\0\0\x04post\0\0\0\x03put\0\0\0\x06delete",
    "\0\0\0\x05trace\0\0\0\x06accept\0\0\0\x0eaccept-charset\0\0\0\x0faccept-encoding",
    "\0\0\0\x0faccept-language\0\0\0\x0daccept-ranges\0\0\0\x03age\0\0\0\x05allow",
    "\0\0\0\x0dauthorization\0\0\0\x0dcache-control\0\0\0\x0aconnection",
    "\0\0\0\x0ccontent-base\0\0\0\x10content-encoding\0\0\0\x10content-language",
    "\0\0\0\x0econtent-length\0\0\0\x10content-location\0\0\0\x0bcontent-md5",
    "\0\0\0\x0dcontent-range\0\0\0\x0ccontent-type\0\0\0\x04date\0\0\0\x04etag",
    "\0\0\0\x06expect\0\0\0\x07expires\0\0\0\x04from\0\0\0\x04host\0\0\0\x08if-match",
    "\0\0\0\x11if-modified-since\0\0\0\x0dif-none-match\0\0\0\x08if-range",
    "\0\0\0\x13if-unmodified-since\0\0\0\x0dlast-modified\0\0\0\x08location",
    "\0\0\0\x0cmax-forwards\0\0\0\x06pragma\0\0\0\x12proxy-authenticate",
    "\0\0\0\x13proxy-authorization\0\0\0\x05range\0\0\0\x07referer\0\0\0\x0bretry-after",
    "\0\0\0\x06server\0\0\0\x02te\0\0\0\x07trailer\0\0\0\x11transfer-encoding",
    "\0\0\0\x07upgrade\0\0\0\x0auser-agent\0\0\0\x04vary\0\0\0\x03via\0\0\0\x07warning",
    "\0\0\0\x10www-authenticate\0\0\0\x06method\0\0\0\x03get\0\0\0\x06status",
    "\0\0\0\x06200 OK\0\0\0\x07version\0\0\0\x08HTTP/1.1\0\0\0\x03url\0\0\0\x06public",
    "\0\0\0\x0aset-cookie\0\0\0\x0akeep-alive\0\0\0\x06origin",
    "10010120120220520630030230330430530630740240540640740840941041141241341441541641",
    "7502504505203 Non-Authoritative Information204 No Content301 Moved Permanently40",
    "0 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept O",
    "ct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,imag",
    "e/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,text/",
    "javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1",
    ",utf-,*,enq=0.",
)
.as_bytes();

/// The deflate window, and the size of the inflater's ring buffer.
const WINDOW: usize = 32 * 1024;

/// Why a header block could not be inflated.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ZlibError {
    #[error("bad zlib header in SPDY header block")]
    Header,
    #[error("SPDY header block uses a dictionary other than SPDY/3's")]
    Dictionary,
    #[error("corrupt compressed SPDY header block")]
    Corrupt,
    #[error("SPDY header block inflates to more than {0} bytes")]
    TooLarge(usize),
}

/// Adler-32 (RFC 1950 §8.2), the zlib dictionary id.
pub(crate) fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(4096) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// The compressing direction of one connection.
#[derive(Debug, Default)]
pub(crate) struct HeaderCompressor {
    header_sent: bool,
}

impl HeaderCompressor {
    /// `block` as the next piece of the connection's zlib stream.
    pub(crate) fn compress(&mut self, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(block.len() + 16);
        if !self.header_sent {
            self.header_sent = true;
            // CMF: deflate with a 32 KiB window; FLG: FDICT, and the check bits that make
            // CMF·256+FLG a multiple of 31.
            let cmf: u8 = 0x78;
            let flg_base: u8 = 0x20;
            let check = 31 - ((u16::from(cmf) * 256 + u16::from(flg_base)) % 31);
            out.push(cmf);
            out.push(flg_base | (check % 31) as u8);
            out.extend_from_slice(&adler32(DICTIONARY).to_be_bytes());
        }
        for chunk in block.chunks(usize::from(u16::MAX)) {
            let len = chunk.len() as u16;
            // BFINAL=0, BTYPE=00 (stored), padded to the byte boundary.
            out.push(0);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(chunk);
        }
        // The sync flush marker: an empty stored block. Go's inflater hands data to the reader
        // only when it reaches it.
        out.extend_from_slice(&[0, 0, 0, 0xff, 0xff]);
        out
    }
}

/// The inflating direction of one connection.
pub(crate) struct HeaderDecompressor {
    state: Box<DecompressorOxide>,
    window: Box<[u8]>,
    pos: usize,
    /// zlib header bytes seen so far, until the header is complete.
    header: Vec<u8>,
    header_done: bool,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        let mut window = vec![0u8; WINDOW].into_boxed_slice();
        window[..DICTIONARY.len()].copy_from_slice(DICTIONARY);
        HeaderDecompressor {
            state: Box::default(),
            window,
            pos: DICTIONARY.len(),
            header: Vec::with_capacity(6),
            header_done: false,
        }
    }
}

impl HeaderDecompressor {
    /// Inflates the next compressed header block of the connection. `limit` bounds the
    /// inflated size.
    pub(crate) fn decompress(
        &mut self,
        mut input: &[u8],
        limit: usize,
    ) -> Result<Vec<u8>, ZlibError> {
        if !self.header_done {
            input = self.take_header(input)?;
        }
        let mut out = Vec::new();
        loop {
            let (status, used, produced) = decompress(
                &mut self.state,
                input,
                &mut self.window,
                self.pos,
                inflate_flags::TINFL_FLAG_HAS_MORE_INPUT,
            );
            let fresh = self
                .window
                .get(self.pos..self.pos + produced)
                .ok_or(ZlibError::Corrupt)?;
            if out.len() + fresh.len() > limit {
                return Err(ZlibError::TooLarge(limit));
            }
            out.extend_from_slice(fresh);
            self.pos = (self.pos + produced) & (WINDOW - 1);
            input = input.get(used..).unwrap_or_default();
            match status {
                // The ring buffer's end was reached: carry on from its start.
                TINFLStatus::HasMoreOutput => {}
                // Everything given is inflated (a sync flush ends each block on a boundary).
                TINFLStatus::NeedsMoreInput | TINFLStatus::Done if input.is_empty() => break,
                TINFLStatus::NeedsMoreInput if used > 0 || produced > 0 => {}
                // Data after the end of the stream, no progress, or corrupt input.
                _ => return Err(ZlibError::Corrupt),
            }
        }
        Ok(out)
    }

    /// Consumes the zlib header (RFC 1950 §2.2) off the front of `input`.
    fn take_header<'a>(&mut self, mut input: &'a [u8]) -> Result<&'a [u8], ZlibError> {
        while !self.header_done {
            let wanted = match self.header.get(1) {
                Some(flg) if flg & 0x20 != 0 => 6,
                _ => 2,
            };
            if self.header.len() == wanted {
                self.header_done = true;
                break;
            }
            let Some((&byte, rest)) = input.split_first() else {
                return Ok(input);
            };
            self.header.push(byte);
            input = rest;
            if self.header.len() == 2 {
                let (cmf, flg) = (self.header[0], self.header[1]);
                if cmf & 0x0f != 8
                    || cmf >> 4 > 7
                    || (u16::from(cmf) * 256 + u16::from(flg)) % 31 != 0
                {
                    return Err(ZlibError::Header);
                }
            }
            if self.header.len() == 6 {
                let id = u32::from_be_bytes([
                    self.header[2],
                    self.header[3],
                    self.header[4],
                    self.header[5],
                ]);
                if id != adler32(DICTIONARY) {
                    return Err(ZlibError::Dictionary);
                }
            }
        }
        Ok(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
            .collect()
    }

    fn block(headers: &[(&str, &str)]) -> Vec<u8> {
        let mut out = (headers.len() as u32).to_be_bytes().to_vec();
        for (k, v) in headers {
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(&(v.len() as u32).to_be_bytes());
            out.extend_from_slice(v.as_bytes());
        }
        out
    }

    #[test]
    fn dictionary_is_the_spdy3_one() {
        assert_eq!(DICTIONARY.len(), 1423);
        // The dictionary id every SPDY/3 zlib stream carries in its header.
        assert_eq!(adler32(DICTIONARY), 0xe3c6_a7c2);
    }

    #[test]
    fn inflates_a_real_zlib_stream_across_blocks() {
        // Two sync-flushed blocks from zlib at level 9 with the SPDY/3 dictionary (the headers
        // of kubectl's port-forward error and data streams); the second refers back into the
        // first.
        let first = hex(
            "78f9e3c6a7c202253a48f95b044eea16061606409ab308125f99a074cc68004e892545a989b9d0c2863515141500000000ffff",
        );
        let second = hex("225333a8a44a04000000ffff");
        let mut inflater = HeaderDecompressor::default();
        let one = inflater.decompress(&first, 1 << 20).ok();
        let two = inflater.decompress(&second, 1 << 20).ok();
        let expected_one = block(&[
            ("port", "8080"),
            ("requestid", "0"),
            ("streamtype", "error"),
        ]);
        let expected_two = block(&[("port", "8080"), ("requestid", "0"), ("streamtype", "data")]);
        assert_eq!(one, Some(expected_one));
        assert_eq!(two, Some(expected_two));
    }

    #[test]
    fn stored_blocks_round_trip_through_the_inflater() {
        let mut deflater = HeaderCompressor::default();
        let mut inflater = HeaderDecompressor::default();
        let big = vec![b'x'; 70_000];
        for payload in [&b"abc"[..], &big[..], &b"\0\0\0\0"[..]] {
            let wire = deflater.compress(payload);
            assert_eq!(
                inflater.decompress(&wire, 1 << 20).ok().as_deref(),
                Some(payload)
            );
        }
    }

    #[test]
    fn first_block_carries_a_valid_zlib_header_with_the_dictionary_id() {
        let wire = HeaderCompressor::default().compress(b"x");
        assert_eq!((u16::from(wire[0]) * 256 + u16::from(wire[1])) % 31, 0);
        assert_eq!(wire[1] & 0x20, 0x20);
        assert_eq!(wire[2..6], 0xe3c6_a7c2u32.to_be_bytes());
    }

    #[test]
    fn garbage_and_bombs_are_errors() {
        let mut inflater = HeaderDecompressor::default();
        assert!(inflater.decompress(&[0x78, 0x00, 1, 2], 100).is_err());
        let mut deflater = HeaderCompressor::default();
        let wire = deflater.compress(&[0u8; 1000]);
        let mut inflater = HeaderDecompressor::default();
        assert!(matches!(
            inflater.decompress(&wire, 100),
            Err(ZlibError::TooLarge(100))
        ));
    }
}
