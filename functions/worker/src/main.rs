//! The worker Lambda of the reference SAM application: the whole function is
//! [`tgq_aws::worker::run`], with the handlers of the bot in `bot/`.

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    tgq_aws::worker::run(tgq_bot::handlers()).await
}
