//! The linearizability checker of tests/lincheck checked against hand-written histories, a
//! correct in-memory register, and one with a planted compare-and-swap race.

mod lincheck;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lincheck::{
    CheckReport, Entry, NEVER, Op, Options, Outcome, Recorder, Rev, Value, Violation,
    ViolationKind, check, check_with,
};

fn e(client: usize, op: Op, outcome: Outcome, invoke: u64, complete: u64) -> Entry {
    Entry::new(client, "k", op, outcome, invoke, complete)
}

fn must_pass(history: &[Entry]) -> CheckReport {
    match check(history) {
        Ok(report) => {
            assert!(report.is_conclusive(), "{report}");
            report
        }
        Err(violation) => panic!("expected linearizable, got:\n{violation}"),
    }
}

fn must_fail(history: &[Entry]) -> Violation {
    match check(history) {
        Ok(report) => panic!("expected a violation, the checker accepted: {report}"),
        Err(violation) => {
            assert_eq!(
                violation.kind,
                ViolationKind::NotLinearizable,
                "{violation}"
            );
            eprintln!("{violation}");
            violation
        }
    }
}

/// The register's semantics, shared by the sequential reference and the in-memory store.
fn apply(slot: &mut Option<(Value, Rev)>, op: &Op, fresh: impl FnOnce() -> Rev) -> Outcome {
    match op {
        Op::Get => Outcome::Found(slot.clone()),
        Op::Put(v) => {
            let rev = fresh();
            *slot = Some((v.clone(), rev.clone()));
            Outcome::Written(rev)
        }
        Op::CompareAndSwap { expected, new } => match slot {
            Some((v, _)) if v == expected => {
                let rev = fresh();
                *slot = Some((new.clone(), rev.clone()));
                Outcome::Written(rev)
            }
            _ => Outcome::Mismatch,
        },
        Op::ConditionalDelete { rev } => match slot {
            Some((_, r)) if r == rev => {
                *slot = None;
                Outcome::Deleted
            }
            _ => Outcome::Mismatch,
        },
        Op::PutUntil(..) | Op::CreateUntil(..) => {
            unreachable!("the sequential reference has no clock: expiry has its own tests")
        }
        Op::Create(v) => {
            if slot.is_some() {
                Outcome::AlreadyExists
            } else {
                let rev = fresh();
                *slot = Some((v.clone(), rev.clone()));
                Outcome::Written(rev)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-written histories

#[test]
fn a_sequential_correct_history_passes() {
    let h = vec![
        e(0, Op::Get, Outcome::absent(), 0, 1),
        e(0, Op::create("a"), Outcome::written("r1"), 2, 3),
        e(1, Op::Get, Outcome::found("a", "r1"), 4, 5),
        e(1, Op::create("x"), Outcome::AlreadyExists, 6, 7),
        e(0, Op::put("b"), Outcome::written("r2"), 8, 9),
        e(1, Op::cas("a", "z"), Outcome::Mismatch, 10, 11),
        e(1, Op::cas("b", "c"), Outcome::written("r3"), 12, 13),
        e(0, Op::delete("r2"), Outcome::Mismatch, 14, 15),
        e(0, Op::Get, Outcome::found("c", "r3"), 16, 17),
        e(1, Op::delete("r3"), Outcome::Deleted, 18, 19),
        e(0, Op::Get, Outcome::absent(), 20, 21),
        e(1, Op::cas("c", "d"), Outcome::Mismatch, 22, 23),
        e(0, Op::create("e"), Outcome::written("r4"), 24, 25),
    ];
    let report = must_pass(&h);
    assert_eq!(report.ops, h.len());
    // The same history with one outcome changed is not linearizable: the check is not vacuous.
    let mut bad = h.clone();
    bad[8].outcome = Outcome::found("b", "r2");
    must_fail(&bad);
}

#[test]
fn a_stale_read_after_a_completed_put_fails() {
    let v = must_fail(&[
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::put("b"), Outcome::written("r2"), 2, 3),
        e(2, Op::Get, Outcome::found("a", "r1"), 4, 5),
    ]);
    assert_eq!(v.key, "k");
    assert_eq!(v.detail.blocked.as_ref().map(|b| b.index), Some(2), "{v}");
    let text = v.to_string();
    assert!(text.contains("reads \"a\" @ \"r1\""), "{text}");
    assert!(text.contains("\"b\" @ \"r2\""), "{text}");
}

#[test]
fn two_concurrent_cas_from_the_same_expected_value_cannot_both_succeed() {
    let base = |second: Outcome| {
        vec![
            e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
            e(1, Op::cas("a", "b"), Outcome::written("r2"), 2, 10),
            e(2, Op::cas("a", "c"), second, 3, 11),
        ]
    };
    must_fail(&base(Outcome::written("r3")));
    must_pass(&base(Outcome::Mismatch));
}

/// The outcomes of `ops` run one after another in `order`; op `i` writes revision `r{i}`.
fn run_sequentially(ops: &[Op], order: &[usize]) -> Vec<Outcome> {
    let mut slot = None;
    let mut outcomes = vec![Outcome::Unknown; ops.len()];
    for &i in order {
        outcomes[i] = apply(&mut slot, &ops[i], || format!("r{i}"));
    }
    outcomes
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut all = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            all.push(q);
        }
    }
    all
}

#[test]
fn overlapping_ops_pass_in_any_order_and_sequential_ones_only_in_theirs() {
    let ops = [
        Op::put("a"),
        Op::put("b"),
        Op::cas("a", "c"),
        Op::create("d"),
        Op::Get,
        Op::delete("r0"),
    ];
    let identity: Vec<usize> = (0..ops.len()).collect();
    let in_order = run_sequentially(&ops, &identity);
    let (mut overlapping, mut sequential_passed) = (0, 0);
    for order in permutations(ops.len()) {
        let outcomes = run_sequentially(&ops, &order);
        // All ops overlap (every invoke before every completion): any order is allowed.
        let h: Vec<Entry> = (0..ops.len())
            .map(|i| {
                e(
                    i,
                    ops[i].clone(),
                    outcomes[i].clone(),
                    i as u64,
                    100 + i as u64,
                )
            })
            .collect();
        must_pass(&h);
        overlapping += 1;
        // One after another in index order: only outcomes of that order are allowed.
        let h: Vec<Entry> = (0..ops.len())
            .map(|i| {
                let t = 10 * i as u64;
                e(i, ops[i].clone(), outcomes[i].clone(), t, t + 5)
            })
            .collect();
        let ok = check(&h).is_ok();
        assert_eq!(ok, outcomes == in_order, "order {order:?}: {outcomes:?}");
        sequential_passed += usize::from(ok);
    }
    eprintln!("{overlapping} overlapping orders pass; {sequential_passed} sequential pass");
    assert_eq!(overlapping, 720);
    assert!(sequential_passed < 720 / 4, "{sequential_passed}");
}

#[test]
fn a_conditional_delete_with_a_stale_revision_reported_ok_fails() {
    let h = |rev: &str| {
        vec![
            e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
            e(1, Op::put("b"), Outcome::written("r2"), 2, 3),
            e(0, Op::delete(rev), Outcome::Deleted, 4, 5),
            e(1, Op::Get, Outcome::absent(), 6, 7),
        ]
    };
    must_fail(&h("r1"));
    must_pass(&h("r2"));
}

#[test]
fn an_unknown_put_later_observed_passes_but_not_undone() {
    let mut h = vec![
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::put("b"), Outcome::Unknown, 2, NEVER),
        e(2, Op::Get, Outcome::found("a", "r1"), 3, 4),
        e(0, Op::put("c"), Outcome::written("r3"), 5, 6),
        e(2, Op::Get, Outcome::found("c", "r3"), 7, 8),
        // The unknown put takes effect after a later put completed, and is read.
        e(2, Op::Get, Outcome::found("b", "rb"), 9, 10),
        e(0, Op::delete("rb"), Outcome::Deleted, 11, 12),
        e(2, Op::Get, Outcome::absent(), 13, 14),
    ];
    must_pass(&h);
    // Once seen and deleted, it cannot come back.
    h.push(e(2, Op::Get, Outcome::found("b", "rb"), 15, 16));
    must_fail(&h);
}

#[test]
fn an_unknown_put_never_observed_passes() {
    let mut h = vec![
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::put("b"), Outcome::Unknown, 2, NEVER),
        e(1, Op::cas("a", "c"), Outcome::Unknown, 3, NEVER),
        e(1, Op::delete("r1"), Outcome::Unknown, 4, NEVER),
    ];
    for i in 0..20 {
        h.push(e(
            2,
            Op::Get,
            Outcome::found("a", "r1"),
            10 + 2 * i,
            11 + 2 * i,
        ));
    }
    must_pass(&h);
    // An unknown read is no evidence of anything either.
    h.push(e(3, Op::Get, Outcome::Unknown, 50, NEVER));
    must_pass(&h);
}

#[test]
fn unknown_writes_take_effect_only_when_their_condition_holds() {
    // The unknown CAS can only apply while the key holds "a", which is only before "b".
    let h = vec![
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::cas("a", "c"), Outcome::Unknown, 2, NEVER),
        e(0, Op::put("b"), Outcome::written("r2"), 3, 4),
        e(2, Op::Get, Outcome::found("b", "r2"), 5, 6),
        e(2, Op::Get, Outcome::found("c", "rc"), 7, 8),
    ];
    must_fail(&h);
    // One unknown write's revision cannot be read under two names.
    let h = vec![
        e(1, Op::put("b"), Outcome::Unknown, 0, NEVER),
        e(2, Op::Get, Outcome::found("b", "x1"), 5, 6),
        e(2, Op::Get, Outcome::found("b", "x2"), 7, 8),
    ];
    must_fail(&h);
}

#[test]
fn a_delete_naming_a_revision_no_completed_op_returned_never_matches() {
    // Clients learn revisions only from completed ops: even with a write of unknown outcome
    // around, a revision nobody was told of cannot be the current one.
    let h = |outcome: Outcome| {
        vec![
            e(0, Op::put("a"), Outcome::Unknown, 0, NEVER),
            e(1, Op::delete("guess"), outcome, 2, 3),
            e(1, Op::Get, Outcome::absent(), 4, 5),
        ]
    };
    must_pass(&h(Outcome::Mismatch));
    let v = must_fail(&h(Outcome::Deleted));
    assert!(v.to_string().contains("returned by no completed op"), "{v}");
    // Once a read returned it, it can be the revision of that unknown write.
    let mut seen = h(Outcome::Deleted);
    seen.insert(1, e(2, Op::Get, Outcome::found("a", "guess"), 1, 2));
    must_pass(&seen);
}

#[test]
fn a_read_of_a_value_no_one_wrote_fails() {
    let v = must_fail(&[
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::found("z", "r9"), 2, 3),
    ]);
    assert!(
        v.to_string().contains("returned by no completed write"),
        "{v}"
    );
    // The right value under a revision no write returned fails too.
    must_fail(&[
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::found("a", "r9"), 2, 3),
    ]);
}

#[test]
fn a_create_reporting_ok_while_the_key_was_present_fails() {
    let h = |put_done: u64| {
        vec![
            e(0, Op::put("a"), Outcome::written("r1"), 0, put_done),
            e(1, Op::create("b"), Outcome::written("r2"), 2, 3),
        ]
    };
    must_fail(&h(1));
    // Overlapping the put, the create may have gone first.
    must_pass(&h(5));
}

// ---- expiry

fn put_until(v: &str, until: u64) -> Op {
    Op::put_until(v.as_bytes().to_vec(), Some(until))
}

#[test]
fn an_entry_read_before_its_expiry_and_absent_after_passes() {
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::found("v", "r1"), 5, 6),
        e(1, Op::Get, Outcome::absent(), 20, 21),
        e(2, Op::create("w"), Outcome::written("r2"), 22, 23),
    ]);
}

#[test]
fn an_entry_read_after_its_expiry_fails() {
    must_fail(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::found("v", "r1"), 20, 21),
    ]);
}

#[test]
fn an_entry_absent_before_its_expiry_fails() {
    must_fail(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::absent(), 5, 6),
    ]);
}

#[test]
fn a_read_spanning_the_expiry_may_see_either() {
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::found("v", "r1"), 8, 12),
    ]);
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(1, Op::Get, Outcome::absent(), 8, 12),
    ]);
}

#[test]
fn an_unknown_put_landing_after_its_expiry_is_never_read() {
    // Applied before 10 it is read-able before 10 only; applied after, it leaves nothing.
    must_fail(&[
        e(0, put_until("v", 10), Outcome::Unknown, 0, 0),
        e(1, Op::Get, Outcome::absent(), 2, 3),
        e(1, Op::Get, Outcome::found("v", "q"), 20, 21),
    ]);
    must_pass(&[
        e(0, put_until("v", 10), Outcome::Unknown, 0, 0),
        e(1, Op::Get, Outcome::absent(), 2, 3),
        e(1, Op::Get, Outcome::found("v", "q"), 5, 6),
        e(1, Op::Get, Outcome::absent(), 20, 21),
    ]);
}

#[test]
fn a_put_applied_after_its_own_expiry_leaves_the_key_absent() {
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 50),
        e(1, Op::put("w"), Outcome::written("r2"), 20, 30),
        e(1, Op::create("x"), Outcome::written("r3"), 51, 60),
    ]);
}

#[test]
fn a_later_write_outlives_an_earlier_ones_expiry() {
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(0, Op::put("w"), Outcome::written("r2"), 2, 3),
        e(1, Op::Get, Outcome::found("w", "r2"), 20, 21),
    ]);
    // ... but not a create over a live entry that then reports it made one.
    must_fail(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(0, Op::create("w"), Outcome::written("r2"), 2, 3),
    ]);
    // An expired entry takes a create.
    must_pass(&[
        e(0, put_until("v", 10), Outcome::written("r1"), 0, 1),
        e(0, Op::create("w"), Outcome::written("r2"), 12, 13),
        e(1, Op::Get, Outcome::found("w", "r2"), 20, 21),
    ]);
}

#[test]
fn a_malformed_history_is_refused() {
    let v = check(&[e(0, Op::Get, Outcome::Deleted, 0, 1)]).unwrap_err();
    assert_eq!(v.kind, ViolationKind::Malformed, "{v}");
    let v = check(&[
        e(0, Op::put("a"), Outcome::written("r1"), 0, 1),
        e(0, Op::put("b"), Outcome::written("r1"), 2, 3),
    ])
    .unwrap_err();
    assert_eq!(v.kind, ViolationKind::Malformed, "{v}");
}

#[test]
fn keys_are_checked_apart() {
    let h = vec![
        Entry::new(0, "x", Op::put("a"), Outcome::written("r1"), 0, 1),
        Entry::new(0, "y", Op::Get, Outcome::absent(), 2, 3),
        Entry::new(1, "y", Op::put("b"), Outcome::written("r2"), 4, 5),
        Entry::new(1, "x", Op::Get, Outcome::found("a", "r1"), 6, 7),
    ];
    assert_eq!(must_pass(&h).keys, 2);
    let mut bad = h.clone();
    bad.push(Entry::new(2, "y", Op::Get, Outcome::absent(), 8, 9));
    assert_eq!(must_fail(&bad).key, "y");
}

#[test]
fn a_search_out_of_budget_is_inconclusive_not_a_hang() {
    // Many overlapping unknown puts and a read of a value none wrote: refuting it means
    // trying the subsets of the unknown puts.
    let mut h: Vec<Entry> = (0..24)
        .map(|i| {
            e(
                i,
                Op::put(format!("u{i}")),
                Outcome::Unknown,
                i as u64,
                NEVER,
            )
        })
        .collect();
    for i in 0..24u64 {
        h.push(e(
            30,
            Op::Get,
            Outcome::found(format!("u{i}"), format!("x{i}")),
            100 + 2 * i,
            101 + 2 * i,
        ));
    }
    h.push(e(31, Op::Get, Outcome::found("nobody", "x"), 200, 201));
    let options = Options {
        step_budget: 5_000,
        ..Options::default()
    };
    let report = check_with(&h, &options).expect("no violation within the budget");
    assert!(!report.is_conclusive(), "{report}");
    assert_eq!(report.inconclusive[0].key, "k");
    eprintln!("{report}");
}

// ---------------------------------------------------------------------------------------------
// Small random histories against brute force

/// Linearizability by enumeration, independent of the checker: every choice for each write of
/// unknown outcome (left out, or in with one of the revision names that a completed read
/// returned and no completed write did, or with a fresh one), then every order that keeps
/// real-time order. (Clients learn revisions only from completed ops, so no write stored a
/// revision that only a delete names.)
fn brute_force(h: &[Entry]) -> bool {
    let known: Vec<&Rev> = h
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Written(r) => Some(r),
            _ => None,
        })
        .collect();
    let mut names: Vec<Rev> = Vec::new();
    for e in h {
        let named = match &e.outcome {
            Outcome::Found(Some((_, r))) => Some(r),
            _ => None,
        };
        if let Some(r) = named
            && !known.contains(&r)
            && !names.contains(r)
        {
            names.push(r.clone());
        }
    }
    let unknown: Vec<usize> = (0..h.len())
        .filter(|&i| h[i].outcome == Outcome::Unknown && h[i].op != Op::Get)
        .collect();
    let mut choice: Vec<Option<Rev>> = vec![None; h.len()];
    assign(h, &unknown, &names, &mut choice)
}

fn assign(h: &[Entry], unknown: &[usize], names: &[Rev], choice: &mut [Option<Rev>]) -> bool {
    let Some((&i, rest)) = unknown.split_first() else {
        let ops: Vec<usize> = (0..h.len())
            .filter(|&i| h[i].outcome != Outcome::Unknown || choice[i].is_some())
            .collect();
        return orders(h, choice, &ops, None);
    };
    if assign(h, rest, names, choice) {
        return true;
    }
    let fresh = format!("fresh{i}");
    for name in names.iter().chain([&fresh]) {
        if choice.contains(&Some(name.clone())) {
            continue; // one revision, one write
        }
        choice[i] = Some(name.clone());
        let ok = assign(h, rest, names, choice);
        choice[i] = None;
        if ok {
            return true;
        }
    }
    false
}

fn orders(h: &[Entry], choice: &[Option<Rev>], left: &[usize], slot: Option<(Value, Rev)>) -> bool {
    if left.is_empty() {
        return true;
    }
    for (k, &i) in left.iter().enumerate() {
        // Not before an op that completed before it was invoked.
        if left.iter().any(|&j| h[j].complete < h[i].invoke) {
            continue;
        }
        let mut next = slot.clone();
        let rev = match (&h[i].outcome, &choice[i]) {
            (Outcome::Written(r), _) | (_, Some(r)) => r.clone(),
            _ => "never-written".to_string(),
        };
        let outcome = apply(&mut next, &h[i].op, || rev);
        if h[i].outcome != Outcome::Unknown && outcome != h[i].outcome {
            continue;
        }
        let mut rest = left.to_vec();
        rest.remove(k);
        if orders(h, choice, &rest, next) {
            return true;
        }
    }
    false
}

/// A few ops with random intervals, run in a random order that fits them, some outcomes
/// unknown, and two times in three one outcome replaced by a random one.
fn small_history(rng: &mut Rng) -> Vec<Entry> {
    let n = 2 + rng.below(6) as usize;
    let value = |rng: &mut Rng| if rng.below(2) == 0 { "a" } else { "b" };
    let mut ops = Vec::new();
    for i in 0..n {
        let op = match rng.below(6) {
            0 | 1 => Op::Get,
            2 => Op::put(value(rng)),
            3 => Op::cas(value(rng), value(rng)),
            4 => Op::delete(format!("r{}", rng.below(n as u64 + 1))),
            _ => Op::create(value(rng)),
        };
        let invoke = rng.below(20);
        let complete = invoke + rng.below(8);
        let unknown = rng.below(100) < 15;
        // Where it takes effect: within its interval, or any time after the invoke (or
        // never) when the outcome is unknown.
        let point = match unknown {
            false => Some(invoke + rng.below(complete - invoke + 1)),
            true if rng.below(2) == 0 => Some(invoke + rng.below(30)),
            true => None,
        };
        ops.push((op, invoke, complete, unknown, point, i));
    }
    let mut by_point: Vec<usize> = (0..n).filter(|&i| ops[i].4.is_some()).collect();
    by_point.sort_by_key(|&i| (ops[i].4, i));
    let mut slot = None;
    let mut outcomes = vec![Outcome::Unknown; n];
    for i in by_point {
        outcomes[i] = apply(&mut slot, &ops[i].0, || format!("r{i}"));
    }
    let mut h: Vec<Entry> = ops
        .iter()
        .zip(outcomes)
        .map(|((op, invoke, complete, unknown, _, i), outcome)| {
            let outcome = if *unknown { Outcome::Unknown } else { outcome };
            e(*i, op.clone(), outcome, *invoke, *complete)
        })
        .collect();
    if rng.below(3) != 0 {
        let i = rng.below(n as u64) as usize;
        if h[i].outcome != Outcome::Unknown {
            let written = Outcome::written(format!("m{i}"));
            let two = |rng: &mut Rng, a: Outcome, b: Outcome| if rng.below(2) == 0 { a } else { b };
            h[i].outcome = match &h[i].op {
                Op::Get if rng.below(3) == 0 => Outcome::absent(),
                Op::Get => {
                    let rev = match rng.below(n as u64 + 1) {
                        k if k < n as u64 => format!("r{k}"),
                        _ => "q".to_string(),
                    };
                    Outcome::found(value(rng), rev)
                }
                Op::Put(_) => written,
                Op::CompareAndSwap { .. } => two(rng, written, Outcome::Mismatch),
                Op::ConditionalDelete { .. } => two(rng, Outcome::Deleted, Outcome::Mismatch),
                Op::Create(_) => two(rng, written, Outcome::AlreadyExists),
                Op::PutUntil(..) | Op::CreateUntil(..) => unreachable!("no expiry here"),
            };
        }
    }
    h
}

#[test]
fn small_random_histories_agree_with_brute_force() {
    let mut rng = Rng(42);
    let (mut linearizable, mut not) = (0, 0);
    for round in 0..4000 {
        let h = small_history(&mut rng);
        let expected = brute_force(&h);
        let got = match check(&h) {
            Ok(report) => {
                assert!(report.is_conclusive(), "{report}");
                true
            }
            Err(v) => {
                assert_eq!(v.kind, ViolationKind::NotLinearizable, "{v}");
                false
            }
        };
        assert_eq!(
            got, expected,
            "round {round}: checker says {got}, brute force {expected}:\n{h:#?}"
        );
        if expected {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    eprintln!("{linearizable} linearizable, {not} not");
    assert!(linearizable > 1000 && not > 1000, "{linearizable} / {not}");
}

// ---------------------------------------------------------------------------------------------
// Generated histories

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

async fn yields(times: u64) {
    for _ in 0..times {
        tokio::task::yield_now().await;
    }
}

/// A register per key behind one mutex, optionally with a compare-and-swap that reads, yields,
/// then writes unconditionally outside the lock.
struct MemStore {
    map: Mutex<HashMap<String, (Value, Rev)>>,
    revs: AtomicU64,
    racy_cas: bool,
}

impl MemStore {
    fn fresh(&self) -> Rev {
        format!("r{}", self.revs.fetch_add(1, Ordering::Relaxed))
    }

    fn apply_now(&self, key: &str, op: &Op) -> Outcome {
        let mut map = self.map.lock().unwrap();
        let mut slot = map.remove(key);
        let outcome = apply(&mut slot, op, || self.fresh());
        if let Some(slot) = slot {
            map.insert(key.to_string(), slot);
        }
        outcome
    }

    async fn exec(&self, key: &str, op: &Op, pause: u64) -> Outcome {
        match op {
            Op::CompareAndSwap { expected, new } if self.racy_cas => {
                let current = self.map.lock().unwrap().get(key).map(|(v, _)| v.clone());
                if current.as_ref() != Some(expected) {
                    return Outcome::Mismatch;
                }
                yields(1 + pause).await;
                let rev = self.fresh();
                self.map
                    .lock()
                    .unwrap()
                    .insert(key.to_string(), (new.clone(), rev.clone()));
                Outcome::Written(rev)
            }
            _ => self.apply_now(key, op),
        }
    }
}

#[derive(Clone, Copy)]
struct Workload {
    seed: u64,
    clients: usize,
    ops_per_client: usize,
    keys: usize,
    /// Per mille of ops that end `Unknown` (applied now, later, or never).
    unknown_per_mille: u64,
    racy_cas: bool,
    multi_thread: bool,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        Workload {
            seed,
            clients: 16,
            ops_per_client: 300,
            keys: 4,
            unknown_per_mille: 0,
            racy_cas: false,
            multi_thread: false,
        }
    }

    fn run(self) -> Vec<Entry> {
        let runtime = if self.multi_thread {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread().build()
        }
        .unwrap();
        runtime.block_on(async move {
            let recorder = Arc::new(Recorder::new());
            let store = Arc::new(MemStore {
                map: Mutex::new(HashMap::new()),
                revs: AtomicU64::new(0),
                racy_cas: self.racy_cas,
            });
            let clients: Vec<_> = (0..self.clients)
                .map(|c| tokio::spawn(self.client(c, recorder.clone(), store.clone())))
                .collect();
            for client in clients {
                client.await.unwrap();
            }
            recorder.history()
        })
    }

    async fn client(self, client: usize, recorder: Arc<Recorder>, store: Arc<MemStore>) {
        let mut rng = Rng(self.seed.wrapping_mul(1_000_003) ^ (client as u64 + 1) << 32);
        let mut seen: HashMap<String, (Value, Rev)> = HashMap::new();
        let mut late = Vec::new();
        for i in 0..self.ops_per_client {
            let key = format!("key{}", rng.below(self.keys as u64));
            let fresh_value = format!("c{client}-{i}").into_bytes();
            let last = seen.get(&key).cloned();
            let op = match rng.below(100) {
                0..30 => Op::Get,
                30..45 => Op::Put(fresh_value.clone()),
                45..70 => {
                    let expected = match &last {
                        Some((v, _)) if rng.below(10) < 8 => v.clone(),
                        _ => format!("c{}-{}", rng.below(self.clients as u64), i).into_bytes(),
                    };
                    Op::CompareAndSwap {
                        expected,
                        new: fresh_value.clone(),
                    }
                }
                70..82 => Op::ConditionalDelete {
                    rev: last.map_or_else(|| "none".to_string(), |(_, r)| r),
                },
                _ => Op::Create(fresh_value.clone()),
            };
            yields(rng.below(3)).await;
            let token = recorder.invoke(client, key.clone(), op.clone());
            yields(rng.below(3)).await;
            let outcome = if rng.below(1000) < self.unknown_per_mille {
                match rng.below(3) {
                    0 => {}
                    1 => {
                        store.apply_now(&key, &op);
                    }
                    _ => {
                        let (store, key, op, pause) =
                            (store.clone(), key.clone(), op.clone(), 1 + rng.below(40));
                        late.push(tokio::spawn(async move {
                            yields(pause).await;
                            store.apply_now(&key, &op);
                        }));
                    }
                }
                Outcome::Unknown
            } else {
                store.exec(&key, &op, rng.below(3)).await
            };
            yields(rng.below(3)).await;
            recorder.complete(token, outcome.clone());
            match (&op, outcome) {
                (_, Outcome::Found(Some(found))) => {
                    seen.insert(key, found);
                }
                (_, Outcome::Found(None) | Outcome::Deleted) => {
                    seen.remove(&key);
                }
                (
                    Op::Put(v) | Op::Create(v) | Op::CompareAndSwap { new: v, .. },
                    Outcome::Written(r),
                ) => {
                    seen.insert(key, (v.clone(), r));
                }
                _ => {}
            }
        }
        for task in late {
            task.await.unwrap();
        }
    }
}

/// The largest number of ops of one key in flight at once.
fn max_in_flight(history: &[Entry]) -> usize {
    let mut events: Vec<(u64, i32, &str)> = Vec::new();
    for e in history {
        events.push((e.invoke, 1, &e.key));
        events.push((e.complete, -1, &e.key));
    }
    events.sort();
    let mut open: HashMap<&str, i32> = HashMap::new();
    let mut max = 0;
    for (_, delta, key) in events {
        let n = open.entry(key).or_default();
        *n += delta;
        max = max.max(*n);
    }
    max as usize
}

#[test]
fn a_correct_register_always_passes() {
    for seed in 0..4 {
        let mut w = Workload::new(seed);
        w.unknown_per_mille = if seed % 2 == 0 { 0 } else { 20 };
        w.multi_thread = seed >= 2;
        let history = w.run();
        assert_eq!(history.len(), 16 * 300);
        let report = must_pass(&history);
        eprintln!(
            "seed {seed} (multi_thread {}, {} in flight at most): {report}",
            w.multi_thread,
            max_in_flight(&history)
        );
    }
}

#[test]
fn a_racy_compare_and_swap_is_caught() {
    const ROUNDS: u64 = 20;
    let (mut found, mut inconclusive) = (0, 0);
    let mut example = None;
    let started = Instant::now();
    for seed in 0..ROUNDS {
        let mut w = Workload::new(seed);
        w.racy_cas = true;
        let history = w.run();
        match check(&history) {
            Err(v) => {
                assert_eq!(v.kind, ViolationKind::NotLinearizable, "{v}");
                found += 1;
                example.get_or_insert(v);
            }
            Ok(report) if !report.is_conclusive() => inconclusive += 1,
            Ok(_) => {}
        }
    }
    eprintln!(
        "racy CAS caught in {found} of {ROUNDS} rounds ({inconclusive} inconclusive) in {:.3?}",
        started.elapsed()
    );
    if let Some(v) = example {
        eprintln!("first violation found:\n{v}");
    }
    assert!(
        found >= ROUNDS - 1,
        "caught in only {found} of {ROUNDS} rounds"
    );
}

#[test]
fn sixteen_clients_on_one_key_are_checked_within_budget() {
    // Well over what this takes (under 0.2 s unoptimised, 2 cores shared with other builds).
    const BUDGET: Duration = Duration::from_secs(10);
    for unknown_per_mille in [0, 30] {
        let mut w = Workload::new(7);
        w.keys = 1;
        w.unknown_per_mille = unknown_per_mille;
        let history = w.run();
        let started = Instant::now();
        let options = Options {
            time_budget: BUDGET,
            ..Options::default()
        };
        let report = check_with(&history, &options).unwrap_or_else(|v| panic!("{v}"));
        let took = started.elapsed();
        eprintln!(
            "one key, {} ops, {} in flight at most: {report}",
            history.len(),
            max_in_flight(&history)
        );
        assert!(report.is_conclusive(), "{report}");
        assert!(took < BUDGET, "{took:?}");
    }
}
