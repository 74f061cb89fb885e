//! The `dynacommit` binary, driven as a user would.

mod common;

use std::process::{Command, Output};

fn dynacommit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynacommit"));
    command.args(args);
    // Start from no AWS configuration, so the embedded default is what runs unless a test
    // says otherwise.
    for var in [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "DYNACOMMIT_STORE",
        "DYNACOMMIT_LEASE_TABLE",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn race_on_the_embedded_default_says_so_and_proves_the_log() {
    let out = dynacommit(&["race", "--writers", "6", "--commits", "10"], &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line about the embedded default: {stderr}"
    );
    assert!(stderr.starts_with("embedded default:"), "{stderr}");
    assert!(stdout.contains("versions committed  60 of 60"), "{stdout}");
    assert!(stdout.contains("duplicates found    0"), "{stdout}");
    assert!(stdout.contains("OK: every version"), "{stdout}");
}

#[test]
fn race_json_is_machine_readable() {
    let out = dynacommit(&["race", "--writers", "3", "--commits", "4", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["versions"], 12);
    assert_eq!(report["duplicates"], serde_json::json!([]));
    assert_eq!(report["ok"], true);
    assert!(out.stderr.is_empty(), "JSON mode prints nothing else");
}

/// `bench --json` reports every scenario, each ratio is its two p50s' quotient, a create
/// through the wrapper (lease, HEAD, put, release) costs more than a bare put, and a
/// passthrough operation costs about what the bare store's does (a passthrough ten times
/// slower than bare is doing something it should not). The bench itself exits non-zero
/// when a scenario's check fails (a fresh path taken, a listing short).
#[test]
fn bench_on_the_embedded_default_reports_every_scenario_with_consistent_ratios() {
    let out = dynacommit(&["bench", "--ops", "20", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = report
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "copy-if-not-exists p50 ms",
            "create (bare: unconditional put)",
            "delete then re-create round p50 ms",
            "get (passthrough)",
            "list (passthrough)",
            "put (passthrough)",
        ],
        "{report}"
    );
    let row = |op: &str| {
        let field = |name: &str| {
            let value = report[op][name].as_f64();
            value
                .filter(|v| v.is_finite() && *v > 0.0)
                .unwrap_or_else(|| panic!("{op}: {name} is {value:?}: {report}"))
        };
        let (ours, bare, ratio) = (
            field("dynacommit_p50_ms"),
            field("bare_p50_ms"),
            field("ratio"),
        );
        assert!(
            (ratio - ours / bare).abs() <= 1e-9 * ratio,
            "{op}: ratio {ratio} is not {ours} / {bare}"
        );
        ratio
    };
    let create = row("create (bare: unconditional put)");
    assert!(
        create > 1.0,
        "a create through a lease cost less than a bare put ({create}): {report}"
    );
    for op in [
        "put (passthrough)",
        "get (passthrough)",
        "list (passthrough)",
    ] {
        let ratio = row(op);
        assert!(ratio < 10.0, "{op}: {ratio} x bare: {report}");
    }
    for op in [
        "delete then re-create round p50 ms",
        "copy-if-not-exists p50 ms",
    ] {
        let p50 = report[op].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 < 1_000.0, "{op}: {p50}: {report}");
    }
}

#[test]
fn ctrl_c_stops_a_race_cleanly_and_checks_the_log_so_far() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_dynacommit"))
        .args(["race", "--writers", "4", "--commits", "100000"])
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_REGION")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line on stderr comes after the Ctrl-C handler is in place.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.starts_with("embedded default"), "{first}");
    // SAFETY: sends SIGINT to our own child, whose pid we hold.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("interrupted after"), "{stdout}");
    assert!(stdout.contains("duplicates found    0"), "{stdout}");
    assert!(stdout.contains("OK:"), "{stdout}");
}

#[test]
fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    let out = dynacommit(&["race", "--store", "ftp://nowhere"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown scheme \"ftp\""), "{stderr}");

    let out = dynacommit(&["race", "--writers", "0"], &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--writers"));

    let out = dynacommit(&["table", "describe"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no DynamoDB configured"));
}

#[tokio::test]
async fn race_and_table_against_dynamodb_local_and_s3rver() {
    common::dynamodb().await; // fails loudly if DynamoDB Local is down
    let bucket = common::s3::S3Server::S3rver.fresh_bucket().await;
    let table = common::unique_name("cli");
    let dynamodb = common::dynamodb_url();
    let s3 = common::s3::S3Server::S3rver.url();
    let env = [
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str()),
        ("AWS_ENDPOINT_URL_S3", s3.as_str()),
        ("AWS_ACCESS_KEY_ID", "S3RVER"),
        ("AWS_SECRET_ACCESS_KEY", "S3RVER"),
        ("AWS_REGION", "us-east-1"),
    ];
    let created = dynacommit(&["table", "create", "--table", &table], &env);
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert!(text(&created.stdout).contains("created the table"));
    let again = dynacommit(&["table", "create", "--table", &table], &env);
    assert!(
        text(&again.stdout).contains("nothing to do"),
        "{}",
        text(&again.stdout)
    );

    let store = format!("s3://{bucket}/cli");
    let raced = dynacommit(
        &[
            "race",
            "--writers",
            "4",
            "--commits",
            "5",
            "--table",
            &table,
            "--store",
            &store,
            "--json",
        ],
        &env,
    );
    assert!(raced.status.success(), "{}", text(&raced.stderr));
    let report: serde_json::Value = serde_json::from_slice(&raced.stdout).unwrap();
    assert_eq!(report["versions"], 20);
    assert_eq!(report["ok"], true);
}

#[tokio::test]
async fn lease_list_show_and_break_on_dynamodb_local() {
    common::dynamodb().await;
    let table = common::unique_name("cli-lease");
    let dynamodb = common::dynamodb_url();
    let env = [
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str()),
        ("AWS_ACCESS_KEY_ID", "dynacommit"),
        ("AWS_SECRET_ACCESS_KEY", "dynacommitsecret"),
    ];
    // Leave a lease behind: hold a lock record in the lease table, then kill nothing;
    // a lease record written by the library is as good as any.
    let leases = dynacommit::lease::DynamoLeaseTable::new(common::dynamodb().await, &table);
    leases.ensure_table().await.unwrap();
    let manager = dynacommit::lease::LeaseManager::new(
        std::sync::Arc::new(leases),
        dynacommit::lease::LeaseConfig::new(&table),
    )
    .unwrap();
    for path in ["logs/a.json", "logs/b.json", "other/c.json"] {
        manager
            .acquire(path, "*", || async {
                Ok::<(), std::convert::Infallible>(())
            })
            .await
            .unwrap();
    }

    let listed = dynacommit(
        &["lease", "list", "logs/", "--table", &table, "--json"],
        &env,
    );
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let records: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let paths: Vec<&str> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["logs/a.json", "logs/b.json"]);

    let shown = dynacommit(&["lease", "show", "other/c.json", "--table", &table], &env);
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("other/c.json") && shown.contains("held or expired"),
        "{shown}"
    );

    let refused = dynacommit(&["lease", "break", "logs/a.json", "--table", &table], &env);
    assert_eq!(refused.status.code(), Some(2));
    let said = text(&refused.stdout);
    assert!(
        said.contains("logs/a.json") && said.contains("two winners"),
        "{said}"
    );
    assert!(text(&refused.stderr).contains("refusing without --force"));

    let broken = dynacommit(
        &[
            "lease",
            "break",
            "logs/a.json",
            "--table",
            &table,
            "--force",
        ],
        &env,
    );
    assert!(broken.status.success());
    assert!(text(&broken.stdout).contains("1 of 1 records released"));
    // Broken leases are released at the next generation, not deleted: generations (lock
    // fencing tokens) never go back.
    let after = dynacommit(
        &["lease", "show", "logs/a.json", "--table", &table, "--json"],
        &env,
    );
    let records: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    let broken = &records.as_array().unwrap()[0];
    assert_eq!(broken["released"], true, "{broken}");
    assert_eq!(broken["generation"], 1, "{broken}");
}
