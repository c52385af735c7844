//! `tgq noop-http` (hidden): an HTTP/1.1 server that answers every webhook request the way
//! `tgq local` answers an update it queued, at once, storing nothing. `tgq-bench` measures it
//! next to `tgq local`, with the same runtime, allocator, listener and routing, to tell what
//! the machine's HTTP path allows from what durability costs (docs/PERFORMANCE.md).

use std::path::PathBuf;

use anyhow::Context as _;
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use clap::Args;
use tokio::net::TcpListener;

/// Where the no-op server listens and says where it listens.
#[derive(Debug, Args)]
pub struct NoopHttpArgs {
    /// The address to listen on (port 0: the kernel picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: String,
    /// The address the server got is written to `<DIR>/webhook.addr` (and `local.addr`), as
    /// `tgq local` writes its listeners'.
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
}

/// Serves until the process is stopped.
pub async fn run(args: NoopHttpArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    std::fs::create_dir_all(&args.data_dir)?;
    // It has one listener: the webhook's address and the admin's are the same.
    for file in [crate::config::WEBHOOK_ADDR_FILE, crate::config::ADDR_FILE] {
        let addr_file = args.data_dir.join(file);
        std::fs::write(&addr_file, format!("{}\n", listener.local_addr()?))
            .with_context(|| format!("cannot write {}", addr_file.display()))?;
    }
    let router = Router::new()
        .route("/webhook", any(answer))
        .route("/readyz", get(|| async { StatusCode::OK }));
    axum::serve(listener, router)
        .await
        .context("the HTTP server failed")
}

/// Reads the whole body, as the webhook does, and answers what it answers for a queued update.
async fn answer(body: Body) -> Response {
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(_) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            r#"{"result":"queued"}"#,
        )
            .into_response(),
        Err(_) => StatusCode::BAD_REQUEST.into_response(),
    }
}
