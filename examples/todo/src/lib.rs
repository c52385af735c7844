//! A to-do list per chat: `/add TEXT`, `/list` with a button per item, a press marks it done.
use serde::{Deserialize, Serialize};
use tgq::prelude::*;

/// My commands:
#[derive(BotCommands, Clone)]
#[command(rename_rule = "lowercase")]
pub enum Command {
    /// Adds an item: /add milk
    Add(String),
    /// Lists the items, a button each.
    List,
    /// Removes every item.
    Clear,
}

/// What a button carries: the item it marks done.
#[derive(Serialize, Deserialize)]
pub struct Done(pub usize);

/// The chat's list: each item's text, whether it is done, and when it was added (unix seconds).
#[derive(Default, Serialize, Deserialize)]
pub struct Todo(pub Vec<(String, bool, u64)>);

impl ChatState for Todo {
    const FORMAT: &'static str = "todo/v1";
}

pub fn handlers() -> HandlerRegistry {
    HandlerRegistry::new().with_handler("todo", TodoBot(Router::new().keyboard_buttons()))
}

pub struct TodoBot(Router<Command, Done>);

#[async_trait]
impl Handler for TodoBot {
    async fn handle(&self, update: Update, ctx: &mut Context<'_>) -> Result<(), HandlerError> {
        let mut todo: Todo = ctx.state()?.unwrap_or_default();
        match self.0.route(&update) {
            Route::Command(Command::Add(text), m) => {
                // A side effect, recorded: a retried /add keeps the time of its first run.
                let now = ctx.step("added", || async { Ok(unix_now()) }).await?;
                todo.0.push((text, false, now));
                let count = todo.0.len();
                ctx.reply(m, format!("Added. {count} on the list.")).await?;
            }
            Route::Command(Command::List, m) => ctx.reply_with(m, "To do:", list(&todo)).await?,
            Route::Command(Command::Clear, m) => {
                todo.0.clear();
                ctx.reply(m, "Cleared.").await?;
            }
            Route::Button(Done(i), query) => {
                todo.0.get_mut(i).into_iter().for_each(|item| item.1 = true);
                ctx.answer(query, "Done!").await?;
                ctx.edit(query, "To do:", list(&todo)).await?;
            }
            Route::BadCommand(_, m) => ctx.reply(m, Command::descriptions().to_string()).await?,
            _ => return Ok(()),
        }
        ctx.set_state(&todo)
    }
}

fn list(todo: &Todo) -> Keyboard {
    let mark = |done: bool| if done { "✅" } else { "⬜" };
    let items = todo.0.iter().enumerate();
    Keyboard::column(items.map(|(i, (text, done, _))| (format!("{} {text}", mark(*done)), Done(i))))
}

fn unix_now() -> u64 {
    let now = std::time::SystemTime::UNIX_EPOCH.elapsed();
    now.map_or(0, |d| d.as_secs())
}
