//! Wall-clock time derived from tokio's clock, so timestamps the agent writes (startedAt,
//! renewTime, event times) advance with `tokio::time::pause()`/`advance()` in tests exactly as
//! the timers do, and match real time otherwise.

use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

/// A pairing of one wall-clock reading with one tokio instant.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base_wall: SystemTime,
    base_instant: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

impl Clock {
    /// Anchors the clock at the current instant.
    pub fn new() -> Clock {
        Clock {
            base_wall: SystemTime::now(),
            base_instant: Instant::now(),
        }
    }

    /// The current wall time.
    pub fn now(&self) -> SystemTime {
        self.wall(Instant::now())
    }

    /// The wall time of a tokio instant.
    pub fn wall(&self, at: Instant) -> SystemTime {
        if at >= self.base_instant {
            self.base_wall + (at - self.base_instant)
        } else {
            self.base_wall - (self.base_instant - at)
        }
    }

    /// The tokio instant of a wall time (a time before the anchor maps to before it, or to the
    /// anchor when tokio cannot represent it).
    pub fn instant(&self, at: SystemTime) -> Instant {
        match at.duration_since(self.base_wall) {
            Ok(d) => self.base_instant + d,
            Err(e) => self
                .base_instant
                .checked_sub(e.duration())
                .unwrap_or(self.base_instant),
        }
    }

    /// How long ago a wall time was (zero for the future).
    pub fn since(&self, at: SystemTime) -> Duration {
        self.now().duration_since(at).unwrap_or_default()
    }
}

/// `metav1.Time` (whole seconds) for a wall time.
pub fn time(t: SystemTime) -> Time {
    let (secs, _) = tandem_core::time::unix(t);
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// `metav1.MicroTime` for a wall time.
pub fn micro_time(t: SystemTime) -> MicroTime {
    let (secs, micros) = tandem_core::time::unix(t);
    let us = i64::from(micros) + secs.saturating_mul(1_000_000);
    MicroTime(Timestamp::from_microsecond(us).unwrap_or(Timestamp::UNIX_EPOCH))
}
