//! Holding a lease: renewing it while an operation runs, and fencing the operation by the
//! lease's usable time.

use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::Poll;

use tokio::time::Instant;

use crate::lease::lock;
use crate::lease::record::PutOutcome;

use super::LeaseManager;
use super::errors::LeaseError;
use super::lease::Lease;

impl LeaseManager {
    /// Runs `op` while keeping `lease` renewed, and returns its output.
    ///
    /// `op` is polled only while the lease is [usable](Lease::usable_until), so no request
    /// it makes can start after the lease runs out: if the lease is already past that
    /// point (a slow acquisition answer, a slow step before this one), it is first won
    /// back with a renewal, which applies only if nobody took the record meanwhile. If
    /// renewal cannot be confirmed in time, or another writer holds the lease, `op` is
    /// dropped and [`LeaseError::Lost`] returned, before any waiter could reclaim (for
    /// clock rates within the skew rate).
    ///
    /// `op` is never dropped merely for running long: a slow write keeps its lease for as
    /// long as it runs, so a late write cannot land on top of another writer's.
    pub async fn run_while_held<T>(
        &self,
        lease: &mut Lease,
        op: impl Future<Output = T>,
    ) -> Result<T, LeaseError> {
        let fence = self.safeguards.fence_by_usable_time();
        if fence {
            self.refresh(lease).await?;
        }
        // The usable time, moved on by each confirmed renewal and read by the fence.
        let usable = Mutex::new(lease.usable_until());
        let outcome = {
            let mut op = pin!(op);
            let fenced = std::future::poll_fn(|cx| {
                if fence && self.clock.now() >= *lock(&usable) {
                    return Poll::Ready(None);
                }
                op.as_mut().poll(cx).map(Some)
            });
            let until = lease.usable_until();
            let renewal = pin!(async {
                if !self.safeguards.renew_while_writing() {
                    self.clock.sleep_until(until).await;
                    return LeaseError::lost(lease, "not renewed (planted bug)");
                }
                self.keep_renewed(lease, &usable).await
            });
            first_of(fenced, renewal, fence).await
        };
        match outcome {
            Ok(Some(out)) => Ok(out),
            Ok(None) => Err(LeaseError::lost(
                lease,
                "renewal not confirmed before the lease deadline",
            )),
            Err(lost) => Err(lost),
        }
    }

    /// Makes sure `lease` has at least `timeout - renew interval` left before something
    /// starts under it: renews it first if it is older than the renew interval (a slow
    /// acquisition answer, a lease recognised as ours without a direct answer, a slow step
    /// before). A renewal is safe at any time, even past the deadline: it applies only if
    /// nobody took the record meanwhile. Ambiguous answers are retried a few times.
    pub async fn refresh(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        if self.clock.now() < lease.written_at + self.config.renew_interval() {
            return Ok(());
        }
        let mut failures = 0;
        loop {
            match self.renew(lease).await {
                Ok(()) => break,
                Err(e @ (LeaseError::Lost { .. } | LeaseError::GenerationExhausted { .. })) => {
                    return Err(e);
                }
                Err(e) if failures < 3 => {
                    failures += 1;
                    tracing::debug!(path = %lease.path, error = %e, "refreshing the lease failed; trying again");
                    self.clock.sleep(self.config.poll_interval).await;
                }
                Err(e) => return Err(e),
            }
        }
        if self.clock.now() >= lease.usable_until() {
            return Err(LeaseError::lost(
                lease,
                "the lease had run out, and its renewal was answered too late to start \
                 anything under it; nothing was sent",
            ));
        }
        Ok(())
    }

    /// Renews `lease` every renew interval, forever, publishing each new usable time in
    /// `usable`; returns only when the lease is lost.
    pub(super) async fn keep_renewed(
        &self,
        lease: &mut Lease,
        usable: &Mutex<Instant>,
    ) -> LeaseError {
        loop {
            self.clock
                .sleep_until(lease.written_at + self.config.renew_interval())
                .await;
            loop {
                let until = lease.usable_until();
                let now = self.clock.now();
                if now >= until {
                    // Woken late (a paused process): a renewal sent now would make the
                    // record look held for another timeout x skew, for an operation that
                    // is about to be dropped.
                    return LeaseError::lost(
                        lease,
                        "renewal not confirmed before the lease deadline",
                    );
                }
                // One attempt may take half the time left, so a request that hangs leaves
                // room for another.
                let attempt_until = now + (until - now) / 2;
                let attempt = tokio::select! {
                    biased;
                    renewed = self.renew(lease) => Some(renewed),
                    () = self.clock.sleep_until(attempt_until) => None,
                };
                let error = match attempt {
                    Some(Ok(())) => {
                        *lock(usable) = lease.usable_until();
                        break;
                    }
                    Some(Err(
                        e @ (LeaseError::Lost { .. } | LeaseError::GenerationExhausted { .. }),
                    )) => return e,
                    Some(Err(e)) => e.to_string(),
                    None => "no answer in time".to_owned(),
                };
                tracing::warn!(path = %lease.path, error = %error, "lease renewal failed; retrying until the deadline");
                let pause = self.config.poll_interval;
                if self.clock.now() + pause >= until {
                    self.clock.sleep_until(until).await;
                    return LeaseError::lost(
                        lease,
                        format!(
                            "renewal not confirmed before the lease deadline (last error: {error})"
                        ),
                    );
                }
                self.clock.sleep(pause).await;
            }
        }
    }

    /// Renews `lease` once: writes the next generation if the record is still ours.
    ///
    /// If the record turns out to hold that next generation already (an earlier attempt,
    /// perhaps of a call that was dropped, landed after all), the lease runs from when the
    /// earliest unconfirmed attempt was sent.
    pub async fn renew(&self, lease: &mut Lease) -> Result<(), LeaseError> {
        let next = lease.after(lease.generation)?;
        let record = self.record(lease, next, false);
        let expect = lease.still_ours();
        let sent = self.clock.now();
        // Before the request leaves: if this call is dropped, the attempt may still land.
        let earliest = *lease.unconfirmed_since.get_or_insert(sent);
        let answer = self.table.put(&record, &expect).await;
        let round_trip = self.clock.now().saturating_duration_since(sent);
        if round_trip > lease.timeout / 3 {
            // Safe still, but close to the edge: one more slow answer and the holder gives
            // up its operation. The lease timeout should be far above the table's latency.
            tracing::warn!(
                path = %lease.path,
                ?round_trip,
                timeout = ?lease.timeout,
                "lease renewal took over a third of the lease; raise the lease timeout"
            );
        }
        let written_at = match answer? {
            PutOutcome::Written => sent,
            PutOutcome::Conflict(Some(found))
                if found.is_written_by(&lease.owner, next) && !found.released =>
            {
                earliest
            }
            PutOutcome::Conflict(found) => {
                let reason = match found {
                    Some(f) => format!(
                        "the record is now generation {} of {}",
                        f.generation,
                        f.owner.as_deref().unwrap_or("an object_store 0.12 writer")
                    ),
                    None => "the record was deleted".to_owned(),
                };
                return Err(LeaseError::lost(lease, reason));
            }
        };
        lease.generation = next;
        lease.written_at = written_at;
        lease.unconfirmed_since = None;
        Ok(())
    }
}

/// Whichever of the fenced operation and the renewal ends first: the operation's output
/// (`None` if the fence stopped it), or the renewal's loss. When both are ready at once the
/// loss wins where the operation is fenced, so that no outcome is reported past a lost
/// lease; the operation wins where it is not. (A biased `tokio::select!` in that order,
/// written once.)
async fn first_of<T>(
    fenced: impl Future<Output = Option<T>>,
    renewal: impl Future<Output = LeaseError>,
    fence: bool,
) -> Result<Option<T>, LeaseError> {
    let (mut fenced, mut renewal) = (pin!(fenced), pin!(renewal));
    std::future::poll_fn(|cx| {
        // As `tokio::select!` does: with the task's budget spent, yield before polling
        // either, since the budget-aware one would only yield.
        if !tokio::task::coop::has_budget_remaining() {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if fence && let Poll::Ready(lost) = renewal.as_mut().poll(cx) {
            return Poll::Ready(Err(lost));
        }
        if let Poll::Ready(out) = fenced.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if !fence && let Poll::Ready(lost) = renewal.as_mut().poll(cx) {
            return Poll::Ready(Err(lost));
        }
        Poll::Pending
    })
    .await
}
