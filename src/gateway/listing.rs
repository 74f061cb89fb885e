//! Listings: ListObjectsV2, ListObjects and ListObjectVersions (an unversioned bucket's
//! one version of each object), one page at a time.
//!
//! On S3, a page is S3's own (object_store's `PaginatedListStore`), its continuation
//! token passed through. Elsewhere a page is cut from a listing of the prefix's
//! directory, sorted: enough for the local stores the embedded default uses, and costly
//! on a large directory (each page lists it whole).

use futures::TryStreamExt;
use object_store::ObjectMeta;
use object_store::list::PaginatedListOptions;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::errors::{Missing, invalid, not_implemented, s3_error};
use super::keys::{listing_dir, url_encoded};
use super::objects::{etag_out, timestamp};
use super::service::Service;

/// The most keys a page holds, and the default, as in S3.
const MAX_KEYS: usize = 1000;

/// What a page asks for.
struct Ask {
    prefix: String,
    delimiter: Option<String>,
    /// List keys after this one (exclusive): a key, or a common prefix to step over.
    after: Option<String>,
    /// The upstream's continuation token (S3 only).
    token: Option<String>,
    max_keys: usize,
}

/// One page of a listing.
struct Page {
    objects: Vec<ObjectMeta>,
    prefixes: Vec<String>,
    /// Where the next page starts, if there is one: a continuation token for V2, the
    /// last key or common prefix listed for V1 and versions.
    next_token: Option<String>,
    last: Option<String>,
}

impl Page {
    fn truncated(&self) -> bool {
        self.next_token.is_some()
    }
}

impl Service {
    pub(super) async fn list_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        self.bucket(&input.bucket)?;
        let ask = Ask {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: delimiter(input.delimiter.clone())?,
            // S3 ignores StartAfter once a continuation token is given.
            after: input
                .continuation_token
                .is_none()
                .then(|| input.start_after.clone())
                .flatten(),
            token: input.continuation_token.clone(),
            max_keys: max_keys(input.max_keys)?,
        };
        let page = self.page(&ask).await?;
        let url = encoding(input.encoding_type.as_ref());
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(self.name.clone()),
            prefix: input.prefix.map(&url),
            delimiter: input.delimiter.map(&url),
            start_after: input.start_after.map(&url),
            continuation_token: input.continuation_token,
            max_keys: input.max_keys.or(Some(MAX_KEYS as i32)),
            key_count: i32::try_from(page.objects.len() + page.prefixes.len()).ok(),
            is_truncated: Some(page.truncated()),
            next_continuation_token: page.next_token.clone(),
            common_prefixes: common_prefixes(&page, &url),
            contents: Some(contents(&page, &url)),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    pub(super) async fn list_v1(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        self.bucket(&input.bucket)?;
        let ask = Ask {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: delimiter(input.delimiter.clone())?,
            after: input.marker.clone().filter(|m| !m.is_empty()),
            token: None,
            max_keys: max_keys(input.max_keys)?,
        };
        let page = self.marked_page(ask).await?;
        let url = encoding(input.encoding_type.as_ref());
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(self.name.clone()),
            prefix: input.prefix.map(&url),
            delimiter: input.delimiter.map(&url),
            marker: input.marker.map(&url),
            max_keys: input.max_keys.or(Some(MAX_KEYS as i32)),
            is_truncated: Some(page.truncated()),
            next_marker: page
                .truncated()
                .then(|| page.last.clone())
                .flatten()
                .map(&url),
            common_prefixes: common_prefixes(&page, &url),
            contents: Some(contents(&page, &url)),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    pub(super) async fn list_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        self.bucket(&input.bucket)?;
        if input
            .version_id_marker
            .as_deref()
            .is_some_and(|v| !v.is_empty() && v != "null")
        {
            return Err(not_implemented(
                "object versions (the bucket is unversioned)",
            ));
        }
        let ask = Ask {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: delimiter(input.delimiter.clone())?,
            after: input.key_marker.clone().filter(|m| !m.is_empty()),
            token: None,
            max_keys: max_keys(input.max_keys)?,
        };
        let page = self.marked_page(ask).await?;
        let url = encoding(input.encoding_type.as_ref());
        let versions = page
            .objects
            .iter()
            .map(|meta| ObjectVersion {
                key: Some(url(meta.location.to_string())),
                version_id: Some("null".to_owned()),
                is_latest: Some(true),
                e_tag: meta.e_tag.as_deref().map(etag_out),
                size: i64::try_from(meta.size).ok(),
                last_modified: Some(timestamp(meta.last_modified)),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect();
        let truncated = page.truncated();
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(self.name.clone()),
            prefix: input.prefix.map(&url),
            delimiter: input.delimiter.map(&url),
            key_marker: input.key_marker.map(&url),
            version_id_marker: input.version_id_marker,
            max_keys: input.max_keys.or(Some(MAX_KEYS as i32)),
            is_truncated: Some(truncated),
            next_key_marker: truncated.then(|| page.last.clone()).flatten().map(&url),
            next_version_id_marker: truncated.then(|| "null".to_owned()),
            common_prefixes: common_prefixes(&page, &url),
            versions: Some(versions),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    /// A page that starts after a marker (V1, versions): continued by the last item
    /// listed, never by an upstream token.
    async fn marked_page(&self, mut ask: Ask) -> S3Result<Page> {
        if self.upstream.pages.is_some()
            && let (Some(after), Some(delimiter)) = (&ask.after, &ask.delimiter)
            && after.ends_with(delimiter.as_str())
            && after.starts_with(ask.prefix.as_str())
        {
            // A marker that is a common prefix steps over every key beneath it: S3's
            // start-after would list them again (and the client would loop). A key
            // beneath it sorts before the prefix followed by the greatest character.
            ask.after = Some(format!("{after}\u{10FFFF}"));
        }
        self.page(&ask).await
    }

    async fn page(&self, ask: &Ask) -> S3Result<Page> {
        match &self.upstream.pages {
            Some(pages) => {
                let options = PaginatedListOptions {
                    offset: ask.after.clone(),
                    delimiter: ask.delimiter.clone().map(Into::into),
                    max_keys: Some(ask.max_keys),
                    page_token: ask.token.clone(),
                    ..Default::default()
                };
                let prefix = (!ask.prefix.is_empty()).then_some(ask.prefix.as_str());
                let listed = pages
                    .list_paginated(prefix, options)
                    .await
                    .map_err(|e| s3_error(e, &ask.prefix, Missing::Key))?;
                let prefixes: Vec<String> = listed
                    .result
                    .common_prefixes
                    .iter()
                    .map(|p| format!("{p}/"))
                    .collect();
                let last = last_listed(&listed.result.objects, &prefixes);
                Ok(Page {
                    objects: listed.result.objects,
                    prefixes,
                    next_token: listed.page_token,
                    last,
                })
            }
            None => self.cut_page(ask).await,
        }
    }

    /// A page cut from a listing of the prefix's whole directory.
    async fn cut_page(&self, ask: &Ask) -> S3Result<Page> {
        let dir = listing_dir(&ask.prefix);
        let mut all: Vec<ObjectMeta> = self
            .upstream
            .store
            .list(dir.as_ref())
            .try_collect()
            .await
            .map_err(|e| s3_error(e, &ask.prefix, Missing::Key))?;
        all.retain(|m| m.location.as_ref().starts_with(ask.prefix.as_str()));
        all.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
        let start = ask.token.as_deref().or(ask.after.as_deref());
        let mut page = Page {
            objects: Vec::new(),
            prefixes: Vec::new(),
            next_token: None,
            last: None,
        };
        let mut count = 0;
        for meta in all {
            let key = meta.location.as_ref();
            if let Some(start) = start
                && (key <= start
                    || ask
                        .delimiter
                        .as_deref()
                        .is_some_and(|d| start.ends_with(d) && key.starts_with(start)))
            {
                continue;
            }
            let common = ask.delimiter.as_deref().and_then(|d| {
                key[ask.prefix.len()..]
                    .find(d)
                    .map(|i| key[..ask.prefix.len() + i + d.len()].to_owned())
            });
            if let Some(common) = &common
                && page.prefixes.last() == Some(common)
            {
                continue;
            }
            if count == ask.max_keys {
                page.next_token = page.last.clone();
                break;
            }
            count += 1;
            match common {
                Some(common) => {
                    page.last = Some(common.clone());
                    page.prefixes.push(common);
                }
                None => {
                    page.last = Some(key.to_owned());
                    page.objects.push(meta);
                }
            }
        }
        Ok(page)
    }
}

/// The greater of the last object and the last common prefix listed.
fn last_listed(objects: &[ObjectMeta], prefixes: &[String]) -> Option<String> {
    let object = objects.last().map(|m| m.location.to_string());
    object.into_iter().chain(prefixes.last().cloned()).max()
}

fn delimiter(delimiter: Option<String>) -> S3Result<Option<String>> {
    match delimiter.as_deref() {
        None | Some("") => Ok(None),
        Some("/") => Ok(Some("/".to_owned())),
        Some(other) => Err(not_implemented(format!(
            "the delimiter {other:?} (object_store lists by '/')"
        ))),
    }
}

fn max_keys(max_keys: Option<i32>) -> S3Result<usize> {
    match max_keys {
        None => Ok(MAX_KEYS),
        Some(n) => usize::try_from(n)
            .map(|n| n.min(MAX_KEYS))
            .map_err(|_| invalid(format!("max-keys is {n}: give 0 to {MAX_KEYS}"))),
    }
}

/// How names are written in the answer: URL-encoded when the client asked for it
/// (boto3 always does).
fn encoding(encoding: Option<&EncodingType>) -> impl Fn(String) -> String + use<> {
    let url = encoding.is_some_and(|e| e.as_str() == EncodingType::URL);
    move |text: String| if url { url_encoded(&text) } else { text }
}

fn contents(page: &Page, url: &impl Fn(String) -> String) -> Vec<Object> {
    page.objects
        .iter()
        .map(|meta| Object {
            key: Some(url(meta.location.to_string())),
            size: i64::try_from(meta.size).ok(),
            e_tag: meta.e_tag.as_deref().map(etag_out),
            last_modified: Some(timestamp(meta.last_modified)),
            storage_class: Some(ObjectStorageClass::from_static(
                ObjectStorageClass::STANDARD,
            )),
            ..Default::default()
        })
        .collect()
}

fn common_prefixes(page: &Page, url: &impl Fn(String) -> String) -> Option<Vec<CommonPrefix>> {
    (!page.prefixes.is_empty()).then(|| {
        page.prefixes
            .iter()
            .map(|p| CommonPrefix {
                prefix: Some(url(p.clone())),
            })
            .collect()
    })
}
