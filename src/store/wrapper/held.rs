//! Deletes and renames with paths held ([`CommitStore::hold_paths`]).

use super::os;
use super::outcome::may_have_applied;
use super::{CommitStore, lease_key};
use os::path::Path;
use os::{CopyOptions, ObjectStore, ObjectStoreExt, RenameOptions, RenameTargetMode, Result};

use crate::lease::CREATE_ETAG;

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// A delete with paths held: under the path's lease, released only once quiet, so
    /// that no writer of the path goes ahead while an earlier attempt of the delete (its
    /// client retried) may still land.
    pub(super) async fn held_delete(&self, path: Path) -> Result<Path> {
        let check = || async { Ok(()) };
        let delete = || async { self.inner.delete(&path).await };
        self.guarded(&path, CREATE_ETAG, check, None, delete)
            .await?;
        Ok(path)
    }

    /// Another handle on this store, sharing its lease manager and findings.
    pub(super) fn shared(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            leases: self.leases.clone(),
            lease_prefix: self.lease_prefix.clone(),
            conditions: self.conditions,
            probed: self.probed.clone(),
            headers: self.headers.clone(),
            probe_under: self.probe_under.clone(),
            scope: self.scope,
            hold_paths: self.hold_paths,
        }
    }

    /// A rename with paths held: the inner rename (a copy to `to`, a delete of `from`)
    /// under both paths' leases, taken in the order of their keys, so that two renames
    /// crossing take them alike and neither waits on the other's first. Both are checked
    /// under each lease: the source is there, and the target absent where it must be.
    pub(super) async fn held_rename(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> Result<()> {
        let must_be_absent = matches!(options.target_mode, RenameTargetMode::Create);
        let check = || async move {
            self.inner.head(from).await?;
            if must_be_absent {
                self.check_absent(to).await?;
            }
            Ok(())
        };
        let rename = || async move {
            if must_be_absent {
                self.copy_under_lease(from, to, CopyOptions::new(), Some(options))
                    .await
            } else {
                self.inner.rename_opts(from, to, options).await
            }
        };
        let (first, second) =
            if lease_key(&self.lease_prefix, from) <= lease_key(&self.lease_prefix, to) {
                (from, to)
            } else {
                (to, from)
            };
        if first == second {
            return self.guarded(first, CREATE_ETAG, check, None, rename).await;
        }
        // The second lease's clean failures (its check, its acquisition) are the rename's:
        // nothing was sent under the first either.
        let inner = || self.guarded(second, CREATE_ETAG, check, None, rename);
        let clean = |e: &os::Error| !may_have_applied(e);
        self.guarded_with(first, CREATE_ETAG, check, None, inner, clean)
            .await
    }
}
