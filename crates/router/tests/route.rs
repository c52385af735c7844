//! Every kind of update lands on its route: commands with and without the bot's name and with
//! arguments, commands for other bots, bad commands, button data by prefix, text, and the rest.

use teloxide_core::types::{Update, UpdateKind};
use tgq_router::{BotCommands, ParseError, Route, Router};

#[derive(BotCommands, Clone, Debug, PartialEq)]
#[command(rename_rule = "lowercase")]
enum Command {
    /// Greets you.
    Start,
    /// Repeats the rest of the line.
    Say(String),
    /// Rolls `count` dice with `sides` sides.
    #[command(parse_with = "split")]
    Roll { count: u8, sides: u8 },
}

#[derive(Clone, Debug, PartialEq)]
enum Button {
    Pressed(u32),
    Page(String),
}

fn router() -> Router<Command, Button> {
    Router::new()
        .username("@tgq_demo_bot")
        .button("pressed:", Button::Pressed)
        .button("page:", Button::Page)
}

fn fixture(json: &str) -> Update {
    serde_json::from_str(json).expect("an Update")
}

/// A private-chat message with `text`.
fn text(text: &str) -> Update {
    fixture(
        &serde_json::json!({
            "update_id": 1,
            "message": {
                "message_id": 1, "date": 1_767_607_200, "text": text,
                "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
            }
        })
        .to_string(),
    )
}

/// A button press on a message in chat 42 carrying `data`.
fn press(data: &str) -> Update {
    fixture(
        &serde_json::json!({
            "update_id": 2,
            "callback_query": {
                "id": "77", "chat_instance": "1", "data": data,
                "from": {"id": 42, "is_bot": false, "first_name": "Ada"},
                "message": {
                    "message_id": 9, "date": 1_767_607_200, "text": "Press me",
                    "chat": {"id": 42, "type": "private", "first_name": "Ada"},
                },
            }
        })
        .to_string(),
    )
}

fn command(update: &Update) -> Option<Command> {
    match router().route(update) {
        Route::Command(command, _) => Some(command),
        _ => None,
    }
}

#[test]
fn commands_are_parsed_with_or_without_this_bots_name_and_with_arguments() {
    let start = fixture(include_str!("../../../events/updates/message_start.json"));
    assert_eq!(command(&start), Some(Command::Start));
    assert_eq!(command(&text("/start@tgq_demo_bot")), Some(Command::Start));
    assert_eq!(command(&text("/start@TGQ_Demo_Bot")), Some(Command::Start));
    assert_eq!(
        command(&text("/say hello there")),
        Some(Command::Say("hello there".into()))
    );
    assert_eq!(
        command(&text("/say@tgq_demo_bot hi")),
        Some(Command::Say("hi".into()))
    );
    assert_eq!(
        command(&text("/roll 3 6")),
        Some(Command::Roll { count: 3, sides: 6 })
    );
}

#[test]
fn a_command_for_another_bot_is_not_this_bots() {
    let update = text("/start@other_bot");
    assert!(matches!(router().route(&update), Route::ForAnotherBot(_)));
    // Without its username the router cannot tell, and stays out of other bots' commands.
    let anonymous = Router::<Command, Button>::new();
    let ours = text("/start@tgq_demo_bot");
    assert!(matches!(anonymous.route(&ours), Route::ForAnotherBot(_)));
    assert!(matches!(
        anonymous.route(&text("/start")),
        Route::Command(Command::Start, _)
    ));
}

#[test]
fn unknown_commands_and_bad_arguments_are_bad_commands_with_the_reason() {
    let unknown = text("/dance");
    assert!(matches!(
        router().route(&unknown),
        Route::BadCommand(ParseError::UnknownCommand(name), _) if name == "/dance"
    ));
    let too_few = text("/roll 3");
    assert!(matches!(
        router().route(&too_few),
        Route::BadCommand(ParseError::TooFewArguments { .. }, _)
    ));
    let not_a_number = text("/roll three 6");
    assert!(matches!(
        router().route(&not_a_number),
        Route::BadCommand(ParseError::IncorrectFormat(_), _)
    ));
}

#[test]
fn text_that_is_not_a_command_is_text_even_with_an_at_sign() {
    for said in ["hello tgq", "me@example.com wrote", "@tgq_demo_bot ping"] {
        let update = text(said);
        match router().route(&update) {
            Route::Text(text, message) => {
                assert_eq!(text, said);
                assert_eq!(message.chat.id.0, 42);
            }
            other => panic!("{said:?} routed to {other:?}"),
        }
    }
    let group = fixture(include_str!("../../../events/updates/message_group.json"));
    assert!(matches!(
        router().route(&group),
        Route::Text("@tgq_demo_bot ping", _)
    ));
}

#[test]
fn button_data_is_routed_by_prefix_and_parsed() {
    let fixture = fixture(include_str!("../../../events/updates/callback_query.json"));
    match router().route(&fixture) {
        Route::Button(button, query) => {
            assert_eq!(button, Button::Pressed(1));
            assert_eq!(query.id.0, "4382139112311411201");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        router().route(&press("page:next")),
        Route::Button(Button::Page(page), _) if page == "next"
    ));
    // A known prefix whose rest does not parse, and an unknown prefix, fall through to Other, so
    // the fallback still answers the query.
    for data in ["pressed:many", "vote:3"] {
        let update = press(data);
        assert!(
            matches!(
                router().route(&update),
                Route::Other(UpdateKind::CallbackQuery(_))
            ),
            "{data}"
        );
    }
}

#[test]
fn other_kinds_reach_the_fallback_by_kind() {
    let edited = fixture(include_str!("../../../events/updates/edited_message.json"));
    assert!(matches!(
        router().route(&edited),
        Route::Other(UpdateKind::EditedMessage(_))
    ));
    let channel = fixture(include_str!("../../../events/updates/channel_post.json"));
    assert!(matches!(
        router().route(&channel),
        Route::Other(UpdateKind::ChannelPost(_))
    ));
    let unknown = fixture(include_str!("../../../events/updates/unknown_kind.json"));
    assert!(matches!(router().route(&unknown), Route::Other(_)));
    let mut photo = text("ignored");
    if let UpdateKind::Message(message) = &mut photo.kind {
        *message = serde_json::from_value(serde_json::json!({
            "message_id": 3, "date": 1_767_607_200,
            "chat": {"id": 42, "type": "private", "first_name": "Ada"},
            "photo": [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}],
        }))
        .unwrap();
    }
    assert!(matches!(
        router().route(&photo),
        Route::Other(UpdateKind::Message(_))
    ));
}

#[test]
fn inline_payment_member_and_join_request_updates_have_routes_of_their_own() {
    let route = |name: &str| {
        let path = format!(
            "{}/../../events/updates/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let update = fixture(&std::fs::read_to_string(&path).expect(&path));
        format!("{:?}", router().route(&update))
    };
    let routes = [
        ("inline_query", "InlineQuery("),
        ("chosen_inline_result", "ChosenInlineResult("),
        ("pre_checkout_query", "PreCheckout("),
        ("shipping_query", "Shipping("),
        ("chat_member", "MemberChanged("),
        ("my_chat_member", "BotMemberChanged("),
        ("chat_join_request", "JoinRequest("),
    ];
    for (fixture, expected) in routes {
        let routed = route(fixture);
        assert!(routed.starts_with(expected), "{fixture}: {routed}");
    }
}

#[test]
fn a_press_on_a_keyboard_button_routes_as_the_value_the_button_was_built_with() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Press {
        Done(usize),
        Clear,
    }
    let router = Router::<Command, Press>::new().keyboard_buttons();
    let keyboard = tgq_router::Keyboard::new()
        .button("milk", &Press::Done(3))
        .button("Clear", &Press::Clear)
        .markup()
        .unwrap();
    let json = serde_json::to_value(&keyboard).unwrap();
    for (button, expected) in [(0, Press::Done(3)), (1, Press::Clear)] {
        let data = json["inline_keyboard"][0][button]["callback_data"]
            .as_str()
            .unwrap();
        let update = press(data);
        match router.route(&update) {
            Route::Button(press, _) => assert_eq!(press, expected),
            other => panic!("{data}: {other:?}"),
        }
    }
    // Data no keyboard wrote falls through, so the fallback still answers the query.
    assert!(matches!(
        router.route(&press("pressed:1")),
        Route::Other(UpdateKind::CallbackQuery(_))
    ));
}

#[test]
fn the_derive_lists_the_commands_for_help_and_set_my_commands() {
    let help = Command::descriptions().to_string();
    assert!(help.contains("/start — Greets you."), "{help}");
    let names: Vec<String> = Command::bot_commands()
        .into_iter()
        .map(|c| c.command)
        .collect();
    assert_eq!(names, ["/start", "/say", "/roll"]);
}
