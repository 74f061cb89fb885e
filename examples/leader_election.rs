//! Three nodes elect a leader through one lock; the leader is killed (it stops renewing,
//! as a crashed process would) and another takes over after lease x skew, with a larger
//! fencing token. Runs on the in-process table; with a `DynamoLeaseTable` the nodes could
//! be separate machines. The example checks what it shows (one leader at a time, tokens
//! increasing, failover after lease x skew) and exits non-zero, saying what broke, if not.
//! Run: `cargo run --example leader_election`.

use std::sync::Arc;
use std::time::Duration;

use dynacommit::lease::MemoryLeaseTable;
use dynacommit::lock::{LockClient, default_lock_config};
use tokio::sync::mpsc;
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Short timings so the failover shows in seconds: a 500 ms lease, skew rate 3.
    let config = default_lock_config()
        .with_timeout(Duration::from_millis(500))
        .with_renew_interval(Duration::from_millis(150))
        .with_poll_interval(Duration::from_millis(20));
    let table = Arc::new(MemoryLeaseTable::new());
    let started = Instant::now();
    let (elected, mut elections) = mpsc::unbounded_channel();

    for node in ["node-a", "node-b", "node-c"] {
        let locks = LockClient::new(table.clone(), config.clone())?;
        let elected = elected.clone();
        tokio::spawn(async move {
            let guard = locks.acquire("cluster/leader", node).await?;
            let led_at = Instant::now();
            let token = guard.fencing_token();
            println!(
                "{:>6.2}s  {node} leads with fencing token {token}",
                started.elapsed().as_secs_f64()
            );
            // Lead for a second, then crash: stop renewing, release nothing.
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!("{:>6.2}s  {node} crashes", started.elapsed().as_secs_f64());
            let _ = elected.send(Term {
                node,
                token,
                led_at,
                crashed_at: Instant::now(),
            });
            guard.abandon().await;
            Ok::<_, dynacommit::lock::LockError>(())
        });
    }
    drop(elected);

    let mut terms = Vec::new();
    while let Some(term) = elections.recv().await {
        terms.push(term);
    }
    let tokens: Vec<u64> = terms.iter().map(|t| t.token).collect();
    println!("fencing tokens in order of leadership: {tokens:?}");

    // What the run shows, checked: every node led once, one at a time, each with a
    // larger token than the last, and each took over from a crashed leader after about
    // lease x skew (1.5 s; at least that less one renewal interval, since the last renewal
    // can come up to 150 ms before the crash).
    if terms.len() != 3 {
        violation(&format!("{} of 3 nodes led", terms.len()));
    }
    for pair in terms.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.token <= before.token {
            violation(&format!(
                "{} led with token {} after {} with token {}: tokens must increase",
                after.node, after.token, before.node, before.token
            ));
        }
        if after.led_at < before.crashed_at {
            violation(&format!(
                "{} led while {} still did: two leaders at once",
                after.node, before.node
            ));
        }
        let failover = after.led_at - before.crashed_at;
        if !(Duration::from_millis(1_300)..=Duration::from_millis(2_500)).contains(&failover) {
            violation(&format!(
                "{} took over {failover:?} after {} crashed, not after about lease x skew (1.5 s)",
                after.node, before.node
            ));
        }
    }
    println!("OK: three leaders in turn, never two at once, tokens increasing");
    Ok(())
}

/// One node's time as leader.
struct Term {
    node: &'static str,
    token: u64,
    led_at: Instant,
    crashed_at: Instant,
}

/// Says what broke and exits non-zero.
fn violation(message: &str) -> ! {
    eprintln!("VIOLATION: {message}");
    std::process::exit(1);
}
