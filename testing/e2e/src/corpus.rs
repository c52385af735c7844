//! `events/corpus/`: Update JSON from other Telegram libraries' tests, with the ordering group
//! each should get (`MANIFEST.tsv`), for the suites that post them to `tgq local` and to a stack.

use std::path::Path;

/// One sample of the corpus.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Its file, relative to `events/corpus`.
    pub file: String,
    /// The group the manifest expects.
    pub group: String,
    /// The body, as posted.
    pub body: String,
}

impl Sample {
    /// Its `update_id`.
    pub fn update_id(&self) -> i64 {
        serde_json::from_str::<serde_json::Value>(&self.body).expect(&self.file)["update_id"]
            .as_i64()
            .expect("an update id")
    }
}

/// Every sample, in the manifest's order.
pub fn samples() -> Vec<Sample> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/corpus");
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("the manifest");
    let mut lines = manifest.lines();
    let head: Vec<&str> = lines.next().expect("a header").split('\t').collect();
    let column = |name| head.iter().position(|h| *h == name).expect(name);
    let (file, group) = (column("file"), column("group"));
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            let body = std::fs::read_to_string(dir.join(cells[file])).expect(cells[file]);
            Sample {
                file: cells[file].to_owned(),
                group: cells[group].to_owned(),
                body,
            }
        })
        .collect()
}
