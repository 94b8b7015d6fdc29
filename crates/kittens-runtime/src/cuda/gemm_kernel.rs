//! The GEMM kernel the benchmark runs: a lowered `gemm_bf16` (`kittens_codegen::Lowered`, persistent
//! grid) compiled, loaded and launched by its argument list.

use std::ffi::c_void;
use std::rc::Rc;

use cudarc::driver::sys as cu;
use kittens_codegen::cuda::TmaMap;
use kittens_codegen::{KernelArg, Lowered};

use super::driver::{Device, DeviceBuffer, Function, Stream, TensorMap};
use super::{compile, CudaCompileReport, CudaError};

/// A compiled, loaded GEMM kernel.
pub struct GemmKernel {
    function: Function,
    lowered: Lowered,
    pub name: String,
    pub config: String,
    pub compile: CudaCompileReport,
    /// Blocks of the persistent grid resident at once.
    pub resident: u32,
    /// TMA boxes (rows, cols) of A and B.
    pub a_box: (u32, u32),
    pub b_box: (u32, u32),
}

fn invalid(e: impl std::fmt::Display) -> CudaError {
    CudaError::Invalid(e.to_string())
}

impl GemmKernel {
    /// Compiles (NVRTC, cached) and loads the lowered kernel on `dev`.
    pub fn prepare(dev: &Rc<Device>, l: &Lowered) -> Result<GemmKernel, CudaError> {
        let shared = l.dynamic_shared_bytes();
        let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.entry, shared)?;
        // The harness builds A's and B's maps from these boxes (128-byte swizzle) and C's
        // with 64 × 64 boxes; anything else is a lowering this launcher does not know.
        let sw = |m: &TmaMap| m.swizzle_bytes == 128;
        let tma_maps = l.tma_maps();
        let named = |m: &TmaMap, name: &str| {
            l.ir.globals.get(m.global as usize).map(|g| g.name.as_str()) == Some(name)
        };
        let (a_box, b_box) = match tma_maps.as_slice() {
            [ma, mb, mc]
                if named(ma, "a")
                    && named(mb, "b")
                    && named(mc, "c")
                    && sw(ma)
                    && sw(mb)
                    && sw(mc)
                    && (mc.box_rows, mc.box_cols) == (64, 64) =>
            {
                ((ma.box_rows, ma.box_cols), (mb.box_rows, mb.box_cols))
            }
            _ => {
                return Err(invalid(format!(
                    "lowered gemm_bf16 wants tensor maps {tma_maps:?}"
                )))
            }
        };
        Ok(GemmKernel {
            function,
            name: l.entry.clone(),
            config: format!(
                "{} tile program (kittens-kernels, producer/consumer), lowered",
                l.ir.name
            ),
            compile: image.report,
            resident: dev.multiprocessors,
            a_box,
            b_box,
            lowered: l.clone(),
        })
    }

    /// Problem sizes the kernel handles: TMA loads A, B and stores C, so row pitches are 16-byte
    /// multiples.
    /// For fp8 operands (1 byte) K must be a multiple of 16.
    pub fn check_shape(&self, m: usize, n: usize, k: usize) -> Result<(), CudaError> {
        let elem = self
            .lowered
            .ir
            .globals
            .first()
            .map_or(2, |g| g.dtype.bytes() as usize);
        let kq = 16 / elem.clamp(1, 16);
        if k.is_multiple_of(kq) && n.is_multiple_of(8) && m > 0 && n > 0 && k > 0 {
            Ok(())
        } else {
            Err(invalid(format!(
                "{m}x{n}x{k}: N must be a positive multiple of 8 and K of {kq} (TMA row pitch)"
            )))
        }
    }

    /// One launch computing C = A·Bᵀ. `maps` are A's and B's tensor maps (boxes `a_box`, `b_box`), `c`
    /// C's map (64 × 64 boxes, used by the TMA-store epilogue) and buffer. The arguments follow the
    /// lowering's list (`Lowered::args`): tensor maps and pointers of the globals `a`, `b`, `c`, and the
    /// parameters `m`, `n`, `k`; any other name is refused.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        stream: &Stream,
        maps: &(TensorMap, TensorMap),
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &(TensorMap, &DeviceBuffer),
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(), CudaError> {
        let ptrs = [("a", a.ptr()), ("b", b.ptr()), ("c", c.1.ptr())];
        self.launch_named(stream, [maps.0.map, maps.1.map, c.0.map], &ptrs, [m, n, k])
    }

    /// [`Self::launch`] for `gemm_fp8`: also the f32 scale tensors `scale_a`, `scale_b` (one element
    /// each for per-tensor scales).
    #[allow(clippy::too_many_arguments)]
    pub fn launch_scaled(
        &self,
        stream: &Stream,
        maps: &(TensorMap, TensorMap),
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        scales: [&DeviceBuffer; 2],
        c: &(TensorMap, &DeviceBuffer),
        m: usize,
        n: usize,
        k: usize,
    ) -> Result<(), CudaError> {
        let ptrs = [
            ("a", a.ptr()),
            ("b", b.ptr()),
            ("scale_a", scales[0].ptr()),
            ("scale_b", scales[1].ptr()),
            ("c", c.1.ptr()),
        ];
        self.launch_named(stream, [maps.0.map, maps.1.map, c.0.map], &ptrs, [m, n, k])
    }

    fn launch_named(
        &self,
        stream: &Stream,
        maps: [cu::CUtensorMap; 3],
        ptrs: &[(&str, u64)],
        [m, n, k]: [usize; 3],
    ) -> Result<(), CudaError> {
        let l = &self.lowered;
        let mut args = GemmArgs::named(l, maps, ptrs, [m, n, k])?;
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
        let named = [("a", ptrs[0]), ("b", ptrs[1]), ("c", ptrs[2])];
        Self::named(l, maps, &named, mnk)
    }

    /// As [`Self::new`], the device pointers given by tensor name (`gemm_fp8` adds `scale_a`,
    /// `scale_b`); the maps are A's, B's and C's.
    pub(crate) fn named(
        l: &Lowered,
        maps: [cu::CUtensorMap; 3],
        ptrs: &[(&str, u64)],
        mnk: [usize; 3],
    ) -> Result<GemmArgs, CudaError> {
        let globals: Vec<&str> = l.ir.globals.iter().map(|g| g.name.as_str()).collect();
        let tensor = |name: &str| -> Result<usize, CudaError> {
            ["a", "b", "c"]
                .iter()
                .position(|x| *x == name)
                .ok_or_else(|| invalid(format!("lowered GEMM has a tensor map of `{name}`")))
        };
        let pointer = |name: &str| -> Result<u64, CudaError> {
            ptrs.iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, p)| p)
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
                    out.ptrs.push(pointer(name)?);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The lowered `gemm_fp8` takes its tensors by name: three tensor maps (A, B, C), then the pointers
    /// of `a, b, scale_a, scale_b, c` in declaration order, then `m, n, k`; a missing scale is refused
    /// by name rather than launched with a wrong argument list.
    #[test]
    fn fp8_arguments_follow_the_lowering() {
        let k = kittens_kernels::by_name("gemm_fp8")
            .and_then(|e| e.build_for(kittens_hw::Target::Sm90a))
            .unwrap();
        let l = kittens_codegen::lower(&k, kittens_hw::Target::Sm90a).unwrap();
        // SAFETY: the opaque map struct accepts any bits; nothing dereferences these.
        let maps: [cu::CUtensorMap; 3] = unsafe { std::mem::zeroed() };
        let ptrs = [
            ("c", 5u64),
            ("scale_b", 4),
            ("a", 1),
            ("scale_a", 3),
            ("b", 2),
        ];
        let args = GemmArgs::named(&l, maps, &ptrs, [10, 20, 32]).unwrap();
        assert_eq!(args.maps.len(), 3);
        assert_eq!(args.ptrs, [1, 2, 3, 4, 5]);
        assert_eq!(args.ints, [10, 20, 32]);
        assert_eq!(args.slots.len(), l.args.len());
        let no_scale_a = [ptrs[0], ptrs[1], ptrs[2], ptrs[4]];
        let e = GemmArgs::named(&l, maps, &no_scale_a, [10, 20, 32])
            .err()
            .expect("scale_a missing");
        assert!(e.to_string().contains("scale_a"), "{e}");
    }
}
