//! The simulated object store: objects with ETags, a history of every write applied, and
//! the faults of a real store and its client (writes landing late, answers lost, a retry
//! answering while an earlier attempt lingers, stalled reads). Each seed draws how it
//! treats conditional writes (`Conditions`): enforcing them atomically where they land
//! (with `If-Match` honoured in both ETag forms or only unquoted), ignoring them,
//! refusing their headers, or ignoring them until a moment of the run and enforcing them
//! from then on (a store upgraded under a running fleet); and how its answers write
//! ETags (quoted, bare, or quoted from a PUT and bare from a HEAD).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    Result,
};

use super::world::{StoreKind, T, World};

/// One write as applied to an object.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What was written: the name of the operation that wrote it.
    pub payload: String,
    /// The ETag the store gave it (empty for a delete).
    pub etag: String,
    /// A hash of the bytes written (0 for a delete).
    pub content: u64,
    /// A delete: the object was removed (`payload` names the delete of ours that removed
    /// it, or is empty for a deleter outside our processes).
    pub deleted: bool,
    /// When (Tokio's paused clock).
    pub at: tokio::time::Instant,
}

#[derive(Default)]
struct State {
    /// Each object's body and bare ETag (`v7`).
    objects: BTreeMap<Path, (Bytes, String)>,
    history: BTreeMap<Path, Vec<Applied>>,
    etags: u64,
}

/// How the store treats conditional writes (`If-None-Match: *`, `If-Match`,
/// copy-if-not-exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditions {
    /// Refuses the headers: the client says NotImplemented (object_store's
    /// `S3ConditionalPut::Disabled`), or the store answers 501 (Backblaze B2).
    Refuses { client_side: bool },
    /// Applies conditional writes as plain ones (s3rver).
    Ignores,
    /// Checks each condition atomically where the write lands (SeaweedFS, AWS S3);
    /// `unquoted_only`: an `If-Match` naming a quoted ETag never matches (DigitalOcean
    /// Spaces).
    Enforces { unquoted_only: bool },
    /// Ignores conditions until `at` (since the start), enforces them from then on.
    EnforcesFrom { at: Duration },
}

/// How the store's answers write an ETag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtagStyle {
    Quoted,
    Bare,
    /// Quoted in a PUT's answer, bare in a HEAD's or GET's.
    QuotedFromPuts,
}

/// What a conditional write asks of the object where it lands.
#[derive(Debug, Clone)]
enum Condition {
    None,
    Absent,
    /// At this ETag, as the writer named it.
    At(String),
}

tokio::task_local! {
    /// The delete of ours a task is making (its name in the registry), for the history.
    pub static DELETER: String;
    /// The copy of ours a task is making (its name in the registry): what the history
    /// records as the target's writer.
    pub static COPIER: String;
    /// The put of ours a task is making (its name in the registry), for the history: its
    /// bytes may be another write's.
    pub static WRITER: String;
}

/// A digest of `bytes`, the same in every run.
pub fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// The store every node shares.
pub struct SimStore {
    world: Arc<World>,
    state: Mutex<State>,
    pub conditions: Conditions,
    pub etags: EtagStyle,
}

/// How one object write goes.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Normal,
    LostAnswer,
    Failed,
    /// The first attempt lingers for this long after the (retry's) definite error.
    KnownErrorAfterRetry(Duration),
    /// Applied, then applied again by the client's retry this much later.
    Duplicated(Duration),
}

fn generic(message: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "SimStore",
        source: message.to_owned().into(),
    }
}

impl SimStore {
    pub fn new(world: Arc<World>) -> Arc<Self> {
        let kinds = &world.profile.store_kinds;
        let conditions = match kinds[world.pick(0..kinds.len() as u64) as usize] {
            StoreKind::Refuses => Conditions::Refuses {
                client_side: world.chance(0.5),
            },
            StoreKind::Ignores => Conditions::Ignores,
            StoreKind::Enforces => Conditions::Enforces {
                unquoted_only: world.chance(0.25),
            },
            StoreKind::EnforcesFrom => Conditions::EnforcesFrom {
                at: world.upto(super::world::RUN_FOR),
            },
        };
        let etags = match world.pick(0..3) {
            0 => EtagStyle::Quoted,
            1 => EtagStyle::Bare,
            _ => EtagStyle::QuotedFromPuts,
        };
        Arc::new(Self {
            world,
            state: Mutex::default(),
            conditions,
            etags,
        })
    }

    /// Whether the store checks conditions now.
    fn enforcing(&self) -> bool {
        match self.conditions {
            Conditions::Enforces { .. } => true,
            Conditions::EnforcesFrom { at } => self.world.elapsed() >= at,
            Conditions::Refuses { .. } | Conditions::Ignores => false,
        }
    }

    /// Whether the store enforces conditions from the start to the end of the run.
    pub fn enforces_throughout(&self) -> bool {
        matches!(self.conditions, Conditions::Enforces { .. })
    }

    /// A bare ETag as an answer writes it.
    fn render(&self, bare: &str, from_put: bool) -> String {
        match (self.etags, from_put) {
            (EtagStyle::Quoted, _) | (EtagStyle::QuotedFromPuts, true) => format!("\"{bare}\""),
            _ => bare.to_owned(),
        }
    }

    /// Applies `payload` at `location` if `condition` holds now (always, where the store
    /// does not enforce): the bare ETag given, or the error a refusal answers.
    fn apply_if(
        &self,
        location: &Path,
        payload: Bytes,
        condition: &Condition,
        writer: &Option<String>,
    ) -> Result<String> {
        if self.enforcing() {
            let state = self.state.lock().unwrap();
            let current = state.objects.get(location).map(|(_, etag)| etag.as_str());
            let unquoted_only = matches!(
                self.conditions,
                Conditions::Enforces {
                    unquoted_only: true
                }
            );
            match condition {
                Condition::Absent if current.is_some() => {
                    return Err(object_store::Error::AlreadyExists {
                        path: location.to_string(),
                        source: "412 Precondition Failed (If-None-Match)".into(),
                    });
                }
                Condition::At(named)
                    if current.is_none_or(|etag| {
                        (unquoted_only && named.starts_with('"'))
                            || etag != named.trim_start_matches("W/").trim_matches('"')
                    }) =>
                {
                    return Err(object_store::Error::Precondition {
                        path: location.to_string(),
                        source: "412 Precondition Failed (If-Match)".into(),
                    });
                }
                _ => {}
            }
        }
        Ok(match writer {
            Some(writer) => self.apply_as(location, payload, None, writer.clone()),
            None => self.apply(location, payload),
        })
    }

    /// Copies `from` to `to` now, if `condition` holds where the store enforces it, as
    /// `copier`'s write with the source's ETag (the probe's copies: the source's writer's,
    /// with a new one).
    fn copy_now(
        &self,
        from: &Path,
        to: &Path,
        condition: &Condition,
        copier: Option<String>,
    ) -> Result<()> {
        let source = self.state.lock().unwrap().objects.get(from).cloned();
        let Some((body, etag)) = source else {
            return Err(object_store::Error::NotFound {
                path: from.to_string(),
                source: "no such object".into(),
            });
        };
        if self.enforcing() && matches!(condition, Condition::Absent) {
            let state = self.state.lock().unwrap();
            if state.objects.contains_key(to) {
                return Err(object_store::Error::AlreadyExists {
                    path: to.to_string(),
                    source: "412 Precondition Failed (copy-if-not-exists)".into(),
                });
            }
        }
        match copier {
            Some(copier) => self.apply_as(to, body, Some(etag), copier),
            // The probe's copies, as they always were: a new ETag.
            None => self.apply(to, body),
        };
        Ok(())
    }

    /// A prompt, fault-free HEAD (an object_store 0.12.5 writer's): the ETag quoted, as
    /// S3 writes it (whatever this store's answers to our nodes do).
    pub async fn head_now(&self, location: &Path) -> Option<String> {
        tokio::time::sleep(self.world.delay(0.0, T)).await;
        let found = self
            .state
            .lock()
            .unwrap()
            .objects
            .get(location)
            .map(|(_, e)| format!("\"{e}\""));
        tokio::time::sleep(self.world.delay(0.0, T)).await;
        found
    }

    /// A prompt, fault-free plain PUT (an object_store 0.12.5 writer's). It lands whether
    /// or not its caller still waits.
    pub async fn put_plainly(self: &Arc<Self>, location: &Path, body: Bytes) -> Result<PutResult> {
        let (to, back) = (self.world.delay(0.0, T), self.world.delay(0.0, T));
        let (store, location) = (self.clone(), location.clone());
        let landed = tokio::spawn(async move {
            tokio::time::sleep(to).await;
            store.apply(&location, body)
        });
        let etag = landed.await.expect("the write lands");
        tokio::time::sleep(back).await;
        Ok(PutResult {
            e_tag: Some(self.render(&etag, true)),
            version: None,
            extensions: Default::default(),
        })
    }

    /// A prompt plain DELETE from outside our processes (an object_store 0.12.5 writer, a
    /// plain client, a lifecycle rule).
    pub async fn delete_plainly(self: &Arc<Self>, location: &Path) {
        tokio::time::sleep(self.world.delay(0.0, T)).await;
        self.remove(location, "");
    }

    /// Every object's write history, in the order applied.
    pub fn history(&self) -> BTreeMap<Path, Vec<Applied>> {
        self.state.lock().unwrap().history.clone()
    }

    fn apply(&self, location: &Path, payload: Bytes) -> String {
        let text = String::from_utf8_lossy(&payload).into_owned();
        self.apply_as(location, payload, None, text)
    }

    /// Applies `payload` at `location` as `writer`'s write, with `etag` (a copy keeps its
    /// source's, as S3 does for one-part objects) or a new one.
    fn apply_as(
        &self,
        location: &Path,
        payload: Bytes,
        etag: Option<String>,
        writer: String,
    ) -> String {
        let content = content_hash(&payload);
        let mut state = self.state.lock().unwrap();
        // Where ETags are the bytes' digest (S3's, for one-part objects), the same bytes
        // written again get the same ETag.
        let etag = etag.unwrap_or_else(|| {
            if self.world.content_etags {
                format!("h{content:016x}")
            } else {
                state.etags += 1;
                format!("v{}", state.etags)
            }
        });
        let text = writer;
        state
            .objects
            .insert(location.clone(), (payload, etag.clone()));
        state
            .history
            .entry(location.clone())
            .or_default()
            .push(Applied {
                payload: text,
                etag: etag.clone(),
                content,
                deleted: false,
                at: tokio::time::Instant::now(),
            });
        etag
    }

    /// Removes `location`, recording the delete (by `deleter`) in its history if there was
    /// an object.
    fn remove(&self, location: &Path, deleter: &str) {
        let mut state = self.state.lock().unwrap();
        if state.objects.remove(location).is_some() {
            state
                .history
                .entry(location.clone())
                .or_default()
                .push(Applied {
                    payload: deleter.to_owned(),
                    etag: String::new(),
                    content: 0,
                    deleted: true,
                    at: tokio::time::Instant::now(),
                });
        }
    }

    fn fate(&self) -> Fate {
        let p = &self.world.profile;
        let roll = self.world.pick(0..1_000_000) as f64 / 1_000_000.0;
        let mut edge = p.store_lost_answer;
        if roll < edge {
            return Fate::LostAnswer;
        }
        edge += p.store_failed;
        if roll < edge {
            return Fate::Failed;
        }
        edge += p.store_known_error_after_retry;
        if roll < edge {
            return Fate::KnownErrorAfterRetry(self.world.upto(T));
        }
        if self.world.edge_faults() {
            edge += p.store_duplicated;
            if roll < edge {
                return Fate::Duplicated(self.world.upto(T));
            }
        }
        Fate::Normal
    }

    fn meta(&self, location: &Path, body: &Bytes, etag: &str) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::UNIX_EPOCH,
            size: body.len() as u64,
            e_tag: Some(self.render(etag, false)),
            version: None,
        }
    }
}

impl std::fmt::Display for SimStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStore")
    }
}

impl std::fmt::Debug for SimStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStore")
    }
}

/// The store as one node sees it (all nodes share one; the faults are per request).
#[derive(Debug, Clone)]
pub struct StoreLink(pub Arc<SimStore>);

impl std::fmt::Display for StoreLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimStore")
    }
}

impl StoreLink {
    /// One delete, on the wire like a put: it lands whether or not the caller still
    /// waits, and its answer may be lost after it applied; or its first attempt lingers
    /// while the client's retry applies and is answered, and lands up to T later.
    async fn delete_one(&self, location: Path) -> Result<Path> {
        let store = self.0.clone();
        let world = &store.world;
        let p = &world.profile;
        let to = world.delay(p.store_slow_write, T * 3 / 2);
        let back = world.delay(p.store_slow_answer, T);
        let lost = world.chance(p.store_lost_answer);
        let linger =
            (world.edge_faults() && world.chance(p.store_lingering_delete)).then(|| world.upto(T));
        let deleter = DELETER.try_with(Clone::clone).unwrap_or_default();
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::time::sleep(to).await;
            store.remove(&location, &deleter);
            if let Some(linger) = linger {
                // The retry's answer, at once; the first attempt lands up to T later (as a
                // lingering put's does: within assumption 4's bound of its sending).
                let _ = answer.send(Ok(location.clone()));
                tokio::time::sleep(linger).await;
                store.remove(&location, &deleter);
                return;
            }
            tokio::time::sleep(back).await;
            let _ = answer.send(if lost {
                Err(generic("timed out waiting for the answer"))
            } else {
                Ok(location)
            });
        });
        answered
            .await
            .unwrap_or_else(|_| Err(generic("the request was lost")))
    }
}

#[async_trait]
impl ObjectStore for StoreLink {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let store = self.0.clone();
        let condition = match &opts.mode {
            PutMode::Overwrite => Condition::None,
            PutMode::Create => Condition::Absent,
            PutMode::Update(version) => Condition::At(version.e_tag.clone().unwrap_or_default()),
        };
        let refused_header = match (&condition, store.conditions) {
            (Condition::None, _) => None,
            (_, Conditions::Refuses { client_side: true }) => {
                // The client refuses before sending anything.
                return Err(object_store::Error::NotImplemented {
                    operation: "conditional put".into(),
                    implementer: "SimStore's client".into(),
                });
            }
            (_, Conditions::Refuses { client_side: false }) => Some(generic(
                "Error performing PUT in 3ms - Server returned non-2xx status code: 501 Not \
                 Implemented: A header you provided implies functionality that is not implemented",
            )),
            _ => None,
        };
        let world = &store.world;
        let p = &world.profile;
        let to = world.delay(p.store_slow_write, T * 3 / 2);
        let back = world.delay(p.store_slow_answer, T);
        let fate = store.fate();
        let writer = WRITER.try_with(Clone::clone).ok();
        let body = Bytes::from(payload);
        let location = location.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        // On the wire from here: it lands whether or not the caller still waits.
        tokio::spawn(async move {
            tokio::time::sleep(to).await;
            if let Some(refusal) = refused_header {
                tokio::time::sleep(back).await;
                let _ = answer.send(Err(refusal));
                return;
            }
            let outcome = match fate {
                Fate::Normal => store.apply_if(&location, body, &condition, &writer),
                Fate::LostAnswer => {
                    let _ = store.apply_if(&location, body, &condition, &writer);
                    Err(generic("timed out waiting for the answer"))
                }
                Fate::Failed => Err(generic("500 Internal Server Error, not applied")),
                Fate::Duplicated(retry_after) => {
                    let _ = store.apply_if(&location, body.clone(), &condition, &writer);
                    tokio::time::sleep(retry_after).await;
                    // The retry meets the first attempt: refused where it is enforced.
                    store.apply_if(&location, body, &condition, &writer)
                }
                Fate::KnownErrorAfterRetry(linger) => {
                    // Attempt 1 is stuck in the store; the client's retry is refused.
                    let _ = answer.send(Err(object_store::Error::PermissionDenied {
                        path: location.to_string(),
                        source: "403 on the retry".into(),
                    }));
                    tokio::time::sleep(linger).await;
                    let _ = store.apply_if(&location, body, &condition, &writer);
                    return;
                }
            };
            tokio::time::sleep(back).await;
            let _ = answer.send(outcome.map(|etag| PutResult {
                e_tag: Some(store.render(&etag, true)),
                version: None,
                extensions: Default::default(),
            }));
        });
        answered
            .await
            .unwrap_or_else(|_| Err(generic("the request was lost")))
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Err(object_store::Error::NotImplemented {
            operation: "multipart".into(),
            implementer: "SimStore".into(),
        })
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let world = &self.0.world;
        let p = &world.profile;
        let to = world.delay(0.0, T);
        // A stalled read: the answer is read on arrival, then held.
        let back = world.delay(p.store_read_stall, T * 4);
        tokio::time::sleep(to).await;
        let found = self.0.state.lock().unwrap().objects.get(location).cloned();
        tokio::time::sleep(back).await;
        let Some((body, etag)) = found else {
            return Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "no such object".into(),
            });
        };
        let meta = self.0.meta(location, &body, &etag);
        let range = 0..body.len() as u64;
        let payload = if options.head { Bytes::new() } else { body };
        Ok(GetResult {
            payload: GetResultPayload::Stream(Box::pin(futures::stream::once(async move {
                Ok(payload)
            }))),
            meta,
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let store = self.0.clone();
        Box::pin(locations.then(move |location| {
            let store = store.clone();
            async move { StoreLink(store).delete_one(location?).await }
        }))
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        Box::pin(futures::stream::empty())
    }

    async fn list_with_delimiter(&self, _prefix: Option<&Path>) -> Result<ListResult> {
        Ok(ListResult {
            common_prefixes: vec![],
            objects: vec![],
            extensions: Default::default(),
        })
    }

    /// A copy: the source read and the target written where it lands, with the source's
    /// ETag, copy-if-not-exists treated as the store treats conditions. A node's copy
    /// (made under `COPIER`) goes on the wire as a put does, slow or with its answer lost;
    /// the probe's is prompt.
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let store = &self.0;
        let condition = match options.mode {
            CopyMode::Overwrite => Condition::None,
            CopyMode::Create => Condition::Absent,
        };
        if matches!(condition, Condition::Absent)
            && matches!(store.conditions, Conditions::Refuses { .. })
        {
            return Err(object_store::Error::NotSupported {
                source: "copy-if-not-exists is not configured".into(),
            });
        }
        let Ok(copier) = COPIER.try_with(Clone::clone) else {
            tokio::time::sleep(store.world.delay(0.0, T)).await;
            return store.copy_now(from, to, &condition, None);
        };
        let world = &store.world;
        let p = &world.profile;
        let to_store = world.delay(p.store_slow_write, T * 3 / 2);
        let back = world.delay(p.store_slow_answer, T);
        let lost = world.chance(p.store_lost_answer);
        let (store, from, to) = (store.clone(), from.clone(), to.clone());
        let (answer, answered) = tokio::sync::oneshot::channel();
        // On the wire from here: it lands whether or not the caller still waits.
        tokio::spawn(async move {
            tokio::time::sleep(to_store).await;
            let outcome = store.copy_now(&from, &to, &condition, Some(copier));
            tokio::time::sleep(back).await;
            let _ = answer.send(match outcome {
                Ok(()) if lost => Err(generic("timed out waiting for the answer")),
                other => other,
            });
        });
        answered
            .await
            .unwrap_or_else(|_| Err(generic("the request was lost")))
    }
}
