//! Where NVIDIA's libraries (NVRTC, cuBLAS) are looked for, and how they are opened. `cudarc` opens them
//! by file name only, so a copy found in a folder of ours is opened first by its full path with
//! `RTLD_GLOBAL`: the dynamic loader then answers `cudarc`'s later open by name with the library already
//! in the process, matched by its SONAME.
//!
//! Every folder searched is absolute: a library is never loaded from a path relative to the current
//! folder (whoever controls the folder a command runs in would otherwise choose the code it runs).
//! Folders come from an environment variable (refused when relative), from the project's own toolchain
//! cache (`<repo>/.cache`, found from the source tree this crate was built from or from the
//! executable's `target/` folder), or from the CUDA toolkit's fixed places; libraries opened by bare
//! name go through the loader's own search path, which never includes the current folder.

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
        return Err(CudaError::Invalid(format!(
            "{var}={} is a relative path; libraries are only loaded from absolute paths",
            p.display()
        )));
    }
    Ok(Some(if p.is_file() {
        p.parent().map(Path::to_path_buf).unwrap_or(p)
    } else {
        p
    }))
}

/// The repository root of a cargo-built executable at `exe` (`<root>/target/<profile>/kittens`, or
/// `.../deps/` for test binaries): the parent of the nearest `target` ancestor, when that holds a
/// `Cargo.toml`. Absolute `exe` gives an absolute root; anything else gives none.
pub fn repo_root_of_exe(exe: &Path) -> Option<PathBuf> {
    if !exe.is_absolute() {
        return None;
    }
    let target = exe
        .ancestors()
        .skip(1)
        .take(4)
        .find(|a| a.file_name().is_some_and(|n| n == "target"))?;
    let root = target.parent()?;
    root.join("Cargo.toml")
        .is_file()
        .then(|| root.to_path_buf())
}

/// The project's toolchain cache folders `<root>/.cache/<sub>`: the source tree this crate was compiled
/// from (absolute: cargo sets `CARGO_MANIFEST_DIR` to an absolute path), then the tree of the running
/// executable, deduplicated.
pub fn project_cache_dirs(sub: &str) -> Vec<PathBuf> {
    let mut roots = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")];
    if let Some(r) = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
        .and_then(|e| repo_root_of_exe(&e))
    {
        roots.push(r);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for r in roots {
        let d = r.join(".cache").join(sub);
        let key = d.canonicalize().unwrap_or_else(|_| d.clone());
        if d.is_absolute()
            && !dirs
                .iter()
                .any(|x| x.canonicalize().ok().as_ref() == Some(&key))
        {
            dirs.push(d);
        }
    }
    dirs
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
    fn exe_root_is_the_cargo_tree_and_absolute() {
        let root = std::env::temp_dir().join(format!("kittens-exe-root-{}", std::process::id()));
        std::fs::create_dir_all(root.join("target/release/deps")).unwrap();
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        let found = |p: &str| repo_root_of_exe(&root.join(p));
        assert_eq!(found("target/release/kittens"), Some(root.clone()));
        assert_eq!(
            found("target/release/deps/cuda_compile-0123"),
            Some(root.clone())
        );
        // A `target` folder without a Cargo.toml beside it is not a cargo tree.
        std::fs::remove_file(root.join("Cargo.toml")).unwrap();
        assert_eq!(found("target/release/kittens"), None);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(repo_root_of_exe(Path::new("target/release/kittens")), None);
        assert_eq!(repo_root_of_exe(Path::new("/usr/bin/kittens")), None);
    }

    #[test]
    fn project_cache_dirs_are_absolute() {
        let dirs = project_cache_dirs("nvrtc");
        assert!(!dirs.is_empty());
        assert!(dirs.iter().all(|d| d.is_absolute()), "{dirs:?}");
    }
}
