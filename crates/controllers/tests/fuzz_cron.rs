//! Property tests of the CronJob schedule parser (`cron.ParseStandard` of robfig/cron v3, as
//! the CronJob controller reads `spec.schedule`) and of the next-activation search
//! (`SpecSchedule.Next`): any schedule text parses or fails with a `CronError`, never panics; a
//! parsed schedule's next time, from any instant and in any zone, is strictly later than the
//! instant or absent. Inputs that once failed are kept in [`REGRESSIONS`].

#![allow(clippy::unwrap_used, reason = "a test fails by panicking")]

#[path = "../../core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use proptest::prelude::*;
use tandem_controllers::cron_schedule::parse;

use fuzz_support::{ensure, hostile_text, property, regressions};

const LIMIT: Duration = Duration::from_secs(40);

/// Schedules that once panicked: a step that overflowed `u32` when added to the range start.
const REGRESSIONS: &[&str] = &[
    "1/4294967295 * * * *",
    "*/4294967295 * * * *",
    "59/4294967295 * * * *",
    "* * * * 6/4294967295",
    "0-59/4294967294 * * * *",
    "@every 2562047h47m16.854775807s",
    "@every -1s",
    "@every ",
    "TZ=",
    "TZ=../../../etc/passwd * * * * *",
    "CRON_TZ=UTC",
    "60 * * * *",
    "5-1 * * * *",
    "* * 0 * *",
    "* * * 0 *",
    "* * * JAN-DEC/0 *",
    "0 0 30 2 *",
];

fn schedule_behaves(spec: &str, after_secs: i64, zone: &str) -> Result<(), TestCaseError> {
    let Ok(parsed) = parse(spec) else {
        return Ok(());
    };
    let after = Timestamp::from_second(after_secs).unwrap_or(Timestamp::UNIX_EPOCH);
    let tz = parsed
        .time_zone
        .clone()
        .or_else(|| TimeZone::get(zone).ok())
        .unwrap_or(TimeZone::UTC);
    if let Some(next) = parsed.schedule.next(after, &tz) {
        ensure(next > after, || {
            format!("{spec:?}: next after {after} is {next}, not later")
        })?;
    }
    Ok(())
}

#[test]
fn cron_regressions_parse_or_fail_cleanly() {
    regressions("cron", LIMIT, REGRESSIONS.to_vec(), |spec| {
        schedule_behaves(spec, 1_704_067_200, "UTC").unwrap()
    });
}

#[test]
fn cron_text_never_panics() {
    property("cron-text", 2000, LIMIT, hostile_text(20), |spec| {
        // Text that parses is also searched, from a fixed instant.
        schedule_behaves(&spec, 1_704_067_200, "UTC")
    });
}

fn field(names: &'static [&'static str]) -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        3 => (0u64..70).prop_map(|n| n.to_string()),
        1 => proptest::sample::select(names).prop_map(str::to_string),
        1 => Just("*".to_string()),
        1 => Just("?".to_string()),
        1 => any::<u32>().prop_map(|n| n.to_string()),
    ];
    let part = (
        atom.clone(),
        proptest::option::of(atom),
        proptest::option::of(prop_oneof![0u32..70, any::<u32>()]),
    )
        .prop_map(|(a, b, step)| {
            let mut s = a;
            if let Some(b) = b {
                s = format!("{s}-{b}");
            }
            if let Some(step) = step {
                s = format!("{s}/{step}");
            }
            s
        });
    proptest::collection::vec(part, 1..3).prop_map(|p| p.join(","))
}

#[test]
fn five_field_schedules_never_panic_and_next_is_later() {
    const NONE: &[&str] = &["x"];
    const MONTHS: &[&str] = &["jan", "FEB", "dec", "foo"];
    const DAYS: &[&str] = &["sun", "Mon", "sat", "bar"];
    let spec = (
        proptest::option::of(proptest::sample::select(vec![
            "TZ=UTC ",
            "CRON_TZ=America/New_York ",
            "TZ=Asia/Kolkata ",
            "TZ=Nowhere/Land ",
        ])),
        field(NONE),
        field(NONE),
        field(NONE),
        field(MONTHS),
        field(DAYS),
    )
        .prop_map(|(tz, m, h, dom, mon, dow)| {
            format!("{}{m} {h} {dom} {mon} {dow}", tz.unwrap_or(""))
        });
    let zone = proptest::sample::select(vec!["UTC", "Europe/London", "Australia/Lord_Howe"]);
    // Instants from 1900 to 2200, around DST changes included.
    let after = -2_208_988_800i64..7_258_118_400i64;
    property(
        "cron-fields",
        300,
        Duration::from_secs(90),
        (spec, after, zone),
        |(spec, after, zone)| schedule_behaves(&spec, after, zone),
    );
}

#[test]
fn descriptors_and_every_never_panic() {
    let spec = prop_oneof![
        proptest::sample::select(vec![
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "@",
            "@reboot",
            "@every",
        ])
        .prop_map(str::to_string),
        hostile_text(10).prop_map(|d| format!("@every {d}")),
        any::<i64>().prop_map(|n| format!("@every {n}ns")),
    ];
    property(
        "cron-descriptors",
        1000,
        LIMIT,
        (spec, any::<i64>()),
        |(spec, after)| {
            // Any instant jiff can represent, the extremes included.
            let after = after.clamp(-377_705_116_800, 253_402_207_200);
            schedule_behaves(&spec, after, "UTC")
        },
    );
}
