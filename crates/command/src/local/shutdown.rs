//! One shutdown signal for every task of `tgq local`: SIGINT (Ctrl-C) or SIGTERM, the end of
//! `--demo --exit`, or a task that cannot go on.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

/// A cloneable handle: trigger it once, and every task waiting on it stops.
#[derive(Clone, Debug)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
}

impl Shutdown {
    /// A shutdown not yet triggered.
    pub fn new() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Asks every task to stop.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Whether shutdown was asked for.
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }

    /// A receiver that turns `true` once shutdown is asked for.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.sender.subscribe()
    }

    /// Resolves once shutdown is asked for.
    pub async fn wait(&self) {
        let mut receiver = self.sender.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|stop| *stop).await;
    }

    /// Triggers on the first SIGINT or SIGTERM; a second one ends the process at once.
    pub fn on_signals(&self) -> anyhow::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let shutdown = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            info!("shutting down: no new updates accepted, in-flight batches finish (signal again to stop at once)");
            shutdown.trigger();
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            warn!("stopping at once; unfinished updates are redelivered after their visibility timeout");
            std::process::exit(130);
        });
        Ok(())
    }
}

/// Resolves on SIGINT or SIGTERM: how a command that runs until stopped (`tgq fake-telegram`,
/// `tgq outbox --follow`) learns it is to stop.
pub async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
