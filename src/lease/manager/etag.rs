//! The forms of an ETag: as a lease key, as a store compares it, bare.

/// Whether two ETags name the same version, whatever their quoting or weak mark: a
/// store's answers to a PUT and to a HEAD need not write them alike. The one comparison
/// of ETags in the crate (the queue's and `CommitStore`'s checks alike).
pub(crate) fn same_etag(a: &str, b: &str) -> bool {
    bare_etag(a) == bare_etag(b)
}

/// The form of `etag` a lease key names: quoted, without a weak mark, as S3 writes ETags
/// and object_store hands them on (so object_store 0.12.5's keys, which take the ETag
/// as given, are the same on a store that follows S3); `*` (a create) as it is.
pub(crate) fn lease_etag(etag: &str) -> String {
    if etag == crate::lease::CREATE_ETAG {
        etag.to_owned()
    } else {
        format!("\"{}\"", bare_etag(etag))
    }
}

/// `etag` without its weak mark and quotes.
pub(crate) fn bare_etag(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}
