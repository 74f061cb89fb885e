//! Multipart uploads across requests: CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload (with If-None-Match or If-Match guarded as a PutObject is),
//! AbortMultipartUpload. The upload's state is the store's, not the gateway's: any
//! gateway of a fleet can take any of its requests.

use object_store::multipart::PartId;
use object_store::{MultipartId, PutMultipartOptions};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode as Code, S3Request, S3Response, S3Result};

use super::body::checksums_of;
use super::errors::{Missing, not_implemented, s3_error};
use super::objects::{attributes_of, etag_out, refuse, stored_encoding, write_mode};
use super::service::Service;
use super::upstream::GuardedMultipart;

/// S3's greatest part number.
const MAX_PART: i32 = 10_000;

impl Service {
    fn multipart(&self) -> S3Result<&dyn GuardedMultipart> {
        self.upstream.multipart.as_deref().ok_or_else(|| {
            not_implemented(
                "multipart uploads on this upstream (an S3 or in-memory store has them)",
            )
        })
    }

    pub(super) async fn create_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        refuse(&[
            (
                input.server_side_encryption.is_some()
                    || input.ssekms_key_id.is_some()
                    || input.sse_customer_algorithm.is_some(),
                "encryption settings",
            ),
            (input.tagging.is_some(), "object tagging"),
            (input.object_lock_mode.is_some(), "object lock"),
            (
                input
                    .storage_class
                    .as_ref()
                    .is_some_and(|c| c.as_str() != StorageClass::STANDARD),
                "storage classes other than STANDARD",
            ),
        ])?;
        let attributes = attributes_of(
            input.content_type,
            input.cache_control,
            input.content_disposition,
            stored_encoding(input.content_encoding),
            input.content_language,
            input.metadata,
        );
        let options = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let id = self
            .multipart()?
            .create_multipart_opts(&path, options)
            .await
            .map_err(|e| s3_error(e, &input.key, Missing::Key))?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(self.name.clone()),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    pub(super) async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let mut input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        let index = part_index(input.part_number)?;
        if input.sse_customer_algorithm.is_some() {
            return Err(not_implemented("customer-provided encryption keys (SSE-C)"));
        }
        // Refused before the body is read, where the upstream has no multipart uploads.
        let multipart = self.multipart()?;
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
        let id: MultipartId = input.upload_id.clone();
        let part = multipart
            .put_part(&path, &id, index, body.payload.clone())
            .await
            .map_err(|e| s3_error(e, &input.key, Missing::Upload))?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(etag_out(&part.content_id)),
            ..Default::default()
        }))
    }

    pub(super) async fn complete_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        let mode = write_mode(input.if_none_match, input.if_match)?;
        let listed = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        if listed.is_empty() {
            return Err(S3Error::with_message(
                Code::MalformedXML,
                "CompleteMultipartUpload names no parts",
            ));
        }
        // object_store numbers parts by their place in the list: S3's part numbers
        // must then run 1, 2, 3, ... with none left out.
        let mut parts = Vec::with_capacity(listed.len());
        for (place, part) in listed.into_iter().enumerate() {
            let expected = i32::try_from(place + 1).unwrap_or(i32::MAX);
            if part.part_number != Some(expected) {
                return Err(S3Error::with_message(
                    Code::InvalidPartOrder,
                    format!(
                        "part {} is listed where part {expected} was expected: this gateway \
                         completes uploads whose parts are numbered 1, 2, 3, ... without gaps",
                        part.part_number
                            .map_or("(none)".to_owned(), |n| n.to_string())
                    ),
                ));
            }
            let Some(etag) = part.e_tag else {
                return Err(S3Error::with_message(
                    Code::InvalidPart,
                    format!("part {expected} names no ETag"),
                ));
            };
            parts.push(PartId {
                content_id: format!("\"{}\"", etag.value()),
            });
        }
        let id: MultipartId = input.upload_id.clone();
        let done = self
            .multipart()?
            .complete(&path, &id, parts, mode)
            .await
            .map_err(|e| s3_error(e, &input.key, Missing::Upload))?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(self.name.clone()),
            key: Some(input.key),
            e_tag: done.e_tag.as_deref().map(etag_out),
            ..Default::default()
        }))
    }

    pub(super) async fn abort_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let path = self.path(&input.bucket, &input.key)?;
        let id: MultipartId = input.upload_id.clone();
        self.multipart()?
            .abort_multipart(&path, &id)
            .await
            .map_err(|e| s3_error(e, &input.key, Missing::Upload))?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}

/// object_store's index of S3's part `number` (1 to 10,000).
fn part_index(number: i32) -> S3Result<usize> {
    if (1..=MAX_PART).contains(&number) {
        usize::try_from(number - 1).map_err(|_| part_out_of_range(number))
    } else {
        Err(part_out_of_range(number))
    }
}

fn part_out_of_range(number: i32) -> S3Error {
    S3Error::with_message(
        Code::InvalidArgument,
        format!("part number {number}: give 1 to {MAX_PART}"),
    )
}
