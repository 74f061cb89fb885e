//! A stream's view type: what its records hold of a changed item. A setting of a table
//! (and of its error when the table has another), apart from reading the stream.

use serde::{Deserialize, Serialize};

/// What a stream record holds of the changed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StreamViewType {
    /// The key attributes only.
    KeysOnly,
    /// The item as it is after the change.
    NewImage,
    /// The item as it was before the change.
    OldImage,
    /// Both.
    NewAndOldImages,
}

impl StreamViewType {
    /// The name DynamoDB uses (`NEW_AND_OLD_IMAGES`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeysOnly => "KEYS_ONLY",
            Self::NewImage => "NEW_IMAGE",
            Self::OldImage => "OLD_IMAGE",
            Self::NewAndOldImages => "NEW_AND_OLD_IMAGES",
        }
    }
}

impl std::fmt::Display for StreamViewType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
