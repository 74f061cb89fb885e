//! A leased write whose condition header the store refuses: what the object tells about
//! the refusal, and when the write may go plain.

use super::{CommitStore, STORE};
use super::{os, put_result};
use os::path::Path;
use os::{
    GetResult, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult, Result,
};

use crate::store::headers::Header;

impl<T: ObjectStore + ?Sized> CommitStore<T> {
    /// Whether `e` refuses a condition header (nothing written), not the write.
    pub(super) fn refuses_header(e: &os::Error) -> bool {
        use os::Error as E;
        matches!(e, E::NotImplemented { .. } | E::NotSupported { .. })
            || crate::store::headers::refuses_a_header(e)
    }

    /// A leased put carrying `mode` was refused. Under our lease no protocol writer
    /// touches the path, so the refusal is an earlier attempt of this very write (the
    /// client retried after an answer was lost), a writer without a lease (a native one,
    /// a plain client), a race the store answers so (AWS answers a create racing a delete
    /// of the key with 409), or a store that answers the header wrongly (for an update,
    /// one that honours `If-Match` only with the ETag unquoted): the object tells which.
    ///
    /// - Our bytes: our success.
    /// - The condition still holding (a create's object absent, an update's at the ETag
    ///   named): the write goes once more, still conditional (an update sent quoted goes
    ///   unquoted, for DigitalOcean Spaces), which is always safe. Refused again with the
    ///   condition still holding, a probe on a fresh key settles whether the store
    ///   refuses the header (403 or 412 to every conditional write); if it does, and the
    ///   condition still holds, this one write goes plain. Only this one: the next carry
    ///   the header again, so a probe misled by a fault costs at most one plain write.
    /// - Anything else: an error marked as possibly applied, not `AlreadyExists`: a caller
    ///   must not read it as a version taken by a rival in the protocol and commit the same
    ///   change again elsewhere (an earlier attempt of ours may have landed and been
    ///   replaced).
    pub(super) async fn after_refusal(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
        mode: PutMode,
        header: Header,
        sent_at: tokio::time::Instant,
    ) -> Result<PutResult> {
        use os::Error as E;
        let refused = || E::Generic {
            store: STORE,
            source: format!(
                "{location}: the store refused the write made under the lease (a writer \
                 without a lease, such as one in native mode or a plain client, changed the \
                 object, or an earlier attempt of this write landed and was since replaced)"
            )
            .into(),
        };
        let mut sent = self.in_store_form(mode.clone());
        for resent in [false, true] {
            match self.refused_over(location, &payload, &mode).await {
                Refused::Ours(result) => return Ok(result),
                Refused::Elsewhere => return Err(refused()),
                Refused::ConditionHolds if resent => break,
                Refused::ConditionHolds => {}
            }
            let again = match &sent {
                PutMode::Update(version) => PutMode::Update(os::UpdateVersion {
                    e_tag: version
                        .e_tag
                        .as_deref()
                        .map(|e| crate::lease::bare_etag(e).to_owned()),
                    version: version.version.clone(),
                }),
                other => other.clone(),
            };
            let conditional = PutOptions {
                mode: again.clone(),
                ..opts.clone()
            };
            match self
                .inner
                .put_opts(location, payload.clone(), conditional)
                .await
            {
                Err(E::AlreadyExists { .. } | E::Precondition { .. }) => sent = again,
                // A success, or a failure that may have applied: the caller marks it.
                other => return other,
            }
        }
        if let Ok(probe) = self.probed_after(sent_at).await
            && !probe.accepts(header)
            && matches!(
                self.refused_over(location, &payload, &mode).await,
                Refused::ConditionHolds
            )
        {
            tracing::warn!(
                store = %self.inner,
                %location,
                ?header,
                "the store refuses the condition header though its condition holds: this \
                 write goes plain under the lease"
            );
            return self.inner.put_opts(location, payload, opts).await;
        }
        Err(refused())
    }

    /// What a refused leased put `mode` of `payload` at `location` finds there now.
    pub(super) async fn refused_over(
        &self,
        location: &Path,
        payload: &PutPayload,
        mode: &PutMode,
    ) -> Refused {
        match self.inner.get(location).await {
            Ok(found) => {
                let now = found.meta.e_tag.clone();
                if let Some(result) = Self::holds(found, payload).await {
                    return Refused::Ours(result);
                }
                match (mode, &now) {
                    (PutMode::Update(version), Some(now))
                        if version
                            .e_tag
                            .as_deref()
                            .is_some_and(|expected| crate::lease::same_etag(expected, now)) =>
                    {
                        Refused::ConditionHolds
                    }
                    _ => Refused::Elsewhere,
                }
            }
            Err(os::Error::NotFound { .. }) if matches!(mode, PutMode::Create) => {
                Refused::ConditionHolds
            }
            Err(_) => Refused::Elsewhere,
        }
    }

    /// A leased write sent at `sent_at` carrying `header`, refused with `e` (nothing
    /// written), goes `plain` if the refusal is the header's: at once where the client
    /// itself refused it; after a store's 501 only once a probe started since finds the
    /// store refusing the header (a 501 may answer another option of the write) and the
    /// condition, read again after the probe, `holds`. Otherwise `e` stands. The refusal
    /// is remembered only once the plain write went through: a client's refusal of another
    /// option (attributes on a local directory) refuses that too.
    pub(super) async fn plain_after_refused_header<R>(
        &self,
        e: os::Error,
        header: Header,
        sent_at: tokio::time::Instant,
        holds: impl std::future::Future<Output = bool>,
        plain: impl std::future::Future<Output = Result<R>>,
    ) -> Result<R> {
        let header_refused = Self::refused_by_client(&e)
            || (self
                .probed_after(sent_at)
                .await
                .is_ok_and(|probe| !probe.accepts(header))
                && holds.await);
        if !header_refused {
            return Err(e);
        }
        let plain = plain.await;
        if plain.is_ok() {
            self.headers.refused(header);
        }
        plain
    }

    /// Whether the client itself refused the header (it cannot send it: object_store's
    /// `S3ConditionalPut::Disabled`, an `AmazonS3` without `copy_if_not_exists`, a local
    /// directory's updates): nothing was sent.
    pub(super) fn refused_by_client(e: &os::Error) -> bool {
        matches!(
            e,
            os::Error::NotImplemented { .. } | os::Error::NotSupported { .. }
        )
    }

    /// `found` as a `PutResult`, if it holds exactly `payload`.
    pub(super) async fn holds(found: GetResult, payload: &PutPayload) -> Option<PutResult> {
        if found.meta.size != payload.content_length() as u64 {
            return None;
        }
        let (e_tag, version) = (found.meta.e_tag.clone(), found.meta.version.clone());
        let stored = found.bytes().await.ok()?;
        let ours: Vec<u8> = payload
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .collect();
        (stored.as_ref() == ours.as_slice()).then(|| put_result(e_tag, version))
    }
}

/// What a refused leased put finds at its path.
pub(super) enum Refused {
    /// Our bytes: an earlier attempt of ours landed.
    Ours(PutResult),
    /// The object as the write's condition needs it (absent for a create, at the ETag
    /// named for an update).
    ConditionHolds,
    /// Anything else: another writer's object.
    Elsewhere,
}
