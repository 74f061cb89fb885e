//! Ctrl-C and SIGTERM as the `dynacommit` binary handles them, on DynamoDB Local: an
//! interrupt cancels a wait for a dead holder's lease, a second one exits at once, and
//! SIGTERM releases a held lock as Ctrl-C does.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use dynacommit::lease::{DynamoLeaseTable, LeaseConfig, LeaseManager, LeaseTable};

/// The CLI on DynamoDB Local with throwaway keys, nothing else of AWS's.
fn dynacommit(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynacommit"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ENDPOINT_URL_DYNAMODB", common::dynamodb_url())
        .env("AWS_ACCESS_KEY_ID", "dynacommit")
        .env("AWS_SECRET_ACCESS_KEY", "dynacommitsecret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The lines of a child's stream, as they come, through a channel (so a test can wait
/// for one with an upper bound), and everything as one string at the end.
fn lines(stream: impl Read + Send + 'static) -> Receiver<String> {
    let (sender, receiver) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Waits up to `limit` for a line satisfying `wanted`, returning it and every line seen.
fn wait_for_line(
    lines: &Receiver<String>,
    limit: Duration,
    wanted: impl Fn(&str) -> bool,
) -> (Option<String>, Vec<String>) {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if wanted(&line) => return (Some(line), seen),
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    (None, seen)
}

fn signal(child: &Child, signal: libc::c_int) {
    // SAFETY: sends a signal to our own child, whose pid we hold and have not reaped.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill failed");
}

/// Waits up to `limit` for the child to exit; kills it and fails if it does not.
fn exit_within(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, Duration) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn drain(lines: &Receiver<String>) -> String {
    // The child has exited: its streams end, so the reader threads finish.
    lines.iter().collect::<Vec<_>>().join("\n")
}

/// A lease table on DynamoDB Local holding a dead writer's 20 s lease on version 0 of
/// `log`: whoever wants to create that version must wait 60 s (20 s x skew 3).
async fn dead_holder_on_version_0(log: &str) -> String {
    let table = common::unique_name("cli-dead");
    let leases = DynamoLeaseTable::new(common::dynamodb().await, &table);
    leases.ensure_table().await.unwrap();
    let manager = LeaseManager::new(
        Arc::new(leases),
        LeaseConfig::new(&table).with_timeout(Duration::from_secs(20)),
    )
    .unwrap();
    // Acquired and dropped without release or renewal: its holder is as good as dead.
    let _dead = manager
        .acquire(&format!("{log}/{:020}.json", 0), "*", || async {
            Ok::<(), std::convert::Infallible>(())
        })
        .await
        .unwrap();
    table
}

/// Starts a race that must wait on the dead holder, and returns it once it says so.
fn race_waiting_on_the_dead_holder(
    table: &str,
    log: &str,
) -> (Child, Receiver<String>, Receiver<String>) {
    let mut child = dynacommit(&[
        "race",
        "--writers",
        "2",
        "--commits",
        "1",
        "--table",
        table,
        "--store",
        "memory://",
        "--log",
        log,
        "--poll-ms",
        "50",
    ])
    .spawn()
    .unwrap();
    let stdout = lines(child.stdout.take().unwrap());
    let stderr = lines(child.stderr.take().unwrap());
    let path = format!("{log}/{:020}.json", 0);
    let prefix = format!("waiting for the lease on {path} (reclaimable in ~");
    let (waiting, seen) =
        wait_for_line(&stderr, Duration::from_secs(20), |l| l.starts_with(&prefix));
    let Some(waiting) = waiting else {
        let _ = child.kill();
        panic!("no waiting line within 20 s; stderr so far: {seen:?}");
    };
    // ~N s: what is left of 60 s after waiting one second or a little more.
    let seconds: u64 = waiting[prefix.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number of seconds in {waiting:?}"));
    assert!((45..=60).contains(&seconds), "{waiting}");
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("waiting for")).count(),
        0,
        "one line per record, not per writer: {seen:?}"
    );
    (child, stdout, stderr)
}

#[tokio::test]
async fn ctrl_c_cancels_a_race_waiting_on_a_dead_holders_lease() {
    let log = "cli-signals/_delta_log";
    let table = dead_holder_on_version_0(log).await;
    let (mut child, stdout, stderr) = race_waiting_on_the_dead_holder(&table, log);

    signal(&child, libc::SIGINT);
    let (status, took) = exit_within(&mut child, Duration::from_secs(10));
    let (stdout, stderr) = (drain(&stdout), drain(&stderr));
    assert!(
        took < Duration::from_secs(2),
        "took {took:?} after Ctrl-C\n{stdout}\n{stderr}"
    );
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    // Both writers were waiting; both were abandoned, and the log holds nothing.
    assert!(
        stdout.contains("abandoned 2 commit attempts"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("OK: nothing was committed"), "{stdout}");
}

#[tokio::test]
async fn a_second_ctrl_c_exits_at_once() {
    let log = "cli-signals-twice/_delta_log";
    let table = dead_holder_on_version_0(log).await;
    let (mut child, stdout, stderr) = race_waiting_on_the_dead_holder(&table, log);

    signal(&child, libc::SIGINT);
    let (first, seen) = wait_for_line(&stderr, Duration::from_secs(5), |l| {
        l.starts_with("interrupted: stopping the writers")
    });
    assert!(first.is_some(), "no word of the first interrupt: {seen:?}");
    // The first interrupt gives commits in flight half a second; the second one must not
    // wait for that, nor for the report.
    signal(&child, libc::SIGINT);
    let (status, took) = exit_within(&mut child, Duration::from_secs(10));
    let (stdout, stderr) = (drain(&stdout), drain(&stderr));
    assert_eq!(status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        stderr.contains("interrupted again: exiting now"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("versions committed"),
        "the second interrupt waited for the report: {stdout}"
    );
}

#[tokio::test]
async fn sigterm_releases_a_held_lock_and_the_next_holder_takes_it_at_once() {
    let table = common::unique_name("cli-sigterm");
    let hold = |value: &str, json: bool| {
        let mut args = vec![
            "lock",
            "hold",
            "leader",
            value,
            "--lock-table",
            &table,
            "--lease-ms",
            "20000",
        ];
        if json {
            args.push("--json");
        }
        let mut child = dynacommit(&args).spawn().unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        (child, stdout, stderr)
    };
    let (mut first, first_out, first_err) = hold("first:1", false);
    let (acquired, seen) = wait_for_line(&first_out, Duration::from_secs(30), |l| {
        l.starts_with("acquired leader")
    });
    assert!(acquired.is_some(), "{seen:?}");

    signal(&first, libc::SIGTERM);
    let (status, _) = exit_within(&mut first, Duration::from_secs(10));
    let (stdout, stderr) = (drain(&first_out), drain(&first_err));
    assert!(status.success(), "{status:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("released leader"), "{stdout}\n{stderr}");

    let locks = DynamoLeaseTable::new(common::dynamodb().await, &table);
    let record = locks
        .get("leader", dynacommit::lock::LOCK_ETAG)
        .await
        .unwrap()
        .expect("the lock record is there");
    assert!(record.released, "SIGTERM left the lock held: {record:?}");

    // Released, not left to expire: the next holder needs no 60 s (20 s x 3). It speaks
    // JSON lines when asked.
    let (mut second, second_out, _second_err) = hold("second:2", true);
    let (acquired, seen) = wait_for_line(&second_out, Duration::from_secs(5), |l| {
        l.contains(r#""event":"acquired""#)
    });
    signal(&second, libc::SIGTERM);
    let _ = exit_within(&mut second, Duration::from_secs(10));
    let acquired = acquired
        .unwrap_or_else(|| panic!("the second holder did not acquire within 5 s: {seen:?}"));
    let event: serde_json::Value = serde_json::from_str(&acquired).unwrap();
    assert!(
        event["fencing_token"].as_u64().unwrap() > record.generation,
        "{event} after {record:?}"
    );
    assert!(drain(&second_out).contains(r#""event":"released""#));
}
