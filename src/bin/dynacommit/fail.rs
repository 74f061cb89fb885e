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
        eprintln!("dynacommit: error: {message}");
        code
    }
}
