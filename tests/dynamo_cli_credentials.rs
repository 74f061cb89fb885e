//! The CLI's credentials: explicit keys, else AWS's standard chain (web identity token
//! file, container credentials, ...), as object_store's `AmazonS3Builder` runs it. Only
//! loopback is ever contacted: every run starts from an empty environment, names loopback
//! endpoints, and turns the instance metadata service off.

mod common;

use std::process::Output;
use std::time::Duration;

use common::fake_server::{FakeServer, Reply};

const ACCESS_KEY: &str = "ASIACHAINKEYID";
const SECRET: &str = "chainsecretvalue";
const TOKEN: &str = "chainsessiontoken";

/// A fake DynamoDB that answers everything with "no such table", recording signatures.
async fn fake_dynamodb() -> FakeServer {
    FakeServer::start(|_, _| {
        Reply::With(
            400,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#.into(),
        )
    })
    .await
}

/// Runs `dynacommit table describe` with exactly `env` (and nothing else of ours).
async fn describe_with(dynamodb: &FakeServer, env: &[(&str, String)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dynacommit"));
    command
        .args(["table", "describe", "--table", "t"])
        .env_clear()
        .env("AWS_ENDPOINT_URL_DYNAMODB", &dynamodb.url)
        .env("AWS_REGION", "us-east-1")
        // Belt and braces: never the instance metadata address.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the CLI did not finish in 60 s")
        .unwrap()
}

fn assert_no_secret(output: &Output) {
    for stream in [&output.stdout, &output.stderr] {
        let text = String::from_utf8_lossy(stream);
        for secret in [SECRET, TOKEN] {
            assert!(!text.contains(secret), "{secret} printed: {text}");
        }
    }
}

#[tokio::test]
async fn container_credentials_sign_the_cli_s_requests() {
    let creds = serde_json::json!({
        "AccessKeyId": ACCESS_KEY,
        "SecretAccessKey": SECRET,
        "Token": TOKEN,
        "Expiration": "2099-01-01T00:00:00Z",
    })
    .to_string();
    let credentials_server = FakeServer::start(move |_, _| Reply::With(200, creds.clone())).await;
    let dynamodb = fake_dynamodb().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "container-authorization-token").unwrap();
    let output = describe_with(
        &dynamodb,
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                format!("{}/v1/credentials", credentials_server.url),
            ),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                token_file.display().to_string(),
            ),
        ],
    )
    .await;
    assert_no_secret(&output);
    assert_eq!(credentials_server.requests(), 1, "credentials fetched once");
    let signatures = dynamodb.authorizations();
    assert!(
        !signatures.is_empty(),
        "nothing reached DynamoDB: {output:?}"
    );
    for signature in &signatures {
        assert!(
            signature.contains(&format!("Credential={ACCESS_KEY}/")),
            "{signature}"
        );
    }
    // The fake DynamoDB knows no table: the request got there, signed, and was answered.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("table t does not exist"), "{stderr}");
}

#[tokio::test]
async fn a_web_identity_token_file_is_exchanged_at_sts() {
    // An "STS" on loopback that takes connections and drops them: the exchange fails, but
    // it is tried, which only the web identity provider does.
    let sts = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sts_url = format!("https://{}", sts.local_addr().unwrap());
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = sts.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    let dynamodb = fake_dynamodb().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("web-identity-token");
    std::fs::write(&token_file, "web-identity-token-value").unwrap();
    let output = describe_with(
        &dynamodb,
        &[
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                token_file.display().to_string(),
            ),
            (
                "AWS_ROLE_ARN",
                "arn:aws:iam::123456789012:role/dynacommit".into(),
            ),
            ("AWS_ENDPOINT_URL_STS", sts_url),
        ],
    )
    .await;
    assert_no_secret(&output);
    assert!(!output.status.success());
    assert!(
        connections.load(std::sync::atomic::Ordering::SeqCst) >= 1,
        "STS was never asked: {output:?}"
    );
    assert_eq!(dynamodb.requests(), 0, "nothing to sign with");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("credentials"), "{stderr}");
    assert!(!stderr.contains("web-identity-token-value"), "{stderr}");
}

#[tokio::test]
async fn explicit_keys_still_sign_and_no_chain_without_metadata_is_a_clear_error() {
    let dynamodb = fake_dynamodb().await;
    let output = describe_with(
        &dynamodb,
        &[
            ("AWS_ACCESS_KEY_ID", "AKIDEXPLICIT".into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
        ],
    )
    .await;
    assert_no_secret(&output);
    let signatures = dynamodb.authorizations();
    assert!(
        signatures
            .iter()
            .all(|s| s.contains("Credential=AKIDEXPLICIT/"))
            && !signatures.is_empty(),
        "{signatures:?}"
    );

    // No keys, no chain, and the metadata service turned off: say what to set.
    let nothing = fake_dynamodb().await;
    let output = describe_with(&nothing, &[]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    // In a CLI user's words: variables to set, not library methods.
    assert!(
        stderr.contains("no AWS credentials for DynamoDB: set AWS_ACCESS_KEY_ID")
            && !stderr.contains("with_credential"),
        "{stderr}"
    );
    assert_eq!(nothing.requests(), 0);
}
