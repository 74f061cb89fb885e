//! How long the guarded operations of one task waited before they held their leases (the
//! queue, back-off, acquisition and the precondition check), for a caller that reports it:
//! the gateway's access log. Nothing here changes what the protocol does.

use std::cell::Cell;
use std::time::Duration;

tokio::task_local! {
    static WAITED: Cell<Duration>;
}

/// Runs `work` and returns its output with the time its guarded operations waited for
/// their leases (zero if it ran none).
#[cfg_attr(not(feature = "gateway"), allow(dead_code))]
pub(crate) async fn measured<T>(work: impl Future<Output = T>) -> (T, Duration) {
    WAITED
        .scope(Cell::new(Duration::ZERO), async {
            let out = work.await;
            (out, WAITED.with(Cell::get))
        })
        .await
}

/// Counts `wait` for the task's caller, if it measures (a no-op otherwise).
pub(crate) fn add(wait: Duration) {
    let _ = WAITED.try_with(|waited| waited.set(waited.get() + wait));
}
