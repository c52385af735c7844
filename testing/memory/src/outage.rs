//! Fault injection: a switch that makes an adapter's calls fail, all of them or one operation, with
//! the kind of failure a test stages.

use parking_lot::Mutex;
use tgq_core::PortError;

/// The kind of failure an [`Outage`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Throttling, a 5xx, a timeout: [`PortError::Unavailable`].
    Unavailable,
    /// Access denied, a missing table: [`PortError::Misconfigured`].
    Misconfigured,
}

#[derive(Clone, Copy, Debug)]
struct Injected {
    fault: Fault,
    /// Only this operation fails (its name as the adapter reports it); every one when `None`.
    only: Option<&'static str>,
    /// How many more calls fail before the adapter heals by itself; until healed when `None`.
    left: Option<u32>,
}

/// A switch that makes an adapter fail its calls while it is on.
#[derive(Debug, Default)]
pub struct Outage(Mutex<Option<Injected>>);

impl Outage {
    /// Makes every call unavailable (`true`), or heals the adapter (`false`).
    pub fn set(&self, down: bool) {
        *self.0.lock() = down.then_some(Injected {
            fault: Fault::Unavailable,
            only: None,
            left: None,
        });
    }

    /// Makes every call fail with `fault`.
    pub fn fail(&self, fault: Fault) {
        *self.0.lock() = Some(Injected {
            fault,
            only: None,
            left: None,
        });
    }

    /// Makes only the operation `what` (e.g. `"store settle"`) fail with `fault`.
    pub fn fail_only(&self, what: &'static str, fault: Fault) {
        *self.0.lock() = Some(Injected {
            fault,
            only: Some(what),
            left: None,
        });
    }

    /// Makes only the next `times` calls of the operation `what` fail with `fault`: a store that
    /// is down for a moment.
    pub fn fail_only_times(&self, what: &'static str, fault: Fault, times: u32) {
        *self.0.lock() = (times > 0).then_some(Injected {
            fault,
            only: Some(what),
            left: Some(times),
        });
    }

    pub(crate) fn check(&self, what: &'static str) -> Result<(), PortError> {
        let mut slot = self.0.lock();
        let Some(injected) = slot.as_mut() else {
            return Ok(());
        };
        if injected.only.is_some_and(|only| only != what) {
            return Ok(());
        }
        let injected = *injected;
        match injected.left {
            Some(1) => *slot = None,
            Some(n) => {
                if let Some(current) = slot.as_mut() {
                    current.left = Some(n - 1);
                }
            }
            None => {}
        }
        Err(match injected.fault {
            Fault::Unavailable => PortError::unavailable(what, "injected outage"),
            Fault::Misconfigured => PortError::misconfigured(what, "injected: access denied"),
        })
    }
}
