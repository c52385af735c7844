//! Embeds the example updates of `events/` into the binary, so `tgq local --demo` works from any
//! directory: writes `$OUT_DIR/fixtures.rs` with one `include_str!` per file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let events = manifest.join("../..").join("events");
    let updates = events.join("updates");
    let poison = events.join("poison").join("not_json.txt");
    println!("cargo:rerun-if-changed={}", updates.display());
    println!("cargo:rerun-if-changed={}", poison.display());

    let mut files: Vec<PathBuf> = fs::read_dir(&updates)
        .expect("events/updates is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| is_update_fixture(path))
        .collect();
    files.sort();

    let mut code = String::from(
        "/// Every `events/updates/*.json` fixture: (file name, contents).\n\
         pub const UPDATES: &[(&str, &str)] = &[\n",
    );
    for path in &files {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 file name");
        let absolute = fs::canonicalize(path).expect("the fixture exists");
        writeln!(
            code,
            "    ({name:?}, include_str!({:?})),",
            absolute.display().to_string()
        )
        .expect("writing to a String");
    }
    code.push_str("];\n");
    let poison = fs::canonicalize(&poison).expect("events/poison/not_json.txt exists");
    writeln!(
        code,
        "/// `events/poison/not_json.txt`: a body that is not an Update.\n\
         pub const POISON: &str = include_str!({:?});",
        poison.display().to_string()
    )
    .expect("writing to a String");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("fixtures.rs");
    fs::write(out, code).expect("OUT_DIR is writable");
}

/// An update fixture: a `.json` file other than the group-key table.
fn is_update_fixture(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "json")
        && path
            .file_name()
            .is_some_and(|name| name != "expected_groups.json")
}
