//! A loopback HTTP/1.1 server whose every answer a test scripts: canned bodies, cut-off
//! bodies, or forwarding to a real server. One request per connection, which is all a
//! client needs when every answer says `Connection: close`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What to do with request number `n` (from 0).
pub enum Reply {
    /// Answer with this status and body.
    With(u16, String),
    /// Promise `declared` bytes of body, send `body`, and hang up.
    CutShort { declared: usize, body: String },
    /// Send the request on to this URL and relay the answer.
    Forward(String),
    /// Send the request on to this URL, then answer with this status and body instead
    /// (the write applied, its answer lost).
    ForwardThenAnswer(String, u16, String),
    /// Send the request on, and relay the answer, dropping the `Item` of error answers (as
    /// emulators that ignore `ReturnValuesOnConditionCheckFailure` do).
    ForwardWithoutItem(String),
    /// Read the request and never answer, holding the connection open.
    Stall,
    /// Wait this long, then reply as the inner reply says (a slow server).
    Delayed(std::time::Duration, Box<Reply>),
    /// Send the request on to this URL at once, and relay the answer after this long (an
    /// answer slow on its way back).
    ForwardThenWait(String, std::time::Duration),
}

/// A running fake server.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    requests: Arc<AtomicUsize>,
    targets: Arc<std::sync::Mutex<Vec<String>>>,
    authorizations: Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeServer {
    /// Starts a server that answers request `n` with `script(n, x_amz_target)`.
    pub async fn start(script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_with_body(move |n, target, _body| script(n, target)).await
    }

    /// Starts a server that answers request `n` with `script(n, x_amz_target, body)`: for
    /// fakes that answer by what was asked (a stateful model of a service).
    pub async fn start_with_body(
        script: impl Fn(usize, &str, &[u8]) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let targets = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = targets.clone();
        let authorizations = Arc::new(std::sync::Mutex::new(Vec::new()));
        let signed = authorizations.clone();
        let script = Arc::new(script);
        let forwarder = reqwest::Client::new();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let script = script.clone();
                let forwarder = forwarder.clone();
                let seen = seen.clone();
                let signed = signed.clone();
                tokio::spawn(async move {
                    serve(stream, n, &*script, &forwarder, &seen, &signed).await
                });
            }
        });
        Self {
            url,
            requests,
            targets,
            authorizations,
        }
    }

    /// The `Authorization` header of every request so far, in arrival order.
    pub fn authorizations(&self) -> Vec<String> {
        self.authorizations.lock().unwrap().clone()
    }

    /// The `X-Amz-Target` of every request so far, in arrival order.
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

struct Request {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request { headers, body })
}

async fn serve(
    mut stream: TcpStream,
    n: usize,
    script: &(dyn Fn(usize, &str, &[u8]) -> Reply + Send + Sync),
    forwarder: &reqwest::Client,
    seen: &std::sync::Mutex<Vec<String>>,
    signed: &std::sync::Mutex<Vec<String>>,
) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let target = request.header("x-amz-target").to_owned();
    seen.lock().unwrap().push(target.clone());
    signed
        .lock()
        .unwrap()
        .push(request.header("authorization").to_owned());
    let mut reply = script(n, &target, &request.body);
    while let Reply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let (status, body, declared) = match reply {
        Reply::Stall => {
            // Keep the connection open and never answer.
            std::future::pending::<()>().await;
            return;
        }
        Reply::Delayed(..) => unreachable!("unwrapped above"),
        Reply::With(status, body) => {
            let len = body.len();
            (status, body.into_bytes(), len)
        }
        Reply::CutShort { declared, body } => (200, body.into_bytes(), declared),
        Reply::Forward(to) => {
            let (status, body) = forward(forwarder, &to, &request).await;
            let len = body.len();
            (status, body, len)
        }
        Reply::ForwardThenWait(to, wait) => {
            let (status, body) = forward(forwarder, &to, &request).await;
            tokio::time::sleep(wait).await;
            let len = body.len();
            (status, body, len)
        }
        Reply::ForwardThenAnswer(to, status, body) => {
            forward(forwarder, &to, &request).await;
            let len = body.len();
            (status, body.into_bytes(), len)
        }
        Reply::ForwardWithoutItem(to) => {
            let (status, body) = forward(forwarder, &to, &request).await;
            let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            if status != 200
                && let Some(fields) = json.as_object_mut()
            {
                fields.remove("Item");
            }
            let body = json.to_string().into_bytes();
            let len = body.len();
            (status, body, len)
        }
    };
    let head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n"
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

/// Sends `request` to `to` and returns the answer's status and body.
async fn forward(forwarder: &reqwest::Client, to: &str, request: &Request) -> (u16, Vec<u8>) {
    let mut forwarded = forwarder.post(to).body(request.body.clone());
    for (name, value) in &request.headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("x-amz-") || lower == "authorization" || lower == "content-type" {
            forwarded = forwarded.header(name.as_str(), value.as_str());
        }
    }
    let answer = forwarded.send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.bytes().await.unwrap().to_vec())
}
