//! The NVRTC cache as the `kittens` command uses it: the location rule (`$KITTENS_CACHE`, else
//! `$XDG_CACHE_HOME/kittens`, else `~/.cache/kittens`; never the current folder), two processes
//! compiling the same kernel into one cache at once, and the refusal of relative or world-writable
//! folders (the compile still succeeds, uncached, and says why).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ensure_nvrtc() {
    if kittens_runtime::cuda::nvrtc().is_ok() {
        return;
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let ok = Command::new("bash")
        .arg(format!("{root}/scripts/install-nvrtc.sh"))
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "scripts/install-nvrtc.sh failed");
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kittens-cli-cache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The folder of the NVRTC this process loaded (installed into this user's cache): the children get
/// it as `KITTENS_NVRTC`, since they run with other cache locations, where no NVRTC is installed.
fn nvrtc_dir() -> PathBuf {
    let info = kittens_runtime::cuda::nvrtc().expect("NVRTC loads");
    let lib = Path::new(&info.path);
    assert!(lib.is_absolute(), "NVRTC found by path: {}", info.path);
    lib.parent().unwrap().to_path_buf()
}

/// `kittens compile gemm_bf16 --target sm_90a --json` run in `cwd` with exactly the cache variables
/// given (the others removed).
fn compile_cmd(cwd: &Path, vars: &[(&str, &Path)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kittens"));
    c.args(["compile", "gemm_bf16", "--target", "sm_90a", "--json"])
        .current_dir(cwd)
        .env_remove("KITTENS_CACHE")
        .env_remove("KITTENS_COMPILE_CACHE")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME")
        .env("KITTENS_NVRTC", nvrtc_dir());
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

fn cached(out: &Output) -> bool {
    assert!(
        out.status.success(),
        "kittens compile failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    doc["cached"].as_bool().expect("a `cached` field")
}

/// The files directly in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn entry_kinds(dir: &Path) -> Vec<String> {
    files(dir)
        .iter()
        .map(|f| f.rsplit('.').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn two_processes_share_one_cache_at_kittens_cache() {
    ensure_nvrtc();
    let (cache, cwd) = (fresh_dir("two"), fresh_dir("two-cwd"));
    let spawn = || {
        compile_cmd(&cwd, &[("KITTENS_CACHE", &cache)])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kittens starts")
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    cached(&a);
    cached(&b);
    // Afterwards the entry is whole: the next process hits it.
    assert!(cached(
        &compile_cmd(&cwd, &[("KITTENS_CACHE", &cache)])
            .output()
            .unwrap()
    ));
    assert_eq!(entry_kinds(&cache.join("cuda")), ["cubin", "json"]);
    assert!(
        files(&cwd).is_empty(),
        "nothing written to the current folder"
    );
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::remove_dir_all(&cwd).unwrap();
}

#[test]
fn location_rule_falls_back_to_xdg_then_home() {
    ensure_nvrtc();
    let (xdg, home, cwd) = (fresh_dir("xdg"), fresh_dir("home"), fresh_dir("loc-cwd"));
    let out = compile_cmd(&cwd, &[("XDG_CACHE_HOME", &xdg), ("HOME", &home)])
        .output()
        .unwrap();
    assert!(!cached(&out));
    assert_eq!(entry_kinds(&xdg.join("kittens/cuda")), ["cubin", "json"]);
    assert!(files(&home).is_empty());
    let out = compile_cmd(&cwd, &[("HOME", &home)]).output().unwrap();
    assert!(!cached(&out), "a new location starts empty");
    assert_eq!(
        entry_kinds(&home.join(".cache/kittens/cuda")),
        ["cubin", "json"]
    );
    assert!(
        files(&cwd).is_empty(),
        "nothing written to the current folder"
    );
    for d in [xdg, home, cwd] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn relative_and_world_writable_caches_are_refused_with_a_message() {
    ensure_nvrtc();
    let cwd = fresh_dir("rel-cwd");
    let out = compile_cmd(&cwd, &[("KITTENS_CACHE", Path::new("relcache"))])
        .output()
        .unwrap();
    assert!(!cached(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NVRTC cache not used") && err.contains("relative"),
        "{err}"
    );
    assert!(
        files(&cwd).is_empty(),
        "no cache created in the current folder"
    );

    let shared = fresh_dir("shared");
    std::fs::create_dir_all(shared.join("cuda")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(shared.join("cuda"), std::fs::Permissions::from_mode(0o777)).unwrap();
    for _ in 0..2 {
        let out = compile_cmd(&cwd, &[("KITTENS_CACHE", &shared)])
            .output()
            .unwrap();
        assert!(!cached(&out), "a world-writable cache is never read");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("writable by every user"), "{err}");
    }
    assert!(files(&shared.join("cuda")).is_empty(), "nor written");
    std::fs::remove_dir_all(&shared).unwrap();
    std::fs::remove_dir_all(&cwd).unwrap();
}
