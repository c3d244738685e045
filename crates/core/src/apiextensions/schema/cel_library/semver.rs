//! The Kubernetes semver library (upstream `library/semverlib.go`): `semver(s)`, `isSemver(s)`,
//! and on a version `major()`, `minor()`, `patch()`, `isLessThan`, `isGreaterThan` and
//! `compareTo`. Versions are strict SemVer 2.0.0 as upstream's parser (blang/semver) reads them:
//! `MAJOR.MINOR.PATCH`, an optional `-pre.release` and `+build`, no leading `v`, no leading
//! zeros; precedence ignores build metadata.

use std::cmp::Ordering;

use cel::common::types::STRING_TYPE;
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, boolean, charge_str, error, int, opaque_type, str_arg, take};
use crate::apiextensions::schema::cel_cost;

#[derive(Debug, Clone)]
pub(crate) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.precedence(other) == Ordering::Equal
    }
}

opaque_type!(Semver, SEMVER_TYPE, "kubernetes.Semver");

fn numeric(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

fn valid_identifier(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl Semver {
    fn parse(s: &str) -> Result<Semver, String> {
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        if let Some(b) = build
            && !b.split('.').all(valid_identifier)
        {
            return Err(format!("invalid build metadata in {s:?}"));
        }
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err("No Major.Minor.Patch elements found".to_string());
        };
        let num = |p: &str| numeric(p).ok_or_else(|| format!("invalid version number {p:?}"));
        let mut pre_ids = Vec::new();
        if let Some(p) = pre {
            for id in p.split('.') {
                if !valid_identifier(id)
                    || (id.bytes().all(|b| b.is_ascii_digit()) && numeric(id).is_none())
                {
                    return Err(format!("invalid prerelease identifier {id:?}"));
                }
                pre_ids.push(id.to_string());
            }
        }
        Ok(Semver {
            major: num(major)?,
            minor: num(minor)?,
            patch: num(patch)?,
            pre: pre_ids,
        })
    }

    /// SemVer 2.0.0 precedence.
    fn precedence(&self, other: &Semver) -> Ordering {
        let core =
            (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), other.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&other.pre) {
            let ord = match (numeric(a), numeric(b)) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => a.cmp(b),
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        self.pre.len().cmp(&other.pre.len())
    }
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let v = || SEMVER_TYPE.to_owned();
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], to_semver)?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_member_overload("major", "semver_major", v(), vec![], major)?;
    env.add_member_overload("minor", "semver_minor", v(), vec![], minor)?;
    env.add_member_overload("patch", "semver_patch", v(), vec![], patch)?;
    env.add_member_overload("isLessThan", "semver_less", v(), vec![v()], is_less_than)?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_greater",
        v(),
        vec![v()],
        is_greater_than,
    )?;
    env.add_member_overload("compareTo", "semver_compare", v(), vec![v()], compare_to)?;
    Ok(())
}

fn to_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    let v =
        Semver::parse(s).map_err(|e| error("semver", format!("Could not parse Semver: {e}")))?;
    Ok(CowVal::owned(v))
}

fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(boolean(Semver::parse(s).is_ok()))
}

fn part<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    f: fn(&Semver) -> u64,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = take(args)?;
    cel_cost::charge(1)?;
    Ok(int(
        i64::try_from(f(arg::<Semver>(v.as_ref())?)).unwrap_or(i64::MAX)
    ))
}

fn major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part(args, |v| v.major)
}

fn minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part(args, |v| v.minor)
}

fn patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    part(args, |v| v.patch)
}

fn ordering<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take(args)?;
    cel_cost::charge(1)?;
    Ok(arg::<Semver>(a.as_ref())?.precedence(arg::<Semver>(b.as_ref())?))
}

fn is_less_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(boolean(ordering(args)?.is_lt()))
}

fn is_greater_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(boolean(ordering(args)?.is_gt()))
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(int(match ordering(args)? {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/semver_test.go`.
    #[test]
    fn parsing_is_strict() {
        assert_true("isSemver('1.0.0')");
        assert_true("isSemver('1.0.0-alpha.1+build.5')");
        assert_true("!isSemver('v1.0.0')");
        assert_true("!isSemver('1.0')");
        assert_true("!isSemver('01.0.0')");
        assert_true("!isSemver('1.0.0-01')");
        assert_error("semver('1.0')", "Could not parse Semver");
    }

    #[test]
    fn parts_and_precedence() {
        assert_true("semver('1.2.3').major() == 1");
        assert_true("semver('1.2.3').minor() == 2");
        assert_true("semver('1.2.3').patch() == 3");
        assert_true("semver('1.2.3').compareTo(semver('1.2.4')) == -1");
        assert_true("semver('1.2.3').compareTo(semver('1.2.3+build')) == 0");
        assert_true("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))");
        assert_true("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))");
        assert_true("semver('1.0.0-rc.1').isGreaterThan(semver('1.0.0-beta.11'))");
        assert_true("semver('1.0.0') == semver('1.0.0+meta')");
    }
}
