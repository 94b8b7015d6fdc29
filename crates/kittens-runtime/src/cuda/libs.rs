//! Where NVIDIA's libraries (NVRTC, cuBLAS) are looked for, and how they are opened. `cudarc` opens them
//! by file name only, so a copy found in a folder of ours is opened first by its full path with
//! `RTLD_GLOBAL`: the dynamic loader then answers `cudarc`'s later open by name with the library already
//! in the process, matched by its SONAME.
//!
//! Folders come from, in order: an environment variable (refused when relative), the user's toolchain
//! folder (`<user cache>/toolchains`, where `scripts/install-nvrtc.sh` installs; [`crate::trust`]),
//! and the CUDA toolkit's fixed places; libraries opened by bare name go through the loader's own
//! search path, which never includes the current folder. Never a folder fixed at build time. A
//! library found by path is opened only when it and every folder above it pass
//! [`crate::trust::check_file`]: a refusal in a folder the user named or owns is an error (something
//! was planted or a permission is wrong, and the user should hear of it); one in a system folder is
//! noted and the search goes on.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::CudaError;

/// Opens a library with `RTLD_GLOBAL`, so later opens by SONAME find it.
pub(crate) fn open_global(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading NVIDIA's libraries runs their initialisers, which have no preconditions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL).map(Into::into) }
}

/// The folder an override variable names (`value` is the variable's value; a path to the library itself
/// names its folder). Empty counts as unset; a relative path is an error naming the variable.
pub fn env_dir(var: &str, value: Option<OsString>) -> Result<Option<PathBuf>, CudaError> {
    let Some(v) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let p = PathBuf::from(v);
    if !p.is_absolute() {
        return Err(CudaError::Untrusted(crate::trust::TrustError::Relative {
            var: var.to_string(),
            path: p.display().to_string(),
        }));
    }
    Ok(Some(if p.is_file() {
        p.parent().map(Path::to_path_buf).unwrap_or(p)
    } else {
        p
    }))
}

/// One folder to look in, and whether a library there that fails the trust check is an error (the
/// user named or owns the folder) or is passed over (a system folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub dir: PathBuf,
    pub strict: bool,
    /// The user's cache when `dir` is inside it: checked with [`crate::trust::check_cached_file`].
    pub cache: Option<PathBuf>,
}

/// The candidates: `var`'s folder, then `<user toolchains>/<sub>` (when given and the user's cache
/// location is known), then the `system` folders.
pub fn candidates(
    var: &str,
    value: Option<OsString>,
    sub: Option<&str>,
    system: &[&str],
) -> Result<Vec<Candidate>, CudaError> {
    let mut v: Vec<Candidate> = env_dir(var, value)?
        .into_iter()
        .map(|dir| Candidate {
            dir,
            strict: true,
            cache: None,
        })
        .collect();
    if let (Some(sub), Ok(cache)) = (sub, crate::trust::user_cache_path(|v| std::env::var_os(v))) {
        v.push(Candidate {
            dir: cache.join("toolchains").join(sub),
            strict: true,
            cache: Some(cache),
        });
    }
    v.extend(system.iter().map(|d| Candidate {
        dir: PathBuf::from(d),
        strict: false,
        cache: None,
    }));
    Ok(v)
}

/// Whether the library files `libs` may be opened: `Ok(true)` when all exist and pass the trust
/// check, `Ok(false)` when one is missing (or, in a system folder, refused: the reason goes into
/// `tried`), `Err` when one in a strict folder is refused.
pub fn usable(c: &Candidate, libs: &[PathBuf], tried: &mut Vec<String>) -> Result<bool, CudaError> {
    for lib in libs {
        if std::fs::symlink_metadata(lib).is_err() {
            tried.push(lib.display().to_string());
            return Ok(false);
        }
        let checked = match &c.cache {
            Some(cache) => crate::trust::check_cached_file(cache, lib),
            None => crate::trust::check_file(lib),
        };
        if let Err(e) = checked {
            if c.strict {
                return Err(CudaError::Untrusted(e));
            }
            tried.push(format!("{} (refused: {e})", lib.display()));
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_must_be_absolute() {
        assert_eq!(env_dir("X", None).unwrap(), None);
        assert_eq!(env_dir("X", Some("".into())).unwrap(), None);
        assert_eq!(
            env_dir("X", Some("/opt/nv/lib".into())).unwrap(),
            Some(PathBuf::from("/opt/nv/lib"))
        );
        let e = env_dir("KITTENS_NVRTC", Some(".cache/nvrtc".into())).unwrap_err();
        assert!(e.to_string().contains("KITTENS_NVRTC"), "{e}");
    }

    #[test]
    fn candidates_never_come_from_the_build_tree() {
        let c = candidates("X", None, Some("nvrtc"), &["/usr/local/cuda/lib64"]).unwrap();
        assert!(c.iter().all(|c| c.dir.is_absolute()), "{c:?}");
        let build_tree = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let build_tree = Path::new(build_tree).canonicalize().unwrap();
        assert!(
            !c.iter().any(|c| c.dir.starts_with(&build_tree)
                || c.dir
                    .canonicalize()
                    .is_ok_and(|d| d.starts_with(&build_tree))),
            "{c:?}"
        );
        assert_eq!(c.last().map(|c| c.strict), Some(false));
    }

    #[test]
    fn a_planted_library_is_an_error_in_a_strict_folder_and_skipped_in_a_system_one() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("libnvrtc.so.13");
        std::fs::write(&lib, b"").unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut tried = Vec::new();
        let strict = Candidate {
            dir: tmp.path().to_path_buf(),
            strict: true,
            cache: None,
        };
        let e = usable(&strict, std::slice::from_ref(&lib), &mut tried).unwrap_err();
        assert!(e.to_string().contains("writable by every user"), "{e}");
        let system = Candidate {
            strict: false,
            ..strict
        };
        assert!(matches!(
            usable(&system, std::slice::from_ref(&lib), &mut tried),
            Ok(false)
        ));
        assert!(tried[0].contains("refused"), "{tried:?}");
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(usable(&system, &[lib], &mut tried), Ok(true)));
    }
}
