//! cel-go's behaviour of timestamps and durations, operation by operation.

use cel::Value;

use super::super::tests::{assert_error, assert_true, eval};

const NEW_YEAR: &str = "timestamp('2024-01-01T00:00:00Z')";

fn t(expr: &str) -> String {
    expr.replace("NEW_YEAR", NEW_YEAR)
}

#[test]
fn timestamps_parse_rfc3339_and_compare() {
    for expr in [
        "NEW_YEAR < timestamp('2024-01-01T00:00:01Z')",
        "NEW_YEAR <= timestamp('2024-01-01T00:00:00Z')",
        "timestamp('2024-01-01T00:00:00.000000001Z') > NEW_YEAR",
        "NEW_YEAR >= timestamp('2023-12-31T23:59:59.999Z')",
        "NEW_YEAR == timestamp('2024-01-01T00:00:00Z')",
        "NEW_YEAR != timestamp('2024-01-01T00:00:00.5Z')",
        // The same instant written at other offsets.
        "NEW_YEAR == timestamp('2024-01-01T05:30:00+05:30')",
        "NEW_YEAR == timestamp('2023-12-31T16:00:00-08:00')",
        "timestamp(1) == timestamp('1970-01-01T00:00:01Z')",
        "timestamp(NEW_YEAR) == NEW_YEAR",
        "NEW_YEAR in [timestamp('2020-01-01T00:00:00Z'), NEW_YEAR]",
    ] {
        assert_true(&t(expr));
    }
}

#[test]
fn durations_parse_go_syntax_and_compare() {
    for expr in [
        "duration('1h30m') == duration('90m')",
        "duration('1.5h') == duration('5400s')",
        "duration('1ms') == duration('1000us')",
        "duration('1µs') == duration('1000ns')",
        "duration('+5s') > duration('4999ms')",
        "duration('-1m') < duration('0')",
        "duration('-1.5s') <= duration('-1500ms')",
        "duration('2h') >= duration('119m')",
        "duration('1h') != duration('1h1ns')",
        "duration(duration('1s')) == duration('1s')",
    ] {
        assert_true(expr);
    }
}

#[test]
fn arithmetic_follows_cel_go() {
    for expr in [
        "timestamp('2024-01-01T01:00:00Z') - NEW_YEAR == duration('1h')",
        "NEW_YEAR - timestamp('2024-01-01T01:00:00Z') == duration('-1h')",
        "NEW_YEAR + duration('1h') == timestamp('2024-01-01T01:00:00Z')",
        "duration('1h') + NEW_YEAR == timestamp('2024-01-01T01:00:00Z')",
        "NEW_YEAR - duration('24h') == timestamp('2023-12-31T00:00:00Z')",
        "NEW_YEAR + duration('-0.5s') == timestamp('2023-12-31T23:59:59.5Z')",
        "duration('1h') + duration('30m') == duration('90m')",
        "duration('1h') - duration('90m') == duration('-30m')",
        "-duration('1h') == duration('-1h')",
    ] {
        assert_true(&t(expr));
    }
}

#[test]
fn conversions_to_string_and_int() {
    for expr in [
        "string(NEW_YEAR) == '2024-01-01T00:00:00Z'",
        // The offset it was written with is kept, also through arithmetic.
        "string(timestamp('2024-01-01T05:30:00.250+05:30')) == '2024-01-01T05:30:00.25+05:30'",
        "string(timestamp('2024-01-01T05:30:00+05:30') + duration('1h')) == '2024-01-01T06:30:00+05:30'",
        "string(timestamp('2024-01-01T00:00:00+00:00')) == '2024-01-01T00:00:00Z'",
        "string(timestamp(-1)) == '1969-12-31T23:59:59Z'",
        "string(duration('1h30m')) == '5400s'",
        "string(duration('1.5s')) == '1.5s'",
        "string(duration('-1ms')) == '-0.001s'",
        "string(duration('1ns')) == '0.000000001s'",
        "string(duration('0')) == '0s'",
        "int(timestamp('1970-01-01T00:00:01Z')) == 1",
        "int(timestamp('1969-12-31T23:59:59.5Z')) == -1",
        "int(NEW_YEAR) == 1704067200",
        "int(duration('1s')) == 1000000000",
    ] {
        assert_true(&t(expr));
    }
}

#[test]
fn timestamp_accessors_in_utc_and_in_zones() {
    let ts = "timestamp('2023-07-14T10:30:45.123Z')";
    for (accessor, want) in [
        ("getFullYear()", 2023),
        ("getMonth()", 6),
        ("getDayOfMonth()", 13),
        ("getDate()", 14),
        ("getDayOfWeek()", 5),
        ("getDayOfYear()", 194),
        ("getHours()", 10),
        ("getMinutes()", 30),
        ("getSeconds()", 45),
        ("getMilliseconds()", 123),
        ("getHours('UTC')", 10),
        ("getHours('Etc/UTC')", 10),
        ("getHours('+05:30')", 16),
        ("getMinutes('+05:30')", 0),
        ("getHours('-08:00')", 2),
        ("getHours('-08:30')", 2),
        ("getMinutes('-08:30')", 0),
        ("getHours('Etc/GMT+8')", 2),
        ("getHours('Etc/GMT-2')", 12),
    ] {
        assert_true(&format!("{ts}.{accessor} == {want}"));
    }
    // cel-go's examples across a date line.
    assert_true("timestamp('2023-01-01T05:30:00Z').getFullYear('-08:00') == 2022");
    assert_true("timestamp('2023-01-01T05:30:00Z').getMonth('-08:00') == 11");
    assert_true("timestamp('2023-01-01T05:00:00Z').getDayOfYear('-08:00') == 364");
    assert_true("timestamp('2023-07-01T05:00:00Z').getDayOfMonth('-08:00') == 29");
    assert_true("timestamp('2023-07-01T05:00:00Z').getDate('-08:00') == 30");
    assert_true("timestamp('2023-07-16T05:00:00Z').getDayOfWeek('-08:00') == 6");
    assert_true("timestamp('2023-01-02T00:00:00Z').getDayOfYear() == 1");
    // Without a zone the accessors read UTC, whatever offset the timestamp was written with.
    assert_true("timestamp('2024-01-01T02:00:00+05:00').getHours() == 21");
    assert_true("timestamp('2024-01-01T02:00:00+05:00').getDate() == 31");
}

#[test]
fn duration_accessors_are_totals() {
    for expr in [
        "duration('3723s').getHours() == 1",
        "duration('3723s').getMinutes() == 62",
        "duration('3723.456s').getSeconds() == 3723",
        "duration('3723.456s').getMilliseconds() == 3723456",
        "duration('-90m').getHours() == -1",
        "duration('-1.5s').getMilliseconds() == -1500",
    ] {
        assert_true(expr);
    }
}

#[test]
fn bad_text_and_overflow_are_evaluation_errors() {
    for (expr, message) in [
        (
            "timestamp('2024-13-01T00:00:00Z')",
            "type conversion error from 'string' to 'google.protobuf.Timestamp'",
        ),
        (
            "timestamp('2024-01-01 00:00:00')",
            "type conversion error from 'string' to 'google.protobuf.Timestamp'",
        ),
        (
            "duration('1d')",
            "type conversion error from 'string' to 'google.protobuf.Duration'",
        ),
        (
            "duration('99999999999h')",
            "type conversion error from 'string' to 'google.protobuf.Duration'",
        ),
        ("timestamp('0000-12-31T00:00:00Z')", "timestamp overflow"),
        ("timestamp(253402300800)", "timestamp overflow"),
        (
            "timestamp('9999-12-31T23:59:59Z') + duration('1s')",
            "timestamp overflow",
        ),
        (
            "timestamp('0001-01-01T00:00:00Z') - duration('1ns')",
            "timestamp overflow",
        ),
        (
            "timestamp('0001-01-01T00:00:00Z') - timestamp('9999-12-31T23:59:59Z')",
            "integer overflow",
        ),
        (
            "duration('2562047h') + duration('2562047h')",
            "integer overflow",
        ),
        (
            "duration('-2562047h') - duration('2562047h')",
            "integer overflow",
        ),
        ("-duration('-2562047h47m16.854775808s')", "integer overflow"),
        (
            "timestamp('2024-01-01T00:00:00Z').getHours('America/Los_Angeles')",
            "unknown time zone America/Los_Angeles (tandem has no time-zone database",
        ),
        (
            "timestamp('2024-01-01T00:00:00Z').getHours('+xx:00')",
            "strconv.Atoi: parsing \"+xx\": invalid syntax",
        ),
        (
            "timestamp('2024-01-01T00:00:00Z').getHours('+05:75')",
            "timezone offset minutes out of range [0, 59]: +05:75",
        ),
        (
            "timestamp('2024-01-01T00:00:00Z').getHours('+25:00')",
            "timezone offset out of range: +25:00",
        ),
        (
            "timestamp('2024-01-01T00:00:00Z').getHours('Etc/GMT+05')",
            "unknown time zone Etc/GMT+05",
        ),
    ] {
        assert_error(expr, message);
    }
    // Mixing the types is no overload, not a panic.
    for expr in [
        "timestamp('2024-01-01T00:00:00Z') < duration('1s')",
        "timestamp('2024-01-01T00:00:00Z') + 1",
        "duration('1s') - timestamp('2024-01-01T00:00:00Z')",
        "duration('1s').getFullYear()",
    ] {
        assert!(
            matches!(eval(expr), Err(cel::ExecutionError::NoSuchOverload(_))),
            "{expr}: {:?}",
            eval(expr)
        );
    }
    assert_eq!(
        eval("timestamp('2024-01-01T00:00:00Z') == duration('1s')"),
        Ok(Value::Bool(false))
    );
}

#[test]
fn types_are_named_as_in_cel_go() {
    assert_true("type(timestamp('2024-01-01T00:00:00Z')) == google.protobuf.Timestamp");
    assert_true("type(duration('1s')) == google.protobuf.Duration");
}
