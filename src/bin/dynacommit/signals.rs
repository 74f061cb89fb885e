//! Ctrl-C and SIGTERM, handled the same way by every command: the first asks the command
//! to stop (waits are cancelled, held leases and locks released, what was done reported),
//! the second ends the process at once with exit code 130.

use tokio::sync::watch;

/// The exit code of an interrupted run (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// Tells whether, and when, the first interrupt came.
#[derive(Debug, Clone)]
pub struct Interrupt(watch::Receiver<bool>);

impl Interrupt {
    /// Completes on the first Ctrl-C or SIGTERM (at once if it already came).
    pub async fn wait(&self) {
        let mut receiver = self.0.clone();
        // An error means the listener task is gone: then no interrupt will ever come.
        if receiver.wait_for(|&interrupted| interrupted).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Installs the handlers (they are in place when this returns) and starts the task that
/// counts interrupts. Must run inside the runtime.
pub fn install() -> Result<Interrupt, String> {
    let (sender, receiver) = watch::channel(false);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"))
        };
        let mut sigint = listen(SignalKind::interrupt(), "Ctrl-C (SIGINT)")?;
        let mut sigterm = listen(SignalKind::terminate(), "SIGTERM")?;
        tokio::spawn(async move {
            let mut seen = 0u32;
            loop {
                tokio::select! {
                    _ = sigint.recv() => {}
                    _ = sigterm.recv() => {}
                }
                seen += 1;
                if seen == 1 {
                    let _ = sender.send(true);
                } else {
                    second_interrupt();
                }
            }
        });
    }
    #[cfg(not(unix))]
    {
        tokio::spawn(async move {
            let mut seen = 0u32;
            while tokio::signal::ctrl_c().await.is_ok() {
                seen += 1;
                if seen == 1 {
                    let _ = sender.send(true);
                } else {
                    second_interrupt();
                }
            }
        });
    }
    Ok(Interrupt(receiver))
}

fn second_interrupt() -> ! {
    eprintln!(
        "dynacommit: interrupted again: exiting now; leases this process still holds expire \
         by themselves (after lease timeout x clock skew rate)"
    );
    std::process::exit(i32::from(INTERRUPTED));
}
