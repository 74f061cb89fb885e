//! Three nodes elect a leader through one lock; the leader is killed (it stops renewing,
//! as a crashed process would) and another takes over after lease x skew, with a larger
//! fencing token. Runs on the in-process table; with a `DynamoLeaseTable` the nodes could
//! be separate machines. Run: `cargo run --example leader_election`.

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
            let token = guard.fencing_token();
            println!(
                "{:>6.2}s  {node} leads with fencing token {token}",
                started.elapsed().as_secs_f64()
            );
            // Lead for a second, then crash: stop renewing, release nothing.
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!("{:>6.2}s  {node} crashes", started.elapsed().as_secs_f64());
            let _ = elected.send(token);
            guard.abandon().await;
            Ok::<_, dynacommit::lock::LockError>(())
        });
    }
    drop(elected);

    let mut tokens = Vec::new();
    while let Some(token) = elections.recv().await {
        tokens.push(token);
    }
    println!("fencing tokens in order of leadership: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must increase"
    );
    assert_eq!(tokens.len(), 3, "every node led once");
    Ok(())
}
