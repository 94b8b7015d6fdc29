//! The source this binary was built from, recorded at build time (`build.rs`), so a benchmark record
//! names the code that was measured, not whatever checkout the command happens to run in.

use serde::Serialize;

/// The commit of the source tree at build time: git's HEAD, else `$KITTENS_COMMIT` as set for the
/// build (a tree copied without git metadata), else "unknown".
pub const COMMIT: &str = env!("KITTENS_BUILD_COMMIT");

/// Whether tracked files differed from that commit at build time; `None` where git could not say.
pub const DIRTY: Option<bool> = parse_dirty(env!("KITTENS_BUILD_DIRTY"));

const fn parse_dirty(s: &str) -> Option<bool> {
    match s.as_bytes() {
        b"true" => Some(true),
        b"false" => Some(false),
        _ => None,
    }
}

/// [`COMMIT`] and [`DIRTY`] as one record.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct BuildInfo {
    pub commit: &'static str,
    pub dirty: Option<bool>,
}

pub const BUILD: BuildInfo = BuildInfo {
    commit: COMMIT,
    dirty: DIRTY,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Built inside this repository's git checkout, the embedded commit is a full hash that git knows
    /// as a commit (not read at run time from the current folder: the test checks it against git).
    #[test]
    fn embedded_commit_is_a_commit_of_this_repository() {
        assert_eq!(parse_dirty("true"), Some(true));
        assert_eq!(parse_dirty("unknown"), None);
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let in_git = std::process::Command::new("git")
            .args(["-C", root, "rev-parse", "--git-dir"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !in_git {
            assert!(COMMIT == "unknown" || std::env::var("KITTENS_COMMIT").is_ok());
            return;
        }
        assert_eq!(COMMIT.len(), 40, "{COMMIT}");
        assert!(COMMIT.bytes().all(|b| b.is_ascii_hexdigit()));
        let kind = std::process::Command::new("git")
            .args(["-C", root, "cat-file", "-t", COMMIT])
            .output()
            .expect("git runs");
        assert_eq!(String::from_utf8_lossy(&kind.stdout).trim(), "commit");
        assert!(DIRTY.is_some());
    }
}
