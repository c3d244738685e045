//! The time source of the time-driven controllers (node lifecycle, CronJob). Production uses the
//! system clock; tests hand in a [`FakeClock`] and move it forward, so a 300 s toleration or an
//! hourly schedule is proven without waiting — upstream's `k8s.io/utils/clock` and its
//! `testingclock.FakeClock`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to. Cheap to clone; clones share the time.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<Timestamp>>,
}

impl FakeClock {
    /// A clock stopped at `now`.
    pub fn new(now: Timestamp) -> Self {
        FakeClock {
            now: Arc::new(Mutex::new(now)),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let step = SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX);
        *now = now.saturating_add(step).unwrap_or(*now);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Timestamp) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A shared clock handle, as the controllers' options hold it.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}
