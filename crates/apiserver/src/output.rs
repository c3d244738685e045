//! Response encoding and content negotiation: plain JSON, `meta.k8s.io/v1` Tables for
//! `kubectl get`, and `PartialObjectMetadata` for metadata-only clients, chosen from the `Accept`
//! header as upstream's `negotiation` package does.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tandem_core::accept::MediaRange;
use tandem_core::registry::ResourceType;

use crate::cache::Object;

/// What the client accepts for object responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    /// `meta.k8s.io/v1` Table (or v1beta1, same shape).
    Table {
        beta: bool,
    },
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata {
        beta: bool,
    },
    /// `application/vnd.kubernetes.protobuf`. Handlers produce JSON as for [`Format::Json`]
    /// and the server transcodes the response; `json_fallback` says whether the Accept
    /// header also allows JSON, for kinds that have no protobuf form.
    Protobuf {
        json_fallback: bool,
    },
}

/// Picks the format for an `Accept` header as upstream's `negotiation.NegotiateMediaTypeOptions`
/// does: ranges in order of preference (by `q`, then the more specific, then as listed; see
/// `tandem_core::accept::preferred`), the first one served wins. JSON answers `application/json`,
/// `application/*` and `*/*`, with `as=Table` or `as=PartialObjectMetadata[List]` (`g=meta.k8s.io`)
/// for their views; YAML and protobuf only without `as`. An absent or empty header means JSON;
/// `None` if nothing offered is served (406).
pub fn negotiate(accept: Option<&str>) -> Option<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Format::Json);
    };
    let ranges = tandem_core::accept::preferred(accept);
    for (i, range) in ranges.iter().enumerate() {
        let converts = range.has_param("as");
        if range.is("application", "yaml") && !converts {
            return Some(Format::Yaml);
        }
        if is_protobuf(range) && !converts {
            let json_fallback = ranges[i + 1..].iter().any(takes_json);
            return Some(Format::Protobuf { json_fallback });
        }
        if !takes_json(range) {
            continue;
        }
        let meta_group = range.param("g") == "meta.k8s.io";
        let beta = range.param("v") == "v1beta1";
        match range.param("as") {
            _ if !converts => return Some(Format::Json),
            "Table" if meta_group => return Some(Format::Table { beta }),
            "PartialObjectMetadata" | "PartialObjectMetadataList" if meta_group => {
                return Some(Format::Metadata { beta });
            }
            _ => continue,
        }
    }
    None
}

/// Whether a range takes JSON, as upstream matches a clause against a serializer: exactly,
/// or by `application/*` or `*/*` (not `*/json`).
fn takes_json(range: &MediaRange<'_>) -> bool {
    range.is("application", "json") || range.is("application", "*") || range.is("*", "*")
}

/// Whether a range is exactly `application/vnd.kubernetes.protobuf`.
fn is_protobuf(range: &MediaRange<'_>) -> bool {
    crate::protobuf::MEDIA_TYPE
        .split_once('/')
        .is_some_and(|(type_, subtype)| range.is(type_, subtype))
}

/// How much of each object a Table row carries (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(v: Option<&str>) -> IncludeObject {
        match v {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

fn meta_api_version(beta: bool) -> &'static str {
    if beta {
        "meta.k8s.io/v1beta1"
    } else {
        "meta.k8s.io/v1"
    }
}

/// The `PartialObjectMetadata` of an object.
pub fn partial_metadata(value: &Value, beta: bool) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": meta_api_version(beta),
        "metadata": value.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Serializes a list of objects as `<Kind>List` by splicing the cached encodings.
pub fn encode_list(
    rt: &ResourceType,
    items: &[Arc<Object>],
    rv: i64,
    cont: Option<&str>,
    remaining: Option<i64>,
) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    let size: usize = items.iter().map(|o| o.json.len() + 1).sum();
    let mut out = BytesMut::with_capacity(size + 256);
    out.put_slice(
        format!(
            "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
            rt.list_kind(),
            rt.api_version(),
            meta
        )
        .as_bytes(),
    );
    for (i, o) in items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(&o.json);
    }
    out.put_slice(b"]}");
    out.freeze()
}

/// A `PartialObjectMetadataList`.
pub fn metadata_list(items: &[Arc<Object>], rv: i64, cont: Option<&str>, beta: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": meta_api_version(beta),
        "metadata": meta,
        "items": items.iter().map(|o| partial_metadata(&o.value(), beta)).collect::<Vec<_>>(),
    })
}

/// The printer columns of a custom resource version (`additionalPrinterColumns`); built-in
/// kinds use upstream's printers (`tandem_core::table`).
pub type CustomColumns<'a> = Option<&'a [tandem_core::apiextensions::crd::PrinterColumn]>;

/// A Table of `objects` with upstream's column definitions for `rt` (or the custom resource's
/// printer columns).
#[allow(clippy::too_many_arguments)]
pub fn table(
    rt: &ResourceType,
    custom: CustomColumns<'_>,
    objects: &[&Value],
    rv: Option<i64>,
    cont: Option<&str>,
    include: IncludeObject,
    beta: bool,
    with_columns: bool,
) -> Value {
    let now = tandem_core::time::unix(std::time::SystemTime::now()).0;
    let columns: Vec<Value> = match (with_columns, custom) {
        (false, _) => Vec::new(),
        (true, Some(custom)) => custom.iter().map(|c| c.to_json()).collect(),
        (true, None) => tandem_core::table::columns(rt)
            .iter()
            .map(|c| c.to_json())
            .collect(),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells = match custom {
                Some(custom) => tandem_core::apiextensions::crd::printer_cells(custom, o, now),
                None => tandem_core::table::cells(rt, o, now),
            };
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o, beta),
                IncludeObject::Object => row["object"] = (*o).clone(),
            }
            row
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = rv {
        meta["resourceVersion"] = json!(rv.to_string());
    }
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": meta_api_version(beta), "metadata": meta, "columnDefinitions": columns, "rows": rows})
}

/// Encodes one object in the negotiated format.
pub fn encode_object(
    rt: &ResourceType,
    custom: CustomColumns<'_>,
    value: &Value,
    format: Format,
    include: IncludeObject,
) -> (Bytes, &'static str) {
    match format {
        Format::Json | Format::Protobuf { .. } => (
            Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            "application/json",
        ),
        Format::Yaml => (
            Bytes::from(serde_yaml::to_string(value).unwrap_or_default()),
            "application/yaml",
        ),
        Format::Table { beta } => {
            if value.get("kind").and_then(Value::as_str) == Some("Status") {
                return (
                    Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
                    "application/json",
                );
            }
            let t = table(rt, custom, &[value], None, None, include, beta, true);
            (
                Bytes::from(serde_json::to_vec(&t).unwrap_or_default()),
                "application/json",
            )
        }
        Format::Metadata { beta } => (
            Bytes::from(serde_json::to_vec(&partial_metadata(value, beta)).unwrap_or_default()),
            "application/json",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_get_accept_header_negotiates_a_v1_table() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(negotiate(Some(accept)), Some(Format::Table { beta: false }));
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf, application/json"
            )),
            Some(Format::Protobuf {
                json_fallback: true
            })
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf")),
            Some(Format::Protobuf {
                json_fallback: false
            })
        );
        assert_eq!(
            negotiate(Some(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json"
            )),
            Some(Format::Json)
        );
        assert_eq!(negotiate(None), Some(Format::Json));
        assert_eq!(
            negotiate(Some(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
            )),
            Some(Format::Metadata { beta: false })
        );
    }

    #[test]
    fn the_first_served_range_by_weight_then_order_wins() {
        let cases: &[(Option<&str>, Option<Format>)] = &[
            (None, Some(Format::Json)),
            (Some(""), Some(Format::Json)),
            (Some("  "), Some(Format::Json)),
            (Some("*/*"), Some(Format::Json)),
            (Some("application/*"), Some(Format::Json)),
            (Some("APPLICATION/JSON"), Some(Format::Json)),
            (Some("text/html"), None),
            (Some("*/json"), None),
            (Some("text/html, */*"), Some(Format::Json)),
            (
                Some("application/yaml, application/json"),
                Some(Format::Yaml),
            ),
            (
                Some("application/json, application/yaml"),
                Some(Format::Json),
            ),
            // A lower weight loses to a later range, whatever the order.
            (
                Some("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.5, application/yaml"),
                Some(Format::Yaml),
            ),
            (
                Some("application/yaml;q=0.9, application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
                Some(Format::Table { beta: true }),
            ),
            // A refusal (`q=0`) is skipped.
            (
                Some("application/json;q=0, application/yaml"),
                Some(Format::Yaml),
            ),
            (Some("application/json;q=0"), None),
            // A view that is not served falls back to the next range.
            (
                Some("application/json;as=Table;v=v1;g=example.com, application/json"),
                Some(Format::Json),
            ),
            (
                Some("application/json;as=Foo;g=meta.k8s.io, application/yaml"),
                Some(Format::Yaml),
            ),
            (
                Some("application/json;as=, application/yaml"),
                Some(Format::Yaml),
            ),
            (
                Some("application/yaml;as=Table;g=meta.k8s.io, */*"),
                Some(Format::Json),
            ),
            (
                Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
                Some(Format::Metadata { beta: true }),
            ),
            (
                Some("application/vnd.kubernetes.protobuf, */*"),
                Some(Format::Protobuf {
                    json_fallback: true,
                }),
            ),
            (
                Some("application/vnd.kubernetes.protobuf, application/yaml"),
                Some(Format::Protobuf {
                    json_fallback: false,
                }),
            ),
            (
                Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
                Some(Format::Protobuf {
                    json_fallback: true,
                }),
            ),
            (
                Some("application/json, application/vnd.kubernetes.protobuf"),
                Some(Format::Json),
            ),
        ];
        for (accept, expected) in cases {
            assert_eq!(negotiate(*accept), *expected, "Accept: {accept:?}");
        }
    }
}
