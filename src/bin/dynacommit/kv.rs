//! `dynacommit kv`: read and write the key-value store, on DynamoDB or in a local file.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use clap::{Args, Subcommand};
use dynacommit::kv::{Checkpoint, DynamoKv, Entry, EventKind, KvError, KvStore, Revision, key};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::backends::BackendArgs;
use crate::fail::Fail;
use crate::kv_file::{self, KvFile};
use crate::report::{print_columns, print_table};
use crate::signals::{INTERRUPTED, Interrupt};

/// The key-value table unless --kv-table or DYNACOMMIT_KV_TABLE names another.
const DEFAULT_TABLE: &str = "dynacommit-kv";

/// `dynacommit kv`'s subcommand and where the keys live.
#[derive(Debug, Args)]
pub struct KvArgs {
    #[command(subcommand)]
    command: KvCommand,
    #[command(flatten)]
    place: KvPlace,
}

/// Where the keys live: flags for both kinds of store.
#[derive(Debug, Args)]
#[command(next_help_heading = "Where the keys live")]
struct KvPlace {
    /// The key-value table in DynamoDB (else DYNACOMMIT_KV_TABLE, else dynacommit-kv).
    /// Naming it asks for DynamoDB.
    #[arg(long, global = true, value_name = "TABLE")]
    kv_table: Option<String>,
    /// Keep these keys apart from other stores' in the same table (DynamoDB only;
    /// default kv).
    #[arg(long, global = true)]
    namespace: Option<String>,
    /// The file of the embedded default, used when no DynamoDB is configured (else
    /// DYNACOMMIT_KV_FILE, else .dynacommit/kv.json in the working directory).
    #[arg(long, global = true, value_name = "PATH")]
    kv_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum KvCommand {
    /// Show the entry at KEY: its value, revision and expiry (exit 1 if there is none).
    #[command(after_help = "Examples:\n  dynacommit kv get config/limits\n  \
                            dynacommit kv get config/limits --json")]
    Get {
        /// The key.
        key: String,
    },
    /// Write VALUE (or a file's bytes) at KEY, and print the new revision.
    #[command(after_help = "Examples:\n  dynacommit kv put config/limits 20\n  \
         dynacommit kv put nodes/a up --create --expires-in 30s     # only if absent; expires\n  \
         dynacommit kv put config/limits 30 --if-revision 5f0c...   # only if unchanged since\n  \
         dynacommit kv put blobs/logo --from-file logo.png")]
    Put(PutArgs),
    /// Delete KEY (deleting a missing key succeeds, unless --if-revision is given).
    #[command(after_help = "Examples:\n  dynacommit kv delete config/limits\n  \
         dynacommit kv delete config/limits --if-revision 5f0c...")]
    Delete {
        /// The key.
        key: String,
        /// Only if the entry is still at this revision (exit 1 if it changed or is gone).
        #[arg(long, value_name = "REV")]
        if_revision: Option<String>,
    },
    /// List the keys and folders directly under PREFIX (the root without one).
    ///
    /// Folders end in `/`: `/` separates them, so `a/b/c` is key `c` in folder `a/b/`.
    #[command(after_help = "Examples:\n  dynacommit kv list\n  dynacommit kv list config/ --json")]
    List {
        /// The folder to list, ending in `/` (or any prefix of names in it).
        prefix: Option<String>,
    },
    /// Show the entries from START up to END (every key starting with START without one).
    ///
    /// START <= key < END, in key order, across folders.
    #[command(
        after_help = "Examples:\n  dynacommit kv range config/                 # every key under config/\n  \
         dynacommit kv range a b --limit 10 --json   # a <= key < b"
    )]
    Range {
        /// The first key (or prefix) to show.
        start: String,
        /// Show keys before this one (default: every key starting with START).
        end: Option<String>,
        /// Show at most this many entries (the store is read only as far as that needs).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Print changes to keys starting with PREFIX as they happen (DynamoDB only).
    ///
    /// Runs until Ctrl-C, or until --count events. It reads the table's DynamoDB stream.
    /// On the embedded default it is refused: each `dynacommit kv` there is a process of
    /// its own, so a watch would see only its own changes, which are none.
    #[command(after_help = "Examples:\n  dynacommit kv watch config/\n  \
         dynacommit kv watch config/ --json --count 1   # wait for the next change\n  \
         dynacommit kv watch config/ --from 'dynamodb:{...}'   # resume after a checkpoint\n\n\
         The first line says the watch is in place (kind ready): every change after it is \
         printed. With --json, each line is one object: kind (ready, put, deleted, expired), \
         key, value, revision, expires and checkpoint, as they apply.\n\n\
         Exit codes: 0 after --count events, or on Ctrl-C without --count; 1 the watch \
         failed (or cannot resume from --from); 2 usage or configuration error (and no \
         DynamoDB configured); 130 Ctrl-C before --count events.")]
    Watch {
        /// Only keys starting with this (all without one).
        prefix: Option<String>,
        /// Resume right after this checkpoint, as an earlier watch printed it.
        #[arg(long, value_name = "CHECKPOINT")]
        from: Option<String>,
        /// Stop after this many events (not counting the ready line).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
}

#[derive(Debug, Args)]
struct PutArgs {
    /// The key.
    key: String,
    /// The value, as text (or give --from-file).
    #[arg(required_unless_present = "from_file", conflicts_with = "from_file")]
    value: Option<String>,
    /// Read the value from this file, as bytes (`-` for stdin).
    #[arg(long, value_name = "PATH")]
    from_file: Option<PathBuf>,
    /// Write only if the key has no entry (exit 1 if it exists).
    #[arg(long, conflicts_with = "if_revision")]
    create: bool,
    /// Write only if the entry is still at this revision (exit 1 if it changed or is gone).
    #[arg(long, value_name = "REV")]
    if_revision: Option<String>,
    /// Expire the entry this long from now: 500ms, 30s, 5m, 2h, 1d.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    expires_in: Option<Duration>,
}

impl KvArgs {
    /// Whether this is a watch, which handles interrupts itself.
    pub fn is_watch(&self) -> bool {
        matches!(self.command, KvCommand::Watch { .. })
    }
}

impl KvPlace {
    /// The flag or variable that names the table, if one does.
    fn table_named(&self) -> Option<&'static str> {
        if self.kv_table.is_some() {
            Some("--kv-table")
        } else if env("DYNACOMMIT_KV_TABLE").is_some() {
            Some("DYNACOMMIT_KV_TABLE")
        } else {
            None
        }
    }

    fn table(&self) -> String {
        self.kv_table
            .clone()
            .or_else(|| env("DYNACOMMIT_KV_TABLE"))
            .unwrap_or_else(|| DEFAULT_TABLE.to_owned())
    }

    fn file(&self) -> PathBuf {
        self.kv_file
            .clone()
            .or_else(|| env("DYNACOMMIT_KV_FILE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(kv_file::DEFAULT_PATH))
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A duration as a number and a unit: `500ms`, `30s`, `5m`, `2h`, `1d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let how = "give a whole number and a unit: 500ms, 30s, 5m, 2h or 1d";
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: {how}"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" => return Err(format!("{text:?} has no unit: {how}")),
        _ => return Err(format!("{text:?} has a unit I do not know: {how}")),
    };
    if n == 0 {
        return Err(format!("{text:?}: the duration must be above zero"));
    }
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Runs one `dynacommit kv` command.
pub async fn run(
    backends: &BackendArgs,
    args: KvArgs,
    json: bool,
    interrupt: Interrupt,
) -> Result<ExitCode, Fail> {
    let KvArgs { command, place } = args;
    let named = place.table_named();
    if let Some((client, _reason)) = backends.kv_client(named)? {
        if place.kv_file.is_some() {
            return Err(Fail::Usage(
                "--kv-file has no effect here: the keys are in DynamoDB (drop --kv-file, or \
                 pass --embedded to use the file)"
                    .to_owned(),
            ));
        }
        let mut kv = DynamoKv::new(client, place.table());
        if let Some(namespace) = &place.namespace {
            kv = kv
                .with_namespace(namespace)
                .map_err(|e| Fail::Usage(format!("--namespace: {e}")))?;
        }
        if let KvCommand::Watch {
            from: Some(from), ..
        } = &command
            && !from.starts_with("dynamodb:")
        {
            return Err(Fail::Usage(format!(
                "--from {from:?} is not a checkpoint of a DynamoDB watch: give one a watch \
                 printed (its checkpoint field with --json)"
            )));
        }
        backends.prepare_kv_table(&kv).await?;
        let (code, _changed) = execute(&kv, command, json, interrupt).await?;
        return Ok(code);
    }
    if place.namespace.is_some() {
        return Err(Fail::Usage(
            "--namespace has no effect on the embedded default (no DynamoDB configured): it \
             keeps one set of keys per file; use --kv-file for another"
                .to_owned(),
        ));
    }
    if matches!(command, KvCommand::Watch { .. }) {
        return Err(Fail::Usage(
            "kv watch needs DynamoDB: on the embedded default (no DynamoDB configured) each \
             `dynacommit kv` runs in a process of its own, so a watch would see only its own \
             changes, which are none. Set AWS_ENDPOINT_URL_DYNAMODB (or --dynamodb-endpoint), \
             or pass --dynamodb or --kv-table"
                .to_owned(),
        ));
    }
    if let Some(name) = backends.region_without_dynamodb(named) {
        eprintln!(
            "note: {name} is set, but no DynamoDB was asked for, so the keys are in a local \
             file; for DynamoDB pass --dynamodb (AWS's, in that region), --kv-table, or set \
             AWS_ENDPOINT_URL_DYNAMODB"
        );
    }
    let file = KvFile::lock(place.file()).await?;
    let kv = file.load()?;
    let (code, changed) = execute(&kv, command, json, interrupt).await?;
    if changed {
        file.save(&kv)?;
    }
    Ok(code)
}

/// Runs `command` on `kv`; also says whether it changed anything.
async fn execute(
    kv: &dyn KvStore,
    command: KvCommand,
    json: bool,
    interrupt: Interrupt,
) -> Result<(ExitCode, bool), Fail> {
    match command {
        KvCommand::Get { key } => {
            let entry = kv.get(key.as_bytes()).await.map_err(fail)?.ok_or_else(|| {
                Fail::Failure(format!("key `{}` not found", shown(key.as_bytes(), false)))
            })?;
            if json {
                println!("{}", Value::Object(entry_json(&entry)));
            } else {
                print_table(&[
                    ("key", shown(&entry.key, false)),
                    ("value", shown(&entry.value, true)),
                    ("revision", entry.revision.to_string()),
                    ("expires", expiry(entry.expires)),
                ]);
            }
            Ok((ExitCode::SUCCESS, false))
        }
        KvCommand::Put(args) => put(kv, args, json).await.map(|code| (code, true)),
        KvCommand::Delete { key, if_revision } => {
            let deleted = match if_revision {
                Some(revision) => kv
                    .conditional_delete(key.as_bytes(), &Revision::from(revision))
                    .await
                    .map(|()| true),
                None => kv.delete(key.as_bytes()).await,
            }
            .map_err(fail)?;
            let key_text = shown(key.as_bytes(), false);
            if json {
                let mut out = Map::new();
                bytes_field(&mut out, "key", key.as_bytes());
                out.insert("deleted".into(), deleted.into());
                println!("{}", Value::Object(out));
            } else if deleted {
                println!("deleted {key_text}");
            } else {
                println!("no entry at {key_text}: nothing to delete");
            }
            Ok((ExitCode::SUCCESS, deleted))
        }
        KvCommand::List { prefix } => {
            let prefix = prefix.unwrap_or_default();
            let names = kv.list(prefix.as_bytes()).await.map_err(fail)?;
            if json {
                let listed: Vec<Value> = names
                    .iter()
                    .map(|name| {
                        let mut out = Map::new();
                        bytes_field(&mut out, "name", name);
                        bytes_field(&mut out, "key", &[prefix.as_bytes(), name].concat());
                        out.insert("folder".into(), name.ends_with(b"/").into());
                        Value::Object(out)
                    })
                    .collect();
                println!("{}", Value::Array(listed));
            } else if names.is_empty() {
                eprintln!("(no keys under {prefix:?})");
            } else {
                for name in &names {
                    println!("{}", shown(name, false));
                }
            }
            Ok((ExitCode::SUCCESS, false))
        }
        KvCommand::Range { start, end, limit } => {
            let end = match end {
                Some(end) => end.into_bytes(),
                // Every key starting with START; none past it (an empty end: no bound).
                None => key::prefix_end(start.as_bytes()).unwrap_or_default(),
            };
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let mut entries = kv
                .range(start.as_bytes(), &end, Some(limit.saturating_add(1)))
                .await
                .map_err(fail)?;
            let more = entries.len() > limit;
            entries.truncate(limit);
            if json {
                let listed = entries
                    .iter()
                    .map(|e| Value::Object(entry_json(e)))
                    .collect();
                println!("{}", Value::Array(listed));
            } else if entries.is_empty() {
                eprintln!("(no keys in that range)");
            } else {
                print_entries(&entries);
            }
            if more {
                eprintln!(
                    "(more entries not shown: raise --limit, or start the next range after \
                     the last key shown)"
                );
            }
            Ok((ExitCode::SUCCESS, false))
        }
        KvCommand::Watch {
            prefix,
            from,
            count,
        } => watch(kv, prefix, from, count, json, interrupt)
            .await
            .map(|code| (code, false)),
    }
}

async fn put(kv: &dyn KvStore, args: PutArgs, json: bool) -> Result<ExitCode, Fail> {
    let value = match (&args.value, &args.from_file) {
        (Some(text), _) => Bytes::from(text.clone().into_bytes()),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map_err(|e| Fail::Usage(format!("--from-file -: cannot read stdin: {e}")))?;
            Bytes::from(bytes)
        }
        (None, Some(path)) => Bytes::from(std::fs::read(path).map_err(|e| {
            Fail::Usage(format!(
                "--from-file {}: cannot read it: {e}",
                path.display()
            ))
        })?),
        (None, None) => {
            return Err(Fail::Usage("give a VALUE or --from-file PATH".to_owned()));
        }
    };
    // The store keeps expiries to the millisecond: show the one it keeps.
    let expires = args.expires_in.map(|d| {
        let at = SystemTime::now() + d;
        let ms = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    });
    let key = args.key.as_bytes();
    let revision = if args.create {
        kv.create(key, value, expires).await
    } else if let Some(revision) = args.if_revision {
        kv.conditional_update(key, &Revision::from(revision), value, expires)
            .await
    } else {
        kv.put(key, value, expires).await
    }
    .map_err(|e| match e {
        KvError::AlreadyExists { .. } => Fail::Failure(format!(
            "{e}: nothing written (--create writes only new keys)"
        )),
        e => fail(e),
    })?;
    if json {
        let mut out = Map::new();
        bytes_field(&mut out, "key", key);
        out.insert("revision".into(), revision.as_str().into());
        out.insert("expires".into(), expiry_json(expires));
        println!("{}", Value::Object(out));
    } else {
        let verb = if args.create { "created" } else { "stored" };
        let until = match expires {
            Some(_) => format!(", expires {}", expiry(expires)),
            None => String::new(),
        };
        println!("{verb} {} at revision {revision}{until}", shown(key, false));
    }
    Ok(ExitCode::SUCCESS)
}

async fn watch(
    kv: &dyn KvStore,
    prefix: Option<String>,
    from: Option<String>,
    count: Option<u64>,
    json: bool,
    interrupt: Interrupt,
) -> Result<ExitCode, Fail> {
    let prefix = prefix.unwrap_or_default();
    let mut events = kv.watch(prefix.as_bytes(), from.map(Checkpoint::from_text));
    let mut seen = 0u64;
    let mut last: Option<Checkpoint> = None;
    let code = loop {
        if count.is_some_and(|n| seen >= n) {
            break ExitCode::SUCCESS;
        }
        let event = tokio::select! {
            event = events.next() => event,
            () = interrupt.wait() => {
                break if count.is_some() {
                    ExitCode::from(INTERRUPTED)
                } else {
                    ExitCode::SUCCESS
                };
            }
        };
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                if let Some(at) = &last
                    && !json
                {
                    eprintln!("last checkpoint: {}", at.as_str());
                }
                return Err(fail(e));
            }
            None => return Err(Fail::Failure("the watch ended unexpectedly".to_owned())),
        };
        let mut out = Map::new();
        let text = match &event.kind {
            EventKind::Ready => {
                out.insert("kind".into(), "ready".into());
                let which = if prefix.is_empty() {
                    "every key".to_owned()
                } else {
                    format!("keys starting with {}", shown(prefix.as_bytes(), false))
                };
                format!("ready: watching {which} (every change from here on is shown)")
            }
            EventKind::Put(entry) => {
                seen += 1;
                out.insert("kind".into(), "put".into());
                out.extend(entry_json(entry));
                format!(
                    "put {} = {} (revision {}, expires {})",
                    shown(&entry.key, false),
                    shown(&entry.value, false),
                    entry.revision,
                    expiry(entry.expires)
                )
            }
            EventKind::Deleted { key } => {
                seen += 1;
                out.insert("kind".into(), "deleted".into());
                bytes_field(&mut out, "key", key);
                format!("deleted {}", shown(key, false))
            }
            EventKind::Expired { key } => {
                seen += 1;
                out.insert("kind".into(), "expired".into());
                bytes_field(&mut out, "key", key);
                format!("expired {}", shown(key, false))
            }
        };
        out.insert("checkpoint".into(), event.checkpoint.as_str().into());
        if json {
            println!("{}", Value::Object(out));
        } else {
            println!("{text}");
        }
        last = Some(event.checkpoint);
    };
    if let Some(at) = last
        && !json
    {
        eprintln!("resume after the last event with --from '{}'", at.as_str());
    }
    Ok(code)
}

/// The failure a store error means: bad input is usage (2), the rest failures (1).
fn fail(e: KvError) -> Fail {
    match e {
        KvError::InvalidKey { .. } | KvError::ValueTooLarge { .. } => Fail::Usage(e.to_string()),
        KvError::RevisionMismatch { .. } => Fail::Failure(format!(
            "{e}; nothing was changed (read it again with `dynacommit kv get`)"
        )),
        e if e.may_have_applied() => Fail::Failure(format!(
            "{e} (the write may or may not have been applied: read the key before trying again)"
        )),
        e => Fail::Failure(e.to_string()),
    }
}

/// Bytes for people: as they are when UTF-8 without control characters (newlines and
/// tabs allowed if `multiline`), else escaped.
fn shown(bytes: &[u8], multiline: bool) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && !(multiline && (c == '\n' || c == '\t'))) =>
        {
            text.to_owned()
        }
        Ok(text) => text.escape_debug().to_string(),
        Err(_) => bytes.escape_ascii().to_string(),
    }
}

/// Puts `bytes` in `out` as `name` (text) when UTF-8, else as `name_base64`.
fn bytes_field(out: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.insert(name.to_owned(), text.into()),
        Err(_) => out.insert(format!("{name}_base64"), BASE64.encode(bytes).into()),
    };
}

fn entry_json(entry: &Entry) -> Map<String, Value> {
    let mut out = Map::new();
    bytes_field(&mut out, "key", &entry.key);
    bytes_field(&mut out, "value", &entry.value);
    out.insert("revision".into(), entry.revision.as_str().into());
    out.insert("expires".into(), expiry_json(entry.expires));
    out
}

/// An expiry for JSON: RFC 3339 in UTC to the millisecond, or null for never.
fn expiry_json(at: Option<SystemTime>) -> Value {
    at.map_or(Value::Null, |at| json!(rfc3339(at)))
}

fn rfc3339(at: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// An expiry for people: never, or when and how soon.
fn expiry(at: Option<SystemTime>) -> String {
    let Some(at) = at else {
        return "never".to_owned();
    };
    let left = at
        .duration_since(SystemTime::now())
        .map_or(0, |d| d.as_secs());
    let soon = match left {
        0..=119 => format!("{left} s"),
        120..=7199 => format!("{} min", left / 60),
        _ => format!("{} h", left / 3600),
    };
    format!("{} (in {soon})", rfc3339(at))
}

/// Entries as a table: key, revision, expiry, and the value last (on one line).
fn print_entries(entries: &[Entry]) {
    let rows: Vec<[String; 4]> = entries
        .iter()
        .map(|e| {
            [
                shown(&e.key, false),
                e.revision.to_string(),
                e.expires.map_or("never".to_owned(), rfc3339),
                shown(&e.value, false),
            ]
        })
        .collect();
    print_columns(["KEY", "REVISION", "EXPIRES", "VALUE"], &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit_and_a_positive_number() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["30", "s", "0s", "-1s", "1.5s", "3w", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes_show_as_text_when_they_are_text() {
        assert_eq!(shown(b"a/b", false), "a/b");
        assert_eq!(shown(b"two\nlines", true), "two\nlines");
        assert_eq!(shown(b"two\nlines", false), "two\\nlines");
        assert_eq!(shown(&[b'a', 0xff], false), "a\\xff");
        let mut out = Map::new();
        bytes_field(&mut out, "value", &[0, 0xff]);
        assert_eq!(out["value_base64"], "AP8=");
    }
}
