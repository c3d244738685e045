//! CEL's timestamps and durations (`google.protobuf.Timestamp`, `google.protobuf.Duration`) with
//! the standard library's functions over them, as cel-go provides them (`common/types/
//! timestamp.go`, `duration.go`, `common/stdlib/standard.go`):
//!
//! - `timestamp(s)` reads RFC 3339 (`time.Parse(time.RFC3339, s)`), `timestamp(i)` Unix seconds;
//!   `duration(s)` Go's duration syntax (`1h30m`, `-1.5s`, `300ms`, `10us`);
//! - `<`, `<=`, `>`, `>=`, `==`, `!=` between two timestamps or two durations;
//!   `timestamp - timestamp` is a duration, `timestamp ± duration` and `duration + timestamp` a
//!   timestamp, `duration ± duration` and `-duration` a duration;
//! - `string(t)` is RFC 3339 with nanoseconds at the offset the timestamp was written with,
//!   `string(d)` seconds (`5400s`, `1.5s`); `int(t)` is Unix seconds, `int(d)` nanoseconds;
//! - on a timestamp `getFullYear`, `getMonth` (0-based), `getDayOfMonth` (0-based), `getDate`
//!   (1-based), `getDayOfWeek` (0 = Sunday), `getDayOfYear` (0-based), `getHours`,
//!   `getMinutes`, `getSeconds`, `getMilliseconds`, in UTC or in the time zone given as their
//!   argument; on a duration `getHours`, `getMinutes`, `getSeconds`, `getMilliseconds` (its
//!   whole length in that unit, as cel-go).
//!
//! Timestamps span years 1 to 9999 and durations ±2⁶³ ns, as in cel-go: leaving the range is an
//! evaluation error (`timestamp overflow`, `integer overflow`), as is text that does not parse
//! (cel-go's `type conversion error from 'string' to …`).
//!
//! Time zones: `UTC` (and the empty name), its aliases (`Etc/UTC`, `GMT`, `Zulu`, …), the fixed
//! `Etc/GMT±N` zones, and numeric offsets read as cel-go reads them (`+05:30`, `-08:00`). tandem
//! carries no IANA database (the `cel` crate's `chrono` feature would compile `chrono-tz` in):
//! other names, such as `America/Los_Angeles`, are an evaluation error saying so.
//!
//! Values from the object: `format: date-time`, `date` and `duration` strings become these
//! values when a rule reads them ([`from_schema_string`], upstream `UnstructuredToVal`).
//!
//! Costs: like cel-go's, every function here costs one unit (counted where the call is), with no
//! size-dependent part.
//!
//! This file holds the functions; the values and their operators are in [`values`], time-zone
//! arguments in [`zone`].

mod values;
mod zone;

#[cfg(test)]
mod tests;

use cel::common::functions::Function;
use cel::common::types::{DURATION_TYPE, INT_TYPE, STRING_TYPE, TIMESTAMP_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::{arg, error, int, int_arg, str_arg, string, take};
use crate::time::{
    civil_from_days, days_from_civil, format_rfc3339_nano, parse_date, parse_rfc3339_nano,
};
use values::{
    DURATION, Duration, MAX_UNIX_SECONDS, MIN_UNIX_SECONDS, NANOS_PER_SECOND, TIMESTAMP,
    TIMESTAMP_OVERFLOW, Timestamp, Unreadable,
};
use zone::zone_offset;

/// Reads a string of a `format: date-time`, `date` or `duration` schema as kube-apiserver gives
/// it to CEL (upstream `UnstructuredToVal`: strfmt's `ParseDateTime`, `time.Parse` of
/// `2006-01-02`, strfmt's `ParseDuration`); `None` for other formats, which stay strings.
///
/// A string that does not parse stands for upstream's error value: comparing it, or adding to
/// or subtracting from it, fails with upstream's message (`Invalid date-time formatted string
/// …`; the `time.Parse` detail after it is tandem's wording). Unlike upstream's, `==` on it is
/// false rather than an error. Rules rarely meet one: an object whose strings fail their format
/// is refused before rules run, so only what strfmt's check accepts and Go's parser does not
/// (a lower-case `t` or `z` in a date-time) gets here.
pub(crate) fn from_schema_string(format: &str, s: &str) -> Option<Box<dyn Val + 'static>> {
    Some(match format {
        // strfmt `ParseDateTime`: the empty string is the Unix epoch.
        "date-time" if s.is_empty() => Box::new(Timestamp::utc(0, 0)),
        "date-time" => match parse_rfc3339_nano(s) {
            Some(t) => Box::new(Timestamp(t)),
            None => Box::new(Unreadable(format!(
                "Invalid date-time formatted string {s}: parsing time {} as \"2006-01-02T15:04:05Z07:00\": not RFC 3339",
                crate::field::go_quote(s)
            ))),
        },
        "date" => match parse_date(s) {
            Some(secs) => Box::new(Timestamp::utc(secs, 0)),
            None => Box::new(Unreadable(format!(
                "Invalid date formatted string {s}: parsing time {} as \"2006-01-02\": not a date",
                crate::field::go_quote(s)
            ))),
        },
        "duration" => match super::super::formats::parse_duration(s) {
            Some(nanos) => Box::new(Duration(nanos)),
            None => Box::new(Unreadable(format!(
                "Invalid duration {s}: unable to parse {s} as duration"
            ))),
        },
        _ => return None,
    })
}

/// Registers the types and functions on `env`.
pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(TIMESTAMP_TYPE)?;
    env.add_type(DURATION_TYPE)?;
    let ts = || TIMESTAMP.to_owned();
    let dur = || DURATION.to_owned();
    env.add_overload(
        "timestamp",
        "string_to_timestamp",
        vec![STRING_TYPE],
        string_to_timestamp,
    )?;
    env.add_overload(
        "timestamp",
        "int64_to_timestamp",
        vec![INT_TYPE],
        int_to_timestamp,
    )?;
    env.add_overload("timestamp", "timestamp_to_timestamp", vec![ts()], identity)?;
    env.add_overload(
        "duration",
        "string_to_duration",
        vec![STRING_TYPE],
        string_to_duration,
    )?;
    env.add_overload("duration", "duration_to_duration", vec![dur()], identity)?;
    env.add_overload("string", "timestamp_to_string", vec![ts()], to_string)?;
    env.add_overload("string", "duration_to_string", vec![dur()], to_string)?;
    env.add_overload("int", "timestamp_to_int64", vec![ts()], to_int)?;
    env.add_overload("int", "duration_to_int64", vec![dur()], to_int)?;
    for (name, id, f) in TIMESTAMP_FIELDS {
        env.add_member_overload(name, &format!("timestamp_to_{id}"), ts(), vec![], *f)?;
        env.add_member_overload(
            name,
            &format!("timestamp_to_{id}_with_tz"),
            ts(),
            vec![STRING_TYPE],
            *f,
        )?;
    }
    for (name, id, f) in DURATION_FIELDS {
        env.add_member_overload(name, &format!("duration_to_{id}"), dur(), vec![], *f)?;
    }
    Ok(())
}

/// The timestamp accessors: name, overload id (cel-go's), implementation.
const TIMESTAMP_FIELDS: &[(&str, &str, Function)] = &[
    ("getFullYear", "year", get_full_year),
    ("getMonth", "month", get_month),
    ("getDayOfYear", "day_of_year", get_day_of_year),
    ("getDayOfMonth", "day_of_month_zero_based", get_day_of_month),
    ("getDate", "day_of_month_one_based", get_date),
    ("getDayOfWeek", "day_of_week", get_day_of_week),
    ("getHours", "hours", get_hours),
    ("getMinutes", "minutes", get_minutes),
    ("getSeconds", "seconds", get_seconds),
    ("getMilliseconds", "milliseconds", get_milliseconds),
];

/// The duration accessors: name, overload id (cel-go's), implementation.
const DURATION_FIELDS: &[(&str, &str, Function)] = &[
    ("getHours", "hours", get_hours),
    ("getMinutes", "minutes", get_minutes),
    ("getSeconds", "seconds", get_seconds),
    ("getMilliseconds", "milliseconds", get_milliseconds),
];

fn string_to_timestamp<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let t = parse_rfc3339_nano(str_arg(s.as_ref())?).ok_or_else(|| {
        error(
            "timestamp",
            "type conversion error from 'string' to 'google.protobuf.Timestamp'",
        )
    })?;
    if !(MIN_UNIX_SECONDS..=MAX_UNIX_SECONDS).contains(&t.secs) {
        return Err(error("timestamp", TIMESTAMP_OVERFLOW));
    }
    Ok(CowVal::owned(Timestamp(t)))
}

fn int_to_timestamp<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [i] = take(args)?;
    let secs = int_arg(i.as_ref())?;
    if !(MIN_UNIX_SECONDS..=MAX_UNIX_SECONDS).contains(&secs) {
        return Err(error("timestamp", TIMESTAMP_OVERFLOW));
    }
    Ok(CowVal::owned(Timestamp::utc(secs, 0)))
}

fn string_to_duration<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take(args)?;
    let nanos = crate::time::parse_go_duration(str_arg(s.as_ref())?).map_err(|_| {
        error(
            "duration",
            "type conversion error from 'string' to 'google.protobuf.Duration'",
        )
    })?;
    Ok(CowVal::owned(Duration(nanos)))
}

fn identity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = take(args)?;
    Ok(v)
}

/// The receiver of a timestamp or duration overload.
enum Time {
    Timestamp(Timestamp),
    Duration(Duration),
}

fn time_arg(v: &(dyn Val + '_)) -> Result<Time, ExecutionError> {
    if let Some(t) = v.downcast_ref::<Timestamp>() {
        return Ok(Time::Timestamp(*t));
    }
    Ok(Time::Duration(*arg::<Duration>(v)?))
}

fn to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = take(args)?;
    Ok(string(match time_arg(v.as_ref())? {
        Time::Timestamp(t) => format_rfc3339_nano(t.0),
        // Go's `strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"`: Rust's `Display` of an
        // `f64` is the same shortest round-tripping decimal, without an exponent.
        Time::Duration(d) => format!("{}s", d.in_units(NANOS_PER_SECOND)),
    }))
}

fn to_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [v] = take(args)?;
    Ok(int(match time_arg(v.as_ref())? {
        Time::Timestamp(t) => t.0.secs,
        Time::Duration(d) => d.0,
    }))
}

/// A timestamp read on a wall clock.
struct Clock {
    year: i64,
    /// 1–12.
    month: u32,
    /// 1–31.
    day: u32,
    /// Days since 1970-01-01 (of the wall clock's date).
    days: i64,
    second_of_day: i64,
    nanos: i64,
}

/// The receiver of an accessor and its optional time-zone argument: a timestamp's wall clock
/// in that zone (UTC without one), or a duration.
fn read(
    function: &str,
    args: &[CowVal<'_, '_>],
) -> Result<Result<Clock, Duration>, ExecutionError> {
    let (time, zone) = match args {
        [t] => (time_arg(t.as_ref())?, None),
        [t, zone] => (time_arg(t.as_ref())?, Some(zone.as_ref())),
        _ => return Err(ExecutionError::invalid_argument_count(1, args.len())),
    };
    let t = match time {
        Time::Timestamp(t) => t,
        Time::Duration(d) => return Ok(Err(d)),
    };
    let offset = match zone {
        None => 0,
        Some(z) => zone_offset(str_arg(z)?).map_err(|e| error(function, e))?,
    };
    let (days, second_of_day) = t.wall_clock(offset);
    let (year, month, day) = civil_from_days(days);
    Ok(Ok(Clock {
        year,
        month,
        day,
        days,
        second_of_day,
        nanos: i64::from(t.0.nanos),
    }))
}

/// A timestamp-only accessor.
fn of_date<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    value: fn(&Clock) -> i64,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match read(function, &args)? {
        Ok(clock) => Ok(int(value(&clock))),
        Err(_) => Err(ExecutionError::no_such_member_overload(
            function,
            vec![DURATION.name().to_string()],
        )),
    }
}

/// An accessor of both types: the time of day of a timestamp, the whole length of a duration.
fn of_time<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    of_day: fn(&Clock) -> i64,
    total: fn(Duration) -> i64,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(int(match read(function, &args)? {
        Ok(clock) => of_day(&clock),
        Err(d) => total(d),
    }))
}

fn get_full_year<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_date("getFullYear", args, |c| c.year)
}

fn get_month<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_date("getMonth", args, |c| i64::from(c.month) - 1)
}

fn get_day_of_month<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_date("getDayOfMonth", args, |c| i64::from(c.day) - 1)
}

fn get_date<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_date("getDate", args, |c| i64::from(c.day))
}

fn get_day_of_year<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_date("getDayOfYear", args, |c| {
        c.days - days_from_civil(c.year, 1, 1)
    })
}

fn get_day_of_week<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    // 1970-01-01 was a Thursday (4).
    of_date("getDayOfWeek", args, |c| (c.days + 4).rem_euclid(7))
}

// Go converts the floating-point `Hours()`, `Minutes()` and `Seconds()` of a duration to an int.

fn get_hours<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_time(
        "getHours",
        args,
        |c| c.second_of_day / 3_600,
        |d| d.in_units(3_600 * NANOS_PER_SECOND) as i64,
    )
}

fn get_minutes<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_time(
        "getMinutes",
        args,
        |c| c.second_of_day % 3_600 / 60,
        |d| d.in_units(60 * NANOS_PER_SECOND) as i64,
    )
}

fn get_seconds<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_time(
        "getSeconds",
        args,
        |c| c.second_of_day % 60,
        |d| d.in_units(NANOS_PER_SECOND) as i64,
    )
}

fn get_milliseconds<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    of_time(
        "getMilliseconds",
        args,
        |c| c.nanos / 1_000_000,
        |d| d.0 / 1_000_000,
    )
}
