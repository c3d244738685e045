//! The harness every fuzz/property test of tandem's decoders runs under (shared by path with the
//! other crates' `fuzz_*` tests): `proptest` on stable Rust, with
//!
//! - a fixed seed, so a run is reproducible (`TANDEM_FUZZ_SEED=<u64>` picks another one, and a
//!   failure names the seed and the shrunk input);
//! - a case count per property chosen to keep the whole set well under a minute in a debug build
//!   on two cores (`TANDEM_FUZZ_CASES_MULTIPLIER=<n>` runs n times as many, for a longer hunt);
//! - a wall-clock guard: a property still running after its limit fails the test (a hang is a
//!   bug as much as a panic is), instead of stalling the suite.
//!
//! Inputs that once failed are kept as explicit regression lists in each test file and replayed
//! by [`regressions`] before the random cases, the role upstream's fuzzers give to their corpus.
#![allow(dead_code, reason = "each test binary uses a subset")]

use std::fmt::Debug;
use std::sync::mpsc;
use std::time::Duration;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// The seed of the runs: `TANDEM_FUZZ_SEED` or a fixed default.
fn seed() -> u64 {
    std::env::var("TANDEM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7a6e_6465_6d5f_667a)
}

fn multiplier() -> u32 {
    std::env::var("TANDEM_FUZZ_CASES_MULTIPLIER")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|m| *m > 0)
        .unwrap_or(1)
}

/// Runs `test` on `cases` values drawn from `strategy`, failing (with the shrunk input) on the
/// first case that returns an error or panics, and failing when the whole run takes longer than
/// `limit`. The run happens on its own thread with a large stack, so deep but legal inputs are
/// not mistaken for stack exhaustion of a small test thread.
pub fn property<S, F>(name: &str, cases: u32, limit: Duration, strategy: S, test: F)
where
    S: Strategy + Send + 'static,
    S::Value: Debug,
    F: Fn(S::Value) -> Result<(), TestCaseError> + Send + 'static,
{
    property_of(name, cases, limit, move || strategy, test);
}

/// [`property`] for strategies that cannot cross threads (recursive ones are boxed without
/// `Send`): `make` builds the strategy on the property's thread.
pub fn property_of<S, M, F>(name: &str, cases: u32, limit: Duration, make: M, test: F)
where
    S: Strategy,
    S::Value: Debug,
    M: FnOnce() -> S + Send + 'static,
    F: Fn(S::Value) -> Result<(), TestCaseError> + Send + 'static,
{
    let seed = seed();
    let cases = cases.saturating_mul(multiplier());
    let limit = limit * multiplier();
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("fuzz-{name}"))
        .stack_size(32 << 20)
        .spawn(move || {
            let config = Config {
                cases,
                failure_persistence: None,
                // Shrinking a failure is worth a little time, not the whole budget.
                max_shrink_iters: 2_000,
                ..Config::default()
            };
            let mut seed_bytes = [0u8; 32];
            seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
            let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
            let mut runner = TestRunner::new_with_rng(config, rng);
            let result = runner.run(&make(), test).map_err(|e| e.to_string());
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        panic!("{name}: cannot start the property thread: {e}");
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(())) => {}
        Ok(Err(failure)) => panic!("{name} (TANDEM_FUZZ_SEED={seed}): {failure}"),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name}: still running after {limit:?} ({cases} cases, seed {seed})")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{name}: the property thread died (seed {seed})")
        }
    }
}

/// Replays inputs that once failed, each under `test`, on a big-stack thread bounded by `limit`.
pub fn regressions<T, F>(name: &str, limit: Duration, inputs: Vec<T>, test: F)
where
    T: Debug + Send + 'static,
    F: Fn(&T) + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("regressions-{name}"))
        .stack_size(32 << 20)
        .spawn(move || {
            for input in &inputs {
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(input)));
                if outcome.is_err() {
                    let _ = tx.send(Err(format!("{input:?}")));
                    return;
                }
            }
            let _ = tx.send(Ok(()));
        });
    if let Err(e) = spawned {
        panic!("{name}: cannot start the regression thread: {e}");
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(())) => {}
        Ok(Err(input)) => panic!("{name}: regression input failed again: {input}"),
        Err(_) => panic!("{name}: regressions still running after {limit:?}"),
    }
}

/// Fails the case with `message` unless `condition` holds (a `prop_assert!` that reads as a
/// function).
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), TestCaseError> {
    if condition {
        Ok(())
    } else {
        Err(TestCaseError::fail(message()))
    }
}

/// Strings that look like what a user types, biased towards the characters a parser branches on
/// (`,=!()<>:\/@.-+_ ` and digits) with some arbitrary Unicode mixed in.
pub fn hostile_text(max_len: usize) -> impl Strategy<Value = String> + Clone {
    use proptest::prelude::*;
    let piece = prop_oneof![
        6 => proptest::sample::select(vec![
            ",", "=", "==", "!=", "!", "(", ")", "<", ">", " ", "in", "notin", "\\", "\\,", "\\=",
            "/", ":", "@", ".", "-", "+", "_", "0", "1", "9", "e", "E", "i", "m", "k", "Ki", "Gi",
            "s", "h", "ns", "µs", "a", "z", "A", "Z", "*", "?", "%", "$", "[", "]", "{", "}", "'",
            "\"", "\t", "\n", "\0", "é", "日", "\u{202e}",
        ])
        .prop_map(str::to_string),
        2 => "[a-z0-9]{1,6}",
        1 => any::<String>().prop_map(|s| s.chars().take(4).collect::<String>()),
    ];
    proptest::collection::vec(piece, 0..max_len).prop_map(|v| v.concat())
}
