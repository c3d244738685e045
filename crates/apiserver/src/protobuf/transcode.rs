//! Schema-driven transcoding between a Kubernetes message's protobuf wire form and its JSON
//! form, as upstream's generated `Marshal`/`Unmarshal` and `encoding/json` tags relate them.
//!
//! Decoding mirrors what Go's decoder leaves in a typed object that `encoding/json` then writes
//! with `omitempty`: gogo writes every non-pointer field, so kubectl's bodies carry
//! `generateName: ""`, `nodePort: 0`, `publishNotReadyAddresses: false` and
//! `creationTimestamp` at the zero time, and none of them is in upstream's JSON. A zero scalar is
//! dropped unless the field is written even when zero (see [`super::schema::Field::keep_zero`]:
//! required fields, and pointers like `replicas: 0`); empty lists and maps never reach the wire.

use base64::Engine as _;
use prost::encoding::{WireType, decode_varint, encode_varint};
use serde_json::{Map, Number, Value};

use super::schema::{Message, Schema, Shape, Special, Ty};

/// Nesting deeper than this is refused (a hostile body cannot exhaust the stack).
const MAX_DEPTH: usize = 100;

/// Messages with at most this many fields are encoded by walking the object's keys.
const MAX_FIELDS_BY_KEY: usize = 64;

/// Why a body could not be transcoded; the text names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscodeError(pub String);

impl std::fmt::Display for TranscodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, TranscodeError> {
    Err(TranscodeError(msg.into()))
}

// ---------------------------------------------------------------------------------------------
// Decoding: protobuf → JSON
// ---------------------------------------------------------------------------------------------

/// A field's raw value on the wire.
enum Raw<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(&'a [u8]),
}

fn read_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Raw<'a>), TranscodeError> {
    let key = decode_varint(buf).map_err(|e| TranscodeError(e.to_string()))?;
    let tag = u32::try_from(key >> 3).map_err(|_| TranscodeError("invalid tag".into()))?;
    if tag == 0 {
        return err("invalid tag 0");
    }
    let raw = match WireType::try_from(key & 7) {
        Ok(WireType::Varint) => {
            Raw::Varint(decode_varint(buf).map_err(|e| TranscodeError(e.to_string()))?)
        }
        Ok(WireType::SixtyFourBit) => {
            let (head, rest) = buf
                .split_first_chunk::<8>()
                .ok_or_else(|| TranscodeError("truncated fixed64".into()))?;
            *buf = rest;
            Raw::Fixed64(u64::from_le_bytes(*head))
        }
        Ok(WireType::ThirtyTwoBit) => {
            let (head, rest) = buf
                .split_first_chunk::<4>()
                .ok_or_else(|| TranscodeError("truncated fixed32".into()))?;
            *buf = rest;
            let _ = head;
            Raw::Fixed32
        }
        Ok(WireType::LengthDelimited) => {
            let len = decode_varint(buf).map_err(|e| TranscodeError(e.to_string()))?;
            let len = usize::try_from(len).map_err(|_| TranscodeError("length overflow".into()))?;
            if len > buf.len() {
                return err("truncated length-delimited field");
            }
            let (head, rest) = buf.split_at(len);
            *buf = rest;
            Raw::Bytes(head)
        }
        _ => return err(format!("unsupported wire type in field {tag}")),
    };
    Ok((tag, raw))
}

/// The fields of the `runtime.Unknown` envelope that matter, borrowed from the body.
pub(super) struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
}

/// Reads the envelope after the magic number without copying the object's bytes.
pub(super) fn read_envelope(bytes: &[u8]) -> Result<Envelope<'_>, TranscodeError> {
    fn text(b: &[u8]) -> Result<&str, TranscodeError> {
        std::str::from_utf8(b).map_err(|_| TranscodeError("typeMeta: invalid UTF-8".into()))
    }
    let mut envelope = Envelope {
        api_version: "",
        kind: "",
        raw: &[],
    };
    let mut buf = bytes;
    while !buf.is_empty() {
        match read_field(&mut buf)? {
            (1, Raw::Bytes(mut meta)) => {
                while !meta.is_empty() {
                    match read_field(&mut meta)? {
                        (1, Raw::Bytes(b)) => envelope.api_version = text(b)?,
                        (2, Raw::Bytes(b)) => envelope.kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Raw::Bytes(raw)) => envelope.raw = raw,
            _ => {}
        }
    }
    Ok(envelope)
}

fn decode_scalar(ty: Ty, raw: &Raw<'_>, name: &str) -> Result<Value, TranscodeError> {
    Ok(match (ty, raw) {
        (Ty::String, Raw::Bytes(b)) => Value::String(
            std::str::from_utf8(b)
                .map_err(|_| TranscodeError(format!("{name}: invalid UTF-8")))?
                .to_string(),
        ),
        // int32 is sign-extended to 64 bits on the wire.
        (Ty::Int32, Raw::Varint(v)) => Value::from(i64::from(*v as i32)),
        (Ty::Int64, Raw::Varint(v)) => Value::from(*v as i64),
        (Ty::Bool, Raw::Varint(v)) => Value::Bool(*v != 0),
        (Ty::Bytes, Raw::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        (Ty::Double, Raw::Fixed64(v)) => Number::from_f64(f64::from_bits(*v))
            .map(Value::Number)
            .unwrap_or(Value::Null),
        _ => return err(format!("{name}: wrong wire type")),
    })
}

/// Packed repeated numbers (proto3 writers pack; gogo's proto2 does not, both are accepted).
fn decode_packed(ty: Ty, bytes: &[u8], name: &str) -> Result<Vec<Value>, TranscodeError> {
    let mut out = Vec::new();
    let mut buf = bytes;
    while !buf.is_empty() {
        let raw = match ty {
            Ty::Double => {
                let (head, rest) = buf
                    .split_first_chunk::<8>()
                    .ok_or_else(|| TranscodeError(format!("{name}: truncated")))?;
                buf = rest;
                Raw::Fixed64(u64::from_le_bytes(*head))
            }
            _ => Raw::Varint(decode_varint(&mut buf).map_err(|e| TranscodeError(e.to_string()))?),
        };
        out.push(decode_scalar(ty, &raw, name)?);
    }
    Ok(out)
}

impl Schema {
    /// Decodes one message into its JSON form, at nesting `depth` (0 for a request body);
    /// objects embedded in a RawExtension continue the count of the object around them.
    pub(super) fn decode_at(
        &self,
        index: usize,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Value, TranscodeError> {
        if depth > MAX_DEPTH {
            return err("the message nests too deeply");
        }
        let message = &self.messages[index];
        if message.special == Special::RawJson {
            let mut buf = bytes;
            let mut raw = &[][..];
            while !buf.is_empty() {
                if let (1, Raw::Bytes(b)) = read_field(&mut buf)? {
                    raw = b;
                }
            }
            return raw_to_json(self, raw, depth);
        }
        let fields = self.decode_fields(message, bytes, depth)?;
        Ok(match message.special {
            Special::None => Value::Object(fields),
            special => self.special_to_json(special, fields)?,
        })
    }

    fn decode_fields(
        &self,
        message: &Message,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Map<String, Value>, TranscodeError> {
        let mut out = Map::new();
        let mut buf = bytes;
        while !buf.is_empty() {
            let (tag, raw) = read_field(&mut buf)?;
            let Some(field) = message.field_by_tag(tag) else {
                continue;
            };
            let name = field.json.as_str();
            if field.inline {
                if let Value::Object(inner) = self.decode_value(field.def.ty, &raw, name, depth)? {
                    out.extend(inner);
                }
                continue;
            }
            match field.def.shape {
                Shape::Single => {
                    let v = self.decode_value(field.def.ty, &raw, name, depth)?;
                    let zero = match &v {
                        Value::String(s) => s.is_empty(),
                        Value::Bool(b) => !b,
                        Value::Number(n) => n.as_f64() == Some(0.0),
                        Value::Null => true,
                        _ => false,
                    };
                    if zero && !field.keep_zero {
                        out.remove(&field.json);
                    } else {
                        out.insert(field.json.clone(), v);
                    }
                }
                Shape::Repeated => {
                    if !out.contains_key(&field.json) {
                        out.insert(field.json.clone(), Value::Array(Vec::new()));
                    }
                    let Some(Value::Array(list)) = out.get_mut(&field.json) else {
                        continue;
                    };
                    match (field.def.ty, &raw) {
                        (Ty::Int32 | Ty::Int64 | Ty::Bool | Ty::Double, Raw::Bytes(b)) => {
                            list.extend(decode_packed(field.def.ty, b, name)?);
                        }
                        _ => list.push(self.decode_value(field.def.ty, &raw, name, depth)?),
                    }
                }
                Shape::Map(value_ty) => {
                    let Raw::Bytes(entry) = raw else {
                        return err(format!("{name}: a map entry must be length-delimited"));
                    };
                    let mut key = String::new();
                    let mut value = None;
                    let mut eb = entry;
                    while !eb.is_empty() {
                        match read_field(&mut eb)? {
                            (1, Raw::Bytes(k)) => {
                                key = std::str::from_utf8(k)
                                    .map_err(|_| TranscodeError(format!("{name}: invalid key")))?
                                    .to_string();
                            }
                            (2, raw) => {
                                value = Some(self.decode_value(value_ty, &raw, name, depth)?);
                            }
                            _ => {}
                        }
                    }
                    let value = value.unwrap_or(match value_ty {
                        Ty::String | Ty::Bytes => Value::String(String::new()),
                        Ty::Message(i) => self.decode_at(i, &[], depth + 1)?,
                        _ => Value::from(0),
                    });
                    if !out.contains_key(&field.json) {
                        out.insert(field.json.clone(), Value::Object(Map::new()));
                    }
                    if let Some(Value::Object(map)) = out.get_mut(&field.json) {
                        map.insert(key, value);
                    }
                }
            }
        }
        // Lists and maps with no entries never appear on the wire; a zero time decodes to
        // null. Both are what Go's `omitempty` leaves out.
        out.retain(|_, v| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Null => false,
            _ => true,
        });
        Ok(out)
    }

    fn decode_value(
        &self,
        ty: Ty,
        raw: &Raw<'_>,
        name: &str,
        depth: usize,
    ) -> Result<Value, TranscodeError> {
        match (ty, raw) {
            (Ty::Message(i), Raw::Bytes(b)) => self.decode_at(i, b, depth + 1),
            (Ty::Message(_), _) => err(format!("{name}: a message must be length-delimited")),
            _ => decode_scalar(ty, raw, name),
        }
    }

    /// The JSON of a message with a custom form, from its decoded fields (keyed by JSON name).
    fn special_to_json(
        &self,
        special: Special,
        mut f: Map<String, Value>,
    ) -> Result<Value, TranscodeError> {
        let int = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0);
        Ok(match special {
            Special::None => Value::Object(f),
            Special::Time | Special::MicroTime => {
                let secs = int(f.get("seconds"));
                let nanos = int(f.get("nanos"));
                if (secs == 0 && nanos == 0) || secs == GO_ZERO_TIME {
                    Value::Null
                } else if special == Special::Time {
                    Value::String(tandem_core::time::format_rfc3339(secs))
                } else {
                    let micros = u32::try_from(nanos / 1000).unwrap_or(0);
                    Value::String(tandem_core::time::format_rfc3339_micros(secs, micros))
                }
            }
            Special::Duration => Value::String(format_go_duration(int(f.get("duration")))),
            Special::Quantity => f.remove("string").unwrap_or(Value::Null),
            Special::IntOrString => {
                if int(f.get("type")) == 1 {
                    f.remove("strVal")
                        .unwrap_or_else(|| Value::String(String::new()))
                } else {
                    Value::from(int(f.get("intVal")))
                }
            }
            Special::RawJson => Value::Null,
            Special::Items => f
                .remove("items")
                .unwrap_or_else(|| Value::Array(Vec::new())),
            Special::SchemaOrArray => match f.remove("schema") {
                Some(s) => s,
                None => f
                    .remove("JSONSchemas")
                    .or_else(|| f.remove("jSONSchemas"))
                    .unwrap_or_else(|| Value::Array(Vec::new())),
            },
            Special::SchemaOrBool => match f.remove("schema") {
                Some(s) => s,
                None => f.remove("allows").unwrap_or(Value::Bool(false)),
            },
            Special::SchemaOrStringArray => match f.remove("schema") {
                Some(s) => s,
                None => f
                    .remove("property")
                    .unwrap_or_else(|| Value::Array(Vec::new())),
            },
        })
    }
}

/// The JSON of raw embedded bytes: JSON text as it is, or a protobuf object (magic and
/// envelope) decoded. `depth` is the nesting of the message holding the bytes: an embedded
/// object counts on from it, so envelopes nested in envelopes cannot reset the limit and
/// exhaust the stack.
fn raw_to_json(schema: &Schema, bytes: &[u8], depth: usize) -> Result<Value, TranscodeError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    if bytes.starts_with(super::MAGIC) {
        return super::decode_envelope(schema, bytes, depth + 1);
    }
    serde_json::from_slice(bytes).map_err(|e| TranscodeError(format!("embedded JSON: {e}")))
}

/// Unix seconds of Go's zero `time.Time`, which marshals as an unset time.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// Go's `time.Duration.String()` of nanoseconds (see [`tandem_core::time::format_go_duration`]).
pub(crate) fn format_go_duration(nanos: i64) -> String {
    tandem_core::time::format_go_duration(nanos)
}

/// Go's `time.ParseDuration`, in nanoseconds.
pub(crate) fn parse_go_duration(s: &str) -> Option<i64> {
    tandem_core::time::parse_go_duration(s).ok()
}

// ---------------------------------------------------------------------------------------------
// Encoding: JSON → protobuf
// ---------------------------------------------------------------------------------------------

fn put_key(out: &mut Vec<u8>, tag: u32, wire: WireType) {
    encode_varint((u64::from(tag) << 3) | wire as u64, out);
}

pub(super) fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(out, tag, WireType::LengthDelimited);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, tag: u32, v: u64) {
    put_key(out, tag, WireType::Varint);
    encode_varint(v, out);
}

/// Writes a length-delimited field whose content `write` appends to `out` in place: one byte
/// is kept for the length (most embedded messages are under 128 bytes) and widened afterwards
/// when the content is longer, so nesting costs no buffer of its own per level.
pub(super) fn put_nested(
    out: &mut Vec<u8>,
    tag: u32,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), TranscodeError>,
) -> Result<(), TranscodeError> {
    put_key(out, tag, WireType::LengthDelimited);
    let at = out.len();
    out.push(0);
    write(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = [0u8; 10];
        let mut rest = &mut prefix[..];
        encode_varint(len as u64, &mut rest);
        let width = 10 - rest.len();
        out.splice(at..=at, prefix[..width].iter().copied());
    }
    Ok(())
}

impl Schema {
    /// Encodes the JSON form of one message.
    pub fn encode(&self, index: usize, value: &Value) -> Result<Vec<u8>, TranscodeError> {
        let mut out = Vec::with_capacity(1024);
        self.encode_message(index, value, &mut out, 0)?;
        Ok(out)
    }

    /// Encodes the JSON form of one message onto the end of `out`.
    pub fn encode_into(
        &self,
        index: usize,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), TranscodeError> {
        self.encode_message(index, value, out, 0)
    }

    fn encode_message(
        &self,
        index: usize,
        value: &Value,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TranscodeError> {
        if depth > MAX_DEPTH {
            return err("the object nests too deeply");
        }
        let message = &self.messages[index];
        if message.special != Special::None {
            return self.encode_special(message, value, out, depth);
        }
        let Value::Object(map) = value else {
            return err(format!("{}: expected an object", message.def.name));
        };
        // Most of a message's fields are absent from an object: find the object's keys among
        // the fields rather than every field among the keys (for all but the widest messages),
        // then write in tag order as Go's marshaller does.
        let by_key = message.fields.len() <= MAX_FIELDS_BY_KEY;
        let mut present: [Option<&Value>; MAX_FIELDS_BY_KEY] = [None; MAX_FIELDS_BY_KEY];
        if by_key {
            for (key, v) in map {
                if let Some(i) = message.field_index_by_json(key) {
                    present[i] = Some(v);
                }
            }
        }
        for (i, field) in message.fields.iter().enumerate() {
            let (tag, ty) = (field.def.tag, field.def.ty);
            if field.inline {
                // The embedded struct takes its fields from this object.
                self.encode_value(tag, ty, value, &field.json, out, depth)?;
                continue;
            }
            let v = if by_key {
                present[i]
            } else {
                map.get(&field.json)
            };
            let Some(v) = v else { continue };
            self.encode_field(tag, ty, field.def.shape, v, &field.json, out, depth)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn encode_field(
        &self,
        tag: u32,
        ty: Ty,
        shape: Shape,
        v: &Value,
        name: &str,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TranscodeError> {
        if v.is_null() {
            return Ok(());
        }
        match shape {
            Shape::Single => self.encode_value(tag, ty, v, name, out, depth),
            Shape::Repeated => {
                let Value::Array(items) = v else {
                    return err(format!("{name}: expected an array"));
                };
                for item in items {
                    self.encode_value(tag, ty, item, name, out, depth)?;
                }
                Ok(())
            }
            Shape::Map(value_ty) => {
                let Value::Object(entries) = v else {
                    return err(format!("{name}: expected an object"));
                };
                for (k, item) in entries {
                    put_nested(out, tag, |entry| {
                        put_bytes(entry, 1, k.as_bytes());
                        if item.is_null() {
                            return Ok(());
                        }
                        self.encode_value(2, value_ty, item, name, entry, depth)
                    })?;
                }
                Ok(())
            }
        }
    }

    fn encode_value(
        &self,
        tag: u32,
        ty: Ty,
        v: &Value,
        name: &str,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let wrong = |want: &str| TranscodeError(format!("{name}: expected {want}, got {v}"));
        match ty {
            Ty::String => {
                let s = v.as_str().ok_or_else(|| wrong("a string"))?;
                put_bytes(out, tag, s.as_bytes());
            }
            Ty::Int32 | Ty::Int64 => {
                let n = v
                    .as_i64()
                    .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                    .ok_or_else(|| wrong("an integer"))?;
                let n = if ty == Ty::Int32 {
                    i64::from(i32::try_from(n).map_err(|_| wrong("a 32-bit integer"))?)
                } else {
                    n
                };
                put_varint(out, tag, n as u64);
            }
            Ty::Bool => put_varint(
                out,
                tag,
                u64::from(v.as_bool().ok_or_else(|| wrong("a boolean"))?),
            ),
            Ty::Double => {
                let f = v.as_f64().ok_or_else(|| wrong("a number"))?;
                put_key(out, tag, WireType::SixtyFourBit);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Ty::Bytes => {
                let s = v.as_str().ok_or_else(|| wrong("a base64 string"))?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| wrong("a base64 string"))?;
                put_bytes(out, tag, &bytes);
            }
            Ty::Message(i) => {
                put_nested(out, tag, |inner| {
                    self.encode_message(i, v, inner, depth + 1)
                })?;
            }
        }
        Ok(())
    }

    /// The tag of the field with this JSON name in `message`.
    fn tag_of(message: &Message, json: &str) -> Result<(u32, Ty), TranscodeError> {
        message
            .fields
            .iter()
            .find(|f| f.json.eq_ignore_ascii_case(json))
            .map(|f| (f.def.tag, f.def.ty))
            .ok_or_else(|| TranscodeError(format!("{} has no field {json}", message.def.name)))
    }

    fn encode_special(
        &self,
        message: &Message,
        v: &Value,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), TranscodeError> {
        let name = message.def.name;
        let wrong = |want: &str| TranscodeError(format!("{name}: expected {want}, got {v}"));
        match message.special {
            Special::None => {}
            Special::Time | Special::MicroTime => {
                let s = v.as_str().ok_or_else(|| wrong("an RFC 3339 time"))?;
                let secs = tandem_core::table::parse_rfc3339(s)
                    .ok_or_else(|| wrong("an RFC 3339 time"))?;
                put_varint(out, 1, secs as u64);
                let nanos = fraction_nanos(s);
                if nanos != 0 {
                    put_varint(out, 2, i64::from(nanos) as u64);
                }
            }
            Special::Duration => {
                let s = v.as_str().ok_or_else(|| wrong("a duration"))?;
                let n = parse_go_duration(s).ok_or_else(|| wrong("a duration"))?;
                put_varint(out, 1, n as u64);
            }
            Special::Quantity => match v {
                Value::String(s) => put_bytes(out, 1, s.as_bytes()),
                Value::Number(n) => put_bytes(out, 1, n.to_string().as_bytes()),
                _ => return Err(wrong("a quantity")),
            },
            Special::IntOrString => match v {
                Value::String(s) => {
                    put_varint(out, 1, 1);
                    put_bytes(out, 3, s.as_bytes());
                }
                Value::Number(n) => {
                    let i = n
                        .as_i64()
                        .and_then(|i| i32::try_from(i).ok())
                        .ok_or_else(|| wrong("an integer or a string"))?;
                    put_varint(out, 1, 0);
                    put_varint(out, 2, i64::from(i) as u64);
                }
                _ => return Err(wrong("an integer or a string")),
            },
            Special::RawJson => put_nested(out, 1, |raw| {
                serde_json::to_writer(raw, v).map_err(|e| TranscodeError(e.to_string()))
            })?,
            Special::Items => {
                let (tag, ty) = Self::tag_of(message, "items")?;
                self.encode_field(tag, ty, Shape::Repeated, v, name, out, depth)?;
            }
            Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStringArray => {
                let (schema_tag, schema_ty) = Self::tag_of(message, "schema")?;
                match (message.special, v) {
                    (_, Value::Object(_)) => {
                        self.encode_value(schema_tag, schema_ty, v, name, out, depth)?
                    }
                    (Special::SchemaOrBool, Value::Bool(b)) => {
                        let (tag, _) = Self::tag_of(message, "allows")?;
                        put_varint(out, tag, u64::from(*b));
                    }
                    (Special::SchemaOrArray, Value::Array(_)) => {
                        let field = message
                            .fields
                            .iter()
                            .find(|f| f.def.tag != schema_tag)
                            .ok_or_else(|| wrong("a schema"))?;
                        self.encode_field(
                            field.def.tag,
                            field.def.ty,
                            Shape::Repeated,
                            v,
                            name,
                            out,
                            depth,
                        )?;
                    }
                    (Special::SchemaOrStringArray, Value::Array(_)) => {
                        let (tag, ty) = Self::tag_of(message, "property")?;
                        self.encode_field(tag, ty, Shape::Repeated, v, name, out, depth)?;
                    }
                    _ => return Err(wrong("a schema")),
                }
            }
        }
        Ok(())
    }
}

/// The nanoseconds of an RFC 3339 time's fraction (`.123456` → 123456000).
fn fraction_nanos(s: &str) -> i32 {
    let Some(dot) = s.get(19..).and_then(|t| t.strip_prefix('.')) else {
        return 0;
    };
    let digits: String = dot
        .chars()
        .take_while(char::is_ascii_digit)
        .take(9)
        .collect();
    if digits.is_empty() {
        return 0;
    }
    let padded = format!("{digits:0<9}");
    padded.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_print_and_parse_as_go_does() {
        for (nanos, text) in [
            (0, "0s"),
            (1_500_000_000, "1.5s"),
            (300_000_000, "300ms"),
            (3_600_000_000_000, "1h0m0s"),
            (5_400_000_000_000, "1h30m0s"),
            (90_000_000_000, "1m30s"),
            (-2_000_000_000, "-2s"),
        ] {
            assert_eq!(format_go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Some(nanos), "{text}");
        }
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("ten"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn fractions_of_times_become_nanoseconds() {
        assert_eq!(fraction_nanos("2024-05-01T10:00:00.123456Z"), 123_456_000);
        assert_eq!(fraction_nanos("2024-05-01T10:00:00Z"), 0);
    }
}
