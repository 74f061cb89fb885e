//! The folder invariants: a `list` never shows a key or folder that held no live key at
//! any moment while it ran, and never hides one that held a live key all the while.
//! "Held" is judged by the table's own record of its items, in both of its views: a
//! transaction's items as Query saw them land one by one, and as GetItem saw them all at
//! once at its end (the transaction took effect somewhere in between).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tokio::time::Instant;

use super::Listing;
use super::table::{Change, FakeTable, Key};

/// A live key's full name in the store, if `item` (at `key`) is an entry live at wall
/// time `now_ms` (not a folder counter, not expired).
fn live_name(key: &Key, item: &serde_json::Map<String, Value>, now_ms: u64) -> Option<String> {
    item.get("rev")?;
    let expired = item
        .get("exp")
        .and_then(|v| v.get("N"))
        .and_then(Value::as_str)
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|exp| exp <= now_ms);
    if expired {
        return None;
    }
    // pk = namespace, a zero byte, the folder; sk = the rest of the key.
    let zero = key.0.iter().position(|&b| b == 0)?;
    let mut name = key.0[zero + 1..].to_vec();
    name.extend_from_slice(&key.1);
    Some(String::from_utf8_lossy(&name).into_owned())
}

/// The live keys at `at`, by the changes up to it.
fn live_at(changes: &[Change], at: Instant, now_ms: u64) -> BTreeSet<String> {
    let mut items: BTreeMap<&Key, &serde_json::Map<String, Value>> = BTreeMap::new();
    for change in changes.iter().take_while(|c| c.at <= at) {
        match &change.item {
            Some(item) => items.insert(&change.key, item),
            None => items.remove(&change.key),
        };
    }
    items
        .into_iter()
        .filter_map(|(k, i)| live_name(k, i, now_ms))
        .collect()
}

/// What `list(prefix)` would answer over `live`.
fn names_under(prefix: &str, live: &BTreeSet<String>) -> BTreeSet<String> {
    live.iter()
        .filter_map(|k| k.strip_prefix(prefix))
        .map(|rest| match rest.find('/') {
            Some(slash) => rest[..=slash].to_owned(),
            None => rest.to_owned(),
        })
        .collect()
}

/// Every violation of the folder invariants among `listings`.
pub fn check(
    listings: &[Listing],
    changes: &[Change],
    commits: &[Change],
    table: &FakeTable,
) -> Vec<String> {
    let mut violations = Vec::new();
    for listing in listings {
        // The moments the answer may reflect: the start, the end (entries that expired
        // meanwhile are gone by then), and every change while it ran.
        let mut moments: BTreeSet<Instant> = BTreeSet::from([listing.invoke, listing.complete]);
        for c in changes.iter().chain(commits) {
            if c.at > listing.invoke && c.at <= listing.complete {
                moments.insert(c.at);
            }
        }
        let views: Vec<BTreeSet<String>> = moments
            .iter()
            .flat_map(|&at| {
                let now_ms = table.wall_ms_at(at);
                [changes, commits]
                    .map(|log| names_under(&listing.prefix, &live_at(log, at, now_ms)))
            })
            .collect();
        let shown: BTreeSet<String> = listing.names.iter().cloned().collect();
        for name in &shown {
            if !views.iter().any(|v| v.contains(name)) {
                violations.push(format!(
                    "list({:?}) over {:?}..{:?} showed {name:?}, which held no live key at any moment of it",
                    listing.prefix, listing.invoke, listing.complete
                ));
            }
        }
        let always: BTreeSet<String> = views.iter().skip(1).fold(views[0].clone(), |all, v| {
            all.intersection(v).cloned().collect()
        });
        for name in always.difference(&shown) {
            violations.push(format!(
                "list({:?}) over {:?}..{:?} hid {name:?}, which held a live key all the while",
                listing.prefix, listing.invoke, listing.complete
            ));
        }
    }
    violations
}
