//! Finding, installing and running an AMDGPU clang.
//!
//! Search order (first hit wins): `$KITTENS_AMDGPU_CLANG`, ROCm's `/opt/rocm/llvm/bin/clang`, the clang
//! inside PyPI's `ziglang` in the project cache (`$KITTENS_CACHE`, else `<repo>/.cache`), and Debian's
//! `clang-19` — the last only for gfx942, since clang 19 predates gfx950 (docs/architecture.md §6).
//!
//! Compilation follows the flags docs/architecture.md §6 records: `-x hip --cuda-device-only -nogpuinc -nogpulib
//! --offload-arch=<gfx> -O3 -S`. The assembly is the analysed artefact; the code object is then built
//! from it with the same clang's assembler and `ld.lld -shared`, because zig's clang driver cannot find
//! a separate `ld.lld` for its own device link.

use super::AmdError;
use kittens_hw::Arch;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `ziglang` release whose clang (22.1) was checked to build gfx942 and gfx950 code (docs/architecture.md §6).
pub const ZIGLANG_VERSION: &str = "0.17.0";

/// Where a clang came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClangSource {
    /// `$KITTENS_AMDGPU_CLANG`.
    Env,
    /// A ROCm install.
    Rocm,
    /// PyPI `ziglang` in the project cache (`zig clang`).
    Ziglang,
    /// Debian's `clang-19` (gfx942 only).
    DebianClang19,
}

/// A program plus the arguments that turn it into the tool (`zig` + `clang`, `zig` + `ld.lld`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub program: PathBuf,
    pub prefix: Vec<String>,
}

impl Tool {
    fn plain(program: impl Into<PathBuf>) -> Self {
        Tool {
            program: program.into(),
            prefix: Vec::new(),
        }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.prefix);
        c
    }
}

/// A usable AMDGPU compiler: clang for HIP and assembly, ld.lld for the code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdgpuClang {
    pub source: ClangSource,
    pub clang: Tool,
    pub lld: Tool,
}

/// The products of one compilation.
#[derive(Debug, Clone)]
pub struct CompiledHip {
    /// The compiler's assembly listing, with AMDHSA metadata (what [`super::analyze`] reads).
    pub asm: String,
    /// The linked code object (an AMDGPU ELF shared object, what a HIP runtime would load).
    pub code_object: Vec<u8>,
}

/// Where to look; [`ToolchainSearch::from_env`] fills it from the environment, tests build their own.
#[derive(Debug, Clone)]
pub struct ToolchainSearch {
    pub env_override: Option<PathBuf>,
    pub rocm_clang: PathBuf,
    pub cache_dir: PathBuf,
    /// Name or path of Debian's clang-19 (looked up on `PATH` when a bare name).
    pub debian_clang: PathBuf,
}

/// The project cache: `$KITTENS_CACHE`, else `<repo>/.cache` of the checkout this crate was built from.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KITTENS_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache")
}

/// `find_clang(arch)` with the search taken from the environment.
pub fn find_clang(arch: Arch) -> Result<AmdgpuClang, AmdError> {
    ToolchainSearch::from_env().find(arch)
}

impl ToolchainSearch {
    /// The search the environment asks for.
    pub fn from_env() -> Self {
        ToolchainSearch {
            env_override: std::env::var_os("KITTENS_AMDGPU_CLANG")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            rocm_clang: PathBuf::from("/opt/rocm/llvm/bin/clang"),
            cache_dir: cache_dir(),
            debian_clang: PathBuf::from("clang-19"),
        }
    }

    /// The `zig` executable of the cached `ziglang` package.
    pub fn zig_path(&self) -> PathBuf {
        self.cache_dir.join("ziglang").join("ziglang").join("zig")
    }

    /// The first usable compiler for `arch`, or [`AmdError::ClangNotFound`] saying what to install.
    pub fn find(&self, arch: Arch) -> Result<AmdgpuClang, AmdError> {
        let target = amd_target(arch)?;
        let mut looked = Vec::new();
        if let Some(p) = &self.env_override {
            looked.push(format!("$KITTENS_AMDGPU_CLANG={}", p.display()));
            if p.is_file() {
                return Ok(from_clang_path(p, ClangSource::Env));
            }
        }
        looked.push(self.rocm_clang.display().to_string());
        if self.rocm_clang.is_file() {
            return Ok(from_clang_path(&self.rocm_clang, ClangSource::Rocm));
        }
        let zig = self.zig_path();
        looked.push(zig.display().to_string());
        if zig.is_file() {
            return Ok(AmdgpuClang {
                source: ClangSource::Ziglang,
                clang: Tool {
                    program: zig.clone(),
                    prefix: vec!["clang".into()],
                },
                lld: Tool {
                    program: zig,
                    prefix: vec!["ld.lld".into()],
                },
            });
        }
        if arch == Arch::Cdna3 {
            looked.push(self.debian_clang.display().to_string());
            if let Some(clang) = which(&self.debian_clang) {
                let lld =
                    which(Path::new("ld.lld-19")).unwrap_or_else(|| PathBuf::from("ld.lld-19"));
                return Ok(AmdgpuClang {
                    source: ClangSource::DebianClang19,
                    clang: Tool::plain(clang),
                    lld: Tool::plain(lld),
                });
            }
        }
        Err(AmdError::ClangNotFound {
            target,
            looked: looked.join(", "),
            cache: self.cache_dir.join("ziglang").display().to_string(),
            zig: ZIGLANG_VERSION,
            hint: if arch == Arch::Cdna3 {
                " (Debian: apt-get install clang-19 lld-19 llvm-19 also works)"
            } else {
                ""
            },
        })
    }
}

/// The LLVM target name of an AMD architecture.
pub(crate) fn amd_target(arch: Arch) -> Result<&'static str, AmdError> {
    if arch.is_amd() {
        Ok(arch.target())
    } else {
        Err(AmdError::UnknownTarget(arch.target().to_string()))
    }
}

/// A clang given by path (env or ROCm): `zig` means `zig clang`; ld.lld is its sibling when present.
fn from_clang_path(path: &Path, source: ClangSource) -> AmdgpuClang {
    if path.file_name().is_some_and(|n| n == "zig") {
        return AmdgpuClang {
            source,
            clang: Tool {
                program: path.to_path_buf(),
                prefix: vec!["clang".into()],
            },
            lld: Tool {
                program: path.to_path_buf(),
                prefix: vec!["ld.lld".into()],
            },
        };
    }
    let sibling = path.with_file_name("ld.lld");
    let lld = if sibling.is_file() {
        sibling
    } else {
        PathBuf::from("ld.lld")
    };
    AmdgpuClang {
        source,
        clang: Tool::plain(path),
        lld: Tool::plain(lld),
    }
}

/// Resolve a bare program name on `PATH` (a path with a separator is taken as is).
pub fn which(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or(None)
}

/// Install PyPI `ziglang` [`ZIGLANG_VERSION`] into `<cache>/ziglang` with `python3 -m pip install
/// --target`, returning the `zig` path. A no-op when that version is already there.
pub fn install_ziglang(cache: &Path) -> Result<PathBuf, AmdError> {
    let dest = cache.join("ziglang");
    let zig = dest.join("ziglang").join("zig");
    if zig.is_file() && zig_version(&zig).as_deref() == Some(ZIGLANG_VERSION) {
        return Ok(zig);
    }
    std::fs::create_dir_all(cache).map_err(|source| AmdError::Io {
        path: cache.to_path_buf(),
        source,
    })?;
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--upgrade",
        "--target",
    ])
    .arg(&dest)
    .arg(format!("ziglang=={ZIGLANG_VERSION}"));
    run(&mut cmd)?;
    if zig.is_file() {
        Ok(zig)
    } else {
        Err(AmdError::ToolFailed {
            command: format!(
                "python3 -m pip install --target {} ziglang=={ZIGLANG_VERSION}",
                dest.display()
            ),
            status: "success".into(),
            stderr: format!("{} is missing afterwards", zig.display()),
        })
    }
}

fn zig_version(zig: &Path) -> Option<String> {
    let out = Command::new(zig).arg("version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Run a command to completion; a non-zero exit becomes [`AmdError::ToolFailed`] with its stderr.
fn run(cmd: &mut Command) -> Result<std::process::Output, AmdError> {
    let program = format!("{:?}", cmd.get_program());
    let out = cmd
        .output()
        .map_err(|source| AmdError::Spawn { program, source })?;
    if out.status.success() {
        Ok(out)
    } else {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        Err(AmdError::ToolFailed {
            command: format!("{} {}", cmd.get_program().to_string_lossy(), args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// A fresh private directory under the system temp dir, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<Self, AmdError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("kittens-amd-{}-{nanos}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| AmdError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl AmdgpuClang {
    /// The first line of `clang --version`.
    pub fn version(&self) -> Result<String, AmdError> {
        let out = run(self.clang.command().arg("--version"))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string())
    }

    /// Compile self-contained HIP device source for `arch` into assembly only (no code object).
    pub fn compile_to_asm(&self, source: &str, arch: Arch) -> Result<String, AmdError> {
        let dir = ScratchDir::new()?;
        self.hip_to_asm(&dir, source, arch)
    }

    /// Compile self-contained HIP device source for `arch` into assembly and a linked code object.
    pub fn compile(&self, source: &str, arch: Arch) -> Result<CompiledHip, AmdError> {
        let dir = ScratchDir::new()?;
        let asm = self.hip_to_asm(&dir, source, arch)?;
        let (s, o, co) = (
            dir.0.join("kernel.s"),
            dir.0.join("kernel.o"),
            dir.0.join("kernel.hsaco"),
        );
        let target = amd_target(arch)?;
        run(self
            .clang
            .command()
            .args([
                "-cc1as",
                "-triple",
                "amdgcn-amd-amdhsa",
                "-target-cpu",
                target,
                "-filetype",
                "obj",
                "-o",
            ])
            .arg(&o)
            .arg(&s))?;
        run(self.lld.command().args(["-shared", "-o"]).arg(&co).arg(&o))?;
        let code_object = std::fs::read(&co).map_err(|source| AmdError::Io {
            path: co.clone(),
            source,
        })?;
        Ok(CompiledHip { asm, code_object })
    }

    /// The assembler's own listing of `asm` with every instruction's bytes (`-cc1as -filetype asm
    /// -show-encoding`): LLVM's printer text and its encoder's bytes, the independent reference the
    /// ISA emulator's decoder is tested against.
    pub fn encoding_listing(&self, asm: &str, arch: Arch) -> Result<String, AmdError> {
        let dir = ScratchDir::new()?;
        let target = amd_target(arch)?;
        let (s, out) = (dir.0.join("kernel.s"), dir.0.join("listing.s"));
        std::fs::write(&s, asm).map_err(|e| AmdError::Io {
            path: s.clone(),
            source: e,
        })?;
        run(self
            .clang
            .command()
            .args([
                "-cc1as",
                "-triple",
                "amdgcn-amd-amdhsa",
                "-target-cpu",
                target,
                "-filetype",
                "asm",
                "-show-encoding",
                "-o",
            ])
            .arg(&out)
            .arg(&s))?;
        std::fs::read_to_string(&out).map_err(|source| AmdError::Io {
            path: out.clone(),
            source,
        })
    }

    fn hip_to_asm(&self, dir: &ScratchDir, source: &str, arch: Arch) -> Result<String, AmdError> {
        let target = amd_target(arch)?;
        let (hip, s) = (dir.0.join("kernel.hip"), dir.0.join("kernel.s"));
        std::fs::write(&hip, source).map_err(|e| AmdError::Io {
            path: hip.clone(),
            source: e,
        })?;
        run(self
            .clang
            .command()
            .args([
                "-x",
                "hip",
                "--cuda-device-only",
                "-nogpuinc",
                "-nogpulib",
                "-O3",
                "-S",
            ])
            .arg(format!("--offload-arch={target}"))
            .arg("-o")
            .arg(&s)
            .arg(&hip))?;
        std::fs::read_to_string(&s).map_err(|source| AmdError::Io {
            path: s.clone(),
            source,
        })
    }
}
