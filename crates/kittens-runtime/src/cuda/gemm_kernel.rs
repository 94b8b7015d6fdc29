//! The GEMM kernel the benchmarks run: a lowered `gemm_bf16` (`kittens_codegen::Lowered`, persistent
//! grid) in one of its block shapes (`kittens_kernels::gemm::shapes`), or a lowered `gemm_fp8`,
//! compiled, loaded and launched by its argument list: bf16 operands described by [`Mat`] (TMA maps
//! built here), fp8 operands by their tensor maps and the scale tensors ([`GemmKernel::launch_scaled`]).

use std::ffi::c_void;
use std::rc::Rc;

use cudarc::driver::sys as cu;
use kittens_codegen::cuda::TmaMap;
use kittens_codegen::{KernelArg, Lowered};
use kittens_hw::dtype::DType;
use kittens_ir::SlotFill;
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::split_k::{COUNTERS, PARTIAL};
use kittens_kernels::gemm::{BLayout, GemmConfig};

use super::driver::{encode_bf16, Device, DeviceBuffer, Function, Stream, Swizzle, TensorMap};
use super::gemm_pad::Mat;
use super::strip_kernel::StripKernel;
use super::{compile, invalid, CudaCompileReport, CudaError};

/// A compiled, loaded GEMM kernel.
pub struct GemmKernel {
    function: Function,
    lowered: Lowered,
    pub tile: HopperTile,
    pub b_layout: BLayout,
    pub stages: u32,
    /// The lowering's tensor maps of A, B and C ([`gemm_maps`]): the boxes the launchers encode.
    pub maps: [TmaMap; 3],
    pub name: String,
    pub compile: CudaCompileReport,
    /// Blocks of the persistent grid resident at once.
    pub resident: u32,
    /// How the kernel fills its ring slots from A and B: TMA maps, or `cp.async` from the dense
    /// operands' pointers ([`GemmKernel::launch`] checks them).
    pub loads: SlotFill,
    /// With split-K: the reduction launched after the kernel, and the partials' scratch.
    pub split: Option<SplitReduce>,
    /// With split-K reduced by the last block of each tile: the partials' scratch and the counters.
    pub fixup: Option<FixupScratch>,
}

/// The scratch of a split-K GEMM whose last block per tile reduces
/// (`kittens_kernels::gemm::split_k::Fixup`): the f32 partials and the tiles' arrival counters,
/// zeroed when allocated and left zero by every launch.
pub struct FixupScratch {
    partial: std::cell::RefCell<Option<DeviceBuffer>>,
    counters: std::cell::RefCell<Option<DeviceBuffer>>,
    dev: Rc<Device>,
}

impl FixupScratch {
    /// The partials (`split_k × m × n` f32) and counters (`tiles` i32), allocated or grown here.
    fn buffers(&self, partial_bytes: usize, tiles: usize) -> Result<(u64, u64), CudaError> {
        let mut p = self.partial.borrow_mut();
        if p.as_ref().is_none_or(|b| b.bytes() < partial_bytes) {
            *p = Some(self.dev.alloc(partial_bytes)?);
        }
        let mut c = self.counters.borrow_mut();
        let bytes = tiles.max(1) * 4;
        if c.as_ref().is_none_or(|b| b.bytes() < bytes) {
            let mut b = self.dev.alloc(bytes)?;
            b.fill_u16(0)?;
            *c = Some(b);
        }
        Ok((
            p.as_ref().map_or(0, |b| b.ptr()),
            c.as_ref().map_or(0, |b| b.ptr()),
        ))
    }
}

/// For measurement: `KITTENS_GEMM_FIXUP=1` has the benchmarks' split-K GEMMs reduced by the last
/// block of each tile (`GemmConfig::last_block_reduces`) instead of by a second launch.
pub fn fixup_knob() -> Result<bool, CudaError> {
    Ok(measurement_knob("KITTENS_GEMM_FIXUP")? == Some(1))
}

/// Which of a GEMM's launches go as programmatic dependents of the kernel before them on the stream
/// (`Function::launch_as`): the GEMM after its operand copies (`gemm`: 0.828-0.831 of
/// cuBLAS against 0.804-0.817 at 3000³ on the H100), the split-K reduction after the GEMM (`reduce`).
/// The kernels before never trigger early; the dependents wait for them (`griddepcontrol.wait`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pdl {
    pub gemm: bool,
    pub reduce: bool,
}

/// The second pass of a split-K GEMM (`kittens_kernels::gemm::split_k`): the strip program that
/// adds the `split_k` f32 planes of the kernel's partial C into C, and the scratch holding them
/// (grown on first use at a larger shape: allocation happens at the checked launch, before timing).
pub struct SplitReduce {
    pub split_k: u32,
    kernel: StripKernel,
    scratch: std::cell::RefCell<Option<DeviceBuffer>>,
    dev: Rc<Device>,
}

impl SplitReduce {
    /// Compiles and loads the reduction for `split_k` planes writing bf16 C.
    fn load(dev: &Rc<Device>, split_k: u32) -> Result<SplitReduce, CudaError> {
        let k = kittens_kernels::gemm::split_k::build_reduce(split_k, DType::Bf16, 32)
            .map_err(invalid)?;
        Ok(SplitReduce {
            split_k,
            kernel: StripKernel::load(dev, &k)?,
            scratch: std::cell::RefCell::new(None),
            dev: dev.clone(),
        })
    }

    /// The partials' scratch for `m × n`, allocated or grown here.
    fn scratch(&self, m: usize, n: usize) -> Result<u64, CudaError> {
        let bytes = (self.split_k as usize)
            .checked_mul(m)
            .and_then(|x| x.checked_mul(n))
            .and_then(|x| x.checked_mul(4))
            .ok_or_else(|| invalid(format!("split-K partials of {m} x {n} overflow")))?;
        let mut s = self.scratch.borrow_mut();
        if s.as_ref().is_none_or(|b| b.bytes() < bytes) {
            *s = Some(self.dev.alloc(bytes)?);
        }
        Ok(s.as_ref().map_or(0, |b| b.ptr()))
    }

    /// Enqueues the reduction of the scratch at `partial` into the dense bf16 `m × n` C at `c`, right
    /// after the GEMM that wrote it: `programmatic`, as its programmatic dependent (the launch gap
    /// hidden, [`Function::launch_as`]).
    fn launch(
        &self,
        stream: &Stream,
        partial: u64,
        c: u64,
        (m, n): (usize, usize),
        programmatic: bool,
    ) -> Result<(), CudaError> {
        self.kernel.launch_as(
            stream,
            &[("m", m as i64), ("n", n as i64)],
            &[("c", c), (PARTIAL, partial)],
            programmatic,
        )
    }
}

/// The registry's `gemm_bf16` program with block `tile`, B stored as `b_layout` and row tiles in
/// clusters of `cluster`, configured for the H100 (ring stages that fit its shared memory) and
/// lowered for sm_90a.
pub fn lower_tile(tile: HopperTile, b_layout: BLayout, cluster: u32) -> Result<Lowered, CudaError> {
    lower_tile_loads(tile, b_layout, 1, SlotFill::Tma, cluster)
}

/// [`lower_tile`] with K cut in `split_k` slices (`kittens_kernels::gemm::split_k`) and A and
/// B loaded as `loads` says (`GemmConfig::loads`).
pub fn lower_tile_loads(
    tile: HopperTile,
    b_layout: BLayout,
    split_k: u32,
    loads: SlotFill,
    cluster: u32,
) -> Result<Lowered, CudaError> {
    let gpu = kittens_hw::Target::Sm90a
        .gpu()
        .ok_or_else(|| invalid("no sm_90a GPU in the catalog"))?;
    let mut cfg = GemmConfig {
        b_layout,
        split_k,
        loads,
        cluster,
        last_block_reduces: split_k > 1 && fixup_knob()?,
        ..tile.config(gpu)
    };
    // For measurement: `KITTENS_GEMM_WINDOW` rows per group of the grid order (8 by default) and
    // `KITTENS_GEMM_STAGES` ring stages (the C staging slab shrinks to fit them; the program refuses
    // counts outside 2..=8).
    if let Some(w) = measurement_knob("KITTENS_GEMM_WINDOW")? {
        if w == 0 {
            return Err(invalid(
                "KITTENS_GEMM_WINDOW = 0: at least one row per group",
            ));
        }
        cfg.remap = kittens_ir::GridOrder::GroupM { window: w };
    }
    if let Some(s) = measurement_knob("KITTENS_GEMM_STAGES")? {
        cfg.stages = s;
    }
    let k = kittens_kernels::gemm::build(&cfg)
        .map_err(|e| invalid(format!("gemm_bf16 {tile}: {e}")))?;
    kittens_codegen::lower(&k, kittens_hw::Target::Sm90a)
        .map_err(|e| invalid(format!("lowering gemm_bf16 {tile}: {e}")))
}

/// The number a measurement environment variable holds, `None` where it is unset; an error naming it
/// where it holds anything else.
fn measurement_knob(name: &str) -> Result<Option<u32>, CudaError> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| invalid(format!("{name} = {v:?}: expected a whole number"))),
    }
}

/// The three tensor maps of a lowered GEMM (A, B, then C for the TMA-store epilogue, 128-byte
/// swizzle), matched to the globals `a`, `b`, `c` by name (`gemm_fp8`'s C is its fifth tensor, after
/// the scales), checked: anything else is a lowering these launchers do not know. A split-K GEMM
/// stores its partials without TMA: its two maps are A's and B's, and the third returned is a 64 × 64
/// box in the 128-byte swizzle that its launches encode over C and the kernel never reads.
pub(crate) fn gemm_maps(l: &Lowered) -> Result<[TmaMap; 3], CudaError> {
    let maps = l.tma_maps();
    let named = |m: &TmaMap, name: &str| {
        l.ir.globals.get(m.global as usize).map(|g| g.name.as_str()) == Some(name)
    };
    // (A split-K GEMM reduced by its last blocks stores C through its map.)
    let split = l.ir.globals.iter().any(|g| g.name == PARTIAL)
        && !l.ir.globals.iter().any(|g| g.name == "c");
    // Operands filled by `cp.async` have no map: a 64 × 64 box over them stands in, encoded by the
    // launches like the others and never passed to the kernel (`GemmArgs` passes the lowering's).
    let global = |name: &str| l.ir.globals.iter().position(|g| g.name == name);
    let cp = |name: &str| {
        l.ir.globals
            .iter()
            .any(|g| g.name == name && g.slot_fill == SlotFill::CpAsync)
    };
    // (A split-K GEMM has no `c` global: its stand-in names A's, which nothing reads.)
    let stand_in = |name: &str| {
        Some(TmaMap {
            global: global(name).unwrap_or(0) as u32,
            box_rows: 64,
            box_cols: 64,
            swizzle_bytes: 128,
            row_dim: 0,
            col_dim: 1,
        })
    };
    let mut it = maps.iter().copied();
    let mut next = |name: &str, absent: bool| -> Option<TmaMap> {
        if absent {
            stand_in(name)
        } else {
            it.next()
                // C's boxes are 64-byte rows where the store goes box by box (the lowering's
                // `fit_slab`); the operands' rows are 128 bytes.
                .filter(|m| named(m, name) && (m.swizzle_bytes == 128 || name == "c"))
        }
    };
    let (a, b, c) = (next("a", cp("a")), next("b", cp("b")), next("c", split));
    match (a, b, c, it.next()) {
        (Some(a), Some(b), Some(c), None) => Ok([a, b, c]),
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
    /// Compiles (NVRTC, cached) and loads the lowered `gemm_bf16` of block `tile` with K cut in
    /// `split_k` slices and A and B loaded as `loads` on `dev`.
    pub fn prepare(
        dev: &Rc<Device>,
        tile: HopperTile,
        b_layout: BLayout,
        split_k: u32,
        loads: SlotFill,
        cluster: u32,
    ) -> Result<GemmKernel, CudaError> {
        Self::load(
            dev,
            lower_tile_loads(tile, b_layout, split_k, loads, cluster)?,
            tile,
            b_layout,
        )
    }

    /// Compiles (NVRTC, cached) and loads a lowered GEMM (`gemm_bf16` or `gemm_fp8`) whose block of C
    /// is `tile` and whose B is stored as `b_layout`.
    pub fn load(
        dev: &Rc<Device>,
        l: Lowered,
        tile: HopperTile,
        b_layout: BLayout,
    ) -> Result<GemmKernel, CudaError> {
        let shared = l.dynamic_shared_bytes();
        let image = compile(&l.source, &l.entry, l.target.name(), shared)?;
        let module = dev.load_module(&image.cubin)?;
        let function = module.function(&l.entry, shared)?.with_cluster(l.cluster);
        let resident = function.resident_blocks(dev.multiprocessors, l.threads)?;
        let maps = gemm_maps(&l)?;
        let stages = l.ir.shared.first().map_or(0, |s| s.count);
        let fixup =
            l.ir.globals
                .iter()
                .any(|g| g.name == COUNTERS)
                .then(|| FixupScratch {
                    partial: std::cell::RefCell::new(None),
                    counters: std::cell::RefCell::new(None),
                    dev: dev.clone(),
                });
        let split = match l.ir.globals.iter().find(|g| g.name == PARTIAL) {
            Some(_) if fixup.is_some() => None,
            Some(g) => {
                let s = g
                    .dims
                    .first()
                    .and_then(|d| {
                        d.eval(&kittens_ir::Env {
                            params: &[],
                            vars: &[],
                            block: &[],
                            wave: 0,
                        })
                    })
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| invalid("split-K partials without a constant plane count"))?;
                Some(SplitReduce::load(dev, s)?)
            }
            None => None,
        };
        Ok(GemmKernel {
            function,
            name: l.entry.clone(),
            tile,
            b_layout,
            stages,
            maps,
            compile: image.report,
            resident,
            loads: if l
                .ir
                .globals
                .iter()
                .any(|g| g.slot_fill == SlotFill::CpAsync)
            {
                SlotFill::CpAsync
            } else {
                SlotFill::Tma
            },
            lowered: l,
            split,
            fixup,
        })
    }

    /// Problem sizes the kernel handles: TMA loads A, B and stores C, so row pitches are 16-byte
    /// multiples. For fp8 operands (1 byte) K must be a multiple of 16. (The bf16 launchers lift this
    /// with padded copies, `super::gemm_pad`; the fp8 benchmark refuses such shapes.)
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

    /// One launch computing C = A·Bᵀ (A `m × k`, B `n × k`, C `m × n`), or C = A·B with B `k × n`
    /// ([`BLayout::Kn`]), each operand addressable by TMA in place ([`Mat::tma_ok`]; `super::gemm_pad`
    /// makes copies that are).
    /// `pdl`: which launches go as programmatic dependents of the kernel before them
    /// ([`Function::launch_as`]: their launch and setup overlap its end).
    pub fn launch(
        &self,
        stream: &Stream,
        a: &Mat,
        b: &Mat,
        c: &Mat,
        pdl: Pdl,
    ) -> Result<(), CudaError> {
        let [ta, tb, tc] = self.maps;
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
        // `cp.async` reads the operands at the kernel's `k` (or `n`) pitch: dense rows only, 16-byte
        // aligned as TMA's ([`Mat::tma_ok`], which `mat_map` checks).
        if self.loads == SlotFill::CpAsync && (a.pitch != a.cols || b.pitch != b.cols) {
            return Err(invalid(format!(
                "the cp.async GEMM reads dense A and B: pitches {} and {} for {} and {} columns",
                a.pitch, b.pitch, a.cols, b.cols
            )));
        }
        let maps = [mat_map(a, &ta)?, mat_map(b, &tb)?, mat_map(c, &tc)?];
        let ptrs = [("a", a.ptr), ("b", b.ptr), ("c", c.ptr)];
        self.launch_named(stream, maps, &ptrs, [m, n, k], c.ptr, pdl)
    }

    /// One launch of `gemm_fp8` (C = (sa·A)·(sb·B)ᵀ, B `n × k`): `maps` are A's and B's fp8 tensor maps
    /// (boxes of `self.maps[0]`, `self.maps[1]`), `c` C's bf16 map (boxes of `self.maps[2]`) and
    /// buffer, `scales` the f32 scale tensors `scale_a`, `scale_b` (one element each for per-tensor
    /// scales).
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
        let c_ptr = c.1.ptr();
        self.launch_named(
            stream,
            [maps.0.map, maps.1.map, c.0.map],
            &ptrs,
            [m, n, k],
            c_ptr,
            Pdl::default(),
        )
    }

    /// One launch with A's, B's and C's tensor maps and the device pointers by tensor name
    /// ([`GemmArgs::named`]); with split-K the partials go to the scratch and the reduction writes
    /// them into the dense `m × n` C at `c`.
    fn launch_named(
        &self,
        stream: &Stream,
        maps: [cu::CUtensorMap; 3],
        ptrs: &[(&str, u64)],
        [m, n, k]: [usize; 3],
        c: u64,
        pdl: Pdl,
    ) -> Result<(), CudaError> {
        let l = &self.lowered;
        let partial = match &self.split {
            Some(s) => Some(s.scratch(m, n)?),
            None => None,
        };
        let mut named = ptrs.to_vec();
        if let Some(p) = partial {
            named.push((PARTIAL, p));
        }
        if let Some(f) = &self.fixup {
            let bytes = |g: &kittens_ir::GlobalDecl| -> Result<usize, CudaError> {
                let params = [m as i64, n as i64, k as i64];
                let elems = g
                    .dims
                    .iter()
                    .map(|d| {
                        d.eval(&kittens_ir::Env {
                            params: &params,
                            vars: &[],
                            block: &[],
                            wave: 0,
                        })
                    })
                    .try_fold(1usize, |acc, v| {
                        v.and_then(|v| usize::try_from(v).ok())
                            .and_then(|v| acc.checked_mul(v))
                    })
                    .ok_or_else(|| invalid(format!("extent of `{}`", g.name)))?;
                elems
                    .checked_mul(4)
                    .ok_or_else(|| invalid(format!("`{}` overflows", g.name)))
            };
            let find = |name: &str| {
                l.ir.globals
                    .iter()
                    .find(|g| g.name == name)
                    .ok_or_else(|| invalid(format!("lowered GEMM without `{name}`")))
            };
            let tiles = bytes(find(COUNTERS)?)? / 4;
            let (p, c) = f.buffers(bytes(find(PARTIAL)?)?, tiles)?;
            named.push((PARTIAL, p));
            named.push((COUNTERS, c));
        }
        let mut args = GemmArgs::named(l, maps, &named, [m, n, k])?;
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
            self.function.launch_as(
                (grid, 1, 1),
                (l.threads, 1, 1),
                stream,
                &mut params,
                pdl.gemm,
            )?
        };
        // For measurement: `KITTENS_GEMM_SKIP_REDUCE=1` leaves the split-K reduction out (C is not
        // written, so the row's check fails): the time of the GEMM's launch alone, the most a
        // reduction done inside it (by the last block to finish each tile) could leave.
        if measurement_knob("KITTENS_GEMM_SKIP_REDUCE")? == Some(1) {
            return Ok(());
        }
        match (&self.split, partial) {
            (Some(s), Some(p)) => s.launch(stream, p, c, (m, n), pdl.reduce),
            _ => Ok(()),
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
    /// The device pointers given by tensor name (`gemm_fp8` adds `scale_a`, `scale_b`); the maps are
    /// A's, B's and C's.
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
