//! The protobuf wire format (`application/vnd.kubernetes.protobuf`), as upstream's protobuf
//! serializer writes and reads it: the 4-byte magic `k8s\0`, then a `runtime.Unknown` whose
//! `typeMeta` names the kind and whose `raw` holds the object's message.
//!
//! Every kind with a Kubernetes message (the `k8s-pb` bindings) is transcoded to and from the
//! JSON the rest of the server works in, driven by the bindings' schema ([`schema`]) and the
//! JSON names of the OpenAPI definitions. Kinds without a message (custom resources, tandem's
//! `GMSACredentialSpec`) are JSON only, as custom resources are upstream: a protobuf body is
//! refused with 415, and a client that accepts only protobuf gets 406.
//!
//! Watch streams (`;stream=watch`) are frames of a 4-byte big-endian length and a
//! `metav1.WatchEvent` message, whose object is the full envelope, as upstream's
//! `LengthDelimitedFramer` and embedded encoder write them.

mod schema;
mod transcode;

use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message as _;
use serde_json::{Value, json};

pub(crate) use schema::{Schema, schema};
pub use transcode::TranscodeError;

use crate::error::ApiError;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub(crate) const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf request body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let schema = schema();
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request(
            "cannot decode the protobuf body: it does not start with the k8s protobuf magic number",
        )
    })?;
    let envelope = transcode::read_envelope(rest)
        .map_err(|e| ApiError::bad_request(format!("cannot decode the protobuf body: {e}")))?;
    let Some(index) = schema.message_for(envelope.api_version, envelope.kind) else {
        return Err(ApiError::unsupported_media_type(MEDIA_TYPE));
    };
    decode_object(schema, index, &envelope, 0).map_err(|e| {
        let kind = envelope.kind;
        ApiError::bad_request(format!("cannot decode the protobuf body: {kind}: {e}"))
    })
}

/// Decodes magic + envelope (an object embedded in a RawExtension, or a body) at nesting
/// `depth` (0 for a body).
pub(crate) fn decode_envelope(
    schema: &Schema,
    bytes: &[u8],
    depth: usize,
) -> Result<Value, TranscodeError> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| TranscodeError("missing the k8s protobuf magic number".into()))?;
    let envelope = transcode::read_envelope(rest)?;
    let (api_version, kind) = (envelope.api_version, envelope.kind);
    let index = schema
        .message_for(api_version, kind)
        .ok_or_else(|| TranscodeError(format!("no protobuf message for {api_version} {kind}")))?;
    decode_object(schema, index, &envelope, depth)
}

/// The object in an envelope, with its `apiVersion` and `kind`.
fn decode_object(
    schema: &Schema,
    index: usize,
    envelope: &transcode::Envelope<'_>,
    depth: usize,
) -> Result<Value, TranscodeError> {
    let mut value = schema.decode_at(index, envelope.raw, depth)?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), json!(envelope.api_version));
        map.insert("kind".into(), json!(envelope.kind));
    }
    Ok(value)
}

/// Whether objects of this `apiVersion`/`kind` have a protobuf form.
pub fn has_message(api_version: &str, kind: &str) -> bool {
    schema().message_for(api_version, kind).is_some()
}

/// Encodes an object (its `apiVersion` and `kind` say which message) with magic and envelope.
/// `None` when the kind has no protobuf form.
pub fn encode(value: &Value) -> Option<Result<Vec<u8>, TranscodeError>> {
    let schema = schema();
    let api_version = value.get("apiVersion").and_then(Value::as_str)?;
    let kind = value.get("kind").and_then(Value::as_str)?;
    let index = schema.message_for(api_version, kind)?;
    Some(encode_with(schema, index, api_version, kind, value))
}

/// Magic and envelope around the object's message, written in one buffer: the message goes
/// straight into the envelope's `raw` field, in the field order prost gives [`envelope`].
fn encode_with(
    schema: &Schema,
    index: usize,
    api_version: &str,
    kind: &str,
    value: &Value,
) -> Result<Vec<u8>, TranscodeError> {
    let mut out = Vec::with_capacity(2048);
    out.extend_from_slice(MAGIC);
    transcode::put_nested(&mut out, 1, |meta| {
        transcode::put_bytes(meta, 1, api_version.as_bytes());
        transcode::put_bytes(meta, 2, kind.as_bytes());
        Ok(())
    })?;
    transcode::put_nested(&mut out, 2, |raw| schema.encode_into(index, value, raw))?;
    transcode::put_bytes(&mut out, 3, b"");
    transcode::put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// The object's message without magic and envelope; `None` when the kind has no protobuf form
/// or the object does not fit it.
pub fn encode_message(value: &Value) -> Option<Vec<u8>> {
    let schema = schema();
    let api_version = value.get("apiVersion").and_then(Value::as_str)?;
    let kind = value.get("kind").and_then(Value::as_str)?;
    let index = schema.message_for(api_version, kind)?;
    schema.encode(index, value).ok()
}

/// A `<Kind>List` in protobuf from its items' messages ([`encode_message`]) and the list's
/// `metadata` (JSON), without re-encoding the items. `None` when the kind has no protobuf
/// form or an item has none.
pub fn encode_list(
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: impl IntoIterator<Item = Option<bytes::Bytes>>,
) -> Option<Vec<u8>> {
    let schema = schema();
    let index = schema.message_for(api_version, list_kind)?;
    let message = &schema.messages[index];
    let field = |name: &str| message.fields.iter().find(|f| f.json == name);
    let (meta_field, items_field) = (field("metadata")?, field("items")?);
    let schema::Ty::Message(meta_index) = meta_field.def.ty else {
        return None;
    };
    let mut raw = Vec::new();
    let meta = schema.encode(meta_index, metadata).ok()?;
    transcode::put_bytes(&mut raw, meta_field.def.tag, &meta);
    for item in items {
        transcode::put_bytes(&mut raw, items_field.def.tag, &item?);
    }
    envelope(api_version, list_kind, raw).ok()
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Result<Vec<u8>, TranscodeError> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    unknown
        .encode(&mut out)
        .map_err(|e| TranscodeError(e.to_string()))?;
    Ok(out)
}

/// One frame of a protobuf watch stream for a JSON watch event (`{"type", "object"}`).
/// `None` when the object's kind has no protobuf form.
pub fn watch_frame(event: &Value) -> Option<Result<Vec<u8>, TranscodeError>> {
    let kind = event.get("type").and_then(Value::as_str)?;
    let object = event.get("object")?;
    let embedded = match encode(object)? {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    let watch_event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent {
        r#type: Some(kind.to_string()),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension {
            raw: Some(embedded),
        }),
    };
    let body = watch_event.encode_to_vec();
    let Ok(len) = u32::try_from(body.len()) else {
        return Some(Err(TranscodeError("a watch event over 4 GiB".into())));
    };
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Some(Ok(out))
}

#[cfg(test)]
mod tests;
