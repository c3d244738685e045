//! The Kubernetes regex library (upstream `library/regex.go`): `s.find(re)`, `s.findAll(re)` and
//! `s.findAll(re, n)`, with RE2 syntax (the `regex` crate's, which follows RE2).

use cel::common::types::{INT_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};
use regex::{Regex, RegexBuilder};

use super::{error, int_arg, str_arg, string, string_list, take};
use crate::apiextensions::schema::cel_cost;

/// Compiled programs larger than this are refused rather than built.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all_n,
    )?;
    Ok(())
}

/// Compiles `pattern`, charging upstream's estimate for running it over `s`:
/// `ceil((len(s) + 1) × 0.1) × ceil(len(pattern) × 0.25)`.
fn compile(function: &str, s: &str, pattern: &str) -> Result<Regex, ExecutionError> {
    let str_cost = cel_cost::string_traversal(s.len() as u64 + 1);
    let re_cost = (pattern.len() as u64).div_ceil(4);
    cel_cost::charge(1u64.saturating_add(str_cost.saturating_mul(re_cost)))?;
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| error(function, format!("error parsing regexp: {e}")))
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re] = take(args)?;
    let (s, pattern) = (str_arg(s.as_ref())?, str_arg(re.as_ref())?);
    let re = compile("find", s, pattern)?;
    Ok(string(re.find(s).map_or("", |m| m.as_str())))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re] = take(args)?;
    let (s, pattern) = (str_arg(s.as_ref())?, str_arg(re.as_ref())?);
    let re = compile("findAll", s, pattern)?;
    Ok(string_list(re.find_iter(s).map(|m| m.as_str().to_string())))
}

fn find_all_n<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s, re, n] = take(args)?;
    let (s, pattern, n) = (
        str_arg(s.as_ref())?,
        str_arg(re.as_ref())?,
        int_arg(n.as_ref())?,
    );
    let re = compile("findAll", s, pattern)?;
    // Go's `FindAllString`: a negative limit means all matches.
    let limit = usize::try_from(n).unwrap_or(usize::MAX);
    Ok(string_list(
        re.find_iter(s).take(limit).map(|m| m.as_str().to_string()),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/regex_test.go`.
    #[test]
    fn find_returns_the_first_match_or_empty() {
        assert_true("'abc 123'.find('[0-9]+') == '123'");
        assert_true("'abc 123'.find('xyz') == ''");
        assert_true("'abc 123 456'.find('[0-9]*') == ''");
    }

    #[test]
    fn find_all_honours_the_limit() {
        assert_true("'123 abc 456'.findAll('[0-9]+') == ['123', '456']");
        assert_true("'123 abc 456'.findAll('xyz') == []");
        assert_true("'123 abc 456'.findAll('[0-9]+', 1) == ['123']");
        assert_true("'123 abc 456'.findAll('[0-9]+', 0) == []");
        assert_true("'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456']");
    }

    #[test]
    fn invalid_patterns_are_errors() {
        assert_error("'abc'.find('[')", "error parsing regexp");
        assert_error("'abc'.findAll('(', 2)", "error parsing regexp");
    }
}
