//! Bad input at `dynacommit gateway`: unsigned, wrongly signed, expired presigned,
//! replayed-with-another-body and oversized requests are refused with S3's error codes
//! and leave nothing behind; malformed XML and headers get a 4xx; and a seeded stream of
//! malformed requests never gets the gateway to drop a connection unanswered or stop.

mod common;

use std::time::{Duration, SystemTime};

use common::gateway::{Gateway, SECRET, Settings, send, signed, signed_with_payload, unsigned};
use common::s3::S3Server;
use object_store::ObjectStoreExt;
use object_store::path::Path;

/// Sends `bytes` to the gateway on a connection of its own and returns the start of its
/// answer: for requests answered before their body is read (a client library would be
/// writing the body still, and may see the connection closed instead of the answer).
async fn exchange(gateway: &Gateway, bytes: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = gateway.url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    // The gateway may answer, and close, before it has read all of it.
    let _ = socket.write_all(&bytes).await;
    let mut answer = vec![0u8; 1024];
    // A gateway that took the body would wait for it: fail, do not hang.
    let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut answer))
        .await
        .expect("no answer: the gateway is waiting for the body")
        .unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// `request`'s head as HTTP/1.1 bytes (its headers are the signed ones).
fn raw_head(gateway: &Gateway, request: &common::gateway::Signed) -> Vec<u8> {
    let address = gateway.url.trim_start_matches("http://");
    let target = request.url.strip_prefix(&gateway.url).unwrap_or("/");
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nhost: {address}\r\n",
        request.method
    );
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

async fn absent(gateway: &Gateway, key: &str) -> bool {
    matches!(
        gateway.client().head(&Path::from(key)).await,
        Err(object_store::Error::NotFound { .. })
    )
}

async fn gateway(extra: &[&str]) -> Gateway {
    let mut settings = Settings::fresh(S3Server::S3rver).await;
    settings.extra = extra.iter().map(|s| s.to_string()).collect();
    Gateway::start(&settings)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_not_signed_by_a_key_of_the_gateway_are_refused_and_write_nothing() {
    let gateway = gateway(&[]).await;
    let url = format!("{}/{}/k", gateway.url, gateway.bucket);
    let now = SystemTime::now();
    let cases = [
        ("unsigned", unsigned("PUT", &url), (403, "AccessDenied")),
        (
            "signed with the wrong secret",
            signed("PUT", &url, &[], b"body", "not-the-secret", now, None),
            (403, "SignatureDoesNotMatch"),
        ),
        (
            "signed twenty minutes ago",
            signed(
                "PUT",
                &url,
                &[],
                b"body",
                SECRET,
                now - Duration::from_secs(1200),
                None,
            ),
            (403, "RequestTimeTooSkewed"),
        ),
    ];
    for (what, request, expected) in cases {
        let (status, code) = send(&request, b"body".to_vec()).await;
        assert_eq!((status, code.as_str()), expected, "{what}");
        assert!(absent(&gateway, "k").await, "{what}: something was written");
    }
    // The same request, rightly signed, is taken: the refusals above were for the signature.
    let good = signed("PUT", &url, &[], b"body", SECRET, now, None);
    assert_eq!(send(&good, b"body".to_vec()).await.0, 200);
    assert!(!absent(&gateway, "k").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_request_replayed_with_another_body_is_refused_and_writes_nothing() {
    let gateway = gateway(&[]).await;
    let url = format!("{}/{}/replayed", gateway.url, gateway.bucket);
    let request = signed(
        "PUT",
        &url,
        &[],
        b"the signed body",
        SECRET,
        SystemTime::now(),
        None,
    );
    let (status, code) = send(&request, b"another body!!!".to_vec()).await;
    assert_eq!((status, code.as_str()), (400, "XAmzContentSHA256Mismatch"));
    assert!(absent(&gateway, "replayed").await);
    assert_eq!(send(&request, b"the signed body".to_vec()).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_urls_are_taken_until_they_expire() {
    let gateway = gateway(&[]).await;
    let key_url = format!("{}/{}/presigned", gateway.url, gateway.bucket);
    gateway
        .client()
        .put(&Path::from("presigned"), "readable".into())
        .await
        .unwrap();
    let now = SystemTime::now();
    let fresh = signed(
        "GET",
        &key_url,
        &[],
        b"",
        SECRET,
        now,
        Some(Duration::from_secs(60)),
    );
    assert_eq!(send(&unsigned("GET", &fresh.url), Vec::new()).await.0, 200);
    // Signed ten minutes ago for five minutes: expired (and within the clock skew S3
    // allows a date, so it is the expiry that refuses it).
    let expired = signed(
        "GET",
        &key_url,
        &[],
        b"",
        SECRET,
        now - Duration::from_secs(600),
        Some(Duration::from_secs(300)),
    );
    let (status, code) = send(&unsigned("GET", &expired.url), Vec::new()).await;
    assert_eq!((status, code.as_str()), (403, "AccessDenied"));
    // A presigned PUT that expired writes nothing.
    let put = signed(
        "PUT",
        &format!("{}/{}/late", gateway.url, gateway.bucket),
        &[],
        b"",
        SECRET,
        now - Duration::from_secs(600),
        Some(Duration::from_secs(300)),
    );
    assert_eq!(
        send(&unsigned("PUT", &put.url), b"late".to_vec()).await.0,
        403
    );
    assert!(absent(&gateway, "late").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_memory_bound_is_refused_before_it_is_read() {
    // 32 MiB in all, so 8 MiB for one body.
    let gateway = gateway(&["--max-body-memory-mib", "32"]).await;
    let url = format!("{}/{}/big", gateway.url, gateway.bucket);
    let body = vec![7u8; 9 << 20];
    let length = body.len().to_string();
    let extra = [("content-length", length.as_str())];
    let request = signed("PUT", &url, &extra, &body, SECRET, SystemTime::now(), None);
    // Refused from its head: the answer comes before any of the body is sent.
    let answer = exchange(&gateway, raw_head(&gateway, &request)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("EntityTooLarge"), "{answer}");
    assert!(absent(&gateway, "big").await);
    // A request head over 64 KiB is refused by the HTTP layer.
    let huge = "x".repeat(80 << 10);
    let extra = [("x-amz-meta-huge", huge.as_str())];
    let request = signed("GET", &url, &extra, b"", SECRET, SystemTime::now(), None);
    let answer = exchange(&gateway, raw_head(&gateway, &request)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_xml_and_headers_get_400() {
    let gateway = gateway(&[]).await;
    let bucket_url = format!("{}/{}", gateway.url, gateway.bucket);
    gateway
        .client()
        .put(&Path::from("x"), "x".into())
        .await
        .unwrap();
    let now = SystemTime::now();
    let xml = b"<Delete><Object><Key>x</Key></Object";
    let delete = signed(
        "POST",
        &format!("{bucket_url}?delete"),
        &[],
        xml,
        SECRET,
        now,
        None,
    );
    let (status, code) = send(&delete, xml.to_vec()).await;
    assert_eq!((status, code.as_str()), (400, "MalformedXML"));
    assert!(
        !absent(&gateway, "x").await,
        "a malformed DeleteObjects deleted"
    );
    let complete = signed(
        "POST",
        &format!("{bucket_url}/x?uploadId=nope"),
        &[],
        b"<CompleteMultipartUpload><Part>",
        SECRET,
        now,
        None,
    );
    let (status, _) = send(&complete, b"<CompleteMultipartUpload><Part>".to_vec()).await;
    assert_eq!(status, 400);
    for (name, value) in [
        ("range", "bytes=zz-1"),
        ("if-none-match", "\"unterminated"),
        ("if-modified-since", "yesterday"),
    ] {
        let get = signed(
            "GET",
            &format!("{bucket_url}/x"),
            &[(name, value)],
            b"",
            SECRET,
            now,
            None,
        );
        let (status, _) = send(&get, Vec::new()).await;
        assert_eq!(status, 400, "{name}: {value}");
    }
    // Keys object_store cannot name exactly are refused, not stored under another name
    // (`.` and `..` segments too, which HTTP clients resolve before sending: the unit
    // tests of src/gateway/keys.rs hold those).
    for key in ["a//b", "trailing/"] {
        let url = format!("{bucket_url}/{key}");
        let put = signed("PUT", &url, &[], b"v", SECRET, now, None);
        let (status, code) = send(&put, b"v".to_vec()).await;
        assert_eq!((status, code.as_str()), (400, "InvalidArgument"), "{key}");
    }
}

/// A small deterministic generator (the test must repeat exactly from its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Malformed requests, signed and not, seeded: every one gets an HTTP answer (a panic
/// in a handler would drop its connection unanswered), none of them unsigned succeeds,
/// and the gateway is still healthy afterwards. Then raw bytes that are not HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_answered_never_dropped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gateway = gateway(&[]).await;
    let mut rng = Rng(0x0005_eed0_f9a7_e3a7_u64);
    let methods = ["GET", "PUT", "POST", "DELETE", "HEAD"];
    let paths = [
        "",
        "/",
        "/%ZZ",
        "/x/",
        "/other-bucket/k",
        "/BUCKET",
        "/BUCKET/k",
        "/BUCKET/a%2F%2Fb",
        "/BUCKET/%00",
        "/BUCKET/k/../../etc",
    ];
    let queries = [
        "",
        "?delete",
        "?uploads",
        "?uploadId=",
        "?uploadId=x&partNumber=0",
        "?uploadId=x&partNumber=99999",
        "?list-type=2&max-keys=-1",
        "?list-type=2&continuation-token=%FF",
        "?versions&key-marker=zz",
        "?location",
        "?versioning",
        "?acl",
        "?tagging",
        "?X-Amz-Expires=abc",
    ];
    let headers = [
        ("range", "bytes=5-1"),
        ("range", "bytes=-0"),
        ("if-match", "*"),
        ("if-match", "\"a\", \"b\""),
        ("if-none-match", "W/\"x\""),
        ("content-md5", "not base64"),
        ("content-md5", "AAAAAAAAAAAAAAAAAAAAAA=="),
        ("x-amz-copy-source", "/BUCKET/k"),
        ("x-amz-copy-source", "%%"),
        ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ("x-amz-decoded-content-length", "10"),
        ("content-type", "multipart/form-data; boundary=x"),
        ("x-amz-server-side-encryption", "AES256"),
    ];
    let bodies: [&[u8]; 4] = [
        b"",
        b"<Delete/>",
        b"\xff\xfe\x00garbage",
        b"<CompleteMultipartUpload/>",
    ];
    let mut succeeded_unsigned = Vec::new();
    for round in 0..300 {
        let method: &'static str = rng.pick(&methods);
        let path = rng.pick(&paths).replace("BUCKET", &gateway.bucket);
        let url = format!("{}{path}{}", gateway.url, rng.pick(&queries));
        let Ok(_) = url.parse::<http::Uri>() else {
            continue;
        };
        let header = headers[(rng.next() % headers.len() as u64) as usize];
        let header = [(header.0, header.1.replace("BUCKET", &gateway.bucket))];
        let extra: Vec<(&str, &str)> = header.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let body = bodies[(rng.next() % bodies.len() as u64) as usize];
        let sign_it = rng.next().is_multiple_of(2);
        let request = if sign_it {
            signed(method, &url, &extra, body, SECRET, SystemTime::now(), None)
        } else {
            let mut request = unsigned(method, &url);
            request.headers = extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            request
        };
        let (status, code) = send(&request, body.to_vec()).await;
        if !sign_it && (200..300).contains(&status) && !path.is_empty() && path != "/" {
            succeeded_unsigned.push(format!("round {round}: {method} {url} -> {status} {code}"));
        }
    }
    assert!(
        succeeded_unsigned.is_empty(),
        "unsigned requests succeeded: {succeeded_unsigned:#?}"
    );
    let address = gateway.url.trim_start_matches("http://").to_owned();
    for garbage in [
        &b"\x00\x01\x02\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"PUT /a HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    ] {
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        socket.write_all(garbage).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut answer)).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 4"),
            "{garbage:?} -> {text}"
        );
    }
    let health = reqwest::get(format!("{}/health", gateway.url))
        .await
        .unwrap();
    assert_eq!(
        health.status(),
        200,
        "the gateway is not healthy after the malformed requests"
    );
}

/// What s3s would otherwise read into memory before any signature check, or beyond the
/// body budget: browser form uploads (whatever their content type's bytes), and
/// aws-chunked bodies longer on the wire than their decoded length allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_s3s_would_buffer_are_refused_before_they_are_read() {
    let gateway = gateway(&[]).await;
    // A form whose content type holds a byte over 0x7f (not text to `to_str`).
    let mut form = format!(
        "POST /{} HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000000\r\ncontent-type: multipart/form-data; boundary=\"",
        gateway.bucket
    )
    .into_bytes();
    form.extend_from_slice(&[0xc3, 0xa9]);
    form.extend_from_slice(b"\"\r\n\r\n");
    let answer = exchange(&gateway, form).await;
    assert!(answer.starts_with("HTTP/1.1 501"), "{answer}");
    // Signed, streaming, one decoded byte declared; its one chunk declares a MiB and
    // brings 100 KiB. s3s would buffer the chunk whole before checking its signature:
    // the gateway cuts the body off at the decoded length and its framing.
    let url = format!("{}/{}/chunked", gateway.url, gateway.bucket);
    let mut body = format!("100000;chunk-signature={}\r\n", "0".repeat(64)).into_bytes();
    body.extend(std::iter::repeat_n(b'x', 100 << 10));
    let length = body.len().to_string();
    let request = signed_with_payload(
        "PUT",
        &url,
        &[
            ("x-amz-decoded-content-length", "1"),
            ("content-encoding", "aws-chunked"),
            ("content-length", &length),
        ],
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    );
    let mut whole = raw_head(&gateway, &request);
    whole.extend(body);
    let answer = exchange(&gateway, whole).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("IncompleteBody"), "{answer}");
    assert!(absent(&gateway, "chunked").await);
    // An XML request (DeleteObjects) declaring more than s3s reads of XML is refused
    // before its body.
    let url = format!("{}/{}?delete", gateway.url, gateway.bucket);
    let request = signed_with_payload(
        "POST",
        &url,
        &[
            ("x-amz-decoded-content-length", "10485760"),
            ("content-encoding", "aws-chunked"),
            ("content-length", "0"),
        ],
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    );
    let answer = exchange(&gateway, raw_head(&gateway, &request)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("EntityTooLarge"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv2_however_spelled_and_presigned_urls_beyond_seven_days_are_refused() {
    let gateway = gateway(&[]).await;
    let key_url = format!("{}/{}/k", gateway.url, gateway.bucket);
    // SigV2's query names, percent-encoded (s3s decodes them before it reads them).
    let v2 = format!(
        "{key_url}?%41WSAccessKeyId={}&%53ignature=abc&Expires=9999999999",
        common::gateway::ACCESS_KEY
    );
    let (status, _) = send(&unsigned("GET", &v2), Vec::new()).await;
    assert_eq!(status, 403);
    let eight_days = Duration::from_secs(8 * 24 * 3600);
    let long = signed(
        "GET",
        &key_url,
        &[],
        b"",
        SECRET,
        SystemTime::now(),
        Some(eight_days),
    );
    let (status, code) = send(&unsigned("GET", &long.url), Vec::new()).await;
    assert_eq!(
        (status, code.as_str()),
        (400, "AuthorizationQueryParametersError")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_match_its_checksum_or_md5_writes_nothing() {
    let gateway = gateway(&[]).await;
    let url = format!("{}/{}/summed", gateway.url, gateway.bucket);
    let now = SystemTime::now();
    for (name, value) in [
        ("x-amz-checksum-crc32", "AAAAAA=="),
        (
            "x-amz-checksum-sha256",
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
        ),
        ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
    ] {
        let request = signed("PUT", &url, &[(name, value)], b"body", SECRET, now, None);
        let (status, code) = send(&request, b"body".to_vec()).await;
        assert_eq!((status, code.as_str()), (400, "BadDigest"), "{name}");
        assert!(absent(&gateway, "summed").await, "{name}");
    }
    // The body's own CRC32, base64 as S3 writes it, is taken.
    let request = signed(
        "PUT",
        &url,
        &[("x-amz-checksum-crc32", "26gLsg==")],
        b"body",
        SECRET,
        now,
        None,
    );
    let (status, code) = send(&request, b"body".to_vec()).await;
    assert_eq!(
        (status, code.as_str()),
        (200, ""),
        "the right CRC32 was refused"
    );
}

/// Answers a client's retry logic reads: a ranged read of a missing key is 404 (a 416
/// is never retried), one past the end 416; a copy-if-absent from a missing source is
/// 404, not a 500 "may have applied"; a 304 names the ETag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_copies_fail_with_the_status_s3_gives() {
    let gateway = gateway(&[]).await;
    let bucket_url = format!("{}/{}", gateway.url, gateway.bucket);
    let now = SystemTime::now();
    let get = |key: &str, headers: &[(&str, &str)]| {
        signed(
            "GET",
            &format!("{bucket_url}/{key}"),
            headers,
            b"",
            SECRET,
            now,
            None,
        )
    };
    let (status, code) = send(
        &get("orange-00416.csv", &[("range", "bytes=0-9")]),
        Vec::new(),
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    gateway
        .client()
        .put(&Path::from("small"), "0123".into())
        .await
        .unwrap();
    let (status, code) = send(&get("small", &[("range", "bytes=100-200")]), Vec::new()).await;
    assert_eq!((status, code.as_str()), (416, "InvalidRange"));
    let copy = signed(
        "PUT",
        &format!("{bucket_url}/target"),
        &[
            ("x-amz-copy-source", &format!("/{}/missing", gateway.bucket)),
            ("if-none-match", "*"),
        ],
        b"",
        SECRET,
        now,
        None,
    );
    let (status, code) = send(&copy, Vec::new()).await;
    assert_eq!((status, code.as_str()), (404, "NoSuchKey"));
    let etag = gateway
        .client()
        .head(&Path::from("small"))
        .await
        .unwrap()
        .e_tag
        .unwrap();
    let request = get("small", &[("if-none-match", etag.as_str())]);
    let client = reqwest::Client::new();
    let mut builder = client.get(&request.url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let response = builder.send().await.unwrap();
    assert_eq!(response.status(), 304);
    let answered = response
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(
        answered.as_deref().map(|e| e.trim_matches('"')),
        Some(etag.trim_matches('"'))
    );
}
