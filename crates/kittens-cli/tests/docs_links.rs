//! Every relative link in the README, `docs/` and `bench/` (the Markdown a user reads) names a file or
//! folder of the tree, so that moving or deleting one fails here rather than on a reader; and the
//! README keeps the two set-up commands at its top that `.ci/run` and the demo rely on.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files under `dir`, recursively (`results/` folders included).
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            markdown(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// The targets of `[text](target)` links outside fenced code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn relative_links_resolve_to_files_in_the_tree() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    markdown(&root.join("docs"), &mut files);
    markdown(&root.join("bench"), &mut files);
    let mut checked = 0;
    let mut broken = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for target in links(&text) {
            let is_url = target.split_once(':').is_some_and(|(scheme, _)| {
                !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphabetic())
            });
            let path = target.split('#').next().unwrap_or("");
            if is_url || path.is_empty() {
                continue;
            }
            checked += 1;
            if !f.parent().unwrap().join(path).exists() {
                broken.push(format!(
                    "{}: {target}",
                    f.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
    // The README alone links a dozen files; a parser that found none would pass vacuously.
    assert!(checked >= 50, "only {checked} relative links found");
}

#[test]
fn readme_is_short_and_starts_with_the_two_commands() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let chars = text.chars().count();
    assert!(
        chars <= 10_000,
        "README.md is {chars} characters (issue 38: at most about 10,000)"
    );
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert_eq!(block.len(), 2, "the first code block: {block:?}");
    assert!(block[0].starts_with("bash scripts/demo.sh"), "{block:?}");
    assert!(block[1].starts_with("bash scripts/test.sh"), "{block:?}");
    // The commands name scripts that exist, and CI runs the test one.
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("bash scripts/test.sh"), "{ci}");
    let demo = std::fs::read_to_string(root().join("scripts/demo.sh")).unwrap();
    assert!(demo.contains("kittens-cli -- demo"), "{demo}");
}
