//! Fault injection: a switch that makes an adapter's every call fail as unavailable.

use std::sync::atomic::{AtomicBool, Ordering};

use tgq_core::PortError;

/// A switch that makes an adapter fail every call with [`PortError::Unavailable`] while it is on.
#[derive(Debug, Default)]
pub struct Outage(AtomicBool);

impl Outage {
    /// Turns the outage on or off.
    pub fn set(&self, down: bool) {
        self.0.store(down, Ordering::SeqCst);
    }

    pub(crate) fn check(&self, what: &'static str) -> Result<(), PortError> {
        if self.0.load(Ordering::SeqCst) {
            return Err(PortError::unavailable(what, "injected outage"));
        }
        Ok(())
    }
}
