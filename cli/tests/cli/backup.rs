//! `tgq backup` copies the store while `tgq local` serves; `tgq local` starts from the restored copy
//! and goes on where the copy left off; a damaged store file stops `tgq local` before it serves.

use crate::common;

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
    let taken = tempfile::tempdir().unwrap();
    let taken_dir = taken.path().display().to_string();
    let mut local = Local::start(data.path(), &envs, &["--backup-dir", &taken_dir]);
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
    let left: Vec<_> = std::fs::read_dir(taken.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "the backup was moved, not copied: {left:?}"
    );
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

fn mode_of(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn backup_to(data_dir: &std::path::Path, to: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let data_dir = data_dir.display().to_string();
    let to = to.display().to_string();
    let mut args = vec!["backup", "--data-dir", &data_dir, "--to", &to];
    args.extend_from_slice(extra);
    let (status, stdout, stderr) = run(&[], &args);
    (status.success(), format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_never_lands_in_the_data_directory_nor_over_a_file_without_force() {
    let envs = [("TGQ_HANDLER", "echo")];
    let data = tempfile::tempdir().unwrap();
    let taken = tempfile::tempdir().unwrap();
    let taken_dir = taken.path().display().to_string();
    let mut local = Local::start(data.path(), &envs, &["--backup-dir", &taken_dir]);
    local.wait_ready().await;
    let secret_file = data.path().join("webhook-secret");
    let secret = std::fs::read_to_string(&secret_file).unwrap();
    let store = data.path().join("tgq.redb");
    let inode = |path: &std::path::Path| {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).unwrap().ino()
    };
    let store_inode = inode(&store);

    for force in [&[][..], &["--force"][..]] {
        for target in [&store, &secret_file, &data.path().join("new.redb")] {
            let (done, said) = backup_to(data.path(), target, force);
            assert!(!done, "{} {force:?}: {said}", target.display());
            assert!(said.contains("inside the data directory"), "{said}");
            assert_eq!(inode(&store), store_inode, "the live store was replaced");
        }
    }
    assert_eq!(inode(&store), store_inode, "the live store was replaced");
    assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), secret);
    assert!(!data.path().join("new.redb").exists());

    let backups = tempfile::tempdir().unwrap();
    let existing = backups.path().join("kept.txt");
    std::fs::write(&existing, b"precious").unwrap();
    let (done, said) = backup_to(data.path(), &existing, &[]);
    assert!(!done, "{said}");
    assert!(
        said.contains("already exists") && said.contains("--force"),
        "{said}"
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
    let (done, said) = backup_to(data.path(), &existing, &["--force"]);
    assert!(done, "{said}");
    assert_eq!(mode_of(&existing), 0o600, "the backup holds every message");
    assert_eq!(mode_of(&store), 0o600, "the store holds every message");
    let left: Vec<_> = std::fs::read_dir(taken.path()).unwrap().collect();
    assert!(left.is_empty(), "refused backups are removed: {left:?}");
    assert!(local.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_waits_for_local_to_stop_and_keeps_the_store_it_replaces() {
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().display().to_string();
    let backups = tempfile::tempdir().unwrap();
    let backup_dir = backups.path().display().to_string();
    let mut local = Local::start(data.path(), &envs, &["--backup-dir", &backup_dir]);
    local.wait_ready().await;
    for update_id in 1..=3 {
        post_update(&local, update_id, 1).await;
    }
    local
        .wait_settled(Duration::from_secs(30), |s| s["counters"]["processed"] == 3)
        .await;
    let file = backups.path().join("three.redb");
    let (done, said) = backup_to(data.path(), &file, &[]);
    assert!(done, "{said}");
    post_update(&local, 4, 1).await;
    local
        .wait_settled(Duration::from_secs(30), |s| s["counters"]["processed"] == 4)
        .await;

    let file_arg = file.display().to_string();
    let (status, stdout, stderr) = run(&[], &["restore", &file_arg, "--data-dir", &data_dir]);
    assert!(!status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("tgq local"), "{stderr}");
    assert_eq!(local.status().await["counters"]["processed"], 4);
    assert!(local.terminate().await.success());

    let (status, stdout, stderr) = run(&[], &["restore", &file_arg, "--data-dir", &data_dir]);
    assert!(status.success(), "{stdout}{stderr}");
    let kept: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("tgq.redb.") && name != "tgq.redb"
        })
        .collect();
    assert_eq!(kept.len(), 1, "the replaced store is kept: {kept:?}");
    assert!(
        stdout.contains(&kept[0].display().to_string()),
        "it says where: {stdout}"
    );
    assert_eq!(mode_of(&data.path().join("tgq.redb")), 0o600);

    let mut again = Local::start(data.path(), &envs, &[]);
    again.wait_ready().await;
    assert_eq!(again.status().await["counters"]["processed"], 3);
    assert!(again.terminate().await.success());
    // The kept store is whole: put back, it has the fourth update.
    std::fs::rename(&kept[0], data.path().join("tgq.redb")).unwrap();
    let mut back = Local::start(data.path(), &envs, &[]);
    back.wait_ready().await;
    assert_eq!(back.status().await["counters"]["processed"], 4);
    assert!(back.terminate().await.success());
}

/// A store with one processed update, `tgq local` stopped.
async fn stopped_store() -> tempfile::TempDir {
    let envs = [("TGQ_WEBHOOK_SECRET", SECRET), ("TGQ_HANDLER", "echo")];
    let data = tempfile::tempdir().unwrap();
    let mut local = Local::start(data.path(), &envs, &[]);
    local.wait_ready().await;
    post_update(&local, 1, 1).await;
    local
        .wait_settled(Duration::from_secs(30), |s| s["counters"]["processed"] == 1)
        .await;
    assert!(local.terminate().await.success());
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_truncated_to_nothing_is_refused_by_every_command_and_left_as_it_is() {
    let data = stopped_store().await;
    let data_dir = data.path().display().to_string();
    let store = data.path().join("tgq.redb");
    std::fs::File::create(&store).unwrap();
    for args in [
        vec!["status"],
        vec!["outbox"],
        vec!["dlq", "list"],
        vec!["dlq", "audit"],
        vec!["backup", "--to", "/nonexistent-dir/b.redb"],
    ] {
        let mut all = args.clone();
        all.extend(["--data-dir", &data_dir]);
        let (status, stdout, stderr) = run(&[], &all);
        assert!(!status.success(), "{args:?}: {stdout}");
        assert!(stderr.contains("is damaged"), "{args:?}: {stderr}");
        assert_eq!(std::fs::metadata(&store).unwrap().len(), 0, "{args:?}");
    }
    let mut local = Local::start(data.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
    assert!(!local.wait_exit(Duration::from_secs(20)).await.success());
    let (_, stderr) = local.output();
    assert!(stderr.contains("is damaged"), "{stderr}");
    assert_eq!(std::fs::metadata(&store).unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_stopped_store_writes_nothing_and_never_blocks_a_start() {
    let data = stopped_store().await;
    let data_dir = data.path().display().to_string();
    let store = data.path().join("tgq.redb");
    let before = std::fs::read(&store).unwrap();
    for args in [
        vec!["status"],
        vec!["outbox"],
        vec!["dlq", "list"],
        vec!["dlq", "audit"],
    ] {
        let mut all = args.clone();
        all.extend(["--data-dir", &data_dir]);
        let (status, stdout, stderr) = run(&[], &all);
        assert!(status.success(), "{args:?}: {stdout}{stderr}");
    }
    assert!(
        std::fs::read(&store).unwrap() == before,
        "a read wrote to the store"
    );

    // Eight at once: each reads.
    let readers: Vec<_> = (0..8)
        .map(|_| {
            common::tgq(&[])
                .args(["status", "--json", "--data-dir", &data_dir])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for reader in readers {
        let output = reader.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    // Readers in a loop do not keep `tgq local` from starting.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looping = {
        let (stop, data_dir) = (stop.clone(), data_dir.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && reads < 2000 {
                let _ = run(&[], &["status", "--data-dir", &data_dir]);
                reads += 1;
            }
            reads
        })
    };
    for _ in 0..3 {
        let mut local = Local::start(data.path(), &[("TGQ_WEBHOOK_SECRET", SECRET)], &[]);
        local.wait_ready().await;
        assert!(local.terminate().await.success());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(looping.join().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_another_user_cannot_write_can_be_inspected() {
    use std::os::unix::process::CommandExt as _;
    let data = stopped_store().await;
    let data_dir = data.path().display().to_string();
    // Owned by nobody, read-only to them: they can read it and write nothing there.
    let nobody = 65534;
    for entry in std::fs::read_dir(data.path()).unwrap() {
        let path = entry.unwrap().path();
        std::os::unix::fs::chown(&path, Some(nobody), Some(nobody)).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o400))
            .unwrap();
    }
    std::os::unix::fs::chown(data.path(), Some(nobody), Some(nobody)).unwrap();
    std::fs::set_permissions(
        data.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o500),
    )
    .unwrap();
    // The built binary may sit where nobody cannot reach it (a checkout in a 0700 directory):
    // nobody runs a copy in a directory of its own.
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        bin.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let exe = bin.path().join("tgq");
    std::fs::copy(env!("CARGO_BIN_EXE_tgq"), &exe).unwrap();
    let mut command = common::tgq_at(&exe, &[]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setgid(nobody) != 0 || libc::setuid(nobody) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command
        .args(["status", "--json", "--data-dir", &data_dir])
        .current_dir(bin.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["counters"]["processed"], 1, "{status}");
}
