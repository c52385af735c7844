//! What the Bot API server checks of the lists a call hands it — an inline query's results, the
//! bot's commands — refused in its words (telegram-bot-api's `Client.cpp` and TDLib's
//! `BotCommand.cpp`).

use serde_json::{Map, Value};

use crate::envelope::ApiError;
use crate::params::Params;

/// `answerInlineQuery`'s most results.
const MAX_INLINE_RESULTS: usize = 50;
/// `setMyCommands`' most commands.
const MAX_COMMANDS: usize = 100;
/// A command's longest name, in characters, without its `/`.
const MAX_COMMAND_CHARS: usize = 32;
/// A command's longest description, in characters.
const MAX_DESCRIPTION_CHARS: usize = 256;

/// A query id: Telegram's are numbers, and one it does not know is answered as an expired query.
pub(crate) fn query_id(params: &Params, key: &str) -> Result<(), ApiError> {
    match params.int(key) {
        Some(id) if id != 0 => Ok(()),
        _ => Err(ApiError::bad_request(
            "query is too old and response timeout expired or query ID is invalid",
        )),
    }
}

/// `answerInlineQuery`'s `results`: absent or empty is no results; otherwise an array of at most
/// [`MAX_INLINE_RESULTS`] objects, each with a `type` and an `id`.
pub(crate) fn inline_query_results(params: &Params) -> Result<(), ApiError> {
    let results = match list(params, "results") {
        List::Absent => return Ok(()),
        List::Unreadable => {
            return Err(ApiError::bad_request(
                "can't parse JSON encoded inline query results",
            ))
        }
        List::NotAnArray => {
            return Err(ApiError::bad_request(
                "expected an Array of inline query results",
            ))
        }
        List::Items(results) => results,
    };
    if results.len() > MAX_INLINE_RESULTS {
        return Err(ApiError::bad_request(
            "too many inline query results specified",
        ));
    }
    for result in results {
        let fields = result
            .as_object()
            .ok_or_else(|| "Inline query result must be an object".to_owned())
            .and_then(|fields| {
                required_string(fields, "type")?;
                required_string(fields, "id")?;
                Ok(())
            });
        if let Err(why) = fields {
            return Err(ApiError::bad_request(&format!(
                "can't parse inline query result: {why}"
            )));
        }
    }
    Ok(())
}

/// `setMyCommands`' `commands`: absent or empty clears the list; otherwise at most
/// [`MAX_COMMANDS`] objects, each a `command` of lowercase letters, digits and underscores (a
/// leading `/` is dropped) and a `description`.
pub(crate) fn bot_commands(params: &Params) -> Result<(), ApiError> {
    let commands = match list(params, "commands") {
        List::Absent => return Ok(()),
        List::Unreadable => return Err(ApiError::bad_request("can't parse commands JSON object")),
        List::NotAnArray => return Err(ApiError::bad_request("expected an Array of BotCommand")),
        List::Items(commands) => commands,
    };
    let mut names = Vec::new();
    for command in commands {
        let (name, description) = command
            .as_object()
            .ok_or_else(|| "expected an Object".to_owned())
            .and_then(|fields| {
                Ok((
                    required_string(fields, "command")?,
                    required_string(fields, "description")?,
                ))
            })
            .map_err(|why| ApiError::bad_request(&format!("can't parse BotCommand: {why}")))?;
        names.push(bot_command(name, description)?);
    }
    // What TDLib lets through, Telegram itself refuses: too many, or a name it does not allow.
    if names.len() > MAX_COMMANDS {
        return Err(ApiError::bad_request("BOT_COMMANDS_TOO_MUCH"));
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if !names.iter().all(|name| name.chars().all(allowed)) {
        return Err(ApiError::bad_request("BOT_COMMAND_INVALID"));
    }
    Ok(())
}

/// One command as TDLib checks it before it goes to Telegram: its name without the `/`, or why
/// not.
fn bot_command<'c>(name: &'c str, description: &str) -> Result<&'c str, ApiError> {
    let name = name.trim();
    let name = name.strip_prefix('/').unwrap_or(name);
    let description = description.trim();
    if name.is_empty() {
        return Err(ApiError::bad_request("command must be non-empty"));
    }
    if name.chars().count() > MAX_COMMAND_CHARS {
        return Err(ApiError::bad_request(&format!(
            "command length must not exceed {MAX_COMMAND_CHARS}"
        )));
    }
    if description.is_empty() {
        return Err(ApiError::bad_request(
            "command description must be non-empty",
        ));
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(ApiError::bad_request(&format!(
            "command description length must not exceed {MAX_DESCRIPTION_CHARS}"
        )));
    }
    Ok(name)
}

/// A list parameter as the Bot API server reads it.
enum List<'p> {
    /// Missing, `null` or an empty string: an empty list.
    Absent,
    /// A string that is not JSON (a form field is read as JSON only when it is).
    Unreadable,
    NotAnArray,
    Items(&'p [Value]),
}

fn list<'p>(params: &'p Params, key: &str) -> List<'p> {
    match params.get(key) {
        None | Some(Value::Null) => List::Absent,
        Some(Value::String(text)) if text.is_empty() => List::Absent,
        Some(Value::String(_)) => List::Unreadable,
        Some(Value::Array(items)) => List::Items(items),
        Some(_) => List::NotAnArray,
    }
}

/// A string field of an object, or what the server says of it, without the `Bad Request:`.
fn required_string<'v>(fields: &'v Map<String, Value>, name: &str) -> Result<&'v str, String> {
    match fields.get(name) {
        None => Err(format!("Can't find field \"{name}\"")),
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(format!("Field \"{name}\" must be of type String")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refusal(outcome: Result<(), ApiError>) -> String {
        let error = outcome.expect_err("refused");
        let body = crate::envelope::Answer::from(error).body;
        body["description"].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn a_query_id_must_be_a_number_telegram_could_have_given() {
        for id in [json!("4382139112311411203"), json!(42)] {
            assert!(query_id(
                &Params::of(json!({ "inline_query_id": id })),
                "inline_query_id"
            )
            .is_ok());
        }
        for given in [
            json!({}),
            json!({"inline_query_id": "iq"}),
            json!({"inline_query_id": 0}),
        ] {
            assert_eq!(
                refusal(query_id(&Params::of(given), "inline_query_id")),
                "Bad Request: query is too old and response timeout expired or query ID is invalid"
            );
        }
    }

    #[test]
    fn inline_query_results_may_be_empty_but_each_needs_a_type_and_an_id() {
        assert!(inline_query_results(&Params::of(json!({}))).is_ok());
        assert!(inline_query_results(&Params::of(json!({"results": []}))).is_ok());
        let article = json!({"type": "article", "id": "1", "title": "t",
            "input_message_content": {"message_text": "T"}});
        assert!(inline_query_results(&Params::of(json!({ "results": [article] }))).is_ok());

        let cases = [
            (
                json!({"results": [{"type": "article"}]}),
                "Bad Request: can't parse inline query result: Can't find field \"id\"",
            ),
            (
                json!({"results": [{"type": "article", "id": 1}]}),
                "Bad Request: can't parse inline query result: Field \"id\" must be of type String",
            ),
            (
                json!({"results": {"type": "article"}}),
                "Bad Request: expected an Array of inline query results",
            ),
            (
                json!({"results": "[not json"}),
                "Bad Request: can't parse JSON encoded inline query results",
            ),
            (
                json!({ "results": vec![json!({"type": "article", "id": "1"}); 51] }),
                "Bad Request: too many inline query results specified",
            ),
        ];
        for (given, description) in cases {
            assert_eq!(
                refusal(inline_query_results(&Params::of(given))),
                description
            );
        }
    }

    #[test]
    fn bot_commands_are_checked_as_telegram_checks_them() {
        let command = |name: &str, description: &str| {
            Params::of(json!({"commands": [{"command": name, "description": description}]}))
        };
        assert!(
            bot_commands(&Params::of(json!({}))).is_ok(),
            "no list clears it"
        );
        assert!(bot_commands(&command("start", "A greeting.")).is_ok());
        assert!(
            bot_commands(&command("/roll_2", "Rolls.")).is_ok(),
            "a leading / is dropped"
        );

        let long_name = "a".repeat(33);
        let long_description = "d".repeat(257);
        let cases = [
            (
                command("Start", "A greeting."),
                "Bad Request: BOT_COMMAND_INVALID",
            ),
            (
                command("start", " "),
                "Bad Request: command description must be non-empty",
            ),
            (
                command("/", "Nothing."),
                "Bad Request: command must be non-empty",
            ),
            (
                command(&long_name, "Long."),
                "Bad Request: command length must not exceed 32",
            ),
            (
                command("start", &long_description),
                "Bad Request: command description length must not exceed 256",
            ),
            (
                Params::of(json!({"commands": [{"command": "start"}]})),
                "Bad Request: can't parse BotCommand: Can't find field \"description\"",
            ),
            (
                Params::of(json!({"commands": {"command": "start"}})),
                "Bad Request: expected an Array of BotCommand",
            ),
            (
                Params::of(
                    json!({ "commands": vec![json!({"command": "a", "description": "b"}); 101] }),
                ),
                "Bad Request: BOT_COMMANDS_TOO_MUCH",
            ),
        ];
        for (given, description) in cases {
            assert_eq!(refusal(bot_commands(&given)), description);
        }
    }
}
