//! The repository tells one story: README names the Rust version Cargo.toml requires, the LICENSE
//! file is the license Cargo.toml names, README's map of the code names paths that exist, and every
//! comment that cites the architecture cites a section docs/ARCHITECTURE.md has — and nothing cites
//! a design document the repository does not contain.

use std::path::{Path, PathBuf};

use tgq_e2e::cargo::workspace_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The value of `key = "…"` in the workspace's Cargo.toml.
fn workspace_setting(key: &str) -> String {
    let manifest = read("Cargo.toml");
    manifest
        .lines()
        .find_map(|line| {
            let value = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| panic!("no {key} in Cargo.toml"))
}

#[test]
fn readme_states_the_rust_version_cargo_toml_requires() {
    let version = workspace_setting("rust-version");
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("Rust {version}")),
        "README does not say `Rust {version}`"
    );
}

#[test]
fn the_license_file_is_the_license_cargo_toml_names() {
    assert_eq!(workspace_setting("license"), "MIT");
    let license = read("LICENSE");
    assert_eq!(license.lines().next(), Some("MIT License"));
    assert!(license.contains("Permission is hereby granted, free of charge"));
}

#[test]
fn every_path_in_the_readme_map_exists() {
    let readme = read("README.md");
    let map = readme
        .split("## Map of the code")
        .nth(1)
        .expect("README has a map of the code");
    let mut checked = 0;
    for row in map.lines().take_while(|line| !line.starts_with("## ")) {
        let Some(first_cell) = row.strip_prefix("| `") else {
            continue;
        };
        // The cell's code spans are paths, and crate names (no `/` or `.`) in parentheses.
        let cell = first_cell.split('|').next().unwrap();
        for path in cell
            .split('`')
            .enumerate()
            .filter(|(index, _)| index % 2 == 0)
            .map(|(_, span)| span.trim())
            .filter(|span| span.contains('/') || span.contains('.'))
        {
            assert!(
                workspace_root().join(path).exists(),
                "README's map names {path}, which does not exist"
            );
            checked += 1;
        }
    }
    assert!(checked > 10, "only {checked} paths found in README's map");
}

/// Every source and document of the repository (not build output, tools or local data).
fn repository_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !["target", ".git", ".venv", ".tgq", ".aws-sam"].contains(&name.as_str()) {
                    walk(&path, files);
                }
            } else if [".rs", ".md", ".toml", ".yaml", ".sh"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&workspace_root(), &mut files);
    files
}

#[test]
fn architecture_citations_name_sections_that_exist_and_nothing_cites_an_absent_design() {
    let architecture = read("docs/ARCHITECTURE.md");
    // Spelled in parts so that this file does not match itself.
    let absent = ["DESIGN", ".md"].concat();
    let absent_section = ["DESIGN", " §"].concat();
    let cite = ["docs/ARCHITECTURE.md", " §"].concat();
    let mut citations = 0;
    for file in repository_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(workspace_root())
            .unwrap_or(&file)
            .display();
        assert!(
            !text.contains(&absent) && !text.contains(&absent_section),
            "{shown} cites a design document the repository does not hold"
        );
        for cited in text.split(cite.as_str()).skip(1) {
            let section: String = cited.chars().take_while(char::is_ascii_digit).collect();
            assert!(
                architecture.contains(&format!("\n## §{section} ")),
                "{shown} cites section {section:?} of docs/ARCHITECTURE.md, which has none such"
            );
            citations += 1;
        }
    }
    assert!(citations > 10, "only {citations} citations found");
}

#[test]
fn the_localstack_scripts_name_every_tool_they_lack_and_how_to_install_it() {
    // A PATH with the shell's basics and none of the tools: each script stops before touching
    // anything and names them all.
    for (script, tools) in [
        (
            "infra/localstack/deploy.sh",
            &[
                "samlocal",
                "'sam'",
                "awslocal",
                "'aws'",
                "cargo-lambda",
                "zig",
            ][..],
        ),
        (
            "infra/localstack/teardown.sh",
            &["samlocal", "awslocal", "'aws'"][..],
        ),
    ] {
        let output = std::process::Command::new("/bin/bash")
            .arg(workspace_root().join(script))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{script}");
        for tool in tools {
            assert!(stderr.contains(tool), "{script} names {tool}: {stderr}");
        }
        assert!(stderr.contains("pip install"), "{script}: {stderr}");
    }
}
