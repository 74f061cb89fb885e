//! S3 keys as object_store paths. object_store names objects by `Path`, which has no
//! empty segment, no `.` or `..` segment and no leading or trailing `/`; an S3 key that a
//! `Path` cannot name exactly is refused, never stored under another name.

use object_store::path::Path;
use s3s::{S3Error, S3ErrorCode};

/// The path for `key`, or `InvalidArgument` naming why the gateway cannot store it.
pub(super) fn path_of(key: &str) -> Result<Path, S3Error> {
    let refuse = |why: &str| {
        S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!(
                "key {key:?} cannot be stored through this gateway: {why} (object_store names \
                 objects by paths of non-empty segments separated by single slashes)"
            ),
        )
    };
    if key.is_empty() {
        return Err(refuse("it is empty"));
    }
    match Path::parse(key) {
        // Path::parse drops a leading or trailing slash: a key it changes is refused.
        Ok(path) if path.as_ref() == key => Ok(path),
        Ok(_) => Err(refuse("it starts or ends with '/'")),
        Err(e) => Err(refuse(&e.to_string())),
    }
}

/// A listing's prefix as the directory object_store lists and the text a key must start
/// with: `a/b/c` lists directory `a/b` and keeps keys starting with `a/b/c`.
pub(super) fn listing_dir(prefix: &str) -> Option<Path> {
    let dir = prefix.rsplit_once('/').map(|(dir, _)| dir)?;
    // Parsed, not built from parts: a part would be percent-encoded (`%20` listed as
    // `%2520`), and the keys under it never found.
    Path::parse(dir.trim_matches('/'))
        .ok()
        .filter(|dir| !dir.as_ref().is_empty())
}

/// `text` as S3 writes it with `encoding-type=url`: percent-encoded but for unreserved
/// characters and `/` (clients decode it with a plain URL unquote).
pub(super) fn url_encoded(text: &str) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~')
        .remove(b'/');
    utf8_percent_encode(text, KEEP).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_a_path_names_exactly_are_taken_and_the_rest_refused() {
        assert_eq!(path_of("a/b.json").unwrap().as_ref(), "a/b.json");
        assert_eq!(
            path_of("_delta_log/00.json").unwrap().as_ref(),
            "_delta_log/00.json"
        );
        for bad in ["", "/a", "a/", "a//b", "a/./b", "a/../b", ".."] {
            let e = path_of(bad).unwrap_err();
            assert_eq!(*e.code(), S3ErrorCode::InvalidArgument, "{bad:?}");
            assert!(e.message().unwrap().contains("cannot be stored"), "{bad:?}");
        }
    }

    #[test]
    fn a_prefix_lists_its_directory() {
        assert_eq!(listing_dir("a/b/c"), Some(Path::from("a/b")));
        assert_eq!(listing_dir("a/b/"), Some(Path::from("a/b")));
        assert_eq!(listing_dir("abc"), None);
        assert_eq!(listing_dir(""), None);
        // A Delta partition directory, as deltalake names it.
        assert_eq!(
            listing_dir("t/d=2024-01-01%2012%3A00/f").unwrap().as_ref(),
            "t/d=2024-01-01%2012%3A00"
        );
    }

    #[test]
    fn url_encoding_keeps_slashes_and_unreserved() {
        assert_eq!(url_encoded("a b/c+d~e.f"), "a%20b/c%2Bd~e.f");
        assert_eq!(url_encoded("é"), "%C3%A9");
    }
}
