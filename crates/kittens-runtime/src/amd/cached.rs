//! The AMDGPU clang's outputs in the runtime's compile cache ([`crate::cache`], folder `amd`): each
//! step of [`super::AmdgpuClang`] (HIP to assembly, assembly to a linked code object, assembly to the
//! assembler's encoding listing) is one entry, keyed by a SHA-256 over everything that decides its
//! output — the step, the target, the exact flags, the input text and the identity of every program
//! the step runs. A step whose key cannot be made (a program whose identity cannot be read) runs
//! uncached.
//!
//! A program's identity is its path as run and resolved, the arguments that make it the tool (`zig clang`), its
//! file's device, inode, size and modification time, and the first lines of its `--version`: a
//! reinstalled or upgraded compiler is a new key, never an old compiler's output. The version is
//! asked once per process and program, and asked again when the file's stamp changes.
//!
//! A hit is the bytes that compiler returned for that input when the entry was written. The only
//! part of clang's output that depends on more than the key is the `__hip_cuid_<hash>` symbol HIP
//! derives from the input file's path, which is a fresh scratch folder for every compilation, so no
//! two compilations ever agreed on it; no analysis reads it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::{CacheError, Compiler, KernelCache};

/// One step of a compilation, each an entry of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// HIP source to the compiler's assembly listing (text).
    Asm,
    /// Assembly to the linked code object (an AMDGPU ELF shared object).
    CodeObject,
    /// Assembly to the assembler's listing with every instruction's encoding (text).
    EncodingListing,
}

impl Step {
    /// Whether `bytes` can be this step's output: text for the listings, an ELF file for the code
    /// object. Anything else under the key is a miss.
    pub fn accepts(self, bytes: &[u8]) -> bool {
        match self {
            Step::Asm | Step::EncodingListing => std::str::from_utf8(bytes).is_ok(),
            Step::CodeObject => bytes.starts_with(b"\x7fELF"),
        }
    }
}

/// The report stored beside each output: what it is, for whom. A record of another compiler's
/// report type does not parse as this one and is a miss.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmdArtifact {
    pub step: Step,
    pub target: String,
}

/// The cache the environment names ([`KernelCache::from_env`]), checked once per process; when it
/// cannot be used, compilation goes on uncached and the reason is printed once.
pub fn default_cache() -> Option<&'static KernelCache> {
    static CACHE: OnceLock<Result<KernelCache, CacheError>> = OnceLock::new();
    match CACHE.get_or_init(|| KernelCache::from_env(Compiler::AmdClang)) {
        Ok(c) => Some(c),
        Err(e) => {
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| eprintln!("AMDGPU clang cache not used: {e}"));
            None
        }
    }
}

/// A file's stamp: device, inode, size, modification time (s, ns).
type Stamp = (u64, u64, u64, i64, i64);

/// The identities already read in this process: (program, prefix) -> (stamp, identity).
type Seen = HashMap<(PathBuf, Vec<String>), (Stamp, String)>;

/// A program as a step runs it: its path and the arguments that make it the tool (`zig` + `clang`).
pub type Program<'a> = (&'a Path, &'a [String]);

/// The identity of `tool` (see the module documentation), or `None` when it cannot be read.
pub fn identity(tool: Program) -> Option<String> {
    let (program, prefix) = tool;
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let real = std::fs::canonicalize(program).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    let stamp = (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
    let seen = SEEN.get_or_init(Default::default);
    let name = (program.to_path_buf(), prefix.to_vec());
    if let Some((s, id)) = seen.lock().ok()?.get(&name) {
        if *s == stamp {
            return Some(id.clone());
        }
    }
    // Run as the step runs it: a multi-call program (lld) picks its personality by the name it is
    // called by, which resolving links would lose.
    let out = std::process::Command::new(program)
        .args(prefix)
        .arg("--version")
        .output()
        .ok()?;
    if !out.status.success() || out.stdout.is_empty() {
        return None;
    }
    let id = format!(
        "{} -> {} {:?} {stamp:?}\n{}",
        program.display(),
        real.display(),
        prefix,
        String::from_utf8_lossy(&out.stdout)
    );
    seen.lock().ok()?.insert(name, (stamp, id.clone()));
    Some(id)
}

/// The key of `step` for `target` with `flags`, run by `tools` on `input`, or `None` when a tool's
/// identity cannot be read.
pub fn key(
    step: Step,
    target: &str,
    flags: &[&str],
    tools: &[Program],
    input: &str,
) -> Option<String> {
    let mut h = Sha256::new();
    let step_name = serde_json::to_string(&step).ok()?;
    for part in [step_name.as_str(), target, &flags.join(" "), input] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    for &t in tools {
        h.update(identity(t)?.as_bytes());
        h.update([0u8]);
    }
    Some(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The output of `step` for `target` under `key`, when intact and of the right kind.
pub fn get(cache: &KernelCache, key: &str, step: Step, target: &str) -> Option<Vec<u8>> {
    let (bytes, art) = cache.get::<AmdArtifact>(key)?;
    (art.step == step && art.target == target && step.accepts(&bytes)).then_some(bytes)
}

/// Stores the output of `step`; a cache that cannot be written only costs a recompile next time.
pub fn put(cache: &KernelCache, key: &str, step: Step, target: &str, bytes: &[u8]) {
    let art = AmdArtifact {
        step,
        target: target.to_string(),
    };
    let _ = cache.put(key, bytes, &art);
}
