//! Waiting in tests: poll a check until it yields, or run a future, for a bounded time, and fail
//! with a message naming what was awaited. The clock is tokio's, so a test with paused time
//! (`#[tokio::test(start_paused = true)]`) waits without sleeping for real.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long the polling helpers sleep between two checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Some`, and returns that value.
///
/// # Panics
///
/// After `secs` seconds without a value: `timed out after {secs}s waiting for {what}`. The check
/// runs at least once, and once more after the deadline passes, so a slow last check still counts.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// As [`eventually`] for a fallible check: calls `check` every [`POLL_INTERVAL`] until it returns
/// `Ok(Some(_))`. An error does not end the wait (the object may not exist yet); it is kept and
/// reported if time runs out.
///
/// # Errors
///
/// After `secs` seconds without a value: `timed out after {secs}s waiting for {what} (last error:
/// …)`, for the caller to `?` out of the test.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out after {secs}s waiting for {what} (last error: {last_err:?})");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Runs `fut` with a deadline, so an event that never comes fails the test instead of hanging it.
///
/// # Panics
///
/// After `secs` seconds: `timed out after {secs}s waiting for {what}`.
pub async fn within<F: Future>(secs: u64, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {secs}s waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_the_first_value_the_check_yields() {
        let calls = AtomicU32::new(0);
        let v = eventually(5, "the third call", || async {
            (calls.fetch_add(1, Ordering::SeqCst) == 2).then_some("done")
        })
        .await;
        assert_eq!((v, calls.load(Ordering::SeqCst)), ("done", 3));
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 2s waiting for a value that never comes")]
    async fn eventually_panics_naming_what_it_awaited() {
        eventually(2, "a value that never comes", || async { None::<()> }).await;
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_reports_the_last_error_when_time_runs_out() {
        let err = wait_for(1, "a pod", || async {
            Err::<Option<()>, _>(anyhow::anyhow!("pods \"web\" not found"))
        })
        .await
        .expect_err("times out");
        let message = err.to_string();
        assert!(
            message.starts_with("timed out after 1s waiting for a pod")
                && message.contains("not found"),
            "{message}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_keeps_polling_past_errors() {
        let calls = AtomicU32::new(0);
        let v = wait_for(5, "a retry", || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(anyhow::anyhow!("not yet")),
                n => Ok(Some(n)),
            }
        })
        .await
        .expect("a value");
        assert_eq!(v, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn within_passes_through_a_future_that_finishes_in_time() {
        assert_eq!(within(1, "a ready future", async { 7 }).await, 7);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 3s waiting for an event")]
    async fn within_panics_naming_what_it_awaited() {
        within(3, "an event", std::future::pending::<()>()).await;
    }
}
