//! The safety simulator: the real `LeaseManager`, `CommitStore` and leader lock over an
//! in-process lease table and object store that misbehave as real networks, DynamoDB and
//! S3 do, on Tokio's paused clock, all driven by one seed.
//!
//! Faults it makes (each drawn from the seed):
//! - table writes delayed before applying, applied with their answer lost, applied after
//!   their caller gave up (the answer comes first), answered twice (a retry that meets its
//!   own first attempt), or failed; table reads stalled or failed;
//! - object writes delayed in flight (landing even when their caller has dropped them),
//!   their answers slow on the way back,
//!   applied with their answer lost, or answered with a definite error by a retry while an
//!   earlier attempt still lingers; HEADs and GETs stalled with a stale answer;
//! - DynamoDB's TTL deleting expired records at random times after expiry;
//! - objects deleted through `CommitStore` (lock-style paths, created if absent and
//!   deleted if present), so kept create leases are released on delete while others
//!   race to create the path again; deletes delayed in flight or their answers lost;
//! - in seeds holding paths (`CommitStore::hold_paths` on every node): object writes
//!   applied twice, and deletes whose first attempt lingers past the retry's answer;
//! - in seeds whose ETags are digests of the bytes: updates writing bytes the object held
//!   before (A, A and A, B, A), so that ETags come back;
//! - in seeds that copy: copies and renames, if absent, of objects staged under paths of
//!   their own to a few shared targets, which are deleted too;
//! - a node's link to the table down for a while;
//! - object stores that enforce conditions, ignore them, refuse their headers, or start
//!   enforcing them mid-run, and answers writing ETags quoted or bare; node processes in
//!   `lease`, `auto` and `native` modes, drawn again at every restart;
//! - an object_store 0.12.5 writer on the same table and paths (`old.rs`), deleting
//!   plainly;
//! - writers crashing at any await point (their operation future dropped) and restarting
//!   with fresh state;
//! - every node's monotonic clock running at its own rate within the skew bound, and its
//!   wall clock off by a little; the random pauses of a writer that lost (back-off) drawn
//!   from the seed too.

pub mod clock;
pub mod commits;
pub mod locks;
pub mod old;
pub mod store;
pub mod table;
pub mod world;
