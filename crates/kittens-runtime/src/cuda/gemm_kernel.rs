//! The GEMM kernels the benchmark runs, behind one launch interface: the hand-scheduled Hopper kernel
//! (`kittens_codegen::cuda::HopperGemm`, persistent grid) or `gemm_bf16` lowered from its tile program
//! (`kittens_codegen::cuda::gemm_bf16_sm90`, persistent grid too).

use std::ffi::c_void;
use std::rc::Rc;

use kittens_codegen::cuda::{gemm_bf16_sm90, HopperGemm, LoweredCuda, TmaMap};

use super::driver::{Device, DeviceBuffer, Function, Stream, TensorMap};
use super::{compile, CudaCompileReport, CudaError};

/// Which kernel to build.
#[derive(Clone, Debug)]
pub enum GemmSource {
    Handwritten(HopperGemm),
    /// kittens-kernels' `gemm_bf16` for the H100, through `kittens_codegen::cuda::lower`.
    TileProgram,
}

enum Kind {
    Hand { config: HopperGemm, slots: u32 },
    Lowered { l: Box<LoweredCuda>, slots: u32 },
}

/// A compiled, loaded GEMM kernel.
pub struct GemmKernel {
    function: Function,
    kind: Kind,
    pub name: String,
    pub config: String,
    pub compile: CudaCompileReport,
    /// Blocks (clusters for a cluster kernel) of the persistent grid resident at once.
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
    pub fn prepare(dev: &Rc<Device>, source: &GemmSource) -> Result<GemmKernel, CudaError> {
        match source {
            GemmSource::Handwritten(cfg) => {
                let src = cfg.source().map_err(invalid)?;
                let image = compile(
                    &src,
                    &cfg.kernel_name(),
                    "sm_90a",
                    cfg.dynamic_shared_bytes(),
                )?;
                let module = dev.load_module(&image.cubin)?;
                let function = module.function(&cfg.kernel_name(), cfg.dynamic_shared_bytes())?;
                let slots = resident_clusters(dev, &function, cfg);
                Ok(GemmKernel {
                    function,
                    name: cfg.kernel_name(),
                    config: format!("{cfg:?}"),
                    compile: image.report,
                    resident: slots,
                    a_box: (cfg.bm, cfg.bk),
                    // In a cluster each CTA loads bn / cluster rows of the B tile.
                    b_box: (cfg.bn / cfg.cluster, cfg.bk),
                    kind: Kind::Hand {
                        config: cfg.clone(),
                        slots,
                    },
                })
            }
            GemmSource::TileProgram => {
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
                    config: "gemm_bf16 tile program (kittens-kernels, producer/consumer), lowered"
                        .into(),
                    compile: image.report,
                    resident: dev.multiprocessors,
                    a_box,
                    b_box,
                    kind: Kind::Lowered {
                        l: Box::new(l),
                        slots: dev.multiprocessors,
                    },
                })
            }
        }
    }

    /// Problem sizes the kernel handles.
    pub fn check_shape(&self, m: usize, n: usize, k: usize) -> Result<(), CudaError> {
        match &self.kind {
            Kind::Hand { config, .. } => config.check_shape(m, n, k).map_err(invalid),
            // TMA loads A, B and stores C: 16-byte row pitches.
            Kind::Lowered { .. }
                if k.is_multiple_of(8) && n.is_multiple_of(8) && m > 0 && n > 0 && k > 0 =>
            {
                Ok(())
            }
            Kind::Lowered { .. } => Err(invalid(format!(
                "{m}x{n}x{k}: N and K must be positive multiples of 8 (TMA row pitch)"
            ))),
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
        match &self.kind {
            Kind::Hand { config, slots } => {
                // `gemm_sm90.cu`: tensor maps of A, B and C, C's address, M, N, K.
                let mut params = [
                    map(&mut ta),
                    map(&mut tb),
                    map(&mut tc),
                    ptr(&mut pc),
                    int(&mut mm),
                    int(&mut nn),
                    int(&mut kk),
                ];
                let grid = config.grid(m, n, *slots);
                // SAFETY: the parameter list matches the kernel's signature above.
                unsafe {
                    self.function.launch(
                        (grid, 1, 1),
                        (config.threads(), 1, 1),
                        stream,
                        &mut params,
                    )
                }
            }
            Kind::Lowered { l, slots } => {
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
                    .grid(&[("m", m as i64), ("n", n as i64), ("k", k as i64)], *slots)
                    .ok_or_else(|| invalid("grid extents of the lowered kernel"))?;
                // SAFETY: the parameter list matches `lower`'s documented ABI, checked by name above.
                unsafe {
                    self.function
                        .launch((grid, 1, 1), (l.threads, 1, 1), stream, &mut params)
                }
            }
        }
    }
}

/// Clusters (blocks when `cluster` is 1) resident at once: a cluster needs all its CTAs on one GPC, so
/// fewer than SMs / cluster may fit; the driver says how many.
fn resident_clusters(dev: &Rc<Device>, function: &Function, cfg: &HopperGemm) -> u32 {
    if cfg.cluster == 1 {
        return dev.multiprocessors;
    }
    let whole = dev.multiprocessors / cfg.cluster * cfg.cluster;
    match function.max_active_clusters(whole, cfg.threads()) {
        Ok(n) if n > 0 => n,
        other => {
            eprintln!("  cuOccupancyMaxActiveClusters gave {other:?}; assuming every SM pair fits");
            dev.multiprocessors / cfg.cluster
        }
    }
}
