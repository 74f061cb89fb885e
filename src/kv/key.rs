//! Keys: which the store accepts, and where each one lives in a table of folders.
//!
//! A key is bytes. `/` separates folders, as in Vault: `a/b/c` is the key `c` in folder
//! `a/b/`, which is the folder `b/` in folder `a/`, which is in the root folder (the empty
//! prefix). Empty segments are segments like any other: `/x` is `x` in folder `/`, and
//! `a//b` is `b` in folder `a//` (folder `/` of `a/`). A key may not end in `/`, since
//! that names a folder, and may not be empty.

use super::KvError;

/// DynamoDB's limit on a partition key value, in bytes.
pub(crate) const PARTITION_KEY_MAX: usize = 2048;
/// DynamoDB's limit on a sort key value, in bytes.
pub(crate) const SORT_KEY_MAX: usize = 1024;
/// DynamoDB's limit on a transaction's items.
const TRANSACTION_ITEMS_MAX: usize = 100;

/// The longest segment (the part between two `/`) a key may have: a folder's record is
/// named by its segment, a `/` and one byte of counter shard, within DynamoDB's sort key
/// limit.
pub const MAX_SEGMENT_LEN: usize = SORT_KEY_MAX - 2;

/// The most folders a key may sit in: creating a key updates its item and one counter of
/// each folder in one transaction, within DynamoDB's 100 items.
pub const MAX_DEPTH: usize = TRANSACTION_ITEMS_MAX - 1;

/// The longest folder part (everything up to the last `/`) a key may have under a
/// namespace of `namespace_len` bytes: the partition key is the namespace, a zero byte
/// and the folder.
pub fn max_folder_len(namespace_len: usize) -> usize {
    PARTITION_KEY_MAX.saturating_sub(namespace_len + 1)
}

/// A key as text for messages: printable ASCII as is, anything else escaped.
pub fn display(key: &[u8]) -> String {
    const SHOWN: usize = 200;
    let shown = &key[..key.len().min(SHOWN)];
    let mut text = shown.escape_ascii().to_string();
    if key.len() > SHOWN {
        text.push_str(&format!("... ({} bytes)", key.len()));
    }
    text
}

/// Checks that `key` can be stored under a namespace of `namespace_len` bytes.
pub fn validate(key: &[u8], namespace_len: usize) -> Result<(), KvError> {
    let invalid = |problem: String| KvError::InvalidKey {
        key: display(key),
        problem,
    };
    if key.is_empty() {
        return Err(invalid("a key may not be empty".into()));
    }
    if key.ends_with(b"/") {
        return Err(invalid(
            "a key may not end in `/`, which names a folder: drop the trailing `/`".into(),
        ));
    }
    let (folder, name) = split(key);
    let max_folder = max_folder_len(namespace_len);
    if folder.len() > max_folder {
        return Err(invalid(format!(
            "its folder part is {} bytes, over the {max_folder} a DynamoDB partition key leaves",
            folder.len()
        )));
    }
    if let Some(long) = key
        .split(|b| *b == b'/')
        .find(|s| s.len() > MAX_SEGMENT_LEN)
    {
        return Err(invalid(format!(
            "a segment is {} bytes, over the {MAX_SEGMENT_LEN} a DynamoDB sort key leaves",
            long.len()
        )));
    }
    debug_assert!(!name.is_empty());
    let depth = folders(key).len();
    if depth > MAX_DEPTH {
        return Err(invalid(format!(
            "it sits {depth} folders deep, over the {MAX_DEPTH} one transaction can count"
        )));
    }
    Ok(())
}

/// Splits a key or prefix into its folder (up to and including the last `/`, possibly
/// empty) and the rest.
pub fn split(key: &[u8]) -> (&[u8], &[u8]) {
    match key.iter().rposition(|b| *b == b'/') {
        Some(i) => key.split_at(i + 1),
        None => (&key[..0], key),
    }
}

/// The folders `key` sits in, outermost first, each as (the folder holding it, its own
/// name with the trailing `/`): `a/b/c` gives `("", "a/")` and `("a/", "b/")`.
pub fn folders(key: &[u8]) -> Vec<(&[u8], &[u8])> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in key.iter().enumerate() {
        if *b == b'/' {
            out.push((&key[..start], &key[start..=i]));
            start = i + 1;
        }
    }
    out
}

/// The smallest key after every key that starts with `prefix`, or `None` if there is none
/// (the prefix is empty or all 0xff): the exclusive end of a prefix range.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_their_folder_and_name() {
        assert_eq!(split(b"a/b/c"), (&b"a/b/"[..], &b"c"[..]));
        assert_eq!(split(b"c"), (&b""[..], &b"c"[..]));
        assert_eq!(split(b"/x"), (&b"/"[..], &b"x"[..]));
        assert_eq!(split(b"a/"), (&b"a/"[..], &b""[..]));
    }

    #[test]
    fn folders_are_listed_outermost_first_empty_segments_included() {
        let f: Vec<(Vec<u8>, Vec<u8>)> = folders(b"a//b")
            .into_iter()
            .map(|(p, n)| (p.to_vec(), n.to_vec()))
            .collect();
        assert_eq!(
            f,
            vec![
                (b"".to_vec(), b"a/".to_vec()),
                (b"a/".to_vec(), b"/".to_vec())
            ]
        );
        assert_eq!(folders(b"/nodes/x").len(), 2);
        assert!(folders(b"flat").is_empty());
    }

    #[test]
    fn bad_keys_are_refused_with_the_reason() {
        let problem = |key: &[u8]| match validate(key, 2) {
            Err(KvError::InvalidKey { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert!(problem(b"").contains("empty"));
        assert!(problem(b"a/").contains("end in `/`"));
        assert!(problem(&[b'x'; MAX_SEGMENT_LEN + 1]).contains("segment"));
        let deep = "a/".repeat(MAX_DEPTH + 1) + "k";
        assert!(problem(deep.as_bytes()).contains("folders deep"));
        let wide = format!("{}/k", "f/".repeat(1100));
        assert!(problem(wide.as_bytes()).contains("partition key"));
        for fine in [&b"/x"[..], b"a//b", "ünï/cödé".as_bytes(), &[0, 0xff, 7]] {
            validate(fine, 2).unwrap();
        }
    }

    #[test]
    fn prefix_ends_skip_past_every_extension() {
        assert_eq!(prefix_end(b"a/"), Some(b"a0".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn long_binary_keys_display_escaped_and_cut() {
        assert_eq!(display(&[b'a', 0, 0xff]), "a\\x00\\xff");
        assert!(display(&[b'k'; 500]).ends_with("(500 bytes)"));
    }
}
