//! Trusted locations: the one place that decides where compilers, libraries and caches may come from,
//! and whether a path found there may be executed, loaded or read.
//!
//! Whoever can write a folder on the way to a file can replace the file, so a file is trusted only
//! when every folder from `/` down to it, and the file itself, is owned by this user or by root and is
//! writable by neither its group nor every user. A root-owned folder with the sticky bit (`/tmp`) is
//! accepted as an ancestor only: others cannot rename or delete what lies in it, and whatever they
//! create there is caught one step down by the owner check. Symbolic links on the way are judged by
//! their owner and then followed, and the resolved path is checked the same way.
//!
//! Where things are looked for:
//! - an explicit variable (`KITTENS_AMDGPU_CLANG`, `KITTENS_HOST_CXX`, `KITTENS_NVRTC`,
//!   `KITTENS_HIP_LIB`, …): an absolute path, checked; a relative one is refused (it would name a file
//!   in whatever folder the command runs in);
//! - the user's cache ([`user_cache`]): `$KITTENS_CACHE` (absolute), else `$XDG_CACHE_HOME/kittens`
//!   (XDG Base Directory Specification: a relative value is invalid and ignored), else
//!   `$HOME/.cache/kittens`; created 0700; the install scripts put toolchains in its `toolchains`
//!   folder ([`toolchains_dir`]) and the compile cache ([`crate::cache`]) keeps NVRTC's cubins in its
//!   `cuda` folder and the AMDGPU clang's outputs in its `amd` folder;
//! - the system's standard places (`/opt/rocm`, `/usr/local/cuda`, `PATH`'s absolute entries).
//!
//! Never a path fixed at build time (a binary or wheel built in `/tmp/x` would otherwise trust
//! whatever is at `/tmp/x` on the machine that runs it) and never the current folder.

pub mod files;

use std::ffi::OsString;
use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Why a location or a file is not trusted. Every variant names the path and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error(
        "no cache folder: none of KITTENS_CACHE, XDG_CACHE_HOME, HOME is set to an absolute path"
    )]
    NoLocation,
    #[error(
        "{var}={path} is a relative path; only absolute paths are used (never the current folder)"
    )]
    Relative { var: String, path: String },
    #[error("{path} is writable by every user (mode {mode:o}); refusing it")]
    WorldWritable { path: String, mode: u32 },
    #[error("{path} is writable by its group (mode {mode:o}); refusing it")]
    GroupWritable { path: String, mode: u32 },
    #[error("{path} belongs to uid {owner}, neither this user (uid {me}) nor root; refusing it")]
    NotOwned { path: String, owner: u32, me: u32 },
    #[error("{path} is {found}, expected {expected}; refusing it")]
    WrongKind {
        path: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },
}

impl TrustError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> TrustError {
        TrustError::Io {
            path: path.display().to_string(),
            msg: e.to_string(),
        }
    }
}

/// This process's real user id.
pub fn my_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// What a checked path is to the caller: the last folder of a cache (must be this user's), a folder
/// on the way (this user's or root's; root's sticky folders allowed), or a file to run or load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Ancestor,
    OwnFolder,
    File,
}

/// The rule for one path's `mode` and `owner` (`me` is this user).
pub fn check_mode(
    path: &Path,
    mode: u32,
    owner: u32,
    me: u32,
    role: Role,
) -> Result<(), TrustError> {
    let shown = || path.display().to_string();
    let owner_ok = match role {
        Role::OwnFolder => owner == me,
        Role::Ancestor | Role::File => owner == me || owner == 0,
    };
    if !owner_ok {
        return Err(TrustError::NotOwned {
            path: shown(),
            owner,
            me,
        });
    }
    let sticky_root = role == Role::Ancestor && owner == 0 && mode & 0o1000 != 0;
    if mode & 0o002 != 0 && !sticky_root {
        return Err(TrustError::WorldWritable {
            path: shown(),
            mode: mode & 0o7777,
        });
    }
    if mode & 0o020 != 0 && !sticky_root {
        return Err(TrustError::GroupWritable {
            path: shown(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a folder"
    } else if ft.is_file() {
        "a regular file"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "a device"
    }
}

/// Checks every prefix of the absolute `path` without following its last component: folders on the
/// way as [`Role::Ancestor`], links by their owner (their targets are checked by the caller on the
/// resolved path), and the last component as `last`.
fn check_prefixes(path: &Path, last: Role, me: u32) -> Result<(), TrustError> {
    let mut cur = PathBuf::new();
    let comps: Vec<Component> = path.components().collect();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        let meta = std::fs::symlink_metadata(&cur).map_err(|e| TrustError::io(&cur, e))?;
        let is_last = i + 1 == comps.len();
        if meta.file_type().is_symlink() {
            // A link's own mode means nothing; who may replace it is settled by its folder (checked
            // one step up) and by its owner.
            check_mode(&cur, 0, meta.uid(), me, Role::File)?;
            continue;
        }
        let role = if is_last { last } else { Role::Ancestor };
        check_mode(&cur, meta.mode(), meta.uid(), me, role)?;
    }
    Ok(())
}

/// Checks `path` (absolute) and the path it resolves to: see the module documentation. `last` says
/// what the path itself is: a file (the resolved path must be a regular file) or a folder. Returns
/// the resolved path.
pub fn check_path(path: &Path, last: Role) -> Result<PathBuf, TrustError> {
    if !path.is_absolute() {
        return Err(TrustError::Relative {
            var: "path".into(),
            path: path.display().to_string(),
        });
    }
    let me = my_uid();
    check_prefixes(path, last, me)?;
    let real = path.canonicalize().map_err(|e| TrustError::io(path, e))?;
    if real != path {
        check_prefixes(&real, last, me)?;
    }
    let meta = std::fs::metadata(&real).map_err(|e| TrustError::io(&real, e))?;
    let (ok, expected) = match last {
        Role::File => (meta.is_file(), "a regular file"),
        Role::Ancestor | Role::OwnFolder => (meta.is_dir(), "a folder"),
    };
    if !ok {
        return Err(TrustError::WrongKind {
            path: real.display().to_string(),
            found: kind_name(meta.file_type()),
            expected,
        });
    }
    Ok(real)
}

/// A file to run or load: it and every folder above it pass [`check_mode`].
pub fn check_file(path: &Path) -> Result<PathBuf, TrustError> {
    check_path(path, Role::File)
}

/// A file inside the user's cache `cache` (a toolchain the install scripts put there): `cache` and
/// every folder between it and the file must be this user's own (no sticky exception: the cache is
/// never a shared folder), the folders above `cache` and the file itself pass [`check_file`]'s rule.
pub fn check_cached_file(cache: &Path, file: &Path) -> Result<PathBuf, TrustError> {
    let rest = file.strip_prefix(cache).map_err(|_| TrustError::Io {
        path: file.display().to_string(),
        msg: format!("not inside the cache {}", cache.display()),
    })?;
    check_path(cache, Role::OwnFolder)?;
    let me = my_uid();
    let mut cur = cache.to_path_buf();
    let comps: Vec<Component> = rest.components().collect();
    for c in comps.iter().take(comps.len().saturating_sub(1)) {
        cur.push(c);
        let meta = std::fs::symlink_metadata(&cur).map_err(|e| TrustError::io(&cur, e))?;
        let mode = if meta.file_type().is_symlink() {
            0
        } else {
            meta.mode()
        };
        check_mode(&cur, mode, meta.uid(), me, Role::OwnFolder)?;
    }
    check_file(file)
}

/// The location rule of [`user_cache`], from the environment as `var` reports it; creates nothing.
pub fn user_cache_path(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, TrustError> {
    let set = |name: &'static str| var(name).filter(|v| !v.is_empty()).map(|v| (name, v));
    let absolute = |(name, v): (&'static str, OsString)| {
        let p = PathBuf::from(&v);
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(TrustError::Relative {
                var: name.into(),
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
        None => Err(TrustError::NoLocation),
    }
}

/// Creates `dir` (absolute) and any missing folder above it with mode 0700, then checks the whole
/// path, `dir` itself as this user's own folder. Returns the resolved path.
pub fn ensure_own_dir(dir: &Path) -> Result<PathBuf, TrustError> {
    if !dir.is_absolute() {
        return Err(TrustError::Relative {
            var: "folder".into(),
            path: dir.display().to_string(),
        });
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| TrustError::io(dir, e))?;
    check_path(dir, Role::OwnFolder)
}

/// The user's cache folder (see the module documentation), created 0700 when missing and checked.
pub fn user_cache() -> Result<PathBuf, TrustError> {
    ensure_own_dir(&user_cache_path(|v| std::env::var_os(v))?)
}

/// Where the install scripts put toolchains: `<user cache>/toolchains` (not created here).
pub fn toolchains_dir(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, TrustError> {
    user_cache_path(var).map(|c| c.join("toolchains"))
}

/// The absolute path an explicit variable names (`value` is its value; empty counts as unset), or
/// why it is refused: relative, or failing [`check_path`] with `role`.
pub fn explicit(
    var: &str,
    value: Option<OsString>,
    role: Role,
) -> Result<Option<PathBuf>, TrustError> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let p = PathBuf::from(v);
    if !p.is_absolute() {
        return Err(TrustError::Relative {
            var: var.into(),
            path: p.display().to_string(),
        });
    }
    check_path(&p, role)?;
    Ok(Some(p))
}

/// [`explicit`] for a file, read from the environment.
pub fn explicit_file(var: &str) -> Result<Option<PathBuf>, TrustError> {
    explicit(var, std::env::var_os(var), Role::File)
}

/// A program name looked up on `PATH`'s absolute entries (a relative or empty entry would be the
/// current folder and is skipped); a path with a separator must be absolute and is taken as is.
pub fn which(program: &Path) -> Option<PathBuf> {
    which_in(program, std::env::var_os("PATH"))
}

/// [`which`] with `PATH`'s value given.
pub fn which_in(program: &Path, path_var: Option<OsString>) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return (program.is_absolute() && program.is_file()).then(|| program.to_path_buf());
    }
    std::env::split_paths(&path_var?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
pub(crate) mod test_env;
#[cfg(test)]
mod tests;
