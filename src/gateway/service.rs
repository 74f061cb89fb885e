//! The S3 operations the gateway answers ([`s3s::S3`]), each in the module of its kind;
//! here the bucket's own, and what every operation checks first. Every operation s3s
//! routes and this does not implement answers `NotImplemented` (s3s's default).

use std::time::SystemTime;

use async_trait::async_trait;
use object_store::path::Path;
use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode as Code, S3Request, S3Response, S3Result};

use super::body::BodyBudget;
use super::keys::path_of;
use super::objects::{described, etag_out, timestamp};
use super::serve::LeaseWait;
use super::upstream::Upstream;

/// One bucket, served from its upstream store.
pub(super) struct Service {
    /// The bucket's name, as clients address it.
    pub(super) name: String,
    pub(super) upstream: Upstream,
    pub(super) bodies: BodyBudget,
    /// What GetBucketLocation answers (`None`: us-east-1).
    pub(super) region: Option<String>,
    /// When the gateway started (the bucket's creation date in ListBuckets).
    pub(super) started: SystemTime,
}

impl Service {
    /// Refuses a bucket other than the one served.
    pub(super) fn bucket(&self, bucket: &str) -> S3Result<()> {
        if bucket == self.name {
            Ok(())
        } else {
            Err(S3Error::with_message(
                Code::NoSuchBucket,
                format!("this gateway serves the bucket {}, not {bucket}", self.name),
            ))
        }
    }

    /// The path of `key` in the served `bucket`.
    pub(super) fn path(&self, bucket: &str, key: &str) -> S3Result<Path> {
        self.bucket(bucket)?;
        path_of(key)
    }
}

#[async_trait]
impl S3 for Service {
    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let (meta, range, attributes, body) = self.get(req, false).await?;
        let d = described(&attributes);
        let length = range.as_ref().map_or(meta.size, |r| r.end - r.start);
        Ok(S3Response::new(GetObjectOutput {
            body,
            content_length: i64::try_from(length).ok(),
            content_range: range.map(|r| {
                format!(
                    "bytes {}-{}/{}",
                    r.start,
                    r.end.saturating_sub(1),
                    meta.size
                )
            }),
            accept_ranges: Some("bytes".to_owned()),
            e_tag: meta.e_tag.as_deref().map(etag_out),
            last_modified: Some(timestamp(meta.last_modified)),
            content_type: d.content_type,
            cache_control: d.cache_control,
            content_disposition: d.content_disposition,
            content_encoding: d.content_encoding,
            content_language: d.content_language,
            metadata: d.metadata,
            ..Default::default()
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let req = req.map_input(|i| GetObjectInput {
            bucket: i.bucket,
            key: i.key,
            if_match: i.if_match,
            if_none_match: i.if_none_match,
            if_modified_since: i.if_modified_since,
            if_unmodified_since: i.if_unmodified_since,
            range: i.range,
            part_number: i.part_number,
            version_id: i.version_id,
            sse_customer_algorithm: i.sse_customer_algorithm,
            ..Default::default()
        });
        let (meta, range, attributes, _) = self.get(req, true).await?;
        let d = described(&attributes);
        let length = range.as_ref().map_or(meta.size, |r| r.end - r.start);
        Ok(S3Response::new(HeadObjectOutput {
            content_length: i64::try_from(length).ok(),
            accept_ranges: Some("bytes".to_owned()),
            e_tag: meta.e_tag.as_deref().map(etag_out),
            last_modified: Some(timestamp(meta.last_modified)),
            content_type: d.content_type,
            cache_control: d.cache_control,
            content_disposition: d.content_disposition,
            content_encoding: d.content_encoding,
            content_language: d.content_language,
            metadata: d.metadata,
            ..Default::default()
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let wait = req.extensions.get::<LeaseWait>().cloned();
        LeaseWait::measure(wait.as_ref(), self.put(req)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let wait = req.extensions.get::<LeaseWait>().cloned();
        LeaseWait::measure(wait.as_ref(), self.delete(req)).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let wait = req.extensions.get::<LeaseWait>().cloned();
        LeaseWait::measure(wait.as_ref(), self.delete_many(req)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let wait = req.extensions.get::<LeaseWait>().cloned();
        LeaseWait::measure(wait.as_ref(), self.copy(req)).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.list_v2(req).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        self.list_v1(req).await
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        self.list_versions(req).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.create_upload(req).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        Service::upload_part(self, req).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let wait = req.extensions.get::<LeaseWait>().cloned();
        LeaseWait::measure(wait.as_ref(), self.complete_upload(req)).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(key = %req.input.key))]
    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.abort_upload(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(
                self.region
                    .clone()
                    .unwrap_or_else(|| "us-east-1".to_owned()),
            ),
            ..Default::default()
        }))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(vec![Bucket {
                name: Some(self.name.clone()),
                creation_date: Some(Timestamp::from(self.started)),
                bucket_region: self.region.clone(),
            }]),
            ..Default::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: self.region.clone().map(BucketLocationConstraint::from),
        }))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        // Never enabled: S3 answers an unversioned bucket with an empty configuration.
        self.bucket(&req.input.bucket)?;
        Ok(S3Response::new(GetBucketVersioningOutput::default()))
    }
}
