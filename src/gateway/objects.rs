//! Reads and writes of single objects: GetObject, HeadObject, PutObject, DeleteObject,
//! DeleteObjects, CopyObject. A conditional write is the `CommitStore`'s own (a create,
//! an update on an ETag, a copy-if-absent); the rest go straight through it.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use object_store::{
    Attribute, AttributeValue, Attributes, CopyMode, CopyOptions, GetOptions, GetRange, ObjectMeta,
    ObjectStoreExt, PutMode, PutOptions, UpdateVersion,
};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode as Code, S3Request, S3Response, S3Result};

use super::body::checksums_of;
use super::errors::{Missing, invalid, not_implemented, s3_error};
use super::service::Service;

/// The most keys one DeleteObjects may name, as in S3.
const MAX_DELETE_KEYS: usize = 1000;

impl Service {
    pub(super) async fn get(
        &self,
        req: S3Request<GetObjectInput>,
        head: bool,
    ) -> S3Result<(
        ObjectMeta,
        Option<std::ops::Range<u64>>,
        Attributes,
        Option<StreamingBlob>,
    )> {
        let input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        if input.part_number.is_some() {
            return Err(not_implemented(
                "reading one part of an object (partNumber)",
            ));
        }
        self.no_version(input.version_id.as_deref())?;
        if input.sse_customer_algorithm.is_some() {
            return Err(not_implemented("customer-provided encryption keys (SSE-C)"));
        }
        let conditions = ReadConditions {
            if_match: input.if_match.map(etag_condition),
            if_none_match: input.if_none_match.map(etag_condition),
            if_modified_since: input.if_modified_since.map(to_chrono),
            if_unmodified_since: input.if_unmodified_since.map(to_chrono),
        };
        let asked_range = input.range;
        let range = asked_range.map(|r| match r {
            Range::Int {
                first,
                last: Some(last),
            } => GetRange::Bounded(first..last.saturating_add(1)),
            Range::Int { first, last: None } => GetRange::Offset(first),
            Range::Suffix { length } => GetRange::Suffix(length),
        });
        let ranged = range.is_some();

        // The ETag conditions go to the store too (a 304 or 412 then costs no body); the
        // times are compared here only, in whole seconds as HTTP dates carry them (local
        // stores compare sub-second times, and an object's own Last-Modified would fail).
        let options = GetOptions {
            if_match: conditions.if_match.clone(),
            if_none_match: conditions.if_none_match.clone(),
            if_modified_since: None,
            if_unmodified_since: None,
            range,
            version: None,
            head,
            extensions: Default::default(),
        };
        let result = match self.upstream.store.get_opts(&path, options).await {
            Ok(result) => result,
            Err(e) => {
                let if_none_match = conditions.if_none_match.as_deref();
                return Err(self
                    .read_error(e, &path, &input.key, asked_range, if_none_match)
                    .await);
            }
        };
        // Some stores ignore a read's conditions (s3rver): check them here as well, on
        // the version the store answered with.
        conditions.check(&result.meta, &input.key)?;
        let (meta, attributes) = (result.meta.clone(), result.attributes.clone());
        let range = ranged.then(|| result.range.clone());
        let body = (!head)
            .then(|| StreamingBlob::wrap(sync_wrapper::SyncStream::new(result.into_stream())));
        Ok((meta, range, attributes, body))
    }

    pub(super) async fn put(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let mut input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        refuse_unsupported_put(&input)?;
        let mode = write_mode(input.if_none_match.take(), input.if_match.take())?;
        let attributes = attributes_of(
            input.content_type.take(),
            input.cache_control.take(),
            input.content_disposition.take(),
            stored_encoding(input.content_encoding.take()),
            input.content_language.take(),
            input.metadata.take(),
        );
        let checksums = checksums_of!(input, req);
        let body = self
            .bodies
            .read(
                input.body.take(),
                input.content_length,
                input.content_md5.as_deref(),
                checksums,
            )
            .await?;
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let put = self
            .upstream
            .store
            .put_opts(&path, body.payload.clone(), options)
            .await
            .map_err(|e| s3_error(e, &input.key, Missing::Key))?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: put.e_tag.as_deref().map(etag_out),
            ..Default::default()
        }))
    }

    pub(super) async fn delete(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        self.no_version(input.version_id.as_deref())?;
        if input.if_match.is_some()
            || input.if_match_last_modified_time.is_some()
            || input.if_match_size.is_some()
        {
            return Err(not_implemented(
                "conditional deletes (If-Match on DeleteObject)",
            ));
        }
        match self.upstream.store.delete(&path).await {
            // S3 answers a delete of a missing key as done.
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                Ok(S3Response::new(DeleteObjectOutput::default()))
            }
            Err(e) => Err(s3_error(e, &input.key, Missing::Key)),
        }
    }

    pub(super) async fn delete_many(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        self.bucket(&input.bucket)?;
        let objects = input.delete.objects;
        if objects.len() > MAX_DELETE_KEYS {
            return Err(S3Error::with_message(
                Code::MalformedXML,
                format!(
                    "{} keys: a DeleteObjects names at most {MAX_DELETE_KEYS}",
                    objects.len()
                ),
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        let mut paths = Vec::new();
        for object in objects {
            let checked = self
                .no_version(object.version_id.as_deref())
                .and_then(|()| super::keys::path_of(&object.key));
            match checked {
                Ok(path) => paths.push((object.key, path)),
                Err(e) => errors.push(key_error(object.key, object.version_id, &e)),
            }
        }
        let keys: Vec<String> = paths.iter().map(|(k, _)| k.clone()).collect();
        let stream = futures::stream::iter(paths.into_iter().map(|(_, p)| Ok(p))).boxed();
        // delete_stream answers in the order asked.
        let answers: Vec<_> = self.upstream.store.delete_stream(stream).collect().await;
        for (key, answer) in keys.into_iter().zip(answers) {
            match answer {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(key),
                            ..Default::default()
                        });
                    }
                }
                Err(e) => {
                    let e = s3_error(e, &key, Missing::Key);
                    errors.push(key_error(key, None, &e));
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    pub(super) async fn copy(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let headers = req.headers;
        let input = req.input;
        let to = self.path(&input.bucket, &input.key)?;
        let (from_key, from) = match &input.copy_source {
            CopySource::Bucket {
                bucket,
                key,
                version_id,
            } => {
                if **bucket != *self.name {
                    return Err(not_implemented(format!(
                        "copies from another bucket ({bucket}); this gateway serves {}",
                        self.name
                    )));
                }
                self.no_version(version_id.as_deref())?;
                (key.to_string(), super::keys::path_of(key)?)
            }
            _ => return Err(not_implemented("copies from an access point or outpost")),
        };
        if input.copy_source_if_match.is_some()
            || input.copy_source_if_none_match.is_some()
            || input.copy_source_if_modified_since.is_some()
            || input.copy_source_if_unmodified_since.is_some()
        {
            return Err(not_implemented(
                "conditions on a copy's source (x-amz-copy-source-if-*)",
            ));
        }
        if input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() != MetadataDirective::COPY)
        {
            return Err(not_implemented(
                "MetadataDirective REPLACE (a copy keeps the source's metadata)",
            ));
        }
        if input.server_side_encryption.is_some() || input.tagging.is_some() {
            return Err(not_implemented("encryption or tagging settings on a copy"));
        }
        // s3s reads no condition on the copy's target: S3's are the request's own
        // If-None-Match (copy-if-absent) and If-Match headers.
        let mode = match (
            headers.get(http::header::IF_NONE_MATCH),
            headers.get(http::header::IF_MATCH),
        ) {
            (None, None) => CopyMode::Overwrite,
            (Some(v), None) if v.as_bytes().trim_ascii() == b"*" => CopyMode::Create,
            (Some(_), None) => {
                return Err(not_implemented("If-None-Match other than * on CopyObject"));
            }
            (_, Some(_)) => return Err(not_implemented("If-Match on CopyObject")),
        };
        if matches!(mode, CopyMode::Create) {
            // Under the lease, a copy whose source is missing fails after it was sent, and
            // so as a write that may have applied (500), holding the lease until it
            // expires. Asked first, a missing source is S3's clean 404. (A source deleted
            // between the two is still answered 500.)
            self.upstream
                .store
                .head(&from)
                .await
                .map_err(|e| s3_error(e, &from_key, Missing::Key))?;
        }
        let options = CopyOptions {
            mode,
            ..CopyOptions::default()
        };
        self.upstream
            .store
            .copy_opts(&from, &to, options)
            .await
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => s3_error(e, &from_key, Missing::Key),
                e => s3_error(e, &input.key, Missing::Key),
            })?;
        // S3 answers a copy with the new object's ETag and time; a HEAD reads them (a
        // write racing it may have replaced the object since: the copy itself stands).
        let target = self.upstream.store.head(&to).await.ok();
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: target
                    .as_ref()
                    .and_then(|m| m.e_tag.as_deref())
                    .map(etag_out),
                last_modified: target.map(|m| timestamp(m.last_modified)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    /// Refuses a version other than `null` (what S3 names the one version of an object
    /// in an unversioned bucket).
    pub(super) fn no_version(&self, version: Option<&str>) -> S3Result<()> {
        match version {
            None | Some("null") => Ok(()),
            Some(_) => Err(not_implemented(
                "object versions (the bucket is unversioned)",
            )),
        }
    }
}

/// One key's failure in a DeleteObjects answer.
fn key_error(key: String, version_id: Option<String>, e: &S3Error) -> Error {
    Error {
        code: Some(e.code().as_str().to_owned()),
        key: Some(key),
        message: e.message().map(str::to_owned),
        version_id,
    }
}

/// A write's condition: If-None-Match `*` is a create, If-Match an update of that ETag.
pub(super) fn write_mode(
    if_none_match: Option<ETagCondition>,
    if_match: Option<ETagCondition>,
) -> S3Result<PutMode> {
    match (if_none_match, if_match) {
        (None, None) => Ok(PutMode::Overwrite),
        (Some(ETagCondition::Any), None) => Ok(PutMode::Create),
        (None, Some(ETagCondition::ETag(etag))) => Ok(PutMode::Update(UpdateVersion {
            e_tag: Some(quoted(etag.value())),
            version: None,
        })),
        (Some(ETagCondition::ETag(_)), None) => Err(not_implemented(
            "If-None-Match with an ETag on a write (only * is S3's)",
        )),
        (None, Some(ETagCondition::Any)) => Err(not_implemented("If-Match: * on a write")),
        (Some(_), Some(_)) => Err(invalid(
            "a write carries If-None-Match or If-Match, not both",
        )),
    }
}

/// Refuses what a PutObject asks for that the gateway would otherwise drop silently.
fn refuse_unsupported_put(input: &PutObjectInput) -> S3Result<()> {
    let refused = [
        (
            input.server_side_encryption.is_some() || input.ssekms_key_id.is_some(),
            "server-side encryption settings",
        ),
        (
            input.sse_customer_algorithm.is_some(),
            "customer-provided encryption keys (SSE-C)",
        ),
        (input.tagging.is_some(), "object tagging"),
        (
            input.object_lock_mode.is_some() || input.object_lock_legal_hold_status.is_some(),
            "object lock",
        ),
        (
            input.website_redirect_location.is_some(),
            "website redirects",
        ),
        (
            input.write_offset_bytes.is_some(),
            "appends (x-amz-write-offset-bytes)",
        ),
        (
            input.grant_full_control.is_some()
                || input.grant_read.is_some()
                || input.grant_write_acp.is_some()
                || input.grant_read_acp.is_some(),
            "ACL grants",
        ),
        (
            input
                .storage_class
                .as_ref()
                .is_some_and(|c| c.as_str() != StorageClass::STANDARD),
            "storage classes other than STANDARD",
        ),
        (
            input.acl.as_ref().is_some_and(|a| {
                ![
                    ObjectCannedACL::PRIVATE,
                    ObjectCannedACL::BUCKET_OWNER_FULL_CONTROL,
                ]
                .contains(&a.as_str())
            }),
            "canned ACLs other than private",
        ),
    ];
    refuse(&refused)
}

/// Refuses the first of `asks` that the request asks for (`true`), naming it: what the
/// gateway would otherwise drop silently.
pub(super) fn refuse(asks: &[(bool, &str)]) -> S3Result<()> {
    match asks.iter().find(|(asked, _)| *asked) {
        Some((_, what)) => Err(not_implemented(what)),
        None => Ok(()),
    }
}

/// The content encoding to store: the request's, without `aws-chunked` (which names how
/// the request's body was framed, not the object; S3 drops it too).
pub(super) fn stored_encoding(encoding: Option<String>) -> Option<String> {
    let kept: Vec<&str> = encoding
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The attributes a write stores with the object.
pub(super) fn attributes_of(
    content_type: Option<String>,
    cache_control: Option<String>,
    content_disposition: Option<String>,
    content_encoding: Option<String>,
    content_language: Option<String>,
    metadata: Option<Metadata>,
) -> Attributes {
    let mut attributes = Attributes::new();
    let fixed = [
        (Attribute::ContentType, content_type),
        (Attribute::CacheControl, cache_control),
        (Attribute::ContentDisposition, content_disposition),
        (Attribute::ContentEncoding, content_encoding),
        (Attribute::ContentLanguage, content_language),
    ];
    for (attribute, value) in fixed {
        if let Some(value) = value {
            attributes.insert(attribute, AttributeValue::from(value));
        }
    }
    for (name, value) in metadata.unwrap_or_default() {
        attributes.insert(
            Attribute::Metadata(name.into()),
            AttributeValue::from(value),
        );
    }
    attributes
}

/// The stored attributes, as a read's answer carries them.
pub(super) struct Described {
    pub(super) content_type: Option<String>,
    pub(super) cache_control: Option<String>,
    pub(super) content_disposition: Option<String>,
    pub(super) content_encoding: Option<String>,
    pub(super) content_language: Option<String>,
    pub(super) metadata: Option<Metadata>,
}

pub(super) fn described(attributes: &Attributes) -> Described {
    let mut d = Described {
        content_type: None,
        cache_control: None,
        content_disposition: None,
        content_encoding: None,
        content_language: None,
        metadata: None,
    };
    for (attribute, value) in attributes {
        let value = value.as_ref().to_owned();
        match attribute {
            Attribute::ContentType => d.content_type = Some(value),
            Attribute::CacheControl => d.cache_control = Some(value),
            Attribute::ContentDisposition => d.content_disposition = Some(value),
            Attribute::ContentEncoding => d.content_encoding = Some(value),
            Attribute::ContentLanguage => d.content_language = Some(value),
            Attribute::Metadata(name) => {
                d.metadata
                    .get_or_insert_with(Default::default)
                    .insert(name.to_string(), value);
            }
            _ => {}
        }
    }
    d
}

/// A read's conditions, checked against the version the store answered with.
struct ReadConditions {
    if_match: Option<String>,
    if_none_match: Option<String>,
    if_modified_since: Option<DateTime<Utc>>,
    if_unmodified_since: Option<DateTime<Utc>>,
}

impl ReadConditions {
    /// HTTP's order (RFC 9110 13.2.2): If-Match, else If-Unmodified-Since; then
    /// If-None-Match, else If-Modified-Since. Times compare in whole seconds, as HTTP
    /// dates carry them.
    fn check(&self, meta: &ObjectMeta, key: &str) -> S3Result<()> {
        let matches = |condition: &str| etag_matches(meta, Some(condition));
        let seconds = meta.last_modified.timestamp();
        let failed = || {
            S3Error::with_message(
                Code::PreconditionFailed,
                format!("{key}: at least one of the preconditions you specified did not hold"),
            )
        };
        match (&self.if_match, self.if_unmodified_since) {
            (Some(condition), _) if !matches(condition) => return Err(failed()),
            (None, Some(since)) if seconds > since.timestamp() => return Err(failed()),
            _ => {}
        }
        let unchanged = match (&self.if_none_match, self.if_modified_since) {
            (Some(condition), _) => matches(condition),
            (None, Some(since)) => seconds <= since.timestamp(),
            (None, None) => false,
        };
        if unchanged {
            return Err(not_modified(meta));
        }
        Ok(())
    }
}

impl Service {
    /// A read's failure. A 304 carries the object's validators. object_store has no variant for a range past the end (S3
    /// answers 416, the local stores a generic error): a ranged read that failed
    /// otherwise unexplained asks the object's size, and answers `InvalidRange` if the
    /// range cannot be satisfied.
    async fn read_error(
        &self,
        e: object_store::Error,
        path: &object_store::path::Path,
        key: &str,
        range: Option<Range>,
        if_none_match: Option<&str>,
    ) -> S3Error {
        if let object_store::Error::NotModified { .. } = &e {
            // The store answered 304 itself: its validators, read again, if they are
            // still the version it meant (an object replaced since must not lend a stale
            // body its new ETag).
            return match self.upstream.store.head(path).await {
                Ok(meta) if etag_matches(&meta, if_none_match) => not_modified(&meta),
                _ => S3Error::new(Code::NotModified),
            };
        }
        if let (Some(range), object_store::Error::Generic { .. }) = (range, &e)
            && let Ok(meta) = self.upstream.store.head(path).await
            // S3 satisfies no range of an empty object (a suffix range checks as 0..0).
            && (meta.size == 0 || range.check(meta.size).is_err())
        {
            return S3Error::with_message(
                Code::InvalidRange,
                format!("{key}: the requested range is not satisfiable"),
            );
        }
        s3_error(e, key, Missing::Key)
    }
}

/// Whether `meta`'s ETag is the one `condition` names (`*`: any).
fn etag_matches(meta: &ObjectMeta, condition: Option<&str>) -> bool {
    let etag = meta.e_tag.as_deref().map(crate::lease::bare_etag);
    condition.is_some_and(|c| c == "*" || etag == Some(crate::lease::bare_etag(c)))
}

/// A 304, carrying the validators a cache needs.
fn not_modified(meta: &ObjectMeta) -> S3Error {
    let mut e = S3Error::new(Code::NotModified);
    let mut headers = http::HeaderMap::new();
    if let Some(etag) = meta.e_tag.as_deref()
        && let Ok(value) = http::HeaderValue::from_str(&quoted(crate::lease::bare_etag(etag)))
    {
        headers.insert(http::header::ETAG, value);
    }
    let date = meta
        .last_modified
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    if let Ok(value) = http::HeaderValue::from_str(&date) {
        headers.insert(http::header::LAST_MODIFIED, value);
    }
    e.set_headers(headers);
    e
}

/// A condition's ETag as object_store names it (`*` for any).
fn etag_condition(condition: ETagCondition) -> String {
    match condition {
        ETagCondition::Any => "*".to_owned(),
        ETagCondition::ETag(etag) => quoted(etag.value()),
    }
}

/// `value` in quotes, as S3 writes ETags and object_store hands them on.
fn quoted(value: &str) -> String {
    format!("\"{value}\"")
}

/// An ETag as the store gave it, for an answer.
pub(super) fn etag_out(etag: &str) -> ETag {
    ETag::Strong(crate::lease::bare_etag(etag).to_owned())
}

/// A time for an answer.
pub(super) fn timestamp(time: DateTime<Utc>) -> Timestamp {
    Timestamp::from(SystemTime::from(time))
}

/// A time from a request.
fn to_chrono(time: Timestamp) -> DateTime<Utc> {
    let time: time::OffsetDateTime = time.into();
    let nanos = time.unix_timestamp_nanos();
    DateTime::from_timestamp_nanos(i64::try_from(nanos).unwrap_or(if nanos < 0 {
        i64::MIN
    } else {
        i64::MAX
    }))
}
