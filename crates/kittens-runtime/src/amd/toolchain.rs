//! Finding, installing and running an AMDGPU clang.
//!
//! Search order (first hit wins): `$KITTENS_AMDGPU_CLANG` (absolute), ROCm's `/opt/rocm/llvm/bin/clang`,
//! the clang inside PyPI's `ziglang` in the user's toolchain folder (`<user cache>/toolchains/ziglang`,
//! [`crate::trust`]), and Debian's `clang-19` on `PATH` — the last only for gfx942, since clang 19
//! predates gfx950 (docs/architecture.md §6). A compiler found by path is run only when it and every
//! folder above it pass [`crate::trust::check_file`]; one that fails is an error naming the path and
//! the reason, never skipped for the next candidate, since a planted compiler is worth saying.
//!
//! Compilation follows the flags docs/architecture.md §6 records: `-x hip --cuda-device-only -nogpuinc -nogpulib
//! --offload-arch=<gfx> -O3 -S`. The assembly is the analysed artefact; the code object is then built
//! from it with the same clang's assembler and `ld.lld -shared`, because zig's clang driver cannot find
//! a separate `ld.lld` for its own device link.

use super::cached::{self, Step};
use super::AmdError;
use crate::cache::KernelCache;
use crate::trust::files::{read_regular, read_regular_string, write_new, ScratchDir};
use crate::trust::{self, TrustError};
use kittens_hw::Arch;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::trust::which;

/// The largest compiler output (assembly listing, code object) read back.
const MAX_OUTPUT_BYTES: u64 = 256 << 20;

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
    /// PyPI `ziglang` in the user's toolchain folder (`zig clang`).
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

    /// The program as [`cached`] names it in a key.
    fn as_program(&self) -> cached::Program<'_> {
        (&self.program, &self.prefix)
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
    /// Whether both came from the compile cache ([`super::cached`]).
    pub cached: bool,
}

/// HIP to assembly (docs/architecture.md §6), then `--offload-arch=<gfx>`, `-o`, the source.
const HIP_FLAGS: &[&str] = &[
    "-x",
    "hip",
    "--cuda-device-only",
    "-nogpuinc",
    "-nogpulib",
    "-O3",
    "-S",
];
/// clang's assembler, then the target CPU, `-filetype obj|asm`, ...
const CC1AS_FLAGS: &[&str] = &["-cc1as", "-triple", "amdgcn-amd-amdhsa", "-target-cpu"];
/// ld.lld for the code object.
const LLD_FLAGS: &[&str] = &["-shared"];

/// Where to look; [`ToolchainSearch::from_env`] fills it from the environment, tests build their own.
#[derive(Debug, Clone)]
pub struct ToolchainSearch {
    /// `$KITTENS_AMDGPU_CLANG` as given (a relative value is refused by [`ToolchainSearch::find`]).
    pub env_override: Option<PathBuf>,
    pub rocm_clang: PathBuf,
    /// The user's toolchain folder ([`trust::toolchains_dir`]), or why there is none.
    pub toolchains: Result<PathBuf, TrustError>,
    /// Name or path of Debian's clang-19 (looked up on `PATH`'s absolute entries when a bare name).
    pub debian_clang: PathBuf,
}

/// The user's toolchain folder, `<user cache>/toolchains`, where `scripts/install-amdgpu-clang.sh`
/// puts ziglang (not created here).
pub fn toolchains_dir() -> Result<PathBuf, TrustError> {
    trust::toolchains_dir(|v| std::env::var_os(v))
}

/// The `zig` of PyPI's `ziglang` inside a toolchain folder.
pub fn zig_in(toolchains: &Path) -> PathBuf {
    toolchains.join("ziglang").join("ziglang").join("zig")
}

/// A toolchain inside the user's cache (the parent of `toolchains`), checked before it is run:
/// [`trust::check_cached_file`].
fn trusted_in_cache(toolchains: &Result<PathBuf, TrustError>, file: &Path) -> Result<(), AmdError> {
    let cache = match toolchains {
        Ok(t) => t.parent().unwrap_or(t),
        Err(e) => {
            return Err(AmdError::Untrusted {
                what: "the cached ziglang".into(),
                source: e.clone(),
            })
        }
    };
    trust::check_cached_file(cache, file)
        .map(drop)
        .map_err(|source| AmdError::Untrusted {
            what: "the cached ziglang".into(),
            source,
        })
}

/// `path` checked before it is run: an error naming `what` when it fails [`trust::check_file`].
fn trusted(what: &str, path: &Path) -> Result<(), AmdError> {
    trust::check_file(path)
        .map(drop)
        .map_err(|source| AmdError::Untrusted {
            what: what.to_string(),
            source,
        })
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
            toolchains: toolchains_dir(),
            debian_clang: PathBuf::from("clang-19"),
        }
    }

    /// The first usable compiler for `arch`, or [`AmdError::ClangNotFound`] saying what to install.
    pub fn find(&self, arch: Arch) -> Result<AmdgpuClang, AmdError> {
        let target = amd_target(arch)?;
        let mut looked = Vec::new();
        if let Some(p) = &self.env_override {
            looked.push(format!("$KITTENS_AMDGPU_CLANG={}", p.display()));
            if !p.is_absolute() {
                return Err(AmdError::Untrusted {
                    what: "the AMDGPU clang".into(),
                    source: TrustError::Relative {
                        var: "KITTENS_AMDGPU_CLANG".into(),
                        path: p.display().to_string(),
                    },
                });
            }
            if p.is_file() {
                trusted("$KITTENS_AMDGPU_CLANG", p)?;
                return from_clang_path(p, ClangSource::Env);
            }
        }
        looked.push(self.rocm_clang.display().to_string());
        if self.rocm_clang.is_file() {
            trusted("ROCm's clang", &self.rocm_clang)?;
            return from_clang_path(&self.rocm_clang, ClangSource::Rocm);
        }
        let zig = match &self.toolchains {
            Ok(dir) => Some(zig_in(dir)),
            Err(e) => {
                looked.push(format!("no user toolchain folder ({e})"));
                None
            }
        };
        if let Some(zig) = zig.filter(|z| {
            looked.push(z.display().to_string());
            // symlink_metadata: a link planted in its place is judged, not skipped.
            std::fs::symlink_metadata(z).is_ok()
        }) {
            trusted_in_cache(&self.toolchains, &zig)?;
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
            if let Some(clang) = trust::which(&self.debian_clang) {
                let lld = trust::which(Path::new("ld.lld-19"))
                    .unwrap_or_else(|| PathBuf::from("ld.lld-19"));
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
            cache: match &self.toolchains {
                Ok(d) => d.join("ziglang").display().to_string(),
                Err(e) => format!("the user's cache, which is unusable: {e}"),
            },
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

/// A clang given by path (env or ROCm), already checked: `zig` means `zig clang`; ld.lld is its
/// sibling when present (checked too), else `ld.lld` on `PATH`'s absolute entries.
fn from_clang_path(path: &Path, source: ClangSource) -> Result<AmdgpuClang, AmdError> {
    if path.file_name().is_some_and(|n| n == "zig") {
        return Ok(AmdgpuClang {
            source,
            clang: Tool {
                program: path.to_path_buf(),
                prefix: vec!["clang".into()],
            },
            lld: Tool {
                program: path.to_path_buf(),
                prefix: vec!["ld.lld".into()],
            },
        });
    }
    let sibling = path.with_file_name("ld.lld");
    let lld = if sibling.is_file() {
        trusted("ld.lld beside the clang", &sibling)?;
        sibling
    } else {
        trust::which(Path::new("ld.lld")).unwrap_or_else(|| PathBuf::from("ld.lld"))
    };
    Ok(AmdgpuClang {
        source,
        clang: Tool::plain(path),
        lld: Tool::plain(lld),
    })
}

/// [`install_ziglang`] into the user's toolchain folder, created 0700 and checked first.
pub fn install_ziglang_for_user() -> Result<PathBuf, AmdError> {
    let dir = toolchains_dir()
        .and_then(|d| trust::ensure_own_dir(&d))
        .map_err(|source| AmdError::Untrusted {
            what: "the user's toolchain folder".into(),
            source,
        })?;
    install_ziglang(&dir)
}

/// Install PyPI `ziglang` [`ZIGLANG_VERSION`] into `<toolchains>/ziglang` (`toolchains` absolute and
/// this user's) with `python3 -m pip install --target`, returning the `zig` path. A no-op when that
/// version is already there.
pub fn install_ziglang(toolchains: &Path) -> Result<PathBuf, AmdError> {
    let untrusted = |source| AmdError::Untrusted {
        what: "the ziglang install folder".into(),
        source,
    };
    trust::ensure_own_dir(toolchains).map_err(untrusted)?;
    let dest = toolchains.join("ziglang");
    let zig = zig_in(toolchains);
    if zig.is_file() {
        trusted_in_cache(&Ok(toolchains.to_path_buf()), &zig)?;
        if zig_version(&zig).as_deref() == Some(ZIGLANG_VERSION) {
            return Ok(zig);
        }
    }
    let python = trust::which(Path::new("python3")).ok_or_else(|| AmdError::Spawn {
        program: "python3".into(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not found on PATH's absolute entries",
        ),
    })?;
    let mut cmd = Command::new(python);
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

/// Run a command to completion; a non-zero exit becomes [`AmdError::ToolFailed`] with its stderr. The
/// program must be an absolute path: a bare name would be looked up on `PATH`, whose relative entries
/// name the current folder.
fn run(cmd: &mut Command) -> Result<std::process::Output, AmdError> {
    let program = format!("{:?}", cmd.get_program());
    if !Path::new(cmd.get_program()).is_absolute() {
        return Err(AmdError::Spawn {
            program,
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not found on PATH's absolute entries",
            ),
        });
    }
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

fn scratch() -> Result<ScratchDir, AmdError> {
    ScratchDir::new("kittens-amd-").map_err(|source| AmdError::Io {
        path: std::env::temp_dir(),
        source,
    })
}

fn write_input(path: &Path, text: &str) -> Result<(), AmdError> {
    write_new(path, text.as_bytes()).map_err(|source| AmdError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_output(path: &Path) -> Result<String, AmdError> {
    read_regular_string(path, MAX_OUTPUT_BYTES).map_err(|source| AmdError::Io {
        path: path.to_path_buf(),
        source,
    })
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

    /// Compile self-contained HIP device source for `arch` into assembly only (no code object),
    /// through the compile cache the environment names ([`cached::default_cache`]).
    pub fn compile_to_asm(&self, source: &str, arch: Arch) -> Result<String, AmdError> {
        self.compile_to_asm_with_cache(source, arch, cached::default_cache())
    }

    /// [`AmdgpuClang::compile_to_asm`] with an explicit cache, or none.
    pub fn compile_to_asm_with_cache(
        &self,
        source: &str,
        arch: Arch,
        cache: Option<&KernelCache>,
    ) -> Result<String, AmdError> {
        self.hip_to_asm(source, arch, cache).map(|(asm, _)| asm)
    }

    /// Compile self-contained HIP device source for `arch` into assembly and a linked code object,
    /// through the compile cache the environment names ([`cached::default_cache`]).
    pub fn compile(&self, source: &str, arch: Arch) -> Result<CompiledHip, AmdError> {
        self.compile_with_cache(source, arch, cached::default_cache())
    }

    /// [`AmdgpuClang::compile`] with an explicit cache, or none.
    pub fn compile_with_cache(
        &self,
        source: &str,
        arch: Arch,
        cache: Option<&KernelCache>,
    ) -> Result<CompiledHip, AmdError> {
        let target = amd_target(arch)?;
        let (asm, asm_hit) = self.hip_to_asm(source, arch, cache)?;
        let flags = [CC1AS_FLAGS, &[target, "-filetype", "obj"], LLD_FLAGS].concat();
        let (code_object, co_hit) =
            self.step(cache, Step::CodeObject, target, &flags, &asm, |dir| {
                let (s, o, co) = (
                    dir.join("kernel.s"),
                    dir.join("kernel.o"),
                    dir.join("kernel.hsaco"),
                );
                write_input(&s, &asm)?;
                run(self
                    .clang
                    .command()
                    .args(CC1AS_FLAGS)
                    .args([target, "-filetype", "obj", "-o"])
                    .arg(&o)
                    .arg(&s))?;
                run(self
                    .lld
                    .command()
                    .args(LLD_FLAGS)
                    .arg("-o")
                    .arg(&co)
                    .arg(&o))?;
                read_regular(&co, MAX_OUTPUT_BYTES).map_err(|source| AmdError::Io {
                    path: co.clone(),
                    source,
                })
            })?;
        Ok(CompiledHip {
            asm,
            code_object,
            cached: asm_hit && co_hit,
        })
    }

    /// The assembler's own listing of `asm` with every instruction's bytes (`-cc1as -filetype asm
    /// -show-encoding`): LLVM's printer text and its encoder's bytes, the independent reference the
    /// ISA emulator's decoder is tested against. Through the compile cache the environment names.
    pub fn encoding_listing(&self, asm: &str, arch: Arch) -> Result<String, AmdError> {
        let target = amd_target(arch)?;
        let flags = [CC1AS_FLAGS, &[target, "-filetype", "asm", "-show-encoding"]].concat();
        let cache = cached::default_cache();
        let (listing, _) = self.step(cache, Step::EncodingListing, target, &flags, asm, |dir| {
            let (s, out) = (dir.join("kernel.s"), dir.join("listing.s"));
            write_input(&s, asm)?;
            run(self
                .clang
                .command()
                .args(&flags)
                .arg("-o")
                .arg(&out)
                .arg(&s))?;
            read_output(&out).map(String::into_bytes)
        })?;
        Ok(String::from_utf8(listing).expect("a listing is text (Step::accepts)"))
    }

    /// HIP source to assembly: the text and whether it came from the cache.
    fn hip_to_asm(
        &self,
        source: &str,
        arch: Arch,
        cache: Option<&KernelCache>,
    ) -> Result<(String, bool), AmdError> {
        let target = amd_target(arch)?;
        let offload = format!("--offload-arch={target}");
        let flags = [HIP_FLAGS, &[offload.as_str()]].concat();
        let (asm, hit) = self.step(cache, Step::Asm, target, &flags, source, |dir| {
            let (hip, s) = (dir.join("kernel.hip"), dir.join("kernel.s"));
            write_input(&hip, source)?;
            run(self
                .clang
                .command()
                .args(&flags)
                .arg("-o")
                .arg(&s)
                .arg(&hip))?;
            read_output(&s).map(String::into_bytes)
        })?;
        let asm = String::from_utf8(asm).expect("assembly is text (Step::accepts)");
        Ok((asm, hit))
    }

    /// One step: its output from `cache` when there, else `compile` run in a fresh scratch folder and
    /// its output stored. Returns the output and whether it was a hit.
    fn step(
        &self,
        cache: Option<&KernelCache>,
        step: Step,
        target: &str,
        flags: &[&str],
        input: &str,
        compile: impl FnOnce(&ScratchDir) -> Result<Vec<u8>, AmdError>,
    ) -> Result<(Vec<u8>, bool), AmdError> {
        let tools: Vec<cached::Program> = match step {
            Step::CodeObject => vec![self.clang.as_program(), self.lld.as_program()],
            Step::Asm | Step::EncodingListing => vec![self.clang.as_program()],
        };
        let keyed = cache.and_then(|c| Some((c, cached::key(step, target, flags, &tools, input)?)));
        if let Some((c, key)) = &keyed {
            if let Some(bytes) = cached::get(c, key, step, target) {
                return Ok((bytes, true));
            }
        }
        let dir = scratch()?;
        let bytes = compile(&dir)?;
        if !step.accepts(&bytes) {
            return Err(AmdError::ToolFailed {
                command: format!("{step:?} for {target}"),
                status: "success".into(),
                stderr: "the output is not what the step makes (text or an ELF file)".into(),
            });
        }
        if let Some((c, key)) = &keyed {
            cached::put(c, key, step, target, &bytes);
        }
        Ok((bytes, false))
    }
}
