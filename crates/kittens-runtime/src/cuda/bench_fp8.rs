//! The FP8 GEMM benchmark behind `kittens bench gemm_fp8`: the Hopper `gemm_fp8` (e4m3 A and B,
//! per-tensor f32 scales, bf16 C) against cuBLASLt's FP8 GEMM in the same run, same inputs, same
//! scales.
//!
//! Two cuBLASLt configurations are timed beside ours, launch by launch: the default accumulation
//! (partial sums promoted to fp32 registers at intervals: what `torch._scaled_mm` runs unless asked for
//! fast accumulation) is the reference of every ratio; fast accumulation (the tensor core's
//! accumulator throughout) is reported beside it, since our chain of `wgmma`s accumulates that way.
//!
//! Correctness as in the BF16 benchmark (`super::bench`): C poisoned with NaN, ours against cuBLASLt's
//! over every element, and both against an f64 dot product of the fp8-rounded inputs times the scales
//! at a few hundred random entries, judged by the test rule relative to cuBLASLt's own error
//! (`kittens_kernels::reference::check_rule`). The shapes, the timing and the summary are the BF16
//! benchmark's (`super::bench_shapes`, `super::bench_time`: launches fitted to a time budget per
//! shape, estimated from one cuBLASLt launch; the geometric mean of the ratio over the timed shapes).

use std::cell::RefCell;
use std::rc::Rc;

use kittens_hw::dtype::DType;
use kittens_ir::numerics::{from_bits, to_bits, Rounding};
use kittens_kernels::gemm::shapes::HopperTile;
use kittens_kernels::gemm::split_k;
use kittens_kernels::gemm::{BLayout, GemmConfig};
use kittens_kernels::reference::{check_rule, SPOT_RULE_FLOOR};
use serde::Serialize;

use super::bench::{
    open_hopper, summarise, BenchRun, GemmBenchOptions, GemmBenchReport, GemmBenchRow, KernelInfo,
    RowStatus,
};
use super::bench_check::{bf16_to_f32, compare, f32_to_bf16};
use super::bench_inputs::{copies_that_fit, make_inputs, Inputs};
use super::bench_shapes::{Shape, ShapeName};
use super::bench_time::{iterations, time_launches, Launch};
use super::cublaslt::{Accumulation, CublasLt};
use super::device_call::DeviceCall;
use super::driver::{DeviceBuffer, Event, Stream, Swizzle, TensorMap};
use super::gemm_kernel::GemmKernel;
use super::gemm_pad::PadPlan;
use super::{invalid, CudaError};
use kittens_kernels::gemm::problem::{GemmKind, GemmProblem};

/// The per-tensor scales of every run: not powers of two, so a scale applied twice or not at all
/// shows in the error.
pub const SCALES: [f32; 2] = [0.7, 1.3];

/// Correctness-only shapes: partial tiles at every edge, a K with a partial K step (K a multiple of
/// 16: fp8 rows of TMA and cuBLASLt are 16-byte multiples; N of 8: bf16 C rows), K below one K step,
/// an odd M, and a problem smaller than one tile.
pub const CHECKS: [(usize, usize, usize); 5] = [
    (1000, 1032, 528),
    (128, 256, 64),
    (4160, 8184, 1040),
    (1001, 264, 272),
    (77, 40, 16),
];

/// Our C against cuBLASLt's over all elements (both bf16 roundings of nearly the same fp32 sums).
const TOLERANCE: f64 = 1e-2;

/// cuBLASLt with fast accumulation, per timed shape.
#[derive(Clone, Debug, Serialize)]
pub struct FastAccumRow {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub cublaslt_fast_ms: f64,
    pub cublaslt_fast_tflops: f64,
    /// ours / cuBLASLt-with-fast-accumulation throughput.
    pub ratio: f64,
    /// ‖fast − default‖_F / ‖default‖_F: what fast accumulation costs cuBLASLt in accuracy.
    pub rel_err_vs_default: f64,
    /// Elements of C where ours and cuBLASLt-with-fast-accumulation differ in any bit.
    pub differing_from_ours: usize,
    /// Its max |x − ref| / rms(ref) on the spot-checked entries (as `spot_err_cublas`).
    pub spot_err: f64,
}

/// The run: the BF16 benchmark's report (its `cublas` columns are cuBLASLt with the default
/// accumulation) and the fast-accumulation figures.
#[derive(Clone, Debug, Serialize)]
pub struct Fp8BenchReport {
    #[serde(flatten)]
    pub gemm: GemmBenchReport,
    pub scales: [f32; 2],
    pub fast_accum: Vec<FastAccumRow>,
}

/// e4m3 (OCP) bytes of uniform values in [-2, 2), rounded to nearest even, from a xorshift64* stream
/// on all cores.
pub fn random_e4m3(len: usize, seed: u64) -> Vec<u8> {
    super::bench_check::random_fill(len, seed, |u| {
        to_bits(4.0 * u - 2.0, DType::Fp8E4m3, Rounding::Rtne) as u8
    })
}

/// The value of every e4m3 byte.
fn e4m3_table() -> [f64; 256] {
    std::array::from_fn(|b| from_bits(b as u32, DType::Fp8E4m3) as f64)
}

/// Runs every shape of `opts` against cuBLASLt (B `N × K`: `opts.tiles` and `opts.b_layout` are
/// the BF16 benchmark's and do not apply) with our FP8 GEMM as every caller runs it — the registry's
/// launches at the shape (`GemmProblem::config`: 64-row blocks at small M, split-K where C has too
/// few blocks) as one prepared call (`super::dispatch`) — or, with `cfgs` (`GemmConfig::fp8_for_gpu`
/// with other blocks, promotion or grid order, for measurement), this benchmark's own launcher of
/// each configuration (`super::gemm_kernel`), a row per configuration and K slice count
/// (`opts.split_k`) on the same inputs.
pub fn run_fp8_bench(
    cfgs: &[GemmConfig],
    opts: &GemmBenchOptions,
) -> Result<Fp8BenchReport, CudaError> {
    if opts.b_layout != BLayout::Nk || cfgs.iter().any(|c| c.b_layout != BLayout::Nk) {
        return Err(CudaError::Invalid(
            "gemm_fp8 takes B as N x K only (fp8 wgmma reads K-major operands)".into(),
        ));
    }
    let dev = open_hopper()?;
    let stream = Stream::new()?;
    let lt = CublasLt::new(&dev)?;
    let mut scales = Vec::new();
    for s in SCALES {
        let mut b = dev.alloc(4)?;
        b.upload(&[s])?;
        scales.push(b);
    }
    dev.synchronize()?;
    let run = Runner {
        bench: BenchRun {
            dev: &dev,
            stream: &stream,
            opts,
        },
        cfgs,
        kernels: RefCell::new(Vec::new()),
        lt: &lt,
        scales: [&scales[0], &scales[1]],
    };
    let total = opts.shapes.len();
    let (mut rows, mut fast) = (Vec::new(), Vec::new());
    for (i, &shape) in opts.shapes.iter().enumerate() {
        for (row, f) in run.rows(shape, opts.seed.wrapping_add(i as u64), true) {
            let fast_tf = f.as_ref().map_or(f64::NAN, |f| f.cublaslt_fast_tflops);
            let fast_ratio = f.as_ref().map_or(f64::NAN, |f| f.ratio);
            eprintln!(
                "  [{}/{total}] {:>18} {:>16}: ours {:7.1} TFLOP/s, cuBLASLt {:7.1} (fast accumulation {:7.1}), ratio {:.3} ({:.3}), err vs cuBLASLt {:.2e}, {} launches, {}",
                i + 1,
                ShapeName(shape).to_string(),
                row.tile.as_deref().unwrap_or("-"),
                row.ours_tflops,
                row.cublas_tflops,
                fast_tf,
                row.ratio,
                fast_ratio,
                row.rel_err_vs_cublas,
                row.iters,
                row.verdict()
            );
            rows.push(row);
            fast.extend(f);
        }
    }
    let mut checks = Vec::new();
    for (i, &shape) in opts.checks.iter().enumerate() {
        for (row, _) in run.rows(shape, opts.seed ^ (i as u64 + 77), false) {
            eprintln!(
                "  check {} {}: err vs cuBLASLt {:.2e}, vs f64 {:.2e} (cuBLASLt {:.2e}), {}",
                ShapeName(shape),
                row.tile.as_deref().unwrap_or("-"),
                row.rel_err_vs_cublas,
                row.spot_err_ours,
                row.spot_err_cublas,
                row.verdict()
            );
            checks.push(row);
        }
    }
    let summary = summarise(&rows, &checks);
    let kernels = run
        .kernels
        .borrow()
        .iter()
        .map(|((rows, cols, split, _, _), k)| KernelInfo {
            tile: format!(
                "{}/k{split}",
                HopperTile {
                    rows: *rows,
                    cols: *cols
                }
            ),
            entry: k.name.clone(),
            stages: k.stages,
            compile: k.compile.clone(),
        })
        .collect();
    Ok(Fp8BenchReport {
        gemm: GemmBenchReport {
            device: dev.name.clone(),
            compute_capability: dev.compute_capability,
            multiprocessors: dev.multiprocessors,
            l2_bytes: dev.l2_bytes,
            driver_version: dev.driver_version,
            cublas: lt.library.clone(),
            b_layout: BLayout::Nk,
            kernels,
            warmup: opts.warmup,
            budget_ms: opts.budget_ms,
            timing: opts.timing,
            rows,
            checks,
            summary,
        },
        scales: SCALES,
        fast_accum: fast,
    })
}

/// A compiled FP8 kernel's block height and width, K slices, ring stages and rows of A per block: every
/// field a run's configurations or shapes vary (a key without the stages or A's rows handed a row the
/// kernel compiled for another).
type KernelKey = (u32, u32, u32, u32, u32);

/// Our FP8 GEMM of a row: the registry's prepared call, or this benchmark's launcher of one
/// configuration.
enum Ours {
    Registry(DeviceCall),
    Launcher(Rc<GemmKernel>),
}

struct Runner<'a> {
    bench: BenchRun<'a>,
    /// The measured configurations; none: the registry's.
    cfgs: &'a [GemmConfig],
    /// The kernel per block height and K slice count (`cfg`'s own first), built on first use.
    kernels: RefCell<Vec<(KernelKey, Rc<GemmKernel>)>>,
    lt: &'a CublasLt,
    scales: [&'a DeviceBuffer; 2],
}

impl Runner<'_> {
    /// The rows of one shape (and, when timed, their fast-accumulation figures): the registry's, or
    /// one per measured configuration and K slice count, all on the same inputs; a configuration
    /// that cannot run becomes a row that says why, and the run goes on.
    fn rows(
        &self,
        shape: Shape,
        seed: u64,
        timed: bool,
    ) -> Vec<(GemmBenchRow, Option<FastAccumRow>)> {
        let (m, n, k) = shape;
        let mut chosen: Vec<Result<(GemmConfig, u32, Ours), CudaError>> = Vec::new();
        if self.cfgs.is_empty() {
            let mut p = GemmProblem::new(GemmKind::Fp8, m, n, k);
            p.run.sms = Some(self.bench.dev.multiprocessors);
            p.run.gpu = kittens_hw::gpu::for_device(&self.bench.dev.name);
            chosen.push(
                p.config(kittens_hw::Target::Sm90a)
                    .map_err(invalid)
                    .and_then(|cfg| Ok((cfg, cfg.split_k, self.registry_call(&p)?))),
            );
        }
        for base in self.cfgs {
            let cfg = self.config_for(base, shape);
            for split in self.splits_for(&cfg, shape) {
                chosen.push(
                    self.kernel(&cfg, split)
                        .map(|kern| (cfg, split, Ours::Launcher(kern))),
                );
            }
        }
        let inputs = self.inputs(shape, seed, timed);
        chosen
            .into_iter()
            .map(|c| {
                let (cfg, split, ours) = match c {
                    Ok(c) => c,
                    Err(e) => return (GemmBenchRow::error(shape, &e), None),
                };
                let (mut row, fast) = inputs
                    .as_ref()
                    .map_err(|e| CudaError::Invalid(e.to_string()))
                    .and_then(|inp| self.attempt(&ours, inp, shape, seed, timed))
                    .unwrap_or_else(|e| (GemmBenchRow::error(shape, &e), None));
                let tile = HopperTile {
                    rows: cfg.block_rows,
                    cols: cfg.block,
                };
                row.split_k = split;
                let name = if split > 1 {
                    format!("{tile}/k{split}")
                } else {
                    tile.to_string()
                };
                row.tile = Some(match ours {
                    Ours::Registry(_) => format!("{name} (registry)"),
                    Ours::Launcher(_) => name,
                });
                (row, fast)
            })
            .collect()
    }

    /// The registry's launches of `gemm_fp8` at `p` prepared on this run's device.
    fn registry_call(&self, p: &GemmProblem) -> Result<Ours, CudaError> {
        Ok(Ours::Registry(self.bench.registry_call("gemm_fp8", p)?))
    }

    /// The configuration for `shape`: the run's, with 64-row blocks for `M ≤ 64`
    /// (`GemmConfig::fp8_for_shape`) unless the run's blocks are narrower than 128 rows already.
    /// A 64-row block loads A in a box of M's rows (`GemmConfig::a_rows_for`) unless the run asks
    /// for all 64 (`a_rows` 64).
    fn config_for(&self, base: &GemmConfig, (m, _, _): Shape) -> GemmConfig {
        match kittens_hw::Target::Sm90a.gpu() {
            Some(gpu) if base.block_rows == 128 => GemmConfig::fp8_for_shape(*base, gpu, m as u64),
            _ if base.block_rows == 64 && base.a_rows == 0 => GemmConfig {
                a_rows: GemmConfig::a_rows_for(64, m as u64),
                ..*base
            },
            _ => *base,
        }
    }

    /// K slices for `shape` with configuration `c`: the option's counts, or `split_k::choose`'s for
    /// its block and K step (fp8: one byte per operand).
    fn splits_for(&self, c: &GemmConfig, (m, n, k): Shape) -> Vec<u32> {
        if !self.bench.opts.split_k.is_empty() {
            return self.bench.opts.split_k.clone();
        }
        let Some(gpu) = kittens_hw::Target::Sm90a.gpu() else {
            return vec![1];
        };
        let mut p = GemmProblem::new(GemmKind::Fp8, 1, 1, 1);
        p.run.gpu = kittens_hw::gpu::for_device(&self.bench.dev.name);
        vec![split_k::choose(
            &p.run.device_model(gpu),
            self.bench.dev.multiprocessors,
            (m as u64, n as u64, k as u64),
            (c.block_rows, c.block),
            c.k_step,
            1,
        )]
    }

    /// The kernel of configuration `base` with `split` K slices, built, lowered and loaded on first
    /// use.
    fn kernel(&self, base: &GemmConfig, split: u32) -> Result<Rc<GemmKernel>, CudaError> {
        let key = (base.block_rows, base.block, split, base.stages, base.a_rows);
        if let Some((_, k)) = self.kernels.borrow().iter().find(|(s, _)| *s == key) {
            return Ok(k.clone());
        }
        let cfg = GemmConfig {
            split_k: split,
            last_block_reduces: split > 1 && super::gemm_kernel::fixup_knob()?,
            ..*base
        };
        let tile = HopperTile {
            rows: cfg.block_rows,
            cols: cfg.block,
        };
        let k = kittens_kernels::gemm::build(&cfg)
            .map_err(|e| CudaError::Invalid(format!("gemm_fp8 {tile}/k{split}: {e}")))?;
        let lowered = kittens_codegen::lower(&k, kittens_hw::Target::Sm90a)
            .map_err(|e| CudaError::Invalid(format!("lowering gemm_fp8 {tile}/k{split}: {e}")))?;
        let kern = Rc::new(GemmKernel::load(
            self.bench.dev,
            lowered,
            tile,
            BLayout::Nk,
        )?);
        eprintln!(
            "  {} ({tile}/k{split}, {} stages): {} registers, {} spills",
            kern.name,
            kern.stages,
            kern.compile.registers,
            kern.compile.spill_stores + kern.compile.spill_loads,
        );
        self.kernels.borrow_mut().push((key, kern.clone()));
        Ok(kern)
    }

    /// The inputs of `shape` (copies enough to exceed the L2 when `timed`).
    fn inputs(&self, shape: Shape, seed: u64, timed: bool) -> Result<Inputs<u8>, CudaError> {
        // The limits count bf16 operands: twice the fp8 bytes, so the host and device need is an upper
        // bound, and twice the L2 multiple gives the fp8 copies the same span.
        let l2 = 2 * self.bench.opts.l2_multiple;
        let copies = copies_that_fit(self.bench.dev, "FP8 GEMM", shape, timed, l2, 0)?;
        make_inputs(self.bench.dev, shape, seed, copies, random_e4m3)
    }

    fn attempt(
        &self,
        kernel: &Ours,
        inp: &Inputs<u8>,
        shape: Shape,
        seed: u64,
        timed: bool,
    ) -> Result<(GemmBenchRow, Option<FastAccumRow>), CudaError> {
        if let Ours::Launcher(kernel) = kernel {
            kernel.check_shape(shape.0, shape.1, shape.2)?;
        }
        self.measure(kernel, inp, shape, seed, timed)
    }

    fn measure(
        &self,
        kernel: &Ours,
        inp: &Inputs<u8>,
        (m, n, k): (usize, usize, usize),
        seed: u64,
        timed: bool,
    ) -> Result<(GemmBenchRow, Option<FastAccumRow>), CudaError> {
        let (stream, lt) = (self.bench.stream, self.lt);
        let mut c_ours = self.bench.dev.alloc(m * n * 2)?;
        let mut c_ref = self.bench.dev.alloc(m * n * 2)?;
        let mut c_fast = self.bench.dev.alloc(m * n * 2)?;
        // NaN first: an element no launch writes fails the comparison.
        for c in [&mut c_ours, &mut c_ref, &mut c_fast] {
            c.fill_u16(0x7fc0)?;
        }
        self.bench.dev.synchronize()?;
        // The launcher's A, B and C maps per input copy (the prepared call keeps its own).
        let (maps, c_map) = match kernel {
            Ours::Launcher(kernel) => {
                let [ta, tb, _] = kernel.maps;
                let (ar, ac, br, bc) = (ta.box_rows, ta.box_cols, tb.box_rows, tb.box_cols);
                let maps = inp
                    .a
                    .iter()
                    .zip(&inp.b)
                    .map(|(da, db)| {
                        Ok((
                            TensorMap::fp8_2d(da, m as u64, k as u64, ar, ac, Swizzle::B128)?,
                            TensorMap::fp8_2d(db, n as u64, k as u64, br, bc, Swizzle::B128)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, CudaError>>()?;
                (maps, Some(self.c_map(kernel, &c_ours, m, n)?))
            }
            Ours::Registry(_) => (Vec::new(), None),
        };
        let c_pair = c_map.map(|map| (map, &c_ours));
        let c_ptr = c_ours.ptr();
        let ours = |i: usize| match (kernel, &c_pair) {
            (Ours::Launcher(kern), Some(c)) => {
                let s = i % maps.len();
                kern.launch_scaled(
                    stream,
                    &maps[s],
                    &inp.a[s],
                    &inp.b[s],
                    self.scales,
                    c,
                    m,
                    n,
                    k,
                )
            }
            (Ours::Registry(call), _) => {
                let s = i % inp.a.len();
                let at = [
                    ("a", inp.a[s].ptr()),
                    ("b", inp.b[s].ptr()),
                    ("scale_a", self.scales[0].ptr()),
                    ("scale_b", self.scales[1].ptr()),
                    ("c", c_ptr),
                ];
                // SAFETY: input copy `s`, the scales and C are live buffers of this run holding the
                // dense operands the call was prepared for, distinct from each other.
                unsafe { call.launch_with(stream, &at) }
            }
            (Ours::Launcher(_), None) => Err(invalid("the launcher without its C map")),
        };
        // A check-only shape cuBLASLt refuses (its FP8 alignment rules) is judged against f64 alone.
        let plan = match lt.plan_fp8(m, n, k, self.scales, Accumulation::Promoted) {
            Ok(p) => p,
            Err(e) if !timed => {
                return self.measure_alone(&ours, inp, &c_ours, (m, n, k), seed, &e)
            }
            Err(e) => return Err(e),
        };
        let plan_fast = lt.plan_fp8(m, n, k, self.scales, Accumulation::Fast)?;
        ours(0)?;
        lt.run(&plan, stream, &inp.a[0], &inp.b[0], &mut c_ref)?;
        lt.run(&plan_fast, stream, &inp.a[0], &inp.b[0], &mut c_fast)?;
        stream.synchronize()?;
        let mut host = [vec![0u16; m * n], vec![0u16; m * n], vec![0u16; m * n]];
        c_ours.download(&mut host[0])?;
        c_ref.download(&mut host[1])?;
        c_fast.download(&mut host[2])?;
        let cmp = compare(&host[0], &host[1]);
        let fast_vs_default = compare(&host[2], &host[1]).rel_frobenius;
        let (spot_ours, spot_ref, _) =
            spot_check(inp, &host[0], &host[1], (m, n, k), self.bench.opts, seed);
        let (_, spot_fast, _) =
            spot_check(inp, &host[0], &host[2], (m, n, k), self.bench.opts, seed);
        let differing = host[0].iter().zip(&host[2]).filter(|(x, y)| x != y).count();

        let (times, iters) = if timed {
            let copies = inp.a.len();
            // Launches as many as fit the time budget, estimated from one cuBLASLt launch.
            let est = {
                let (e0, e1) = (Event::new()?, Event::new()?);
                e0.record(stream)?;
                lt.run(&plan, stream, &inp.a[0], &inp.b[0], &mut c_ref)?;
                e1.record(stream)?;
                stream.synchronize()?;
                f64::from(e0.elapsed_ms(&e1)?)
            };
            let o = self.bench.opts;
            let iters = iterations(est, o.budget_ms, o.min_iters, o.iters);
            let mut f0 = ours;
            let mut f1 = |i: usize| {
                lt.run(
                    &plan,
                    stream,
                    &inp.a[i % copies],
                    &inp.b[i % copies],
                    &mut c_ref,
                )
            };
            let mut f2 = |i: usize| {
                let s = i % copies;
                lt.run(&plan_fast, stream, &inp.a[s], &inp.b[s], &mut c_fast)
            };
            let mut fs: [Launch<'_>; 3] = [&mut f0, &mut f1, &mut f2];
            let t = time_launches(stream, o.warmup.min(iters), iters, o.timing, &mut fs)?;
            (t, iters)
        } else {
            (vec![f64::NAN; 3], 0)
        };
        let (ours_ms, ref_ms, fast_ms) = (times[0], times[1], times[2]);
        let flop = 2.0 * m as f64 * n as f64 * k as f64;
        let tf = |ms: f64| flop / ms * 1e-9;
        let passed = cmp.non_finite == 0
            && cmp.rel_frobenius < TOLERANCE
            && check_rule(spot_ours, spot_ref, SPOT_RULE_FLOOR).passed;
        let row = GemmBenchRow {
            status: if passed {
                RowStatus::Ok
            } else {
                RowStatus::Failed
            },
            error: None,
            m,
            n,
            k,
            tile: None,
            split_k: 1,
            chosen: true,
            model_us: f64::NAN,
            padded: PadPlan::default(),
            pad_ms: f64::NAN,
            ours_ms,
            cublas_ms: ref_ms,
            ours_tflops: tf(ours_ms),
            cublas_tflops: tf(ref_ms),
            ratio: ref_ms / ours_ms,
            iters,
            rel_err_vs_cublas: cmp.rel_frobenius,
            max_err_vs_cublas: cmp.max_rel,
            spot_err_ours: spot_ours,
            spot_err_cublas: spot_ref,
            non_finite: cmp.non_finite,
            input_copies: inp.a.len(),
            passed,
        };
        let fast = timed.then(|| FastAccumRow {
            m,
            n,
            k,
            cublaslt_fast_ms: fast_ms,
            cublaslt_fast_tflops: tf(fast_ms),
            ratio: fast_ms / ours_ms,
            rel_err_vs_default: fast_vs_default,
            differing_from_ours: differing,
            spot_err: spot_fast,
        });
        Ok((row, fast))
    }

    /// C's bf16 tensor map in the boxes of the lowering's store.
    fn c_map<'b>(
        &self,
        kernel: &GemmKernel,
        c: &'b DeviceBuffer,
        m: usize,
        n: usize,
    ) -> Result<TensorMap<'b>, CudaError> {
        let tc = kernel.maps[2];
        let sw = Swizzle::from_bytes(tc.swizzle_bytes)?;
        TensorMap::bf16_2d(c, m as u64, n as u64, tc.box_rows, tc.box_cols, sw)
    }

    /// A check-only shape without cuBLASLt: ours against f64, with the error of the f64 result
    /// rounded to bf16 (the best a bf16 output can do) as the rule's baseline; `why` says so in the
    /// row.
    fn measure_alone(
        &self,
        launch: &dyn Fn(usize) -> Result<(), CudaError>,
        inp: &Inputs<u8>,
        c_ours: &DeviceBuffer,
        (m, n, k): (usize, usize, usize),
        seed: u64,
        why: &CudaError,
    ) -> Result<(GemmBenchRow, Option<FastAccumRow>), CudaError> {
        launch(0)?; // into C poisoned with NaN by the caller
        self.bench.stream.synchronize()?;
        let mut ours = vec![0u16; m * n];
        c_ours.download(&mut ours)?;
        let non_finite = ours
            .iter()
            .filter(|&&h| !bf16_to_f32(h).is_finite())
            .count();
        let (spot_ours, _, rounding) =
            spot_check(inp, &ours, &ours, (m, n, k), self.bench.opts, seed);
        let passed = non_finite == 0 && check_rule(spot_ours, rounding, SPOT_RULE_FLOOR).passed;
        let mut row = GemmBenchRow::error((m, n, k), why);
        row.error = Some(format!(
            "cuBLASLt refused the shape ({why}); judged against f64 alone"
        ));
        row.status = if passed {
            RowStatus::Ok
        } else {
            RowStatus::Failed
        };
        (row.spot_err_ours, row.spot_err_cublas) = (spot_ours, rounding);
        (row.non_finite, row.input_copies, row.passed) = (non_finite, 1, passed);
        Ok((row, None))
    }
}

/// f64 dot products of the fp8 inputs, times both scales, at `opts.spot_checks` random entries;
/// returns (ours, cuBLASLt, the f64 result rounded to bf16) as max |x − ref| / rms(ref).
fn spot_check(
    inp: &Inputs<u8>,
    ours: &[u16],
    reference: &[u16],
    (m, n, k): (usize, usize, usize),
    opts: &GemmBenchOptions,
    seed: u64,
) -> (f64, f64, f64) {
    let table = e4m3_table();
    let scale = SCALES[0] as f64 * SCALES[1] as f64;
    let mut x = seed | 1;
    let mut next = |bound: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % bound as u64) as usize
    };
    let count = opts.spot_checks.max(1);
    let (mut e_ours, mut e_ref, mut e_round, mut sum2) = (0f64, 0f64, 0f64, 0f64);
    for _ in 0..count {
        let (i, j) = (next(m), next(n));
        let (ra, rb) = (
            &inp.a_host[i * k..(i + 1) * k],
            &inp.b_host[j * k..(j + 1) * k],
        );
        let dot: f64 = ra
            .iter()
            .zip(rb)
            .map(|(&p, &q)| table[p as usize] * table[q as usize])
            .sum();
        let exact = scale * dot;
        sum2 += exact * exact;
        e_round = e_round.max((bf16_to_f32(f32_to_bf16(exact as f32)) as f64 - exact).abs());
        let o = bf16_to_f32(ours[i * n + j]) as f64;
        let r = bf16_to_f32(reference[i * n + j]) as f64;
        e_ours = if o.is_finite() {
            e_ours.max((o - exact).abs())
        } else {
            f64::INFINITY
        };
        e_ref = if r.is_finite() {
            e_ref.max((r - exact).abs())
        } else {
            f64::INFINITY
        };
    }
    let rms = (sum2 / count as f64).sqrt().max(f64::MIN_POSITIVE);
    (e_ours / rms, e_ref / rms, e_round / rms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated inputs are e4m3 values of the intended range, rounded (not truncated): their
    /// mean is near 0 and their variance near that of uniform [-2, 2) (4/3), and no NaN pattern occurs.
    #[test]
    fn random_e4m3_inputs_cover_the_range() {
        let v = random_e4m3(200_000, 3);
        let t = e4m3_table();
        assert!(v.iter().all(|&b| b & 0x7f != 0x7f), "no NaN pattern");
        let f: Vec<f64> = v.iter().map(|&b| t[b as usize]).collect();
        assert!(f.iter().all(|x| (-2.0..=2.0).contains(x)));
        let mean = f.iter().sum::<f64>() / f.len() as f64;
        let var = f.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f.len() as f64;
        assert!(
            mean.abs() < 0.02 && (var - 4.0 / 3.0).abs() < 0.03,
            "mean {mean} var {var}"
        );
        // Values below 2^-6 are e4m3 subnormals: some of them occur (|x| < 1/64 is 1/256 of the range).
        assert!(f.iter().any(|x| x.abs() < 1.0 / 64.0 && *x != 0.0));
    }

    /// The table decodes the OCP e4m3 extremes: 448 the largest finite value, 2^-9 the smallest
    /// subnormal, 0x7f NaN.
    #[test]
    fn e4m3_table_extremes() {
        let t = e4m3_table();
        assert_eq!(t[0x7e], 448.0);
        assert_eq!(t[0xfe], -448.0);
        assert_eq!(t[0x01], 2f64.powi(-9));
        assert!(t[0x7f].is_nan());
        assert_eq!(t[0x38], 1.0);
    }
}
