//! The Kubernetes format library (upstream `library/format.go`): `format.named(name)` and
//! `format.<name>()` give a format, and `<format>.validate(s)` returns `optional.none()` for a
//! valid string or `optional.of([errors])`. Name formats reuse tandem's own validators, so the
//! errors read as they do for built-in objects.

use cel::common::types::{CelOptional, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, charge_str, opaque_type, str_arg, string_list, take, urls};
use crate::apiextensions::schema::formats::Format;
use crate::validation::names;

/// A named string format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NamedFormat {
    name: &'static str,
}

opaque_type!(NamedFormat, FORMAT_TYPE, "kubernetes.NamedFormat");

/// The formats upstream's library knows.
const FORMATS: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// upstream `maskTrailingDash`: a generateName prefix may end in `-`.
fn mask_trailing_dash(s: &str) -> String {
    match s.strip_suffix('-') {
        Some(head) if !head.is_empty() => format!("{head}a"),
        _ => s.to_string(),
    }
}

fn schema_format(name: &str, s: &str, message: &str) -> Vec<String> {
    match Format::supported(name) {
        Some(f) if f.validates(s) => Vec::new(),
        _ => vec![message.to_string()],
    }
}

fn validate(format: &str, s: &str) -> Vec<String> {
    match format {
        "dns1123Label" => names::dns1123_label(s),
        "dns1123Subdomain" => names::dns1123_subdomain(s),
        "dns1035Label" => names::dns1035_label(s),
        "qualifiedName" => names::qualified_name(s),
        "dns1123LabelPrefix" => names::dns1123_label(&mask_trailing_dash(s)),
        "dns1123SubdomainPrefix" => names::dns1123_subdomain(&mask_trailing_dash(s)),
        "dns1035LabelPrefix" => names::dns1035_label(&mask_trailing_dash(s)),
        "labelValue" => names::label_value(s),
        "uri" => match urls::parse_request_uri(s) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e],
        },
        "uuid" => schema_format("uuid", s, "does not match the UUID format"),
        "byte" => schema_format("byte", s, "invalid base64"),
        "date" => schema_format("date", s, "invalid date"),
        "datetime" => schema_format("date-time", s, "invalid datetime"),
        _ => Vec::new(),
    }
}

/// Each format's constructor: `format.dns1123Label()` and so on. `Function` is a plain
/// function pointer, so each name needs its own.
macro_rules! constructors {
    ($($name:literal => $f:ident),* $(,)?) => {
        $(
            fn $f<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
                Ok(CowVal::owned(NamedFormat { name: $name }))
            }
        )*
        fn add_constructors(env: &mut Env) -> Result<(), DeclarationError> {
            $(
                env.add_overload(
                    concat!("format.", $name),
                    concat!("format_", $name),
                    vec![],
                    $f,
                )?;
            )*
            Ok(())
        }
    };
}

constructors! {
    "dns1123Label" => dns1123_label,
    "dns1123Subdomain" => dns1123_subdomain,
    "dns1035Label" => dns1035_label,
    "qualifiedName" => qualified_name,
    "dns1123LabelPrefix" => dns1123_label_prefix,
    "dns1123SubdomainPrefix" => dns1123_subdomain_prefix,
    "dns1035LabelPrefix" => dns1035_label_prefix,
    "labelValue" => label_value,
    "uri" => uri,
    "uuid" => uuid,
    "byte" => byte,
    "date" => date,
    "datetime" => datetime,
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    add_constructors(env)?;
    env.add_overload("format.named", "format_named", vec![STRING_TYPE], named)?;
    env.add_member_overload(
        "validate",
        "format_validate",
        FORMAT_TYPE.to_owned(),
        vec![STRING_TYPE],
        validate_call,
    )?;
    Ok(())
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [n] = take(args)?;
    let n = str_arg(n.as_ref())?;
    Ok(CowVal::owned(match FORMATS.iter().find(|f| **f == n) {
        Some(name) => CelOptional::of(Box::new(NamedFormat { name })),
        None => CelOptional::none(),
    }))
}

fn validate_call<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [f, s] = take(args)?;
    let f = arg::<NamedFormat>(f.as_ref())?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    let errs = validate(f.name, s);
    if errs.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let list: Box<dyn Val + 'v> = string_list(errs).into_owned();
    Ok(CowVal::owned(CelOptional::of(list)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_true;

    // Cases from upstream `library/format_test.go`.
    #[test]
    fn names_validate_like_built_in_objects() {
        assert_true("format.dns1123Label().validate('my-name') == optional.none()");
        assert_true("format.dns1123Label().validate('My-Name').hasValue()");
        assert_true("format.dns1123Subdomain().validate('example.com') == optional.none()");
        assert_true("format.dns1035Label().validate('1abc').hasValue()");
        assert_true("format.labelValue().validate('') == optional.none()");
        assert_true("format.qualifiedName().validate('example.com/name') == optional.none()");
        assert_true("format.dns1123LabelPrefix().validate('my-name-') == optional.none()");
        assert_true("format.dns1123Label().validate('my-name-').hasValue()");
        assert_true("format.uri().validate('https://example.com') == optional.none()");
        assert_true("format.uri().validate('example.com').hasValue()");
        assert_true("format.dns1123Label().validate('a.b').value() == ['must not contain dots']");
    }

    #[test]
    fn named_finds_known_formats_only() {
        assert_true("format.named('dns1123Label').hasValue()");
        assert_true("!format.named('unknown').hasValue()");
        assert_true("format.named('labelValue').value().validate('ok') == optional.none()");
    }
}
