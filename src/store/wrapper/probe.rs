//! Which conditions the inner store enforces: a probe on a fresh key under the probe path,
//! remembered for ten minutes and forgotten when an answer contradicts it.

use super::CommitStore;
use super::os;
use os::{CopyMode, CopyOptions, ObjectStore, ObjectStoreExt, PutMode, PutPayload, Result};

use crate::store::conditions::Enforced;
use crate::store::headers::Probe;

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// Which conditions the inner store enforces, probed (under `.dynacommit-probe/` at
    /// the root or [the probe path](Self::with_probe_path), removed afterwards) and
    /// remembered for ten minutes, then probed again (a store upgraded or reconfigured
    /// under a running process is noticed; so is an answer that contradicts the last
    /// probe, which forgets it): what [`Conditions::Auto`](crate::Conditions::Auto) decides by, and worth logging at
    /// start-up. A failed first probe is an error and is tried again next time (a failed
    /// re-probe leaves the last findings standing); a store that refuses a header
    /// (answers it with 400, 403, 405, 412 or 501 where the plain write succeeds) does
    /// not enforce it.
    ///
    /// ```
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// # use std::sync::Arc;
    #[doc = concat!(" # use ", at!(), "::CommitStore; use dynacommit::lease::{LeaseConfig, LeaseManager, MemoryLeaseTable};")]
    /// # let leases = LeaseManager::new(Arc::new(MemoryLeaseTable::new()), LeaseConfig::default())?;
    #[doc = concat!(" let store = CommitStore::new(Arc::new(", os_name!(), "::memory::InMemory::new()), leases);")]
    /// let enforced = store.enforced().await?;
    /// assert!(enforced.create && enforced.update); // InMemory enforces both
    /// # Ok(()) }
    /// ```
    pub async fn enforced(&self) -> Result<Enforced> {
        self.probed_now().await.map(|probe| probe.enforced)
    }

    /// The probe's findings, probing again if they are older than ten minutes or were
    /// forgotten. A re-probe that fails after ten minutes leaves the last findings in
    /// force (with a warning); a failed first probe, or one after a contradiction, is an
    /// error.
    pub(super) async fn probed_now(&self) -> Result<Probe> {
        if let Some(probe) = self.probed.fresh() {
            return Ok(probe);
        }
        self.probe_in_turn(None).await
    }

    /// Findings of a probe that started at `since` or later (another task's will do), for
    /// a write whose header was refused at `since`: a failure is an error, never older
    /// findings.
    pub(super) async fn probed_after(&self, since: tokio::time::Instant) -> Result<Probe> {
        self.probe_in_turn(Some(since)).await
    }

    /// Probes in this store's turn, unless fresh findings (made since `since`, if given)
    /// came meanwhile.
    pub(super) async fn probe_in_turn(&self, since: Option<tokio::time::Instant>) -> Result<Probe> {
        let _turn = self.probed.turn().await;
        let usable = match since {
            None => self.probed.fresh(),
            Some(since) => self.probed.fresh_since(since),
        };
        if let Some(probe) = usable {
            return Ok(probe);
        }
        let (started, epoch) = (tokio::time::Instant::now(), self.probed.epoch());
        match self.probe().await {
            Ok(probe) => {
                self.headers.learn(&probe);
                self.probed.keep(probe, started, epoch);
                Ok(probe)
            }
            Err(e) => match since
                .is_none()
                .then(|| self.probed.retry_later(epoch))
                .flatten()
            {
                Some(last) => {
                    tracing::warn!(store = %self.inner, error = %e, "probing the store again failed: its last findings stand");
                    Ok(last)
                }
                None => Err(e),
            },
        }
    }

    /// The probe behind [`Self::enforced`].
    pub(super) async fn probe(&self) -> Result<Probe> {
        use os::Error as E;
        let dir = self
            .probe_under
            .clone()
            .join(".dynacommit-probe")
            .join(format!("{:016x}", rand::random::<u64>()));
        let (object, copy) = (dir.clone().join("object"), dir.join("copy"));
        let body = || PutPayload::from_static(b"dynacommit probe");
        // An answer refusing the header, not the write: on the probe's fresh key a failed
        // condition is no answer either (a store answering `If-None-Match` on an absent
        // object with 412 does not enforce it). The store is then known to take plain
        // writes before the condition counts as refused.
        let refusal = |e: &E| {
            matches!(
                e,
                E::NotImplemented { .. }
                    | E::NotSupported { .. }
                    | E::AlreadyExists { .. }
                    | E::Precondition { .. }
                    | E::PermissionDenied { .. }
            ) || crate::store::headers::status_in(e)
                .is_some_and(|s| matches!(s, 400 | 403 | 405 | 412 | 501))
        };
        let update_to = |e_tag: String, version: Option<String>| {
            PutMode::Update(os::UpdateVersion {
                e_tag: Some(e_tag),
                version,
            })
        };
        let found = async {
            // Create: on a fresh key the first must be applied, the second refused.
            let (create_accepted, create) = match self
                .inner
                .put_opts(&object, body(), PutMode::Create.into())
                .await
            {
                Ok(_) => (
                    true,
                    matches!(
                        self.inner
                            .put_opts(&object, body(), PutMode::Create.into())
                            .await,
                        Err(E::AlreadyExists { .. })
                    ),
                ),
                // Refused on a fresh key, unless the object is there after all: a first
                // attempt that landed and was answered 5xx, then refused on the
                // client's retry, or a 409 answering a race.
                Err(e) if refusal(&e) => match self.inner.head(&object).await {
                    Ok(_) => (
                        true,
                        matches!(
                            self.inner
                                .put_opts(&object, body(), PutMode::Create.into())
                                .await,
                            Err(E::AlreadyExists { .. })
                        ),
                    ),
                    Err(E::NotFound { .. }) => {
                        self.inner.put(&object, body()).await?;
                        (false, false)
                    }
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            };
            // Update: one naming the object's own version must be applied (a store
            // refusing every `If-Match` would otherwise read as enforcing, and `auto`
            // would fail every update), in the ETag's form as given or else unquoted
            // (DigitalOcean Spaces honours only that), and one naming another ETag, in
            // the same form, refused. Without an ETag an update cannot name a version.
            let meta = self.inner.head(&object).await?;
            let mut unquoted = false;
            let mut update_accepted = false;
            let update = match meta.e_tag.clone() {
                None => false,
                Some(etag) => {
                    let bare = crate::lease::bare_etag(&etag).to_owned();
                    let mut applied = false;
                    for (form, bare_form) in [(etag.clone(), false), (bare.clone(), true)] {
                        if bare_form && bare == etag {
                            break;
                        }
                        let own = update_to(form, meta.version.clone());
                        match self.inner.put_opts(&object, body(), own.into()).await {
                            Ok(_) => {
                                applied = true;
                                update_accepted = true;
                                unquoted = bare_form;
                                break;
                            }
                            Err(e) if refusal(&e) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let mismatch = if unquoted {
                        "dynacommit-probe-mismatch"
                    } else {
                        "\"dynacommit-probe-mismatch\""
                    };
                    let elsewhere = update_to(mismatch.into(), None);
                    applied
                        && match self.inner.put_opts(&object, body(), elsewhere.into()).await {
                            Err(E::Precondition { .. }) => true,
                            Ok(_) => false,
                            Err(e) if refusal(&e) => false,
                            Err(e) => return Err(e),
                        }
                }
            };
            let if_absent = || CopyOptions::new().with_mode(CopyMode::Create);
            let (copy_accepted, copied) =
                match self.inner.copy_opts(&object, &copy, if_absent()).await {
                    Ok(()) => (
                        true,
                        matches!(
                            self.inner.copy_opts(&object, &copy, if_absent()).await,
                            Err(E::AlreadyExists { .. })
                        ),
                    ),
                    Err(e) if refusal(&e) => (false, false),
                    Err(e) => return Err(e),
                };
            Ok(Probe {
                enforced: Enforced {
                    create,
                    update,
                    copy: copied,
                },
                accepted: Enforced {
                    create: create_accepted,
                    update: update_accepted,
                    copy: copy_accepted,
                },
                unquoted,
            })
        }
        .await;
        for path in [&object, &copy] {
            match self.inner.delete(path).await {
                Ok(()) | Err(E::NotFound { .. }) => {}
                Err(e) => tracing::warn!(%path, error = %e, "could not remove a probe object"),
            }
        }
        let probe = found?;
        tracing::info!(
            store = %self.inner,
            enforced = %probe.enforced,
            if_match_unquoted = probe.unquoted,
            "probed the inner store's conditional writes"
        );
        Ok(probe)
    }
}
