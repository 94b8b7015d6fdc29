//! The GEMM kernel the benchmark runs: `gemm_bf16` lowered from its tile program
//! (`kittens_codegen::cuda::gemm_bf16_sm90`, persistent grid), compiled, loaded and launched.

use std::ffi::c_void;
use std::rc::Rc;

use kittens_codegen::cuda::{gemm_bf16_sm90, LoweredCuda, TmaMap};

use super::driver::{Device, DeviceBuffer, Function, Stream, TensorMap};
use super::{compile, CudaCompileReport, CudaError};

/// A compiled, loaded GEMM kernel.
pub struct GemmKernel {
    function: Function,
    lowered: LoweredCuda,
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
    /// Generates, compiles (NVRTC, cached) and loads the kernel on `dev`.
    pub fn prepare(dev: &Rc<Device>) -> Result<GemmKernel, CudaError> {
        let l = gemm_bf16_sm90().map_err(invalid)?;
        let image = compile(&l.source, &l.name, "sm_90a", l.dynamic_shared_bytes)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.name, l.dynamic_shared_bytes)?;
        // The harness builds A's and B's maps from these boxes (128-byte swizzle) and C's
        // with 64 × 64 boxes; anything else is a lowering this launcher does not know.
        let sw = |m: &TmaMap| m.swizzle_bytes == 128;
        let (a_box, b_box) = match l.tma_maps.as_slice() {
            [ma, mb, mc]
                if ma.global == 0
                    && mb.global == 1
                    && mc.global == 2
                    && sw(ma)
                    && sw(mb)
                    && sw(mc)
                    && (mc.box_rows, mc.box_cols) == (64, 64) =>
            {
                ((ma.box_rows, ma.box_cols), (mb.box_rows, mb.box_cols))
            }
            _ => {
                return Err(invalid(format!(
                    "lowered gemm_bf16 wants tensor maps {:?}",
                    l.tma_maps
                )))
            }
        };
        Ok(GemmKernel {
            function,
            name: l.name.clone(),
            config: "gemm_bf16 tile program (kittens-kernels, producer/consumer), lowered".into(),
            compile: image.report,
            resident: dev.multiprocessors,
            a_box,
            b_box,
            lowered: l,
        })
    }

    /// Problem sizes the kernel handles: TMA loads A, B and stores C, so row pitches are 16-byte
    /// multiples.
    pub fn check_shape(&self, m: usize, n: usize, k: usize) -> Result<(), CudaError> {
        if k.is_multiple_of(8) && n.is_multiple_of(8) && m > 0 && n > 0 && k > 0 {
            Ok(())
        } else {
            Err(invalid(format!(
                "{m}x{n}x{k}: N and K must be positive multiples of 8 (TMA row pitch)"
            )))
        }
    }

    /// One launch computing C = A·Bᵀ. `maps` are A's and B's tensor maps (boxes `a_box`, `b_box`), `c`
    /// C's map (64 × 64 boxes, used by the TMA-store epilogue) and buffer.
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
        let (mut ta, mut tb, mut tc) = (maps.0, maps.1, c.0);
        let (mut pa, mut pb, mut pc) = (a.ptr(), b.ptr(), c.1.ptr());
        let (mut mm, mut nn, mut kk) = (m as u32, n as u32, k as u32);
        let map = |t: &mut TensorMap| (t as *mut TensorMap).cast::<c_void>();
        let ptr = |p: &mut u64| (p as *mut u64).cast::<c_void>();
        let int = |v: &mut u32| (v as *mut u32).cast::<c_void>();
        let l = &self.lowered;
        // `lower`'s ABI: the tensor maps (A, B, C), then globals a, b, c, then params m, n, k.
        let names: Vec<&str> = l.ir.globals.iter().map(|g| g.name.as_str()).collect();
        let params_ir: Vec<&str> = l.ir.params.iter().map(|p| p.name.as_str()).collect();
        if names != ["a", "b", "c"] || params_ir != ["m", "n", "k"] {
            return Err(invalid(format!(
                "lowered kernel takes globals {names:?}, params {params_ir:?}"
            )));
        }
        let mut params = [
            map(&mut ta),
            map(&mut tb),
            map(&mut tc),
            ptr(&mut pa),
            ptr(&mut pb),
            ptr(&mut pc),
            int(&mut mm),
            int(&mut nn),
            int(&mut kk),
        ];
        let grid = l
            .grid(
                &[("m", m as i64), ("n", n as i64), ("k", k as i64)],
                self.resident,
            )
            .ok_or_else(|| invalid("grid extents of the lowered kernel"))?;
        // SAFETY: the parameter list matches `lower`'s documented ABI, checked by name above.
        unsafe {
            self.function
                .launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut params)
        }
    }
}
