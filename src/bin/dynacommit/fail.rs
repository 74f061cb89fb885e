//! Why a command failed, and the exit code that says so: 2 for a usage or configuration
//! error (the command line or the environment must change), 1 for a failure while doing
//! the work (a service refused or was unreachable, a race found a broken log).

use std::process::ExitCode;

/// A command's error, printed as one line on stderr.
#[derive(Debug)]
pub enum Fail {
    /// The command line or the environment is wrong: exit code 2.
    Usage(String),
    /// The work failed: exit code 1.
    Failure(String),
}

/// The exit code of a usage or configuration error (clap's, too).
pub const USAGE: u8 = 2;

impl From<String> for Fail {
    /// Errors from doing the work are failures; usage errors are made explicitly.
    fn from(message: String) -> Self {
        Self::Failure(message)
    }
}

impl Fail {
    /// Prints the error and returns its exit code.
    pub fn report(self) -> ExitCode {
        let (code, message) = match self {
            Self::Usage(message) => (ExitCode::from(USAGE), message),
            Self::Failure(message) => (ExitCode::FAILURE, message),
        };
        eprintln!("dynacommit: error: {}", readable(&message));
        code
    }
}

/// `message` with S3's raw XML error bodies replaced by what they mean and what to do.
fn readable(message: &str) -> String {
    let Some(xml) = message.find("<?xml") else {
        return message.to_owned();
    };
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = message[xml..].find(&open)? + xml + open.len();
        let end = message[start..].find(&format!("</{name}>"))? + start;
        Some(message[start..end].to_owned())
    };
    let said = match (tag("Code").as_deref(), tag("BucketName")) {
        (Some("NoSuchBucket"), Some(bucket)) => format!(
            "the bucket {bucket} does not exist (NoSuchBucket): create it, or check the \
             --store URL"
        ),
        (Some(code), _) => format!(
            "the store answered {code}: {}",
            tag("Message").unwrap_or_default()
        ),
        (None, _) => return message.to_owned(),
    };
    // Keep what came before the body (the operation and path), drop the XML after it.
    let head = message[..xml].trim_end().trim_end_matches(':');
    format!("{head}: {said}")
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn s3_xml_error_bodies_become_sentences() {
        let raw = "writer 0 failed creating version 0: Error performing PUT http://127.0.0.1:4568/nb/x in 2ms - Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>nb</BucketName></Error> (the write may or may not have been applied)";
        let said = readable(raw);
        assert!(
            said.contains("the bucket nb does not exist (NoSuchBucket)"),
            "{said}"
        );
        assert!(
            said.starts_with("writer 0 failed creating version 0"),
            "{said}"
        );
        assert!(!said.contains("<Error>"), "{said}");
        assert_eq!(readable("plain words"), "plain words");
    }
}
