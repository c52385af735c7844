//! The drill's quick mode, in the suite: three scenarios of `tgq-drill` that pass on the current
//! code, run on local mode with a small load, so that they keep passing. The whole drill is a
//! command (`tgq-drill`, docs/RELIABILITY.md), not part of the suite.

use tgq_drill::{progress::Progress, scenario, Options, Target};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triple_delivery_poison_and_a_damaged_store_keep_their_required_figures_on_local_mode() {
    let work = tempfile::tempdir().unwrap();
    let options = Options {
        exe: env!("CARGO_BIN_EXE_tgq").into(),
        updates: 60,
        seed: 16,
        recipients: 100,
        work: work.path().to_owned(),
        functions: None,
        progress: Progress { enabled: false },
    };
    let scenarios: Vec<_> = ["triple-delivery", "poison", "damaged-store"]
        .iter()
        .map(|name| scenario::find(name).unwrap())
        .collect();
    let rows = tgq_drill::run_scenarios(&scenarios, Target::Local, &options)
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert!(
            row.passed(),
            "{}",
            tgq_drill::report::table(std::slice::from_ref(row))
        );
        assert_eq!(row.sent, 60);
        assert_eq!(row.processed_once, 60, "{row:?}");
    }
    assert_eq!(rows[1].dead_expected, 6, "the poison bodies: {:?}", rows[1]);
}
