//! The hostile-input target over the webhook request: method, headers, body and size, generated from
//! a seed, through the webhook's HTTP front (`tgq_aws::webhook::handle`, the Lambda's) and the ingest use
//! case on the in-memory adapters. Each input is checked against four properties:
//!
//! 1. nothing panics;
//! 2. no 5xx answers a client's error (the adapters never fail here, so any 5xx is a defect);
//! 3. an unauthenticated request (a secret missing, differing in one byte or in length) stores,
//!    enqueues and dead-letters nothing;
//! 4. an authenticated poison body is answered 200 and dead-lettered, and every 200 leaves a
//!    durable trace (a record and a queue message, or a dead letter).
//!
//! `cargo run --release -p tgq-drill --bin fuzz-webhook -- --inputs 1000000` runs it at length and
//! prints inputs per second; a fixed slice runs in the suite (`tests/fuzz_slice.rs`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use lambda_http::{Body, Request};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use secrecy::SecretString;
use tgq_core::clock::SystemClock;
use tgq_core::ids::BotId;
use tgq_core::ingest::{Ingest, Webhook, WebhookPorts, WebhookSettings, Webhooks, SECRET_HEADER};
use tgq_memory::{MemoryDeadLetters, MemoryQueue, MemoryStore};

/// The secret the fuzzed webhook expects.
pub const SECRET: &str = "fuzz-Secret-0123456789_abcdefXYZ";
/// The body limit the fuzzed webhook enforces (small, so "just under and over" is cheap).
pub const LIMIT: usize = 4096;
/// Inputs per fresh set of adapters: keeps the checks' reads of the adapters short.
const INPUTS_PER_HARNESS: u64 = 64;

/// How an input was built, which decides what the webhook must answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secret {
    /// The right secret.
    Right,
    /// Missing, empty, differing in one byte or in length, or only in a second header.
    Wrong,
}

/// What the body is, as the generator built it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// A valid update.
    Update,
    /// Certainly not an update (invalid UTF-8, not JSON, wrong types, nested arrays, …).
    Poison,
    /// Mutated bytes: could be either.
    Unknown,
    /// Over the limit.
    Oversize,
}

/// One generated request.
#[derive(Clone, Debug)]
pub struct Input {
    /// The HTTP method.
    pub method: String,
    /// Headers, raw bytes (a header may repeat).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
    /// How the secret was chosen.
    pub secret: Secret,
    /// How the body was built.
    pub kind: BodyKind,
}

/// A property an input broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which input (its index from the seed).
    pub index: u64,
    /// What went wrong.
    pub what: String,
    /// The input, abridged.
    pub input: String,
}

/// The generator: deterministic for a seed.
pub struct Generator {
    rng: StdRng,
}

impl Generator {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Generator {
        Generator {
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The next input.
    pub fn next_input(&mut self) -> Input {
        let method = match self.rng.random_range(0..20) {
            0 => "GET",
            1 => "PUT",
            2 => "DELETE",
            3 => "PATCH",
            4 => "OPTIONS",
            5 => "HEAD",
            6 => "FOO",
            _ => "POST",
        }
        .to_owned();
        let (secret_headers, secret) = self.secret();
        let mut headers: Vec<(String, Vec<u8>)> = secret_headers;
        if self.rng.random_bool(0.5) {
            headers.push(("content-type".into(), b"application/json".to_vec()));
        }
        if self.rng.random_bool(0.1) {
            headers.push(("content-type".into(), self.bytes(0..40)));
        }
        let (body, kind) = self.body();
        Input {
            method,
            headers,
            body,
            secret,
            kind,
        }
    }

    fn secret(&mut self) -> (Vec<(String, Vec<u8>)>, Secret) {
        let right = SECRET.as_bytes().to_vec();
        let header = |v: Vec<u8>| vec![(SECRET_HEADER.to_owned(), v)];
        match self.rng.random_range(0..12) {
            0 => (Vec::new(), Secret::Wrong),
            1 => (header(Vec::new()), Secret::Wrong),
            2 => {
                // One byte differs, anywhere, by anything.
                let mut v = right;
                let at = self.rng.random_range(0..v.len());
                v[at] = v[at].wrapping_add(self.rng.random_range(1..=255));
                (header(v), Secret::Wrong)
            }
            3 => {
                let cut = self.rng.random_range(0..right.len());
                (header(right[..cut].to_vec()), Secret::Wrong)
            }
            4 => {
                let mut v = right;
                v.extend(self.bytes(1..4));
                (header(v), Secret::Wrong)
            }
            5 => {
                let mut v = right;
                v[0] = v[0].to_ascii_lowercase() ^ 0x20;
                (header(v), Secret::Wrong)
            }
            6 => (
                vec![
                    ("x-telegram-bot-api-secret-tokn".into(), right),
                    ("authorization".into(), b"Bearer x".to_vec()),
                ],
                Secret::Wrong,
            ),
            _ => (header(right), Secret::Right),
        }
    }

    fn bytes(&mut self, len: std::ops::Range<usize>) -> Vec<u8> {
        let n = self.rng.random_range(len);
        (0..n).map(|_| self.rng.random()).collect()
    }

    fn update(&mut self) -> String {
        let id: i64 = self.rng.random_range(1..1_000_000_000);
        let chat: i64 = self.rng.random_range(-1_000_000_000_000..1_000_000_000_000);
        let text: String = (0..self.rng.random_range(0..60))
            .map(|_| char::from_u32(self.rng.random_range(32..0x2FFF)).unwrap_or('?'))
            .collect();
        crate::plan::message(id, chat, &text).to_string()
    }

    fn body(&mut self) -> (Vec<u8>, BodyKind) {
        let choice = self.rng.random_range(0..16);
        match choice {
            0..=3 => (self.update().into_bytes(), BodyKind::Update),
            4 => {
                // Invalid UTF-8 inside an otherwise plausible update.
                let mut b = self.update().into_bytes();
                let at = self.rng.random_range(0..b.len());
                b.insert(at, 0xC3);
                b.insert(at + 1, 0x28);
                (b, BodyKind::Unknown)
            }
            5 => {
                // Nesting far past serde_json's recursion limit, within the body limit.
                let depth = self.rng.random_range(1..LIMIT / 2);
                let mut b = "[".repeat(depth).into_bytes();
                b.extend("]".repeat(depth).into_bytes());
                (b, BodyKind::Poison)
            }
            6 => {
                let depth = self.rng.random_range(1..LIMIT / 30);
                let mut b = String::new();
                for _ in 0..depth {
                    b.push_str(r#"{"update_id":1,"message":"#);
                }
                b.push('1');
                b.push_str(&"}".repeat(depth));
                (b.into_bytes(), BodyKind::Unknown)
            }
            7 => {
                let number = match self.rng.random_range(0..6) {
                    0 => "1e400".to_owned(),
                    1 => "18446744073709551616".to_owned(),
                    2 => "-9223372036854775809".to_owned(),
                    3 => "1.5".to_owned(),
                    4 => "-0".to_owned(),
                    _ => "9".repeat(self.rng.random_range(20..400)),
                };
                (
                    format!(r#"{{"update_id":{number},"message":{{"chat":{{"id":1}}}}}}"#)
                        .into_bytes(),
                    BodyKind::Unknown,
                )
            }
            8 => {
                let id: i64 = self.rng.random_range(1..1_000_000);
                (
                    format!(r#"{{"update_id":{id},"update_id":"x","message":{{"chat":{{"id":5}},"chat":7}}}}"#)
                        .into_bytes(),
                    BodyKind::Unknown,
                )
            }
            9 => {
                // Just under, at, and just over the limit.
                let size = LIMIT - 2 + self.rng.random_range(0..4usize);
                let prefix = format!(
                    r#"{{"update_id":{},"pad":""#,
                    self.rng.random_range(1..1000)
                );
                let mut b = prefix.into_bytes();
                while b.len() + 2 < size {
                    b.push(b'a');
                }
                b.extend(b"\"}");
                b.truncate(size);
                let kind = if b.len() > LIMIT {
                    BodyKind::Oversize
                } else {
                    BodyKind::Unknown
                };
                (b, kind)
            }
            10 => (self.bytes(0..200), BodyKind::Unknown),
            11 => {
                let mut b = self.update().into_bytes();
                let cut = self.rng.random_range(0..b.len());
                b.truncate(cut);
                (b, BodyKind::Poison)
            }
            12 => {
                let b = match self.rng.random_range(0..5) {
                    0 => "null",
                    1 => "[]",
                    2 => r#"{"update_id":"7"}"#,
                    3 => r#""\ud800""#,
                    _ => "",
                };
                (b.as_bytes().to_vec(), BodyKind::Poison)
            }
            13 => {
                let size = LIMIT + self.rng.random_range(1..3 * LIMIT);
                (vec![b'{'; size], BodyKind::Oversize)
            }
            _ => {
                // A valid update with a few bytes flipped.
                let mut b = self.update().into_bytes();
                for _ in 0..self.rng.random_range(1..4) {
                    let at = self.rng.random_range(0..b.len());
                    b[at] = self.rng.random();
                }
                (b, BodyKind::Unknown)
            }
        }
    }
}

/// The webhook under test and its adapters.
struct Harness {
    webhook: Webhooks,
    store: Arc<MemoryStore>,
    queue: Arc<MemoryQueue>,
    dead: Arc<MemoryDeadLetters>,
}

impl Harness {
    fn new() -> Harness {
        let store = Arc::new(MemoryStore::new());
        let queue = Arc::new(MemoryQueue::new(Arc::new(SystemClock)));
        let dead = Arc::new(MemoryDeadLetters::new());
        let webhook = Webhooks::single(Webhook::new(
            WebhookSettings {
                bot_id: BotId::new("fuzz").expect("a valid bot id"),
                secret: SecretString::from(SECRET.to_owned()),
                max_body_bytes: LIMIT,
                record_ttl: tgq_core::defaults::RECORD_TTL,
                ack_callbacks: false,
            },
            WebhookPorts {
                ingest: Ingest::PutThenSend {
                    store: store.clone(),
                    queue: queue.clone(),
                },
                dead: dead.clone(),
                clock: Arc::new(SystemClock),
            },
        ));
        Harness {
            webhook,
            store,
            queue,
            dead,
        }
    }

    fn traces(&self) -> (usize, u64, usize) {
        (
            self.store.len(),
            self.queue.sends(),
            self.dead.letters().len(),
        )
    }
}

fn request(input: &Input) -> Option<Request> {
    let mut builder = http::Request::builder()
        .method(input.method.as_str())
        .uri("/");
    for (name, value) in &input.headers {
        let value = http::HeaderValue::from_bytes(value).ok()?;
        builder = builder.header(name.as_str(), value);
    }
    builder.body(Body::Binary(input.body.clone())).ok()
}

/// Runs `count` inputs from `seed`; returns the violations found (empty when every property held).
pub fn run(seed: u64, count: u64) -> Vec<Violation> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut generator = Generator::new(seed);
    let mut harness = Harness::new();
    let mut violations = Vec::new();
    // Poison bodies the current harness has lettered: the same body again is the same letter (its
    // dedup id is the body's hash, as on the FIFO dead-letter queue).
    let mut lettered = std::collections::HashSet::new();
    for index in 0..count {
        if index % INPUTS_PER_HARNESS == 0 {
            harness = Harness::new();
            lettered.clear();
        }
        let input = generator.next_input();
        let Some(request) = request(&input) else {
            // A header value HTTP itself cannot carry never reaches the webhook.
            continue;
        };
        let before = harness.traces();
        let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(tgq_aws::webhook::handle(
                &harness.webhook,
                &tgq_aws::webhook::AllowedSources::default(),
                request,
            ))
        }));
        let after = harness.traces();
        let mut broke = |what: String| {
            violations.push(Violation {
                index,
                what,
                input: abridged(&input),
            })
        };
        let status = match answered {
            Err(_) => {
                broke("panicked".into());
                continue;
            }
            Ok(Err(error)) => {
                broke(format!("the front failed: {error}"));
                continue;
            }
            Ok(Ok(response)) => response.status().as_u16(),
        };
        if status >= 500 {
            broke(format!("answered {status} to a client's request"));
        }
        let post = input.method == "POST";
        let authenticated = post && input.secret == Secret::Right;
        if !authenticated && after != before {
            broke(format!(
                "an unauthenticated request left traces: {before:?} -> {after:?}"
            ));
        }
        if !post && status != 405 {
            broke(format!("{} answered {status}, not 405", input.method));
        }
        if post && input.secret == Secret::Wrong && status != 401 {
            broke(format!("a wrong secret answered {status}, not 401"));
        }
        if authenticated && input.kind == BodyKind::Oversize && (status != 413 || after != before) {
            broke(format!(
                "an oversize body answered {status} and left {before:?} -> {after:?}"
            ));
        }
        let repeated_poison =
            authenticated && input.kind == BodyKind::Poison && !lettered.insert(input.body.clone());
        let new_letters = usize::from(!repeated_poison);
        if authenticated
            && input.kind == BodyKind::Poison
            && (status != 200 || after.2 != before.2 + new_letters)
        {
            broke(format!(
                "a poison body answered {status}, letters {} -> {}",
                before.2, after.2
            ));
        }
        if authenticated && input.kind == BodyKind::Update && (status != 200 || after.0 < before.0)
        {
            broke(format!("an update answered {status}"));
        }
        let traced = after.1 > before.1
            || after.2 > before.2
            || repeated_poison
            || status == 200 && after.0 == before.0;
        if status == 200 && !traced {
            broke(format!(
                "answered 200 without a durable trace: {before:?} -> {after:?}"
            ));
        }
        if violations.len() >= 20 {
            break;
        }
    }
    violations
}

fn abridged(input: &Input) -> String {
    let body = String::from_utf8_lossy(&input.body[..input.body.len().min(120)]).into_owned();
    format!(
        "{} secret={:?} kind={:?} {} bytes: {body:?}",
        input.method,
        input.secret,
        input.kind,
        input.body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_for_a_seed() {
        let mut a = Generator::new(7);
        let mut b = Generator::new(7);
        for _ in 0..50 {
            let (x, y) = (a.next_input(), b.next_input());
            assert_eq!((x.method, x.body, x.secret), (y.method, y.body, y.secret));
        }
    }
}
