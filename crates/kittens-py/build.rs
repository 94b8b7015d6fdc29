//! Collects the training text of `kittens.train_demo` into the extension module: the repository's own
//! documents (README.md, docs/*.md) and Rust sources (crates/*/src/**/*.rs), so the demo finds text
//! offline wherever the wheel is installed. Files are taken in sorted path order (a stable corpus).

use std::path::{Path, PathBuf};

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    collect(&root.join("docs"), "md", &mut files);
    let crates = root.join("crates");
    if let Ok(entries) = std::fs::read_dir(&crates) {
        for e in entries.flatten() {
            collect(&e.path().join("src"), "rs", &mut files);
        }
    }
    files.sort();
    let mut text = String::new();
    for f in &files {
        if let Ok(s) = std::fs::read_to_string(f) {
            let rel = f.strip_prefix(&root).unwrap_or(f);
            text.push_str(&format!("\n==> {} <==\n", rel.display()));
            text.push_str(&s);
        }
    }
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("corpus.txt");
    std::fs::write(&out, text).expect("OUT_DIR is writable");
    println!(
        "cargo:rerun-if-changed={}",
        root.join("README.md").display()
    );
    println!("cargo:rerun-if-changed={}", root.join("docs").display());
    println!("cargo:rerun-if-changed={}", crates.display());
}
