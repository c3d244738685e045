//! Kubernetes' CEL extension libraries (upstream `k8s.io/apiserver/pkg/cel/library`), registered
//! as functions on the `cel` crate's environment: lists (`isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf`), regex (`find`, `findAll`), URLs, IP addresses and CIDRs, quantities,
//! semver and the `format` library; and the timestamps and durations of CEL's standard library,
//! which the `cel` crate only has with its `chrono` feature ([`time`]).
//!
//! Each function charges its cost to the rule's runtime meter ([`super::cel_cost::charge`]) in
//! upstream's units: one per call, plus the traversal cost of the strings and lists it reads
//! (`size × 0.1` for strings, one per element for lists).
//!
//! Values of the library's own types (`URL`, `net.IP`, `net.CIDR`, `Quantity`, `Semver`,
//! `kubernetes.NamedFormat`) are opaque: they compare with `==` and are read through their
//! member functions, as upstream's are.

mod format;
mod ip;
mod lists;
mod quantity;
mod regex;
mod semver;
mod time;
mod urls;

use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelString};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::cel_cost;
pub(crate) use time::from_schema_string as time_from_schema_string;

/// Registers every library on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    lists::register(env)?;
    regex::register(env)?;
    urls::register(env)?;
    ip::register(env)?;
    quantity::register(env)?;
    semver::register(env)?;
    format::register(env)?;
    time::register(env)?;
    Ok(())
}

/// Declares an opaque CEL type backed by a Rust type that is `Clone + PartialEq`.
macro_rules! opaque_type {
    ($ty:ty, $static:ident, $name:literal) => {
        pub(crate) static $static: std::sync::LazyLock<cel::common::types::Type> =
            std::sync::LazyLock::new(|| cel::common::types::Type::new_opaque_type($name));

        impl cel::common::value::Val for $ty {
            fn get_type(&self) -> &cel::common::types::Type {
                &$static
            }

            fn cel_type() -> &'static cel::common::types::Type {
                &$static
            }

            fn equals(&self, other: &dyn cel::common::value::Val) -> bool {
                other.downcast_ref::<$ty>().is_some_and(|o| o == self)
            }

            fn clone_as_boxed<'v>(&self) -> Box<dyn cel::common::value::Val + 'v>
            where
                Self: 'v,
            {
                Box::new(self.clone())
            }

            fn as_any(&self) -> Option<&dyn std::any::Any> {
                Some(self)
            }
        }

        impl cel::common::value::StaticVal for $ty {}
    };
}
pub(crate) use opaque_type;

/// The arguments of a call, as an array of exactly `N`.
fn take<'b, 'v, const N: usize>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into()
        .map_err(|a: Vec<_>| ExecutionError::invalid_argument_count(N, a.len()))
}

/// `v` downcast to `T`, or a type error naming what was expected.
fn arg<'b, 'v, T>(v: &'b (dyn Val + 'v)) -> Result<&'b T, ExecutionError>
where
    T: cel::common::value::FromVal<'b, 'v> + Val,
{
    v.downcast_ref::<T>()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: v.get_type().name().to_string(),
            want: T::cel_type().name().to_string(),
        })
}

fn str_arg<'b>(v: &'b (dyn Val + '_)) -> Result<&'b str, ExecutionError> {
    Ok(arg::<CelString>(v)?.inner())
}

fn int_arg(v: &(dyn Val + '_)) -> Result<i64, ExecutionError> {
    Ok(*arg::<CelInt>(v)?.inner())
}

fn string<'b, 'v>(s: impl Into<String>) -> CowVal<'b, 'v> {
    CowVal::owned(CelString::from(s.into()))
}

fn boolean<'b, 'v>(b: bool) -> CowVal<'b, 'v> {
    CowVal::owned(CelBool::from(b))
}

fn int<'b, 'v>(i: i64) -> CowVal<'b, 'v> {
    CowVal::owned(CelInt::from(i))
}

fn double<'b, 'v>(f: f64) -> CowVal<'b, 'v> {
    CowVal::owned(CelDouble::from(f))
}

fn string_list<'b, 'v>(items: impl IntoIterator<Item = String>) -> CowVal<'b, 'v> {
    let items: Vec<Box<dyn Val + 'v>> = items
        .into_iter()
        .map(|s| Box::new(CelString::from(s)) as Box<dyn Val + 'v>)
        .collect();
    CowVal::owned(CelList::from(items))
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// Charges one call plus upstream's string traversal cost (`ceil(len × 0.1)`) of `s`.
fn charge_str(s: &str) -> Result<(), ExecutionError> {
    cel_cost::charge(1 + cel_cost::string_traversal(s.len() as u64))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use cel::{Context, Value};

    /// Evaluates `expr` in the rule environment; panics (test only) on a compile error.
    pub(crate) fn eval(expr: &str) -> Result<Value, cel::ExecutionError> {
        let env = super::super::cel::rule_env();
        let program = env.compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let ctx = Context::with_env(Arc::clone(env));
        program.execute(&ctx)
    }

    /// Asserts that `expr` evaluates to `true`.
    pub(crate) fn assert_true(expr: &str) {
        assert_eq!(eval(expr), Ok(Value::Bool(true)), "{expr}");
    }

    /// Asserts that `expr` fails with an error whose text contains `needle`.
    pub(crate) fn assert_error(expr: &str, needle: &str) {
        match eval(expr) {
            Err(e) => assert!(e.to_string().contains(needle), "{expr}: {e}"),
            Ok(v) => panic!("{expr}: expected an error containing {needle:?}, got {v:?}"),
        }
    }
}
