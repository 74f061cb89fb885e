//! object_store 0.14.2's own integration helpers, run through [`CommitStore`] over four
//! inner stores. Every helper the bare inner store passes must pass through the wrapper
//! (`../shared/SERVICES.md` lists what each bare server fails on its own, and why); and
//! the conditional helpers (`put_opts` with its 5 x 10 race, `copy_if_not_exists`,
//! `copy_rename_nonexistent_object`) must pass through the wrapper on all four, though the
//! bare s3rver, SeaweedFS without conditional puts, and LocalFileSystem fail some of them.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use common::faults::{LatentStore, ScriptedStore};
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
    /// The latency layer under the wrapper, if there is one.
    latent: Option<Arc<LatentStore>>,
}

impl Fixture {
    /// With a latency layer: fails unless the workers' requests really overlapped (else a
    /// race helper passing proves nothing about the race). Reads need not overlap puts:
    /// the helper's workers share one store, whose lease manager queues their conditional
    /// puts of one version (`src/lease/queue.rs`), and a worker behind a success learns
    /// it lost without reading; so the workers read together, after each success.
    fn assert_interleaved(&self) {
        let Some(latent) = &self.latent else { return };
        let max = latent.max_in_flight.load(SeqCst);
        let reads = latent.reads_during_puts.load(SeqCst);
        eprintln!("at most {max} requests in flight at once; {reads} reads during a put");
        assert!(max > 1, "requests never overlapped");
    }
}

/// CommitStore over a fresh bucket of `server`, leases in DynamoDB Local.
async fn s3_fixture(server: S3Server, conditional_put: S3ConditionalPut) -> Fixture {
    let inner = Arc::new(server.fresh_store(conditional_put).await);
    Fixture {
        store: CommitStore::new(inner.clone(), common::dynamo_leases().await),
        multipart: Some(inner.clone()),
        paginated: Some(inner),
        _dir: None,
        latent: None,
    }
}

async fn s3rver() -> Fixture {
    s3_fixture(S3Server::S3rver, S3ConditionalPut::ETagMatch).await
}

/// SeaweedFS with its own conditional puts off: the wrapper must supply them.
async fn seaweedfs() -> Fixture {
    s3_fixture(S3Server::SeaweedFs, S3ConditionalPut::Disabled).await
}

async fn memory() -> Fixture {
    let inner = Arc::new(InMemory::new());
    Fixture {
        store: CommitStore::new(inner.clone(), common::memory_leases()),
        multipart: Some(inner),
        paginated: None,
        _dir: None,
        latent: None,
    }
}

/// InMemory answers at once, so concurrent workers never interleave on it: each put and
/// get here first waits 1 to 5 ms, so that the race helper's workers really overlap.
async fn memory_with_latency() -> Fixture {
    let latent = Arc::new(LatentStore::new(Arc::new(InMemory::new()), 1..6));
    Fixture {
        store: CommitStore::new(latent.clone(), common::memory_leases()),
        multipart: None,
        paginated: None,
        _dir: None,
        latent: Some(latent),
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
        latent: None,
    }
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
        latent: None,
    }
}

/// One test per (helper, inner store), each on a fresh store: `conformance::HELPER::STORE`.
macro_rules! matrix {
    ($($helper:ident [$($store:ident),*]: |$f:ident| $body:expr;)*) => {$(
        mod $helper {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    let $f = super::$store().await;
                    $body;
                }
            )*
        }
    )*};
}

// Which stores run which helper. The conditional helpers run on all four inner stores,
// though the bare s3rver, SeaweedFS without conditional puts, and LocalFileSystem fail
// some of them; every other helper runs where the bare store passes it
// (../shared/SERVICES.md has the table of what each bare server fails, and why).
// `s3rver_read_whole` is s3rver with torn reads retried: object_store's race helper reads
// while other workers overwrite, and s3rver overwrites in place. `memory_with_latency` is
// InMemory with a few ms before each put and get: on the bare InMemory the race helper's
// workers run one after another and race nothing.
matrix! {
    put_opts_with_its_race [s3rver_read_whole, seaweedfs, memory_with_latency, local]:
        |f| { it::put_opts(&f.store, true).await; f.assert_interleaved() };
    copy_if_not_exists [s3rver, seaweedfs, memory, local]:
        |f| it::copy_if_not_exists(&f.store).await;
    copy_rename_nonexistent_object [s3rver, seaweedfs, memory, local]:
        |f| it::copy_rename_nonexistent_object(&f.store).await;
    put_get_delete_list [memory, local]:
        |f| it::put_get_delete_list(&f.store).await;
    put_get_attributes [s3rver, seaweedfs, memory, local]:
        |f| it::put_get_attributes(&f.store).await;
    get_opts [seaweedfs, memory, local]:
        |f| it::get_opts(&f.store).await;
    stream_get [seaweedfs, memory, local]:
        |f| it::stream_get(&f.store).await;
    list_uses_directories_correctly [s3rver, seaweedfs, memory, local]:
        |f| it::list_uses_directories_correctly(&f.store).await;
    list_with_delimiter [seaweedfs, memory, local]:
        |f| it::list_with_delimiter(&f.store).await;
    list_paginated [seaweedfs]:
        |f| it::list_paginated(&f.store, f.paginated.as_deref().unwrap()).await;
    get_nonexistent_object [s3rver, seaweedfs, memory, local]:
        |f| assert!(it::get_nonexistent_object(&f.store, None).await.is_err());
    rename_and_copy [s3rver, seaweedfs, memory, local]:
        |f| it::rename_and_copy(&f.store).await;
    multipart [s3rver, seaweedfs, memory]:
        |f| it::multipart(&f.store, f.multipart.as_deref().unwrap()).await;
    multipart_race_condition [s3rver, seaweedfs, memory, local]:
        |f| it::multipart_race_condition(&f.store, true).await;
    multipart_out_of_order [s3rver, seaweedfs, memory, local]:
        |f| it::multipart_out_of_order(&f.store).await;
    list_with_offset_exclusivity [s3rver, seaweedfs, memory, local]:
        |f| it::list_with_offset_exclusivity(&f.store).await;
}

/// The wrapper over a concrete S3 store offers what that store offers beside
/// `ObjectStore`: object_store's multipart and paginated listing helpers run with the
/// wrapper as both faces, and a URL it signs is the one the store signs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapper_passes_through_multipart_signing_and_paginated_listing() {
    use object_store::signer::{Method, Signer};
    let inner = Arc::new(
        S3Server::SeaweedFs
            .fresh_store(S3ConditionalPut::Disabled)
            .await,
    );
    let store: CommitStore<object_store::aws::AmazonS3> =
        CommitStore::new(inner.clone(), common::memory_leases());
    it::multipart(&store, &store).await;
    it::list_paginated(&store, &store).await;
    let path = object_store::path::Path::from("signed");
    let expires = std::time::Duration::from_secs(60);
    let ours = store.signed_url(Method::GET, &path, expires).await.unwrap();
    let theirs = inner.signed_url(Method::GET, &path, expires).await.unwrap();
    assert_eq!(ours.path(), theirs.path());
    assert!(
        ours.query().unwrap_or_default().contains("X-Amz-Signature"),
        "{ours}"
    );
}
