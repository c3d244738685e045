//! Values printed the way Go's `fmt` prints the `interface{}` values of an unstructured object,
//! so messages read byte for byte like kube-apiserver's.
//!
//! Upstream decodes a custom resource into `map[string]interface{}` with integers as `int64` and
//! other numbers as `float64`. `field.Error.ErrorBody` prints a bad value with `%v` for numbers
//! and booleans, `%q` for strings and `%#v` for anything else (maps, slices); kube-openapi
//! formats bounds and enum lists with `%v`.

use serde_json::{Map, Value};

/// `field.Error`'s rendering of a bad value: `%q` for strings, `%v` for numbers and booleans,
/// `%#v` for objects and arrays, and `"null"` for nil (ErrorBody turns nil into the string
/// `"null"` before quoting it).
pub(crate) fn error_value(v: &Value) -> String {
    match v {
        Value::Null => quote("null"),
        Value::String(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => number(v),
        Value::Array(_) | Value::Object(_) => sharp_v(v),
    }
}

/// Go's `%q` (`strconv.Quote`): double quotes, with `\"`, `\\`, control characters and invalid
/// runes escaped; printable Unicode stays as it is.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32))
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number as Go's `%v` prints the `int64` or `float64` it decodes to.
pub(crate) fn number(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                // Beyond int64 upstream decodes to float64.
                float(u as f64)
            } else {
                float(n.as_f64().unwrap_or(0.0))
            }
        }
        other => other.to_string(),
    }
}

/// Go's `%v` of a `float64`: the shortest representation that round-trips, in exponent form
/// when the decimal exponent is below -4 or at least 6 (strconv's `'g'` with shortest
/// precision, as fmt uses it for `%v`: `1e+06`, `1.5e+07`, `100000`).
pub(crate) fn float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits: `d.ddde±x`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => return sci,
    };
    if !(-4..6).contains(&exp) {
        let (sign, digits) = match mantissa.strip_prefix('-') {
            Some(rest) => ("-", rest.to_string()),
            None => ("", mantissa),
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{digits}e{esign}{:02}", exp.abs());
    }
    // Plain decimal: Rust's Display is the shortest round-trip too.
    let s = format!("{f}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// Go's `%#v` of an unstructured value: `map[string]interface {}{"a":1, "b":"x"}` with sorted
/// keys, `[]interface {}{"a", 1}`, and `interface {}(nil)` for a nil inside them.
pub(crate) fn sharp_v(v: &Value) -> String {
    let mut out = String::new();
    write_sharp_v(v, &mut out, 0);
    out
}

fn write_sharp_v(v: &Value, out: &mut String, depth: usize) {
    if depth > 64 {
        out.push_str("...");
        return;
    }
    match v {
        Value::Null => out.push_str("interface {}(nil)"),
        Value::String(s) => out.push_str(&quote(s)),
        Value::Bool(b) => out.push_str(&b.to_string()),
        Value::Number(_) => out.push_str(&number(v)),
        Value::Array(items) => {
            out.push_str("[]interface {}{");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_sharp_v(item, out, depth + 1);
            }
            out.push('}');
        }
        Value::Object(map) => write_map(map, out, depth),
    }
}

fn write_map(map: &Map<String, Value>, out: &mut String, depth: usize) {
    out.push_str("map[string]interface {}{");
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&quote(k));
        out.push(':');
        if let Some(v) = map.get(k) {
            write_sharp_v(v, out, depth + 1);
        }
    }
    out.push('}');
}

/// Go's `%v` of a `[]interface{}` as kube-openapi's enum message prints it: `[a b 1]`.
pub(crate) fn plain_list(values: &[Value]) -> String {
    let parts: Vec<String> = values.iter().map(plain_v).collect();
    format!("[{}]", parts.join(" "))
}

/// Go's `%v` of an unstructured value: strings bare, `map[a:1 b:x]`, `[a 1]`, `<nil>`.
pub(crate) fn plain_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => number(v),
        Value::Array(items) => plain_list(items),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{k}:{}", map.get(k).map(plain_v).unwrap_or_default()))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_like_go_percent_v() {
        assert_eq!(float(1.5), "1.5");
        assert_eq!(float(10.0), "10");
        assert_eq!(float(1e21), "1e+21");
        assert_eq!(float(100000.0), "100000");
        assert_eq!(float(1000000.0), "1e+06");
        assert_eq!(float(123456789.0), "1.23456789e+08");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(0.00001), "1e-05");
        assert_eq!(float(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn compound_values_print_like_go_sharp_v() {
        assert_eq!(
            sharp_v(&json!({"b": "x", "a": 1, "c": null})),
            r#"map[string]interface {}{"a":1, "b":"x", "c":interface {}(nil)}"#
        );
        assert_eq!(sharp_v(&json!(["a", 1.5])), r#"[]interface {}{"a", 1.5}"#);
        assert_eq!(error_value(&json!(null)), r#""null""#);
        assert_eq!(plain_list(&[json!("RSA"), json!(2)]), "[RSA 2]");
        assert_eq!(quote("a\"b\n"), r#""a\"b\n""#);
    }
}
