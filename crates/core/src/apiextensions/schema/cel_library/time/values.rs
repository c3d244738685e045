//! The values: [`Timestamp`] and [`Duration`] with cel-go's operators and range checks, and
//! [`Unreadable`], what a `format: date-time`/`date`/`duration` string that does not parse
//! becomes.

use std::cmp::Ordering;
use std::sync::LazyLock;

use cel::ExecutionError;
use cel::common::traits::{Adder, Comparer, Negator, Subtractor, Zeroer};
use cel::common::types::{DURATION_TYPE, TIMESTAMP_TYPE, Type};
use cel::common::value::{CowVal, StaticVal, Val};

use super::super::error;
use crate::time::OffsetTime;

pub(super) const NANOS_PER_SECOND: i64 = 1_000_000_000;
/// cel-go's `minUnixTime`: `0001-01-01T00:00:00Z`.
pub(super) const MIN_UNIX_SECONDS: i64 = -62_135_596_800;
/// cel-go's `maxUnixTime`: `9999-12-31T23:59:59Z` (and up to its last nanosecond).
pub(super) const MAX_UNIX_SECONDS: i64 = 253_402_300_799;

pub(super) const TIMESTAMP_OVERFLOW: &str = "timestamp overflow";
const INTEGER_OVERFLOW: &str = "integer overflow";

pub(super) static TIMESTAMP: Type = TIMESTAMP_TYPE;
pub(super) static DURATION: Type = DURATION_TYPE;

/// A CEL timestamp: an instant, and the UTC offset it was written with (which only
/// `string()` shows, as Go's `time.Time` keeps its zone).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timestamp(pub(super) OffsetTime);

/// A CEL duration: signed nanoseconds (Go's `time.Duration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Duration(pub(super) i64);

impl Timestamp {
    pub(super) fn utc(secs: i64, nanos: u32) -> Timestamp {
        Timestamp(OffsetTime {
            secs,
            nanos,
            offset: 0,
        })
    }

    /// The instant in nanoseconds since the epoch (exact: ±2⁹⁷ fits an `i128`).
    fn total_nanos(self) -> i128 {
        i128::from(self.0.secs) * i128::from(NANOS_PER_SECOND) + i128::from(self.0.nanos)
    }

    fn instant(self) -> (i64, u32) {
        (self.0.secs, self.0.nanos)
    }

    /// cel-go's `addTimeDurationChecked`: the result keeps this timestamp's offset and must stay
    /// within years 1 to 9999.
    fn plus(self, d: Duration) -> Result<Timestamp, ExecutionError> {
        let total = self.total_nanos() + i128::from(d.0);
        let secs = total.div_euclid(i128::from(NANOS_PER_SECOND));
        let nanos = total.rem_euclid(i128::from(NANOS_PER_SECOND));
        match (i64::try_from(secs), u32::try_from(nanos)) {
            (Ok(secs), Ok(nanos)) if (MIN_UNIX_SECONDS..=MAX_UNIX_SECONDS).contains(&secs) => {
                Ok(Timestamp(OffsetTime {
                    secs,
                    nanos,
                    offset: self.0.offset,
                }))
            }
            _ => Err(error("_+_", TIMESTAMP_OVERFLOW)),
        }
    }

    /// cel-go's `subtractTimeChecked`: the difference must fit in a duration.
    fn minus(self, other: Timestamp) -> Result<Duration, ExecutionError> {
        i64::try_from(self.total_nanos() - other.total_nanos())
            .map(Duration)
            .map_err(|_| error("_-_", INTEGER_OVERFLOW))
    }

    /// The wall clock at `offset` seconds east of UTC: (days since the epoch, second of the
    /// day).
    pub(super) fn wall_clock(self, offset: i64) -> (i64, i64) {
        let local = self.0.secs.saturating_add(offset);
        (local.div_euclid(86_400), local.rem_euclid(86_400))
    }
}

impl Duration {
    fn checked_neg(self) -> Result<Duration, ExecutionError> {
        self.0
            .checked_neg()
            .map(Duration)
            .ok_or_else(|| error("-_", INTEGER_OVERFLOW))
    }

    /// Go's `Duration.Seconds()` (`Minutes()`, `Hours()` with another unit): whole units plus
    /// the remainder as a fraction, in floating point.
    pub(super) fn in_units(self, unit: i64) -> f64 {
        (self.0 / unit) as f64 + (self.0 % unit) as f64 / unit as f64
    }
}

/// The error for an operator applied to operands it has no overload for.
fn no_overload(operator: &str, lhs: &dyn Val, rhs: &dyn Val) -> ExecutionError {
    ExecutionError::no_such_overload(
        operator,
        vec![
            lhs.get_type().name().to_string(),
            rhs.get_type().name().to_string(),
        ],
    )
}

impl Val for Timestamp {
    fn get_type(&self) -> &Type {
        &TIMESTAMP
    }

    fn cel_type() -> &'static Type {
        &TIMESTAMP
    }

    fn as_adder<'b, 'v>(&'b self) -> Option<&'b (dyn Adder + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_comparer(&self) -> Option<&dyn Comparer> {
        Some(self)
    }

    fn as_subtractor<'b, 'v>(&'b self) -> Option<&'b (dyn Subtractor + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        Some(self)
    }

    /// The same instant, whatever offsets the two were written with.
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Timestamp>()
            .is_some_and(|o| o.instant() == self.instant())
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for Timestamp {}

impl Adder for Timestamp {
    fn add<'b, 'v>(&'b self, rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match rhs.downcast_ref::<Duration>() {
            Some(d) => Ok(CowVal::owned(self.plus(*d)?)),
            None => Err(no_overload("_+_", self, rhs)),
        }
    }
}

impl Subtractor for Timestamp {
    fn sub<'b, 'v>(&'b self, rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        if let Some(d) = rhs.downcast_ref::<Duration>() {
            let t = self
                .plus(d.checked_neg()?)
                .map_err(|_| error("_-_", TIMESTAMP_OVERFLOW))?;
            return Ok(CowVal::owned(t));
        }
        match rhs.downcast_ref::<Timestamp>() {
            Some(t) => Ok(CowVal::owned(self.minus(*t)?)),
            None => Err(no_overload("_-_", self, rhs)),
        }
    }
}

impl Comparer for Timestamp {
    fn compare(&self, rhs: &dyn Val) -> Result<Ordering, ExecutionError> {
        match rhs.downcast_ref::<Timestamp>() {
            Some(t) => Ok(self.instant().cmp(&t.instant())),
            None => Err(no_overload("_<_", self, rhs)),
        }
    }
}

impl Zeroer for Timestamp {
    /// Go's zero `time.Time`, `0001-01-01T00:00:00Z`.
    fn is_zero_value(&self) -> bool {
        self.instant() == (MIN_UNIX_SECONDS, 0)
    }
}

impl Val for Duration {
    fn get_type(&self) -> &Type {
        &DURATION
    }

    fn cel_type() -> &'static Type {
        &DURATION
    }

    fn as_adder<'b, 'v>(&'b self) -> Option<&'b (dyn Adder + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_comparer(&self) -> Option<&dyn Comparer> {
        Some(self)
    }

    fn as_negator<'b, 'v>(&'b self) -> Option<&'b (dyn Negator + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_subtractor<'b, 'v>(&'b self) -> Option<&'b (dyn Subtractor + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Duration>() == Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for Duration {}

impl Adder for Duration {
    fn add<'b, 'v>(&'b self, rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        if let Some(d) = rhs.downcast_ref::<Duration>() {
            let sum = self
                .0
                .checked_add(d.0)
                .ok_or_else(|| error("_+_", INTEGER_OVERFLOW))?;
            return Ok(CowVal::owned(Duration(sum)));
        }
        match rhs.downcast_ref::<Timestamp>() {
            Some(t) => Ok(CowVal::owned(t.plus(*self)?)),
            None => Err(no_overload("_+_", self, rhs)),
        }
    }
}

impl Subtractor for Duration {
    fn sub<'b, 'v>(&'b self, rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match rhs.downcast_ref::<Duration>() {
            Some(d) => {
                let difference = self
                    .0
                    .checked_sub(d.0)
                    .ok_or_else(|| error("_-_", INTEGER_OVERFLOW))?;
                Ok(CowVal::owned(Duration(difference)))
            }
            None => Err(no_overload("_-_", self, rhs)),
        }
    }
}

impl Negator for Duration {
    fn negate<'v>(&self) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Ok(Box::new(self.checked_neg()?))
    }
}

impl Comparer for Duration {
    fn compare(&self, rhs: &dyn Val) -> Result<Ordering, ExecutionError> {
        match rhs.downcast_ref::<Duration>() {
            Some(d) => Ok(self.cmp(d)),
            None => Err(no_overload("_<_", self, rhs)),
        }
    }
}

impl Zeroer for Duration {
    fn is_zero_value(&self) -> bool {
        self.0 == 0
    }
}

/// A `format: date-time`, `date` or `duration` string that does not parse (upstream's error
/// value): comparing it, or adding or subtracting with it on the left, fails with its message.
#[derive(Debug, Clone)]
pub(crate) struct Unreadable(pub(super) String);

static UNREADABLE: LazyLock<Type> = LazyLock::new(|| Type::new_opaque_type("error"));

impl Unreadable {
    fn fail<T>(&self) -> Result<T, ExecutionError> {
        Err(error("value", &self.0))
    }
}

impl Val for Unreadable {
    fn get_type(&self) -> &Type {
        &UNREADABLE
    }

    fn cel_type() -> &'static Type {
        &UNREADABLE
    }

    fn as_adder<'b, 'v>(&'b self) -> Option<&'b (dyn Adder + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_comparer(&self) -> Option<&dyn Comparer> {
        Some(self)
    }

    fn as_subtractor<'b, 'v>(&'b self) -> Option<&'b (dyn Subtractor + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for Unreadable {}

impl Adder for Unreadable {
    fn add<'b, 'v>(&'b self, _rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.fail()
    }
}

impl Subtractor for Unreadable {
    fn sub<'b, 'v>(&'b self, _rhs: &(dyn Val + 'v)) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.fail()
    }
}

impl Comparer for Unreadable {
    fn compare(&self, _rhs: &dyn Val) -> Result<Ordering, ExecutionError> {
        self.fail()
    }
}
