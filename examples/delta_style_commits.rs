//! Several writers committing to one Delta-style log through `CommitStore`, on the
//! embedded default (the in-process lease table and an in-memory store); each prints the
//! versions it won, and the example checks that every version was committed exactly once
//! (exiting non-zero, saying what broke, if not). Run:
//! `cargo run --example delta_style_commits`.

use std::collections::BTreeMap;
use std::sync::Arc;

use dynacommit::CommitStore;
use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
    let store = Arc::new(CommitStore::new(Arc::new(InMemory::new()), leases));

    let writers = (0..4).map(|writer| {
        let store = store.clone();
        tokio::spawn(async move {
            let mut won = Vec::new();
            let mut version = 0u64;
            while won.len() < 3 {
                let path = Path::from(format!("table/_delta_log/{version:020}.json"));
                let commit = format!("{{\"commitInfo\":{{\"writer\":{writer}}}}}");
                match store
                    .put_opts(&path, commit.into(), PutMode::Create.into())
                    .await
                {
                    Ok(_) => won.push(version),
                    Err(object_store::Error::AlreadyExists { .. }) => {} // someone else won it
                    Err(e) => return Err(e),
                }
                version += 1;
            }
            Ok::<_, object_store::Error>((writer, won))
        })
    });
    // Who was told they won which version.
    let mut winners: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for handle in writers {
        let (writer, won) = handle.await??;
        println!("writer {writer} committed versions {won:?}");
        for version in won {
            winners.entry(version).or_default().push(writer);
        }
    }

    // Exactly once: versions 0..12 each won by one writer, and each holding that
    // writer's commit; nothing past them.
    for version in 0..12u64 {
        let path = Path::from(format!("table/_delta_log/{version:020}.json"));
        let body = store.get(&path).await?.bytes().await?;
        let body = String::from_utf8_lossy(&body);
        println!("{version:>2}: {body}");
        match winners.remove(&version).as_deref() {
            Some([writer]) => {
                let expected = format!("{{\"commitInfo\":{{\"writer\":{writer}}}}}");
                if body != expected {
                    violation(&format!(
                        "version {version} was won by writer {writer} but holds {body}"
                    ));
                }
            }
            Some(several) => violation(&format!(
                "version {version} was won by writers {several:?}: a commit was lost"
            )),
            None => violation(&format!("no writer was told it won version {version}")),
        }
    }
    if !winners.is_empty() {
        violation(&format!("versions past 11 were won: {winners:?}"));
    }
    println!("OK: versions 0..12 each committed exactly once");
    Ok(())
}

/// Says what broke and exits non-zero.
fn violation(message: &str) -> ! {
    eprintln!("VIOLATION: {message}");
    std::process::exit(1);
}
