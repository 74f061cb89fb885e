//! Node clocks: Tokio's paused time, scaled by a rate of the node's own.

use std::sync::Mutex;
use std::time::Duration;

use dynacommit::lease::Clock;
use futures::future::BoxFuture;
use tokio::time::Instant;

/// The wall clock's reading at the start of every simulation (2026-01-01).
pub const EPOCH: Duration = Duration::from_secs(1_767_225_600);

/// A node's clocks. Its monotonic clock runs `num/den` times as fast as Tokio's; its wall
/// clock keeps true time, off by a fixed `wall_offset_ms` (NTP keeps wall clocks close;
/// what drifts is the monotonic time of paused or migrated processes).
#[derive(Debug)]
pub struct NodeClock {
    origin: Instant,
    num: u64,
    den: u64,
    wall_offset_ms: i64,
    /// Random pauses, drawn from a seed of the simulation's, so the seed replays them.
    pauses: Mutex<rand::rngs::StdRng>,
}

impl NodeClock {
    /// A clock running at `num/den`, from `origin` (Tokio time at the simulation's start),
    /// drawing its random pauses from `seed`.
    pub fn new(origin: Instant, num: u64, den: u64, wall_offset_ms: i64, seed: u64) -> Self {
        Self {
            origin,
            num,
            den,
            wall_offset_ms,
            pauses: Mutex::new(rand::SeedableRng::seed_from_u64(seed)),
        }
    }

    /// The true (Tokio) instant at which this clock reads `local`, rounded up.
    fn to_true(&self, local: Instant) -> Instant {
        let local_ns = local.saturating_duration_since(self.origin).as_nanos();
        let true_ns = (local_ns * self.den as u128).div_ceil(self.num as u128);
        self.origin + Duration::from_nanos(true_ns.min(u64::MAX as u128) as u64)
    }
}

impl Clock for NodeClock {
    fn now(&self) -> Instant {
        let true_ns = Instant::now().duration_since(self.origin).as_nanos();
        let local_ns = true_ns * self.num as u128 / self.den as u128;
        self.origin + Duration::from_nanos(local_ns as u64)
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(self.to_true(deadline)))
    }

    fn random_pause(&self, bound: Duration) -> Duration {
        use rand::RngExt;
        let nanos = bound.as_nanos().min(u64::MAX as u128) as u64;
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.pauses.lock().unwrap().random_range(0..nanos))
    }

    fn unix_time(&self) -> Duration {
        let wall = EPOCH + Instant::now().duration_since(self.origin);
        if self.wall_offset_ms >= 0 {
            wall + Duration::from_millis(self.wall_offset_ms as u64)
        } else {
            wall - Duration::from_millis(self.wall_offset_ms.unsigned_abs())
        }
    }
}
