//! The one place the lease core reads time from.
//!
//! Every deadline, wait and record lifetime is measured through a [`Clock`], so a
//! simulation can give each writer a clock of its own, running at its own rate, and show
//! that the protocol holds for every rate within the configured skew.

use std::fmt::Debug;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

/// A source of time for the lease core: a monotonic clock for deadlines and waits, and a
/// wall clock for record lifetimes (DynamoDB TTL) and lock fencing-token floors.
///
/// Instants are Tokio's type, but what they mean is the clock's own: a clock running at
/// rate `r` reports `r` seconds for every second of Tokio's time. The core only ever
/// compares instants of one clock with each other.
///
/// ```
/// use dynacommit::lease::{Clock, SystemClock};
///
/// let clock = SystemClock;
/// let start = clock.now();
/// assert!(clock.now() >= start);
/// assert!(clock.unix_time().as_secs() > 1_700_000_000);
/// ```
pub trait Clock: Debug + Send + Sync + 'static {
    /// Now, on the monotonic clock.
    fn now(&self) -> Instant;

    /// Completes once [`now`](Self::now) has reached `deadline`.
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()>;

    /// The wall clock: time since the Unix epoch.
    fn unix_time(&self) -> Duration;

    /// Completes after `duration` on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.now() + duration)
    }

    /// A random duration below `bound` (zero for a zero bound), for a pause that spreads
    /// writers apart. Random by default; a simulation draws it from its seed, so that the
    /// seed replays the run.
    fn random_pause(&self, bound: Duration) -> Duration {
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::random::<u64>() % nanos)
    }
}

/// The machine's clocks: Tokio's monotonic time (so tests on a paused runtime control it)
/// and the system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(deadline))
    }

    fn unix_time(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }
}
