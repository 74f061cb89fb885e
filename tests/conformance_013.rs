//! object_store 0.13.2's own integration helpers, run through `dynacommit::v013::CommitStore`
//! (the wrapper for 0.13's trait, the same protocol as the 0.14 one) over s3rver, SeaweedFS
//! and InMemory. The conditional helpers must pass on all three, though bare s3rver and
//! SeaweedFS without conditional puts fail them; the others run where the bare store passes
//! them (`../shared/SERVICES.md`). Needs `--features object-store-013-conformance`.

mod common;

use std::sync::Arc;

use common::s3::S3Server;
use dynacommit::v013::CommitStore;
use object_store_013::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store_013::integration as it;
use object_store_013::memory::InMemory;

/// A 0.13 store on a fresh bucket of `server`, its own conditional puts `conditional_put`.
async fn bucket(server: S3Server, conditional_put: S3ConditionalPut) -> Arc<AmazonS3> {
    let bucket = server.fresh_bucket().await;
    let (key, secret) = server.keys();
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(server.url())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .with_conditional_put(conditional_put)
            .build()
            .unwrap(),
    )
}

/// s3rver ignores conditional headers: the wrapper supplies them.
async fn s3rver() -> CommitStore {
    let inner = bucket(S3Server::S3rver, S3ConditionalPut::ETagMatch).await;
    CommitStore::new(inner, common::dynamo_leases().await)
}

/// SeaweedFS with its own conditional puts off: the wrapper must supply them.
async fn seaweedfs() -> CommitStore {
    let inner = bucket(S3Server::SeaweedFs, S3ConditionalPut::Disabled).await;
    CommitStore::new(inner, common::dynamo_leases().await)
}

async fn memory() -> CommitStore {
    CommitStore::new(Arc::new(InMemory::new()), common::memory_leases())
}

/// One test per (helper, inner store), each on a fresh store.
macro_rules! matrix {
    ($($helper:ident [$($store:ident),*]: |$s:ident| $body:expr;)*) => {$(
        mod $helper {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    let $s = super::$store().await;
                    $body;
                }
            )*
        }
    )*};
}

matrix! {
    put_opts_with_its_race [seaweedfs, memory]:
        |s| it::put_opts(&s, true).await;
    copy_if_not_exists [s3rver, seaweedfs, memory]:
        |s| it::copy_if_not_exists(&s).await;
    copy_rename_nonexistent_object [s3rver, seaweedfs, memory]:
        |s| it::copy_rename_nonexistent_object(&s).await;
    put_get_delete_list [memory]:
        |s| it::put_get_delete_list(&s).await;
    put_get_attributes [s3rver, seaweedfs, memory]:
        |s| it::put_get_attributes(&s).await;
    get_opts [seaweedfs, memory]:
        |s| it::get_opts(&s).await;
    list_uses_directories_correctly [s3rver, seaweedfs, memory]:
        |s| it::list_uses_directories_correctly(&s).await;
    list_with_delimiter [seaweedfs, memory]:
        |s| it::list_with_delimiter(&s).await;
    get_nonexistent_object [s3rver, seaweedfs, memory]:
        |s| assert!(it::get_nonexistent_object(&s, None).await.is_err());
    rename_and_copy [s3rver, seaweedfs, memory]:
        |s| it::rename_and_copy(&s).await;
    multipart_race_condition [s3rver, seaweedfs, memory]:
        |s| it::multipart_race_condition(&s, true).await;
    multipart_out_of_order [s3rver, seaweedfs, memory]:
        |s| it::multipart_out_of_order(&s).await;
}

/// The 0.13 wrapper over a concrete S3 store offers its multipart and paginated listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapper_passes_through_multipart_and_paginated_listing() {
    let inner = bucket(S3Server::SeaweedFs, S3ConditionalPut::Disabled).await;
    let store = CommitStore::new(inner, common::memory_leases());
    it::multipart(&store, &store).await;
    it::list_paginated(&store, &store).await;
}
