//! A randomised, deterministic simulation of many writers contending for one lease, with
//! holders that die, holders whose renewals are blocked, lost answers and holds longer
//! than the lease, on Tokio's paused clock. A shared critical section records every entry:
//! two holders inside at once is a violation. Run with the holder's deadline respected
//! (the protocol) there are none, over every seed; run with one holder ignoring it (the
//! protection off) the same check finds them.

#[path = "sim/clock.rs"]
mod clock;
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::faults::{FaultyTable, TableFaults};
use dynacommit::lease::{LeaseConfig, LeaseManager, LeaseTable, MemoryLeaseTable};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const TIMEOUT: Duration = Duration::from_secs(1);
const WRITERS: usize = 6;
const ROUNDS: usize = 8;

/// The critical section: who is inside, and how often two were.
#[derive(Default)]
struct Critical {
    inside: Mutex<Option<usize>>,
    entries: AtomicUsize,
    violations: AtomicUsize,
}

/// Being inside; leaving on drop (also when the holding future is dropped).
struct Inside<'a>(&'a Critical);

impl Critical {
    fn enter(&self, writer: usize) -> Inside<'_> {
        let mut inside = self.inside.lock().unwrap();
        if inside.is_some() {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        *inside = Some(writer);
        self.entries.fetch_add(1, Ordering::SeqCst);
        Inside(self)
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        *self.0.inside.lock().unwrap() = None;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Holder {
    /// Gives up at its deadline when it cannot renew: the protocol.
    Honest,
    /// Writer 0 carries on after its renewals fail: the protection off.
    IgnoresItsDeadline,
    /// Every writer reclaims after one lease timeout instead of timeout x skew (a planted
    /// bug): safe only if every clock ran at the same rate.
    #[cfg(feature = "planted-bugs")]
    ReclaimsAfterOneTimeout,
}

async fn no_check() -> Result<(), std::convert::Infallible> {
    Ok(())
}

async fn writer(
    origin: tokio::time::Instant,
    id: usize,
    shared: Arc<dyn LeaseTable>,
    critical: Arc<Critical>,
    seed: u64,
    holder: Holder,
) {
    let faulty = FaultyTable::over(shared);
    let config = LeaseConfig::new("mutex")
        .with_timeout(TIMEOUT)
        .with_poll_interval(Duration::from_millis(100));
    let mut rng = StdRng::seed_from_u64(seed * 1_000 + id as u64);
    // Each writer's clock runs at a rate of its own, 0.8 to 1.25 times true time: a
    // ratio of 1.56, within the skew rate of 3.
    let rate = rng.random_range(800..=1250);
    let clock = clock::NodeClock::new(origin, rate, 1000, 0, rng.random());
    #[allow(unused_mut)]
    let mut leases = LeaseManager::new(faulty.clone(), config)
        .unwrap()
        .with_clock(Arc::new(clock));
    #[cfg(feature = "planted-bugs")]
    if holder == Holder::ReclaimsAfterOneTimeout {
        leases = leases.with_planted_bug(dynacommit::lease::PlantedBug::ReclaimAfterOneTimeout);
    }
    for _ in 0..ROUNDS {
        if rng.random_range(0..8) == 0 {
            // This acquisition's answer is lost after it applied.
            faulty.set_faults(TableFaults {
                lose_answers: 1,
                ..TableFaults::default()
            });
        }
        let mut lease = leases.acquire("p", "*", no_check).await.unwrap();
        faulty.set_faults(TableFaults::default());
        let hold = Duration::from_millis(rng.random_range(0..2_500));
        match rng.random_range(0..10) {
            0 => {
                // Dies inside: no renewal, no release, nothing after.
                let _inside = critical.enter(id);
                tokio::time::sleep(hold / 4).await;
                return;
            }
            1 if holder == Holder::IgnoresItsDeadline && id == 0 => {
                // Renewals blocked, and it writes on regardless.
                let _inside = critical.enter(id);
                tokio::time::sleep(TIMEOUT * 5).await;
            }
            1 => {
                // Renewals blocked: the operation must be abandoned at the deadline.
                faulty.set_faults(TableFaults {
                    fail_owned_puts: true,
                    ..TableFaults::default()
                });
                let held = leases
                    .run_while_held(&mut lease, async {
                        let _inside = critical.enter(id);
                        tokio::time::sleep(TIMEOUT * 5).await;
                    })
                    .await;
                assert!(
                    held.is_err(),
                    "writer {id} held on through blocked renewals"
                );
                faulty.set_faults(TableFaults::default());
            }
            _ => {
                // A hold of up to 2.5 leases: renewed as needed, then released.
                leases
                    .run_while_held(&mut lease, async {
                        let _inside = critical.enter(id);
                        tokio::time::sleep(hold).await;
                    })
                    .await
                    .unwrap();
                leases.release(lease).await.unwrap();
            }
        }
    }
}

async fn simulate(seed: u64, holder: Holder) -> (usize, usize) {
    let shared: Arc<dyn LeaseTable> = Arc::new(MemoryLeaseTable::new());
    let critical = Arc::new(Critical::default());
    let writers = (0..WRITERS).map(|id| {
        tokio::spawn(writer(
            tokio::time::Instant::now(),
            id,
            shared.clone(),
            critical.clone(),
            seed,
            holder,
        ))
    });
    for w in futures::future::join_all(writers).await {
        w.unwrap();
    }
    (
        critical.entries.load(Ordering::SeqCst),
        critical.violations.load(Ordering::SeqCst),
    )
}

#[tokio::test(start_paused = true)]
async fn never_two_holders_over_forty_seeds_of_faults() {
    let mut entries = 0;
    for seed in 0..40 {
        let (entered, violations) = simulate(seed, Holder::Honest).await;
        assert_eq!(violations, 0, "seed {seed}: two holders at once");
        entries += entered;
    }
    // Most rounds ran (writers that die stop early).
    assert!(
        entries > 40 * WRITERS * ROUNDS / 2,
        "only {entries} entries"
    );
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_ignores_its_deadline_is_caught() {
    let mut caught = 0;
    for seed in 0..40 {
        let (_, violations) = simulate(seed, Holder::IgnoresItsDeadline).await;
        caught += usize::from(violations > 0);
    }
    assert!(
        caught > 0,
        "the check never saw the unsafe holder overlap another"
    );
}

#[cfg(feature = "planted-bugs")]
#[tokio::test(start_paused = true)]
async fn a_protocol_that_reclaims_after_one_timeout_is_caught() {
    let mut caught = 0;
    for seed in 0..40 {
        let (_, violations) = simulate(seed, Holder::ReclaimsAfterOneTimeout).await;
        caught += usize::from(violations > 0);
    }
    assert!(
        caught > 0,
        "reclaiming after one timeout never let two writers in at once"
    );
    println!("reclaiming after one timeout: {caught} of 40 seeds caught it");
}
