//! Several writers committing to one Delta-style log through `CommitStore`, on the
//! embedded default (the in-process lease table and an in-memory store); each prints the
//! versions it won. Run: `cargo run --example delta_style_commits`.

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
    for handle in writers {
        let (writer, won) = handle.await??;
        println!("writer {writer} committed versions {won:?}");
    }

    // Every version 0..12 exists once; read the log back in order.
    for version in 0..12u64 {
        let path = Path::from(format!("table/_delta_log/{version:020}.json"));
        let body = store.get(&path).await?.bytes().await?;
        println!("{version:>2}: {}", String::from_utf8_lossy(&body));
    }
    Ok(())
}
