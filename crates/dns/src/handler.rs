//! One DNS message in, one decision out: a reply to send, a query to forward upstream, or
//! nothing. No I/O, so malformed input can be thrown at it by the thousand.
//!
//! Replies from the index are authoritative (AA). EDNS(0) is answered with an OPT record of our
//! own; a query with an EDNS version above 0 gets BADVERS (RFC 6891 §6.1.3). Over UDP a reply is
//! kept within 512 bytes, or the client's EDNS payload size (at most 4096): additional records go
//! first (without TC, RFC 2181 §9), then answers are cut to what fits and TC is set, so the
//! client retries over TCP.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use hickory_proto::ProtoError;
use hickory_proto::op::{
    Edns, Message, MessageType, Metadata, OpCode, Query, ResponseCode, emit_message_parts,
};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;

use crate::records::{Answer, Index};

/// The fixed DNS header.
const HEADER_LEN: usize = 12;
/// A reply to a query without EDNS must fit in a classic UDP message.
const CLASSIC_UDP_LIMIT: usize = 512;
/// The most a UDP reply is made, whatever the client offers.
const MAX_UDP_LIMIT: usize = 4096;
/// The UDP payload size advertised in our OPT record (the DNS flag day 2020 value).
pub(crate) const ADVERTISED_PAYLOAD: u16 = 1232;

/// How the query came in, which bounds the reply's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Udp,
    Tcp,
}

/// What to do with one incoming message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// Not the index's: forward the query as received; `servfail` is the reply to send when
    /// no upstream answers.
    Forward { servfail: Vec<u8> },
    /// Send nothing: too short to hold a header, or not a query at all.
    Drop,
}

/// Answers messages from a shared [`Index`].
#[derive(Debug)]
pub(crate) struct Handler {
    index: Arc<RwLock<Index>>,
    /// Turns the order of address records from one reply to the next, as kubeadm's Corefile
    /// does with `loadbalance`.
    rotation: AtomicUsize,
}

impl Handler {
    pub(crate) fn new(index: Arc<RwLock<Index>>) -> Handler {
        Handler {
            index,
            rotation: AtomicUsize::new(0),
        }
    }

    pub(crate) fn handle(&self, packet: &[u8], transport: Transport) -> Outcome {
        let Some(header) = RawHeader::read(packet) else {
            return Outcome::Drop;
        };
        if header.is_response {
            // Never answer a response: two servers could bounce errors at each other forever.
            return Outcome::Drop;
        }
        let request = match Message::from_vec(packet) {
            Ok(request) => request,
            Err(_) => return Outcome::Reply(header.error(ResponseCode::FormErr)),
        };
        if request.metadata.op_code != OpCode::Query {
            return reply(&request, ResponseCode::NotImp, None, transport);
        }
        if request.queries.len() != 1 {
            return reply(&request, ResponseCode::FormErr, None, transport);
        }
        if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            return reply(&request, ResponseCode::BADVERS, None, transport);
        }
        let query = &request.queries[0];
        let answer = {
            let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
            index.lookup(query.name(), query.query_type())
        };
        let Some(mut answer) = answer else {
            return Outcome::Forward {
                servfail: encode_reply(&request, ResponseCode::ServFail, None, transport),
            };
        };
        if query.query_class() != DNSClass::IN
            || matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR)
        {
            // Zone transfers are refused, as CoreDNS's kubernetes plugin does.
            return reply(&request, ResponseCode::Refused, None, transport);
        }
        self.rotate(&mut answer.answers);
        let rcode = answer.rcode;
        reply(&request, rcode, Some(answer), transport)
    }

    /// Rotates a run of address records that follows any CNAMEs.
    fn rotate(&self, answers: &mut [Record]) {
        let start = answers
            .iter()
            .position(|r| r.record_type() != RecordType::CNAME)
            .unwrap_or(answers.len());
        let run = &mut answers[start..];
        if run.len() < 2 {
            return;
        }
        let kind = run[0].record_type();
        if !matches!(kind, RecordType::A | RecordType::AAAA)
            || run.iter().any(|r| r.record_type() != kind)
        {
            return;
        }
        let turn = self.rotation.fetch_add(1, Ordering::Relaxed) % run.len();
        run.rotate_left(turn);
    }
}

fn reply(
    request: &Message,
    rcode: ResponseCode,
    answer: Option<Answer>,
    transport: Transport,
) -> Outcome {
    Outcome::Reply(encode_reply(request, rcode, answer, transport))
}

/// The reply to `request`: its question, `rcode`, and `answer`'s records (authoritative when
/// there is an answer), sized for `transport`.
fn encode_reply(
    request: &Message,
    rcode: ResponseCode,
    answer: Option<Answer>,
    transport: Transport,
) -> Vec<u8> {
    let mut metadata = Metadata::new(request.metadata.id, MessageType::Response, OpCode::Query);
    metadata.op_code = request.metadata.op_code;
    metadata.authoritative = answer.is_some();
    metadata.recursion_desired = request.metadata.recursion_desired;
    metadata.recursion_available = true;
    metadata.checking_disabled = request.metadata.checking_disabled;
    metadata.response_code = rcode;
    let edns = request.edns.as_ref().map(|_| {
        let mut edns = Edns::new();
        edns.set_max_payload(ADVERTISED_PAYLOAD);
        edns
    });
    let limit = match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => request.edns.as_ref().map_or(CLASSIC_UDP_LIMIT, |e| {
            usize::from(e.max_payload()).clamp(CLASSIC_UDP_LIMIT, MAX_UDP_LIMIT)
        }),
    };
    let answer = answer.unwrap_or(Answer {
        rcode,
        answers: Vec::new(),
        authorities: Vec::new(),
        additionals: Vec::new(),
    });
    let parts = Parts {
        metadata,
        queries: &request.queries,
        edns: edns.as_ref(),
    };
    fit(&parts, &answer, limit)
        .unwrap_or_else(|_| minimal(request.metadata.id, request.metadata.op_code, rcode))
}

struct Parts<'a> {
    metadata: Metadata,
    queries: &'a [Query],
    edns: Option<&'a Edns>,
}

impl Parts<'_> {
    fn encode(
        &self,
        truncated: bool,
        answers: &[Record],
        authorities: &[Record],
        additionals: &[Record],
    ) -> Result<Vec<u8>, ProtoError> {
        let mut metadata = self.metadata;
        metadata.truncation = truncated;
        let mut buffer = Vec::with_capacity(CLASSIC_UDP_LIMIT);
        let mut encoder = BinEncoder::new(&mut buffer);
        emit_message_parts(
            &metadata,
            &mut self.queries.iter(),
            &mut answers.iter(),
            &mut authorities.iter(),
            &mut additionals.iter(),
            self.edns,
            None,
            &mut encoder,
        )?;
        Ok(buffer)
    }
}

/// Encodes the reply within `limit` bytes: whole, then without additional records, then without
/// authority records, then with as many answers as fit and TC set.
fn fit(parts: &Parts<'_>, answer: &Answer, limit: usize) -> Result<Vec<u8>, ProtoError> {
    let (answers, authorities, additionals) =
        (&answer.answers, &answer.authorities, &answer.additionals);
    let whole = parts.encode(false, answers, authorities, additionals)?;
    if whole.len() <= limit {
        return Ok(whole);
    }
    if !additionals.is_empty() {
        let bytes = parts.encode(false, answers, authorities, &[])?;
        if bytes.len() <= limit {
            return Ok(bytes);
        }
    }
    // Binary search for the longest prefix of answers that fits.
    let (mut fits, mut too_many) = (0, answers.len() + 1);
    let mut best = parts.encode(true, &[], &[], &[])?;
    while fits + 1 < too_many {
        let mid = fits + (too_many - fits) / 2;
        let bytes = parts.encode(true, &answers[..mid], &[], &[])?;
        if bytes.len() <= limit {
            fits = mid;
            best = bytes;
        } else {
            too_many = mid;
        }
    }
    Ok(best)
}

/// A header-only reply, for when even that could not be encoded.
fn minimal(id: u16, op_code: OpCode, rcode: ResponseCode) -> Vec<u8> {
    let header = RawHeader {
        id,
        op_code: u8::from(op_code),
        recursion_desired: false,
        is_response: false,
    };
    header.error(rcode)
}

/// The header fields needed to answer a message that does not parse.
struct RawHeader {
    id: u16,
    op_code: u8,
    recursion_desired: bool,
    is_response: bool,
}

impl RawHeader {
    fn read(packet: &[u8]) -> Option<RawHeader> {
        let header = packet.get(..HEADER_LEN)?;
        Some(RawHeader {
            id: u16::from_be_bytes([header[0], header[1]]),
            op_code: (header[2] >> 3) & 0x0f,
            recursion_desired: header[2] & 0x01 != 0,
            is_response: header[2] & 0x80 != 0,
        })
    }

    /// A reply with no sections: QR, the opcode and RD echoed, RA, and `rcode` (its low bits).
    fn error(&self, rcode: ResponseCode) -> Vec<u8> {
        let mut bytes = vec![0u8; HEADER_LEN];
        bytes[..2].copy_from_slice(&self.id.to_be_bytes());
        bytes[2] = 0x80 | (self.op_code << 3) | u8::from(self.recursion_desired);
        bytes[3] = 0x80 | (rcode.low() & 0x0f);
        bytes
    }
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
