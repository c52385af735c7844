//! The webhook Lambda of the reference SAM application: the whole function is
//! [`tgq_aws::webhook::run`].

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_http::Error> {
    tgq_aws::webhook::run().await
}
