//! The simulated object store: objects with ETags, a history of every write applied, and
//! the faults of a real store and its client (writes landing late, answers lost, a retry
//! answering while an earlier attempt lingers, stalled reads).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

use super::world::{T, World};

/// One write as applied to an object.
#[derive(Debug, Clone)]
pub struct Applied {
    /// What was written: the name of the operation that wrote it.
    pub payload: String,
    /// The ETag the store gave it (empty for a delete).
    pub etag: String,
    /// A delete: the object was removed (`payload` is empty).
    pub deleted: bool,
    /// When (Tokio's paused clock).
    pub at: tokio::time::Instant,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<Path, (Bytes, String)>,
    history: BTreeMap<Path, Vec<Applied>>,
    etags: u64,
}

/// The store every node shares.
pub struct SimStore {
    world: Arc<World>,
    state: Mutex<State>,
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
        Arc::new(Self {
            world,
            state: Mutex::default(),
        })
    }

    /// Every object's write history, in the order applied.
    pub fn history(&self) -> BTreeMap<Path, Vec<Applied>> {
        self.state.lock().unwrap().history.clone()
    }

    fn apply(&self, location: &Path, payload: Bytes) -> String {
        let mut state = self.state.lock().unwrap();
        state.etags += 1;
        let etag = format!("\"v{}\"", state.etags);
        let text = String::from_utf8_lossy(&payload).into_owned();
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
                deleted: false,
                at: tokio::time::Instant::now(),
            });
        etag
    }

    /// Removes `location`, recording the delete in its history if there was an object.
    fn remove(&self, location: &Path) {
        let mut state = self.state.lock().unwrap();
        if state.objects.remove(location).is_some() {
            state
                .history
                .entry(location.clone())
                .or_default()
                .push(Applied {
                    payload: String::new(),
                    etag: String::new(),
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
        edge += p.store_duplicated;
        if roll < edge {
            return Fate::Duplicated(self.world.upto(T));
        }
        Fate::Normal
    }

    fn meta(location: &Path, body: &Bytes, etag: &str) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::UNIX_EPOCH,
            size: body.len() as u64,
            e_tag: Some(etag.to_owned()),
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
    /// waits, and its answer may be lost after it applied.
    async fn delete_one(&self, location: Path) -> Result<Path> {
        let store = self.0.clone();
        let world = &store.world;
        let p = &world.profile;
        let to = world.delay(p.store_slow_write, T * 3 / 2);
        let back = world.delay(0.0, T);
        let lost = world.chance(p.store_lost_answer);
        let (answer, answered) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            tokio::time::sleep(to).await;
            store.remove(&location);
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
        if !matches!(opts.mode, PutMode::Overwrite) {
            // CommitStore must hand the inner store plain writes only.
            return Err(object_store::Error::NotImplemented {
                operation: "conditional put in the simulated store".into(),
                implementer: "SimStore".into(),
            });
        }
        let store = self.0.clone();
        let world = &store.world;
        let p = &world.profile;
        let to = world.delay(p.store_slow_write, T * 3 / 2);
        let back = world.delay(0.0, T);
        let fate = store.fate();
        let body = Bytes::from(payload);
        let location = location.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        // On the wire from here: it lands whether or not the caller still waits.
        tokio::spawn(async move {
            tokio::time::sleep(to).await;
            let outcome = match fate {
                Fate::Normal => Ok(store.apply(&location, body)),
                Fate::LostAnswer => {
                    store.apply(&location, body);
                    Err(generic("timed out waiting for the answer"))
                }
                Fate::Failed => Err(generic("500 Internal Server Error, not applied")),
                Fate::Duplicated(retry_after) => {
                    store.apply(&location, body.clone());
                    tokio::time::sleep(retry_after).await;
                    Ok(store.apply(&location, body))
                }
                Fate::KnownErrorAfterRetry(linger) => {
                    // Attempt 1 is stuck in the store; the client's retry is refused.
                    let _ = answer.send(Err(object_store::Error::PermissionDenied {
                        path: location.to_string(),
                        source: "403 on the retry".into(),
                    }));
                    tokio::time::sleep(linger).await;
                    store.apply(&location, body);
                    return;
                }
            };
            tokio::time::sleep(back).await;
            let _ = answer.send(outcome.map(|etag| PutResult {
                e_tag: Some(etag),
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
        let meta = SimStore::meta(location, &body, &etag);
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

    async fn copy_opts(&self, _from: &Path, _to: &Path, _options: CopyOptions) -> Result<()> {
        Err(object_store::Error::NotImplemented {
            operation: "copy".into(),
            implementer: "SimStore".into(),
        })
    }
}
