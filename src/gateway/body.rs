//! Request bodies, read whole before anything is written upstream, within a memory budget
//! shared by every request of the gateway.
//!
//! object_store writes an object (or a part) from a `PutPayload` held in memory, and s3s
//! checks a body's signature only once the body has been read to its end: reading it
//! whole first means a body whose signature fails, or that ends short, writes nothing.
//! The budget bounds what all bodies in flight hold together: a request waits for its
//! share before reading, and one larger than the whole budget is refused
//! (`EntityTooLarge`; clients send such objects as multipart uploads).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::PutPayload;
use s3s::dto::StreamingBlob;
use s3s::{S3Error, S3ErrorCode as Code};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget counts in units of this many bytes (a semaphore counts in `u32`).
const UNIT: u64 = 1024;

/// The share of the whole budget one body may take: a few large bodies cannot then
/// starve every small one (a commit) behind them.
const LARGEST_SHARE: u64 = 4;

/// The slowest a body may arrive, on average, before its request fails: with the idle
/// limit, this keeps a body that trickles in from holding its share for ever.
const MIN_BYTES_PER_SEC: u64 = 64 * 1024;

/// How long a body waits for its share of the budget before the request is refused with
/// `SlowDown`: shorter than clients' own timeouts (object_store's 30 s), so that the
/// refusal reaches a client still waiting, which retries.
const SHARE_WAIT: Duration = Duration::from_secs(10);

/// Memory for request bodies, shared by every request.
#[derive(Debug, Clone)]
pub(super) struct BodyBudget {
    units: Arc<Semaphore>,
    /// The largest body taken: a quarter of the budget.
    max_bytes: u64,
    /// How long a body may send nothing before the request fails.
    idle: Duration,
}

/// The checksums a client sent for a body (`x-amz-checksum-*` headers), base64, and
/// where its trailer (if any) will name one once the body is read.
#[derive(Default)]
pub(super) struct Checksums {
    pub(super) crc32: Option<String>,
    pub(super) crc32c: Option<String>,
    pub(super) crc64nvme: Option<String>,
    pub(super) sha1: Option<String>,
    pub(super) sha256: Option<String>,
    /// The trailer the request said it would send (`x-amz-trailer`).
    pub(super) declared: Option<String>,
    pub(super) trailers: Option<s3s::TrailingHeaders>,
}

/// A body read whole, and its share of the budget (given back when dropped).
pub(super) struct Body {
    pub(super) payload: PutPayload,
    _share: Option<OwnedSemaphorePermit>,
}

impl BodyBudget {
    pub(super) fn new(max_bytes: u64, idle: Duration) -> Self {
        let units = u32::try_from(max_bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
        Self {
            units: Arc::new(Semaphore::new(units as usize)),
            max_bytes: u64::from(units) * UNIT / LARGEST_SHARE,
            idle,
        }
    }

    /// The largest body taken.
    pub(super) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Reads `body`, which must be `length` bytes long (the decoded length, for
    /// aws-chunked bodies), and checks `content_md5` if given.
    pub(super) async fn read(
        &self,
        body: Option<StreamingBlob>,
        length: Option<i64>,
        content_md5: Option<&str>,
        checksums: Checksums,
    ) -> Result<Body, S3Error> {
        let Some(mut body) = body else {
            return Ok(Body {
                payload: PutPayload::new(),
                _share: None,
            });
        };
        let length = match length {
            Some(n) => u64::try_from(n).map_err(|_| {
                S3Error::with_message(Code::InvalidArgument, "Content-Length is negative")
            })?,
            None => {
                return Err(S3Error::with_message(
                    Code::MissingContentLength,
                    "send a Content-Length (or x-amz-decoded-content-length with aws-chunked)",
                ));
            }
        };
        if length > self.max_bytes {
            return Err(S3Error::with_message(
                Code::EntityTooLarge,
                format!(
                    "the body is {length} bytes; this gateway takes single requests of up to \
                     {} bytes (a quarter of its --max-body-memory-mib): upload larger objects \
                     in parts (multipart upload)",
                    self.max_bytes
                ),
            ));
        }
        let units = u32::try_from(length.div_ceil(UNIT)).unwrap_or(u32::MAX);
        let share = tokio::time::timeout(SHARE_WAIT, self.units.clone().acquire_many_owned(units))
            .await
            .map_err(|_| {
                S3Error::with_message(
                    Code::SlowDown,
                    "the gateway's memory for request bodies is taken by others: retry",
                )
            })?
            .map_err(|_| S3Error::with_message(Code::ServiceUnavailable, "shutting down"))?;
        let started = tokio::time::Instant::now();
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut read = 0u64;
        loop {
            // The time allowed grows only with what has come: a body that sends a byte
            // now and then cannot keep its share.
            let earned = Duration::from_secs_f64(read as f64 / MIN_BYTES_PER_SEC as f64);
            let wait = (started + self.idle + earned).min(tokio::time::Instant::now() + self.idle);
            let next = tokio::time::timeout_at(wait, body.next())
                .await
                .map_err(|_| {
                    S3Error::with_message(
                        Code::RequestTimeout,
                        format!(
                            "the body came too slowly ({read} of {length} bytes read): it may \
                             pause up to {} s and must average {} KiB/s",
                            self.idle.as_secs(),
                            MIN_BYTES_PER_SEC / 1024
                        ),
                    )
                })?;
            match next {
                None => break,
                Some(Ok(chunk)) => {
                    read += chunk.len() as u64;
                    if read > length {
                        return Err(S3Error::with_message(
                            Code::IncompleteBody,
                            format!("the body is longer than its declared {length} bytes"),
                        ));
                    }
                    chunks.push(chunk);
                }
                Some(Err(e)) => return Err(body_error(&*e)),
            }
        }
        if read != length {
            return Err(S3Error::with_message(
                Code::IncompleteBody,
                format!("the body ended after {read} of its declared {length} bytes"),
            ));
        }
        if let Some(expected) = content_md5 {
            check_md5(&chunks, expected)?;
        }
        checksums.check(&chunks)?;
        Ok(Body {
            payload: chunks.into_iter().collect(),
            _share: Some(share),
        })
    }
}

/// The error for a body stream that failed: s3s's body errors are private types, known
/// only by their text (a payload hash or chunk signature that does not match).
fn body_error(e: &(dyn std::error::Error + Send + Sync)) -> S3Error {
    let text = e.to_string();
    if text.contains("Sha256Mismatch") {
        // AWS's code for it, which s3s does not list.
        let mut e = S3Error::with_message(
            Code::Custom("XAmzContentSHA256Mismatch".into()),
            "the body does not match its signed x-amz-content-sha256",
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        e
    } else if text.contains("Signature") || text.contains("signature") {
        S3Error::with_message(
            Code::SignatureDoesNotMatch,
            "a chunk's signature does not match",
        )
    } else {
        S3Error::with_message(
            Code::IncompleteBody,
            format!("the body could not be read: {text}"),
        )
    }
}

/// Refuses the body unless its MD5 is `expected` (base64, as Content-MD5 carries it).
fn check_md5(chunks: &[Bytes], expected: &str) -> Result<(), S3Error> {
    use base64::Engine;
    use md5::Digest;
    let Ok(expected) = base64::engine::general_purpose::STANDARD.decode(expected.trim()) else {
        return Err(S3Error::with_message(
            Code::InvalidDigest,
            "Content-MD5 is not base64",
        ));
    };
    let mut md5 = md5::Md5::new();
    for chunk in chunks {
        md5.update(chunk);
    }
    if md5.finalize().as_slice() == expected.as_slice() {
        Ok(())
    } else {
        Err(S3Error::with_message(
            Code::BadDigest,
            "the Content-MD5 you specified did not match what was received",
        ))
    }
}

/// The checksums a request's input names (PutObject's and UploadPart's have the same
/// fields), taken out of it, and its trailer.
macro_rules! checksums_of {
    ($input:expr, $req:expr) => {
        $crate::gateway::body::Checksums {
            crc32: $input.checksum_crc32.take(),
            crc32c: $input.checksum_crc32c.take(),
            crc64nvme: $input.checksum_crc64nvme.take(),
            sha1: $input.checksum_sha1.take(),
            sha256: $input.checksum_sha256.take(),
            declared: $req
                .headers
                .get("x-amz-trailer")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_ascii_lowercase()),
            trailers: $req.trailing_headers,
        }
    };
}
pub(super) use checksums_of;

impl Checksums {
    /// Refuses the body unless every checksum the client sent for it (in a header, or in
    /// the trailer now that the body has been read) is the body's: s3s checks none.
    fn check(self, chunks: &[Bytes]) -> Result<(), S3Error> {
        use s3s::crypto::Checksum as _;
        let Checksums {
            mut crc32,
            mut crc32c,
            mut crc64nvme,
            mut sha1,
            mut sha256,
            declared,
            trailers,
        } = self;
        let trailers = trailers.and_then(|t| t.take());
        if let Some(declared) = &declared
            && !trailers
                .as_ref()
                .is_some_and(|t| t.contains_key(declared.as_str()))
        {
            // A body cut off before its last chunk ends cleanly in s3s: the trailer it
            // promised is what shows it did not come whole.
            return Err(S3Error::with_message(
                Code::IncompleteBody,
                format!("the body ended without the {declared} trailer it declared"),
            ));
        }
        if let Some(trailers) = trailers {
            let named = |name: &str| {
                trailers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            crc32 = crc32.or_else(|| named("x-amz-checksum-crc32"));
            crc32c = crc32c.or_else(|| named("x-amz-checksum-crc32c"));
            crc64nvme = crc64nvme.or_else(|| named("x-amz-checksum-crc64nvme"));
            sha1 = sha1.or_else(|| named("x-amz-checksum-sha1"));
            sha256 = sha256.or_else(|| named("x-amz-checksum-sha256"));
        }
        let mut hasher = s3s::checksum::ChecksumHasher {
            crc32: crc32.is_some().then(s3s::crypto::Crc32::new),
            crc32c: crc32c.is_some().then(s3s::crypto::Crc32c::new),
            sha1: sha1.is_some().then(s3s::crypto::Sha1::new),
            sha256: sha256.is_some().then(s3s::crypto::Sha256::new),
            crc64nvme: crc64nvme.is_some().then(s3s::crypto::Crc64Nvme::new),
        };
        for chunk in chunks {
            hasher.update(chunk);
        }
        let got = hasher.finalize();
        let pairs = [
            ("CRC32", crc32, got.checksum_crc32),
            ("CRC32C", crc32c, got.checksum_crc32c),
            ("CRC64NVME", crc64nvme, got.checksum_crc64nvme),
            ("SHA1", sha1, got.checksum_sha1),
            ("SHA256", sha256, got.checksum_sha256),
        ];
        for (name, expected, got) in pairs {
            if let Some(expected) = expected
                && Some(expected.trim()) != got.as_deref()
            {
                return Err(S3Error::with_message(
                    Code::BadDigest,
                    format!("the {name} checksum you specified did not match what was received"),
                ));
            }
        }
        Ok(())
    }
}
