//! object_store 0.14.2's own integration helpers, run by a plain `AmazonS3` client
//! pointed at `dynacommit gateway` (a process of its own) over each S3 server the scripts
//! start, its leases in DynamoDB Local. Every helper the bare server passes
//! (docs/gateway.md has the table) must pass through the gateway; and the conditional
//! ones (`put_opts` with its 5 x 10 race of creates and updates, `copy_if_not_exists`,
//! `copy_rename_nonexistent_object`), which the bare s3rver fails, must pass through it on
//! both. So must `get_opts`, which the bare s3rver fails (it ignores If-Match and
//! If-Unmodified-Since on reads): the gateway checks a read's conditions itself.

mod common;

use std::sync::Arc;

use common::faults::ScriptedStore;
use common::gateway::{Gateway, Settings};
use common::s3::S3Server;
use object_store::integration as it;

async fn through(server: S3Server) -> Gateway {
    Gateway::start(&Settings::fresh(server).await)
}

async fn s3rver() -> Gateway {
    through(S3Server::S3rver).await
}

async fn seaweedfs() -> Gateway {
    through(S3Server::SeaweedFs).await
}

/// One test per (helper, server), each with a fresh bucket, table and gateway.
macro_rules! matrix {
    ($($helper:ident [$($server:ident),*]: |$gateway:ident| $body:expr;)*) => {$(
        mod $helper {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $server() {
                    let $gateway = super::$server().await;
                    $body;
                }
            )*
        }
    )*};
}

/// s3rver tears a read that races a write of the same object (the body ends short),
/// and a gateway streams what it is given: the race helper's client retries torn reads,
/// as in tests/conformance.rs.
async fn put_opts_race(gateway: &Gateway) {
    let client = ScriptedStore::retrying_torn_reads(Arc::new(gateway.client()));
    it::put_opts(&client, true).await;
}

matrix! {
    put_opts_with_its_race [s3rver, seaweedfs]: |g| put_opts_race(&g).await;
    copy_if_not_exists [s3rver, seaweedfs]: |g| it::copy_if_not_exists(&g.client()).await;
    copy_rename_nonexistent_object [s3rver, seaweedfs]:
        |g| it::copy_rename_nonexistent_object(&g.client()).await;
    get_opts [s3rver, seaweedfs]: |g| it::get_opts(&g.client()).await;
    put_get_attributes [s3rver, seaweedfs]: |g| it::put_get_attributes(&g.client()).await;
    stream_get [seaweedfs]: |g| it::stream_get(&g.client()).await;
    list_uses_directories_correctly [s3rver, seaweedfs]:
        |g| it::list_uses_directories_correctly(&g.client()).await;
    list_with_delimiter [seaweedfs]: |g| it::list_with_delimiter(&g.client()).await;
    list_paginated [seaweedfs]: |g| it::list_paginated(&g.client(), &g.client()).await;
    get_nonexistent_object [s3rver, seaweedfs]:
        |g| assert!(it::get_nonexistent_object(&g.client(), None).await.is_err());
    rename_and_copy [s3rver, seaweedfs]: |g| it::rename_and_copy(&g.client()).await;
    multipart [s3rver, seaweedfs]: |g| it::multipart(&g.client(), &g.client()).await;
    multipart_race_condition [s3rver, seaweedfs]: |g| it::multipart_race_condition(&g.client(), true).await;
    multipart_out_of_order [s3rver, seaweedfs]: |g| it::multipart_out_of_order(&g.client()).await;
    list_with_offset_exclusivity [s3rver, seaweedfs]:
        |g| it::list_with_offset_exclusivity(&g.client()).await;
}
