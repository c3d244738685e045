//! The Kubernetes quantity library (upstream `library/quantity.go`): `quantity(s)`,
//! `isQuantity(s)`, and on a quantity `sign()`, `isInteger()`, `asInteger()`,
//! `asApproximateFloat()`, `add`, `sub` (of a quantity or an int), `isLessThan`,
//! `isGreaterThan` and `compareTo`; `==` compares values (`quantity('1') == quantity('1000m')`).
//!
//! Values are tandem's own [`Quantity`] (exact to the nano-unit, saturating), as resource
//! requests are compared elsewhere.

use std::cmp::Ordering;

use cel::common::types::{INT_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, boolean, charge_str, double, error, int, int_arg, opaque_type, str_arg, take};
use crate::apiextensions::schema::cel_cost;
use crate::validation::quantity::{QUANTITY_FORMAT_ERROR, Quantity};

opaque_type!(Quantity, QUANTITY_TYPE, "kubernetes.Quantity");

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// upstream `resource.ParseQuantity`: no surrounding spaces.
fn parse(s: &str) -> Option<Quantity> {
    if s.trim() != s {
        return None;
    }
    Quantity::parse(s)
}

fn from_nanos(nanos: i128) -> Result<Quantity, ExecutionError> {
    // `Quantity` has no public constructor from nano-units; its parser reads them exactly.
    Quantity::parse(&format!("{nanos}n")).ok_or_else(|| error("quantity", "quantity out of range"))
}

fn as_i64(q: Quantity) -> Option<i64> {
    let n = q.nanos();
    if n % NANOS_PER_UNIT != 0 {
        return None;
    }
    i64::try_from(n / NANOS_PER_UNIT).ok()
}

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let q = || QUANTITY_TYPE.to_owned();
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        to_quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload("sign", "quantity_sign", q(), vec![], sign)?;
    env.add_member_overload("isInteger", "quantity_is_integer", q(), vec![], is_integer)?;
    env.add_member_overload("asInteger", "quantity_as_integer", q(), vec![], as_integer)?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_as_float",
        q(),
        vec![],
        as_approximate_float,
    )?;
    env.add_member_overload("add", "quantity_add", q(), vec![q()], add)?;
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub", q(), vec![q()], sub)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], sub)?;
    env.add_member_overload("isLessThan", "quantity_less", q(), vec![q()], is_less_than)?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_greater",
        q(),
        vec![q()],
        is_greater_than,
    )?;
    env.add_member_overload("compareTo", "quantity_compare", q(), vec![q()], compare_to)?;
    Ok(())
}

fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    let q = parse(s).ok_or_else(|| error("quantity", QUANTITY_FORMAT_ERROR))?;
    Ok(CowVal::owned(q))
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let s = str_arg(s.as_ref())?;
    charge_str(s)?;
    Ok(boolean(parse(s).is_some()))
}

fn unary<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<Quantity, ExecutionError> {
    let [q] = take(args)?;
    cel_cost::charge(1)?;
    Ok(*arg::<Quantity>(q.as_ref())?)
}

fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(int(match unary(args)?.nanos().cmp(&0) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(boolean(as_i64(unary(args)?).is_some()))
}

fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = unary(args)?;
    as_i64(q)
        .map(int)
        .ok_or_else(|| error("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(double(unary(args)?.nanos() as f64 / NANOS_PER_UNIT as f64))
}

/// The quantity and the other operand (a quantity, or an int in base units).
fn binary<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<(Quantity, Quantity), ExecutionError> {
    let [q, other] = take(args)?;
    cel_cost::charge(1)?;
    let q = *arg::<Quantity>(q.as_ref())?;
    let other = match other.downcast_ref::<Quantity>() {
        Some(o) => *o,
        None => from_nanos(i128::from(int_arg(other.as_ref())?).saturating_mul(NANOS_PER_UNIT))?,
    };
    Ok((q, other))
}

fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (q, other) = binary(args)?;
    Ok(CowVal::owned(q.saturating_add(other)))
}

fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (q, other) = binary(args)?;
    Ok(CowVal::owned(from_nanos(
        q.nanos().saturating_sub(other.nanos()),
    )?))
}

fn is_less_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (q, other) = binary(args)?;
    Ok(boolean(q.cmp_value(other).is_lt()))
}

fn is_greater_than<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (q, other) = binary(args)?;
    Ok(boolean(q.cmp_value(other).is_gt()))
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (q, other) = binary(args)?;
    Ok(int(match q.cmp_value(other) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/quantity_test.go`.
    #[test]
    fn parsing_and_validity() {
        assert_true("isQuantity('20')");
        assert_true("isQuantity('20M')");
        assert_true("isQuantity('20Mi')");
        assert_true("isQuantity('1e3')");
        assert_true("!isQuantity('20 ')");
        assert_true("!isQuantity('invalid')");
        assert_true("!isQuantity('1Mib')");
        assert_error(
            "quantity('invalid')",
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        );
        assert_true("quantity('200M') == quantity('0.2G')");
        assert_true("quantity('1Gi') == quantity('1024Mi')");
    }

    #[test]
    fn sign_and_integers() {
        assert_true("quantity('50k').sign() == 1");
        assert_true("quantity('-50k').sign() == -1");
        assert_true("quantity('0').sign() == 0");
        assert_true("quantity('50k').isInteger()");
        assert_true("!quantity('50m').isInteger()");
        assert_true("!quantity('9999999999999999999999999999999999999G').isInteger()");
        assert_true("quantity('50k').asInteger() == 50000");
        assert_error(
            "quantity('50m').asInteger()",
            "cannot convert value to integer",
        );
        assert_true("quantity('50.5').asApproximateFloat() == 50.5");
        assert_true("quantity('50m').asApproximateFloat() == 0.05");
    }

    #[test]
    fn arithmetic_and_comparison() {
        assert_true("quantity('50k').add(quantity('20')) == quantity('50.02k')");
        assert_true("quantity('50k').add(20) == quantity('50020')");
        assert_true("quantity('50k').sub(quantity('20')) == quantity('49.98k')");
        assert_true("quantity('50k').sub(20) == quantity('49980')");
        assert_true("quantity('200M').compareTo(quantity('0.2G')) == 0");
        assert_true("quantity('50M').compareTo(quantity('50Mi')) == -1");
        assert_true("quantity('50Mi').compareTo(quantity('50M')) == 1");
        assert_true("quantity('50M').isLessThan(quantity('50Mi'))");
        assert_true("quantity('50Mi').isGreaterThan(quantity('50M'))");
        assert_true("!quantity('50M').isGreaterThan(quantity('50M'))");
    }
}
