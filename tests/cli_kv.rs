//! `dynacommit kv`, driven as a user would: on the embedded default (a file that outlives
//! each invocation) and on DynamoDB Local.

mod common;

use common::{local_dynamodb, text};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

/// The binary, started in `dir` with no AWS configuration but `env`.
fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = common::dynacommit_command();
    command.args(args).current_dir(dir);
    command.envs(env.iter().copied());
    command
}

fn dynacommit(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    command(dir, args, env).output().unwrap()
}

/// Runs a command that must succeed; its stdout.
fn ok(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = dynacommit(dir, args, env);
    assert!(
        out.status.success(),
        "{args:?} failed ({:?}): {}",
        out.status.code(),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs a command with `--json` that must succeed; its output, parsed.
fn ok_json(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let stdout = ok(dir, &args, env);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

/// Runs a command that must fail with `code`; its stderr.
fn fails(dir: &Path, args: &[&str], env: &[(&str, &str)], code: i32) -> String {
    let out = dynacommit(dir, args, env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    stderr
}

/// The output of `child` once it exits; killed, and the test failed with `why`, if it
/// has not within 30 s.
fn within(mut child: Child, why: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("{why} within 30 s: {}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `args` with `extra` appended.
fn with<'a>(args: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    args.iter().chain(extra).copied().collect()
}

/// Put, get, list, range and delete, each a separate invocation with `extra` flags (the
/// store must keep what the one before did).
fn round_trip(dir: &Path, extra: &[&str], env: &[(&str, &str)]) {
    let run = |args: &[&str]| ok(dir, &with(args, extra), env);
    let json = |args: &[&str]| ok_json(dir, &with(args, extra), env);
    run(&["kv", "put", "app/limits", "20"]);
    run(&["kv", "put", "app/owner", "ops"]);
    run(&["kv", "put", "app/db/host", "10.0.0.7"]);
    run(&["kv", "put", "zone", "eu"]);

    let got = run(&["kv", "get", "app/limits"]);
    assert!(got.contains("value     20"), "{got}");
    let got = json(&["kv", "get", "app/db/host"]);
    assert_eq!(got["value"], "10.0.0.7", "{got}");

    assert_eq!(run(&["kv", "list"]), "app/\nzone\n");
    assert_eq!(run(&["kv", "list", "app/"]), "db/\nlimits\nowner\n");
    let listed = json(&["kv", "list", "app/"]);
    assert_eq!(
        listed,
        serde_json::json!([
            {"name": "db/", "key": "app/db/", "folder": true},
            {"name": "limits", "key": "app/limits", "folder": false},
            {"name": "owner", "key": "app/owner", "folder": false},
        ])
    );

    // A prefix range crosses folders, in key order.
    let keys = |ranged: &Value| -> Vec<String> {
        ranged
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let ranged = json(&["kv", "range", "app/"]);
    assert_eq!(keys(&ranged), ["app/db/host", "app/limits", "app/owner"]);
    assert_eq!(ranged[1]["value"], "20");
    let bounded = json(&["kv", "range", "app/l", "app/p"]);
    assert_eq!(keys(&bounded), ["app/limits", "app/owner"]);
    let limited = dynacommit(
        dir,
        &with(&["kv", "range", "a", "--limit", "2"], extra),
        env,
    );
    assert!(limited.status.success(), "{}", text(&limited.stderr));
    assert_eq!(
        text(&limited.stdout).lines().count(),
        3,
        "a header and two rows"
    );
    assert!(
        text(&limited.stderr).contains("more entries not shown"),
        "{}",
        text(&limited.stderr)
    );

    let deleted = json(&["kv", "delete", "app/limits"]);
    assert_eq!(
        deleted,
        serde_json::json!({"key": "app/limits", "deleted": true})
    );
    let again = json(&["kv", "delete", "app/limits"]);
    assert_eq!(again["deleted"], false, "deleting a missing key succeeds");
    let missing = fails(dir, &with(&["kv", "get", "app/limits"], extra), env, 1);
    assert!(missing.contains("key `app/limits` not found"), "{missing}");
    assert_eq!(run(&["kv", "list", "app/"]), "db/\nowner\n");
    run(&["kv", "delete", "app/db/host"]);
    assert_eq!(run(&["kv", "list", "app/"]), "owner\n");
}

/// `--create` and `--if-revision` refuse with exit 1 and a sentence, and change nothing.
fn conditions(dir: &Path, extra: &[&str], env: &[(&str, &str)]) {
    let json = |args: &[&str]| ok_json(dir, &with(args, extra), env);
    let first = json(&["kv", "put", "cfg/mode", "a", "--create"]);
    let first_rev = first["revision"].as_str().unwrap().to_owned();
    let said = fails(
        dir,
        &with(&["kv", "put", "cfg/mode", "b", "--create"], extra),
        env,
        1,
    );
    assert!(said.contains("already exists"), "{said}");

    let second = json(&["kv", "put", "cfg/mode", "c", "--if-revision", &first_rev]);
    let second_rev = second["revision"].as_str().unwrap().to_owned();
    assert_ne!(first_rev, second_rev);
    // The first revision is stale now: both a write and a delete pinned to it refuse.
    let said = fails(
        dir,
        &with(
            &["kv", "put", "cfg/mode", "d", "--if-revision", &first_rev],
            extra,
        ),
        env,
        1,
    );
    assert!(
        said.contains(&format!("is not at revision {first_rev}")),
        "{said}"
    );
    let said = fails(
        dir,
        &with(
            &["kv", "delete", "cfg/mode", "--if-revision", &first_rev],
            extra,
        ),
        env,
        1,
    );
    assert!(said.contains("is not at revision"), "{said}");
    let got = json(&["kv", "get", "cfg/mode"]);
    assert_eq!(got["value"], "c");
    assert_eq!(got["revision"], second_rev.as_str());
    let gone = json(&["kv", "delete", "cfg/mode", "--if-revision", &second_rev]);
    assert_eq!(gone["deleted"], true);
}

/// JSON fields, expiry, and a binary value from a file coming back as base64.
fn json_and_binary(dir: &Path, extra: &[&str], env: &[(&str, &str)]) {
    let json = |args: &[&str]| ok_json(dir, &with(args, extra), env);
    let put = json(&["kv", "put", "node/a", "up", "--expires-in", "1h"]);
    let fields = |v: &Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(fields(&put), ["expires", "key", "revision"], "{put}");
    let expires = put["expires"].as_str().unwrap();
    assert!(expires.ends_with('Z') && expires.contains('T'), "{put}");
    let got = json(&["kv", "get", "node/a"]);
    assert_eq!(
        fields(&got),
        ["expires", "key", "revision", "value"],
        "{got}"
    );
    assert_eq!(got["expires"], put["expires"], "the store keeps the expiry");
    assert_eq!(got["revision"], put["revision"]);
    assert_eq!(got["value"], "up");
    let plain = json(&["kv", "put", "node/b", "up"]);
    assert_eq!(plain["expires"], Value::Null);

    let bytes: Vec<u8> = (0..=255u8).rev().chain([0, 0xff, b'\n']).collect();
    let file = dir.join("blob.bin");
    std::fs::write(&file, &bytes).unwrap();
    let file = file.to_str().unwrap();
    json(&["kv", "put", "blob", "--from-file", file]);
    let got = json(&["kv", "get", "blob"]);
    assert!(got.get("value").is_none(), "not text: {got}");
    let back = BASE64
        .decode(got["value_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(back, bytes);
    // In text, escaped.
    let shown = ok(dir, &with(&["kv", "get", "blob"], extra), env);
    assert!(shown.contains("\\xff\\xfe"), "{shown}");
}

#[test]
fn embedded_round_trip_keeps_the_keys_in_a_file_across_invocations() {
    let dir = tempfile::tempdir().unwrap();
    round_trip(dir.path(), &[], &[]);
    let file = dir.path().join(".dynacommit/kv.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["format"], "dynacommit-kv");
    assert_eq!(saved["entries"][0]["key"], "app/owner");

    // --kv-file and DYNACOMMIT_KV_FILE name another file.
    let other = dir.path().join("other.json");
    let other = other.to_str().unwrap();
    ok(
        dir.path(),
        &["kv", "put", "k", "v", "--kv-file", other],
        &[],
    );
    let got = ok_json(
        dir.path(),
        &["kv", "get", "k"],
        &[("DYNACOMMIT_KV_FILE", other)],
    );
    assert_eq!(got["value"], "v");
    fails(dir.path(), &["kv", "get", "k"], &[], 1);
}

#[test]
fn embedded_conditions_json_and_binary_values() {
    let dir = tempfile::tempdir().unwrap();
    conditions(dir.path(), &[], &[]);
    json_and_binary(dir.path(), &[], &[]);
}

/// Invocations at the same time take turns on the file: none loses another's write.
#[test]
fn concurrent_invocations_on_the_embedded_default_lose_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let writers: Vec<_> = (0..12)
        .map(|i| {
            let key = format!("w/{i:02}");
            command(dir.path(), &["kv", "put", &key, "x"], &[])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for writer in writers {
        let out = writer.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let listed = ok(dir.path(), &["kv", "list", "w/"], &[]);
    let expected: String = (0..12).map(|i| format!("{i:02}\n")).collect();
    assert_eq!(listed, expected);
}

#[test]
fn bad_input_exits_2_and_the_embedded_default_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (args, said) in [
        (&["kv", "put", "folder/", "x"][..], "may not end in `/`"),
        (
            &["kv", "put", "k", "x", "--expires-in", "30"],
            "has no unit",
        ),
        (
            &["kv", "put", "k", "--from-file", "no-such-file"],
            "--from-file",
        ),
        (
            &["kv", "put", "k", "x", "--create", "--if-revision", "r"],
            "cannot be used",
        ),
        (&["kv", "watch"], "kv watch needs DynamoDB"),
        (
            &["kv", "list", "--namespace", "n"],
            "--namespace has no effect",
        ),
        (
            &["kv", "get", "k", "--store", "memory://"],
            "--store has no effect",
        ),
        (&["kv", "get", "k", "--table", "t"], "--kv-table"),
    ] {
        let stderr = fails(d, args, &[], 2);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let big = d.join("big");
    std::fs::write(&big, vec![b'x'; 500 * 1024]).unwrap();
    let stderr = fails(
        d,
        &["kv", "put", "k", "--from-file", big.to_str().unwrap()],
        &[],
        2,
    );
    assert!(stderr.contains("bytes, over the"), "{stderr}");
    // A file that is not ours is not overwritten.
    std::fs::write(d.join("notes.json"), "[1, 2]").unwrap();
    let stderr = fails(
        d,
        &["kv", "put", "k", "v", "--kv-file", "notes.json"],
        &[],
        2,
    );
    assert!(
        stderr.contains("is not a dynacommit key-value file"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("notes.json")).unwrap(),
        "[1, 2]"
    );
}

#[test]
fn every_kv_command_has_help_with_an_example() {
    let dir = tempfile::tempdir().unwrap();
    for sub in [
        None,
        Some("get"),
        Some("put"),
        Some("delete"),
        Some("list"),
        Some("range"),
        Some("watch"),
    ] {
        let mut args = vec!["kv"];
        args.extend(sub);
        args.push("--help");
        let help = ok(dir.path(), &args, &[]);
        assert!(
            help.contains("Example") && help.contains("dynacommit kv "),
            "{args:?}: {help}"
        );
    }
}

#[tokio::test]
async fn round_trip_conditions_and_json_on_dynamodb_local() {
    common::dynamodb().await; // fails loudly if DynamoDB Local is down
    let url = common::dynamodb_url();
    let env = local_dynamodb(&url);
    let dir = tempfile::tempdir().unwrap();
    let table = common::unique_name("cli-kv");
    let extra = ["--kv-table", table.as_str()];
    round_trip(dir.path(), &extra, &env);
    conditions(dir.path(), &extra, &env);
    json_and_binary(dir.path(), &extra, &env);
    assert!(
        !dir.path().join(".dynacommit").exists(),
        "no local file when the keys are in DynamoDB"
    );

    // Namespaces keep stores apart in one table.
    let other = with(&extra, &["--namespace", "other"]);
    assert_eq!(ok(dir.path(), &with(&["kv", "list"], &other), &env), "");
    ok(
        dir.path(),
        &with(&["kv", "put", "zone", "us"], &other),
        &env,
    );
    let got = ok_json(dir.path(), &with(&["kv", "get", "zone"], &extra), &env);
    assert_eq!(got["value"], "eu");

    // The table named by the variable, and --kv-file refused while DynamoDB holds the keys.
    let mut by_var = env.to_vec();
    by_var.push(("DYNACOMMIT_KV_TABLE", table.as_str()));
    let got = ok_json(dir.path(), &["kv", "get", "zone"], &by_var);
    assert_eq!(got["value"], "eu");
    let said = fails(
        dir.path(),
        &["kv", "get", "zone", "--kv-file", "x.json"],
        &by_var,
        2,
    );
    assert!(said.contains("--kv-file has no effect"), "{said}");
}

/// A watch started first sees a put and a delete made by other invocations after its
/// ready line, as JSON lines, and stops after --count events.
#[tokio::test]
async fn watch_sees_changes_made_by_another_invocation_on_dynamodb_local() {
    common::dynamodb().await;
    let url = common::dynamodb_url();
    let env = local_dynamodb(&url);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let table = common::unique_name("cli-kv-watch");
    let extra = ["--kv-table", table.as_str()];
    // Create the table first (the watch would too), and a key outside the prefix.
    ok(d, &with(&["kv", "put", "before", "x"], &extra), &env);

    let mut watch = command(
        d,
        &with(&["kv", "watch", "cfg/", "--json", "--count", "2"], &extra),
        &env,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> Value {
        let line = received
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no {what} line from the watch within 30 s: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let ready = next("ready");
    assert_eq!(ready["kind"], "ready", "{ready}");
    assert!(
        ready["checkpoint"]
            .as_str()
            .unwrap()
            .starts_with("dynamodb:")
    );

    ok(d, &with(&["kv", "put", "other/k", "ignored"], &extra), &env);
    let put = ok_json(d, &with(&["kv", "put", "cfg/a", "1"], &extra), &env);
    ok(d, &with(&["kv", "delete", "cfg/a"], &extra), &env);

    let seen = next("put");
    assert_eq!(seen["kind"], "put", "{seen}");
    assert_eq!(seen["key"], "cfg/a");
    assert_eq!(seen["value"], "1");
    assert_eq!(seen["revision"], put["revision"]);
    assert_eq!(seen["expires"], Value::Null);
    assert!(seen["checkpoint"].is_string(), "{seen}");
    let deleted = next("deleted");
    assert_eq!(deleted["kind"], "deleted", "{deleted}");
    assert_eq!(deleted["key"], "cfg/a");

    let out = within(watch, "the watch did not stop after --count 2");
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );

    // Resuming after the put's checkpoint replays the delete.
    let resume = command(
        d,
        &with(
            &[
                "kv",
                "watch",
                "cfg/",
                "--json",
                "--count",
                "1",
                "--from",
                seen["checkpoint"].as_str().unwrap(),
            ],
            &extra,
        ),
        &env,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let out = within(resume, "the resumed watch did not replay the delete");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resumed = text(&out.stdout);
    let events: Vec<Value> = resumed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{resumed}");
    assert_eq!(events[1]["kind"], "deleted", "{resumed}");
    assert_eq!(events[1]["key"], "cfg/a");
}
