//! The poller lease's conformance bodies (docs/design/fleet.md §1): the same tests for every
//! store of [`PollerLease`]. An adapter crate instantiates them with [`lease_conformance_tests!`]
//! and a factory giving a fresh lease, one nobody has acquired, for each test.
//!
//! Every call names its time, so expiry is tested without sleeping.

use std::sync::Arc;
use std::time::Duration;

use tgq_core::clock::{Clock, SystemClock};
use tgq_core::leadership::{Acquired, HolderId, LeaseError, PollerLease, Term, Won};
use tgq_core::record::Timestamp;

/// A fresh lease for one test.
pub type LeaseUnderTest = Arc<dyn PollerLease>;

/// Expands to one `#[tokio::test]` per lease body, each given a lease built by `$make` (an async
/// expression giving a [`LeaseUnderTest`]).
#[macro_export]
macro_rules! lease_conformance_tests {
    ($make:expr) => {
        $crate::lease_conformance_tests!(@each $make;
            of_two_contenders_one_wins_and_the_other_learns_who_holds_the_lease,
            of_contenders_racing_at_the_same_moment_exactly_one_wins,
            a_lapsed_lease_is_taken_over_with_a_higher_token_and_the_old_term_is_fenced,
            renewal_by_a_non_holder_is_refused_and_the_holder_renews,
            every_acquisition_stores_a_higher_token,
            a_stale_checkpoint_is_refused_and_the_next_leader_resumes_from_the_last_good_one,
            a_released_lease_is_free_at_once_and_a_stale_release_changes_nothing,
            takeovers_within_a_minute_of_each_other_are_counted_as_flapping,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::lease::$name($make.await).await;
            }
        )*
    };
}

const TTL: Duration = Duration::from_secs(15);

fn holder(name: &str) -> HolderId {
    HolderId::new(format!("{name}:conformance")).expect("a valid holder id")
}

fn t0() -> Timestamp {
    SystemClock.now()
}

fn secs(from: Timestamp, s: u64) -> Timestamp {
    from.plus(Duration::from_secs(s))
}

async fn win(lease: &LeaseUnderTest, who: &HolderId, now: Timestamp) -> Won {
    match lease.acquire(who, now, TTL).await.expect("acquire") {
        Acquired::Won(won) => won,
        Acquired::Held(holding) => panic!("{who} expected to win, but {} holds it", holding.holder),
    }
}

fn is_lost<T: std::fmt::Debug>(result: &Result<T, LeaseError>) -> bool {
    matches!(result, Err(LeaseError::Lost { .. }))
}

/// Two contenders at the same moment: the first wins the first token, the second is told who holds
/// the lease and until when.
pub async fn of_two_contenders_one_wins_and_the_other_learns_who_holds_the_lease(
    lease: LeaseUnderTest,
) {
    let (a, b) = (holder("a"), holder("b"));
    let now = t0();
    let won = win(&lease, &a, now).await;
    assert_eq!(won.term.token, 1);
    assert_eq!((won.offset, won.took_over), (None, None));
    let second = lease.acquire(&b, now, TTL).await.unwrap();
    match second {
        Acquired::Held(holding) => {
            assert_eq!(
                (holding.holder, holding.token, holding.until),
                (a, 1, now.plus(TTL))
            );
        }
        Acquired::Won(_) => panic!("both contenders won the lease"),
    }
}

/// Contenders asking at the same moment, concurrently: exactly one wins, with the first token, and
/// every other is told it holds the lease. The same race again after the lease lapsed: exactly one
/// takes it over.
pub async fn of_contenders_racing_at_the_same_moment_exactly_one_wins(lease: LeaseUnderTest) {
    let start = t0();
    for (round, now, token) in [(0, start, 1), (1, secs(start, 16), 2)] {
        let racers = (0..4).map(|i| {
            let lease = lease.clone();
            let who = holder(&format!("racer{round}{i}"));
            tokio::spawn(async move { lease.acquire(&who, now, TTL).await })
        });
        let mut winners = Vec::new();
        for racer in racers.collect::<Vec<_>>() {
            match racer.await.expect("the racer ran").expect("acquire") {
                Acquired::Won(won) => winners.push(won.term),
                Acquired::Held(holding) => assert_eq!(holding.token, token),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        assert_eq!(winners[0].token, token);
    }
}

/// Once the holder's lease lapsed, another takes it over with the next token, says whose it was,
/// and every call of the old term is refused.
pub async fn a_lapsed_lease_is_taken_over_with_a_higher_token_and_the_old_term_is_fenced(
    lease: LeaseUnderTest,
) {
    let (a, b) = (holder("a"), holder("b"));
    let start = t0();
    let old = win(&lease, &a, start).await;
    let still_held = lease.acquire(&b, secs(start, 14), TTL).await.unwrap();
    assert!(matches!(still_held, Acquired::Held(_)), "{still_held:?}");
    let new = win(&lease, &b, secs(start, 15)).await;
    assert_eq!(new.term.token, old.term.token + 1);
    let took_over = new.took_over.expect("a takeover");
    assert_eq!((took_over.from, took_over.from_token), (a, old.term.token));
    let late = secs(start, 16);
    assert!(is_lost(&lease.renew(&old.term, late, TTL).await));
    assert!(is_lost(&lease.checkpoint(&old.term, 7).await));
    assert!(is_lost(&lease.release(&old.term, late).await));
    let stored = lease.read().await.unwrap().expect("the lease is stored");
    assert!(stored.holds(&new.term), "{stored:?}");
}

/// Only the holder of the current term renews: another holder presenting the same token, or the
/// holder presenting another token, is refused. A renewal extends the lease past its first end.
pub async fn renewal_by_a_non_holder_is_refused_and_the_holder_renews(lease: LeaseUnderTest) {
    let (a, b) = (holder("a"), holder("b"));
    let start = t0();
    let won = win(&lease, &a, start).await;
    let impostor = Term {
        holder: b.clone(),
        ..won.term.clone()
    };
    assert!(is_lost(&lease.renew(&impostor, secs(start, 5), TTL).await));
    let forged = Term {
        token: won.term.token + 1,
        ..won.term.clone()
    };
    assert!(is_lost(&lease.renew(&forged, secs(start, 5), TTL).await));
    let renewed = lease.renew(&won.term, secs(start, 10), TTL).await.unwrap();
    assert_eq!(
        (renewed.token, renewed.until),
        (won.term.token, secs(start, 25))
    );
    let after_first_end = lease.acquire(&b, secs(start, 20), TTL).await.unwrap();
    match after_first_end {
        Acquired::Held(holding) => assert_eq!((holding.holder, holding.until), (a, renewed.until)),
        Acquired::Won(_) => panic!("a renewed lease was taken at its first end"),
    }
}

/// Every acquisition — fresh, after a release, after a lapse — stores a higher token than the last.
pub async fn every_acquisition_stores_a_higher_token(lease: LeaseUnderTest) {
    let (a, b) = (holder("a"), holder("b"));
    let start = t0();
    let first = win(&lease, &a, start).await;
    lease.release(&first.term, secs(start, 1)).await.unwrap();
    let second = win(&lease, &b, secs(start, 1)).await;
    let third = win(&lease, &a, secs(start, 17)).await;
    lease.release(&third.term, secs(start, 18)).await.unwrap();
    let fourth = win(&lease, &a, secs(start, 18)).await;
    let tokens = [first, second, third, fourth].map(|w| w.term.token);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// A checkpoint is stored with its term's token; once a newer leader holds the lease, the old
/// leader's checkpoint is refused and the stored offset stays the newer leader's. A leader resumes
/// from the last checkpoint stored.
pub async fn a_stale_checkpoint_is_refused_and_the_next_leader_resumes_from_the_last_good_one(
    lease: LeaseUnderTest,
) {
    let (a, b, c) = (holder("a"), holder("b"), holder("c"));
    let start = t0();
    let first = win(&lease, &a, start).await;
    lease.checkpoint(&first.term, 100).await.unwrap();
    let second = win(&lease, &b, secs(start, 16)).await;
    assert_eq!(second.offset, Some(100));
    lease.checkpoint(&second.term, 150).await.unwrap();
    assert!(is_lost(&lease.checkpoint(&first.term, 200).await));
    let stored = lease.read().await.unwrap().expect("the lease is stored");
    assert_eq!(
        (stored.offset, stored.offset_token),
        (Some(150), Some(second.term.token))
    );
    let third = win(&lease, &c, secs(start, 32)).await;
    assert_eq!(third.offset, Some(150));
}

/// A released lease is free before its end; a release by a term no longer current changes nothing.
pub async fn a_released_lease_is_free_at_once_and_a_stale_release_changes_nothing(
    lease: LeaseUnderTest,
) {
    let (a, b) = (holder("a"), holder("b"));
    let start = t0();
    let first = win(&lease, &a, start).await;
    lease.release(&first.term, secs(start, 2)).await.unwrap();
    let second = win(&lease, &b, secs(start, 3)).await;
    assert_eq!(
        second.took_over, None,
        "a release hands over; nothing lapsed"
    );
    assert!(is_lost(&lease.release(&first.term, secs(start, 4)).await));
    let stored = lease.read().await.unwrap().expect("the lease is stored");
    assert!(stored.holds(&second.term), "{stored:?}");
    assert_eq!(stored.held_at(secs(start, 4)).map(|h| h.holder), Some(b));
}

/// Takeovers are counted in the lease, and one within a minute of the previous is counted as
/// flapping.
pub async fn takeovers_within_a_minute_of_each_other_are_counted_as_flapping(
    lease: LeaseUnderTest,
) {
    let (a, b, c) = (holder("a"), holder("b"), holder("c"));
    let start = t0();
    win(&lease, &a, start).await;
    let second = win(&lease, &b, secs(start, 16)).await;
    assert_eq!(second.took_over.map(|t| t.flapping), Some(false));
    let third = win(&lease, &c, secs(start, 32)).await;
    assert_eq!(third.took_over.map(|t| t.flapping), Some(true));
    let fourth = win(&lease, &a, secs(start, 200)).await;
    assert_eq!(fourth.took_over.map(|t| t.flapping), Some(false));
    let stored = lease.read().await.unwrap().expect("the lease is stored");
    assert_eq!((stored.takeovers, stored.flaps), (3, 1));
}
