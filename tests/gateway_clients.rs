//! Real clients no one here wrote, through `dynacommit gateway`: Python deltalake 1.x
//! (its default S3 log store commits with If-None-Match alone), polars and boto3,
//! installed by `scripts/services.sh` into a virtual environment. On s3rver, which
//! ignores If-None-Match, racing deltalake writers lose acknowledged commits; through
//! the gateway, none.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::gateway::{ACCESS_KEY, Gateway, SECRET, Settings};
use common::s3::S3Server;

const WRITERS: usize = 8;
const APPENDS: usize = 5;

/// The virtual environment's Python, failing loudly (with the way to make it) if the
/// scripts have not installed it.
fn python() -> PathBuf {
    let python = std::env::var("DYNACOMMIT_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "DYNACOMMIT_TEST_PYTHON is not set: run the tests with scripts/test.sh, or \
             `scripts/services.sh install` and `eval \"$(scripts/services.sh env)\"`"
        )
    });
    let python = PathBuf::from(python);
    assert!(
        python.exists(),
        "{} does not exist: run `scripts/services.sh install` (it installs the Python clients)",
        python.display()
    );
    python
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// An S3 endpoint and the keys a client signs with there.
#[derive(Clone)]
struct Endpoint {
    url: String,
    key: String,
    secret: String,
    bucket: String,
}

impl Endpoint {
    fn gateway(gateway: &Gateway) -> Self {
        Self {
            url: gateway.url.clone(),
            key: ACCESS_KEY.into(),
            secret: SECRET.into(),
            bucket: gateway.bucket.clone(),
        }
    }

    fn bare(server: S3Server, bucket: &str) -> Self {
        let (key, secret) = server.keys();
        Self {
            url: server.url(),
            key,
            secret,
            bucket: bucket.into(),
        }
    }

    fn command(&self, script_name: &str) -> Command {
        let mut command = Command::new(python());
        // The clients read AWS_* variables too, and AWS_ENDPOINT_URL_S3 (which the test
        // environment points at s3rver) wins over an endpoint in deltalake's options.
        for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("AWS_")) {
            command.env_remove(name);
        }
        command
            .arg(script(script_name))
            .env("DYNACOMMIT_S3_ENDPOINT", &self.url)
            .env("DYNACOMMIT_S3_KEY", &self.key)
            .env("DYNACOMMIT_S3_SECRET", &self.secret)
            .env("DYNACOMMIT_S3_BUCKET", &self.bucket);
        command
    }

    fn run(&self, script_name: &str, args: &[&str]) -> Output {
        let output = self
            .command(script_name)
            .args(args)
            .output()
            .expect("cannot run python");
        assert!(
            output.status.success(),
            "{script_name} {args:?} failed: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

/// What a deltalake race left: the appends its writers were told were committed, and
/// the table read back.
struct Race {
    acknowledged: BTreeSet<(i64, i64)>,
    refused: usize,
    /// The table as read back, or why it could not be read.
    table: Result<Table, String>,
}

/// A table read back: its version and its rows.
struct Table {
    version: i64,
    rows: Vec<(i64, i64)>,
}

impl Race {
    /// Acknowledged appends missing from the table: all of them if the table cannot be
    /// read at all (on the bare s3rver, two commits written at once can leave a commit
    /// file that is neither, and deltalake then loads nothing).
    fn lost(&self) -> usize {
        match &self.table {
            Ok(table) => {
                let rows: BTreeSet<_> = table.rows.iter().copied().collect();
                self.acknowledged.difference(&rows).count()
            }
            Err(_) => self.acknowledged.len(),
        }
    }
}

/// `WRITERS` processes appending `APPENDS` rows each to a fresh table at `endpoint`.
fn deltalake_race(endpoint: &Endpoint) -> Race {
    let uri = format!("s3://{}/{}", endpoint.bucket, common::unique_name("table"));
    endpoint.run("deltalake_race.py", &["create", &uri]);
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            endpoint
                .command("deltalake_race.py")
                .args(["append", &uri, &writer.to_string(), &APPENDS.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("cannot start a deltalake writer")
        })
        .collect();
    let mut acknowledged = BTreeSet::new();
    let mut refused = 0;
    for writer in writers {
        let output = writer.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "a deltalake writer failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let append: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(error) = append.get("error") {
                eprintln!("an append was not acknowledged: {error}");
                refused += 1;
            } else {
                acknowledged.insert((
                    append["writer"].as_i64().unwrap(),
                    append["seq"].as_i64().unwrap(),
                ));
            }
        }
    }
    let check = endpoint
        .command("deltalake_race.py")
        .args(["check", &uri])
        .output()
        .expect("cannot run python");
    let table = if check.status.success() {
        let table: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
        let rows = table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap()))
            .collect();
        Ok(Table {
            version: table["version"].as_i64().unwrap(),
            rows,
        })
    } else {
        let why = String::from_utf8_lossy(&check.stderr);
        Err(why
            .lines()
            .rev()
            .find(|l| l.contains("Error"))
            .unwrap_or_default()
            .to_owned())
    };
    Race {
        acknowledged,
        refused,
        table,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_deltalake_writers_lose_no_commit_through_the_gateway_over_s3rver() {
    let gateway = Gateway::start(&Settings::fresh(S3Server::S3rver).await);
    let race = deltalake_race(&Endpoint::gateway(&gateway));
    let table = match &race.table {
        Ok(table) => table,
        Err(why) => panic!("the table written through the gateway cannot be read: {why}"),
    };
    eprintln!(
        "through the gateway: {} appends acknowledged, {} refused, table at version {}, {} rows",
        race.acknowledged.len(),
        race.refused,
        table.version,
        table.rows.len()
    );
    // Every acknowledged append is in the table once, and nothing else is: one version
    // per append after the table's creation (version 0).
    let acknowledged: Vec<_> = race.acknowledged.iter().copied().collect();
    assert_eq!(
        table.rows, acknowledged,
        "the table is not what the writers were told"
    );
    assert_eq!(table.version as usize, race.acknowledged.len());
    assert!(!acknowledged.is_empty());
}

/// The same race on the bare s3rver: acknowledged appends are lost (a rival's commit
/// overwrote theirs, or two commits written at once left a log deltalake cannot read),
/// which is what the test above would see if the gateway let a conditional PUT through
/// unguarded. Up to three races, so that one that happens to
/// lose nothing does not hide it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_deltalake_writers_lose_commits_on_the_bare_s3rver() {
    let bucket = S3Server::S3rver.fresh_bucket().await;
    let endpoint = Endpoint::bare(S3Server::S3rver, &bucket);
    for attempt in 1..=3 {
        let race = deltalake_race(&endpoint);
        let table = match &race.table {
            Ok(table) => format!("table at version {}", table.version),
            Err(why) => format!("the table cannot be read ({why})"),
        };
        eprintln!(
            "bare s3rver, race {attempt}: {} appends acknowledged, {} lost, {table}",
            race.acknowledged.len(),
            race.lost(),
        );
        if race.lost() > 0 {
            return;
        }
    }
    panic!("three races on the bare s3rver lost no acknowledged append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polars_and_boto3_work_through_the_gateway() {
    let gateway = Gateway::start(&Settings::fresh(S3Server::S3rver).await);
    let endpoint = Endpoint::gateway(&gateway);
    let uri = format!("s3://{}/polars", gateway.bucket);
    let polars = endpoint.run("polars_smoke.py", &[&uri]);
    eprint!("{}", String::from_utf8_lossy(&polars.stdout));
    let boto3 = endpoint.run("boto3_smoke.py", &[]);
    eprint!("{}", String::from_utf8_lossy(&boto3.stdout));
}
