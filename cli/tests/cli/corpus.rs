//! `events/corpus/`: real Update JSON from other Telegram libraries' tests, posted to `tgq local` as
//! Telegram would post it. Every sample is accepted, ends processed or dead-lettered as
//! `unreadable`, in the group the manifest says, and nothing stops the process.

use crate::common;

use std::time::Duration;

use common::{run, Local};
use serde_json::Value;
use tgq_e2e::corpus::samples;

const SECRET: &str = "corpus-test-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_update_of_the_corpus_is_processed_or_dead_lettered_unreadable_in_its_group() {
    let samples = samples();
    assert!(samples.len() >= 100, "{} samples", samples.len());
    let dir = tempfile::tempdir().unwrap();
    // The example bot, as a new user runs it: its routes meet every kind.
    let mut local = Local::start(dir.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    local.wait_ready().await;
    let client = reqwest::Client::new();
    for sample in &samples {
        let answer = client
            .post(local.url("/webhook"))
            .header("x-telegram-bot-api-secret-token", SECRET)
            .header("content-type", "application/json")
            .body(sample.body.clone())
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert_eq!(status, 200, "{}: {text}", sample.file);
        assert!(text.contains("queued"), "{}: {text}", sample.file);
    }
    local
        .wait_settled(Duration::from_secs(120), |status| {
            status["stats"]["records"] == samples.len()
        })
        .await;

    let mut unreadable = Vec::new();
    let mut wrong = Vec::new();
    for sample in &samples {
        let id = sample.update_id();
        let url = format!("/admin/console/update?bot=local&id={id}");
        let shown: Value = reqwest::get(local.admin_url(&url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let update = &shown["result"];
        let (status, group) = (update["status"].as_str(), update["group"].as_str());
        let reason = update["burial"]["reason"].as_str();
        match (status, reason) {
            (Some("DONE"), _) => {}
            (Some("DEAD"), Some("unreadable")) => unreadable.push(sample.file.clone()),
            _ => wrong.push(format!("{}: {status:?} {reason:?}", sample.file)),
        }
        if group != Some(sample.group.as_str()) {
            wrong.push(format!(
                "{}: group {group:?}, the manifest says {}",
                sample.file, sample.group
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The reactions that name nobody are what teloxide-core's parser panics on.
    assert!(
        unreadable.iter().any(|file| file.contains("reaction")),
        "{unreadable:?}"
    );

    // Each unreadable one is a dead letter saying why, and the process never stopped.
    let data_dir = dir.path().display().to_string();
    let (listed, stdout, stderr) = run(
        &[],
        &[
            "dlq",
            "list",
            "--json",
            "--limit",
            "1000",
            "--data-dir",
            &data_dir,
        ],
    );
    assert!(listed.success(), "{stderr}");
    let letters: Value = serde_json::from_str(&stdout).unwrap();
    let reasons: Vec<&str> = letters
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|letter| letter["reason"].as_str())
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| **r == "unreadable").count(),
        unreadable.len(),
        "{letters}"
    );
    assert!(local.terminate().await.success(), "{:?}", local.output());
}
