//! A watch's place in the stream, as it travels in a [`Checkpoint`]: where each shard being
//! read goes on, the shards read to their end, and enough of the stream's lineage to tell
//! the rest.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::kv::{Checkpoint, KvError, key};

/// A watch's place in the stream.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Position {
    /// The stream.
    pub(super) stream: String,
    /// Per shard being read: where to go on.
    pub(super) shards: BTreeMap<String, Resume>,
    /// When the watch began (seconds since the epoch, by the reader's clock): the place of
    /// every shard held by an iterator was taken then, and no later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) since: Option<u64>,
    /// Shards read to their end, but for those whose descendants are in the checkpoint
    /// (being read, or read to their end): the stream's lineage says those are done, and
    /// leaving them out keeps a checkpoint to the frontier of the stream, not its day of
    /// closed shards.
    pub(super) done: BTreeSet<String>,
    /// Of those, the shards closed when the watch began, never read: a child of one holds
    /// records from before the watch began, which it passes over.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(super) unread: BTreeSet<String>,
    /// The parent of each shard named above that has one, as the stream listed it: so a
    /// resumed watch knows the lineage that left their ancestors out of `done` even when
    /// its first listing of the stream is stale (DynamoDB Streams lists eventually
    /// consistently).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) parents: BTreeMap<String, String>,
}

/// Where a shard being read goes on.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Resume {
    /// After this record.
    After(String),
    /// At this record, read but not handed out (a shard held by an iterator, read a step
    /// further to keep its place).
    At(String),
    /// At a child shard's first sequence number as the stream listed it (nothing handed
    /// out from it yet; the number may name no record yet). Resumed at that number, so
    /// that a resume after the stream trimmed the shard fails.
    From(String),
    /// From the shard's oldest record, passing over those created before the watch began
    /// (less the clocks' margin): a shard whose iterator from the watch's start was refused
    /// as trimmed, nothing handed out from it since. Good while the watch is under a day
    /// old.
    Oldest,
    /// From the shard's oldest record kept: written by earlier versions for what is now
    /// [`Resume::From`]; resumed at the shard's first sequence number as the stream lists
    /// it.
    TrimHorizon,
    /// At this iterator (a shard open when the watch began, nothing handed out from it
    /// yet): good for 15 minutes.
    Iterator(String),
}

impl Position {
    pub(super) fn checkpoint(&self) -> Checkpoint {
        // Serialising plain strings and maps cannot fail.
        Checkpoint(format!(
            "dynamodb:{}",
            serde_json::to_string(self).unwrap_or_default()
        ))
    }

    pub(super) fn parse(checkpoint: &Checkpoint) -> Result<Self, KvError> {
        checkpoint
            .0
            .strip_prefix("dynamodb:")
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| KvError::WatchLost {
                problem: format!(
                    "`{}` is not a checkpoint of a DynamoDB store",
                    key::display(checkpoint.0.as_bytes())
                ),
            })
    }

    /// Every ancestor, by `lineage` (child to parent), of the shards named here.
    fn ancestors(&self, lineage: &BTreeMap<String, String>) -> BTreeSet<String> {
        let mut ancestors = BTreeSet::new();
        for start in self.shards.keys().chain(&self.done) {
            let mut at = start;
            // Bounded by the lineage's size: lineage has no cycles, but a malformed
            // answer must not hang the reader.
            for _ in 0..=lineage.len() {
                let Some(parent) = lineage.get(at) else {
                    break;
                };
                ancestors.insert(parent.clone());
                at = parent;
            }
        }
        ancestors
    }

    /// The shards `lineage` says are done: every ancestor of a shard named here that is
    /// not itself being read.
    pub(super) fn finished_by_lineage(
        &self,
        lineage: &BTreeMap<String, String>,
    ) -> BTreeSet<String> {
        let mut finished = self.ancestors(lineage);
        finished.retain(|id| !self.shards.contains_key(id));
        finished
    }

    /// Leaves out of the finished shards those that are ancestors of another shard named
    /// here ([`finished_by_lineage`](Self::finished_by_lineage) finds them again), and
    /// keeps the parents of those named.
    pub(super) fn prune(&mut self, lineage: &BTreeMap<String, String>) {
        let ancestors = self.ancestors(lineage);
        self.done.retain(|id| !ancestors.contains(id));
        let done = &self.done;
        self.unread.retain(|id| done.contains(id));
        self.parents = self
            .shards
            .keys()
            .chain(&self.done)
            .filter_map(|id| Some((id.clone(), lineage.get(id)?.clone())))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_of_earlier_versions_still_parse() {
        let old = Checkpoint::from_text(
            r#"dynamodb:{"stream":"s","shards":{"a":"trim_horizon","b":{"after":"5"}},"done":["c"]}"#,
        );
        let position = Position::parse(&old).unwrap();
        assert!(matches!(position.shards["a"], Resume::TrimHorizon));
        assert_eq!(position.since, None);
        assert!(position.parents.is_empty());
    }

    #[test]
    fn done_shards_are_left_to_lineage_and_the_lineage_kept() {
        // g -> p -> c: c being read, p and g read to their end; x done, no child known.
        let lineage: BTreeMap<String, String> = [("c", "p"), ("p", "g")]
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let mut position = Position {
            shards: BTreeMap::from([("c".to_owned(), Resume::After("9".into()))]),
            done: ["p", "g", "x"].into_iter().map(str::to_owned).collect(),
            ..Position::default()
        };
        position.prune(&lineage);
        assert_eq!(position.done, BTreeSet::from(["x".to_owned()]));
        assert_eq!(
            position.parents,
            BTreeMap::from([("c".to_owned(), "p".to_owned())])
        );
        // A resumed watch with only the kept parent (its listing lacks c, stale) still
        // finds p done; g it learns from any listing of p.
        let finished = position.finished_by_lineage(&position.parents.clone());
        assert!(finished.contains("p"), "{finished:?}");
    }
}
