//! Label selectors: a port of `k8s.io/apimachinery/pkg/labels` (the string syntax parser,
//! `Requirement`, matching and canonical `String()` form) and of
//! `metav1.LabelSelectorAsSelector` for the structured form, given as JSON or as k8s-openapi's
//! typed `LabelSelector`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use serde_json::{Map, Value};

use super::SelectorError;
use crate::field::go_quote;
use crate::validation::names::{
    label_value as label_value_errors, qualified_name as qualified_name_errors,
};

/// A requirement's operator (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: also matches objects without the label.
    NotIn,
    /// `key=value`.
    Equals,
    /// `key==value`, same meaning as `=`.
    DoubleEquals,
    /// `key!=value`: also matches objects without the label.
    NotEquals,
    /// `key`.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `key>3`: the label's value parses as an integer greater than the operand.
    GreaterThan,
    /// `key<3`.
    LessThan,
}

/// The operators in the order upstream lists them in "expected: …" messages
/// (`binaryOperators` in labels/selector.go).
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// One `key op values` term of a selector (`labels.Requirement`). Build it with
/// [`Requirement::new`], which validates like `labels.NewRequirement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

/// A parsed label selector: the AND of its requirements, or the selector that matches nothing
/// (what `metav1.LabelSelectorAsSelector` returns for a nil selector).
///
/// `LabelSelector::default()` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

/// A label set a selector is matched against (`labels.Labels`): an object's `metadata.labels`
/// as JSON, or the `BTreeMap` k8s-openapi's typed objects carry.
pub trait Labels {
    /// The value of label `key`, if the set has it (a non-string JSON value reads as absent).
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for Map<String, Value> {
    fn label(&self, key: &str) -> Option<&str> {
        Map::get(self, key).and_then(Value::as_str)
    }
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

// ---------------------------------------------------------------------------------------------
// Validation, with upstream's messages (k8s.io/apimachinery/pkg/util/validation).

// The name and value rules themselves live in `crate::validation::names`, shared with object
// validation.

/// `field.Invalid(path, value, detail).Error()` for a string value.
fn invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

/// `field.Invalid(path, values, detail).Error()` for a `[]string` value (JSON-printed).
fn invalid_list(path: &str, values: &[String], detail: &str) -> String {
    let shown = if values.is_empty() {
        "null".to_string()
    } else {
        serde_json::to_string(values).unwrap_or_else(|_| "null".to_string())
    };
    format!("{path}: Invalid value: {shown}: {detail}")
}

/// `errors.NewAggregate(errs).Error()`: one message as is, several deduplicated in brackets.
fn aggregate(errs: Vec<String>) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => seen.pop(),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// `validateLabelKey` at the given field path.
fn key_error(key: &str, path: &str) -> Option<String> {
    let errs = qualified_name_errors(key);
    (!errs.is_empty()).then(|| invalid(path, key, &errs.join("; ")))
}

// ---------------------------------------------------------------------------------------------
// Requirement.

impl Requirement {
    /// Builds a validated requirement (`labels.NewRequirement` with no field path): the key
    /// must be a qualified name, each value a valid label value; `In`/`NotIn` need values,
    /// `=`/`==`/`!=` exactly one, `Exists`/`DoesNotExist` none, `Gt`/`Lt` one integer.
    pub fn new(
        key: &str,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        let mut errs: Vec<String> = key_error(key, "key").into_iter().collect();
        errs.extend(operator_value_errors(key, operator, &values));
        match aggregate(errs) {
            None => Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            }),
            Some(msg) => Err(SelectorError::InvalidLabelSelector(msg)),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, in the order given (sorted and deduplicated when parsed from a string).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches`: `In`/`=` need the label with one of the values; `NotIn`/`!=`
    /// match a missing label; `Gt`/`Lt` compare integers and never match a non-integer label.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [operand] = self.values.as_slice() else {
                    return false;
                };
                let Ok(operand) = operand.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > operand
                } else {
                    actual < operand
                }
            }
        }
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }
}

/// The operator/values checks of `labels.NewRequirement` (field path `values`).
fn operator_value_errors(key: &str, operator: Operator, values: &[String]) -> Vec<String> {
    let mut errs = Vec::new();
    match operator {
        Operator::In | Operator::NotIn => {
            if values.is_empty() {
                errs.push(invalid_list(
                    "values",
                    values,
                    "for 'in', 'notin' operators, values set can't be empty",
                ));
            }
        }
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
            if values.len() != 1 {
                errs.push(invalid_list(
                    "values",
                    values,
                    "exact-match compatibility requires one single value",
                ));
            }
        }
        Operator::Exists | Operator::DoesNotExist => {
            if !values.is_empty() {
                errs.push(invalid_list(
                    "values",
                    values,
                    "values set must be empty for exists and does not exist",
                ));
            }
        }
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(invalid_list(
                    "values",
                    values,
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errs.push(invalid(
                        &format!("values[{i}]"),
                        v,
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let value_errs = label_value_errors(v);
        if !value_errs.is_empty() {
            errs.push(invalid(
                &format!("values[{i}][{key}]"),
                v,
                &value_errs.join("; "),
            ));
        }
    }
    errs
}

/// `Requirement.String()`: `k=v`, `k!=v`, `k in (a,b)` (values sorted), `k`, `!k`, `k>1`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        if let [only] = self.values.as_slice() {
            f.write_str(only)?;
        } else {
            let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            f.write_str(&sorted.join(","))?;
        }
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The string syntax: lexer and recursive-descent parser, as in labels/selector.go.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into (token, literal) pairs ending with `EndOfString` (`Lexer.Lex`).
fn lex(input: &str) -> Vec<(Tok, String)> {
    let b = input.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Tok::EndOfString, String::new()));
            return out;
        }
        let start = pos;
        if is_special(b[pos]) {
            // Longest run of special symbols that still forms a known operator.
            let mut best: Option<(Tok, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                match keyword(&input[start..=pos]) {
                    Some(tok) => best = Some((tok, pos + 1)),
                    None if best.is_some() => break,
                    None => {}
                }
                pos += 1;
            }
            match best {
                Some((tok, end)) => {
                    out.push((tok, input[start..end].to_string()));
                    pos = end;
                }
                None => out.push((
                    Tok::Error,
                    format!("error expected: keyword found '{}'", &input[start..pos]),
                )),
            }
        } else {
            while pos < b.len() && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let lit = &input[start..pos];
            out.push((keyword(lit).unwrap_or(Tok::Identifier), lit.to_string()));
        }
    }
}

/// Whether `in`/`notin` are read as operators or as plain identifiers (`ParserContext`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn item(&self, ctx: Ctx) -> (Tok, String) {
        let (tok, lit) = self
            .items
            .get(self.pos)
            .or(self.items.last())
            .cloned()
            .unwrap_or((Tok::EndOfString, String::new()));
        let tok = match tok {
            Tok::In | Tok::NotIn if ctx == Ctx::Values => Tok::Identifier,
            t => t,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.item(ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let it = self.item(ctx);
        if self.pos < self.items.len() {
            self.pos += 1;
        }
        it
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::EndOfString => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::EndOfString => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op) = inferred {
            return build(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        build(&key, op, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut does_not_exist = false;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            does_not_exist = true;
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        if let Some(e) = key_error(&lit, "<nil>") {
            return Err(e);
        }
        let (next, _) = self.lookahead(Ctx::Values);
        let op = if does_not_exist {
            Some(Operator::DoesNotExist)
        } else if next == Tok::EndOfString || next == Tok::Comma {
            Some(Operator::Exists)
        } else {
            None
        };
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                let (closing, _) = self.consume(Ctx::Values);
                if closing != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    set.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    // "(," "(,)" ",," and ",)" all stand for the empty value.
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if t2 == Tok::Comma {
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::EndOfString || tok == Tok::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `NewRequirement` as the parser calls it: key validity is already checked.
fn build(key: &str, op: Operator, values: Vec<String>) -> Result<Requirement, String> {
    match aggregate(operator_value_errors(key, op, &values)) {
        None => Ok(Requirement {
            key: key.to_string(),
            operator: op,
            values,
        }),
        Some(msg) => Err(msg),
    }
}

// ---------------------------------------------------------------------------------------------
// The selector.

impl LabelSelector {
    /// The selector that matches every object (`labels.Everything`).
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// The selector that matches no object (`labels.Nothing`).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses upstream's selector syntax (`labels.Parse`): comma-separated requirements
    /// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, `k>1`, `k<1`, whitespace
    /// between tokens tolerated. An empty string selects everything. Errors carry upstream's
    /// text, e.g. `unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt`.
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser {
            items: lex(s),
            pos: 0,
        };
        let mut requirements = parser
            .parse()
            .map_err(SelectorError::InvalidLabelSelector)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Converts a `metav1.LabelSelector` (`matchLabels`, `matchExpressions` with `In`, `NotIn`,
    /// `Exists`, `DoesNotExist`), as `metav1.LabelSelectorAsSelector` does: `null` or absent
    /// selects nothing, `{}` selects everything, an unknown operator or invalid key/value is an
    /// error.
    pub fn from_json(sel: &Value) -> Result<LabelSelector, SelectorError> {
        let invalid = |m: String| SelectorError::InvalidLabelSelector(m);
        let obj = match sel {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(invalid(format!(
                    "label selector must be an object, not {other}"
                )));
            }
        };
        let match_labels = match obj.get("matchLabels") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(invalid("matchLabels must be a map of strings".to_string())),
        };
        let expressions = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(_) => return Err(invalid("matchExpressions must be a list".to_string())),
        };
        let mut labels = Vec::new();
        for (k, v) in match_labels.into_iter().flatten() {
            let v = v
                .as_str()
                .ok_or_else(|| invalid(format!("matchLabels[{k}] must be a string")))?;
            labels.push((k.as_str(), v));
        }
        let mut terms = Vec::new();
        for expr in expressions {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
            let op_name = expr.get("operator").and_then(Value::as_str).unwrap_or("");
            let values = match expr.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| x.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        invalid("matchExpressions values must be strings".to_string())
                    })?,
                Some(_) => {
                    return Err(invalid(
                        "matchExpressions values must be a list".to_string(),
                    ));
                }
            };
            terms.push((key, op_name, values));
        }
        LabelSelector::from_terms(labels, terms)
    }

    /// [`from_json`](Self::from_json) for k8s-openapi's typed `metav1.LabelSelector`
    /// (`metav1.LabelSelectorAsSelector` of a non-nil selector): no labels and no expressions
    /// select everything. A caller holding an `Option` maps `None` to
    /// [`nothing`](Self::nothing), as upstream does for a nil selector.
    pub fn from_metav1(sel: &metav1::LabelSelector) -> Result<LabelSelector, SelectorError> {
        let labels = sel
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let terms = sel.match_expressions.iter().flatten().map(|e| {
            (
                e.key.as_str(),
                e.operator.as_str(),
                e.values.clone().unwrap_or_default(),
            )
        });
        LabelSelector::from_terms(labels, terms)
    }

    /// The common part of `LabelSelectorAsSelector`: `matchLabels` as `=` requirements,
    /// `matchExpressions` with their four operators, each validated; nothing selects everything.
    fn from_terms<'a>(
        labels: impl IntoIterator<Item = (&'a str, &'a str)>,
        terms: impl IntoIterator<Item = (&'a str, &'a str, Vec<String>)>,
    ) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in labels {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.to_string()])?);
        }
        for (key, op_name, values) in terms {
            let op = match op_name {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::InvalidLabelSelector(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )));
                }
            };
            requirements.push(Requirement::new(key, op, values)?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// The selector matching exactly the given labels (`labels.SelectorFromSet`), as used for
    /// Service and ReplicationController selectors; empty selects everything. Not validated.
    pub fn from_set(set: &Map<String, Value>) -> LabelSelector {
        let mut requirements: Vec<Requirement> = set
            .iter()
            .map(|(k, v)| Requirement {
                key: k.clone(),
                operator: Operator::Equals,
                values: vec![v.as_str().unwrap_or("").to_string()],
            })
            .collect();
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Whether every requirement matches `labels` (an object's `metadata.labels`).
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.matches_labels(labels)
    }

    /// [`matches`](Self::matches) on any label set, e.g. a typed object's
    /// `metadata.labels` (`Selector.Matches`).
    pub fn matches_labels<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`matches`](Self::matches) on an object's `metadata.labels` (absent reads as empty).
    pub fn matches_object(&self, obj: &Value) -> bool {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new));
        self.matches(labels)
    }

    /// Whether the selector places no restriction (`Selector.Empty`): true for everything,
    /// false for nothing.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is the selector that matches nothing.
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The single value the selector demands for `label` (`RequiresExactMatch`): set by
    /// `label=v`, `label==v` or `label in (v)`.
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == label)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [only]) => Some(only),
            _ => None,
        }
    }
}

/// `Selector.String()`: requirements sorted by key, comma-joined; empty for everything and
/// for nothing.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn set_based_label_selector_parses_and_matches() {
        let sel = LabelSelector::parse(
            "env in (prod, staging),tier notin (cache),app,!legacy,version>2, x==y",
        )
        .expect("parses");
        assert_eq!(
            sel.to_string(),
            "app,env in (prod,staging),!legacy,tier notin (cache),version>2,x==y"
        );
        let good = labels(json!({"env": "prod", "app": "web", "version": "3", "x": "y"}));
        assert!(sel.matches(&good));
        let mut bad = good.clone();
        bad.insert("legacy".into(), json!("true"));
        assert!(!sel.matches(&bad));
        let mut cache = good.clone();
        cache.insert("tier".into(), json!("cache"));
        assert!(!sel.matches(&cache));
        let mut old = good.clone();
        old.insert("version".into(), json!("2"));
        assert!(!sel.matches(&old));
        let mut not_int = good.clone();
        not_int.insert("version".into(), json!("three"));
        assert!(!sel.matches(&not_int));

        let ne = LabelSelector::parse("a!=b").expect("parses");
        assert!(ne.matches(&Map::new()), "!= matches a missing label");
        assert!(LabelSelector::parse("").expect("empty parses").is_empty());
        assert!(
            LabelSelector::parse("  ")
                .expect("blank parses")
                .matches(&Map::new())
        );
        // `in` is a value inside the parentheses, and `()` means the empty value.
        let kw = LabelSelector::parse("x in (in,notin),y notin ()").expect("parses");
        assert!(kw.matches(&labels(json!({"x": "notin", "y": "z"}))));
        assert_eq!(kw.to_string(), "x in (in,notin),y notin ()");
        assert_eq!(
            LabelSelector::parse("a=").expect("empty value").to_string(),
            "a="
        );
        assert_eq!(
            LabelSelector::parse("env=prod")
                .expect("parses")
                .requires_exact_match("env"),
            Some("prod")
        );
    }

    #[test]
    fn invalid_label_selector_is_an_error() {
        let msg = |s: &str| LabelSelector::parse(s).expect_err(s).to_string();
        assert_eq!(
            msg("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(msg("a=b,"), "found '', expected: identifier after ','");
        assert_eq!(msg("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(
            msg(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            msg("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            msg("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            msg("!"),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            msg("a>b"),
            "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert_eq!(
            msg("a@b=c"),
            "unable to parse requirement: <nil>: Invalid value: \"a@b\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert!(msg("Example.com/a=b").contains("prefix part a lowercase RFC 1123 subdomain"));
        let long = format!("a={}", "v".repeat(64));
        assert_eq!(
            msg(&long),
            format!(
                "unable to parse requirement: values[0][a]: Invalid value: \"{}\": must be no more than 63 characters",
                "v".repeat(64)
            )
        );
        assert!(msg("a=-x").starts_with("unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must be an empty string"));
    }

    #[test]
    fn match_expressions_exists_and_does_not_exist() {
        let sel = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"},
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
            ]
        }))
        .expect("valid selector");
        assert_eq!(sel.to_string(), "app=web,!canary,tier in (edge,front),zone");
        assert!(sel.matches(&labels(json!({"app": "web", "zone": "a", "tier": "edge"}))));
        assert!(!sel.matches(&labels(
            json!({"app": "web", "zone": "a", "tier": "edge", "canary": ""})
        )));
        assert!(!sel.matches(&labels(json!({"app": "web", "tier": "edge"}))));

        // null selects nothing, {} selects everything (metav1.LabelSelectorAsSelector).
        let nothing = LabelSelector::from_json(&Value::Null).expect("null is valid");
        assert!(
            !nothing.matches(&Map::new())
                && nothing.matches_nothing()
                && nothing.to_string().is_empty()
        );
        assert!(
            LabelSelector::from_json(&json!({}))
                .expect("empty is valid")
                .matches(&labels(json!({"a": "b"})))
        );

        let bad_op = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        );
        assert_eq!(
            bad_op.expect_err("Gt refused").to_string(),
            "\"Gt\" is not a valid label selector operator"
        );
        let exists_with_values = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        );
        assert_eq!(
            exists_with_values.expect_err("refused").to_string(),
            "values: Invalid value: [\"x\"]: values set must be empty for exists and does not exist"
        );
        let in_without_values = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        );
        assert_eq!(
            in_without_values.expect_err("refused").to_string(),
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
        );
        let bad_key = LabelSelector::from_json(&json!({"matchLabels": {"a b": "c"}}));
        assert!(
            bad_key
                .expect_err("refused")
                .to_string()
                .starts_with("key: Invalid value: \"a b\": name part must consist")
        );
        let obj = json!({"metadata": {"labels": {"app": "web", "zone": "z", "tier": "front"}}});
        assert!(sel.matches_object(&obj));
        assert!(!sel.matches_object(&json!({"metadata": {}})));
    }

    type Pairs<'a> = &'a [(&'a str, &'a str)];

    fn set(pairs: Pairs<'_>) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Upstream's `TestSelectorMatches` (labels/selector_test.go), against both label-set
    /// representations.
    #[test]
    fn selector_matches_upstream_table() {
        let cases: &[(&str, Pairs<'_>, bool)] = &[
            ("", &[("x", "y")], true),
            ("x=y", &[("x", "y")], true),
            ("x=y,z=w", &[("x", "y"), ("z", "w")], true),
            ("x!=y,z!=w", &[("x", "z"), ("z", "a")], true),
            ("notin=in", &[("notin", "in")], true),
            ("x", &[("x", "z")], true),
            ("!x", &[("y", "z")], true),
            ("x>1", &[("x", "2")], true),
            ("x<1", &[("x", "0")], true),
            ("x=z", &[], false),
            ("x=y", &[("x", "z")], false),
            ("x=y,z=w", &[("x", "w"), ("z", "w")], false),
            ("x!=y,z!=w", &[("x", "z"), ("z", "w")], false),
            ("x", &[("y", "z")], false),
            ("!x", &[("x", "z")], false),
            ("x>1", &[("x", "0")], false),
            ("x<1", &[("x", "2")], false),
            ("foo=bar", &[("foo", "bar"), ("baz", "blah")], true),
            ("baz=blah", &[("foo", "bar"), ("baz", "blah")], true),
            ("foo=bar,baz=blah", &[("foo", "bar"), ("baz", "blah")], true),
            ("foo=blah", &[("foo", "bar"), ("baz", "blah")], false),
            ("baz=bar", &[("foo", "bar"), ("baz", "blah")], false),
            (
                "foo=bar,foobar=bar,baz=blah",
                &[("foo", "bar"), ("baz", "blah")],
                false,
            ),
        ];
        for (selector, pairs, want) in cases {
            let sel = LabelSelector::parse(selector).expect(selector);
            let typed = set(pairs);
            let json: Map<String, Value> = typed
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            assert_eq!(sel.matches_labels(&typed), *want, "{selector} on {pairs:?}");
            assert_eq!(sel.matches(&json), *want, "{selector} on {pairs:?} (JSON)");
        }
    }

    /// Upstream's `TestLabelSelectorAsSelector` (metav1/helpers_test.go) on the typed form,
    /// plus the matches the workload controllers rely on.
    #[test]
    fn typed_label_selector_converts_like_upstream() {
        use metav1::LabelSelectorRequirement as Req;
        let req = |key: &str, operator: &str, values: Option<&[&str]>| Req {
            key: key.into(),
            operator: operator.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        };
        let sel = |labels: &[(&str, &str)], exprs: Vec<Req>| metav1::LabelSelector {
            match_labels: (!labels.is_empty()).then(|| set(labels)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        };
        // (selector, canonical string or error, labels, matches)
        let cases: Vec<(metav1::LabelSelector, Result<&str, &str>, Pairs<'_>, bool)> = vec![
            (sel(&[], vec![]), Ok(""), &[("a", "b")], true),
            (sel(&[], vec![]), Ok(""), &[], true),
            (
                sel(
                    &[("foo", "bar")],
                    vec![req("baz", "In", Some(&["qux", "norf"]))],
                ),
                Ok("baz in (norf,qux),foo=bar"),
                &[("foo", "bar"), ("baz", "norf")],
                true,
            ),
            (
                sel(&[("app", "web")], vec![req("tier", "NotIn", Some(&["db"]))]),
                Ok("app=web,tier notin (db)"),
                &[("app", "web")],
                true,
            ),
            (
                sel(&[("app", "web")], vec![req("tier", "NotIn", Some(&["db"]))]),
                Ok("app=web,tier notin (db)"),
                &[("app", "web"), ("tier", "db")],
                false,
            ),
            (sel(&[("app", "web")], vec![]), Ok("app=web"), &[], false),
            (
                sel(
                    &[],
                    vec![req("z", "Exists", None), req("c", "DoesNotExist", None)],
                ),
                Ok("!c,z"),
                &[("z", "")],
                true,
            ),
            (
                sel(&[], vec![req("baz", "ExistOrNot", Some(&["qux"]))]),
                Err("\"ExistOrNot\" is not a valid label selector operator"),
                &[],
                false,
            ),
            (
                sel(&[], vec![req("baz", "In", Some(&[]))]),
                Err(
                    "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
                ),
                &[],
                false,
            ),
        ];
        for (selector, want, labels, matches) in cases {
            let got = LabelSelector::from_metav1(&selector);
            match (&got, want) {
                (Ok(s), Ok(text)) => {
                    assert_eq!(s.to_string(), text);
                    assert_eq!(
                        s.matches_labels(&set(labels)),
                        matches,
                        "{text} on {labels:?}"
                    );
                }
                (Err(e), Err(text)) => assert_eq!(e.to_string(), text),
                _ => panic!("{selector:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
