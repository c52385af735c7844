//! The time the use cases spend waiting on AWS and Telegram, measured around the real ports: an SDK
//! interceptor on the DynamoDB and SQS clients (from just before a request is sent to its answer's
//! arrival, so signing and parsing count as tgq's own time), and a decorator of the [`BotApi`] port.
//! Calls that overlap count once: a wait is time during which at least one call was in flight.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::bail;
use async_trait::async_trait;
use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use serde_json::Value;
use tgq_core::telegram::{ApiCall, BotApi, CallError};

/// Whom a call waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Dynamo,
    Sqs,
    Telegram,
}

impl Service {
    const ALL: [Service; 3] = [Service::Dynamo, Service::Sqs, Service::Telegram];

    fn index(self) -> usize {
        self as usize
    }
}

/// Time with at least one call in flight.
#[derive(Debug, Default)]
struct Union {
    in_flight: usize,
    since: Option<Instant>,
    total: Duration,
    calls: u32,
}

impl Union {
    fn start(&mut self, now: Instant) {
        if self.in_flight == 0 {
            self.since = Some(now);
        }
        self.in_flight += 1;
        self.calls += 1;
    }

    fn end(&mut self, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            if let Some(since) = self.since.take() {
                self.total += now - since;
            }
        }
    }
}

#[derive(Debug, Default)]
struct State {
    services: [Union; 3],
    any: Union,
}

/// What one stretch of work waited, by service and in all.
#[derive(Clone, Copy, Debug, Default)]
pub struct Waited {
    /// Per [`Service`]: the time waited and the calls made.
    pub by_service: [(Duration, u32); 3],
    /// Time with any call in flight.
    pub any: Duration,
}

impl Waited {
    pub fn of(&self, service: Service) -> (Duration, u32) {
        self.by_service[service.index()]
    }
}

/// The waits of every timed client, shared.
#[derive(Debug, Default)]
pub struct Waits {
    state: Mutex<State>,
}

impl Waits {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn start(&self, service: Service) {
        let now = Instant::now();
        self.with(|state| {
            state.services[service.index()].start(now);
            state.any.start(now);
        });
    }

    fn end(&self, service: Service) {
        let now = Instant::now();
        self.with(|state| {
            state.services[service.index()].end(now);
            state.any.end(now);
        });
    }

    /// What was waited since the last take, and starts counting afresh. Refused while a call is in
    /// flight, or when one ended without an answer (a transport failure), which would make the
    /// figures wrong.
    pub fn take(&self) -> anyhow::Result<Waited> {
        self.with(|state| {
            if state.any.in_flight > 0 {
                bail!("an AWS or Telegram call is still in flight or got no answer");
            }
            let taken = Waited {
                by_service: Service::ALL.map(|service| {
                    let union = &state.services[service.index()];
                    (union.total, union.calls)
                }),
                any: state.any.total,
            };
            *state = State::default();
            Ok(taken)
        })
    }
}

/// The SDK interceptor: a request's transmission, to the arrival of its answer.
#[derive(Debug)]
pub struct Timed {
    pub service: Service,
    pub waits: Arc<Waits>,
}

impl Intercept for Timed {
    fn name(&self) -> &'static str {
        "tgq-warm wait timer"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.waits.start(self.service);
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.waits.end(self.service);
        Ok(())
    }
}

/// The [`BotApi`] port, its calls timed.
pub struct TimedApi {
    pub inner: Arc<dyn BotApi>,
    pub waits: Arc<Waits>,
}

#[async_trait]
impl BotApi for TimedApi {
    async fn call(&self, call: &ApiCall<'_>) -> Result<Value, CallError> {
        self.waits.start(Service::Telegram);
        let result = self.inner.call(call).await;
        self.waits.end(Service::Telegram);
        result
    }

    fn records_outcomes(&self) -> bool {
        self.inner.records_outcomes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_calls_count_once_in_all_and_apart_per_service() {
        let waits = Waits::default();
        waits.start(Service::Dynamo);
        waits.start(Service::Dynamo);
        std::thread::sleep(Duration::from_millis(20));
        waits.end(Service::Dynamo);
        waits.start(Service::Telegram);
        std::thread::sleep(Duration::from_millis(20));
        waits.end(Service::Dynamo);
        waits.end(Service::Telegram);
        let waited = waits.take().unwrap();
        let (dynamo, dynamo_calls) = waited.of(Service::Dynamo);
        let (telegram, telegram_calls) = waited.of(Service::Telegram);
        assert_eq!((dynamo_calls, telegram_calls), (2, 1));
        assert!(dynamo >= Duration::from_millis(40), "{dynamo:?}");
        assert!(telegram >= Duration::from_millis(20), "{telegram:?}");
        // The two services overlapped for the second 20 ms: in all, about 40 ms, not 60.
        assert!(waited.any >= Duration::from_millis(40), "{:?}", waited.any);
        assert!(waited.any < dynamo + telegram, "{:?}", waited.any);
        assert_eq!(
            waits.take().unwrap().any,
            Duration::ZERO,
            "taking starts afresh"
        );
    }

    #[test]
    fn a_call_without_an_answer_makes_the_figures_refused() {
        let waits = Waits::default();
        waits.start(Service::Sqs);
        assert!(waits.take().is_err());
    }
}
