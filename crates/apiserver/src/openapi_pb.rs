//! `/openapi/v2` in protobuf: the Swagger 2.0 document as gnostic's `openapi.v2.Document`, the
//! form kubectl's discovery client asks for (`client-go` `DiscoveryClient.OpenAPISchema`, Accept
//! `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, then `/swagger-2.0.0.pb-v1`
//! when that is refused) before `kubectl apply` can build a strategic merge patch or older
//! `kubectl explain` can describe a field.
//!
//! Upstream serves it from kube-openapi's `handler.OpenAPIService`: the JSON document parsed by
//! gnostic's `openapi_v2.ParseDocument` and marshalled. [`encode_v2`] does that conversion for
//! the JSON tandem publishes, keeping gnostic's conventions: map-shaped objects (`paths`,
//! `definitions`, `properties`, `responses`) become repeated `Named…` entries in document order,
//! every `x-…` key becomes a `NamedAny` in `vendor_extension`, and free-form values (defaults,
//! examples, enum members, vendor extensions) are carried as YAML text in `Any.yaml`, which
//! kube-openapi's `proto.VendorExtensionToMap` reads back with a YAML parser.

pub mod messages;

use std::sync::OnceLock;

use prost::Message;
use serde_json::{Map, Value};

use messages::{
    AdditionalPropertiesItem, Any, ApiKeySecurity, BasicAuthenticationSecurity, BodyParameter,
    Contact, Definitions, Document, Examples, ExternalDocs, FileSchema, FormDataParameterSubSchema,
    HeaderParameterSubSchema, Info, ItemsItem, JsonReference, License, NamedAny, NamedParameter,
    NamedPathItem, NamedResponse, NamedResponseValue, NamedSchema, NamedSecurityDefinitionsItem,
    NamedStringArray, NonBodyParameter, Operation, Parameter, ParameterDefinitions, ParametersItem,
    PathItem, PathParameterSubSchema, Paths, PrimitivesItems, Properties, QueryParameterSubSchema,
    Response, ResponseDefinitions, ResponseValue, Responses, Schema, SchemaItem,
    SecurityDefinitions, SecurityDefinitionsItem, SecurityRequirement, StringArray, Tag, TypeItem,
    Xml, additional_properties_item, non_body_parameter, parameter, parameters_item,
    response_value, schema_item, security_definitions_item,
};

/// The media type protobuf answers carry: kube-openapi's `subTypeProtobuf`, which it also
/// returns when the request named the deprecated spelling.
pub const PROTOBUF_MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The older spelling of [`PROTOBUF_MEDIA_TYPE`], the one client-go's discovery client sends.
pub const PROTOBUF_MEDIA_TYPE_DEPRECATED: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// Why a JSON document could not be encoded: it does not have the shape of a Swagger 2.0
/// document. `at` is the JSON pointer of the offending value (`#/paths/~1api~1v1/get`).
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("{at}: expected {expected}")]
    Shape { at: String, expected: &'static str },
    #[error("{at}: value cannot be written as YAML")]
    Yaml {
        at: String,
        #[source]
        source: serde_yaml::Error,
    },
}

/// How `/openapi/v2` answers a request, by its Accept header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`: the document as tandem builds it.
    Json,
    /// [`PROTOBUF_MEDIA_TYPE`]: the document encoded by [`encode_v2`].
    Protobuf,
}

/// What `/openapi/v2` can answer, in kube-openapi's order of preference among equally weighted
/// clauses: (type, subtype, format).
const OFFERS: [(&str, &str, Format); 3] = [
    ("application", "json", Format::Json),
    (
        "application",
        "com.github.proto-openapi.spec.v2@v1.0+protobuf",
        Format::Protobuf,
    ),
    (
        "application",
        "com.github.proto-openapi.spec.v2.v1.0+protobuf",
        Format::Protobuf,
    ),
];

/// Picks the format for an Accept header as kube-openapi's `RegisterOpenAPIVersionedService`
/// does: clauses ordered by `q` (then the more specific first, see
/// `tandem_core::accept::preferred`), the first clause that one of [`OFFERS`] matches wins, an
/// absent or empty header means `*/*` (JSON). Unlike goautoneg, a clause with `q=0` is a
/// refusal, not a last resort. `None` means nothing acceptable (406).
pub fn negotiate(accept: Option<&str>) -> Option<Format> {
    let accept = accept
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .unwrap_or("*/*");
    tandem_core::accept::preferred(accept)
        .iter()
        .find_map(|range| {
            OFFERS
                .iter()
                .find_map(|(offer_type, offer_subtype, format)| {
                    range.accepts(offer_type, offer_subtype).then_some(*format)
                })
        })
}

/// The protobuf form of `tandem_core::openapi::v2()`, encoded on first use and kept for the
/// life of the process (the document never changes while the server runs).
pub fn v2_protobuf() -> Result<&'static [u8], &'static EncodeError> {
    static ENCODED: OnceLock<Result<Vec<u8>, EncodeError>> = OnceLock::new();
    ENCODED
        .get_or_init(|| encode_v2(tandem_core::openapi::v2()))
        .as_ref()
        .map(Vec::as_slice)
}

/// Encodes a Swagger 2.0 JSON document as gnostic's `openapi.v2.Document`, as kube-openapi's
/// `handler.ToProtoBinary` does. Keys the Swagger 2.0 schema does not define (other than `x-…`)
/// are dropped; a known key whose value has the wrong JSON type is an error.
pub fn encode_v2(doc: &Value) -> Result<Vec<u8>, EncodeError> {
    Ok(document(&Obj::new(doc, "#".to_string())?)?.encode_to_vec())
}

type Result<T, E = EncodeError> = std::result::Result<T, E>;

fn shape(at: String, expected: &'static str) -> EncodeError {
    EncodeError::Shape { at, expected }
}

/// A JSON object being read, with its JSON pointer for error messages. A `null` member reads as
/// absent.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    at: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, at: String) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Obj { map, at }),
            _ => Err(shape(at, "an object")),
        }
    }

    /// The pointer of member `key`.
    fn at(&self, key: &str) -> String {
        format!("{}/{}", self.at, key.replace('~', "~0").replace('/', "~1"))
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Member `key`, which must be an object when present.
    fn object(&self, key: &str) -> Result<Option<Obj<'a>>> {
        self.get(key).map(|v| Obj::new(v, self.at(key))).transpose()
    }

    /// Every member but the `x-…` ones, each value an object.
    fn entries(&self) -> impl Iterator<Item = Result<(&'a String, Obj<'a>)>> + '_ {
        self.map
            .iter()
            .filter(|(k, _)| !k.starts_with("x-"))
            .map(|(k, v)| Ok((k, Obj::new(v, self.at(k))?)))
    }

    /// Member `key`, an array of objects when present.
    fn objects(&self, key: &str) -> Result<Vec<Obj<'a>>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| Obj::new(v, format!("{}/{i}", self.at(key))))
                .collect(),
            Some(_) => Err(shape(self.at(key), "an array")),
        }
    }

    fn string(&self, key: &str) -> Result<String> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(shape(self.at(key), "a string")),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| shape(self.at(key), "an array of strings")),
            Some(_) => Err(shape(self.at(key), "an array of strings")),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(shape(self.at(key), "a boolean")),
        }
    }

    fn number(&self, key: &str) -> Result<f64> {
        match self.get(key) {
            None => Ok(0.0),
            Some(v) => v.as_f64().ok_or_else(|| shape(self.at(key), "a number")),
        }
    }

    fn integer(&self, key: &str) -> Result<i64> {
        match self.get(key) {
            None => Ok(0),
            Some(v) => v.as_i64().ok_or_else(|| shape(self.at(key), "an integer")),
        }
    }

    /// Member `key` as an `Any` holding its YAML.
    fn any(&self, key: &str) -> Result<Option<Any>> {
        self.get(key).map(|v| any(v, self.at(key))).transpose()
    }

    /// Member `key`, an array of arbitrary values (an `enum`), as `Any`s.
    fn anys(&self, key: &str) -> Result<Vec<Any>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| any(v, format!("{}/{i}", self.at(key))))
                .collect(),
            Some(_) => Err(shape(self.at(key), "an array")),
        }
    }

    /// The `x-…` members, as gnostic's `vendor_extension`.
    fn extensions(&self) -> Result<Vec<NamedAny>> {
        self.map
            .iter()
            .filter(|(k, _)| k.starts_with("x-"))
            .map(|(k, v)| named_any(k, v, self.at(k)))
            .collect()
    }

    fn external_docs(&self) -> Result<Option<ExternalDocs>> {
        self.object("externalDocs")?
            .map(|o| {
                Ok(ExternalDocs {
                    description: o.string("description")?,
                    url: o.string("url")?,
                    vendor_extension: o.extensions()?,
                })
            })
            .transpose()
    }
}

/// A free-form value as gnostic's `Any`: its YAML text (gnostic's `compiler.Marshal`).
fn any(value: &Value, at: String) -> Result<Any> {
    let yaml = serde_yaml::to_string(value).map_err(|source| EncodeError::Yaml { at, source })?;
    Ok(Any { value: None, yaml })
}

fn named_any(name: &str, value: &Value, at: String) -> Result<NamedAny> {
    Ok(NamedAny {
        name: name.to_string(),
        value: Some(any(value, at)?),
    })
}

fn document(o: &Obj) -> Result<Document> {
    let parameters = o
        .object("parameters")?
        .map(|p| {
            p.entries()
                .map(|entry| {
                    let (name, value) = entry?;
                    Ok(NamedParameter {
                        name: name.clone(),
                        value: Some(parameter(&value)?),
                    })
                })
                .collect::<Result<_>>()
                .map(|additional_properties| ParameterDefinitions {
                    additional_properties,
                })
        })
        .transpose()?;
    let responses = o
        .object("responses")?
        .map(|r| {
            r.entries()
                .map(|entry| {
                    let (name, value) = entry?;
                    Ok(NamedResponse {
                        name: name.clone(),
                        value: Some(response(&value)?),
                    })
                })
                .collect::<Result<_>>()
                .map(|additional_properties| ResponseDefinitions {
                    additional_properties,
                })
        })
        .transpose()?;
    Ok(Document {
        swagger: o.string("swagger")?,
        info: o.object("info")?.map(|i| info(&i)).transpose()?,
        host: o.string("host")?,
        base_path: o.string("basePath")?,
        schemes: o.strings("schemes")?,
        consumes: o.strings("consumes")?,
        produces: o.strings("produces")?,
        paths: o.object("paths")?.map(|p| paths(&p)).transpose()?,
        definitions: o
            .object("definitions")?
            .map(|d| {
                named_schemas(&d).map(|additional_properties| Definitions {
                    additional_properties,
                })
            })
            .transpose()?,
        parameters,
        responses,
        security: security(o)?,
        security_definitions: o
            .object("securityDefinitions")?
            .map(|s| security_definitions(&s))
            .transpose()?,
        tags: o
            .objects("tags")?
            .iter()
            .map(|t| {
                Ok(Tag {
                    name: t.string("name")?,
                    description: t.string("description")?,
                    external_docs: t.external_docs()?,
                    vendor_extension: t.extensions()?,
                })
            })
            .collect::<Result<_>>()?,
        external_docs: o.external_docs()?,
        vendor_extension: o.extensions()?,
    })
}

fn info(o: &Obj) -> Result<Info> {
    Ok(Info {
        title: o.string("title")?,
        version: o.string("version")?,
        description: o.string("description")?,
        terms_of_service: o.string("termsOfService")?,
        contact: o
            .object("contact")?
            .map(|c| {
                Ok(Contact {
                    name: c.string("name")?,
                    url: c.string("url")?,
                    email: c.string("email")?,
                    vendor_extension: c.extensions()?,
                })
            })
            .transpose()?,
        license: o
            .object("license")?
            .map(|l| {
                Ok(License {
                    name: l.string("name")?,
                    url: l.string("url")?,
                    vendor_extension: l.extensions()?,
                })
            })
            .transpose()?,
        vendor_extension: o.extensions()?,
    })
}

/// `security`: `[{scheme: [scope, …]}, …]`.
fn security(o: &Obj) -> Result<Vec<SecurityRequirement>> {
    o.objects("security")?
        .iter()
        .map(|requirement| {
            let additional_properties = requirement
                .map
                .keys()
                .map(|name| {
                    Ok(NamedStringArray {
                        name: name.clone(),
                        value: Some(StringArray {
                            value: requirement.strings(name)?,
                        }),
                    })
                })
                .collect::<Result<_>>()?;
            Ok(SecurityRequirement {
                additional_properties,
            })
        })
        .collect()
}

/// `securityDefinitions`: only `basic` and `apiKey` schemes are modelled (tandem publishes its
/// bearer token as `apiKey`); an OAuth2 scheme is an error rather than silently dropped.
fn security_definitions(o: &Obj) -> Result<SecurityDefinitions> {
    let additional_properties = o
        .entries()
        .map(|entry| {
            let (name, scheme) = entry?;
            let oneof = match scheme.string("type")?.as_str() {
                "basic" => security_definitions_item::Oneof::BasicAuthenticationSecurity(
                    BasicAuthenticationSecurity {
                        r#type: "basic".to_string(),
                        description: scheme.string("description")?,
                        vendor_extension: scheme.extensions()?,
                    },
                ),
                "apiKey" => security_definitions_item::Oneof::ApiKeySecurity(ApiKeySecurity {
                    r#type: "apiKey".to_string(),
                    name: scheme.string("name")?,
                    r#in: scheme.string("in")?,
                    description: scheme.string("description")?,
                    vendor_extension: scheme.extensions()?,
                }),
                _ => return Err(shape(scheme.at("type"), "\"basic\" or \"apiKey\"")),
            };
            Ok(NamedSecurityDefinitionsItem {
                name: name.clone(),
                value: Some(SecurityDefinitionsItem { oneof: Some(oneof) }),
            })
        })
        .collect::<Result<_>>()?;
    Ok(SecurityDefinitions {
        additional_properties,
    })
}

fn paths(o: &Obj) -> Result<Paths> {
    Ok(Paths {
        vendor_extension: o.extensions()?,
        path: o
            .entries()
            .map(|entry| {
                let (name, item) = entry?;
                Ok(NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(&item)?),
                })
            })
            .collect::<Result<_>>()?,
    })
}

fn path_item(o: &Obj) -> Result<PathItem> {
    let op = |method: &str| o.object(method)?.map(|m| operation(&m)).transpose();
    Ok(PathItem {
        r#ref: o.string("$ref")?,
        get: op("get")?,
        put: op("put")?,
        post: op("post")?,
        delete: op("delete")?,
        options: op("options")?,
        head: op("head")?,
        patch: op("patch")?,
        parameters: parameters_items(o)?,
        vendor_extension: o.extensions()?,
    })
}

fn operation(o: &Obj) -> Result<Operation> {
    Ok(Operation {
        tags: o.strings("tags")?,
        summary: o.string("summary")?,
        description: o.string("description")?,
        external_docs: o.external_docs()?,
        operation_id: o.string("operationId")?,
        produces: o.strings("produces")?,
        consumes: o.strings("consumes")?,
        parameters: parameters_items(o)?,
        responses: o.object("responses")?.map(|r| responses(&r)).transpose()?,
        schemes: o.strings("schemes")?,
        deprecated: o.boolean("deprecated")?,
        security: security(o)?,
        vendor_extension: o.extensions()?,
    })
}

/// `parameters` of a path item or operation: each a parameter or a `$ref` to one.
fn parameters_items(o: &Obj) -> Result<Vec<ParametersItem>> {
    o.objects("parameters")?
        .iter()
        .map(|p| {
            let oneof = if p.get("$ref").is_some() {
                parameters_item::Oneof::JsonReference(json_reference(p)?)
            } else {
                parameters_item::Oneof::Parameter(Box::new(parameter(p)?))
            };
            Ok(ParametersItem { oneof: Some(oneof) })
        })
        .collect()
}

fn json_reference(o: &Obj) -> Result<JsonReference> {
    Ok(JsonReference {
        r#ref: o.string("$ref")?,
        description: o.string("description")?,
    })
}

/// A parameter, by its `in`: the body, or a header, form, query or path parameter.
fn parameter(o: &Obj) -> Result<Parameter> {
    let location = o.string("in")?;
    let oneof = if location == "body" {
        parameter::Oneof::BodyParameter(BodyParameter {
            description: o.string("description")?,
            name: o.string("name")?,
            r#in: location,
            required: o.boolean("required")?,
            schema: o.object("schema")?.map(|s| schema(&s)).transpose()?,
            vendor_extension: o.extensions()?,
        })
    } else {
        let simple = SimpleParameter::read(o, location)?;
        let sub = match simple.r#in.as_str() {
            "header" => non_body_parameter::Oneof::HeaderParameterSubSchema(simple.into()),
            "formData" => non_body_parameter::Oneof::FormDataParameterSubSchema(simple.into()),
            "query" => non_body_parameter::Oneof::QueryParameterSubSchema(simple.into()),
            "path" => non_body_parameter::Oneof::PathParameterSubSchema(simple.into()),
            _ => {
                return Err(shape(
                    o.at("in"),
                    "one of body, header, formData, query, path",
                ));
            }
        };
        parameter::Oneof::NonBodyParameter(NonBodyParameter { oneof: Some(sub) })
    };
    Ok(Parameter { oneof: Some(oneof) })
}

/// The fields the four non-body parameter messages share (each numbers them its own way).
struct SimpleParameter {
    required: bool,
    r#in: String,
    description: String,
    name: String,
    allow_empty_value: bool,
    r#type: String,
    format: String,
    items: Option<PrimitivesItems>,
    collection_format: String,
    default: Option<Any>,
    maximum: f64,
    exclusive_maximum: bool,
    minimum: f64,
    exclusive_minimum: bool,
    max_length: i64,
    min_length: i64,
    pattern: String,
    max_items: i64,
    min_items: i64,
    unique_items: bool,
    r#enum: Vec<Any>,
    multiple_of: f64,
    vendor_extension: Vec<NamedAny>,
}

impl SimpleParameter {
    fn read(o: &Obj, location: String) -> Result<Self> {
        Ok(SimpleParameter {
            required: o.boolean("required")?,
            r#in: location,
            description: o.string("description")?,
            name: o.string("name")?,
            allow_empty_value: o.boolean("allowEmptyValue")?,
            r#type: o.string("type")?,
            format: o.string("format")?,
            items: o
                .object("items")?
                .map(|i| primitives_items(&i))
                .transpose()?,
            collection_format: o.string("collectionFormat")?,
            default: o.any("default")?,
            maximum: o.number("maximum")?,
            exclusive_maximum: o.boolean("exclusiveMaximum")?,
            minimum: o.number("minimum")?,
            exclusive_minimum: o.boolean("exclusiveMinimum")?,
            max_length: o.integer("maxLength")?,
            min_length: o.integer("minLength")?,
            pattern: o.string("pattern")?,
            max_items: o.integer("maxItems")?,
            min_items: o.integer("minItems")?,
            unique_items: o.boolean("uniqueItems")?,
            r#enum: o.anys("enum")?,
            multiple_of: o.number("multipleOf")?,
            vendor_extension: o.extensions()?,
        })
    }
}

/// `impl From<SimpleParameter>` for a non-body parameter message; the bracketed fields are the
/// ones only some of them have.
macro_rules! from_simple_parameter {
    ($($message:ident { $($extra:ident),* }),* $(,)?) => {$(
        impl From<SimpleParameter> for $message {
            fn from(p: SimpleParameter) -> Self {
                $message {
                    required: p.required,
                    r#in: p.r#in,
                    description: p.description,
                    name: p.name,
                    $($extra: p.$extra,)*
                    r#type: p.r#type,
                    format: p.format,
                    items: p.items,
                    collection_format: p.collection_format,
                    default: p.default,
                    maximum: p.maximum,
                    exclusive_maximum: p.exclusive_maximum,
                    minimum: p.minimum,
                    exclusive_minimum: p.exclusive_minimum,
                    max_length: p.max_length,
                    min_length: p.min_length,
                    pattern: p.pattern,
                    max_items: p.max_items,
                    min_items: p.min_items,
                    unique_items: p.unique_items,
                    r#enum: p.r#enum,
                    multiple_of: p.multiple_of,
                    vendor_extension: p.vendor_extension,
                }
            }
        }
    )*};
}

from_simple_parameter!(
    HeaderParameterSubSchema {},
    FormDataParameterSubSchema { allow_empty_value },
    QueryParameterSubSchema { allow_empty_value },
    PathParameterSubSchema {},
);

fn primitives_items(o: &Obj) -> Result<PrimitivesItems> {
    Ok(PrimitivesItems {
        r#type: o.string("type")?,
        format: o.string("format")?,
        items: o
            .object("items")?
            .map(|i| primitives_items(&i).map(Box::new))
            .transpose()?,
        collection_format: o.string("collectionFormat")?,
        default: o.any("default")?,
        maximum: o.number("maximum")?,
        exclusive_maximum: o.boolean("exclusiveMaximum")?,
        minimum: o.number("minimum")?,
        exclusive_minimum: o.boolean("exclusiveMinimum")?,
        max_length: o.integer("maxLength")?,
        min_length: o.integer("minLength")?,
        pattern: o.string("pattern")?,
        max_items: o.integer("maxItems")?,
        min_items: o.integer("minItems")?,
        unique_items: o.boolean("uniqueItems")?,
        r#enum: o.anys("enum")?,
        multiple_of: o.number("multipleOf")?,
        vendor_extension: o.extensions()?,
    })
}

/// An operation's `responses`: status codes (and `default`) to responses or `$ref`s.
fn responses(o: &Obj) -> Result<Responses> {
    Ok(Responses {
        response_code: o
            .entries()
            .map(|entry| {
                let (code, value) = entry?;
                let oneof = if value.get("$ref").is_some() {
                    response_value::Oneof::JsonReference(json_reference(&value)?)
                } else {
                    response_value::Oneof::Response(Box::new(response(&value)?))
                };
                Ok(NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue { oneof: Some(oneof) }),
                })
            })
            .collect::<Result<_>>()?,
        vendor_extension: o.extensions()?,
    })
}

/// A response. Its `headers` are not modelled (tandem publishes none).
fn response(o: &Obj) -> Result<Response> {
    let schema = o
        .object("schema")?
        .map(|s| {
            let oneof = if s.get("type").and_then(Value::as_str) == Some("file") {
                schema_item::Oneof::FileSchema(Box::new(file_schema(&s)?))
            } else {
                schema_item::Oneof::Schema(Box::new(schema(&s)?))
            };
            Ok(SchemaItem { oneof: Some(oneof) })
        })
        .transpose()?;
    let examples = o
        .object("examples")?
        .map(|e| {
            e.map
                .iter()
                .map(|(k, v)| named_any(k, v, e.at(k)))
                .collect::<Result<_>>()
                .map(|additional_properties| Examples {
                    additional_properties,
                })
        })
        .transpose()?;
    Ok(Response {
        description: o.string("description")?,
        schema,
        examples,
        vendor_extension: o.extensions()?,
    })
}

fn file_schema(o: &Obj) -> Result<FileSchema> {
    Ok(FileSchema {
        format: o.string("format")?,
        title: o.string("title")?,
        description: o.string("description")?,
        default: o.any("default")?,
        required: o.strings("required")?,
        r#type: o.string("type")?,
        read_only: o.boolean("readOnly")?,
        external_docs: o.external_docs()?,
        example: o.any("example")?,
        vendor_extension: o.extensions()?,
    })
}

/// Every member of `definitions` or `properties` (including any named `x-…`: these maps hold
/// names, not extensions) as a `NamedSchema`, in document order.
fn named_schemas(o: &Obj) -> Result<Vec<NamedSchema>> {
    o.map
        .iter()
        .map(|(name, value)| {
            Ok(NamedSchema {
                name: name.clone(),
                value: Some(schema(&Obj::new(value, o.at(name))?)?),
            })
        })
        .collect()
}

fn schema(o: &Obj) -> Result<Schema> {
    let additional_properties = match o.get("additionalProperties") {
        None => None,
        Some(Value::Bool(b)) => Some(additional_properties_item::Oneof::Boolean(*b)),
        Some(v) => Some(additional_properties_item::Oneof::Schema(Box::new(schema(
            &Obj::new(v, o.at("additionalProperties"))?,
        )?))),
    };
    let r#type = match o.get("type") {
        None => None,
        Some(Value::String(t)) => Some(vec![t.clone()]),
        Some(Value::Array(_)) => Some(o.strings("type")?),
        Some(_) => return Err(shape(o.at("type"), "a string or an array of strings")),
    };
    let items = match o.get("items") {
        None => None,
        Some(Value::Array(_)) => Some(
            o.objects("items")?
                .iter()
                .map(schema)
                .collect::<Result<_>>()?,
        ),
        Some(v) => Some(vec![schema(&Obj::new(v, o.at("items"))?)?]),
    };
    Ok(Schema {
        r#ref: o.string("$ref")?,
        format: o.string("format")?,
        title: o.string("title")?,
        description: o.string("description")?,
        default: o.any("default")?,
        multiple_of: o.number("multipleOf")?,
        maximum: o.number("maximum")?,
        exclusive_maximum: o.boolean("exclusiveMaximum")?,
        minimum: o.number("minimum")?,
        exclusive_minimum: o.boolean("exclusiveMinimum")?,
        max_length: o.integer("maxLength")?,
        min_length: o.integer("minLength")?,
        pattern: o.string("pattern")?,
        max_items: o.integer("maxItems")?,
        min_items: o.integer("minItems")?,
        unique_items: o.boolean("uniqueItems")?,
        max_properties: o.integer("maxProperties")?,
        min_properties: o.integer("minProperties")?,
        required: o.strings("required")?,
        r#enum: o.anys("enum")?,
        additional_properties: additional_properties
            .map(|oneof| Box::new(AdditionalPropertiesItem { oneof: Some(oneof) })),
        r#type: r#type.map(|value| TypeItem { value }),
        items: items.map(|schema| ItemsItem { schema }),
        all_of: o
            .objects("allOf")?
            .iter()
            .map(schema)
            .collect::<Result<_>>()?,
        properties: o
            .object("properties")?
            .map(|p| {
                named_schemas(&p).map(|additional_properties| Properties {
                    additional_properties,
                })
            })
            .transpose()?,
        discriminator: o.string("discriminator")?,
        read_only: o.boolean("readOnly")?,
        xml: o
            .object("xml")?
            .map(|x| {
                Ok(Xml {
                    name: x.string("name")?,
                    namespace: x.string("namespace")?,
                    prefix: x.string("prefix")?,
                    attribute: x.boolean("attribute")?,
                    wrapped: x.boolean("wrapped")?,
                    vendor_extension: x.extensions()?,
                })
            })
            .transpose()?,
        external_docs: o.external_docs()?,
        example: o.any("example")?,
        vendor_extension: o.extensions()?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decoded() -> Document {
        let bytes = v2_protobuf().expect("tandem's v2 document encodes");
        Document::decode(bytes).expect("the encoding decodes")
    }

    fn definition<'a>(doc: &'a Document, name: &str) -> &'a Schema {
        doc.definitions
            .as_ref()
            .and_then(|d| d.additional_properties.iter().find(|s| s.name == name))
            .and_then(|s| s.value.as_ref())
            .unwrap_or_else(|| panic!("definition {name} missing"))
    }

    fn property<'a>(schema: &'a Schema, name: &str) -> &'a Schema {
        schema
            .properties
            .as_ref()
            .and_then(|p| p.additional_properties.iter().find(|s| s.name == name))
            .and_then(|s| s.value.as_ref())
            .unwrap_or_else(|| panic!("property {name} missing"))
    }

    /// The value of vendor extension `name`, parsed from its YAML as kube-openapi's
    /// `VendorExtensionToMap` does.
    fn extension(extensions: &[NamedAny], name: &str) -> Option<serde_yaml::Value> {
        extensions
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.as_ref())
            .map(|a| serde_yaml::from_str(&a.yaml).expect("extension is YAML"))
    }

    fn types(schema: &Schema) -> Vec<&str> {
        schema
            .r#type
            .as_ref()
            .map(|t| t.value.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// A parameter's message, whichever of the oneofs holds it.
    #[derive(Debug)]
    enum Param<'a> {
        Ref(&'a JsonReference),
        Body(&'a BodyParameter),
        Header(&'a HeaderParameterSubSchema),
        Form(&'a FormDataParameterSubSchema),
        Query(&'a QueryParameterSubSchema),
        Path(&'a PathParameterSubSchema),
    }

    fn param(item: &ParametersItem) -> Param<'_> {
        let parameter = match item.oneof.as_ref().expect("parameter oneof") {
            parameters_item::Oneof::JsonReference(r) => return Param::Ref(r),
            parameters_item::Oneof::Parameter(p) => p,
        };
        let non_body = match parameter.oneof.as_ref().expect("parameter oneof") {
            parameter::Oneof::BodyParameter(b) => return Param::Body(b),
            parameter::Oneof::NonBodyParameter(n) => n,
        };
        match non_body.oneof.as_ref().expect("non-body oneof") {
            non_body_parameter::Oneof::HeaderParameterSubSchema(h) => Param::Header(h),
            non_body_parameter::Oneof::FormDataParameterSubSchema(f) => Param::Form(f),
            non_body_parameter::Oneof::QueryParameterSubSchema(q) => Param::Query(q),
            non_body_parameter::Oneof::PathParameterSubSchema(p) => Param::Path(p),
        }
    }

    /// The schema of response `code`, or `None` when it is a `$ref`.
    fn response_schema<'a>(responses: &'a Responses, code: &str) -> Option<&'a schema_item::Oneof> {
        let value = responses
            .response_code
            .iter()
            .find(|r| r.name == code)
            .and_then(|r| r.value.as_ref())
            .and_then(|v| v.oneof.as_ref())
            .unwrap_or_else(|| panic!("response {code} missing"));
        match value {
            response_value::Oneof::Response(r) => r.schema.as_ref().and_then(|s| s.oneof.as_ref()),
            response_value::Oneof::JsonReference(_) => None,
        }
    }

    #[test]
    fn document_header_and_security_survive_the_round_trip() {
        let doc = decoded();
        assert_eq!(doc.swagger, "2.0");
        let info = doc.info.as_ref().expect("info");
        assert_eq!(info.title, "Kubernetes");
        assert!(info.version.starts_with('v'), "{}", info.version);
        let schemes = doc.security_definitions.expect("securityDefinitions");
        let bearer = &schemes.additional_properties[0];
        assert_eq!(bearer.name, "BearerToken");
        match bearer.value.as_ref().and_then(|v| v.oneof.as_ref()) {
            Some(security_definitions_item::Oneof::ApiKeySecurity(key)) => {
                assert_eq!(
                    (key.r#in.as_str(), key.name.as_str()),
                    ("header", "authorization")
                );
            }
            other => panic!("BearerToken should be apiKey: {other:?}"),
        }
        assert_eq!(doc.security[0].additional_properties[0].name, "BearerToken");
    }

    #[test]
    fn container_definition_keeps_types_descriptions_and_patch_strategies() {
        let doc = decoded();
        let container = definition(&doc, "io.k8s.api.core.v1.Container");
        assert_eq!(types(container), ["object"]);
        assert!(container.required.contains(&"name".to_string()));
        let image = property(container, "image");
        assert_eq!(types(image), ["string"]);
        assert!(image.description.contains("image"), "{}", image.description);
        let ports = property(container, "ports");
        assert_eq!(types(ports), ["array"]);
        let items = &ports.items.as_ref().expect("ports has items").schema;
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0].r#ref,
            "#/definitions/io.k8s.api.core.v1.ContainerPort"
        );
        assert_eq!(
            extension(&ports.vendor_extension, "x-kubernetes-patch-merge-key"),
            Some(serde_yaml::Value::from("containerPort"))
        );

        let pod_spec = definition(&doc, "io.k8s.api.core.v1.PodSpec");
        let containers = property(pod_spec, "containers");
        assert_eq!(
            extension(&containers.vendor_extension, "x-kubernetes-patch-strategy"),
            Some(serde_yaml::Value::from("merge"))
        );
        let node_selector = property(pod_spec, "nodeSelector");
        match node_selector
            .additional_properties
            .as_ref()
            .and_then(|a| a.oneof.as_ref())
        {
            Some(additional_properties_item::Oneof::Schema(value)) => {
                assert_eq!(types(value), ["string"]);
            }
            other => panic!("nodeSelector is a map of strings: {other:?}"),
        }
    }

    #[test]
    fn kinds_carry_their_group_version_kind_as_yaml() {
        let doc = decoded();
        let deployment = definition(&doc, "io.k8s.api.apps.v1.Deployment");
        let gvk = extension(
            &deployment.vendor_extension,
            "x-kubernetes-group-version-kind",
        )
        .expect("Deployment has a GVK");
        let expected: serde_yaml::Value =
            serde_yaml::from_str("[{group: apps, kind: Deployment, version: v1}]")
                .expect("test invariant");
        assert_eq!(gvk, expected);
        let pod = definition(&doc, "io.k8s.api.core.v1.Pod");
        let gvk = extension(&pod.vendor_extension, "x-kubernetes-group-version-kind")
            .expect("Pod has a GVK");
        assert_eq!(gvk[0]["group"], serde_yaml::Value::from(""));
        assert_eq!(gvk[0]["kind"], serde_yaml::Value::from("Pod"));
        assert_eq!(
            property(pod, "spec").r#ref,
            "#/definitions/io.k8s.api.core.v1.PodSpec"
        );
    }

    #[test]
    fn configmap_patch_operation_lists_its_body_and_field_validation() {
        let doc = decoded();
        let path = "/api/v1/namespaces/{namespace}/configmaps/{name}";
        let item = doc
            .paths
            .as_ref()
            .and_then(|p| p.path.iter().find(|p| p.name == path))
            .and_then(|p| p.value.as_ref())
            .unwrap_or_else(|| panic!("{path} missing"));
        let patch = item.patch.as_ref().expect("configmaps can be patched");
        assert!(
            patch
                .consumes
                .iter()
                .any(|c| c == "application/strategic-merge-patch+json"),
            "{:?}",
            patch.consumes
        );
        // `cli-runtime`'s `hasGVKExtension` reads the operation's GVK as one YAML map.
        let gvk = extension(&patch.vendor_extension, "x-kubernetes-group-version-kind")
            .expect("operation GVK");
        assert_eq!(gvk["kind"], serde_yaml::Value::from("ConfigMap"));
        assert_eq!(gvk["version"], serde_yaml::Value::from("v1"));

        let mut body = None;
        let mut queries = Vec::new();
        for p in &patch.parameters {
            match param(p) {
                Param::Body(b) => body = Some(b),
                Param::Query(q) => queries.push(q.name.as_str()),
                other => panic!("unexpected operation parameter {other:?}"),
            }
        }
        let body = body.expect("PATCH has a body");
        assert!(body.required);
        assert_eq!(
            body.schema.as_ref().map(|s| s.r#ref.as_str()),
            Some("#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch")
        );
        assert!(queries.contains(&"fieldValidation"), "{queries:?}");

        let path_params: Vec<(&str, bool)> = item
            .parameters
            .iter()
            .filter_map(|p| match param(p) {
                Param::Path(p) => Some((p.name.as_str(), p.required)),
                _ => None,
            })
            .collect();
        assert!(path_params.contains(&("name", true)), "{path_params:?}");
        assert!(
            path_params.contains(&("namespace", true)),
            "{path_params:?}"
        );

        let responses = patch.responses.as_ref().expect("responses");
        match response_schema(responses, "200") {
            Some(schema_item::Oneof::Schema(s)) => {
                assert_eq!(s.r#ref, "#/definitions/io.k8s.api.core.v1.ConfigMap");
            }
            other => panic!("200 should return a ConfigMap: {other:?}"),
        }
    }

    /// kube-openapi's `proto.NewOpenAPIData` (what kubectl builds its models with) rejects the
    /// whole document if any one schema breaks its rules, so every definition must pass them.
    #[test]
    fn every_definition_parses_under_kube_openapi_rules() {
        fn check(schema: &Schema, path: &str, names: &[&str]) {
            let ty = types(schema);
            if !schema.r#ref.is_empty() {
                assert!(
                    schema
                        .properties
                        .as_ref()
                        .is_none_or(|p| p.additional_properties.is_empty()),
                    "{path}: $ref with properties"
                );
                assert!(ty.is_empty(), "{path}: $ref with a type");
                let target = schema
                    .r#ref
                    .strip_prefix("#/definitions/")
                    .unwrap_or_else(|| panic!("{path}: ref {} outside definitions", schema.r#ref));
                assert!(names.contains(&target), "{path}: unknown model {target}");
                return;
            }
            let kind = |s: &Schema| {
                for p in s.properties.iter().flat_map(|p| &p.additional_properties) {
                    let value = p.value.as_ref().expect("property schema");
                    check(value, &format!("{path}.{}", p.name), names);
                }
            };
            match ty.as_slice() {
                [] => kind(schema),
                ["object"] if schema.properties.is_some() => kind(schema),
                ["object"] => {
                    if let Some(additional_properties_item::Oneof::Schema(sub)) = schema
                        .additional_properties
                        .as_ref()
                        .and_then(|a| a.oneof.as_ref())
                    {
                        check(sub, path, names);
                    }
                }
                ["array"] => {
                    let items = schema.items.as_ref().map_or(&[][..], |i| &i.schema[..]);
                    assert_eq!(
                        items.len(),
                        1,
                        "{path}: array needs exactly one item schema"
                    );
                    check(&items[0], path, names);
                }
                [primitive] => assert!(
                    ["string", "number", "integer", "boolean"].contains(primitive),
                    "{path}: unknown primitive type {primitive:?}"
                ),
                _ => panic!("{path}: multiple types {ty:?}"),
            }
        }
        let doc = decoded();
        let defs = &doc
            .definitions
            .as_ref()
            .expect("definitions")
            .additional_properties;
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert!(names.len() > 100, "only {} definitions", names.len());
        for def in defs {
            check(
                def.value.as_ref().expect("definition schema"),
                &def.name,
                &names,
            );
        }
    }

    #[test]
    fn free_form_values_and_sum_types_are_encoded_as_gnostic_does() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "1", "x-info": true},
            "paths": {
                "x-paths": "p",
                "/things/{id}": {
                    "get": {
                        "parameters": [
                            {"$ref": "#/parameters/pretty"},
                            {"name": "id", "in": "path", "required": true, "type": "string"},
                            {"name": "h", "in": "header", "type": "integer", "maximum": 5},
                            {"name": "f", "in": "formData", "type": "array",
                             "items": {"type": "string", "enum": ["a", "b"]},
                             "collectionFormat": "csv", "allowEmptyValue": true},
                        ],
                        "responses": {
                            "200": {"description": "OK", "schema": {"type": "file"}},
                            "404": {"$ref": "#/responses/missing"},
                            "x-resp": 1,
                        },
                    },
                },
            },
            "parameters": {"pretty": {"name": "pretty", "in": "query", "type": "string"}},
            "responses": {"missing": {"description": "Not found"}},
            "definitions": {
                "Thing": {
                    "type": "object",
                    "properties": {
                        "open": {"type": "object", "additionalProperties": true},
                        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
                        "mode": {"type": "string", "default": "fast", "enum": ["fast", "slow"]},
                        "nullable": {"type": ["string", "null"], "maxLength": 3},
                        "x-named-like-an-extension": {"type": "string"},
                    },
                    "x-kubernetes-list-type": "atomic",
                },
            },
        });
        let bytes = encode_v2(&doc).expect("encodes");
        let decoded = Document::decode(bytes.as_slice()).expect("decodes");
        assert_eq!(
            extension(
                &decoded.info.as_ref().expect("info").vendor_extension,
                "x-info"
            ),
            Some(serde_yaml::Value::Bool(true))
        );
        let paths = decoded.paths.as_ref().expect("paths");
        assert_eq!(paths.vendor_extension[0].name, "x-paths");
        assert_eq!(paths.path.len(), 1);
        let get = paths.path[0]
            .value
            .as_ref()
            .and_then(|i| i.get.as_ref())
            .expect("get");
        let kinds: Vec<String> = get
            .parameters
            .iter()
            .map(|p| match param(p) {
                Param::Ref(r) => format!("ref {}", r.r#ref),
                Param::Body(b) => format!("body {}", b.name),
                Param::Path(p) => format!("path {} {}", p.name, p.required),
                Param::Header(h) => format!("header {} {}", h.name, h.maximum),
                Param::Form(f) => format!(
                    "form {} {} {} {}",
                    f.name,
                    f.allow_empty_value,
                    f.collection_format,
                    f.items.as_ref().map_or(0, |i| i.r#enum.len())
                ),
                Param::Query(q) => format!("query {}", q.name),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "ref #/parameters/pretty",
                "path id true",
                "header h 5",
                "form f true csv 2"
            ]
        );
        let responses = get.responses.as_ref().expect("responses");
        assert_eq!(responses.vendor_extension[0].name, "x-resp");
        let codes: Vec<&str> = responses
            .response_code
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(codes, ["200", "404"]);
        assert!(matches!(
            response_schema(responses, "200"),
            Some(schema_item::Oneof::FileSchema(_))
        ));
        assert!(response_schema(responses, "404").is_none(), "404 is a $ref");
        let shared = decoded.parameters.as_ref().expect("shared parameters");
        assert_eq!(shared.additional_properties[0].name, "pretty");
        assert_eq!(
            decoded
                .responses
                .as_ref()
                .expect("shared responses")
                .additional_properties[0]
                .name,
            "missing"
        );

        let thing = definition(&decoded, "Thing");
        assert_eq!(
            extension(&thing.vendor_extension, "x-kubernetes-list-type"),
            Some(serde_yaml::Value::from("atomic"))
        );
        assert_eq!(
            property(thing, "open").additional_properties.as_deref(),
            Some(&AdditionalPropertiesItem {
                oneof: Some(additional_properties_item::Oneof::Boolean(true))
            })
        );
        let pair = property(thing, "pair");
        assert_eq!(pair.items.as_ref().map(|i| i.schema.len()), Some(2));
        let mode = property(thing, "mode");
        assert_eq!(
            mode.default.as_ref().map(|d| d.yaml.as_str()),
            Some("fast\n")
        );
        assert_eq!(mode.r#enum.len(), 2);
        let nullable = property(thing, "nullable");
        assert_eq!(types(nullable), ["string", "null"]);
        assert_eq!(nullable.max_length, 3);
        // A property may be named like an extension: `properties` holds names only.
        property(thing, "x-named-like-an-extension");
    }

    #[test]
    fn ill_typed_members_are_reported_with_their_pointer() {
        let err = encode_v2(&json!({"paths": {"/a/b": {"get": {"tags": "x"}}}}))
            .expect_err("tags must be an array");
        assert_eq!(
            err.to_string(),
            "#/paths/~1a~1b/get/tags: expected an array of strings"
        );
        assert!(encode_v2(&json!([])).is_err());
        assert!(
            encode_v2(&json!({"paths": {"/a": {"get": {"parameters": [{"in": "cookie"}]}}}}))
                .is_err()
        );
    }

    #[test]
    fn accept_header_picks_json_or_protobuf_like_kube_openapi() {
        use Format::{Json, Protobuf};
        let cases: &[(Option<&str>, Option<Format>)] = &[
            (None, Some(Json)),
            (Some(""), Some(Json)),
            (Some("*/*"), Some(Json)),
            (Some("application/json"), Some(Json)),
            (Some(PROTOBUF_MEDIA_TYPE_DEPRECATED), Some(Protobuf)),
            (Some(PROTOBUF_MEDIA_TYPE), Some(Protobuf)),
            (
                Some(
                    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0.5",
                ),
                Some(Protobuf),
            ),
            (
                Some(
                    "application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
                Some(Protobuf),
            ),
            (
                Some(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf;q=0.2, application/json",
                ),
                Some(Json),
            ),
            (
                Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf;q=0, */*;q=0.1"),
                Some(Json),
            ),
            (Some("application/*"), Some(Json)),
            (Some("text/html, */*;q=0.8"), Some(Json)),
            (Some("application/vnd.kubernetes.protobuf"), None),
            (Some("application/json;q=0"), None),
            (Some("text/plain"), None),
        ];
        for (accept, expected) in cases {
            assert_eq!(negotiate(*accept), *expected, "Accept: {accept:?}");
        }
    }
}
