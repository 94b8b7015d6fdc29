//! The on-disk cache of NVRTC output: where it lives, how an entry is written so that concurrent
//! compilers never see half an entry, and how a read is checked before a cubin is handed to the driver.
//!
//! An entry is two files named by the cache key: `<key>.cubin` (the raw cubin, so that `cuobjdump` can
//! read it) and `<key>.json` (the compile report, the cubin's length and its SHA-256). Each is written to
//! a fresh temporary file in the same folder and renamed into place, which POSIX makes atomic; the cubin
//! goes first, the record second. A reader accepts an entry only when the cubin it read has the length
//! and hash the record states, so a truncated, corrupted or half-replaced entry is a miss (and is
//! recompiled), never a cubin passed to `cuModuleLoadData`.
//!
//! Location: `$KITTENS_CACHE`, else `$XDG_CACHE_HOME/kittens`, else `$HOME/.cache/kittens`, each only
//! when absolute (XDG Base Directory Specification: relative paths are invalid), with the cubins in its
//! `cuda` folder. Never the current folder and never a folder other users may write into: the cubin
//! folder must belong to this user and must not be world-writable, else the cache is refused.

use std::ffi::OsString;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::nvrtc::CudaCompileReport;

/// Why the cache cannot be used (compilation still works, uncached).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error(
        "no cache folder: none of KITTENS_CACHE, XDG_CACHE_HOME, HOME is set to an absolute path"
    )]
    NoLocation,
    #[error("{var}={path} is a relative path; the cache folder must be absolute (never the current folder)")]
    Relative { var: &'static str, path: String },
    #[error("cache folder {dir} is writable by every user (mode {mode:o}); refusing to read or write cubins there")]
    WorldWritable { dir: String, mode: u32 },
    #[error("cache folder {dir} belongs to uid {owner}, not to this user (uid {me}); refusing it")]
    NotOwned { dir: String, owner: u32, me: u32 },
    #[error("cache folder {dir}: {msg}")]
    Io { dir: String, msg: String },
}

/// Picks the cache root by the location rule from the environment as `var` reports it.
pub fn cache_root(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, CacheError> {
    let set = |name: &'static str| var(name).filter(|v| !v.is_empty()).map(|v| (name, v));
    let absolute = |(name, v): (&'static str, OsString)| {
        let p = PathBuf::from(&v);
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(CacheError::Relative {
                var: name,
                path: p.display().to_string(),
            })
        }
    };
    if let Some(v) = set("KITTENS_CACHE") {
        return absolute(v);
    }
    // XDG: a relative XDG_CACHE_HOME is invalid and is ignored, not an error.
    if let Some(p) = set("XDG_CACHE_HOME").and_then(|v| absolute(v).ok()) {
        return Ok(p.join("kittens"));
    }
    match set("HOME") {
        Some(v) => absolute(v).map(|h| h.join(".cache").join("kittens")),
        None => Err(CacheError::NoLocation),
    }
}

/// Whether a folder with this mode and owner is safe for this user's cubins: owned by `me` and not
/// writable by every user (a world-writable folder lets anyone plant an entry, sticky bit or not).
pub fn check_folder(dir: &Path, mode: u32, owner: u32, me: u32) -> Result<(), CacheError> {
    if mode & 0o002 != 0 {
        return Err(CacheError::WorldWritable {
            dir: dir.display().to_string(),
            mode: mode & 0o7777,
        });
    }
    if owner != me {
        return Err(CacheError::NotOwned {
            dir: dir.display().to_string(),
            owner,
            me,
        });
    }
    Ok(())
}

/// The record stored beside each cubin.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    cubin_len: usize,
    cubin_sha256: String,
    report: CudaCompileReport,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks a cubin read from disk against its record: the report when length, hash and ELF magic agree.
fn validate(cubin: &[u8], record_json: &str) -> Option<CudaCompileReport> {
    let r: Record = serde_json::from_str(record_json).ok()?;
    (cubin.len() == r.cubin_len
        && cubin.starts_with(b"\x7fELF")
        && sha256_hex(cubin) == r.cubin_sha256)
        .then_some(r.report)
}

/// A cache folder that passed the safety checks.
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// The cache the environment names (see the module documentation).
    pub fn from_env() -> Result<KernelCache, CacheError> {
        KernelCache::at(&cache_root(|v| std::env::var_os(v))?.join("cuda"))
    }

    /// A cache in `dir` (absolute), created with mode 0700 when missing, then checked.
    pub fn at(dir: &Path) -> Result<KernelCache, CacheError> {
        let io = |e: std::io::Error| CacheError::Io {
            dir: dir.display().to_string(),
            msg: e.to_string(),
        };
        if !dir.is_absolute() {
            return Err(CacheError::Relative {
                var: "cache folder",
                path: dir.display().to_string(),
            });
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        // symlink_metadata: a link planted in place of the folder is judged as the link's owner made it.
        let meta = std::fs::symlink_metadata(dir).map_err(io)?;
        if !meta.is_dir() {
            return Err(io(std::io::Error::other(
                "not a folder (or a symbolic link)",
            )));
        }
        // SAFETY: getuid has no preconditions and cannot fail.
        let me = unsafe { libc::getuid() };
        check_folder(dir, meta.mode(), meta.uid(), me)?;
        Ok(KernelCache {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Paths of the entry for `key`: (cubin, record).
    pub fn entry_paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{key}.cubin")),
            self.dir.join(format!("{key}.json")),
        )
    }

    /// The cubin and report stored under `key`, when present and intact.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, CudaCompileReport)> {
        let (cubin_path, record_path) = self.entry_paths(key);
        let record = std::fs::read_to_string(record_path).ok()?;
        let cubin = std::fs::read(cubin_path).ok()?;
        validate(&cubin, &record).map(|report| (cubin, report))
    }

    /// Stores an entry: cubin first, then its record, each written whole under a temporary name and
    /// renamed into place.
    pub fn put(
        &self,
        key: &str,
        cubin: &[u8],
        report: &CudaCompileReport,
    ) -> Result<(), CacheError> {
        let record = Record {
            cubin_len: cubin.len(),
            cubin_sha256: sha256_hex(cubin),
            report: report.clone(),
        };
        let json = serde_json::to_vec(&record).map_err(|e| CacheError::Io {
            dir: self.dir.display().to_string(),
            msg: e.to_string(),
        })?;
        let (cubin_path, record_path) = self.entry_paths(key);
        self.write_atomic(&cubin_path, cubin)?;
        self.write_atomic(&record_path, &json)
    }

    fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> Result<(), CacheError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let io = |e: std::io::Error| CacheError::Io {
            dir: self.dir.display().to_string(),
            msg: format!("{}: {e}", dest.display()),
        };
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            name.unwrap_or_default(),
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        // create_new: never follow or reuse a file someone else put there.
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dest)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn location_rule_order_and_absolute_paths() {
        let all = [
            ("KITTENS_CACHE", "/k"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_root(env(&all)), Ok(PathBuf::from("/k")));
        assert_eq!(cache_root(env(&all[1..])), Ok(PathBuf::from("/x/kittens")));
        assert_eq!(
            cache_root(env(&all[2..])),
            Ok(PathBuf::from("/h/.cache/kittens"))
        );
        // Empty values count as unset.
        assert_eq!(
            cache_root(env(&[("KITTENS_CACHE", ""), ("HOME", "/h")])),
            Ok(PathBuf::from("/h/.cache/kittens"))
        );
        // A relative KITTENS_CACHE would be the current folder's: refused, not used.
        assert!(matches!(
            cache_root(env(&[("KITTENS_CACHE", ".cache"), ("HOME", "/h")])),
            Err(CacheError::Relative {
                var: "KITTENS_CACHE",
                ..
            })
        ));
        // A relative XDG_CACHE_HOME is invalid by the XDG specification: ignored.
        assert_eq!(
            cache_root(env(&[("XDG_CACHE_HOME", "cache"), ("HOME", "/h")])),
            Ok(PathBuf::from("/h/.cache/kittens"))
        );
        assert!(matches!(
            cache_root(env(&[("HOME", "home")])),
            Err(CacheError::Relative { var: "HOME", .. })
        ));
        assert_eq!(cache_root(env(&[])), Err(CacheError::NoLocation));
    }

    #[test]
    fn shared_folders_are_refused() {
        let d = Path::new("/tmp");
        // /tmp itself: world-writable with the sticky bit; others may still plant entries.
        assert!(matches!(
            check_folder(d, 0o41777, 0, 1000),
            Err(CacheError::WorldWritable { mode: 0o1777, .. })
        ));
        assert!(matches!(
            check_folder(d, 0o40777, 1000, 1000),
            Err(CacheError::WorldWritable { .. })
        ));
        assert!(matches!(
            check_folder(d, 0o40700, 0, 1000),
            Err(CacheError::NotOwned {
                owner: 0,
                me: 1000,
                ..
            })
        ));
        assert_eq!(check_folder(d, 0o40700, 1000, 1000), Ok(()));
        assert_eq!(check_folder(d, 0o40755, 1000, 1000), Ok(()));
    }

    #[test]
    fn a_world_writable_folder_on_disk_is_refused() {
        let dir = std::env::temp_dir().join(format!("kittens-cache-ww-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        KernelCache::at(&dir).expect("a fresh private folder is accepted");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let r = KernelCache::at(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(r, Err(CacheError::WorldWritable { .. })), "{r:?}");
        assert!(matches!(
            KernelCache::at(Path::new("relative/cache")),
            Err(CacheError::Relative { .. })
        ));
    }
    fn report() -> CudaCompileReport {
        let log = "ptxas info    : Function properties for k\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 32 registers, used 0 barriers\n";
        super::super::nvrtc::parse_ptxas_log(log, "k").expect("report")
    }

    /// A stand-in cubin: an ELF header's magic and `len` bytes of a pattern seeded by `seed`.
    fn fake_cubin(len: usize, seed: u8) -> Vec<u8> {
        let mut v = b"\x7fELF".to_vec();
        v.extend((0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
        v
    }

    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kittens-cache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn truncated_or_corrupted_entries_are_misses() {
        let dir = fresh_dir("trunc");
        let cache = KernelCache::at(&dir).unwrap();
        let cubin = fake_cubin(4096, 1);
        cache.put("k1", &cubin, &report()).unwrap();
        let (got, rep) = cache.get("k1").expect("intact entry hits");
        assert_eq!((got, rep.registers), (cubin.clone(), 32));
        let (cubin_path, record_path) = cache.entry_paths("k1");
        // Truncated cubin (a writer killed halfway under the old in-place write).
        std::fs::write(&cubin_path, &cubin[..1000]).unwrap();
        assert!(cache.get("k1").is_none());
        // Same length, one flipped byte.
        let mut bad = cubin.clone();
        bad[2000] ^= 1;
        std::fs::write(&cubin_path, &bad).unwrap();
        assert!(cache.get("k1").is_none());
        // Truncated record.
        cache.put("k1", &cubin, &report()).unwrap();
        let rec = std::fs::read(&record_path).unwrap();
        std::fs::write(&record_path, &rec[..rec.len() / 2]).unwrap();
        assert!(cache.get("k1").is_none());
        // A cubin without its record (the old layout, or a writer stopped between the two renames).
        std::fs::remove_file(&record_path).unwrap();
        assert!(cache.get("k1").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers and readers of one key at once: every read is a miss or the whole entry of one writer,
    /// and every write succeeds.
    #[test]
    fn concurrent_writers_and_readers_never_see_half_an_entry() {
        let dir = fresh_dir("conc");
        let cache = KernelCache::at(&dir).unwrap();
        let versions: Vec<Vec<u8>> = (0..4).map(|s| fake_cubin(1 << 18, s)).collect();
        std::thread::scope(|s| {
            for v in &versions {
                let cache = &cache;
                s.spawn(move || {
                    for _ in 0..20 {
                        cache.put("shared", v, &report()).expect("write succeeds");
                    }
                });
            }
            for _ in 0..2 {
                let (cache, versions) = (&cache, &versions);
                s.spawn(move || {
                    for _ in 0..200 {
                        if let Some((c, _)) = cache.get("shared") {
                            assert!(versions.contains(&c), "a read returned a mixed cubin");
                        }
                    }
                });
            }
        });
        // Writers of different cubins under one key may leave one writer's cubin beside another's
        // record: that reads as a miss (recompiled and rewritten), never as a mixed cubin.
        if let Some((c, _)) = cache.get("shared") {
            assert!(versions.contains(&c));
        }
        // Writers of the same cubin (one key is one source, and NVRTC's output for it) always leave
        // a whole entry behind.
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (cache, v) = (&cache, &versions[0]);
                s.spawn(move || {
                    for _ in 0..20 {
                        cache.put("same", v, &report()).expect("write succeeds");
                    }
                });
            }
        });
        let (c, _) = cache.get("same").expect("an entry is there at the end");
        assert_eq!(c, versions[0]);
        // No temporary file is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
