//! Faults a test queues up, and the order in which calls consume them.

use std::time::Duration;

use crate::envelope::ApiError;

/// A failure the fake answers with instead of the normal result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after = N`.
    RetryAfter(u32),
    /// A 5xx answer with this status (500, 502, 503, …) named by its reason phrase.
    ServerError(u16),
    /// Wait this long, then answer normally: the call is delivered even if the client gave up.
    Timeout(Duration),
    /// 403 `Forbidden: bot was blocked by the user`.
    Blocked,
    /// 403 `Forbidden: user is deactivated` (the account was deleted).
    Deactivated,
    /// 400 `Bad Request: chat not found`.
    ChatNotFound,
    /// 400 `Bad Request: group chat was upgraded to a supergroup chat` naming the new chat id.
    MigrateToChat(i64),
    /// 401 `Unauthorized`.
    Unauthorized,
    /// 400 `Bad Request: message text is empty` (a request Telegram can never accept).
    BadRequest,
}

/// What a fault does to the call it applies to.
pub(crate) enum Effect {
    /// Answer with this error; the call is not performed.
    Refuse(ApiError),
    /// Perform the call, but answer only after this delay.
    Delay(Duration),
}

impl Fault {
    pub(crate) fn effect(&self) -> Effect {
        let error = match *self {
            Self::RetryAfter(seconds) => ApiError::too_many_requests(seconds.into()),
            Self::ServerError(code) => ApiError::server_error(code),
            Self::Timeout(delay) => return Effect::Delay(delay),
            Self::Blocked => ApiError::blocked(),
            Self::Deactivated => ApiError::deactivated(),
            Self::ChatNotFound => ApiError::chat_not_found(),
            Self::MigrateToChat(chat_id) => ApiError::migrated(chat_id),
            Self::Unauthorized => ApiError::unauthorized(),
            Self::BadRequest => ApiError::bad_request("message text is empty"),
        };
        Effect::Refuse(error)
    }
}

/// Which calls a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every call that accepts faults, whatever its chat.
    Global,
    /// Only calls whose `chat_id` is this chat.
    Chat(i64),
}

/// How many calls a fault applies to before it is used up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// The next matching call only.
    Once,
    /// The next N matching calls.
    N(u32),
    /// Every matching call until [`FakeTelegram::clear_faults`](crate::FakeTelegram::clear_faults).
    Always,
}

/// Queued faults in injection order.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    queued: Vec<Queued>,
}

#[derive(Debug)]
struct Queued {
    fault: Fault,
    scope: Scope,
    /// Calls left to apply to; `None` never runs out.
    left: Option<u32>,
}

impl Faults {
    pub(crate) fn inject(&mut self, fault: Fault, scope: Scope, times: Times) {
        let left = match times {
            Times::Once => Some(1),
            Times::N(0) => return,
            Times::N(n) => Some(n),
            Times::Always => None,
        };
        self.queued.push(Queued { fault, scope, left });
    }

    pub(crate) fn clear(&mut self) {
        self.queued.clear();
    }

    /// Takes the fault for a call on `chat`: the oldest one scoped to that chat, else the oldest
    /// global one.
    #[cfg(test)]
    pub(crate) fn take(&mut self, chat: Option<i64>) -> Option<Fault> {
        self.take_scoped(chat).map(|(fault, _)| fault)
    }

    /// As `take`, with the scope the fault was injected for.
    pub(crate) fn take_scoped(&mut self, chat: Option<i64>) -> Option<(Fault, Scope)> {
        let index = chat
            .and_then(|chat| self.oldest(Scope::Chat(chat)))
            .or_else(|| self.oldest(Scope::Global))?;
        let queued = &mut self.queued[index];
        let taken = (queued.fault.clone(), queued.scope);
        if let Some(left) = &mut queued.left {
            *left -= 1;
            if *left == 0 {
                self.queued.remove(index);
            }
        }
        Some(taken)
    }

    fn oldest(&self, scope: Scope) -> Option<usize> {
        self.queued.iter().position(|queued| queued.scope == scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_fault_is_taken_before_an_older_global_one() {
        let mut faults = Faults::default();
        faults.inject(Fault::Blocked, Scope::Global, Times::Once);
        faults.inject(Fault::ChatNotFound, Scope::Chat(7), Times::Once);

        assert_eq!(faults.take(Some(7)), Some(Fault::ChatNotFound));
        assert_eq!(faults.take(Some(7)), Some(Fault::Blocked));
        assert_eq!(faults.take(Some(7)), None);
    }

    #[test]
    fn calls_without_a_chat_only_see_global_faults() {
        let mut faults = Faults::default();
        faults.inject(Fault::Blocked, Scope::Chat(7), Times::Always);

        assert_eq!(faults.take(None), None);
    }

    #[test]
    fn n_times_is_used_up_after_n_calls_and_zero_times_is_ignored() {
        let mut faults = Faults::default();
        faults.inject(Fault::Unauthorized, Scope::Global, Times::N(0));
        faults.inject(Fault::RetryAfter(3), Scope::Global, Times::N(2));

        assert_eq!(faults.take(Some(1)), Some(Fault::RetryAfter(3)));
        assert_eq!(faults.take(Some(2)), Some(Fault::RetryAfter(3)));
        assert_eq!(faults.take(Some(3)), None);
    }
}
