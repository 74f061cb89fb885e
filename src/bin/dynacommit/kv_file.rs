//! The embedded default of `dynacommit kv`: the in-process store, loaded from a JSON file
//! before each command and saved back after a change, while the command holds an
//! exclusive lock (flock) on a lock file beside it, so that commands run at the same time
//! take turns and none loses another's write.
//!
//! The file (`.dynacommit/kv.json` unless told otherwise):
//!
//! ```json
//! {"format": "dynacommit-kv", "version": 1, "entries": [
//!   {"key": "config/limits", "value": "20", "revision": "5f0c...", "expires_ms": 1767225600000},
//!   {"key": "blob", "value_base64": "AP8=", "revision": "9a1e..."}
//! ]}
//! ```
//!
//! Keys and values are text when they are UTF-8, else base64 under `key_base64` and
//! `value_base64`; `expires_ms` is Unix milliseconds, absent for never. Only live entries
//! are saved. The file is replaced whole (written beside it, synced, renamed over it), so
//! a crash leaves the old file or the new one, never half of one.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use dynacommit::kv::{Entry, MemoryKv, Revision};
use serde::{Deserialize, Serialize};

use crate::fail::Fail;

/// The file's `format` field.
const FORMAT: &str = "dynacommit-kv";
/// The file's `version` field.
const VERSION: u32 = 1;
/// The file unless --kv-file or DYNACOMMIT_KV_FILE names another.
pub const DEFAULT_PATH: &str = ".dynacommit/kv.json";
/// How often a command waiting for another's lock tries again.
const LOCK_RETRY: Duration = Duration::from_millis(20);

#[derive(Serialize, Deserialize)]
struct Document {
    format: String,
    version: u32,
    entries: Vec<Stored>,
}

#[derive(Serialize, Deserialize)]
struct Stored {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
    revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_ms: Option<u64>,
}

/// Bytes as (text, base64): one of them, text when the bytes are UTF-8.
fn encode(bytes: &[u8]) -> (Option<String>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(text.to_owned()), None),
        Err(_) => (None, Some(BASE64.encode(bytes))),
    }
}

fn decode(text: Option<String>, base64: Option<String>, what: &str) -> Result<Vec<u8>, String> {
    match (text, base64) {
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(b64)) => BASE64
            .decode(b64)
            .map_err(|e| format!("an entry's {what}_base64 is not base64 ({e})")),
        _ => Err(format!(
            "an entry has not exactly one of {what} and {what}_base64"
        )),
    }
}

impl Stored {
    fn from_entry(entry: &Entry) -> Self {
        let (key, key_base64) = encode(&entry.key);
        let (value, value_base64) = encode(&entry.value);
        Self {
            key,
            key_base64,
            value,
            value_base64,
            revision: entry.revision.as_str().to_owned(),
            expires_ms: entry.expires.map(unix_ms),
        }
    }

    fn into_entry(self) -> Result<Entry, String> {
        Ok(Entry {
            key: decode(self.key, self.key_base64, "key")?,
            value: Bytes::from(decode(self.value, self.value_base64, "value")?),
            revision: Revision::from(self.revision),
            expires: self
                .expires_ms
                .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms)),
        })
    }
}

fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The embedded store's file, locked for this command until dropped.
pub struct KvFile {
    path: PathBuf,
    /// Holds the lock: closing it (on drop) releases it.
    _lock: File,
}

impl KvFile {
    /// Takes the lock of the file at `path` (waiting, and saying so, while another
    /// command holds it), creating its directory if missing.
    pub async fn lock(path: PathBuf) -> Result<Self, Fail> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                Fail::Failure(format!(
                    "cannot create the directory {} for the key-value file: {e}",
                    dir.display()
                ))
            })?;
        }
        let lock_path = sibling(&path, ".lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| {
                Fail::Failure(format!(
                    "cannot open the lock file {}: {e}",
                    lock_path.display()
                ))
            })?;
        let mut said = false;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    if !said {
                        eprintln!(
                            "waiting for another dynacommit command using {} (Ctrl-C to give up)",
                            path.display()
                        );
                        said = true;
                    }
                    tokio::time::sleep(LOCK_RETRY).await;
                }
                Err(TryLockError::Error(e)) => {
                    return Err(Fail::Failure(format!(
                        "cannot lock {}: {e}",
                        lock_path.display()
                    )));
                }
            }
        }
        Ok(Self { path, _lock: lock })
    }

    /// The store as the file holds it (empty if there is no file yet).
    pub fn load(&self) -> Result<MemoryKv, Fail> {
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(MemoryKv::new()),
            Err(e) => {
                return Err(Fail::Failure(format!(
                    "cannot read {}: {e}",
                    self.path.display()
                )));
            }
        };
        let not_ours = |why: String| {
            Fail::Usage(format!(
                "{} is not a dynacommit key-value file ({why}): point --kv-file (or \
                 DYNACOMMIT_KV_FILE) elsewhere, or move it away",
                self.path.display()
            ))
        };
        let document: Document =
            serde_json::from_slice(&text).map_err(|e| not_ours(e.to_string()))?;
        if document.format != FORMAT {
            return Err(not_ours(format!("its format is {:?}", document.format)));
        }
        if document.version != VERSION {
            return Err(not_ours(format!(
                "version {}, and this dynacommit reads version {VERSION}",
                document.version
            )));
        }
        let entries = document
            .entries
            .into_iter()
            .map(Stored::into_entry)
            .collect::<Result<Vec<_>, _>>()
            .map_err(not_ours)?;
        Ok(MemoryKv::from_entries(entries))
    }

    /// Replaces the file with the live entries of `kv`.
    pub fn save(&self, kv: &MemoryKv) -> Result<(), Fail> {
        let document = Document {
            format: FORMAT.to_owned(),
            version: VERSION,
            entries: kv.snapshot().iter().map(Stored::from_entry).collect(),
        };
        let failed = |what: &str, e: std::io::Error| {
            Fail::Failure(format!("cannot {what} {}: {e}", self.path.display()))
        };
        let text = serde_json::to_vec_pretty(&document)
            .map_err(|e| Fail::Failure(format!("cannot encode the key-value file: {e}")))?;
        // The lock is held, so no other dynacommit writes this scratch file meanwhile.
        let scratch = sibling(&self.path, ".tmp");
        let mut file = File::create(&scratch).map_err(|e| failed("write beside", e))?;
        file.write_all(&text)
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all())
            .map_err(|e| failed("write beside", e))?;
        drop(file);
        std::fs::rename(&scratch, &self.path).map_err(|e| failed("replace", e))?;
        // Make the rename itself durable; a filesystem that cannot sync a directory
        // still has the file.
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty())
            && let Ok(dir) = File::open(dir)
        {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
