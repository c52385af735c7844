//! The HTTP adapter against the fake Bot API: every failure Telegram can give maps to its class.

use std::time::Duration;

use secrecy::SecretString;
use serde_json::json;
use teloxide_core::payloads::SendMessage;
use teloxide_core::types::{ChatId, Message};
use tgq_core::telegram::{ApiCall, BotApi, CallError, TelegramError};
use tgq_core::ErrorClass;
use tgq_fake_telegram::{FakeTelegram, Fault, Scope, Times};
use tgq_telegram::{call, HttpBotApi};

/// A client patient enough that no answer of the local fake outlasts it, however loaded the machine.
async fn client(fake: &FakeTelegram) -> HttpBotApi {
    client_waiting(fake, Duration::from_secs(30)).await
}

async fn client_waiting(fake: &FakeTelegram, timeout: Duration) -> HttpBotApi {
    HttpBotApi::new(
        &fake.url(),
        SecretString::from(fake.token().to_owned()),
        timeout,
    )
    .unwrap()
}

/// One untyped call, its failure as Telegram's error.
async fn raw(
    api: &HttpBotApi,
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, TelegramError> {
    match api.call(&ApiCall::plain(method, &params)).await {
        Ok(value) => Ok(value),
        Err(CallError::Telegram(e)) => Err(e),
        Err(CallError::Store(e)) => panic!("the HTTP adapter has no store: {e}"),
    }
}

#[tokio::test]
async fn a_typed_send_returns_the_fakes_message() {
    let fake = FakeTelegram::start().await.unwrap();
    let api = client(&fake).await;
    let message: Message = call(&api, &SendMessage::new(ChatId(5), "hello"))
        .await
        .unwrap();
    assert_eq!(message.chat.id, ChatId(5));
    assert_eq!(fake.delivered_to(5).len(), 1);
}

#[tokio::test]
async fn each_injected_fault_maps_to_its_error_and_class() {
    let fake = FakeTelegram::start().await.unwrap();
    let api = client(&fake).await;
    // Gives up after a second; the fake holds its answer for a minute.
    let impatient = client_waiting(&fake, Duration::from_secs(1)).await;
    let cases = [
        (
            Fault::RetryAfter(7),
            ErrorClass::RateLimited(Duration::from_secs(7)),
        ),
        (Fault::ServerError(502), ErrorClass::Transient),
        (Fault::Blocked, ErrorClass::Permanent),
        (Fault::ChatNotFound, ErrorClass::Permanent),
        (Fault::Unauthorized, ErrorClass::Permanent),
        (
            Fault::Timeout(Duration::from_secs(60)),
            ErrorClass::Transient,
        ),
    ];
    for (fault, class) in cases {
        fake.inject(fault.clone(), Scope::Chat(9), Times::Once);
        let caller = match fault {
            Fault::Timeout(_) => &impatient,
            _ => &api,
        };
        let err = raw(caller, "sendMessage", json!({"chat_id": 9, "text": "x"}))
            .await
            .unwrap_err();
        assert_eq!(err.class(), class, "{fault:?} gave {err:?}");
    }
    // Every refusal is undelivered; the timed-out call landed although its caller gave up: that is
    // exactly the uncertain outcome the worker's action records exist for.
    assert_eq!(fake.delivered_to(9).len(), 1);
}

#[tokio::test]
async fn a_blocked_bot_keeps_telegrams_code_and_description() {
    let fake = FakeTelegram::start().await.unwrap();
    let api = client(&fake).await;
    fake.inject(Fault::Blocked, Scope::Global, Times::Once);
    let err = raw(&api, "sendMessage", json!({"chat_id": 1, "text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        TelegramError::Api {
            code: 403,
            description: "Forbidden: bot was blocked by the user".into()
        }
    );
}

#[tokio::test]
async fn migration_is_reported_with_the_new_chat_id() {
    let fake = FakeTelegram::start().await.unwrap();
    let api = client(&fake).await;
    fake.inject(Fault::MigrateToChat(-1009), Scope::Chat(-5), Times::Once);
    let err = raw(&api, "sendMessage", json!({"chat_id": -5, "text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(err, TelegramError::MigrateToChat(-1009));
}

#[tokio::test]
async fn network_errors_never_carry_the_token() {
    let api = HttpBotApi::new(
        "http://127.0.0.1:9",
        SecretString::from("123:VERYSECRET".to_owned()),
        Duration::from_millis(300),
    )
    .unwrap();
    let err = raw(&api, "getMe", json!({})).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(!err.to_string().contains("VERYSECRET"), "{err}");
}

#[tokio::test]
async fn a_call_that_never_left_is_not_sent_and_one_cut_after_it_was_written_is_unknown() {
    // Nobody listens on the port: the connection is refused, the request never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let refused = HttpBotApi::new(
        &url,
        SecretString::from("1:T".to_owned()),
        Duration::from_secs(5),
    )
    .unwrap();
    let err = raw(&refused, "sendMessage", json!({"chat_id": 1, "text": "x"}))
        .await
        .unwrap_err();
    assert!(matches!(err, TelegramError::NotSent(_)), "{err:?}");
    assert!(err.is_definite() && err.is_outage(), "{err:?}");

    // A server that reads the request and hangs up without a word: it may have acted on it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = [0u8; 4096];
            let _ = socket.read(&mut buffer).await;
            drop(socket);
        }
    });
    let cut = HttpBotApi::new(
        &url,
        SecretString::from("1:T".to_owned()),
        Duration::from_secs(5),
    )
    .unwrap();
    let err = raw(&cut, "sendMessage", json!({"chat_id": 1, "text": "x"}))
        .await
        .unwrap_err();
    assert!(matches!(err, TelegramError::Network(_)), "{err:?}");
    assert!(!err.is_definite(), "{err:?}");
}

#[tokio::test]
async fn a_call_with_files_is_sent_as_multipart_with_each_file_where_its_field_names_it() {
    use teloxide_core::payloads::{SendMediaGroup, SendPhoto, SendPhotoSetters};
    use teloxide_core::types::{InputMedia, InputMediaDocument};
    use tgq_core::telegram::Upload;

    let fake = FakeTelegram::start().await.unwrap();
    let api = client(&fake).await;
    let photo = Upload::bytes("cat.jpg", &b"not really a jpeg"[..]).unwrap();
    let payload = SendPhoto::new(ChatId(42), photo.input_file()).caption("a cat");
    let params = serde_json::to_value(&payload).unwrap();
    let files = [photo.clone()];
    let call = ApiCall {
        files: &files,
        ..ApiCall::plain("sendPhoto", &params)
    };
    let sent = api.call(&call).await.unwrap();
    assert!(sent["photo"].is_array(), "a photo message: {sent}");

    let a = Upload::bytes("a.txt", &b"first"[..]).unwrap();
    let b = Upload::bytes("b.txt", &b"second"[..]).unwrap();
    let media = [&a, &b].map(|f| InputMedia::Document(InputMediaDocument::new(f.input_file())));
    let params = serde_json::to_value(SendMediaGroup::new(ChatId(42), media)).unwrap();
    let files = [a.clone(), b.clone()];
    let call = ApiCall {
        files: &files,
        ..ApiCall::plain("sendMediaGroup", &params)
    };
    let album = api.call(&call).await.unwrap();
    assert_eq!(
        album.as_array().map(Vec::len),
        Some(2),
        "a message per item: {album}"
    );
    assert!(album[1]["document"]["file_id"].is_string(), "{album}");

    let video = Upload::bytes("clip.mp4", &b"moving"[..]).unwrap();
    let params = serde_json::to_value(teloxide_core::payloads::SendVideo::new(
        ChatId(42),
        video.input_file(),
    ))
    .unwrap();
    let files = [video];
    let call = ApiCall {
        files: &files,
        ..ApiCall::plain("sendVideo", &params)
    };
    let clip = api.call(&call).await.unwrap();
    assert!(clip["video"]["file_id"].is_string(), "{clip}");

    let calls = fake.calls();
    assert_eq!(
        calls[2].params["video"]["uploaded"]["file_name"],
        "clip.mp4"
    );
    let photo_call = &calls[0].params;
    assert_eq!(photo_call["chat_id"], "42");
    assert_eq!(photo_call["caption"], "a cat");
    assert_eq!(
        photo_call["photo"]["uploaded"],
        json!({"file_name": "cat.jpg", "size": 17, "sha256": photo.sha256()}),
        "the file is the photo field itself"
    );
    let group = &calls[1].params;
    assert_eq!(group["media"][1]["media"], format!("attach://{}", b.name()));
    assert_eq!(group[a.name()]["uploaded"]["file_name"], "a.txt");
    assert_eq!(group[b.name()]["uploaded"]["sha256"], b.sha256());
}

#[tokio::test]
async fn a_file_is_downloaded_from_the_file_server_and_one_over_the_limit_is_refused() {
    let fake = FakeTelegram::start().await.unwrap();
    fake.put_file("doc-1", &b"eleven byte"[..]);
    let api = client(&fake).await;
    let file = raw(&api, "getFile", json!({"file_id": "doc-1"}))
        .await
        .unwrap();
    assert_eq!(file["file_size"], 11);
    let path = file["file_path"].as_str().unwrap();
    assert_eq!(&api.download(path, 20).await.unwrap()[..], b"eleven byte");
    let refused = api.download(path, 10).await.unwrap_err();
    assert!(refused.to_string().contains("over 10 bytes"), "{refused}");
    let missing = api.download("files/nope", 20).await.unwrap_err();
    assert!(
        matches!(missing, TelegramError::Api { code: 404, .. }),
        "{missing:?}"
    );
}
