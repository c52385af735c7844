//! `tgq backup` copies the store while `tgq local` serves; `tgq local` starts from the restored copy
//! and goes on where the copy left off; a damaged store file stops `tgq local` before it serves.

mod common;

use std::time::Duration;

use common::{message_update, run, Local};

const SECRET: &str = "backup-test-secret";

async fn post_update(local: &Local, update_id: i64, chat: i64) {
    let answer = reqwest::Client::new()
        .post(local.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .json(&message_update(
            update_id,
            chat,
            &format!("hello {update_id}"),
        ))
        .send()
        .await
        .expect("the webhook answers");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_into_a_store_tgq_local_starts_from() {
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let data = tempfile::tempdir().unwrap();
    let mut local = Local::start(data.path(), &envs, &[]);
    local.wait_ready().await;
    for update_id in 1..=20 {
        post_update(&local, update_id, update_id % 3).await;
    }
    local
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"] == 20
        })
        .await;

    let backups = tempfile::tempdir().unwrap();
    let file = backups.path().join("tgq-backup.redb");
    let data_dir = data.path().display().to_string();
    let (status, stdout, stderr) = run(
        &[],
        &[
            "backup",
            "--data-dir",
            &data_dir,
            "--to",
            &file.display().to_string(),
        ],
    );
    assert!(status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("taken by the running tgq local"),
        "{stdout}"
    );
    assert!(file.exists());
    local.terminate().await;

    // Restored into a new data directory, the copy serves: what was processed stays processed
    // (a repeat is a duplicate), and new updates are processed.
    let restored = tempfile::tempdir().unwrap();
    std::fs::copy(&file, restored.path().join("tgq.redb")).unwrap();
    let mut again = Local::start(restored.path(), &envs, &[]);
    again.wait_ready().await;
    let status = again.status().await;
    assert_eq!(status["counters"]["processed"], 20, "{status}");
    assert_eq!(status["stats"]["records"], 20, "{status}");
    let repeat = reqwest::Client::new()
        .post(again.url("/webhook"))
        .header("x-telegram-bot-api-secret-token", SECRET)
        .json(&message_update(7, 1, "hello 7"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(repeat.contains("duplicate"), "{repeat}");
    post_update(&again, 21, 1).await;
    again
        .wait_settled(Duration::from_secs(30), |s| {
            s["counters"]["processed"] == 21
        })
        .await;
    again.terminate().await;
}

#[tokio::test]
async fn tgq_local_refuses_a_damaged_store_naming_the_file_and_the_way_back() {
    let data = tempfile::tempdir().unwrap();
    let path = data.path().join("tgq.redb");
    std::fs::write(&path, vec![0x5A; 8192]).unwrap();
    let mut local = Local::start(data.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    let status = local.wait_exit(Duration::from_secs(20)).await;
    assert!(!status.success());
    let (_, stderr) = local.output();
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    assert!(stderr.contains("is damaged"), "{stderr}");
    assert!(stderr.contains("restore a backup"), "{stderr}");
    // It never listened.
    assert!(reqwest::get(local.url("/healthz")).await.is_err());
}
