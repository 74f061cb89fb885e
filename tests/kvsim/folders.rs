//! The folder invariants: a `list` never shows a key or folder that held no live key at
//! any moment while it ran, and never hides one beneath which one key was live all the
//! while. (Not "one that held some live key all the while": a listing is not a snapshot,
//! and keys that take turns being live can each be read when they are not; seed 5 of the
//! simulator showed it.)
//! "Held" is judged by the table's own record of its items, in both of its views: a
//! transaction's items as Query saw them land one by one, and as GetItem saw them all at
//! once at its end (the transaction took effect somewhere in between).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

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

/// The live keys after the first `count` changes, judged at wall time `now_ms`.
fn live_after(changes: &[Change], count: usize, now_ms: u64) -> BTreeSet<String> {
    let mut items: BTreeMap<&Key, &serde_json::Map<String, Value>> = BTreeMap::new();
    for change in &changes[..count] {
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

/// What `list(prefix)` could see over `log` while `listing` ran: for each state the log
/// passed through meanwhile, the keys live at its start (the most: expiry only takes keys
/// away) and at its end (the fewest). Changes in the same instant as the
/// start or the end may fall on either side, so their states count too.
fn answers(
    listing: &Listing,
    log: &[Change],
    table: &FakeTable,
) -> (Vec<BTreeSet<String>>, Vec<BTreeSet<String>>) {
    let first = log.iter().take_while(|c| c.at < listing.invoke).count();
    let last = log.iter().take_while(|c| c.at <= listing.complete).count();
    let (mut most, mut fewest) = (Vec::new(), Vec::new());
    for count in first..=last {
        let from = match count {
            0 => listing.invoke,
            n => log[n - 1].at.max(listing.invoke),
        };
        let until = log
            .get(count)
            .map_or(listing.complete, |next| next.at.min(listing.complete))
            .max(from);
        most.push(live_after(log, count, table.wall_ms_at(from)));
        fewest.push(live_after(log, count, table.wall_ms_at(until)));
    }
    (most, fewest)
}

/// Every violation of the folder invariants among `listings`: a name shown that no state
/// of either view held live at any moment, or a name hidden beneath which one key was
/// live in every state of both views.
pub fn check(
    listings: &[Listing],
    changes: &[Change],
    commits: &[Change],
    table: &FakeTable,
) -> Vec<String> {
    let mut violations = Vec::new();
    for listing in listings {
        let (mut most, mut fewest) = answers(listing, changes, table);
        let (more, fewer) = answers(listing, commits, table);
        most.extend(more);
        fewest.extend(fewer);
        let shown: BTreeSet<String> = listing.names.iter().cloned().collect();
        for name in &shown {
            if !most
                .iter()
                .any(|live| names_under(&listing.prefix, live).contains(name))
            {
                violations.push(format!(
                    "list({:?}) over {:?}..{:?} showed {name:?}, which held no live key at any moment of it",
                    listing.prefix, table.since_start(listing.invoke), table.since_start(listing.complete)
                ));
            }
        }
        // A listing is not a snapshot: it answers for each key as its page was read. So a
        // folder whose keys take turns being live (one expires as another is written) can
        // be live at every moment and still be read empty; what the listing promises is
        // each name with one key live throughout.
        let always: BTreeSet<String> = fewest.iter().skip(1).fold(fewest[0].clone(), |all, v| {
            all.intersection(v).cloned().collect()
        });
        for name in names_under(&listing.prefix, &always).difference(&shown) {
            violations.push(format!(
                "list({:?}) over {:?}..{:?} hid {name:?}, beneath which one key was live all the while",
                listing.prefix, table.since_start(listing.invoke), table.since_start(listing.complete)
            ));
        }
    }
    violations
}
