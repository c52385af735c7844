//! `tgq local`'s two listeners: what a user exposes to Telegram (`--addr`) serves the webhook and
//! the health checks alone, however it is reached; the console, the admin routes and the metrics
//! are on `--admin-addr`, where a backup is written only into `--backup-dir`.

use crate::common;

use std::net::SocketAddr;

use common::{free_port, message_update, run, Local};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

const SECRET: &str = "listeners-test-secret";

/// A plain TCP forwarder, as `ssh -R`, socat or a proxy_pass to 127.0.0.1 are: it connects to
/// `to` from loopback and copies bytes both ways, adding no header.
async fn forwarder(to: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut outside, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut inside) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut outside, &mut inside).await;
                }
            });
        }
    });
    addr
}

async fn started(dir: &std::path::Path, args: &[&str]) -> Local {
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let mut local = Local::start(dir, &envs, args);
    local.wait_ready().await;
    local
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_forwarder_to_the_webhook_port_reaches_no_admin_route_console_or_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().display().to_string();
    let mut local = started(dir.path(), &["--backup-dir", &backup_dir]).await;
    let exposed = forwarder(local.addr).await;
    let client = reqwest::Client::new();

    // Telegram's requests go through.
    let update = message_update(1, 42, "through the tunnel");
    let answer = client
        .post(format!("http://{exposed}/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    // Nothing else does, whatever the Host header says.
    for (method, path) in [
        ("GET", "/admin/status"),
        ("GET", "/admin/outbox"),
        ("GET", "/admin/dlq"),
        ("GET", "/admin/audit"),
        ("GET", "/admin/console/feed"),
        ("GET", "/"),
        ("GET", "/metrics"),
        ("POST", "/admin/backup?name=stolen.redb"),
        ("POST", "/admin/dlq/purge"),
    ] {
        let request = match method {
            "GET" => client.get(format!("http://{exposed}{path}")),
            _ => client
                .post(format!("http://{exposed}{path}"))
                .json(&Value::Null),
        };
        let answered = request.header("host", "127.0.0.1").send().await.unwrap();
        assert_eq!(
            answered.status(),
            404,
            "{method} {path} through the forwarder"
        );
    }
    assert_eq!(
        std::fs::read_dir(backups.path()).unwrap().count(),
        0,
        "no backup was written"
    );

    // The admin listener, on loopback, serves what the webhook port does not.
    let status = local.status().await;
    assert_eq!(status["stats"]["records"], 1, "{status}");
    let metrics = client
        .get(local.admin_url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backup_route_writes_only_a_new_plain_name_inside_the_backup_directory() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().display().to_string();
    let mut local = started(dir.path(), &["--backup-dir", &backup_dir]).await;
    let client = reqwest::Client::new();
    let post = |name: String| {
        let url = reqwest::Url::parse_with_params(
            &local.admin_url("/admin/backup"),
            &[("name", name.as_str())],
        )
        .unwrap();
        client.post(url).send()
    };

    let outside = elsewhere.path().join("x.redb").display().to_string();
    for name in [outside, "../x.redb".to_owned(), ".hidden".to_owned()] {
        let answered = post(name.clone()).await.unwrap();
        assert_eq!(answered.status(), 400, "{name}");
    }
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

    let answered = post("first.redb".to_owned()).await.unwrap();
    assert_eq!(answered.status(), 200);
    let kept = backups.path().join("first.redb");
    let before = std::fs::read(&kept).unwrap();
    // The route never replaces a file: only the `tgq backup` command does, with --force.
    let again: Value = post("first.redb".to_owned())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        again["result"].as_str().unwrap().contains("already exists"),
        "{again}"
    );
    assert_eq!(std::fs::read(&kept).unwrap(), before);
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_backup_directory_a_running_instance_refuses_backups_and_says_how() {
    let dir = tempfile::tempdir().unwrap();
    let mut local = started(dir.path(), &[]).await;
    let target = tempfile::tempdir().unwrap();
    let to = target.path().join("b.redb").display().to_string();
    let data_dir = dir.path().display().to_string();
    let (status, stdout, stderr) = run(&[], &["backup", "--data-dir", &data_dir, "--to", &to]);
    assert!(!status.success(), "{stdout}");
    assert!(stderr.contains("--backup-dir"), "{stderr}");
    assert!(!target.path().join("b.redb").exists());
    assert!(local.terminate().await.success());
}

#[test]
fn an_admin_listener_other_machines_reach_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().display().to_string();
    let admin = format!("0.0.0.0:{}", free_port());
    let (status, _, stderr) = run(
        &[],
        &[
            "local",
            "--data-dir",
            &data_dir,
            "--addr",
            "127.0.0.1:0",
            "--admin-addr",
            &admin,
        ],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--admin-addr") && stderr.contains("TGQ_ADMIN_TOKEN"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("tgq.redb").exists(),
        "refused before anything was created"
    );
}
