//! The on-disk cache of compiler output, one concept for every compiler the runtime runs: NVRTC's
//! cubins ([`Compiler::Nvrtc`], `crate::cuda::nvrtc`) and the AMDGPU clang's assembly listings and code
//! objects ([`Compiler::AmdClang`], `crate::amd::toolchain`). Where it lives, how an entry is written so
//! that concurrent compilers never see half an entry, and how a read is checked before its bytes are
//! handed on.
//!
//! An entry is two files named by the cache key, which the caller makes from everything that decides
//! the output (source, target, flags, the compiler's identity): `<key>.<ext>` (the raw output, so
//! that `cuobjdump` or `llvm-objdump` can read it; `cubin` for NVRTC, `bin` for clang) and
//! `<key>.json` (the caller's report, the output's length and its SHA-256). Each is written to a fresh
//! temporary file in the same folder (created exclusively) and renamed into place, which POSIX makes
//! atomic; the output goes first, the record second. A reader accepts an entry only when the bytes it
//! read have the length and hash the record states and the record parses as the caller's report
//! type, so a truncated, corrupted, foreign or half-replaced entry is a miss (and is recompiled and
//! replaced), never bytes passed to `cuModuleLoadData` or read as a compile report.
//!
//! Location: the compiler's folder ([`Compiler::folder`]) under `$KITTENS_COMPILE_CACHE` when set
//! (absolute only: `scripts/test.sh` points it at a folder of its own run, so that every distinct
//! kernel of a test run is compiled once in that run), else the user's cache
//! ([`crate::trust::user_cache`]: `$KITTENS_CACHE`, else `$XDG_CACHE_HOME/kittens`, else
//! `$HOME/.cache/kittens`, absolute only). The folder is created 0700 and checked once, with every
//! folder above it ([`crate::trust::ensure_own_dir`]: this user's, not writable by group or others),
//! then opened, and every later file operation goes through that open handle (`openat`, `renameat`,
//! `unlinkat`), so the path cannot be swapped after the check. Entries are opened with
//! `O_NOFOLLOW | O_NONBLOCK` and must be regular files within a size bound ([`MAX_OUTPUT_BYTES`],
//! [`MAX_RECORD_BYTES`]): a link, a FIFO or a huge file is a miss, never a hang or an unbounded read.
//! Temporaries older than an hour (a writer that died) are removed when the cache opens, and the
//! cache is kept under [`max_bytes`] by removing the entries used least recently (a hit refreshes an
//! entry's modification time).

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use serde::de::DeserializeOwned;

use crate::trust::{self, Role, TrustError};

/// The largest output read or written (an sm_90a cubin of ours is well under 1 MiB, a gfx950
/// assembly listing a few MiB).
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;
/// The largest record read.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;
/// The cache's size bound when `KITTENS_CACHE_MAX_BYTES` is unset.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// A temporary this old belongs to a writer that died.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// Why the cache cannot be used (compilation still works, uncached).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("{0}")]
    Untrusted(#[from] TrustError),
    #[error("KITTENS_CACHE_MAX_BYTES={0:?} is not a number of bytes")]
    BadMaxBytes(String),
    #[error("cache folder {dir}: {msg}")]
    Io { dir: String, msg: String },
}

/// The compilers whose output is cached, each in a folder of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiler {
    /// NVRTC: cubins with their ptxas report.
    Nvrtc,
    /// The AMDGPU clang (and its assembler and linker): assembly listings and code objects.
    AmdClang,
}

impl Compiler {
    /// The compiler's folder under the cache root.
    pub fn folder(self) -> &'static str {
        match self {
            Compiler::Nvrtc => "cuda",
            Compiler::AmdClang => "amd",
        }
    }

    /// The extension of an entry's output file.
    pub fn extension(self) -> &'static str {
        match self {
            Compiler::Nvrtc => "cubin",
            Compiler::AmdClang => "bin",
        }
    }
}

/// Picks the cache root by the location rule from the environment as `var` reports it:
/// `$KITTENS_COMPILE_CACHE` (absolute) when set, else the user's cache.
pub fn cache_root(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, CacheError> {
    match var("KITTENS_COMPILE_CACHE").filter(|v| !v.is_empty()) {
        Some(v) if Path::new(&v).is_absolute() => Ok(PathBuf::from(v)),
        Some(v) => Err(TrustError::Relative {
            var: "KITTENS_COMPILE_CACHE".into(),
            path: v.to_string_lossy().into_owned(),
        }
        .into()),
        None => Ok(trust::user_cache_path(var)?),
    }
}

/// The size bound: `KITTENS_CACHE_MAX_BYTES` as `var` reports it, else [`DEFAULT_MAX_BYTES`].
pub fn max_bytes(var: impl Fn(&str) -> Option<OsString>) -> Result<u64, CacheError> {
    match var("KITTENS_CACHE_MAX_BYTES").filter(|v| !v.is_empty()) {
        None => Ok(DEFAULT_MAX_BYTES),
        Some(v) => v
            .to_str()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| CacheError::BadMaxBytes(v.to_string_lossy().into_owned())),
    }
}

/// The record stored beside each output.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record<R> {
    output_len: usize,
    output_sha256: String,
    report: R,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks an output read from disk against its record: whether length and hash agree.
fn validate<R>(output: &[u8], r: &Record<R>) -> bool {
    output.len() == r.output_len && sha256_hex(output) == r.output_sha256
}

/// A key names two files in the folder: plain characters only, so it cannot name anything else.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// A cache folder that passed the checks, held open.
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: PathBuf,
    fd: Arc<OwnedFd>,
    max_bytes: u64,
    compiler: Compiler,
}

impl KernelCache {
    /// The cache of `compiler`'s output the environment names (see the module documentation).
    pub fn from_env(compiler: Compiler) -> Result<KernelCache, CacheError> {
        let var = |v: &str| std::env::var_os(v);
        let dir = cache_root(var)?.join(compiler.folder());
        KernelCache::with_max_bytes(&dir, compiler, max_bytes(var)?)
    }

    /// A cache of `compiler`'s output in `dir` (absolute), created with mode 0700 when missing, then
    /// checked, with the size bound the environment names.
    pub fn at(dir: &Path, compiler: Compiler) -> Result<KernelCache, CacheError> {
        KernelCache::with_max_bytes(dir, compiler, max_bytes(|v| std::env::var_os(v))?)
    }

    /// [`KernelCache::at`] with an explicit size bound.
    pub fn with_max_bytes(
        dir: &Path,
        compiler: Compiler,
        max_bytes: u64,
    ) -> Result<KernelCache, CacheError> {
        let real = trust::ensure_own_dir(dir)?;
        let io = |e: std::io::Error| CacheError::Io {
            dir: real.display().to_string(),
            msg: e.to_string(),
        };
        let fd = rustix::fs::open(
            &real,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(e.into()))?;
        // The handle must be the folder just checked (same device and inode) and still pass the rule.
        let opened = File::from(fd.try_clone().map_err(io)?)
            .metadata()
            .map_err(io)?;
        let checked = std::fs::symlink_metadata(&real).map_err(io)?;
        if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
            return Err(io(std::io::Error::other("replaced while it was opened")));
        }
        trust::check_mode(
            &real,
            opened.mode(),
            opened.uid(),
            trust::my_uid(),
            Role::OwnFolder,
        )?;
        let cache = KernelCache {
            dir: real,
            fd: Arc::new(fd),
            max_bytes,
            compiler,
        };
        cache.sweep(None);
        Ok(cache)
    }

    /// The folder (resolved), for messages and tests; every operation goes through the open handle.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn compiler(&self) -> Compiler {
        self.compiler
    }

    /// File names of the entry for `key`: (output, record).
    pub fn entry_names(&self, key: &str) -> (String, String) {
        let ext = self.compiler.extension();
        (format!("{key}.{ext}"), format!("{key}.json"))
    }

    /// Paths of the entry for `key`: (output, record); for tests and messages.
    pub fn entry_paths(&self, key: &str) -> (PathBuf, PathBuf) {
        let (c, r) = self.entry_names(key);
        (self.dir.join(c), self.dir.join(r))
    }

    /// Opens `name` in the folder for reading: no link followed, no wait on a FIFO, a regular file of
    /// at most `max` bytes, or `None`.
    fn open_entry(&self, name: &str, max: u64) -> Option<(File, u64)> {
        let fd = rustix::fs::openat(
            self.fd.as_fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let f = File::from(fd);
        let meta = f.metadata().ok()?;
        (meta.is_file() && meta.len() <= max).then_some((f, meta.len()))
    }

    fn read_entry(&self, name: &str, max: u64) -> Option<(File, Vec<u8>)> {
        let (f, len) = self.open_entry(name, max)?;
        let mut buf = Vec::with_capacity(len as usize);
        (&f).take(max + 1).read_to_end(&mut buf).ok()?;
        (buf.len() as u64 <= max).then_some((f, buf))
    }

    /// The output and report stored under `key`, when present, intact and a report of type `R`. A
    /// hit marks the entry as recently used.
    pub fn get<R: DeserializeOwned>(&self, key: &str) -> Option<(Vec<u8>, R)> {
        if !valid_key(key) {
            return None;
        }
        let (output_name, record_name) = self.entry_names(key);
        let (record_file, record) = self.read_entry(&record_name, MAX_RECORD_BYTES)?;
        let record: Record<R> = serde_json::from_slice(&record).ok()?;
        if record.output_len as u64 > MAX_OUTPUT_BYTES {
            return None;
        }
        let (output_file, output) = self.read_entry(&output_name, record.output_len as u64)?;
        if !validate(&output, &record) {
            return None;
        }
        let now = SystemTime::now();
        let _ = record_file.set_modified(now);
        let _ = output_file.set_modified(now);
        Some((output, record.report))
    }

    /// Stores an entry: the output first, then its record, each written whole under a temporary name
    /// and renamed into place; then keeps the cache under its size bound.
    pub fn put<R: Serialize>(
        &self,
        key: &str,
        output: &[u8],
        report: &R,
    ) -> Result<(), CacheError> {
        let err = |msg: String| CacheError::Io {
            dir: self.dir.display().to_string(),
            msg,
        };
        if !valid_key(key) {
            return Err(err(format!("{key:?} is not a cache key")));
        }
        if output.len() as u64 > MAX_OUTPUT_BYTES {
            return Err(err(format!(
                "an output of {} bytes is over the {MAX_OUTPUT_BYTES}-byte bound",
                output.len()
            )));
        }
        let record = Record {
            output_len: output.len(),
            output_sha256: sha256_hex(output),
            report,
        };
        let json = serde_json::to_vec(&record).map_err(|e| err(e.to_string()))?;
        let (output_name, record_name) = self.entry_names(key);
        self.write_atomic(&output_name, output)?;
        self.write_atomic(&record_name, &json)?;
        self.sweep(Some(key));
        Ok(())
    }

    fn write_atomic(&self, dest: &str, bytes: &[u8]) -> Result<(), CacheError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let tmp = format!(
            ".{dest}.{}.{}.tmp",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let dir = self.fd.as_fd();
        // O_EXCL | O_NOFOLLOW: never follow or reuse a file someone else put there.
        let write = || -> std::io::Result<()> {
            let fd = rustix::fs::openat(
                dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let mut f = File::from(fd);
            f.write_all(bytes)?;
            f.sync_all()?;
            rustix::fs::renameat(dir, tmp.as_str(), dir, dest)?;
            Ok(())
        };
        write().map_err(|e| {
            let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
            CacheError::Io {
                dir: self.dir.display().to_string(),
                msg: format!("{dest}: {e}"),
            }
        })
    }

    /// Removes stale temporaries, then, while the entries' total size is over the bound, the entries
    /// used least recently (never `keep`, the one just written). Best effort: a file another process
    /// removed first is simply gone.
    fn sweep(&self, keep: Option<&str>) {
        let dir = self.fd.as_fd();
        let Ok(listing) = rustix::fs::Dir::read_from(dir) else {
            return;
        };
        let now = SystemTime::now();
        // key -> (bytes, newest modification time)
        let mut entries: std::collections::HashMap<String, (u64, SystemTime)> = Default::default();
        for ent in listing.flatten() {
            let Ok(name) = ent.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(st) = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let mtime = SystemTime::UNIX_EPOCH
                + Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
            if is_temporary(&name) {
                if now
                    .duration_since(mtime)
                    .is_ok_and(|age| age > STALE_TEMPORARY)
                {
                    let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
                }
                continue;
            }
            let Some(key) = name
                .strip_suffix(self.compiler.extension())
                .and_then(|n| n.strip_suffix('.'))
                .or_else(|| name.strip_suffix(".json"))
            else {
                continue;
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                // Not ours to keep: a cache entry is a regular file.
                let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
                continue;
            }
            let e = entries
                .entry(key.to_string())
                .or_insert((0, SystemTime::UNIX_EPOCH));
            e.0 += st.st_size.max(0) as u64;
            e.1 = e.1.max(mtime);
        }
        let mut total: u64 = entries.values().map(|e| e.0).sum();
        if total <= self.max_bytes {
            return;
        }
        let mut order: Vec<(String, u64, SystemTime)> = entries
            .into_iter()
            .filter(|(k, _)| Some(k.as_str()) != keep)
            .map(|(k, (b, t))| (k, b, t))
            .collect();
        order.sort_by_key(|e| e.2);
        for (key, bytes, _) in order {
            if total <= self.max_bytes {
                break;
            }
            // The record first: an output without its record is a miss, never a wrong hit.
            let (output_name, record_name) = self.entry_names(&key);
            let _ = rustix::fs::unlinkat(dir, record_name.as_str(), AtFlags::empty());
            let _ = rustix::fs::unlinkat(dir, output_name.as_str(), AtFlags::empty());
            total = total.saturating_sub(bytes);
        }
    }
}

#[cfg(test)]
mod tests;
