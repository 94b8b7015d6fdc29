//! The GEMM kernel the benchmark runs: a lowered `gemm_bf16` (`kittens_codegen::Lowered`, persistent
//! grid) in one of its block shapes (`kittens_kernels::gemm_bf16::shapes`), compiled, loaded and
//! launched by its argument list on operands described by [`Mat`] (TMA maps built here).

use std::ffi::c_void;
use std::rc::Rc;

use cudarc::driver::sys as cu;
use kittens_codegen::cuda::TmaMap;
use kittens_codegen::{KernelArg, Lowered};
use kittens_kernels::gemm_bf16::shapes::HopperTile;
use kittens_kernels::gemm_bf16::{BLayout, GemmConfig};

use super::driver::{encode_bf16, Device, Function, Stream, Swizzle};
use super::gemm_pad::Mat;
use super::{compile, CudaCompileReport, CudaError};

/// A compiled, loaded GEMM kernel.
pub struct GemmKernel {
    function: Function,
    lowered: Lowered,
    pub tile: HopperTile,
    pub b_layout: BLayout,
    pub stages: u32,
    pub name: String,
    pub compile: CudaCompileReport,
    /// Blocks of the persistent grid resident at once.
    pub resident: u32,
}

fn invalid(e: impl std::fmt::Display) -> CudaError {
    CudaError::Invalid(e.to_string())
}

/// The registry's `gemm_bf16` program with block `tile` and B stored as `b_layout`, configured for the
/// H100 (ring stages that fit its shared memory) and lowered for sm_90a.
pub fn lower_tile(tile: HopperTile, b_layout: BLayout) -> Result<Lowered, CudaError> {
    let gpu = kittens_hw::Target::Sm90a
        .gpu()
        .ok_or_else(|| invalid("no sm_90a GPU in the catalog"))?;
    let cfg = GemmConfig {
        b_layout,
        ..tile.config(gpu)
    };
    let k = kittens_kernels::gemm_bf16::build(&cfg)
        .map_err(|e| invalid(format!("gemm_bf16 {tile}: {e}")))?;
    kittens_codegen::lower(&k, kittens_hw::Target::Sm90a)
        .map_err(|e| invalid(format!("lowering gemm_bf16 {tile}: {e}")))
}

/// The three tensor maps of a lowered GEMM (A, B, then C for the TMA-store epilogue, 128-byte
/// swizzle), checked: anything else is a lowering these launchers do not know.
pub(crate) fn gemm_maps(l: &Lowered) -> Result<[TmaMap; 3], CudaError> {
    let maps = l.tma_maps();
    match maps.as_slice() {
        [ma, mb, mc]
            if (ma.global, mb.global, mc.global) == (0, 1, 2)
                && [ma, mb, mc].iter().all(|m| m.swizzle_bytes == 128) =>
        {
            Ok([*ma, *mb, *mc])
        }
        _ => Err(invalid(format!(
            "lowered gemm_bf16 wants tensor maps {maps:?}"
        ))),
    }
}

/// The tensor map of matrix `m` read or written in the boxes of `t` (logical extents: TMA reads columns
/// past `cols` as zero and clips stores there). The base must be 16-byte aligned and the pitch a
/// multiple of 16 bytes ([`Mat::tma_ok`]).
pub(crate) fn mat_map(m: &Mat, t: &TmaMap) -> Result<cu::CUtensorMap, CudaError> {
    if !m.tma_ok() {
        return Err(invalid(format!(
            "TMA needs 16-byte aligned rows: address {:#x}, row pitch {} bytes",
            m.ptr,
            m.pitch * 2
        )));
    }
    encode_bf16(
        m.ptr,
        &[m.cols as u64, m.rows as u64],
        &[m.pitch as u64 * 2],
        &[t.box_cols, t.box_rows],
        Swizzle::from_bytes(t.swizzle_bytes)?,
    )
}

impl GemmKernel {
    /// Compiles (NVRTC, cached) and loads the lowered kernel of block `tile` on `dev`.
    pub fn prepare(
        dev: &Rc<Device>,
        tile: HopperTile,
        b_layout: BLayout,
    ) -> Result<GemmKernel, CudaError> {
        let l = lower_tile(tile, b_layout)?;
        let shared = l.dynamic_shared_bytes();
        let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.entry, shared)?;
        gemm_maps(&l)?;
        let stages = l.ir.shared.first().map_or(0, |s| s.count);
        Ok(GemmKernel {
            function,
            name: l.entry.clone(),
            tile,
            b_layout,
            stages,
            compile: image.report,
            resident: dev.multiprocessors,
            lowered: l,
        })
    }

    /// One launch computing C = A·Bᵀ (A `m × k`, B `n × k`, C `m × n`), or C = A·B with B `k × n`
    /// ([`BLayout::Kn`]), each operand addressable by TMA in place ([`Mat::tma_ok`]; `super::gemm_pad`
    /// makes copies that are).
    pub fn launch(&self, stream: &Stream, a: &Mat, b: &Mat, c: &Mat) -> Result<(), CudaError> {
        let l = &self.lowered;
        let [ta, tb, tc] = gemm_maps(l)?;
        let (m, n, k) = (a.rows, c.cols, a.cols);
        let b_dims = match self.b_layout {
            BLayout::Nk => (n, k),
            BLayout::Kn => (k, n),
        };
        if (b.rows, b.cols) != b_dims || c.rows != m {
            return Err(invalid(format!(
                "operands {}x{}, {}x{}, {}x{} do not form C = A·B with B {:?}",
                a.rows, a.cols, b.rows, b.cols, c.rows, c.cols, self.b_layout
            )));
        }
        let maps = [mat_map(a, &ta)?, mat_map(b, &tb)?, mat_map(c, &tc)?];
        let mut args = GemmArgs::new(l, maps, [a.ptr, b.ptr, c.ptr], [m, n, k])?;
        let mut params = args.pointers();
        let grid = l
            .blocks(
                &[("m", m as i64), ("n", n as i64), ("k", k as i64)],
                self.resident,
            )
            .ok_or_else(|| invalid("grid extents of the lowered kernel"))?;
        // SAFETY: one pointer per kernel argument, in the order and with the types of the lowering's
        // argument list (tensor maps by value, 64-bit device pointers, 32-bit integers); the storage
        // vectors are not touched again until the launch has returned.
        unsafe {
            self.function
                .launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut params)
        }
    }
}

/// Kernel parameters of a lowered GEMM, stored in the order of its argument list (`Lowered::args`):
/// the tensor maps and device pointers of the globals `a`, `b`, `c` and the parameters `m`, `n`, `k`.
/// Any other name is refused, so a lowering whose signature changed cannot be launched with the old one.
/// Shared by the benchmark's launcher and the launcher on caller-owned memory (`super::caller`).
pub(crate) struct GemmArgs {
    maps: Vec<cu::CUtensorMap>,
    ptrs: Vec<u64>,
    ints: Vec<u32>,
    /// Per argument: which store (0 maps, 1 pointers, 2 integers) and the index in it.
    slots: Vec<(u8, usize)>,
}

impl GemmArgs {
    pub(crate) fn new(
        l: &Lowered,
        maps: [cu::CUtensorMap; 3],
        ptrs: [u64; 3],
        mnk: [usize; 3],
    ) -> Result<GemmArgs, CudaError> {
        let globals: Vec<&str> = l.ir.globals.iter().map(|g| g.name.as_str()).collect();
        let tensor = |name: &str| -> Result<usize, CudaError> {
            ["a", "b", "c"]
                .iter()
                .position(|x| *x == name)
                .ok_or_else(|| invalid(format!("lowered GEMM takes an unknown tensor `{name}`")))
        };
        let mut out = GemmArgs {
            maps: Vec::new(),
            ptrs: Vec::new(),
            ints: Vec::new(),
            slots: Vec::with_capacity(l.args.len()),
        };
        for arg in &l.args {
            match arg {
                KernelArg::TensorMap(t) => {
                    let g = globals.get(t.global as usize).copied().unwrap_or("?");
                    out.maps.push(maps[tensor(g)?]);
                    out.slots.push((0, out.maps.len() - 1));
                }
                KernelArg::Global { name } => {
                    out.ptrs.push(ptrs[tensor(name)?]);
                    out.slots.push((1, out.ptrs.len() - 1));
                }
                KernelArg::Param { name } => {
                    let i = ["m", "n", "k"]
                        .iter()
                        .position(|x| x == name)
                        .ok_or_else(|| {
                            invalid(format!("lowered GEMM takes an unknown parameter `{name}`"))
                        })?;
                    let v = mnk[i];
                    out.ints
                        .push(u32::try_from(v).map_err(|_| invalid(format!("{name} = {v}")))?);
                    out.slots.push((2, out.ints.len() - 1));
                }
            }
        }
        Ok(out)
    }

    /// One pointer per kernel argument, into this storage (valid while `self` is neither moved nor
    /// changed), as `cuLaunchKernel` takes them.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        let (maps, ptrs, ints) = (&mut self.maps, &mut self.ptrs, &mut self.ints);
        self.slots
            .iter()
            .map(|&(kind, i)| match kind {
                0 => (&mut maps[i] as *mut cu::CUtensorMap).cast::<c_void>(),
                1 => (&mut ptrs[i] as *mut u64).cast::<c_void>(),
                _ => (&mut ints[i] as *mut u32).cast::<c_void>(),
            })
            .collect()
    }
}
