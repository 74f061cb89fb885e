//! The Iceberg-style pointer race (`dynacommit::race::pointer`): writers swap one pointer
//! object to their new metadata files with `PutMode::Update` on the ETag they read. Through
//! CommitStore on s3rver (which ignores `If-Match`) with DynamoDB Local, and on the
//! embedded default, the chain behind the final pointer holds every acknowledged swap; on
//! bare s3rver, concurrent swaps overwrite each other and the check finds the lost ones.

mod common;

use common::text;
use std::process::{Command, Output};
use std::sync::Arc;

use common::s3::S3Server;
use dynacommit::CommitStore;
use dynacommit::race::StoreWriter;
use dynacommit::race::pointer::{self, PointerReport, PointerWriter};
use object_store::ObjectStore;
use object_store::aws::S3ConditionalPut;
use object_store::memory::InMemory;
use object_store::path::Path;

const WRITERS: usize = 8;
const SWAPS: usize = 20;

/// `WRITERS` writers spread over `stores` (processes) in turn.
fn writers(stores: &[Arc<dyn ObjectStore>]) -> Vec<Arc<dyn PointerWriter>> {
    (0..WRITERS)
        .map(|i| Arc::new(StoreWriter(stores[i % stores.len()].clone())) as Arc<dyn PointerWriter>)
        .collect()
}

fn summary(report: &PointerReport) -> String {
    format!(
        "{} writers x {} swaps: {} acknowledged, chain {}, {} lost, {} double references, \
         {} retries, {} torn reads, {:.2} s (broken: {:?})",
        report.writers,
        report.swaps_per_writer,
        report.acknowledged.len(),
        report.chain.len(),
        report.lost.len(),
        report.double_references.len(),
        report.retries,
        report.torn_reads,
        report.elapsed.as_secs_f64(),
        report.broken
    )
}

fn assert_clean(report: &PointerReport) {
    let said = summary(report);
    eprintln!("{said}");
    assert_eq!(report.acknowledged.len(), WRITERS * SWAPS, "{said}");
    assert_eq!(report.chain.len(), WRITERS * SWAPS, "{said}");
    assert!(report.lost.is_empty(), "{said}: {:?}", report.lost);
    assert!(report.double_references.is_empty(), "{said}");
    assert_eq!(report.broken, None, "{said}");
    assert!(report.is_clean(), "{said}");
    // The writers really raced: some found the pointer moved under them and retried.
    assert!(report.retries > 0, "no writer ever collided: {said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_twenty_swaps_each_through_commit_store_on_s3rver_lose_none() {
    let inner: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    // Four processes of two writers each: races within a process meet in its manager's
    // queue, races between processes in the table.
    let processes = common::processes(&inner, &common::dynamo_leases().await, 4);
    let report = pointer::run(
        writers(&processes),
        inner,
        &Path::from("table"),
        SWAPS,
        None,
    )
    .await
    .unwrap();
    assert_clean(&report);
    // s3rver names bytes by their MD5: every read was checked against its ETag.
    assert!(report.digest_etags, "{}", summary(&report));
}

/// The protection off: the same race straight on s3rver, which ignores `If-Match` (and
/// `If-None-Match`), so every swap is acknowledged, and one made on a pointer that moved
/// since it was read overwrites the swap that moved it, dropping that swap (and whatever
/// was built on it since) out of the chain.
///
/// Sizing: a bare run is clean only if no writer's read-create-swap (three requests, a few
/// milliseconds on s3rver) ever overlaps another's swap, across all 160 swaps. The 8
/// writers start together, so at the first step alone all 8 read the absent pointer and
/// all 8 create it; in our runs (see the figures printed) every bare race lost about half
/// of its swaps, so a clean one is not a matter of luck.
///
/// Concurrent plain PUTs of one key on s3rver can also interleave into an object that is
/// neither (`...7-8.jsonn`): then the pointer names no metadata file, the writers stop, and
/// the check says the chain is broken; every swap acknowledged before is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_s3rver_loses_swaps_in_the_same_race() {
    let inner: Arc<dyn ObjectStore> = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    let report = pointer::run(
        writers(std::slice::from_ref(&inner)),
        inner.clone(),
        &Path::from("table"),
        SWAPS,
        None,
    )
    .await
    .unwrap();
    let said = summary(&report);
    eprintln!("{said}");
    assert!(!report.is_clean(), "{said}");
    assert!(!report.lost.is_empty(), "no swap lost: {said}");
    assert_eq!(
        report.chain.len() + report.lost.len(),
        report.acknowledged.len(),
        "the chain holds exactly the swaps not lost: {said}"
    );
    match &report.broken {
        // The race ran to the end, and the chain is whole, just short: some target was
        // replaced twice, which is where swaps dropped out.
        None => {
            assert_eq!(report.acknowledged.len(), WRITERS * SWAPS, "{said}");
            assert!(!report.double_references.is_empty(), "{said}");
        }
        // The pointer was corrupted by interleaved PUTs: nothing is left.
        Some(why) => {
            assert!(why.contains("POINTER"), "{said}");
            assert!(report.chain.is_empty(), "{said}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_twenty_swaps_each_on_the_embedded_default_lose_none() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store: Arc<dyn ObjectStore> =
        Arc::new(CommitStore::new(inner.clone(), common::memory_leases()));
    // One process, as the embedded default is: every race meets in its manager's queue.
    let report = pointer::run(writers(&[store]), inner, &Path::from("table"), SWAPS, None)
        .await
        .unwrap();
    assert_clean(&report);
}

fn dynacommit(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynacommit"));
    command.args(args);
    // The embedded default, whatever the environment points at.
    for var in [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "DYNACOMMIT_STORE",
        "DYNACOMMIT_LEASE_TABLE",
    ] {
        command.env_remove(var);
    }
    command.output().unwrap()
}

/// `dynacommit race --mode pointer` on the embedded default: clean through the leases,
/// FAILED (exit 1) with lost swaps when `--unprotected`, and `--log` refused (exit 2).
#[test]
fn the_cli_races_the_pointer_and_refuses_the_log_flag() {
    let out = dynacommit(&[
        "race",
        "--mode",
        "pointer",
        "--writers",
        "8",
        "--commits",
        "20",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("swaps acknowledged  160 of 160"),
        "{stdout}"
    );
    assert!(stdout.contains("chain length        160"), "{stdout}");
    assert!(stdout.contains("lost swaps          0"), "{stdout}");
    assert!(stdout.contains("OK: the chain"), "{stdout}");

    let out = dynacommit(&[
        "race",
        "--mode",
        "pointer",
        "--unprotected",
        "--writers",
        "8",
        "--commits",
        "20",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["mode"], "pointer", "{report}");
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["acknowledged"], 160, "{report}");
    let lost = report["lost"].as_array().map_or(0, Vec::len);
    assert!(lost > 0, "every swap acknowledged, yet none lost: {report}");
    assert_eq!(
        report["chain_length"].as_u64().unwrap() + lost as u64,
        160,
        "{report}"
    );

    let out = dynacommit(&["race", "--mode", "pointer", "--log", "lake/_delta_log"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--log has no effect on `dynacommit race --mode pointer`"),
        "{}",
        text(&out.stderr)
    );

    let help = text(&dynacommit(&["race", "--help"]).stdout);
    assert!(help.contains("dynacommit race --mode pointer"), "{help}");
}
