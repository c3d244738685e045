//! Response encoding and content negotiation: plain JSON, `meta.k8s.io/v1` Tables for
//! `kubectl get`, and `PartialObjectMetadata` for metadata-only clients, chosen from the `Accept`
//! header as upstream's `negotiation` package does.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
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

/// Picks the first acceptable media type of `Accept`; `None` if nothing offered is served.
pub fn negotiate(accept: Option<&str>) -> Option<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Format::Json);
    };
    let clauses: Vec<&str> = accept.split(',').collect();
    for (i, clause) in clauses.iter().enumerate() {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut as_ = None;
        let mut version = None;
        let mut group = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(v.trim().to_string()),
                    "v" => version = Some(v.trim().to_string()),
                    "g" => group = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        let json_like = matches!(media.as_str(), "application/json" | "*/*" | "application/*");
        if media == "application/yaml" && as_.is_none() {
            return Some(Format::Yaml);
        }
        if media == crate::protobuf::MEDIA_TYPE && as_.is_none() {
            let json_fallback = clauses[i + 1..].iter().any(|c| {
                let media = c.split(';').next().unwrap_or("").trim();
                matches!(media, "application/json" | "*/*" | "application/*")
            });
            return Some(Format::Protobuf { json_fallback });
        }
        if !json_like {
            continue;
        }
        match as_.as_deref() {
            None => return Some(Format::Json),
            Some("Table") if group.as_deref() == Some("meta.k8s.io") => {
                return Some(Format::Table {
                    beta: version.as_deref() == Some("v1beta1"),
                });
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if group.as_deref() == Some("meta.k8s.io") =>
            {
                return Some(Format::Metadata {
                    beta: version.as_deref() == Some("v1beta1"),
                });
            }
            _ => continue,
        }
    }
    None
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
}
