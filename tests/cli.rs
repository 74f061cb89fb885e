//! The `dynacommit` binary, driven as a user would.

mod common;

use common::{local_dynamodb, text};
use std::process::{Command, Output};

fn dynacommit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = common::dynacommit_command();
    command.args(args);
    command.envs(env.iter().copied());
    command.output().unwrap()
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
/// when a scenario's check fails (a fresh path taken, a listing short, a race that lost a
/// commit). The log race and the scale scenario report every commit they were sized for,
/// at least one DynamoDB write each.
#[test]
fn bench_on_the_embedded_default_reports_every_scenario_with_consistent_ratios() {
    let out = dynacommit(
        &[
            "bench",
            "--ops",
            "20",
            "--race-writers",
            "4",
            "--race-commits",
            "5",
            "--scale-logs",
            "3",
            "--scale-writers",
            "2",
            "--scale-commits",
            "4",
            "--json",
        ],
        &[],
    );
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
            "copy_if_not_exists_p50_ms",
            "create",
            "delete_then_recreate_round_p50_ms",
            "get",
            "list",
            "log_race",
            "put",
            "scale",
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
    let create = row("create");
    assert!(
        create > 1.0,
        "a create through a lease cost less than a bare put ({create}): {report}"
    );
    for op in ["put", "get", "list"] {
        let ratio = row(op);
        assert!(ratio < 10.0, "{op}: {ratio} x bare: {report}");
    }
    for op in [
        "delete_then_recreate_round_p50_ms",
        "copy_if_not_exists_p50_ms",
    ] {
        let p50 = report[op].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 < 1_000.0, "{op}: {p50}: {report}");
    }
    let race = &report["log_race"];
    assert_eq!(race["writers"], 4, "{report}");
    assert_eq!(race["commits"], 20, "{report}");
    let positive = |v: &serde_json::Value| v.as_f64().is_some_and(|v| v.is_finite() && v > 0.0);
    assert!(positive(&race["commits_per_s"]), "{report}");
    assert!(
        race["dynamodb_writes_per_commit"].as_f64() >= Some(1.0),
        "a commit takes a lease: {report}"
    );
    let scale = &report["scale"];
    assert_eq!(scale["writers"], 6, "{report}");
    assert_eq!(scale["commits"], 24, "{report}");
    for field in [
        "commits_per_s",
        "dynamodb_requests_per_commit",
        "cpu_ms_per_commit",
    ] {
        assert!(positive(&scale[field]), "scale {field}: {report}");
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
    let env = local_dynamodb(&dynamodb);
    // Leave a lease behind: hold a lock record in the lease table, then kill nothing;
    // a lease record written by the library is as good as any.
    let leases = dynacommit::lease::DynamoLeaseTable::new(common::dynamodb().await, &table);
    leases.ensure_table().await.unwrap();
    let manager = dynacommit::lease::LeaseManager::new(
        std::sync::Arc::new(leases),
        dynacommit::lease::LeaseConfig::new(&table),
    )
    .unwrap();
    let mut first_generation = 0;
    for path in ["logs/a.json", "logs/b.json", "other/c.json"] {
        let lease = manager
            .acquire(path, "*", || async {
                Ok::<(), std::convert::Infallible>(())
            })
            .await
            .unwrap();
        if path == "logs/a.json" {
            first_generation = lease.generation();
        }
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
    // Who holds it, and whether it still renews: this process, written moments ago.
    assert!(
        shown.contains("other/c.json")
            && shown.contains("held, renewed 0 s ago")
            && shown.contains(&format!(" pid {} since", std::process::id())),
        "{shown}"
    );

    // Capped listings read no further than needed, and say more remain.
    let capped = dynacommit(
        &["lease", "list", "--table", &table, "--limit", "2", "--json"],
        &env,
    );
    assert!(capped.status.success(), "{}", text(&capped.stderr));
    let capped_records: serde_json::Value = serde_json::from_slice(&capped.stdout).unwrap();
    assert_eq!(capped_records.as_array().unwrap().len(), 2);
    assert!(
        text(&capped.stderr).contains("more records not shown"),
        "{}",
        text(&capped.stderr)
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
    assert_eq!(broken["generation"], first_generation + 1, "{broken}");

    // A released record needs no break, and gets no warning.
    let again = dynacommit(&["lease", "break", "logs/a.json", "--table", &table], &env);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let said = text(&again.stdout);
    assert!(
        said.contains("released already") && !said.contains("two winners"),
        "{said}"
    );
}

/// `scripts/services.sh env`, as (name, value) pairs.
fn services_env() -> Vec<(String, String)> {
    let out = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services.sh"))
        .arg("env")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter_map(|line| {
            let (name, value) = line.strip_prefix("export ")?.split_once('=')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// Runs the CLI with exactly `vars` (and PATH) in its environment.
fn dynacommit_with_only(args: &[&str], vars: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dynacommit"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

/// `eval "$(scripts/services.sh env)"` is all the CLI needs to run on the local services:
/// the variables it reads are printed, point where the tests' do, and work.
#[tokio::test]
async fn services_env_points_the_cli_at_the_local_services() {
    let vars = services_env();
    let get = |name: &str| {
        vars.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("services.sh env does not print {name}: {vars:?}"))
    };
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "DYNACOMMIT_TEST_SEAWEEDFS",
        "DYNACOMMIT_TEST_BUCKET",
    ] {
        get(name);
    }
    assert_eq!(
        get("AWS_ENDPOINT_URL_DYNAMODB"),
        get("DYNACOMMIT_TEST_DYNAMODB")
    );
    assert_eq!(get("AWS_ENDPOINT_URL_S3"), get("DYNACOMMIT_TEST_S3RVER"));
    for (name, value) in &vars {
        if value.starts_with("http") {
            assert!(value.starts_with("http://127.0.0.1:"), "{name}={value}");
        }
    }

    common::dynamodb().await;
    let bucket = common::s3::S3Server::S3rver.fresh_bucket().await;
    let table = common::unique_name("cli-env");
    let store = format!("s3://{bucket}/lake");
    let out = dynacommit_with_only(
        &[
            "race",
            "--writers",
            "3",
            "--commits",
            "4",
            "--table",
            &table,
            "--store",
            &store,
        ],
        &vars,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let dynamodb = get("AWS_ENDPOINT_URL_DYNAMODB");
    assert!(
        stderr.contains(&format!("DynamoDB table {table} at {dynamodb}")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("s3://{bucket}/lake")), "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");
    assert!(stdout.contains("versions committed  12 of 12"), "{stdout}");
}

/// An S3 store shared with other processes, but leases only in this one: said loudly, in
/// JSON mode too; not said once the leases are in DynamoDB.
#[tokio::test]
async fn an_s3_store_with_in_process_leases_gets_a_loud_warning() {
    let bucket = common::s3::S3Server::S3rver.fresh_bucket().await;
    let s3 = common::s3::S3Server::S3rver.url();
    let store = format!("s3://{bucket}/warned");
    let env = [
        ("AWS_ENDPOINT_URL_S3", s3.as_str()),
        ("AWS_ACCESS_KEY_ID", "S3RVER"),
        ("AWS_SECRET_ACCESS_KEY", "S3RVER"),
    ];
    for json in [false, true] {
        let mut args = vec![
            "race",
            "--writers",
            "2",
            "--commits",
            "2",
            "--store",
            &store,
        ];
        if json {
            args.push("--json");
        }
        let out = dynacommit(&args, &env);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("WARNING: --store {store} is shared"))
                && stderr.contains("NOT coordinated"),
            "json {json}: {stderr}"
        );
    }

    common::dynamodb().await;
    let dynamodb = common::dynamodb_url();
    let table = common::unique_name("cli-warn");
    let mut env = env.to_vec();
    env.push(("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str()));
    let out = dynacommit(
        &[
            "race",
            "--writers",
            "2",
            "--commits",
            "2",
            "--store",
            &store,
            "--table",
            &table,
        ],
        &env,
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("WARNING"), "{stderr}");
}

/// A loopback listener standing in for every proxy: anything the CLI sends towards AWS
/// arrives here (as a CONNECT) instead of leaving the machine.
fn proxy_trap() -> (std::net::TcpListener, Vec<(&'static str, String)>) {
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", trap.local_addr().unwrap());
    let env = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
    ]
    .map(|name| (name, url.clone()))
    .into_iter()
    .chain([
        ("NO_PROXY", String::new()),
        ("AWS_REGION", "eu-west-1".into()),
        ("AWS_ACCESS_KEY_ID", "AKIDTRAPPED".into()),
        ("AWS_SECRET_ACCESS_KEY", "trapped".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ])
    .collect();
    (trap, env)
}

/// AWS_REGION is set on many machines for other tools: alone it must not send leases to
/// AWS (nor create a table there). Only an explicit --dynamodb (or --table, or an
/// endpoint) does, and then the CLI checks for the table instead of creating it.
#[test]
fn aws_region_alone_keeps_the_embedded_default_and_contacts_nothing() {
    let (trap, env) = proxy_trap();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = dynacommit(&["race", "--writers", "2", "--commits", "3"], &env);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.starts_with("embedded default:"), "{stderr}");
    assert!(
        stderr.contains("AWS_REGION is set, but no DynamoDB was asked for"),
        "{stderr}"
    );
    trap.set_nonblocking(true).unwrap();
    match trap.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the CLI contacted something: {other:?}"),
    }

    // The control: asked for AWS's DynamoDB, it does go there (into the trap), and only
    // to check the table: it gives up saying so, not having created anything.
    trap.set_nonblocking(false).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_dynacommit"))
        .args(["race", "--dynamodb", "--writers", "1", "--commits", "1"])
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("DYNACOMMIT_LEASE_TABLE")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut connection, _) = trap.accept().unwrap();
    connection
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut request = [0u8; 256];
    let n = std::io::Read::read(&mut connection, &mut request).unwrap();
    drop(connection);
    let request = text(&request[..n]);
    assert!(
        request.starts_with("CONNECT dynamodb.eu-west-1.amazonaws.com:443"),
        "{request}"
    );
    drop(trap); // later attempts are refused at once
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "unreachable is a failure: {stderr}"
    );
    assert!(
        stderr.contains("cannot check the table dynacommit_leases"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("trapped"),
        "a secret was printed: {stderr}"
    );
}

/// The race proves every version from 0 was won once by its own writers, so a log with
/// versions in it is refused up front, naming the flag, instead of reporting them lost.
#[test]
fn race_refuses_a_log_that_already_has_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", dir.path().display());
    let args = [
        "race",
        "--writers",
        "2",
        "--commits",
        "3",
        "--store",
        &store,
        "--log",
        "lake/_delta_log",
    ];
    let first = dynacommit(&args, &[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let again = dynacommit(&args, &[]);
    let (stdout, stderr) = (text(&again.stdout), text(&again.stderr));
    assert_eq!(again.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("--log lake/_delta_log already holds versions")
            && stderr.contains("give a new --log path"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "no report for a refused log: {stdout}");
}

/// Lease settings: flags, then the environment (the README's Configuration), then the
/// defaults. The records the CLI writes carry the timeout it used.
#[tokio::test]
async fn lease_settings_come_from_flags_then_the_environment_then_defaults() {
    common::dynamodb().await;
    let table = common::unique_name("cli-config");
    let dynamodb = common::dynamodb_url();
    let base = local_dynamodb(&dynamodb);
    let with_timeout = |ms: &'static str| {
        let mut env = base.to_vec();
        env.push(("DYNACOMMIT_LEASE_TIMEOUT_MS", ms));
        env
    };
    let race = |table_flag: &str, log: &str, env: &[(&str, &str)]| {
        let log = format!("{log}/_delta_log");
        let out = dynacommit(
            &[
                "race",
                "--writers",
                "2",
                "--commits",
                "2",
                "--store",
                "memory://",
                "--table",
                table_flag,
                "--log",
                &log,
            ],
            env,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    let timeouts = |prefix: &str| -> Vec<u64> {
        let out = dynacommit(
            &["lease", "list", prefix, "--table", &table, "--json"],
            &base,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let records: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let timeouts: Vec<u64> = records
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["timeout_ms"].as_u64().unwrap())
            .collect();
        assert!(timeouts.len() >= 4, "{records}");
        timeouts
    };

    let said = race(&table, "from-env", &with_timeout("7000"));
    assert!(said.contains("lease timeout 7000 ms"), "{said}");
    assert!(timeouts("from-env/").iter().all(|&t| t == 7000));

    let with_flag = format!("{table}:9000");
    let said = race(&with_flag, "from-flag", &with_timeout("7000"));
    assert!(said.contains("lease timeout 9000 ms"), "{said}");
    assert!(timeouts("from-flag/").iter().all(|&t| t == 9000));

    race(&table, "default", &base);
    assert!(timeouts("default/").iter().all(|&t| t == 20_000));

    let out = dynacommit(
        &["race", "--table", &table, "--store", "memory://"],
        &with_timeout("soon"),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("DYNACOMMIT_LEASE_TIMEOUT_MS=\"soon\""),
        "{stderr}"
    );
}

/// Every command's help has an example and the exit codes; and the codes differ: 2 for a
/// usage or configuration error, 1 for a failure doing the work.
#[test]
fn help_shows_examples_and_exit_codes_and_usage_differs_from_failure() {
    for command in [
        &[][..],
        &["race"],
        &["bench"],
        &["table"],
        &["table", "create"],
        &["table", "describe"],
        &["lease"],
        &["lease", "list"],
        &["lease", "show"],
        &["lease", "break"],
        &["lock"],
        &["lock", "hold"],
        &["lock", "show"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let out = dynacommit(&args, &[]);
        let help = text(&out.stdout);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(
            help.contains("Example") && help.contains("dynacommit "),
            "{args:?} has no example: {help}"
        );
        if command.len() < 2 {
            assert!(help.contains("Exit codes: 0"), "{args:?}: {help}");
        }
    }

    // Usage: a flag's value, clap's own complaint, a bad variable.
    assert_eq!(
        dynacommit(&["race", "--store", "ftp://x"], &[])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        dynacommit(&["race", "--no-such-flag"], &[]).status.code(),
        Some(2)
    );
    let bad = dynacommit(&["race"], &[("DYNACOMMIT_POLL_INTERVAL_MS", "often")]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    // Failure: DynamoDB unreachable (nothing listens on port 9).
    let down = dynacommit(
        &["lease", "list", "--dynamodb-endpoint", "http://127.0.0.1:9"],
        &[
            ("AWS_ACCESS_KEY_ID", "dynacommit"),
            ("AWS_SECRET_ACCESS_KEY", "dynacommitsecret"),
        ],
    );
    let stderr = text(&down.stderr);
    assert_eq!(down.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test]
async fn errors_say_what_was_wrong_and_what_to_do() {
    common::dynamodb().await;
    let dynamodb = common::dynamodb_url();
    let s3rver = common::s3::S3Server::S3rver.url();
    let env = [
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.as_str()),
        ("AWS_ENDPOINT_URL_S3", s3rver.as_str()),
        ("AWS_ACCESS_KEY_ID", "S3RVER"),
        ("AWS_SECRET_ACCESS_KEY", "S3RVER"),
    ];
    // A missing table: how to create it.
    let missing = common::unique_name("missing");
    let described = dynacommit(&["table", "describe", "--table", &missing], &env);
    assert_eq!(described.status.code(), Some(1));
    let said = text(&described.stderr);
    assert!(
        said.contains(&format!("dynacommit table create --table {missing}")),
        "{said}"
    );
    // A missing bucket: a sentence, not S3's XML.
    let raced = dynacommit(
        &[
            "race",
            "--store",
            "s3://dynacommit-no-such-bucket/x",
            "--writers",
            "1",
            "--commits",
            "1",
        ],
        &env,
    );
    assert!(!raced.status.success());
    let said = text(&raced.stderr);
    assert!(
        said.contains("the bucket dynacommit-no-such-bucket does not exist (NoSuchBucket)")
            && !said.contains("<?xml"),
        "{said}"
    );
    // `lock show` without DynamoDB would show an empty in-process table: refused.
    let shown = dynacommit(&["lock", "show", "leader"], &[]);
    assert_eq!(shown.status.code(), Some(2));
    assert!(
        text(&shown.stderr).contains("no DynamoDB configured"),
        "{}",
        text(&shown.stderr)
    );
}

#[test]
fn an_unprotected_race_shows_what_the_leases_prevent() {
    let raced = dynacommit(
        &[
            "race",
            "--unprotected",
            "--writers",
            "4",
            "--commits",
            "10",
            "--json",
        ],
        &[],
    );
    assert_eq!(raced.status.code(), Some(1), "{}", text(&raced.stderr));
    let report: serde_json::Value = serde_json::from_slice(&raced.stdout).unwrap();
    assert_eq!(report["ok"], false, "{report}");
    assert!(
        report["duplicates"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "every writer told it won, yet no version was won twice: {report}"
    );
    // The same race through the leases is clean.
    let protected = dynacommit(
        &["race", "--writers", "4", "--commits", "10", "--json"],
        &[],
    );
    assert!(protected.status.success(), "{}", text(&protected.stderr));
}

#[test]
fn a_relative_file_store_is_resolved_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_dynacommit"))
        .args([
            "race",
            "--store",
            "file://rel/dir",
            "--writers",
            "1",
            "--commits",
            "1",
        ])
        .current_dir(dir.path())
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("DYNACOMMIT_LEASE_TABLE")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let resolved = std::fs::canonicalize(dir.path().join("rel/dir")).unwrap();
    let said = text(&output.stderr);
    assert!(
        said.contains(&format!(
            "{} (--store file://rel/dir resolved)",
            resolved.display()
        )),
        "{said}"
    );
}

#[test]
fn flags_a_command_cannot_use_are_refused_not_ignored() {
    for (args, flag) in [
        (&["lease", "list", "--store", "memory://"][..], "--store"),
        (&["lock", "show", "leader", "--table", "t"][..], "--table"),
        (
            &["table", "describe", "--store", "memory://"][..],
            "--store",
        ),
    ] {
        let output = dynacommit(args, &[]);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let said = text(&output.stderr);
        assert!(
            said.contains(&format!("{flag} has no effect")),
            "{args:?}: {said}"
        );
    }
    let zero = dynacommit(&["race", "--poll-ms", "0"], &[]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(
        text(&zero.stderr).contains("--poll-ms 0"),
        "{}",
        text(&zero.stderr)
    );
    // Backend flags are grouped in the help.
    let help = dynacommit(&["race", "--help"], &[]);
    assert!(text(&help.stdout).contains("Where leases and objects live:"));
}
