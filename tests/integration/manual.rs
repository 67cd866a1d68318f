//! The manual keeps to the tree: the code map (docs/code-map.md) names every source file,
//! every archive capability and every benchmark, and every link between the README and the
//! book's chapters leads to a file that is there. No services needed.

use std::fs;
use std::path::{Path, PathBuf};

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// Whether `text` names `word` as a whole word (`group.rs` is not named by `group_notes.rs`).
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        let apart = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        apart(before) && apart(after)
    })
}

#[test]
fn the_code_map_names_every_file_capability_and_benchmark() {
    let map = fs::read_to_string(root().join("docs/code-map.md")).unwrap();
    let mut sources = Vec::new();
    files(&root().join("src"), "rs", &mut sources);
    assert!(
        sources.len() > 100,
        "the source tree is read: {}",
        sources.len()
    );
    let mut missing: Vec<String> = sources
        .iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            // A folder's mod.rs is named by its folder; unit tests live beside their module.
            let skip = matches!(name, "mod.rs" | "lib.rs" | "main.rs" | "tests.rs")
                || name.ends_with("_tests.rs");
            (!skip && !names(&map, name)).then(|| path.display().to_string())
        })
        .collect();
    let store = fs::read_to_string(root().join("src/archive/store.rs")).unwrap();
    let traits: Vec<&str> = store
        .lines()
        .filter_map(|l| l.strip_prefix("pub trait "))
        .filter_map(|l| l.split([':', ' ', '<']).next())
        .collect();
    assert!(traits.len() >= 18, "the capabilities are read: {traits:?}");
    missing.extend(
        traits
            .iter()
            .filter(|t| !names(&map, t))
            .map(|t| format!("trait {t}")),
    );
    let mut benches = Vec::new();
    files(&root().join("benches"), "rs", &mut benches);
    missing.extend(
        benches
            .iter()
            .map(|b| b.strip_prefix(root()).unwrap().display().to_string())
            .filter(|b| !b.starts_with("benches/common") && !map.contains(b.as_str())),
    );
    assert!(
        missing.is_empty(),
        "docs/code-map.md does not name: {missing:?}"
    );
}

#[test]
fn every_link_of_the_manual_leads_to_a_file() {
    let mut pages = vec![root().join("README.md")];
    files(&root().join("docs"), "md", &mut pages);
    assert!(pages.len() > 10, "the book is read: {pages:?}");
    let mut broken = Vec::new();
    let mut local = 0;
    for page in &pages {
        let text = fs::read_to_string(page).unwrap();
        // Links in prose only: code spans and blocks show Markdown, they do not link.
        let text: String = text.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for (at, _) in text.match_indices("](") {
            let target = &text[at + 2..];
            let Some(end) = target.find(')') else {
                continue;
            };
            let target = target[..end].split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            local += 1;
            if !page.parent().unwrap().join(target).exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(local > 20, "links are found: {local}");
    assert!(broken.is_empty(), "links to nothing: {broken:?}");
}
