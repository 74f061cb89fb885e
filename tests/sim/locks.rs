//! The lock scenario: nodes contending for one leader lock, holders releasing, crashing
//! and losing it, an operator deleting records of dead holders; checked for one holder at
//! a time and strictly increasing fencing tokens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynacommit::lease::{LeaseRecord, PlantedBug};
use dynacommit::lock::LockClient;
use tokio::time::Instant;

use super::clock::NodeClock;
use super::table::{NodeTable, SimTable};
use super::world::{RUN_FOR, T, World, node_leases};

const NODES: usize = 4;
const KEY: &str = "cluster/leader";

/// What one run did, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub acquisitions: usize,
}

#[derive(Default)]
struct Ledger {
    /// Nodes that believe they lead, with their tokens.
    leading: Vec<(usize, u64)>,
    /// Every token handed out, in the order of acquisition.
    tokens: Vec<(usize, u64)>,
}

fn node_locks(link: &Arc<NodeTable>, clock: &Arc<NodeClock>, planted: &[PlantedBug]) -> LockClient {
    LockClient::with_leases(node_leases(link, clock, planted))
}

async fn node(
    world: Arc<World>,
    id: usize,
    table: Arc<SimTable>,
    ledger: Arc<Mutex<Ledger>>,
    planted: Vec<PlantedBug>,
) {
    let until = world.origin + RUN_FOR;
    let clock = world.node_clock();
    let link = NodeTable::new(world.clone(), table, id);
    let mut locks = node_locks(&link, &clock, &planted);
    while Instant::now() < until {
        world.between_operations(&link).await;
        let value = format!("node-{id}");
        let acquired = match world.unless_crashed(locks.acquire(KEY, &value)).await {
            Some(guard) => guard.ok(),
            None => {
                locks = node_locks(&link, &clock, &planted);
                None
            }
        };
        let Some(mut guard) = acquired else { continue };
        let token = guard.fencing_token();
        {
            let mut ledger = ledger.lock().unwrap();
            for (other, theirs) in &ledger.leading {
                world.violation(format!(
                    "node {id} took the lock (token {token}) while node {other} (token {theirs}) led"
                ));
            }
            if let Some((before, last)) = ledger.tokens.last()
                && *last >= token
            {
                world.violation(format!(
                    "fencing token went from {last} (node {before}) to {token} (node {id})"
                ));
            }
            ledger.leading.push((id, token));
            ledger.tokens.push((id, token));
        }
        let hold = world.upto(T * 5 / 2);
        tokio::select! {
            biased;
            _ = guard.lost() => {}
            () = tokio::time::sleep(hold) => {}
        }
        // It stops leading before it lets go, as a leader must.
        ledger.lock().unwrap().leading.retain(|(n, _)| *n != id);
        match world.pick(0..10) {
            0..7 => {
                let _ = guard.release().await;
            }
            7 | 8 => {
                guard.abandon().await;
                locks = node_locks(&link, &clock, &planted);
            }
            _ => drop(guard),
        }
    }
}

/// An operator who deletes the lock record once it has stood unchanged long enough that
/// its holder must be gone (what `lease break` is for), as a careful human would.
async fn operator(world: Arc<World>, table: Arc<SimTable>, until: Instant) {
    let mut seen: Option<(LeaseRecord, Instant)> = None;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200 + world.pick(0..800))).await;
        let now = table.records().into_iter().find(|r| r.path == KEY);
        seen = match (now, seen.take()) {
            (Some(record), Some((before, since))) if record == before => {
                if Instant::now() - since >= T * 4 && world.chance(0.5) {
                    table.delete(&record);
                    None
                } else {
                    Some((before, since))
                }
            }
            (Some(record), _) => Some((record, Instant::now())),
            (None, _) => None,
        };
    }
}

/// Runs the scenario; violations go to `world`.
pub async fn run(world: Arc<World>, planted: &[PlantedBug]) -> Tally {
    let table = SimTable::new(world.clone());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let until = world.origin + RUN_FOR;
    if world.profile.ttl_deletes {
        tokio::spawn(table.clone().sweep_expired(until));
    }
    tokio::spawn(operator(world.clone(), table.clone(), until));
    let nodes: Vec<_> = (0..NODES)
        .map(|id| {
            tokio::spawn(node(
                world.clone(),
                id,
                table.clone(),
                ledger.clone(),
                planted.to_vec(),
            ))
        })
        .collect();
    for node in nodes {
        node.await.expect("a node panicked");
    }
    let acquisitions = ledger.lock().unwrap().tokens.len();
    Tally { acquisitions }
}
