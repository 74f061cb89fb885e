//! object_store 0.14.2's own integration helpers, run through [`CommitStore`] over four
//! inner stores. Every helper the bare inner store passes must pass through the wrapper
//! (`../shared/SERVICES.md` lists what each bare server fails on its own, and why); and
//! the conditional helpers (`put_opts` with its 5 x 10 race, `copy_if_not_exists`,
//! `copy_rename_nonexistent_object`) must pass through the wrapper on all four, though the
//! bare s3rver, SeaweedFS without conditional puts, and LocalFileSystem fail some of them.

mod common;

use std::sync::Arc;

use common::faults::ScriptedStore;
use common::s3::S3Server;
use dynacommit::CommitStore;
use object_store::ObjectStore;
use object_store::aws::S3ConditionalPut;
use object_store::integration as it;
use object_store::list::PaginatedListStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::multipart::MultipartStore;

/// A wrapper over a fresh inner store, and the inner store's other faces.
struct Fixture {
    store: CommitStore,
    multipart: Option<Arc<dyn MultipartStore>>,
    paginated: Option<Arc<dyn PaginatedListStore>>,
    _dir: Option<tempfile::TempDir>,
}

async fn s3rver() -> Fixture {
    let inner = Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    );
    Fixture {
        store: CommitStore::new(inner.clone(), common::dynamo_leases().await),
        multipart: Some(inner.clone()),
        paginated: Some(inner),
        _dir: None,
    }
}

async fn seaweedfs() -> Fixture {
    let inner = Arc::new(
        S3Server::SeaweedFs
            .fresh_store(S3ConditionalPut::Disabled)
            .await,
    );
    Fixture {
        store: CommitStore::new(inner.clone(), common::dynamo_leases().await),
        multipart: Some(inner.clone()),
        paginated: Some(inner),
        _dir: None,
    }
}

async fn memory() -> Fixture {
    let inner = Arc::new(InMemory::new());
    Fixture {
        store: CommitStore::new(inner.clone(), common::memory_leases()),
        multipart: Some(inner),
        paginated: None,
        _dir: None,
    }
}

async fn local() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let inner = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    Fixture {
        store: CommitStore::new(inner, common::memory_leases()),
        multipart: None,
        paginated: None,
        _dir: Some(dir),
    }
}

/// One test per (inner store, helper), each on a fresh store.
macro_rules! helpers {
    ($setup:ident { $($name:ident: |$f:ident| $body:expr;)* }) => {
        mod $setup {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let $f = super::$setup().await;
                    $body;
                }
            )*
        }
    };
}

/// s3rver behind a layer that retries torn reads (see `ScriptedStore`), for the one helper
/// that reads an object while other workers overwrite it.
async fn s3rver_read_whole() -> Fixture {
    let inner: Arc<dyn ObjectStore> = Arc::new(ScriptedStore::retrying_torn_reads(Arc::new(
        S3Server::S3rver
            .fresh_store(S3ConditionalPut::ETagMatch)
            .await,
    )));
    Fixture {
        store: CommitStore::new(inner, common::dynamo_leases().await),
        multipart: None,
        paginated: None,
        _dir: None,
    }
}

helpers!(s3rver_read_whole {
    put_opts_with_its_race: |f| it::put_opts(&f.store, true).await;
});

helpers!(s3rver {
    copy_if_not_exists: |f| it::copy_if_not_exists(&f.store).await;
    copy_rename_nonexistent_object: |f| it::copy_rename_nonexistent_object(&f.store).await;
    put_get_attributes: |f| it::put_get_attributes(&f.store).await;
    list_uses_directories_correctly: |f| it::list_uses_directories_correctly(&f.store).await;
    get_nonexistent_object: |f| assert!(it::get_nonexistent_object(&f.store, None).await.is_err());
    rename_and_copy: |f| it::rename_and_copy(&f.store).await;
    multipart: |f| it::multipart(&f.store, f.multipart.as_deref().unwrap()).await;
    multipart_race_condition: |f| it::multipart_race_condition(&f.store, true).await;
    multipart_out_of_order: |f| it::multipart_out_of_order(&f.store).await;
    list_with_offset_exclusivity: |f| it::list_with_offset_exclusivity(&f.store).await;
});

helpers!(seaweedfs {
    put_opts_with_its_race: |f| it::put_opts(&f.store, true).await;
    copy_if_not_exists: |f| it::copy_if_not_exists(&f.store).await;
    copy_rename_nonexistent_object: |f| it::copy_rename_nonexistent_object(&f.store).await;
    get_opts: |f| it::get_opts(&f.store).await;
    stream_get: |f| it::stream_get(&f.store).await;
    list_with_delimiter: |f| it::list_with_delimiter(&f.store).await;
    list_paginated: |f| it::list_paginated(&f.store, f.paginated.as_deref().unwrap()).await;
    put_get_attributes: |f| it::put_get_attributes(&f.store).await;
    list_uses_directories_correctly: |f| it::list_uses_directories_correctly(&f.store).await;
    get_nonexistent_object: |f| assert!(it::get_nonexistent_object(&f.store, None).await.is_err());
    rename_and_copy: |f| it::rename_and_copy(&f.store).await;
    multipart: |f| it::multipart(&f.store, f.multipart.as_deref().unwrap()).await;
    multipart_race_condition: |f| it::multipart_race_condition(&f.store, true).await;
    multipart_out_of_order: |f| it::multipart_out_of_order(&f.store).await;
    list_with_offset_exclusivity: |f| it::list_with_offset_exclusivity(&f.store).await;
});

helpers!(memory {
    put_opts_with_its_race: |f| it::put_opts(&f.store, true).await;
    copy_if_not_exists: |f| it::copy_if_not_exists(&f.store).await;
    copy_rename_nonexistent_object: |f| it::copy_rename_nonexistent_object(&f.store).await;
    put_get_delete_list: |f| it::put_get_delete_list(&f.store).await;
    put_get_attributes: |f| it::put_get_attributes(&f.store).await;
    get_opts: |f| it::get_opts(&f.store).await;
    stream_get: |f| it::stream_get(&f.store).await;
    list_uses_directories_correctly: |f| it::list_uses_directories_correctly(&f.store).await;
    list_with_delimiter: |f| it::list_with_delimiter(&f.store).await;
    get_nonexistent_object: |f| assert!(it::get_nonexistent_object(&f.store, None).await.is_err());
    rename_and_copy: |f| it::rename_and_copy(&f.store).await;
    multipart: |f| it::multipart(&f.store, f.multipart.as_deref().unwrap()).await;
    multipart_race_condition: |f| it::multipart_race_condition(&f.store, true).await;
    multipart_out_of_order: |f| it::multipart_out_of_order(&f.store).await;
    list_with_offset_exclusivity: |f| it::list_with_offset_exclusivity(&f.store).await;
});

helpers!(local {
    put_opts_with_its_race: |f| it::put_opts(&f.store, true).await;
    copy_if_not_exists: |f| it::copy_if_not_exists(&f.store).await;
    copy_rename_nonexistent_object: |f| it::copy_rename_nonexistent_object(&f.store).await;
    put_get_delete_list: |f| it::put_get_delete_list(&f.store).await;
    put_get_attributes: |f| it::put_get_attributes(&f.store).await;
    get_opts: |f| it::get_opts(&f.store).await;
    stream_get: |f| it::stream_get(&f.store).await;
    list_uses_directories_correctly: |f| it::list_uses_directories_correctly(&f.store).await;
    list_with_delimiter: |f| it::list_with_delimiter(&f.store).await;
    get_nonexistent_object: |f| assert!(it::get_nonexistent_object(&f.store, None).await.is_err());
    rename_and_copy: |f| it::rename_and_copy(&f.store).await;
    multipart_race_condition: |f| it::multipart_race_condition(&f.store, true).await;
    multipart_out_of_order: |f| it::multipart_out_of_order(&f.store).await;
    list_with_offset_exclusivity: |f| it::list_with_offset_exclusivity(&f.store).await;
});
