//! What a poller is doing, as its health server reads it: its role, the lease's holder and
//! term, the offset, and its counters.

use super::*;

/// What a poller is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// It has not yet asked the store.
    Starting,
    /// It holds the lease and polls.
    Leader,
    /// It holds the lease, but its last renewal failed: it polls again once a renewal succeeds.
    Suspended,
    /// Another poller holds the lease (or none does and the store cannot be reached): it does not
    /// poll, and takes over when the lease lapses.
    Standby,
    /// It lost the lease without releasing it and waits out the cooldown before contending.
    CoolingDown,
    /// It has stopped.
    Stopped,
}

impl Role {
    /// The role's name in logs and views.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Starting => "starting",
            Role::Leader => "leader",
            Role::Suspended => "suspended",
            Role::Standby => "standby",
            Role::CoolingDown => "cooling_down",
            Role::Stopped => "stopped",
        }
    }
}

/// The poller's counts since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollerCounters {
    /// getUpdates calls answered.
    pub polls: u64,
    /// Updates made durable.
    pub updates: u64,
    /// Times it acquired the lease.
    pub acquisitions: u64,
    /// Of those, takeovers of a lapsed lease.
    pub takeovers: u64,
    /// Takeovers within a minute of the previous one (logged as an alert).
    pub flapping: u64,
    /// Checkpoints refused because a newer leader held the lease.
    pub checkpoints_refused: u64,
    /// Renewals that failed or came too late.
    pub renewals_failed: u64,
    /// Times it lost the lease other than by releasing it.
    pub leadership_lost: u64,
}

#[derive(Default)]
pub(super) struct Counts {
    pub(super) polls: AtomicU64,
    pub(super) updates: AtomicU64,
    pub(super) acquisitions: AtomicU64,
    pub(super) takeovers: AtomicU64,
    pub(super) flapping: AtomicU64,
    pub(super) checkpoints_refused: AtomicU64,
    pub(super) renewals_failed: AtomicU64,
    pub(super) leadership_lost: AtomicU64,
}

impl Counts {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> PollerCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PollerCounters {
            polls: get(&self.polls),
            updates: get(&self.updates),
            acquisitions: get(&self.acquisitions),
            takeovers: get(&self.takeovers),
            flapping: get(&self.flapping),
            checkpoints_refused: get(&self.checkpoints_refused),
            renewals_failed: get(&self.renewals_failed),
            leadership_lost: get(&self.leadership_lost),
        }
    }
}

/// A poller's view of itself and of the lease, for `/readyz`, `/status` and `tgq status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollerStatus {
    /// This poller.
    pub holder: HolderId,
    /// What it is doing.
    pub role: Role,
    /// Who holds the lease as it last saw (itself when leader).
    pub leader: Option<HolderId>,
    /// That lease's token.
    pub token: Option<u64>,
    /// When that lease ends unless renewed.
    pub lease_until: Option<Timestamp>,
    /// The next getUpdates offset it knows of (its own while leader, the checkpoint it resumed
    /// from otherwise).
    pub offset: Option<i64>,
    /// Whether its last call to the store was answered.
    pub store_reachable: bool,
    /// Its counts.
    pub counters: PollerCounters,
}

impl PollerStatus {
    /// Ready means a leader or a standby that reaches the store: a standby is ready but does not
    /// poll. Otherwise the reason it is not.
    pub fn readiness(&self) -> Result<(), String> {
        match self.role {
            Role::Leader | Role::Standby | Role::CoolingDown if self.store_reachable => Ok(()),
            Role::Leader | Role::Standby | Role::CoolingDown | Role::Suspended => {
                Err("the lease's store cannot be reached".into())
            }
            Role::Starting => Err("not yet started".into()),
            Role::Stopped => Err("stopped".into()),
        }
    }
}

pub(super) struct View {
    pub(super) role: Role,
    pub(super) leader: Option<HolderId>,
    pub(super) token: Option<u64>,
    pub(super) lease_until: Option<Timestamp>,
    pub(super) offset: Option<i64>,
    pub(super) store_reachable: bool,
}

pub(super) struct Shared {
    pub(super) holder: HolderId,
    pub(super) view: Mutex<View>,
    pub(super) counts: Counts,
}

/// Reads a running poller's status from another task (the health server).
#[derive(Clone)]
pub struct PollerHandle(pub(super) Arc<Shared>);

impl PollerHandle {
    /// The poller's status now.
    pub fn status(&self) -> PollerStatus {
        let view = self.0.view.lock();
        PollerStatus {
            holder: self.0.holder.clone(),
            role: view.role,
            leader: view.leader.clone(),
            token: view.token,
            lease_until: view.lease_until,
            offset: view.offset,
            store_reachable: view.store_reachable,
            counters: self.0.counts.snapshot(),
        }
    }
}
