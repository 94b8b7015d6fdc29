//! The GEMM benchmark behind `kittens bench gemm_bf16`: the Hopper `gemm_bf16` against cuBLAS in the
//! same run, at any list of shapes (`super::bench_shapes`). Each shape runs the block the shape-aware
//! configuration chooses (`kittens_kernels::gemm::shapes::choose`), or every block of a given list
//! (to fit and check that choice). Correctness: our C against cuBLAS's C over every element, and both
//! against an f64 dot product at a few hundred random entries, judged by the test rule relative to
//! cuBLAS's own error (`kittens_kernels::reference::check_rule` with its spot-check floor); the output
//! is poisoned with NaN first, so unwritten elements fail. Each shape and block is one row: a row that
//! fails (or cannot run: too large for the memory there is) says so and the run goes on. Host and
//! device memory are checked before anything is allocated. Shapes whose rows TMA cannot address (N or
//! K no multiple of 8) run through padded copies (`super::gemm_pad`), timed with the kernel and
//! reported on their own.
//! Timing (docs/performance.md, "Method"; `super::bench_time`): CUDA events around each launch, warm-up
//! first, the median of as many launches as fit a time budget per shape, ours and cuBLAS interleaved
//! launch by launch, rotating among enough input copies that their total exceeds the L2 several times
//! over, so the L2 cannot serve the inputs.

use std::cell::RefCell;
use std::rc::Rc;

use kittens_kernels::gemm::shapes::{self, HopperTile};
use kittens_kernels::gemm::split_k;
use kittens_kernels::gemm::BLayout;
use kittens_kernels::reference::{check_rule, SPOT_RULE_FLOOR};

pub(crate) use super::bench_check::median;
pub use super::bench_check::{bf16_to_f32, compare, f32_to_bf16, random_bf16, Comparison};
use super::bench_check::{report_mismatches, spot_check};
use super::bench_inputs::{copies_that_fit, make_inputs};
pub use super::bench_report::{
    summarise, GemmBenchReport, GemmBenchRow, KernelInfo, RowStatus, Summary,
};
use super::bench_shapes::{Shape, ShapeName};
pub use super::bench_time::Timing;
use super::bench_time::{iterations, time_launches, Launch};
use super::cublas::Cublas;
use super::device_call::DeviceCall;
use super::dispatch::registry_stages;
use super::driver::{Device, DeviceBuffer, Event, Stream};
use super::gemm_kernel::{GemmKernel, Pdl};
use super::gemm_pad::{self, CopyKernel, Mat, OperandLoads, PadPlan};
use super::limits::gemm_abt_dims;
use super::{invalid, CudaError};
use kittens_ir::SlotFill;
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};

/// Which blocks each shape runs.
#[derive(Clone, Debug, PartialEq)]
pub enum TileChoice {
    /// The one the shape-aware configuration chooses.
    Auto,
    /// Every block of the list (candidates for fitting the choice); the row of the chosen one is
    /// marked.
    Each(Vec<HopperTile>),
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct GemmBenchOptions {
    /// Timed problems (M, N, K).
    pub shapes: Vec<Shape>,
    pub tiles: TileChoice,
    /// How B is stored: `N × K` (`C = A·Bᵀ`, cuBLAS "TN") or `K × N` (`C = A·B`, cuBLAS "NN").
    pub b_layout: BLayout,
    pub warmup: usize,
    /// Most timed launches per implementation and shape.
    pub iters: usize,
    /// Fewest timed launches per implementation and shape.
    pub min_iters: usize,
    /// Timed milliseconds per implementation and shape: the launches are as many as fit, within
    /// `min_iters..=iters`, estimated from one cuBLAS launch.
    pub budget_ms: f64,
    pub spot_checks: usize,
    pub seed: u64,
    /// Input copies are added until A and B together span at least this many L2s.
    pub l2_multiple: u64,
    /// Shapes (M, N, K) checked for correctness only, not timed: partial tiles at every edge.
    pub checks: Vec<Shape>,
    pub timing: Timing,
    /// K slices per shape: empty lets `split_k::choose` decide (1 where C's blocks fill the SMs);
    /// a list times each of its counts (a row per block and count) where the shape allows a split
    /// (C needs no padded copy), so one run compares splits beside the vendor library.
    pub split_k: Vec<u32>,
    /// How A and B are read, each entry a row per block (`auto`: B off 128-byte lines in place by
    /// clusters of two, [`OperandLoads::resolve`]); e.g. `auto` and `tma-copy` time two ways in one run.
    pub loads: Vec<OperandLoads>,
    /// Launch the GEMM after an operand copy and the split-K reduction after the GEMM programmatically
    /// (their launch and setup overlap the end of the kernel before,
    /// [`super::driver::Function::launch_as`]); `false` for measuring what that buys.
    pub programmatic: bool,
    /// Row tiles per thread-block cluster, a row per entry and block (`GemmConfig::cluster`: 2
    /// multicasts each B box to a pair of blocks); `None`: as the loads plan it
    /// ([`OperandLoads::resolve`]). Split-K blocks run without.
    pub clusters: Option<Vec<u32>>,
}

impl Default for GemmBenchOptions {
    fn default() -> Self {
        GemmBenchOptions {
            shapes: vec![(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)],
            tiles: TileChoice::Auto,
            b_layout: BLayout::Nk,
            warmup: 10,
            iters: 100,
            min_iters: 5,
            budget_ms: 300.0,
            spot_checks: 256,
            seed: 0x006b_6974_7465_6e73,
            l2_multiple: 4,
            checks: vec![
                (1000, 1032, 520),
                (128, 256, 64),
                (4160, 8184, 1032),
                (3000, 1000, 777),
                (1, 1, 1),
                (77, 99, 13),
            ],
            timing: Timing::Interleaved,
            split_k: Vec::new(),
            loads: vec![OperandLoads::Auto],
            programmatic: true,
            clusters: None,
        }
    }
}

/// Our C against cuBLAS's over all elements: two correct bf16 results differ by at most a rounding step
/// (2⁻⁸ relative) on some elements, far below this.
const TOLERANCE: f64 = 1e-2;

/// Runs every shape of `opts` on the device, returns the report.
pub fn run_gemm_bench(opts: &GemmBenchOptions) -> Result<GemmBenchReport, CudaError> {
    let dev = open_hopper()?;
    let gpu = kittens_hw::Target::Sm90a
        .gpu()
        .ok_or_else(|| CudaError::Invalid("no sm_90a GPU in the catalog".into()))?;
    let stream = Stream::new()?;
    let cublas = Cublas::new(&stream)?;
    let run = Runner {
        bench: BenchRun {
            dev: &dev,
            stream: &stream,
            opts,
        },
        gpu,
        cublas: &cublas,
        kernels: RefCell::new(Vec::new()),
        copier: RefCell::new(None),
    };
    let total = opts.shapes.len();
    let mut rows = Vec::new();
    for (i, &shape) in opts.shapes.iter().enumerate() {
        let got = run.shape_rows(shape, opts.seed.wrapping_add(i as u64), true);
        for row in &got {
            eprintln!(
                "  [{}/{total}] {:>18} {:>7}: ours {:7.1} TFLOP/s, cuBLAS {:7.1}, ratio {:.3}, err vs cuBLAS {:.2e}, {} launches, {}{}",
                i + 1,
                ShapeName((row.m, row.n, row.k)).to_string(),
                row.tile.as_deref().unwrap_or("-"),
                row.ours_tflops,
                row.cublas_tflops,
                row.ratio,
                row.rel_err_vs_cublas,
                row.iters,
                row.verdict(),
                if row.chosen { " (chosen)" } else { "" }
            );
        }
        rows.extend(got);
    }
    let mut checks = Vec::new();
    for (i, &shape) in opts.checks.iter().enumerate() {
        let got = run.shape_rows(shape, opts.seed ^ (i as u64 + 77), false);
        for row in &got {
            eprintln!(
                "  check {} {}: err vs cuBLAS {:.2e}, vs f64 {:.2e} (cuBLAS {:.2e}), padded {:?}, {}",
                ShapeName((row.m, row.n, row.k)),
                row.tile.as_deref().unwrap_or("-"),
                row.rel_err_vs_cublas,
                row.spot_err_ours,
                row.spot_err_cublas,
                row.padded,
                row.verdict()
            );
        }
        checks.extend(got);
    }
    let kernels = run
        .kernels
        .borrow()
        .iter()
        .filter_map(|(t, k)| k.as_ref().ok().map(|k| (t, k)))
        .map(|(t, k)| KernelInfo {
            tile: block_name(*t),
            entry: k.name.clone(),
            stages: k.stages,
            compile: k.compile.clone(),
        })
        .collect();
    let summary = summarise(&rows, &checks);
    Ok(GemmBenchReport {
        device: dev.name.clone(),
        compute_capability: dev.compute_capability,
        multiprocessors: dev.multiprocessors,
        l2_bytes: dev.l2_bytes,
        driver_version: dev.driver_version,
        cublas: cublas.library.clone(),
        b_layout: opts.b_layout,
        kernels,
        warmup: opts.warmup,
        budget_ms: opts.budget_ms,
        timing: opts.timing,
        rows,
        checks,
        summary,
    })
}

/// Device 0, which must be a Hopper GPU (compute capability 9.0: the sm_90a kernels).
pub(super) fn open_hopper() -> Result<Rc<Device>, CudaError> {
    let dev = Device::open(0)?;
    if dev.compute_capability != (9, 0) {
        return Err(CudaError::Invalid(format!(
            "{} is compute capability {:?}; the Hopper kernel needs 9.0 (sm_90a)",
            dev.name, dev.compute_capability
        )));
    }
    Ok(dev)
}

/// What every row of a GEMM benchmark run (this one's and `super::bench_fp8`'s) shares: the device,
/// the stream and the run's options.
pub(super) struct BenchRun<'a> {
    pub dev: &'a Rc<Device>,
    pub stream: &'a Stream,
    pub opts: &'a GemmBenchOptions,
}

impl BenchRun<'_> {
    /// The registry's launches of `kernel` at `p` prepared on this run's device (the kernels
    /// compiled and loaded once per configuration, `super::dispatch`).
    pub fn registry_call(&self, kernel: &str, p: &GemmProblem) -> Result<DeviceCall, CudaError> {
        let entry = kittens_kernels::registry::by_name(kernel).map_err(invalid)?;
        let stages = registry_stages(entry, p).map_err(invalid)?;
        DeviceCall::new(self.dev, &stages)
    }
}

/// A block's kernel, or why it could not be compiled and loaded.
type Loaded = Result<Rc<GemmKernel>, CudaError>;

/// The devices and options every row of a run shares, and the kernels compiled so far.
struct Runner<'a> {
    bench: BenchRun<'a>,
    gpu: &'static kittens_hw::Gpu,
    cublas: &'a Cublas,
    kernels: RefCell<Vec<(Block, Loaded)>>,
    copier: RefCell<Option<Rc<CopyKernel>>>,
}

/// A block shape, its K slices, how it fills slots from A and B and its cluster: what one compiled
/// kernel is.
type Block = (HopperTile, u32, SlotFill, u32);

/// `64x128`, `64x128/k4` with split-K, `64x128/cp` with `cp.async` loads, `128x256/c2` in clusters of
/// two.
fn block_name((t, s, fill, cluster): Block) -> String {
    let mut name = t.to_string();
    if s > 1 {
        name.push_str(&format!("/k{s}"));
    }
    if fill == SlotFill::CpAsync {
        name.push_str("/cp");
    }
    if cluster > 1 {
        name.push_str(&format!("/c{cluster}"));
    }
    name
}

impl Runner<'_> {
    /// The kernel of block `tile` with `split` K slices, compiled and loaded on first use (a failure
    /// is kept and reported in every row that needs it).
    fn kernel(&self, block: Block) -> Result<Rc<GemmKernel>, CudaError> {
        if let Some((_, k)) = self.kernels.borrow().iter().find(|(b, _)| *b == block) {
            return k.clone();
        }
        let (tile, split, fill, cluster) = block;
        let k = GemmKernel::prepare(
            self.bench.dev,
            tile,
            self.bench.opts.b_layout,
            split,
            fill,
            cluster,
        )
        .map(Rc::new);
        if let Ok(k) = &k {
            eprintln!(
                "  {} ({}, {} stages): {} registers, {} spills, persistent grid of {} blocks",
                k.name,
                block_name(block),
                k.stages,
                k.compile.registers,
                k.compile.spill_stores + k.compile.spill_loads,
                k.resident
            );
        }
        self.kernels.borrow_mut().push((block, k.clone()));
        k
    }

    /// The registry's launches of `gemm_bf16` at `p` prepared on this run's device (the kernels
    /// compiled and loaded once per configuration, `super::dispatch`).
    fn registry_call(&self, p: &GemmProblem) -> Result<Rc<Ours>, CudaError> {
        let call = self.bench.registry_call("gemm_bf16", p)?;
        for k in call.kernels() {
            eprintln!(
                "  {} (registry): {} registers, {} spills",
                k.kernel,
                k.compile.registers,
                k.compile.spill_stores + k.compile.spill_loads
            );
        }
        Ok(Rc::new(Ours::Registry(call)))
    }

    /// The catalog model of this run's device (`kittens_hw::gpu::for_device`: an H200 is not an
    /// H100), or the target's where the catalog lacks it: what the split-K rule is fitted to.
    fn model(&self) -> kittens_hw::Gpu {
        let mut p = GemmProblem::new(GemmKind::Bf16, 1, 1, 1);
        p.run.gpu = kittens_hw::gpu::for_device(&self.bench.dev.name);
        p.run.device_model(self.gpu)
    }

    /// The padded copies' kernel, compiled and loaded on first use.
    fn copy_kernel(&self) -> Result<Rc<CopyKernel>, CudaError> {
        if let Some(c) = self.copier.borrow().as_ref() {
            return Ok(c.clone());
        }
        let c = Rc::new(CopyKernel::load(self.bench.dev)?);
        *self.copier.borrow_mut() = Some(c.clone());
        Ok(c)
    }

    /// K slices for `tile` at `shape`: the option's counts, or `split_k::choose`'s (bf16, K step
    /// 64); 1 where C goes through a padded copy (the reduction writes a dense C).
    fn splits_for(&self, (m, n, k): Shape, tile: HopperTile) -> Vec<u32> {
        if !(n * 2).is_multiple_of(16) {
            return vec![1];
        }
        if !self.bench.opts.split_k.is_empty() {
            return self.bench.opts.split_k.clone();
        }
        vec![split_k::choose(
            &self.model(),
            self.bench.dev.multiprocessors,
            (m as u64, n as u64, k as u64),
            (tile.rows, tile.cols),
            64,
            2,
        )]
    }

    /// The registry's configuration of `gemm_bf16` at `shape` on this device, where this run
    /// measures what every caller runs (the package's `kittens.matmul`, `kittens run --backend
    /// cuda`): no measurement option set and operands TMA reads in place. `None`: the run measures
    /// blocks, loads, clusters or splits of its own, or the shape needs padded copies, through this
    /// benchmark's own launcher (`super::gemm_kernel`).
    fn registry_problem(&self, (m, n, k): Shape) -> Option<GemmProblem> {
        let o = self.bench.opts;
        let measuring = o.tiles != TileChoice::Auto
            || o.loads != [OperandLoads::Auto]
            || o.clusters.is_some()
            || !o.split_k.is_empty()
            || !o.programmatic;
        let (a, b, c) = self.mats((m, n, k), [0, 0, 0]);
        if measuring || PadPlan::of(&a, &b, &c).any() {
            return None;
        }
        let mut p = GemmProblem::new(GemmKind::Bf16, m, n, k);
        p.gemm.b_layout = o.b_layout;
        p.run.sms = Some(self.bench.dev.multiprocessors);
        p.run.gpu = kittens_hw::gpu::for_device(&self.bench.dev.name);
        Some(p)
    }

    /// The rows of one shape: one per block it runs; a shape that cannot run gives error rows.
    fn shape_rows(&self, shape: Shape, seed: u64, timed: bool) -> Vec<GemmBenchRow> {
        let (m, n, k) = shape;
        let sms = self.bench.dev.multiprocessors;
        let chosen = shapes::choose(self.gpu, sms, m as u64, n as u64, k as u64);
        if let Some(p) = self.registry_problem(shape) {
            let cfg = match p.config(kittens_hw::Target::Sm90a) {
                Ok(c) => c,
                Err(e) => return vec![GemmBenchRow::error(shape, &invalid(e))],
            };
            let tile = HopperTile {
                rows: cfg.block_rows,
                cols: cfg.block,
            };
            let block = (tile, cfg.split_k, SlotFill::Tma, cfg.cluster);
            let mut row = GemmBenchRow::error(shape, &CudaError::Invalid(String::new()));
            row.tile = Some(format!("{} (registry)", block_name(block)));
            row.split_k = cfg.split_k;
            row.chosen = tile == chosen;
            row.model_us =
                shapes::estimate_us(self.gpu, sms, m as u64, n as u64, k as u64, tile).us;
            let blocks = [(block, PadPlan::default())];
            return self
                .attempt(shape, seed, timed, &blocks, vec![row.clone()])
                .unwrap_or_else(|e| {
                    vec![GemmBenchRow {
                        error: Some(e.to_string()),
                        ..row
                    }]
                });
        }
        let tiles = match &self.bench.opts.tiles {
            TileChoice::Auto => vec![chosen],
            TileChoice::Each(list) => list.clone(),
        };
        let (a0, b0, c0) = self.mats(shape, [0, 0, 0]);
        let base = |b @ (t, split, _, _): Block| {
            let mut r = GemmBenchRow::error(shape, &CudaError::Invalid(String::new()));
            r.tile = Some(block_name(b));
            r.split_k = split;
            r.chosen = t == chosen;
            r.model_us = shapes::estimate_us(self.gpu, sms, m as u64, n as u64, k as u64, t).us;
            r
        };
        // One row per block and way of loading (the same kernel and copies once).
        let (mut blocks, mut rows, mut refused) = (Vec::new(), Vec::new(), Vec::new());
        for &t in &tiles {
            // No `--clusters`: the cluster the loads plan (`PadPlan::auto`).
            let clusters: Vec<Option<u32>> = match &self.bench.opts.clusters {
                Some(list) => list.iter().map(|&c| Some(c)).collect(),
                None => vec![None],
            };
            for (&loads, &cluster) in self
                .bench
                .opts
                .loads
                .iter()
                .flat_map(|l| clusters.iter().map(move |c| (l, c)))
            {
                match loads.resolve(&a0, &b0, &c0, (m, n), t.rows) {
                    Ok((fill, plan, planned)) => {
                        for split in self.splits_for(shape, t) {
                            let cluster = if split > 1 {
                                1
                            } else {
                                cluster.unwrap_or(planned)
                            };
                            let b = (t, split, fill, cluster);
                            if !blocks.iter().any(|&(x, p)| x == b && p == plan) {
                                blocks.push((b, plan));
                                let mut row = base(b);
                                if let (Some(name), Some(copies)) = (&mut row.tile, loads.copies())
                                {
                                    name.push_str(copies);
                                }
                                rows.push(row);
                            }
                        }
                    }
                    Err(e) => refused.push(GemmBenchRow {
                        error: Some(e.to_string()),
                        ..base((t, 1, SlotFill::CpAsync, 1))
                    }),
                }
            }
        }
        let mut out = match self.attempt(shape, seed, timed, &blocks, rows.clone()) {
            Ok(rows) => rows,
            Err(e) => rows
                .into_iter()
                .map(|r| GemmBenchRow {
                    error: Some(e.to_string()),
                    ..r
                })
                .collect(),
        };
        out.extend(refused);
        out
    }

    /// A, B and C of `shape` at the pointers given, dense (B as `b_layout` stores it).
    fn mats(&self, (m, n, k): Shape, [a, b, c]: [u64; 3]) -> (Mat, Mat, Mat) {
        let b = if self.bench.opts.b_layout == BLayout::Kn {
            Mat::dense(b, k, n)
        } else {
            Mat::dense(b, n, k)
        };
        (Mat::dense(a, m, k), b, Mat::dense(c, m, n))
    }
}

impl Runner<'_> {
    /// Checks (and, when `timed`, measures) one shape with every block of `tiles`, filling `rows`
    /// (one per block, in order).
    fn attempt(
        &self,
        shape: Shape,
        seed: u64,
        timed: bool,
        tiles: &[(Block, PadPlan)],
        mut rows: Vec<GemmBenchRow>,
    ) -> Result<Vec<GemmBenchRow>, CudaError> {
        let (m, n, k) = shape;
        let (dev, stream, opts) = (self.bench.dev, self.bench.stream, self.bench.opts);
        let kn = opts.b_layout == BLayout::Kn;
        let b_mat = |ptr| self.mats(shape, [0, ptr, 0]).1;
        let cublas = |a: &DeviceBuffer, b: &DeviceBuffer, c: &mut DeviceBuffer| {
            if kn {
                self.cublas.gemm_bf16_ab(a, b, c, m, n, k)
            } else {
                self.cublas.gemm_bf16_abt(a, b, c, m, n, k)
            }
        };
        // Device allocations are 256-byte aligned: only row pitches decide what TMA can address.
        let (a0, b0, c0) = self.mats(shape, [0, 0, 0]);
        // Scratch for every block's copies; each block makes its own plan's.
        let plans: Vec<PadPlan> = tiles.iter().map(|&(_, p)| p).collect();
        let plan = plans.iter().fold(PadPlan::default(), |u, p| PadPlan {
            a: u.a || p.a,
            b: u.b || p.b,
            c: u.c || p.c,
        });
        let pad_bytes = [(plan.a, a0), (plan.b, b0), (plan.c, c0)]
            .iter()
            .filter(|(need, _)| *need)
            .try_fold(0u64, |acc, (_, mat)| {
                Ok::<u64, CudaError>(acc.saturating_add(mat.padded_bytes()? as u64))
            })?;
        let l2 = self.bench.opts.l2_multiple;
        let copies = copies_that_fit(dev, "GEMM", shape, timed, l2, pad_bytes)?;
        let inp = make_inputs(dev, shape, seed, copies, random_bf16)?;
        let (mut c_ours, mut c_ref) = (dev.alloc(m * n * 2)?, dev.alloc(m * n * 2)?);
        // The launchers take the sizes as 32-bit integers: check them, and the buffers, first.
        gemm_abt_dims(
            (m, n, k),
            inp.a[0].bytes(),
            inp.b[0].bytes(),
            c_ours.bytes(),
        )?;
        let scratch = |need: bool, mat: &Mat| -> Result<Option<DeviceBuffer>, CudaError> {
            need.then(|| dev.alloc(mat.padded_bytes()?)).transpose()
        };
        let (a_pad, b_pad, c_pad) = (
            scratch(plan.a, &a0)?,
            scratch(plan.b, &b0)?,
            scratch(plan.c, &c0)?,
        );
        let pads = (
            a_pad.as_ref().map(|p| p.ptr()),
            b_pad.as_ref().map(|p| p.ptr()),
            c_pad.as_ref().map(|p| p.ptr()),
        );
        let c_dense = Mat::dense(c_ours.ptr(), m, n);
        // The padded copies run as a kernel (`gemm_pad::CopyKernel`), loaded once per run.
        let copy_kernel = if plan.any() {
            Some(self.copy_kernel()?)
        } else {
            None
        };
        // Only ever called below on this run's live buffers: the inputs, C and the scratch
        // matrices sized by `Mat::padded_bytes`, never overlapping.
        let copier = |dst: &Mat, src: &Mat| -> Result<(), CudaError> {
            match &copy_kernel {
                // SAFETY: see above.
                Some(ck) => unsafe { ck.copy(dst, src, stream) },
                // SAFETY: see above.
                None => unsafe { gemm_pad::copy(dst, src, stream.raw()) },
            }
        };
        // The operands the kernel reads and writes for input copy `s`, padded copies made first
        // (`kernel` false: the copies only, for their own timing).
        let ours = |kernel: Option<&Ours>, s: usize, p: PadPlan| -> Result<(), CudaError> {
            let pads = (
                pads.0.filter(|_| p.a),
                pads.1.filter(|_| p.b),
                pads.2.filter(|_| p.c),
            );
            let put = |pad: Option<u64>, src: Mat| -> Result<Mat, CudaError> {
                match pad {
                    Some(p) => {
                        let dst = src.padded_at(p);
                        copier(&dst, &src)?;
                        Ok(dst)
                    }
                    None => Ok(src),
                }
            };
            let a = put(pads.0, Mat::dense(inp.a[s].ptr(), m, k))?;
            let b = put(pads.1, b_mat(inp.b[s].ptr()))?;
            // The copy of B (or A) right before: the GEMM's launch and setup overlap its end.
            let after_copy = pads.0.is_some() || pads.1.is_some();
            let c = pads.2.map_or(c_dense, |p| c_dense.padded_at(p));
            match kernel {
                Some(Ours::Launcher(kern)) => {
                    let pdl = Pdl {
                        gemm: after_copy && opts.programmatic,
                        reduce: opts.programmatic,
                    };
                    kern.launch(stream, &a, &b, &c, pdl)?;
                }
                // SAFETY: input copy `s` and C are live buffers of this run holding the dense
                // operands the call was prepared for (no padded copies on this path), distinct.
                Some(Ours::Registry(call)) => unsafe {
                    call.launch_with(stream, &[("a", a.ptr), ("b", b.ptr), ("c", c.ptr)])?
                },
                None => {}
            }
            if pads.2.is_some() {
                copier(&c_dense, &c)?;
            }
            Ok(())
        };

        // The reference on copy 0, its output poisoned with NaN first.
        c_ref.fill_u16(0x7fc0)?;
        dev.synchronize()?;
        cublas(&inp.a[0], &inp.b[0], &mut c_ref)?;
        stream.synchronize()?;
        let mut reference = vec![0u16; m * n];
        c_ref.download(&mut reference)?;
        let mut out = vec![0u16; m * n];
        let mut kerns: Vec<(usize, Rc<Ours>, PadPlan)> = Vec::new();
        let registry = self.registry_problem(shape);
        for (i, (&(t, plan), row)) in tiles.iter().zip(rows.iter_mut()).enumerate() {
            row.padded = plan;
            let kern = match &registry {
                Some(p) => self.registry_call(p),
                None => self.kernel(t).map(|k| Rc::new(Ours::Launcher(k))),
            };
            let kern = match kern {
                Ok(kern) => kern,
                Err(e) => {
                    row.error = Some(e.to_string());
                    continue;
                }
            };
            c_ours.fill_u16(0x7fc0)?;
            dev.synchronize()?;
            ours(Some(&kern), 0, plan)?;
            stream.synchronize()?;
            c_ours.download(&mut out)?;
            let cmp = compare(&out, &reference);
            if cmp.non_finite > 0 || cmp.rel_frobenius >= TOLERANCE {
                report_mismatches(&out, &reference, n);
            }
            let (so, sc) = spot_check(
                (&inp.a_host, &inp.b_host, kn),
                &out,
                &reference,
                shape,
                opts.spot_checks,
                seed,
            );
            let passed = cmp.non_finite == 0
                && cmp.rel_frobenius < TOLERANCE
                && check_rule(so, sc, SPOT_RULE_FLOOR).passed;
            row.status = if passed {
                RowStatus::Ok
            } else {
                RowStatus::Failed
            };
            row.error = None;
            row.rel_err_vs_cublas = cmp.rel_frobenius;
            row.max_err_vs_cublas = cmp.max_rel;
            row.spot_err_ours = so;
            row.spot_err_cublas = sc;
            row.non_finite = cmp.non_finite;
            row.input_copies = inp.a.len();
            row.passed = passed;
            kerns.push((i, kern, plan));
        }
        if !timed || kerns.is_empty() {
            return Ok(rows);
        }

        // Timing: cuBLAS, each block, and the padded copies alone (if any), rotating input copies.
        let ncopies = inp.a.len();
        let est = {
            let (e0, e1) = (Event::new()?, Event::new()?);
            e0.record(stream)?;
            cublas(&inp.a[0], &inp.b[0], &mut c_ref)?;
            e1.record(stream)?;
            stream.synchronize()?;
            f64::from(e0.elapsed_ms(&e1)?)
        };
        let iters = iterations(est, opts.budget_ms, opts.min_iters, opts.iters);
        let warmup = opts.warmup.min(iters);
        let c_ref = &mut c_ref;
        let cublas = &cublas;
        let mut impls: Vec<BoxedLaunch<'_>> = Vec::new();
        impls.push(Box::new(|i: usize| {
            let s = i % ncopies;
            cublas(&inp.a[s], &inp.b[s], c_ref)
        }));
        for (_, kern, p) in &kerns {
            let (ours, p) = (&ours, *p);
            impls.push(Box::new(move |i: usize| ours(Some(kern), i % ncopies, p)));
        }
        // The copies alone, once per distinct plan that makes any.
        let mut copy_plans: Vec<PadPlan> = Vec::new();
        for (_, _, p) in &kerns {
            if p.any() && !copy_plans.contains(p) {
                copy_plans.push(*p);
            }
        }
        for &p in &copy_plans {
            let ours = &ours;
            impls.push(Box::new(move |i: usize| ours(None, i % ncopies, p)));
        }
        let mut fs: Vec<Launch<'_>> = impls.iter_mut().map(|b| b.as_mut() as Launch<'_>).collect();
        let times = time_launches(stream, warmup, iters, opts.timing, &mut fs)?;
        let flop = 2.0 * m as f64 * n as f64 * k as f64;
        let copies_at = 1 + kerns.len();
        for (j, (i, _, p)) in kerns.iter().enumerate() {
            let pad_ms = copy_plans
                .iter()
                .position(|q| q == p)
                .map_or(f64::NAN, |c| times[copies_at + c]);
            let row = &mut rows[*i];
            row.cublas_ms = times[0];
            row.ours_ms = times[1 + j];
            row.ours_tflops = flop / row.ours_ms * 1e-9;
            row.cublas_tflops = flop / row.cublas_ms * 1e-9;
            row.ratio = row.ours_tflops / row.cublas_tflops;
            row.iters = iters;
            row.pad_ms = pad_ms;
        }
        Ok(rows)
    }
}

/// Our implementation of a row: the registry's prepared call (what callers run), or this
/// benchmark's own launcher of one block, split and way of loading (measurement options).
enum Ours {
    Registry(DeviceCall),
    Launcher(Rc<GemmKernel>),
}

/// An implementation's launch on input copy `i`, owned.
type BoxedLaunch<'a> = Box<dyn FnMut(usize) -> Result<(), CudaError> + 'a>;
