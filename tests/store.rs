//! CommitStore's own surface: refusals, Display and Debug, passthrough of plain writes.

mod common;

use std::sync::Arc;

use dynacommit::CommitStore;
use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, UpdateVersion};

fn over_memory() -> (CommitStore, Arc<InMemory>) {
    let inner = Arc::new(InMemory::new());
    (
        CommitStore::new(inner.clone(), common::memory_leases()),
        inner,
    )
}

#[tokio::test]
async fn an_update_without_an_etag_is_a_clear_error() {
    let (store, _) = over_memory();
    let path = Path::from("doc");
    store.put(&path, "v1".into()).await.unwrap();
    let mode = PutMode::Update(UpdateVersion {
        e_tag: None,
        version: Some("7".into()),
    });
    let error = store
        .put_opts(&path, "v2".into(), mode.into())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("needs an e_tag"), "{text}");
    let body = store.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(body.as_ref(), b"v1", "nothing was written");
}

#[tokio::test]
async fn plain_writes_go_straight_through_without_a_lease() {
    let (store, inner) = over_memory();
    let path = Path::from("plain");
    store.put(&path, "x".into()).await.unwrap();
    store.copy(&path, &Path::from("copied")).await.unwrap();
    assert!(inner.head(&Path::from("copied")).await.is_ok());
    let table = store.leases().table().clone();
    assert_eq!(table.get("plain", "*").await.unwrap(), None);
    assert_eq!(table.get("copied", "*").await.unwrap(), None);
}

#[tokio::test]
async fn display_and_debug_say_what_is_wrapped_and_never_show_secrets() {
    let s3 = AmazonS3Builder::new()
        .with_bucket_name("lake")
        .with_region("eu-west-1")
        .with_access_key_id("AKIDVISIBLEKEYID")
        .with_secret_access_key("SUPERSECRETVALUE")
        .with_token("SESSIONTOKENVALUE")
        .build()
        .unwrap();
    let store = CommitStore::new(Arc::new(s3), common::memory_leases());
    let display = store.to_string();
    assert!(display.contains("lake"), "{display}");
    assert!(display.contains("in-process lease table"), "{display}");
    let debug = format!("{store:?}");
    assert!(
        debug.contains("lake") && debug.contains("LeaseManager"),
        "{debug}"
    );
    for secret in ["SUPERSECRETVALUE", "SESSIONTOKENVALUE"] {
        assert!(
            !debug.contains(secret) && !display.contains(secret),
            "{secret} leaked"
        );
    }
}

#[tokio::test]
async fn stores_with_different_lease_prefixes_share_a_table_without_contending() {
    let leases = common::memory_leases();
    let pond =
        CommitStore::new(Arc::new(InMemory::new()), leases.clone()).with_lease_prefix("pond/");
    let path = Path::from("_log/00000000000000000000.json");
    // A writer of another bucket ("lake/") holds its lease on the same path...
    let _held = leases
        .acquire("lake/_log/00000000000000000000.json", "*", || async {
            Ok::<(), std::convert::Infallible>(())
        })
        .await
        .unwrap();
    // ... the pond's create of the same path does not wait for it.
    tokio::time::timeout(
        std::time::Duration::from_secs(1),
        pond.put_opts(&path, "pond".into(), PutMode::Create.into()),
    )
    .await
    .expect("the pond waited on the lake's lease")
    .unwrap();
    let table = leases.table();
    assert!(
        table
            .get("pond/_log/00000000000000000000.json", "*")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_failed_precondition_certainly_did_not_apply_and_a_failed_write_may_have() {
    // The precondition fails: nothing was sent.
    let (store, _) = over_memory();
    let path = Path::from("log/0.json");
    store
        .put_opts(&path, "a".into(), PutMode::Create.into())
        .await
        .unwrap();
    let exists = store
        .put_opts(&path, "b".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(matches!(exists, object_store::Error::AlreadyExists { .. }));
    assert!(!dynacommit::may_have_applied(&exists), "{exists}");

    // The write itself fails (a directory stands where the file would go, which a HEAD
    // reports as no object): sent, its outcome unknown to the protocol, marked so.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("log/0.json/blocker")).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    let store = CommitStore::new(Arc::new(local), common::memory_leases());
    let failed = store
        .put_opts(&path, "c".into(), PutMode::Create.into())
        .await
        .unwrap_err();
    assert!(dynacommit::may_have_applied(&failed), "{failed}");
    assert!(
        failed
            .to_string()
            .contains("may or may not have been applied"),
        "{failed}"
    );
}

/// Tasks sharing one store queue for a lease, and one behind a success may fail without a
/// request only where that success settles it. Writing the same bytes again keeps their
/// ETag on S3 (an MD5 of the bytes), so an update queued behind such a success still
/// finds the ETag it expects, and must succeed, as a native `If-Match` would.
#[tokio::test]
async fn an_update_queued_behind_a_rewrite_of_the_same_bytes_still_succeeds() {
    use common::faults::ScriptedStore;
    let s3: Arc<dyn ObjectStore> = Arc::new(
        common::s3::S3Server::SeaweedFs
            .fresh_store(object_store::aws::S3ConditionalPut::Disabled)
            .await,
    );
    // Writes slowed, so that the second update queues behind the first.
    let slow = Arc::new(ScriptedStore::slow(
        s3.clone(),
        std::time::Duration::from_millis(200),
    ));
    let store = CommitStore::new(slow, common::dynamo_leases().await);
    let path = Path::from("pointer");
    let etag = s3.put(&path, "same bytes".into()).await.unwrap().e_tag;
    // An update of the pointer from the ETag read above.
    let update = |body: &'static str| {
        let mode = PutMode::Update(UpdateVersion {
            e_tag: etag.clone(),
            version: None,
        });
        store.put_opts(&path, body.into(), mode.into())
    };
    let (first, second) = futures::future::join(update("same bytes"), update("same bytes")).await;
    let first = first.expect("the first update");
    assert_eq!(
        first.e_tag, etag,
        "SeaweedFS gives the same bytes the same ETag"
    );
    second.expect("the second update, behind a success that left its ETag");

    // Different bytes: the update behind the success fails, saying why.
    let (first, second) = futures::future::join(update("other bytes"), update("other bytes")).await;
    first.expect("the first update");
    let refused = second.unwrap_err();
    assert!(
        matches!(refused, object_store::Error::Precondition { .. }),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("another write through this store"),
        "{refused}"
    );
}
