//! Embeds the commit this crate is built from (for benchmark records): `KITTENS_BUILD_COMMIT` (git's
//! HEAD, or `$KITTENS_COMMIT` when the tree has no git metadata, else "unknown") and
//! `KITTENS_BUILD_DIRTY` ("true" when tracked files differ from HEAD, "false", or "unknown").

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("../..");
    println!("cargo:rerun-if-env-changed=KITTENS_COMMIT");
    // Rerun when HEAD moves (a commit, a checkout) or any tracked source changes (the dirty flag).
    for p in ["crates", "Cargo.toml", "Cargo.lock", "scripts"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let head = git(&root, &["rev-parse", "HEAD"]);
    if head.is_some() {
        // logs/HEAD (the reflog) is appended on every commit and checkout, also when the branch's ref
        // is packed (no loose file to watch) and the commit touched only files outside `crates`.
        let mut watch = vec![
            "HEAD".to_string(),
            "logs/HEAD".into(),
            "index".into(),
            "packed-refs".into(),
        ];
        if let Some(r) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
            watch.push(r);
        }
        for w in watch {
            // A path that does not exist (packed-refs often) would make cargo rerun every build.
            if let Some(p) = git(
                &root,
                &["rev-parse", "--path-format=absolute", "--git-path", &w],
            )
            .filter(|p| Path::new(p).exists())
            {
                println!("cargo:rerun-if-changed={p}");
            }
        }
    }
    let (commit, dirty) = match head {
        Some(h) => {
            let dirty = git(&root, &["status", "--porcelain", "--untracked-files=no"])
                .map(|s| (!s.is_empty()).to_string())
                .unwrap_or_else(|| "unknown".into());
            (h, dirty)
        }
        None => (
            std::env::var("KITTENS_COMMIT")
                .ok()
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            "unknown".into(),
        ),
    };
    println!("cargo:rustc-env=KITTENS_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=KITTENS_BUILD_DIRTY={dirty}");
}
