//! The lowered HIP of a kernel, run on the host: the generated source (prelude stripped) is compiled
//! for x86-64 against [`EMU_HEADER`], a stand-in for the prelude (fibers for lanes, static storage for
//! LDS, wave-collective MFMAs on the ISA lane maps, buffer resources with their bounds), and run block by
//! block on given tensors.
//!
//! This checks what the lowering generates — index math, swizzles, ragged edges, buffer addressing,
//! lane maps, MFMA plumbing — on both targets' code paths, with no AMD GPU. It says nothing about timing
//! and does not model asynchrony (loads land at once; the schedule analysis checks waits and barriers).
//!
//! Every buffer access must fall inside a tensor handed to [`Emulator::run`]; a [`HostTensor::Virtual`]
//! tensor has an extent but no storage (its 16-bit words read as [`virtual_word`]), so the addressing of
//! tensors of many GiB is testable without allocating them. `kittens run --backend hip-emu` runs a
//! registry kernel here through the runner (`crate::runner::HipEmu`).
//!
//! The source, the host program built from it, its inputs and its outputs live in a private scratch
//! folder ([`crate::trust::files`]: an unpredictable name, mode 0700, removed with the [`Emulator`]);
//! each run gets a fresh private folder inside it, so nothing run or read back was put there by
//! anyone else.

use crate::trust::files::{read_regular, write_new, ScratchDir};
use crate::trust::{self, TrustError};
use kittens_codegen::hip::{c_elem, lower, LowerError, PRELUDE};
use kittens_hw::Arch;
use kittens_ir::{Access, Env, Kernel};
use std::path::{Path, PathBuf};
use std::process::Command;
use thiserror::Error;

/// The emulation header, shipped inside the crate.
pub const EMU_HEADER: &str = include_str!("emu.h");

/// Tensors one emulated launch can register (the header's `TENSORS_MAX`).
const TENSORS_MAX: usize = 16;
/// Parameters one emulated launch can take: what the header's 4096-byte `emu_kernarg` holds after
/// [`TENSORS_MAX`] pointers.
const PARAMS_MAX: usize = (4096 - 8 * TENSORS_MAX) / 4;

/// What can go wrong building or running an emulated kernel.
#[derive(Debug, Error)]
pub enum EmuError {
    /// No C++20 compiler with clang's vector extensions was found.
    #[error(
        "no host C++ compiler for the HIP emulation (looked at: {looked}); install clang++ \
         (Debian: apt-get install clang-19), set KITTENS_HOST_CXX, or run \
         scripts/install-amdgpu-clang.sh (PyPI ziglang's `zig c++`)"
    )]
    NoHostCompiler { looked: String },
    /// A host compiler was found where it cannot be trusted; the message names the path and why.
    #[error("host C++ compiler not used: {0}")]
    Untrusted(#[from] TrustError),
    #[error(transparent)]
    Lower(#[from] LowerError),
    #[error("host compile of the emulated `{kernel}` failed:\n{stderr}")]
    Compile { kernel: String, stderr: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The emulated kernel stopped: a fault (an access outside every tensor, a read straddling a
    /// resource's bound) or a crash; the message is the program's.
    #[error("emulated `{kernel}` failed ({status}): {stderr}")]
    Run {
        kernel: String,
        status: String,
        stderr: String,
    },
    /// Parameters, tensors or block ids that do not fit the kernel.
    #[error("emulated `{kernel}`: {msg}")]
    Launch { kernel: String, msg: String },
}

/// A C++ compiler for the host: program and leading arguments (`zig c++`).
#[derive(Debug, Clone)]
pub struct HostCxx {
    pub program: PathBuf,
    pub prefix: Vec<String>,
}

/// The host compiler: `$KITTENS_HOST_CXX` (an absolute path, checked by [`trust::explicit_file`]),
/// Debian's `clang++-19`, `clang++` (on `PATH`'s absolute entries), else `zig c++` of PyPI ziglang in
/// the user's toolchain folder (checked by [`trust::check_cached_file`]). Only clang will do: the
/// header uses its `ext_vector_type`.
pub fn find_host_cxx() -> Result<HostCxx, EmuError> {
    let mut looked = Vec::new();
    let plain = |p: PathBuf| HostCxx {
        program: p,
        prefix: vec![],
    };
    if let Some(p) = trust::explicit_file("KITTENS_HOST_CXX")? {
        return Ok(plain(p));
    }
    for name in ["clang++-19", "clang++"] {
        looked.push(name.to_string());
        if let Some(found) = trust::which(Path::new(name)) {
            return Ok(plain(found));
        }
    }
    let zig = match super::toolchains_dir() {
        Ok(dir) => super::zig_in(&dir),
        Err(e) => {
            looked.push(format!("no user toolchain folder ({e})"));
            return Err(EmuError::NoHostCompiler {
                looked: looked.join(", "),
            });
        }
    };
    looked.push(zig.display().to_string());
    if std::fs::symlink_metadata(&zig).is_ok() {
        let dir = super::toolchains_dir()?;
        trust::check_cached_file(dir.parent().unwrap_or(&dir), &zig)?;
        return Ok(HostCxx {
            program: zig,
            prefix: vec!["c++".into()],
        });
    }
    Err(EmuError::NoHostCompiler {
        looked: looked.join(", "),
    })
}

/// The value of 16-bit word `i` of every virtual tensor (host twin of the header's `emu_virtual_word`):
/// a bf16 of magnitude in [1, 2) with a pseudo-random sign and mantissa.
pub fn virtual_word(i: u64) -> u16 {
    let h = ((i ^ (i >> 32)) as u32).wrapping_mul(2_654_435_761);
    (((h >> 16) & 0x807f) | 0x3f80) as u16
}

/// One tensor argument of an emulated launch.
#[derive(Debug, Clone, PartialEq)]
pub enum HostTensor {
    /// Bytes in the tensor's memory order; written back after the run when the kernel may write it.
    Data(Vec<u8>),
    /// An address range of `bytes` with no storage, read as [`virtual_word`]s; read-only.
    Virtual { bytes: u64 },
}

/// A kernel's lowered HIP compiled for the host, ready to run. The build folder is removed on drop.
#[derive(Debug)]
pub struct Emulator {
    kernel: Kernel,
    arch: Arch,
    dir: ScratchDir,
    exe: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EmuError + '_ {
    move |source| EmuError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The host `main`: reads `manifest` (parameters, then per tensor `bytes virtual`, then the launch ids),
/// loads tensor `i` from `t<i>.bin` beside it, runs each block with one fiber per HIP thread (emu.h), and
/// writes every writable tensor to `t<i>.out`.
fn driver(k: &Kernel) -> String {
    let (np, nt) = (k.params.len(), k.globals.len());
    let args: Vec<String> = k
        .globals
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let c = if g.access == Access::Read {
                "const "
            } else {
                ""
            };
            format!("({c}{}*)T[{i}]", c_elem(g.dtype))
        })
        .chain((0..np).map(|p| format!("(int)P[{p}]")))
        .collect();
    let writable: Vec<String> = k
        .globals
        .iter()
        .enumerate()
        .filter(|(_, g)| g.access != Access::Read)
        .map(|(i, _)| i.to_string())
        .collect();
    format!(
        r#"
#include <cstdlib>
#include <string>
#include <vector>
int main(int argc, char** argv) {{
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  FILE* m = fopen((dir + "/manifest").c_str(), "r");
  if (!m) return 2;
  long long P[{np} + 1];
  void* T[{nt}];
  unsigned long long bytes[{nt}];
  for (int i = 0; i < {np}; ++i) if (fscanf(m, "%lld", &P[i]) != 1) return 2;
  for (int i = 0; i < {nt}; ++i) {{
    int virt = 0;
    if (fscanf(m, "%llu %d", &bytes[i], &virt) != 2) return 2;
    if (virt) {{
      T[i] = (void*)(0x100000000000ull * (unsigned long long)(i + 1));
    }} else {{
      T[i] = malloc(bytes[i] ? bytes[i] : 1);
      const std::string path = dir + "/t" + std::to_string(i) + ".bin";
      FILE* f = fopen(path.c_str(), "rb");
      if (!T[i] || !f || fread(T[i], 1, bytes[i], f) != bytes[i]) {{ fprintf(stderr, "cannot read %s\n", path.c_str()); return 2; }}
      fclose(f);
    }}
    kittens::emu_register(T[i], bytes[i], virt != 0);
  }}
  for (int i = 0; i < {nt}; ++i) memcpy(kittens::emu_kernarg + 8 * i, &T[i], 8);
  for (int i = 0; i < {np}; ++i) {{ const int v = (int)P[i]; memcpy(kittens::emu_kernarg + 8 * {nt} + 4 * i, &v, 4); }}
  unsigned long long n = 0, id = 0;
  if (fscanf(m, "%llu", &n) != 1) return 2;
  for (unsigned long long b = 0; b < n; ++b) {{
    if (fscanf(m, "%llu", &id) != 1) return 2;
    kittens::EmuBarrier bar({threads});
    kittens::emu_block_barrier = &bar;
    auto body = [&] {{ {name}({args}); }};
    kittens::emu_run_block({threads}, (int)id, body);
  }}
  for (int i : std::vector<int>{{{writable}}}) {{
    const std::string path = dir + "/t" + std::to_string(i) + ".out";
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(T[i], 1, bytes[i], f) != bytes[i]) return 2;
    fclose(f);
  }}
  return 0;
}}
"#,
        threads = 64 * k.waves,
        name = kittens_codegen::cexpr::ident(&k.name),
        args = args.join(", "),
        writable = writable.join(", "),
    )
}

impl Emulator {
    /// Lower `kernel` for `arch` and compile it for the host.
    pub fn build(kernel: &Kernel, arch: Arch) -> Result<Self, EmuError> {
        let src = lower(kernel, arch)?.source;
        let body = src.strip_prefix(PRELUDE).ok_or_else(|| {
            EmuError::Lower(LowerError::Unsupported(
                "the lowered source does not start with the prelude".into(),
            ))
        })?;
        let cxx = find_host_cxx()?;
        let tmp = std::env::temp_dir();
        let dir = ScratchDir::new("kittens-emu-").map_err(io(&tmp))?;
        let emu = Emulator {
            kernel: kernel.clone(),
            arch,
            exe: dir.join("emu"),
            dir,
        };
        let cpp = emu.dir.join("emu.cpp");
        let text = format!("{EMU_HEADER}\n{body}\n{}", driver(kernel));
        write_new(&cpp, text.as_bytes()).map_err(io(&cpp))?;
        let out = Command::new(&cxx.program)
            .args(&cxx.prefix)
            .args(["-std=c++20", "-O2", "-pthread", "-w", "-o"])
            .arg(&emu.exe)
            .arg(&cpp)
            .output()
            .map_err(io(&cxx.program))?;
        if !out.status.success() {
            return Err(EmuError::Compile {
                kernel: kernel.name.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(emu)
    }

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    fn launch_error(&self, msg: String) -> EmuError {
        EmuError::Launch {
            kernel: self.kernel.name.clone(),
            msg,
        }
    }

    /// Blocks the kernel launches for `params`: the product of its grid extents.
    pub fn blocks(&self, params: &[i64]) -> Result<u64, EmuError> {
        let env = Env {
            params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        self.kernel.grid.extents.iter().try_fold(1u64, |acc, e| {
            let x = e
                .eval(&env)
                .and_then(|x| u64::try_from(x).ok())
                .ok_or_else(|| self.launch_error(format!("grid extent {e:?} does not evaluate")))?;
            acc.checked_mul(x)
                .ok_or_else(|| self.launch_error("grid size overflows u64".into()))
        })
    }

    /// Bytes tensor `i` spans for `params`: `(1 + Σ (dim − 1)·stride) · element bytes`, 0 when a dim is 0.
    pub fn tensor_bytes(&self, i: usize, params: &[i64]) -> Result<u64, EmuError> {
        let g = &self.kernel.globals[i];
        let env = Env {
            params,
            vars: &[],
            block: &[],
            wave: 0,
        };
        let eval = |e: &kittens_ir::Expr| {
            e.eval(&env)
                .and_then(|x| u64::try_from(x).ok())
                .ok_or_else(|| {
                    self.launch_error(format!("tensor `{}`: {e:?} does not evaluate", g.name))
                })
        };
        let mut last = 0u64;
        for (d, s) in g.dims.iter().zip(&g.strides) {
            let (d, s) = (eval(d)?, eval(s)?);
            if d == 0 {
                return Ok(0);
            }
            last = (d - 1)
                .checked_mul(s)
                .and_then(|x| x.checked_add(last))
                .ok_or_else(|| self.launch_error(format!("tensor `{}` overflows", g.name)))?;
        }
        last.checked_add(1)
            .and_then(|x| x.checked_mul(g.dtype.bytes() as u64))
            .ok_or_else(|| self.launch_error(format!("tensor `{}` overflows", g.name)))
    }

    /// Run the blocks `launch_ids` (every block of the grid when `None`) on `tensors` (one per global
    /// tensor, in declaration order, at least as large as the tensor spans); writable `Data` tensors are
    /// updated in place.
    pub fn run(
        &self,
        params: &[i64],
        tensors: &mut [HostTensor],
        launch_ids: Option<&[u64]>,
    ) -> Result<(), EmuError> {
        let k = &self.kernel;
        if params.len() != k.params.len() || tensors.len() != k.globals.len() {
            return Err(self.launch_error(format!(
                "takes {} parameters and {} tensors, given {} and {}",
                k.params.len(),
                k.globals.len(),
                params.len(),
                tensors.len()
            )));
        }
        if tensors.len() > TENSORS_MAX {
            return Err(self.launch_error(format!("more than {TENSORS_MAX} tensors")));
        }
        if params.len() > PARAMS_MAX {
            return Err(self.launch_error(format!("more than {PARAMS_MAX} parameters")));
        }
        if let Some(p) = params.iter().find(|p| i32::try_from(**p).is_err()) {
            return Err(self.launch_error(format!(
                "parameter {p} does not fit the kernel's 32-bit int"
            )));
        }
        kittens_codegen::hip::check_launch(k, params)?;
        let blocks = self.blocks(params)?;
        let ids: Vec<u64> = match launch_ids {
            Some(ids) => ids.to_vec(),
            None => (0..blocks).collect(),
        };
        if let Some(id) = ids.iter().find(|&&id| id >= blocks || id > i32::MAX as u64) {
            return Err(self.launch_error(format!("block {id} is outside the grid of {blocks}")));
        }
        let run = ScratchDir::new_in(self.dir.path(), "run-").map_err(io(self.dir.path()))?;
        let mut manifest = params.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        for (i, t) in tensors.iter().enumerate() {
            let need = self.tensor_bytes(i, params)?;
            let name = &k.globals[i].name;
            let (bytes, virt) = match t {
                HostTensor::Data(d) => (d.len() as u64, 0),
                HostTensor::Virtual { .. } if k.globals[i].access != Access::Read => {
                    return Err(self.launch_error(format!(
                        "tensor `{name}` is written by the kernel and cannot be virtual"
                    )))
                }
                HostTensor::Virtual { bytes } => (*bytes, 1),
            };
            if bytes < need {
                return Err(self.launch_error(format!(
                    "tensor `{name}` has {bytes} bytes, the kernel spans {need}"
                )));
            }
            if let HostTensor::Data(d) = t {
                let p = run.join(&format!("t{i}.bin"));
                write_new(&p, d).map_err(io(&p))?;
            }
            manifest.push(format!("{bytes} {virt}"));
        }
        manifest.push(ids.len().to_string());
        manifest.extend(ids.iter().map(|id| id.to_string()));
        let mp = run.join("manifest");
        write_new(&mp, (manifest.join("\n") + "\n").as_bytes()).map_err(io(&mp))?;
        let out = Command::new(&self.exe)
            .arg(run.path())
            .output()
            .map_err(io(&self.exe))?;
        if !out.status.success() {
            return Err(EmuError::Run {
                kernel: k.name.clone(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        for (i, t) in tensors.iter_mut().enumerate() {
            if let (HostTensor::Data(d), true) = (t, k.globals[i].access != Access::Read) {
                let p = run.join(&format!("t{i}.out"));
                let want = d.len();
                *d = read_regular(&p, want as u64).map_err(io(&p))?;
                if d.len() != want {
                    return Err(self.launch_error(format!(
                        "{} has {} bytes, expected {want}",
                        p.display(),
                        d.len()
                    )));
                }
            }
        }
        Ok(())
    }
}
